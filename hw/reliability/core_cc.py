"""The reliability core's congestion-window states, CC to CC_SET (the datapath is
``CwndUnit``, hw/reliability/cwnd.py), and its congestion-control events
(``cc_event``, for ``NsccPath``). Builders of ``ReliabilityCore``
(hw/reliability/core_ctx.py)."""

from amaranth.hdl import Mux, Signal

from .core_layouts import CcEvent, GlobalParams
from .cwnd import CwndUnit
from .layouts import CqeStatus
from .nscc import NsccKind


def cwnd_states(ctx):
    """CC to CC_SET: the congestion window's step."""
    m, st, P, W, now_ts, cur, newly = ctx.m, ctx.st, ctx.P, ctx.W, ctx.now_ts, ctx.cur, ctx.newly
    rtt_ts, rtt_valid, nak_cut, a_ece = ctx.rtt_ts, ctx.rtt_valid, ctx.nak_cut, ctx.a_ece
    fsm, progress, a_fatal, count = ctx.fsm, ctx.progress, ctx.a_fatal, ctx.count
    want_arm, want_disarm, flush_status = ctx.want_arm, ctx.want_disarm, ctx.flush_status
    a_inv, una0, cwnd_chg, cwnd0 = ctx.a_inv, ctx.una0, ctx.cwnd_chg, ctx.cwnd0

    # ---- congestion window ---------------------------------------------------------
    # over six cycles (hw/reliability/cwnd.py, CwndUnit): CC starts the step from
    # the working copy (RTT and recovery tests, the trimmed window), CC_STEP and
    # CC_SUM wait for its stages, CC_NEW writes the accumulator and the decrease's
    # state and registers the new window, CC_CLAMP waits for its bounds, CC_SET
    # writes it (with the change flag: CC_SET is the path's SETTLE). The fields the
    # unit reads hold from CC to CC_NEW; the RTT is measured 2 cycles before CC.
    m.submodules.cwnd = cwnd = CwndUnit(window=W, layout=GlobalParams)
    # an RTT sample, unless the ACK's service time saturated (that or longer: none)
    sample_ok = Signal()
    m.d.comb += sample_ok.eq(rtt_valid & ~ctx.a_svc_sat)
    m.d.comb += [
        cwnd.params.eq(P), cwnd.now_ts.eq(now_ts),
        cwnd.cwnd.eq(cur.cwnd), cwnd.cwnd_acc.eq(cur.cwnd_acc),
        cwnd.md_active.eq(cur.md_active), cwnd.md_recover.eq(cur.md_recover),
        cwnd.una.eq(cur.una), cwnd.delay_high.eq(cur.delay_high), cwnd.newly.eq(newly),
        cwnd.rtt_ts.eq(rtt_ts), cwnd.svc.eq(ctx.a_svc),
        cwnd.rtt_valid.eq(sample_ok), cwnd.nak_cut.eq(nak_cut),
        cwnd.ece.eq(a_ece),
        cwnd.start.eq(st.CC), cwnd.update.eq(st.CC_NEW),
        cwnd.init.eq(st.LOAD),  # cwnd_init for a command's RTS entry
    ]
    # the clamped window: valid in CC_SET (CC_NEW two cycles before) and in CMD
    # (LOAD, before CMD_DEC)
    cwnd_clamped = cwnd.new_cwnd
    cwnd_floor = cwnd.cwnd_floor
    # registered every cycle: valid in CC (PICK and USE of the loss walk before it
    # leave una and nxt as they are)
    unacked = Signal()
    m.d.sync += unacked.eq(cur.nxt != cur.una)
    with fsm.State("CC"):
        m.d.sync += cur.delay_high.eq(cwnd.high)
        with m.If(~progress & ~nak_cut & ~a_ece & ~a_fatal):
            count("acks_stale")
        with m.If(progress):
            m.d.sync += cur.retries.eq(0)
            with m.If(unacked):
                m.d.sync += want_arm.eq(1)
            with m.Else():
                m.d.sync += want_disarm.eq(1)
        with m.If(a_fatal):
            # a NAK 0x61/0x62 (verbs: the responder refused the request): the
            # WQEs its cumulative PSN and SACK bitmap completed have completed
            # (in USE); the oldest other one completes with the error, the rest
            # FLUSHED, and the QP goes to ERROR (FLUSH_WAIT: wqe_cpl settles).
            # una goes back to LOAD's and FINAL's ack_update enable excludes a
            # fatal NAK, so TX gets no ack_update that could open its window
            # before the qp_state_update stops the QP.
            count("naks_fatal")
            m.d.sync += [flush_status.eq(Mux(a_inv, CqeStatus.REM_INV_REQ,
                                             CqeStatus.REM_ACCESS)),
                         cur.una.eq(una0), want_arm.eq(0)]
            fsm.next = "FLUSH_WAIT"
        with m.Else():
            fsm.next = "CC_STEP"

    with fsm.State("CC_STEP"):
        fsm.next = "CC_SUM"

    with fsm.State("CC_SUM"):
        fsm.next = "CC_NEW"

    with fsm.State("CC_NEW"):
        m.d.sync += cur.cwnd_acc.eq(cwnd.new_acc)
        with m.If(cwnd.md_start):
            m.d.sync += [cur.md_active.eq(1), cur.md_recover.eq(cur.nxt)]
        with m.If(cwnd.md_end):
            m.d.sync += cur.md_active.eq(0)
        fsm.next = "CC_CLAMP"

    with fsm.State("CC_CLAMP"):  # the window's bounds registered
        fsm.next = "CC_SET"

    with fsm.State("CC_SET"):  # SETTLE for the window: its change flag set here
        m.d.sync += [cur.cwnd.eq(cwnd_clamped), cwnd_chg.eq(cwnd_clamped != cwnd0)]
        # a refused WQE waiting for the PSNs before it: none left in flight now
        with m.If(cur.op_err & ~unacked):
            m.d.sync += flush_status.eq(CqeStatus.LOC_QP_OP_ERR)
            fsm.next = "OP_ERR"
        with m.Else():
            fsm.next = "FINAL"
    # the RTT sample less the ACK's service time, not below 0: registered every
    # cycle from the unit's (valid in CC)
    rtt_net = Signal(16)
    m.d.sync += rtt_net.eq(Mux(cwnd.rtt >= ctx.a_svc, cwnd.rtt - ctx.a_svc, 0))
    ctx.export(cwnd_clamped=cwnd_clamped, cwnd_floor=cwnd_floor, rtt_net=rtt_net,
               sample_ok=sample_ok)


def cc_events(ctx):
    """The congestion-control event of the event being processed (``cc_event``): set
    in CC (an ACK: not a fatal NAK, which flushes), TIMEOUT (acted on, not retry
    exhaustion) and CMD's RTS entry; pushed in FINAL's write, cleared in IDLE. An
    event that ends elsewhere (a fatal NAK, an exhausted QP's flush) pushes none."""
    m, st, f_cc, q, now_ts = ctx.m, ctx.st, ctx.f_cc, ctx.q, ctx.now_ts
    nak_cut, a_ece, a_fatal = ctx.nak_cut, ctx.a_ece, ctx.a_fatal
    newly, tmo_stale, tmo_exhaust, rts_go = ctx.newly, ctx.tmo_stale, ctx.tmo_exhaust, ctx.rts_go

    go = Signal()
    rec = Signal(CcEvent(ctx.nq, ctx.W))
    m.d.comb += [f_cc.w_data.eq(rec), f_cc.w_en.eq(st.FINAL & ctx.room_final & go)]
    with m.If(st.IDLE):
        m.d.sync += go.eq(0)

    def start(kind, **fields):
        m.d.sync += [go.eq(1), rec.qpn.eq(q), rec.kind.eq(kind), rec.now.eq(now_ts)]
        m.d.sync += [rec[f].eq(fields.get(f, 0)) for f in ("trim", "newly", "ece", "rtt_valid",
                                                              "rtt")]

    with m.If(st.CC & ~a_fatal):
        start(NsccKind.ACK, trim=nak_cut, newly=newly, ece=a_ece,
              rtt_valid=ctx.sample_ok, rtt=ctx.rtt_net)
    with m.If(st.TIMEOUT & ~tmo_stale & ~tmo_exhaust):
        start(NsccKind.TIMEOUT)
    with m.If(rts_go):
        start(NsccKind.START)

"""The reliability core's event intake and write back: CLEAR, IDLE, ACK_IN, LOAD,
SENT; SETTLE, FINAL. Builders of ``ReliabilityCore`` (hw/reliability/core_ctx.py)."""

from amaranth.hdl import Cat, Mux, Signal

from hw.pipeline import load_in_groups
from hw.protocol import PSN_BITS

from .core_layouts import (
    EXP_FOREVER,
    K_ACK,
    K_CMD,
    K_DB,
    K_PROBE,
    K_SENT,
    K_SWEEP,
    K_TMO,
    T_ACK,
    T_CMD,
    T_DB,
    T_SENT,
    T_SWEEP,
    T_TMO,
)
from .layouts import (
    AETH_ACK,
    NAK_INVALID_REQUEST,
    NAK_REMOTE_ACCESS,
    NAK_TRIMMED,
    CqeStatus,
    QpState,
)

# the state each kind of event starts in, after LOAD
_FIRST_STATE = {K_SENT: "SENT", K_ACK: "ACK", K_PROBE: "PROBE_RESP", K_TMO: "TIMEOUT",
                K_CMD: "CMD_DEC", K_SWEEP: "SWEEP", K_DB: "DOORBELL"}


def intake_states(ctx):
    """CLEAR, IDLE, ACK_IN, LOAD and SENT: the event taken and its QP's record read."""
    m, core, s, q, count, fsm, arm_v = ctx.m, ctx.core, ctx.s, ctx.q, ctx.count, ctx.fsm, ctx.arm_v
    sq_pi, sq_pi_wr, nq, take, inputs = ctx.sq_pi, ctx.sq_pi_wr, ctx.nq, ctx.take, ctx.inputs
    rd_q, want_arm, want_disarm = ctx.rd_q, ctx.want_arm, ctx.want_disarm
    progress, nak_cut, newly, rtt_valid = ctx.progress, ctx.nak_cut, ctx.newly, ctx.rtt_valid
    ack, a_use, ack_ok, is_ack, a_probe = ctx.ack, ctx.a_use, ctx.ack_ok, ctx.is_ack, ctx.a_probe
    is_probe, start, kind, sent_ok_q = ctx.is_probe, ctx.start, ctx.kind, ctx.sent_ok_q
    sent_d, W, sweep, db_take, cmd = ctx.sent_d, ctx.W, ctx.sweep, ctx.db_take, ctx.cmd
    t_gen, ev_idx, ebits, a_trim, a_psn = ctx.t_gen, ctx.ev_idx, ctx.ebits, ctx.a_trim, ctx.a_psn
    a_fatal, a_inv, a_cum, a_base, a_ece = ctx.a_fatal, ctx.a_inv, ctx.a_cum, ctx.a_base, ctx.a_ece
    a_bitmap, a_probe_id, a_probe_ev = ctx.a_bitmap, ctx.a_probe_id, ctx.a_probe_ev
    a_rtt = ctx.a_rtt
    rec_rd_data, tmo_stale, tmo_exhaust = ctx.rec_rd_data, ctx.tmo_stale, ctx.tmo_exhaust
    sent_new, infl, sent_operr, sent_moves = ctx.sent_new, ctx.infl, ctx.sent_operr, ctx.sent_moves
    cur, cfg, una0, cwnd0, state0 = ctx.cur, ctx.cfg, ctx.una0, ctx.cwnd0, ctx.state0
    sq_pi_rd, pi_ahead, sent_ahead, wbits = ctx.sq_pi_rd, ctx.pi_ahead, ctx.sent_ahead, ctx.wbits
    flush_status = ctx.flush_status

    # after reset: every QP record to RESET, every timer disarmed; q counts the QPs
    # and the working copy holds its reset value (the RESET record, timer disarmed)
    with fsm.State("CLEAR"):
        m.d.comb += [
            arm_v.eq(1),
            sq_pi_wr.addr.eq(q), sq_pi_wr.data.eq(0), sq_pi_wr.en.eq(1),
        ]
        m.d.sync += q.eq(q + 1)
        with m.If(q == nq - 1):
            fsm.next = "IDLE"

    # IDLE takes the input chosen in the cycle before (take); the registers of all
    # the inputs load in every IDLE cycle (copies of the state flip-flop are their
    # enables: load_in_groups below), as nothing reads them in IDLE; q takes the QP read (rd_q),
    # the ACK's too. The inputs' readies come from a copy of IDLE's flip-flop of
    # their own: they are the enables of the input stages' registers, hundreds of
    # flip-flops outside.
    ready_idle = fsm.copy("IDLE", "ready")
    m.d.comb += [i.ready.eq(ready_idle & take[k]) for k, i in enumerate(inputs)]
    with fsm.State("IDLE"):
        m.d.sync += [want_arm.eq(0), want_disarm.eq(0), progress.eq(0), nak_cut.eq(0),
                     newly.eq(0), rtt_valid.eq(0), q.eq(rd_q)]
        syn = ack.aeth.syndrome
        known_syndrome = ((syn == AETH_ACK) | (syn == NAK_TRIMMED)
                          | (syn == NAK_INVALID_REQUEST) | (syn == NAK_REMOTE_ACCESS))
        m.d.sync += [a_use.eq(ack_ok & is_ack & known_syndrome),
                     a_probe.eq(ack_ok & is_probe)]
        with fsm.OneOf() as when:  # take is one-hot (or 0)
            with when(take[T_CMD]):
                start(K_CMD)
            with when(take[T_SENT]):
                # the kind is taken whatever the QP, so that it does not wait for
                # the range check
                m.d.sync += kind.eq(K_SENT)
                with m.If(sent_ok_q):
                    fsm.next = "LOAD"
                with m.Else():
                    count("sent_dropped")
            with when(take[T_ACK]):
                fsm.next = "ACK_IN"
            with when(take[T_TMO]):
                start(K_TMO)
            with when(take[T_SWEEP]):
                m.d.comb += sweep.taken.eq(1)
                start(K_SWEEP)
            with when(take[T_DB]):
                m.d.comb += db_take.eq(1)
                start(K_DB)

    load_in_groups(m, [
        (cmd, core.cmd.payload), (s, core.sent.payload), (t_gen, core.expired.payload.gen),
        (ev_idx, Mux(take[T_CMD], core.cmd.payload.ev_index, ack.probe.probe_id[:ebits])),
        (a_trim, ack.aeth.syndrome == NAK_TRIMMED), (a_psn, ack.bth.psn),
        (a_fatal, (ack.aeth.syndrome == NAK_INVALID_REQUEST)
         | (ack.aeth.syndrome == NAK_REMOTE_ACCESS)),
        (a_inv, ack.aeth.syndrome == NAK_INVALID_REQUEST),
        (a_cum, ack.sack.cum_psn), (a_base, ack.sack.sack_base), (a_ece, ack.sack.ece),
        (ctx.a_svc_wire, Cat(ack.sack.svc_lo, ack.sack.svc_hi)),
        (a_bitmap, ack.sack_bitmap), (a_probe_id, ack.probe.probe_id),
        (a_probe_ev, ack.probe.ev), (a_rtt, core.probe_rtt_ns),
    ], lambda k: fsm.copy("IDLE", k))

    with fsm.State("ACK_IN"):  # the record's kind, from registers
        with m.If(a_use):
            start(K_ACK)
        with m.Elif(a_probe):
            start(K_PROBE)
        with m.Else():
            count("acks_ignored")
            fsm.next = "IDLE"

    # registered in LOAD: a refused WQE completes at once in SENT (which follows
    # LOAD), the QP being fresh or having nothing in flight; a flip-flop, not a
    # compare of infl, in front of flush_status and the state's next value
    operr_now = Signal()
    with fsm.State("LOAD"):
        r = rec_rd_data
        r_span = (r.nxt - r.una)[:PSN_BITS]
        rc = core.rel_data
        # this timeout exceeds the limit when the retries already taken (at most
        # linear_cnt + exp_cnt <= 31, the count's saturation) reach it; exp_cnt
        # 25..31 retries forever
        limit = rc.linear_cnt + rc.exp_cnt
        m.d.sync += [
            tmo_stale.eq((r.state != QpState.RTS) | ~r.armed | (r.timer_gen != t_gen)),
            tmo_exhaust.eq((rc.exp_cnt < EXP_FOREVER) & (limit <= r.retries)),
            sent_new.eq((r.state == QpState.RTS) & ~s.retx & ~s.op_err
                        & (r.fresh | ((s.psn == r.nxt) & (r_span[: len(infl)] < W)))),
            sent_operr.eq((r.state == QpState.RTS) & s.op_err),
            operr_now.eq(r.fresh | (r_span[: len(infl)] == 0)),
            sent_moves.eq(s.psn != r.una),
        ]
        with m.Switch(kind):
            for k, first_state in _FIRST_STATE.items():
                with m.Case(k):
                    fsm.next = first_state

    load_in_groups(m, [
        (cur, rec_rd_data), (cfg, core.rel_data), (una0, rec_rd_data.una),
        (cwnd0, rec_rd_data.cwnd), (state0, rec_rd_data.state),
        (sq_pi, sq_pi_rd.data),
        (pi_ahead, sq_pi_rd.data[:16] - rec_rd_data.wqe_cpl),
        (sent_ahead, rec_rd_data.wqe_sent - rec_rd_data.wqe_cpl),
        (sent_d, s.psn - rec_rd_data.una), (infl, r_span[: wbits + 1]),
    ], lambda k: fsm.copy("LOAD", k), bits=40)  # cur's bits have selects in other states too

    # ---- a data packet went on the wire --------------------------------------
    with fsm.State("SENT"):  # actions: core_walk.py sent_and_use_actions, under st.SENT
        with m.If(sent_operr):
            # TX refused WQE wqe_index (it sends nothing more from the QP): it is
            # TX's last WQE begun; with nothing in flight every WQE before it has
            # completed, so it completes now, else once the last PSN is ACKed
            # (CC_SET)
            m.d.sync += cur.wqe_sent.eq(s.wqe_index + 1)
            with m.If(cur.fresh):
                m.d.sync += cur.wqe_cpl.eq(s.wqe_index)
            with m.If(operr_now):
                m.d.sync += flush_status.eq(CqeStatus.LOC_QP_OP_ERR)
                fsm.next = "OP_ERR"
            with m.Else():
                m.d.sync += cur.op_err.eq(1)
                fsm.next = "FINAL"
        with m.Elif(sent_new):
            fsm.next = "FINAL"
        with m.Else():
            fsm.next = "IDLE"


def write_back_states(ctx):
    """SETTLE and FINAL: the write back."""
    m, fsm, room_final, arm_v, want_arm = ctx.m, ctx.fsm, ctx.room_final, ctx.arm_v, ctx.want_arm
    want_disarm, f_ack, una_chg, f_cwnd = ctx.want_disarm, ctx.f_ack, ctx.una_chg, ctx.f_cwnd
    cwnd_chg, f_qps, state_chg, progress = ctx.cwnd_chg, ctx.f_qps, ctx.state_chg, ctx.progress
    a_fatal = ctx.a_fatal

    # ---- write back ------------------------------------------------------------------
    with fsm.State("SETTLE"):
        fsm.next = "FINAL"
    with fsm.State("FINAL"):
        with m.If(room_final):
            m.d.comb += [arm_v.eq(want_arm | want_disarm),
                         # sacked_n moves only with progress (an advance or a new
                         # SACK bit); a fatal NAK sends none (CC)
                         f_ack.w_en.eq(una_chg | (progress & ~a_fatal)),
                         f_cwnd.w_en.eq(cwnd_chg),
                         f_qps.w_en.eq(state_chg)]
            fsm.next = "IDLE"

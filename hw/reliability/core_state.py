"""The reliability core's working state (the working copy of the QP's record, the
event's registers) and its one-hot state machine with the record's write enables and the
walk's strobes. Builders of ``ReliabilityCore`` (hw/reliability/core_ctx.py)."""

from amaranth.hdl import Cat, Const, Mux, Signal
from amaranth.lib import wiring

from hw.bits import all_below
from hw.pipeline import OneHotFSM
from hw.protocol import PSN_BITS, SVC_TIME_BITS, SVC_TIME_MAX

from .cc_defaults import SVC_SCALE_SHIFT
from .core_layouts import GEN_BITS, RTT_SHIFT, Command, RelConfig
from .deadline import TimerDeadline
from .layouts import SentRecord
from .probe_sweep import ProbeSweep
from .registers import RTT_NS_BITS
from .sent_psns import SentPsns


def working_state(ctx):
    """The working copy of the QP's record and the event's registers, with the blocks that read
    them (probe rounds, per-PSN entries, timer deadlines)."""
    m, core, E, Rec, nq, W, wbits = ctx.m, ctx.core, ctx.E, ctx.Rec, ctx.nq, ctx.W, ctx.wbits

    # --- working state ------------------------------------------------------------
    # reset to the record CLEAR writes, so that the write port always takes ``out``
    cur = Signal(Rec, init={"fresh": 1})
    cfg = Signal(RelConfig)
    q = Signal(range(nq))
    una0 = Signal(PSN_BITS)
    cwnd0 = Signal(16)
    state0 = Signal(3)
    # the end of a flush: the producer index, but never before wqe_sent (also the
    # first WQE index of a QP entering RTS). Over two cycles: LOAD registers the
    # producer index (sq_pi) and the distances of it and of wqe_sent from wqe_cpl
    # (pi_ahead, sent_ahead: subtractions behind the read registers), the cycle
    # after it registers their compare and the choice (sq_end, then registered
    # every cycle from them and wqe_sent): valid from the second cycle after LOAD
    # on, which its readers (FLUSH, CMD) are
    sq_end = Signal(16)
    sq_pi = Signal(17)
    pi_ahead = Signal(16)
    sent_ahead = Signal(16)

    kind = Signal(3)
    s = Signal(SentRecord)
    a_trim = Signal()  # syndrome NAK TRIMMED
    # syndrome NAK invalid request or remote access error: the ACK's part is
    # taken, then the QP goes to ERROR (a_inv: invalid request)
    a_fatal = Signal()
    a_inv = Signal()
    a_use = Signal()  # an ACK or NAK TRIMMED of a valid QP
    a_probe = Signal()  # a probe response of a valid QP
    a_psn = Signal(PSN_BITS)
    a_cum = Signal(PSN_BITS)  # cum_psn
    a_cum_next = Signal(PSN_BITS)  # cum_psn + 1, registered every cycle (valid from ACK_IN on)
    m.d.sync += a_cum_next.eq(a_cum + 1)
    a_base = Signal(PSN_BITS)
    a_ece = Signal()
    # the ACK's service time: as it came (64 ns units), then in RTT units (rounded
    # down) and whether it saturated, registered every cycle (valid from 2 cycles
    # after ACK_IN)
    a_svc_wire = Signal(SVC_TIME_BITS)
    a_svc = Signal(16)
    a_svc_sat = Signal()
    m.d.sync += [a_svc.eq((a_svc_wire * core.svc_scale)[SVC_SCALE_SHIFT:]),
                 a_svc_sat.eq(a_svc_wire == SVC_TIME_MAX)]
    a_bitmap = Signal(core.sack_bits)
    a_probe_id = Signal(32)
    a_probe_ev = Signal(16)
    a_rtt = Signal(RTT_NS_BITS)
    t_gen = Signal(GEN_BITS)
    cmd = Signal(Command(nq, E))

    # the walk's kind, one-hot (bit W_ADV .. W_TMO): each kind's actions sit under
    # their bit alone (an If per bit, not a Switch, whose cases would decode all
    # four bits by priority), so the selects in front of cur are ANDs of flip-flops
    walk_kind = Signal(4)
    walk_mask = Signal(W)
    walk_psn = Signal(PSN_BITS)  # the PSN in use, una + its offset (set in PICK)
    blamed = Signal()  # the timeout walk is past its first PSN
    adv = Signal(range(W + 1))
    adv_raw = Signal(PSN_BITS)  # cum_psn + 1 - una
    # the loss walk's test (LCNT): at least sack_threshold SACKed PSNs above the
    # hole, compared on the low bits of the threshold that can hold a count of W (a
    # threshold with a higher bit set, thr_high, registered every cycle from cfg, is
    # never met)
    loss_hole = Signal()
    thr_high = Signal()
    m.d.sync += thr_high.eq(cfg.sack_threshold[(W + 1).bit_length():] != 0)
    # the sent record against the record as read (LOAD): a new PSN to record (RTS,
    # not a retransmission, fresh or psn == nxt with nxt - una < window; fresh: una
    # = nxt = psn), psn - una (sent_d) and psn != una (sent_moves: una moves).
    # nxt - una is tested on its low bits, those infl takes (a subtraction of that
    # width, no zero test of the bits above): in RTS, not fresh, it is at most the
    # window (una never passes nxt, an ACK beyond nxt is dropped; nxt moves only
    # from below una + window; RTS is entered with una = nxt), so the bits above
    # are 0.
    sent_new = Signal()
    sent_moves = Signal()
    sent_operr = Signal()  # a record of a WQE TX refused, for a QP in RTS
    # a timer report against the record as read (LOAD): stale (not RTS, disarmed or
    # another generation), or the retry that exceeds the limit
    tmo_stale = Signal()
    tmo_exhaust = Signal()
    # what FINAL reports to TX, registered every cycle (core_datapath.py, FINAL)
    una_chg = Signal()
    cwnd_chg = Signal()
    state_chg = Signal()
    sent_d = Signal(PSN_BITS)
    newly = Signal(range(W + 1))
    rtt_ts = Signal(16)
    rtt_valid = Signal()
    progress = Signal()
    nak_cut = Signal()
    want_arm = Signal()
    want_disarm = Signal()
    flush_status = Signal(8)
    # probe rounds: the round's number, the QP to sweep next (hw/reliability/
    # probe_sweep.py)
    m.submodules.sweep = sweep = ProbeSweep(num_qps=nq, evs=E)
    sweep_pending = sweep.pending
    m.d.comb += [sweep.tick.eq(core.probe_tick),
                 core.probe_round.eq(sweep.round), core.probe_sweeping.eq(sweep.sweeping)]

    now = core.now
    now_ts = now[RTT_SHIFT : RTT_SHIFT + 16]

    # --- derived from the working copy ---------------------------------------------
    # nxt - una: set in LOAD, kept up to date when una advances
    infl = Signal(range(W + 1))
    infl_mask = Signal(W)
    m.d.comb += infl_mask.eq(all_below(infl, W))

    # per PSN: the EV it last went out on, whether that was a retransmission, whether
    # it ends its WQE and its send time (hw/reliability/sent_psns.py)
    m.submodules.sent_psns = sent_psns = SentPsns(num_qps=nq, window=W, evs=E)

    def slot(off):
        # an adder of wbits bits of its own (the sum's low bits; not the low bits of
        # walk_psn's una + pick_off, which synthesis would share), placed for the
        # per-PSN memories' read address
        return (cur.una[:wbits] + off)[:wbits] if wbits else Const(0, 0)

    # timer writes (FINAL, CLEAR): their deadlines from the retry count and the
    # configuration of the cycle of the write (hw/reliability/deadline.py)
    m.submodules.deadline = deadline = TimerDeadline(
        num_qps=nq, gen_bits=GEN_BITS, timeout_unit=core.timeout_unit)
    wiring.connect(m, deadline.timer_arm, wiring.flipped(core.timer_arm))
    arm_v = deadline.write.valid
    arm_req = deadline.write.payload
    m.d.comb += [deadline.now.eq(core.now), arm_req.retries.eq(cur.retries),
                 arm_req.t.eq(cfg.t), arm_req.linear_cnt.eq(cfg.linear_cnt)]
    ctx.export(s=s, cur=cur, cfg=cfg, q=q, una0=una0, cwnd0=cwnd0, state0=state0, sq_pi=sq_pi,
               pi_ahead=pi_ahead, sent_ahead=sent_ahead, sq_end=sq_end, kind=kind, a_trim=a_trim,
               a_inv=a_inv, a_fatal=a_fatal, a_use=a_use, a_probe=a_probe, a_psn=a_psn, a_cum=a_cum,
               a_cum_next=a_cum_next, a_base=a_base, a_ece=a_ece, a_svc_wire=a_svc_wire,
               a_svc=a_svc, a_svc_sat=a_svc_sat, a_bitmap=a_bitmap,
               a_probe_id=a_probe_id, a_probe_ev=a_probe_ev, a_rtt=a_rtt, t_gen=t_gen,
               cmd=cmd, walk_kind=walk_kind, walk_mask=walk_mask, walk_psn=walk_psn,
               blamed=blamed, adv=adv,
               adv_raw=adv_raw, thr_high=thr_high, loss_hole=loss_hole, sent_d=sent_d,
               sent_moves=sent_moves, infl=infl, sent_new=sent_new, sent_operr=sent_operr,
               tmo_stale=tmo_stale, tmo_exhaust=tmo_exhaust, una_chg=una_chg, cwnd_chg=cwnd_chg,
               state_chg=state_chg, newly=newly, rtt_ts=rtt_ts, rtt_valid=rtt_valid,
               progress=progress, nak_cut=nak_cut, want_arm=want_arm, want_disarm=want_disarm,
               flush_status=flush_status, sweep=sweep, sweep_pending=sweep_pending, now_ts=now_ts,
               infl_mask=infl_mask, sent_psns=sent_psns, slot=slot, arm_v=arm_v, arm_req=arm_req)


def state_machine(ctx):
    """The one-hot state machine, the record's write enables and the walk's strobes."""
    m, W, room_final, room_final_d, q = ctx.m, ctx.W, ctx.room_final, ctx.room_final_d, ctx.q
    nq, rec_groups, rec_wr, kind = ctx.nq, ctx.rec_groups, ctx.rec_wr, ctx.kind
    walk_kind, infl_mask, cfg, cur = ctx.walk_kind, ctx.infl_mask, ctx.cfg, ctx.cur

    # --- the state machine ------------------------------------------------------------
    # One-hot, one flip-flop per state (hw/pipeline.py OneHotFSM): a state's actions
    # and transitions are gated by its flip-flop rather than by a decode of a binary
    # state (two LUT levels in front of every mux of the working copy). A state's
    # transitions exclude each other (checked at elaboration; ``OneOf`` where a
    # one-hot condition makes them exclusive). The states' blocks are plain
    # ``m.If``s in order: an assignment made in every cycle comes before the states
    # that also assign its signal.
    STATES = ("CLEAR", "IDLE", "ACK_IN", "LOAD", "SENT", "ACK", "ACK_ADV", "PICK",
              "LCNT", "WALK", "USE", "SACK", "SACK_ALIGN", "NAK", "CC", "CC_STEP",
              "CC_SUM", "CC_NEW", "CC_CLAMP", "PROBE_RESP", "PROBE_CHECK", "PROBE_ACT",
              "TIMEOUT", "FLUSH_WAIT", "FLUSH", "CMD_DEC", "CMD", "SWEEP", "SWEEP_EMIT",
              "SETTLE", "CC_SET", "FINAL", "DOORBELL", "OP_ERR")
    # IDLE and LOAD are the enables and selects of the wide registers they load (the
    # inputs', the working copy's): those loads are split into groups of at most 64
    # bits (40 for LOAD), each under its own copy of the state's flip-flop
    # (fsm.copy), which follows the transitions into and out of the state (FINAL's
    # and USE's transitions are tracked too: the record's write enables and the
    # walk's strobes below are decided from them a cycle early)
    fsm = OneHotFSM(m, STATES, "CLEAR", track=("IDLE", "LOAD", "FINAL", "USE"))
    st = fsm.st

    # The record memory's write enables (rec_wen_k, one per column group): 1 in
    # every cycle of CLEAR and in the cycle of FINAL that writes (FINAL with
    # room_final), registered from the transitions into FINAL (or FINAL waiting)
    # and the room that room_final registers. Each its own flip-flop, whose next
    # value is a function of itself (0 after a write: FINAL leaves), so that
    # synthesis keeps them apart (as state_copy).
    will_write = (fsm.entering("FINAL") | (st.FINAL & ~room_final)) & room_final_d
    stay_clear = st.CLEAR & (q != nq - 1)
    rec_wen = [Signal(init=1, name=f"rec_wen_{k}") for k in range(rec_groups)]
    for wen in rec_wen:
        m.d.sync += wen.eq(Mux(wen, stay_clear, will_write))
    m.d.comb += rec_wr.en.eq(Cat(*rec_wen))

    # The walk's step (USE) by kind, one-hot strobes registered from the
    # transitions into USE and walk_kind (unchanged from PICK or LCNT to USE):
    # use_of(kind, tag) is 1 exactly in USE of a walk of that kind. A copy per
    # tag (the working copy's fields, the pushes, a delivery, the EVs' loss
    # evidence), each a function of itself (0 after USE: USE never follows
    # itself), so that synthesis keeps them apart.
    use_strobes = {}

    def use_of(kind, tag):
        if (kind, tag) not in use_strobes:
            u = Signal(name=f"use_{('adv', 'sack', 'loss', 'tmo')[kind]}_{tag}")
            m.d.sync += u.eq(Mux(u, 0, fsm.entering("USE") & walk_kind[kind]))
            use_strobes[kind, tag] = u
        return use_strobes[kind, tag]

    def start(k):  # q set by IDLE
        m.d.sync += kind.eq(k)
        fsm.next = "LOAD"

    # generic per-PSN walk over walk_mask: PICK reads the entry of the lowest PSN
    # left, USE acts (the loss walk counts the SACKed PSNs above it in LCNT first)
    # registered every cycle: infl_mask_q in SACK_ALIGN (infl set two cycles
    # before), lost_cand in NAK (its previous cycle, PICK, changes neither sacked,
    # fast_done nor infl)
    infl_mask_q = Signal(W)
    lost_cand = Signal(W)
    m.d.sync += [
        infl_mask_q.eq(infl_mask),
        lost_cand.eq(Mux(cfg.sack_threshold != 0,
                         infl_mask & ~cur.sacked & ~cur.fast_done, 0)),
    ]
    ctx.export(st=st, fsm=fsm, use_of=use_of, start=start, infl_mask_q=infl_mask_q,
               lost_cand=lost_cand)

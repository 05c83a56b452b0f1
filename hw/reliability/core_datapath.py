"""The reliability core's datapath around the state machine: the input choice, the
walk's pick and per-PSN entry, the EV of a command or probe answer, the pushes' data and
the record written back. A builder of ``ReliabilityCore`` (hw/reliability/core_ctx.py)."""

from amaranth.hdl import Cat, Const, Mux, Signal

from hw.bits import index_select, lowest_index

from .core_layouts import W_TMO
from .intake import EventPicker
from .layouts import EvState, RetxReason


def datapath(ctx):
    """The input choice, the walk's pick, the per-PSN entry read, the EV of a command or probe
    answer, the pushes' data and the record written back."""
    m, core, E, q, st, nq, W, cmd = ctx.m, ctx.core, ctx.E, ctx.q, ctx.st, ctx.nq, ctx.W, ctx.cmd
    ack, sweep, sweep_pending, sqp = ctx.ack, ctx.sweep, ctx.sweep_pending, ctx.sqp
    rec_rd, walk_mask, walk_psn, sent_psns = ctx.rec_rd, ctx.walk_mask, ctx.walk_psn, ctx.sent_psns
    drops_inc, cur, retx_req, a_psn = ctx.drops_inc, ctx.cur, ctx.retx_req, ctx.a_psn
    a_rtt = ctx.a_rtt
    walk_kind, evu, evt, Rec, want_arm = ctx.walk_kind, ctx.evu, ctx.evt, ctx.Rec, ctx.want_arm
    want_disarm, rec_wr, arm_req, f_ack = ctx.want_disarm, ctx.rec_wr, ctx.arm_req, ctx.f_ack
    f_cwnd, f_qps, una_chg, una0 = ctx.f_cwnd, ctx.f_qps, ctx.una_chg, ctx.una0
    cwnd_chg, cwnd0, state_chg, state0 = ctx.cwnd_chg, ctx.cwnd0, ctx.state_chg, ctx.state0

    # The input IDLE takes is chosen the cycle before (hw/reliability/intake.py:
    # ``take``, one-hot by priority; none: IDLE waits), with the QP to read at
    # (``rd_q``): the record, its configuration and the producer index are read for
    # LOAD alone, in the state before it (IDLE, or ACK_IN at the ACK's QP, which
    # rd_q keeps: no choice is made in a cycle in which IDLE takes one). A valid
    # input keeps its payload until taken. Doorbells: a pending bit per QP, taken
    # last by priority.
    m.submodules.picker = picker = EventPicker(num_qps=nq)
    take = picker.take
    rd_q = picker.qpn
    sent_ok_q = picker.sent_ok  # the sent record's QP in range, with the choice
    inputs = [core.cmd, core.sent, core.peer_ack, core.expired]
    db_take = Signal()
    m.d.comb += [
        picker.valid.eq(Cat(*[i.valid for i in inputs], sweep_pending)),
        picker.cmd_qpn.eq(core.cmd.payload.qpn), picker.sent_qpn.eq(core.sent.payload.qpn),
        picker.ack_qpn.eq(ack.bth.dqpn), picker.tmo_qpn.eq(core.expired.payload.qpn),
        picker.sweep_qpn.eq(sweep.qpn),
        picker.doorbell.eq(core.sq_producer.valid), picker.doorbell_qpn.eq(sqp.qpn),
        picker.idle.eq(st.IDLE), picker.doorbell_taken.eq(db_take),
    ]
    m.d.comb += [rec_rd.addr.eq(rd_q), core.rel_addr.eq(rd_q)]
    # the walk's next PSN, registered: the lowest bit of walk_mask without the PSN
    # in use (off_bit). PICK follows USE or WALK, so walk_mask has not changed
    # since: the values are those of walk_mask in PICK.
    pick_off = Signal(range(max(W, 2)))
    pick_any = Signal()
    # the PSN in use as one bit, registered with walk_psn: its one-hot in LCNT and
    # USE (set in PICK, kept while they last), 0 in the other states (WALK)
    off_bit = Signal(W)
    m.d.sync += off_bit.eq(0)
    use_mask = Signal(W)
    m.d.comb += use_mask.eq(walk_mask & ~off_bit)
    m.d.sync += [
        pick_off.eq(lowest_index(m, use_mask, W, "pick")),
        pick_any.eq(use_mask != 0),
    ]
    # pick_off's copy for the per-PSN memories' read address (pick_off has sinks
    # all over the walk's logic), loaded in every state but LCNT: equal to pick_off
    # in PICK, the one state whose read is used (PICK follows USE, WALK or PICK);
    # the enable keeps synthesis from merging it with pick_off
    pick_off_rd = Signal.like(pick_off)
    with m.If(~st.LCNT):
        m.d.sync += pick_off_rd.eq(lowest_index(m, use_mask, W, "pick_rd"))
    e_ev = sent_psns.ev
    e_retx = sent_psns.retx
    e_last = sent_psns.last
    e_ts = sent_psns.ts

    # the entry's EV's drop count after loss evidence (an EV transition's drops, USE)
    blame_drops = Signal(16)
    m.d.comb += blame_drops.eq(index_select([drops_inc[i] for i in range(E)], e_ev))

    # the EV of a command or probe answer (set in IDLE), its state and drop count,
    # registered every cycle: valid in CMD and PROBE_ACT (CMD_DEC and PROBE_CHECK
    # before them change no EV field)
    ev_idx = Signal(range(E))
    ev_old = Signal(2)
    c_old = Signal(2)
    c_drops = Signal(16)
    m.d.comb += ev_old.eq(index_select([cur.ev_state[i] for i in range(E)], ev_idx))
    m.d.sync += [c_old.eq(ev_old),
                 c_drops.eq(index_select([cur.ev_drops[i] for i in range(E)], ev_idx))]

    # The pushes' data, chosen by the state flip-flops alone (the push conditions
    # set only the enables): the retransmit FIFO's (block RAM, no register in
    # front) the NAK's PSN in NAK, else the walk's; the EV FIFOs' the event of a
    # command (CMD: GOOD or DENIED, the command's state) or probe answer
    # (PROBE_ACT: to GOOD) on ev_idx, else blame's (GOOD to ASSUMED_BAD on e_ev)
    ev_own = st.CMD | st.PROBE_ACT
    ev_new = Mux(st.CMD, cmd.state[:2], Mux(st.PROBE_ACT, EvState.GOOD,
                                             EvState.ASSUMED_BAD))
    m.d.comb += [
        retx_req.psn.eq(Mux(st.NAK, a_psn, walk_psn)),
        retx_req.reason.eq(Mux(st.NAK, RetxReason.NAK_TRIMMED,
                               Mux(walk_kind[W_TMO], RetxReason.TIMEOUT,
                                   RetxReason.SACK_HOLE))),
        evu.ev_index.eq(Mux(ev_own, ev_idx, e_ev)), evu.state.eq(ev_new),
        evt.ev_index.eq(Mux(ev_own, ev_idx, e_ev)), evt.new.eq(ev_new),
        evt.old.eq(Mux(ev_own, c_old, EvState.GOOD)),
        evt.drops.eq(Mux(ev_own, c_drops, blame_drops)),
        evt.rtt_ns.eq(Mux(st.PROBE_ACT, a_rtt, 0)),
    ]
    bad = Signal(E)
    m.d.comb += bad.eq(Cat(*[cur.ev_state[i] == EvState.ASSUMED_BAD for i in range(E)]))

    # the record written back (FINAL): the working copy with the timer generation of
    # the arm or disarm. The write port and the timer write take it, and q, in every
    # state; only their enables depend on the state.
    out = Signal(Rec)
    m.d.comb += out.eq(cur)
    with m.If(want_arm | want_disarm):
        m.d.comb += [out.timer_gen.eq(cur.timer_gen + 1), out.armed.eq(want_arm)]
    m.d.comb += [
        rec_wr.addr.eq(q), rec_wr.data.eq(out),
        arm_req.qpn.eq(q), arm_req.armed.eq(want_arm), arm_req.gen.eq(out.timer_gen),
        f_ack.w_data.eq(Cat(Const(0, 24) | q, cur.una, Const(0, 16) | cur.sacked_n)),
        f_cwnd.w_data.eq(Cat(Const(0, 24) | q, cur.cwnd)),
        f_qps.w_data.eq(Cat(Const(0, 24) | q, cur.state)),
    ]

    # una, cwnd, state against their values at LOAD, registered every cycle: valid
    # in FINAL when the cycle before changed none of them, else set there (SENT,
    # FLUSH, CC_SET; their assignments come after this one); CMD goes through
    # SETTLE
    m.d.sync += [una_chg.eq(cur.una != una0), cwnd_chg.eq(cur.cwnd != cwnd0),
                 state_chg.eq(cur.state != state0)]
    ctx.export(take=take, rd_q=rd_q, sent_ok_q=sent_ok_q, inputs=inputs, db_take=db_take,
               off_bit=off_bit, pick_off=pick_off, pick_any=pick_any, use_mask=use_mask,
               pick_off_rd=pick_off_rd, e_ev=e_ev, e_retx=e_retx, e_last=e_last, e_ts=e_ts,
               ev_idx=ev_idx, ev_old=ev_old, c_old=c_old, bad=bad)

"""The reliability core's controller commands: CMD_DEC, CMD, and CMD's reset and RTS
entry of the working copy. Builders of ``ReliabilityCore`` (hw/reliability/core_ctx.py)."""

from amaranth.hdl import Mux, Signal

from .layouts import CqeStatus, EvState, QpState


def command_states(ctx):
    """CMD_DEC and CMD: a controller command."""
    m, fsm, cmd, cur, r_cpl, ev_old = ctx.m, ctx.fsm, ctx.cmd, ctx.cur, ctx.r_cpl, ctx.ev_old
    r_evu, ev_idx, c_old, push_ev, count = ctx.r_evu, ctx.ev_idx, ctx.c_old, ctx.push_ev, ctx.count
    flush_status, push_cpl, want_disarm = ctx.flush_status, ctx.push_cpl, ctx.want_disarm

    # ---- controller commands ------------------------------------------------------
    # the command decoded against the record first (registered in CMD_DEC)
    c_ev_good = Signal()
    c_ev_denied = Signal()
    # a QP state command, one of: to ERROR from RTS (flush), to RESET, to RTS from
    # another state, any other (RTS from RTS: unchanged)
    c_flush = Signal()
    c_reset = Signal()
    c_to_rts = Signal()
    c_other = Signal()
    # CMD's reset and RTS entry of the working copy (below), as flip-flops
    # set for the one cycle of CMD: the clears of the record's flip-flops
    # (their LSR pins, a few hundred) are these flags, not a LUT of st.CMD
    # and c_reset/c_to_rts (docs/timing.md#reliability-core). clear_go is
    # either of the two, for the fields
    # both set alike.
    reset_go = Signal()
    rts_go = Signal()
    clear_go = Signal()
    m.d.sync += [reset_go.eq(0), rts_go.eq(0), clear_go.eq(0)]
    with fsm.State("CMD_DEC"):
        flush = (cmd.state == QpState.ERROR) & (cur.state == QpState.RTS)
        reset = cmd.state == QpState.RESET
        to_rts = (cmd.state == QpState.RTS) & (cur.state != QpState.RTS)
        with m.If(~cmd.ev & (~reset | r_cpl)):  # (CMD is next: see below)
            m.d.sync += [reset_go.eq(reset), rts_go.eq(to_rts), clear_go.eq(reset | to_rts)]
        m.d.sync += [
            c_ev_good.eq(cmd.ev & (cmd.state == EvState.GOOD) & (ev_old != EvState.GOOD)),
            c_ev_denied.eq(cmd.ev & (cmd.state == EvState.DENIED)
                           & (ev_old != EvState.DENIED)),
            c_flush.eq(~cmd.ev & flush),
            c_reset.eq(~cmd.ev & reset),
            c_to_rts.eq(~cmd.ev & to_rts),
            c_other.eq(~cmd.ev & ~flush & ~reset & ~to_rts),
        ]
        # the room for CMD's push is awaited here: nothing is pushed in between
        with m.If(Mux(cmd.ev, r_evu, ~reset | r_cpl)):
            fsm.next = "CMD"
    with fsm.State("CMD"):
        ce = ev_idx
        old = c_old
        # the QP-state flags exclude each other and cmd.ev (they are registered
        # under ~cmd.ev): no priority between them; an EV command's flags hold
        # with cmd.ev and make no transition
        with fsm.OneOf() as when:
            with when(cmd.ev):
                fsm.next = "SETTLE"
            with m.If(c_ev_good):
                m.d.sync += [cur.ev_state[ce].eq(EvState.GOOD), cur.ev_loss[ce].eq(0)]
                push_ev()
                with m.If(old == EvState.ASSUMED_BAD):
                    count("ev_to_good")
            with m.If(c_ev_denied):
                m.d.sync += cur.ev_state[ce].eq(EvState.DENIED)
                push_ev()
            with when(c_flush):
                m.d.sync += flush_status.eq(CqeStatus.FLUSHED)
                fsm.next = "FLUSH"
            with when(c_reset):  # the working copy: below
                push_cpl(0, 0, clear=1)
                m.d.sync += want_disarm.eq(1)
                fsm.next = "SETTLE"
            with when(c_to_rts):  # the working copy: below
                m.d.sync += want_disarm.eq(cur.armed)
                fsm.next = "SETTLE"
            with when(c_other):
                m.d.sync += cur.state.eq(cmd.state)
                fsm.next = "SETTLE"
    ctx.export(clear_go=clear_go, reset_go=reset_go, rts_go=rts_go)


def command_entry(ctx):
    """CMD's reset and RTS entry of the working copy."""
    m, reset_go, rts_go, clear_go, cur = ctx.m, ctx.reset_go, ctx.rts_go, ctx.clear_go, ctx.cur
    Rec, sq_end, cwnd_clamped = ctx.Rec, ctx.sq_end, ctx.cwnd_clamped

    # ---- CMD's reset and RTS entry of the working copy ---------------------------------
    # last, as the outermost muxes of the bits they clear (flip-flop resets),
    # each field under one flag (reset_go, rts_go, clear_go: above): a reset
    # clears the record but timer_gen (kept) and fresh (set), an RTS entry
    # clears the fields both clear and sets its own.
    both = ("una", "nxt", "sacked", "sacked_n", "fast_done", "retries", "md_active", "cwnd_acc",
            "delay_high", "ev_loss", "op_err")
    with m.If(clear_go):
        m.d.sync += [cur[f].eq(0) for f in both]
        m.d.sync += cur.fresh.eq(1)
    with m.If(reset_go):
        m.d.sync += [cur[f].eq(0) for f, _ in Rec if f not in both + ("fresh", "timer_gen")]
        # every WQE posted so far is done with: a doorbell in ERROR after this
        # flushes from the producer index of the reset on
        m.d.sync += [cur.timer_gen.eq(cur.timer_gen), cur.wqe_cpl.eq(sq_end),
                     cur.wqe_sent.eq(sq_end)]
    with m.If(rts_go):
        m.d.sync += [
            cur.state.eq(QpState.RTS), cur.wqe_cpl.eq(sq_end), cur.wqe_sent.eq(sq_end),
            cur.cwnd.eq(cwnd_clamped),
        ]

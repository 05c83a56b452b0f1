"""The reliability core's probe states: a probe answer (PROBE_RESP, PROBE_CHECK,
PROBE_ACT) and a QP's probe requests of a round (SWEEP, SWEEP_EMIT). Builders of
``ReliabilityCore`` (hw/reliability/core_ctx.py)."""

from amaranth.hdl import Cat, Mux, Signal

from .layouts import EvState, QpState


def probe_states(ctx):
    """PROBE_RESP, PROBE_CHECK and PROBE_ACT: a probe answer."""
    m, core, fsm, q, ev_idx, ebits = ctx.m, ctx.core, ctx.fsm, ctx.q, ctx.ev_idx, ctx.ebits
    r_evu, a_probe_id, a_probe_ev, ev_old = ctx.r_evu, ctx.a_probe_id, ctx.a_probe_ev, ctx.ev_old
    count, cur, push_ev = ctx.count, ctx.cur, ctx.push_ev

    # ---- probe answer ----------------------------------------------------------
    # the room for PROBE_ACT's push is awaited here: nothing is pushed in between
    with fsm.State("PROBE_RESP"):
        m.d.comb += core.evv_addr.eq(Cat(ev_idx, q) if ebits else q)
        with m.If(r_evu):
            fsm.next = "PROBE_CHECK"
    probe_ok = Signal()
    with fsm.State("PROBE_CHECK"):
        m.d.sync += probe_ok.eq(
            (a_probe_id[ebits:8] == 0) & (core.evv_data == a_probe_ev)
            & (ev_old == EvState.ASSUMED_BAD))
        fsm.next = "PROBE_ACT"
    with fsm.State("PROBE_ACT"):
        count("probe_resps")
        with m.If(probe_ok):
            m.d.sync += [cur.ev_state[ev_idx].eq(EvState.GOOD),
                         cur.ev_loss[ev_idx].eq(0)]
            push_ev()  # c_old: ASSUMED_BAD
            count("ev_to_good")
        fsm.next = "FINAL"


def sweep_states(ctx):
    """SWEEP and SWEEP_EMIT: a QP's probe requests of a probe round."""
    m, q, st, room, sweep, cur, bad = ctx.m, ctx.q, ctx.st, ctx.room, ctx.sweep, ctx.cur, ctx.bad
    f_probe, count, fsm = ctx.f_probe, ctx.count, ctx.fsm

    # ---- probe round: one request per ASSUMED_BAD EV of this QP --------------------
    # SWEEP loads the QP's EVs to probe, SWEEP_EMIT pushes one per cycle with room
    # (3 free entries the cycle before, as for the other FIFOs: the FIFO's write
    # enable is a flip-flop) until none is left
    m.d.comb += [
        sweep.qp.eq(q), sweep.evs.eq(Mux(cur.state == QpState.RTS, bad, 0)),
        sweep.room.eq(room(f_probe)), sweep.load.eq(st.SWEEP), sweep.emit.eq(st.SWEEP_EMIT),
        f_probe.w_data.eq(sweep.req), f_probe.w_en.eq(sweep.push),
    ]
    with m.If(sweep.push):
        count("probes_sent")
    with fsm.State("SWEEP"):
        fsm.next = "SWEEP_EMIT"
    with fsm.State("SWEEP_EMIT"):
        with m.If(sweep.done):
            fsm.next = "IDLE"

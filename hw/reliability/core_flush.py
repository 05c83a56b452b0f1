"""The reliability core's timeout and flush states: TIMEOUT, FLUSH_WAIT, OP_ERR,
DOORBELL, FLUSH. A builder of ``ReliabilityCore`` (hw/reliability/core_ctx.py)."""

from amaranth.hdl import Mux, Signal

from .core_layouts import W_TMO
from .layouts import CqeStatus, QpState


def timeout_flush_states(ctx):
    """TIMEOUT, FLUSH_WAIT, OP_ERR, DOORBELL and FLUSH: a timeout and the flush."""
    m, fsm, cur, st, walk_kind, blamed = ctx.m, ctx.fsm, ctx.cur, ctx.st, ctx.walk_kind, ctx.blamed
    tmo_stale, count, tmo_exhaust = ctx.tmo_stale, ctx.count, ctx.tmo_exhaust
    flush_status, cwnd_floor, want_arm = ctx.flush_status, ctx.cwnd_floor, ctx.want_arm
    sq_end, sq_pi, pi_ahead, sent_ahead = ctx.sq_end, ctx.sq_pi, ctx.pi_ahead, ctx.sent_ahead
    r_cpl, push_cpl, state_chg, state0 = ctx.r_cpl, ctx.push_cpl, ctx.state_chg, ctx.state0
    want_disarm = ctx.want_disarm

    # ---- retransmit timer expired ------------------------------------------------
    with fsm.State("TIMEOUT"):
        retries_new = Signal(5)
        m.d.comb += retries_new.eq(Mux(cur.retries == 31, 31, cur.retries + 1))
        # the walk's start, whether it follows or not: a stale report writes
        # nothing back, a flush clears fast_done itself
        m.d.sync += [walk_kind.eq(1 << W_TMO), blamed.eq(0), cur.fast_done.eq(0)]
        with m.If(tmo_stale):
            fsm.next = "IDLE"  # stale report
        with m.Else():
            count("timeouts")
            m.d.sync += cur.retries.eq(retries_new)
            with m.If(tmo_exhaust):
                count("retry_exhausted")
                m.d.sync += flush_status.eq(CqeStatus.RETRY_EXCEEDED)
                fsm.next = "FLUSH"
            with m.Else():
                half = cur.cwnd >> 1
                m.d.sync += [
                    cur.cwnd.eq(Mux(half < cwnd_floor, cwnd_floor, half)),
                    want_arm.eq(1),
                ]
                fsm.next = "WALK"

    # ---- every outstanding WQE completes with an error; QP to ERROR --------------------
    # From the oldest uncompleted WQE up to the producer index: the WQEs TX
    # has begun and those it has not (posted, not yet fetched or sent). The
    # end is never before wqe_sent (a doorbell cannot lag what TX sent).
    # una stays: an ack_update would open TX's window before the
    # qp_state_update has disabled the QP in TX.
    # registered every cycle: valid in FLUSH (entered from TIMEOUT or CMD, or
    # from FLUSH_WAIT after a completion: wqe_cpl unchanged the cycle before)
    # (TIMEOUT, LOAD's next cycle, precedes sq_end: there wqe_cpl is LOAD's, and
    # wqe_cpl != sq_end is the zero test of the distance that sq_end chooses)
    flush_more = Signal()
    sq_use_pi = Signal()  # sq_end's choice: the producer index (valid after LOAD)
    m.d.comb += sq_use_pi.eq(sq_pi[16] & (pi_ahead >= sent_ahead))
    m.d.sync += [
        sq_end.eq(Mux(sq_use_pi, sq_pi[:16], cur.wqe_sent)),
        flush_more.eq(Mux(st.TIMEOUT, Mux(sq_use_pi, pi_ahead != 0, sent_ahead != 0),
                          cur.wqe_cpl != sq_end)),
    ]
    # the next WQE to complete, registered every cycle: valid in FLUSH (as above)
    # and in USE (PICK or LCNT before it leave wqe_cpl as it is)
    wqe_cpl_inc = Signal(16)
    m.d.sync += wqe_cpl_inc.eq(cur.wqe_cpl + 1)
    with fsm.State("FLUSH_WAIT"):
        fsm.next = "FLUSH"
    # a refused WQE's flush (from SENT or CC_SET, which set wqe_sent or leave it):
    # a cycle more before FLUSH_WAIT, so that sq_end (registered every cycle from
    # wqe_sent) and flush_more after it hold the wqe_sent SENT set
    with fsm.State("OP_ERR"):
        fsm.next = "FLUSH_WAIT"
    # a doorbell (LOAD reads the producer index): a QP in ERROR completes what was
    # posted since its flush FLUSHED (FLUSH two cycles later, when sq_end and
    # flush_more hold LOAD's producer index, as after CMD)
    with fsm.State("DOORBELL"):
        with m.If(cur.state == QpState.ERROR):
            m.d.sync += flush_status.eq(CqeStatus.FLUSHED)
            fsm.next = "FLUSH_WAIT"
        with m.Else():
            fsm.next = "IDLE"
    with fsm.State("FLUSH"):
        # sacked and fast_done cleared in every cycle of the flush (none reads them)
        m.d.sync += [cur.sacked.eq(0), cur.sacked_n.eq(0), cur.fast_done.eq(0)]
        with m.If(flush_more):
            with m.If(r_cpl):
                push_cpl(cur.wqe_cpl, flush_status)
                m.d.sync += [cur.wqe_cpl.eq(wqe_cpl_inc),
                             flush_status.eq(CqeStatus.FLUSHED)]
                fsm.next = "FLUSH_WAIT"
        with m.Else():
            m.d.sync += [
                cur.state.eq(QpState.ERROR), cur.wqe_sent.eq(sq_end),
                state_chg.eq(state0 != QpState.ERROR), want_disarm.eq(1),
            ]
            fsm.next = "FINAL"
    ctx.export(wqe_cpl_inc=wqe_cpl_inc)

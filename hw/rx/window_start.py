"""The start of each operation of ``RxPsnWindow``'s state machine (state IDLE)
and the two operations that need no check: a failed write (DMA_ERROR,
DMA_ERROR2) and the clear of a QP (INIT).

``start_states`` builds the three families in this order, with the B
verdict's handshake (``done.ready``) and the release of its in-flight slot.
"""

from amaranth.hdl import Cat, Mux, Signal

from hw.headers import Opcode
from hw.pipeline import load_in_groups, state_copy
from hw.protocol import PSN_BITS

from .layouts import QpRxState, ReqKind
from .window_context import WindowContext

__all__ = ["start_states"]


def start_states(c: WindowContext):
    """IDLE (take an init, a B verdict, a request or start a timer scan, in
    this order of priority), DMA_ERROR, DMA_ERROR2 and INIT."""
    m, fsm, st, cnt, win = c.m, c.fsm, c.st, c.cnt, c.win
    qp, qs, rq, scan, flight = c.qp, c.qs, c.rq, c.scan, c.flight
    f_rd_data = flight.read_row
    b_wr, q_wr, lr = c.b_wr, c.q_wr, c.lr
    init_word = Signal(lr + 1)
    init_epsn = Signal(PSN_BITS, reset_less=True)  # the init's EPSN, loaded in IDLE
    # INIT is at its last word (a flip-flop, so the QP row's write enable is
    # one from flip-flops, no compare of init_word in front of it)
    init_last = Signal()
    # done.ready: set the cycle after IDLE takes a B verdict (in MARK_RD or
    # DMA_ERROR, the only states its branch goes to), when the transfer
    # happens; a flip-flop, so the done stage's flags and enables (the
    # skid's load, reset of its spare flag) have no LUT of done.valid
    # and the IDLE decision in front (docs/timing.md#rx-window).
    done_ack = Signal()

    m.d.comb += win.done.ready.eq(done_ack)
    m.d.sync += done_ack.eq(0)
    with fsm.State("IDLE"):
        # The operation's registers load in IDLE whatever it starts (IDLE lasts
        # one cycle and each path reads only what it needs of them), so the
        # flip-flop of IDLE is their enable. A B verdict is taken whenever
        # done.valid (else a scan is due and nothing reads them), a request
        # only without it.
        psn_in = Mux(win.done.valid, f_rd_data.psn, win.req.payload.psn)
        m.d.sync += [
            rq.eq(win.req.payload),
            rq.psn.eq(psn_in),
            init_epsn.eq(win.init.payload.epsn),
            c.done_tag.eq(win.done.payload.tag),
            c.mark_ackreq.eq(f_rd_data.ackreq),
            c.mark_ce.eq(f_rd_data.ce),
            c.mark_arrival.eq(f_rd_data.arrival),
            c.rq_arrival.eq(scan.now),
        ]
        start_check = (
            win.req.valid
            & ~c.place_valid
            & ~win.init_busy
            & ((win.req.payload.kind != ReqKind.DATA) | flight.any_free)
        )
        # A WITH_IMMEDIATE packet checked while writes are in flight is not
        # taken here: its CQ verdict can depend on them (window_check.py,
        # cq_retry), so CHECK_X takes it or leaves it for a later check.
        peek = (
            (win.req.payload.kind == ReqKind.DATA)
            & Cat(win.req.payload.opcode == op for op in Opcode.WITH_IMM).any()
            & flight.busy
        )
        scan_due = scan.due
        with m.If(win.init.valid):
            m.d.comb += win.init.ready.eq(1)
            # (the QP's pending entries are dropped in INIT)
            m.d.sync += [
                qp.eq(win.init.payload.qp),
                init_word.eq(0),
                init_last.eq(win.ring_words == 1),
            ]
            fsm.next = "INIT"
        with m.Elif(win.done.valid & ~scan_due):
            # (acknowledged in the next cycle: done_ack)
            m.d.sync += done_ack.eq(1)
            m.d.comb += scan.count.eq(1)
            # (its in-flight slot is freed in the next state, MARK_RD or
            # DMA_ERROR, from done_tag)
            m.d.sync += qp.eq(f_rd_data.qp)
            with m.If(win.done.payload.ok):
                fsm.next = "MARK_RD"
            with m.Else():
                m.d.comb += cnt.dma_error.eq(1)
                fsm.next = "DMA_ERROR"
        with m.Elif(start_check & ~scan_due):
            m.d.comb += [win.req.ready.eq(~peek), scan.count.eq(1)]
            m.d.sync += [qp.eq(win.req.payload.qp), c.peek.eq(peek)]
            fsm.next = "CHECK_RD"
        with m.Else():
            m.d.sync += qp.eq(scan.qp)
            m.d.comb += scan.start.eq(1)
            fsm.next = "SCAN_RD"

    # The B verdict's in-flight slot is freed the cycle after IDLE takes
    # it, in MARK_RD or DMA_ERROR (one-hot flip-flops, the only states
    # IDLE's verdict branch goes to) from done_tag (registered in IDLE):
    # done.ready (a LUT of done.valid far from the slots) is not in the
    # slots' clock enables (docs/timing.md#rx-window). any_free, registered
    # from the slots, sees the free slot by the next IDLE (neither path
    # returns to IDLE in fewer than three cycles).
    m.d.comb += [flight.release.eq(st.MARK_RD | st.DMA_ERROR), flight.release_slot.eq(c.done_tag)]

    with fsm.State("DMA_ERROR"):
        # The packet is lost: forget its completion (its pending entry
        # is the one in flight in its slot; the match is registered here
        # and applied in the next cycle).
        fsm.next = "DMA_ERROR2"
    with fsm.State("DMA_ERROR2"):
        fsm.next = "IDLE"

    with fsm.State("INIT"):
        # The QP's pending entries are dropped (in every cycle of INIT: no
        # entry is entered or read meanwhile).
        m.d.comb += [b_wr.en.eq(1), b_wr.data.eq(0)]
        m.d.sync += [
            init_word.eq(init_word + 1),
            init_last.eq(init_word == win.ring_words - 2),
        ]
        m.d.comb += b_wr.addr.eq(Cat(init_word[:lr], qp))
        with m.If(init_last):
            m.d.comb += q_wr.en.eq(1)
            fsm.next = "IDLE"
    # INIT sets the QP's row (written in its last cycle) to zero but the
    # EPSN, in every one of its cycles (ring_words >= 2 of them, as the
    # ring holds the window and one word more): the row's flip-flops
    # load under copies of INIT's flip-flop, each the enable of at most
    # 64 bits (no cycle added), not under a LUT of the init's valid in IDLE
    # as the enable of the whole row (docs/timing.md#rx-window).
    init_copies = [state_copy(m, st.IDLE & win.init.valid, init_last, f"init_copy{k}")
                   for k in range((len(qs.as_value()) + 63) // 64)]
    init_row = Signal(QpRxState(win.plane_bits, win.ipv6))
    m.d.comb += init_row.epsn.eq(init_epsn)
    load_in_groups(m, [(qs, init_row)], lambda k: init_copies[k])

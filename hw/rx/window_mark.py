"""The PSN window's mark/advance engine (states MARK_RD, MARK, ADV_RD, ADV_LD,
ADV_HOLES, ADV, COMPLETE, COMPLETE_GAP, COMPLETE_GAP2 and COALESCE of
``RxPsnWindow``'s state machine): a placed packet's bit is set, the
cumulative PSN advances over the words that are full, the LAST packets it
passes complete in PSN order (a CQE for each WITH_IMMEDIATE one), and the
ACK coalescing state is updated.

``mark_datapath`` makes the registers the states read (each registered a
cycle or more ahead of its use), ``mark_states`` builds the states, and
``cqe_write`` issues a completion's CQE in the cycle after it.
"""

from dataclasses import dataclass

from amaranth.hdl import Cat, Const, Mux, Signal

from hw.protocol import Syndrome

from .layouts import CQE_STATUS_SUCCESS
from .window_advance import CqSlot, FirstHole
from .window_context import WindowContext

__all__ = ["MarkRegs", "cqe_write", "mark_datapath", "mark_holes", "mark_states"]


@dataclass
class MarkRegs:
    """The mark/advance engine's own registers and its sub-components' outputs."""

    ack_due: Signal  # COALESCE sends an ACK (AckReq or ACK_N reached)
    at_epsn: Signal  # the marked PSN is the expected one: ADV_RD advances, from MARK
    ce_count_sat: Signal  # COALESCE's saturating counts, registered from the QP's row
    unacked_sat: Signal
    rq_le: Signal  # the positions at or below rq.psn in its word, registered
    holes_r: Signal  # the clear bits of the word ADV works on, from epsn on
    any_hole: Signal  # holes_r.any(), registered with it
    holes: Signal  # the clear bits of the word read, where MARK and ADV_LD look
    adv_first: Signal  # ADV is at the word of the PSN just marked
    first_hole: Signal  # the lowest set bit of holes_r (FirstHole)
    cq_slot: object  # CqSlot: the next completion's CQ slot
    cqe_issue: Signal  # COMPLETE passed a WITH_IMMEDIATE message: CQE next cycle


def mark_datapath(c: WindowContext) -> MarkRegs:
    """The registers and sub-components (FirstHole, CqSlot) of the mark and
    advance, driven every cycle, so that each state's decision is a
    flip-flop's."""
    m, win, qs, cfg, rq, pending, W, lw = c.m, c.win, c.qs, c.cfg, c.rq, c.pending, c.W, c.lw
    # An ACK is due when unacked + 1 >= ACK_N (0 reads as 1), i.e. when
    # unacked >= ack_thr; registered from the QP's lookup (the same QP since
    # IDLE, valid from ADV_RD on), and ack_due from it and the QP's row
    # (loaded in MARK) in the cycle before COALESCE.
    ack_thr = Signal(8)
    m.d.sync += ack_thr.eq(Mux(win.cfg.ack_n == 0, 0, win.cfg.ack_n - 1))
    ack_due = Signal()
    m.d.sync += ack_due.eq(c.mark_ackreq | ~(qs.unacked < ack_thr))
    at_epsn = Signal()
    # COALESCE's saturating counts, registered from the QP's row (loaded in
    # MARK, unchanged until COALESCE).
    ce_count_sat = Signal()
    unacked_sat = Signal()
    m.d.sync += [ce_count_sat.eq(qs.ce_count == 0xFFFF), unacked_sat.eq(qs.unacked == 0xFF)]

    # ---- completion: which pending LAST packets the advance passed, and in
    # which PSN order (PendingTable), all from registers so COMPLETE is
    # shallow.
    ones = (1 << W) - 1
    # The positions at or below rq.psn in its word, for the pending entry
    # WRITEBACK fills, registered from rq, which holds from IDLE to
    # WRITEBACK: the decode of the PSN is not in front of every entry's
    # positions, nor rq's fan-out. MARK, after MARK_RD, also takes the
    # marked bit and the hole mask from it.
    rq_le = Signal(W)
    m.d.sync += rq_le.eq(Const(ones, W) >> ~rq.psn[:lw])
    holes_r = Signal(W)
    any_hole = Signal()
    m.d.comb += [pending.request_le.eq(rq_le), pending.holes.eq(holes_r)]
    # Where MARK and ADV_LD look for holes (clear bits) in the word read:
    # above the PSN being marked (in MARK: the positions rq_le leaves out;
    # rq_le is registered from rq in MARK_RD), or the whole word after a
    # retired one (ADV_LD; epsn is then at the word's start). The mask is
    # the MARK flip-flop and rq_le, no decode of the PSN in front of it.
    holes = Signal(W)
    # The lowest set bit of holes_r, in two registered steps (FirstHole):
    # COMPLETE comes at least two cycles after holes_r is loaded (ADV,
    # COMPLETE_GAP2).
    m.submodules.first_hole = hole_finder = FirstHole(W)
    m.d.comb += hole_finder.holes.eq(holes_r)
    adv_first = Signal()

    # The CQ slot of the next completion, registered from qs and cfg (valid
    # two cycles after MARK loads them, and one cycle after cq_prod moves).
    m.submodules.cq_slot = cq_slot = CqSlot(win.addr_width)
    m.d.comb += [
        cq_slot.cq_prod.eq(qs.cq_prod),
        cq_slot.cq_cons.eq(cfg.cq_cons),
        cq_slot.cq_log2.eq(cfg.cq_log2),
        cq_slot.cq_base.eq(cfg.cq_base),
    ]
    cqe_issue = Signal()
    return MarkRegs(ack_due, at_epsn, ce_count_sat, unacked_sat, rq_le, holes_r, any_hole,
                    holes, adv_first, hole_finder.first, cq_slot, cqe_issue)


def mark_holes(c: WindowContext, r: MarkRegs):
    """``holes``: the clear bits of the word read, above the marked PSN in
    MARK (the MARK flip-flop and rq_le: no decode of the PSN)."""
    c.m.d.comb += r.holes.eq(~c.b_rd.data & ~(r.rq_le & c.st.MARK.replicate(c.W)))


def mark_states(c: WindowContext, r: MarkRegs):
    """MARK_RD .. COALESCE: set the bit, advance the cumulative PSN, complete."""
    m, fsm, cnt, qs, lw = c.m, c.fsm, c.cnt, c.qs, c.lw
    bm_word, b_wr, holes, holes_r = c.bm_word, c.b_wr, r.holes, r.holes_r
    any_hole, adv_first, at_epsn = r.any_hole, r.adv_first, r.at_epsn
    pending, cqe_free_q, cqe_job = c.pending, c.cqe_free_q, c.cqe_job
    sel_any = pending.sel_any  # an entry is passed
    sel_more = pending.sel_more  # two or more are
    sel = pending.sel_row  # the earliest one's completion

    with fsm.State("MARK_RD"):
        m.d.sync += [c.qs_load.eq(1), bm_word.eq(c.widx(c.rq.psn))]  # for MARK's write
        # The packet is written: its pending entry, if any, is no
        # longer in flight (its slot may be reused from now on).
        fsm.next = "MARK"
    with fsm.State("MARK"):
        m.d.comb += cnt.placed.eq(1)
        # the marked PSN's bit: rq_bit (registered in MARK_RD), no decode
        # of the PSN in front of the bitmap's write data
        new_word = c.b_rd.data | c.rq_bit
        m.d.comb += [b_wr.en.eq(1), b_wr.data.eq(new_word)]
        m.d.sync += [
            bm_word.eq(c.widx(c.q_rd.data.epsn)),
            adv_first.eq(1),
            # The word ADV looks at first is the one written here:
            # ~new_word from the marked bit on.
            holes_r.eq(holes),
            any_hole.eq(holes.any()),
        ]
        m.d.sync += at_epsn.eq(c.rq.psn == c.q_rd.data.epsn)
        fsm.next = "ADV_RD"
    with fsm.State("ADV_RD"):
        # After MARK the word is in holes_r already (this cycle lets
        # the registered completion values settle) unless the marked
        # PSN is not the expected one (no advance); after a retired
        # word the next one is read.
        with m.If(adv_first & ~at_epsn):
            fsm.next = "COALESCE"
        with m.Elif(adv_first):
            fsm.next = "ADV"
        with m.Else():
            fsm.next = "ADV_LD"
    with fsm.State("ADV_LD"):
        m.d.sync += [holes_r.eq(holes), any_hole.eq(holes.any())]
        fsm.next = "ADV_HOLES"
    with fsm.State("ADV_HOLES"):
        # The pending table's hole flags follow the word loaded in ADV_LD.
        fsm.next = "ADV"
    with fsm.State("ADV"):
        # holes_r: the clear bits of the word from epsn on. The next word is
        # set whether or not this one is retired (after a hole, MARK_RD or an
        # ACK's predecessor sets it again before its use).
        m.d.sync += [adv_first.eq(0), bm_word.eq(bm_word + 1)]
        with m.If(any_hole):
            # The first hole is in this word: epsn + (first_hole - b),
            # i.e. its low bits become first_hole (set by COMPLETE,
            # after the selection has followed the passed entries).
            fsm.next = "COMPLETE_GAP2"
        with m.Else():
            # Every PSN left in this word is in: retire the word
            # (epsn + (W - b) is the start of the next one).
            m.d.comb += [b_wr.en.eq(1), b_wr.data.eq(0)]
            m.d.sync += qs.epsn.eq(Cat(Const(0, lw), qs.epsn[lw:] + 1))
            fsm.next = "ADV_RD"
    with fsm.State("COMPLETE"):
        # The CQE of the selected completion, loaded whether or not there is
        # one (the enable is two flip-flops); seen only with cqe_valid, set
        # the cycle after a completion (never COMPLETE). The CQE register
        # free: cqe_free_q.
        msn = qs.msn + 1
        with m.If(cqe_free_q):
            m.d.sync += [
                cqe_job.addr.eq(r.cq_slot.addr),
                cqe_job.msn.eq(msn),
                cqe_job.byte_len.eq(sel.dma_len),
                cqe_job.imm.eq(sel.imm),
                cqe_job.qpn.eq(c.qp),
                cqe_job.status.eq(CQE_STATUS_SUCCESS),
                cqe_job.opcode.eq(sel.opcode),
                cqe_job.phase.eq(r.cq_slot.phase),
            ]
        m.d.sync += qs.epsn[:lw].eq(r.first_hole)
        with m.If(~sel_any):
            fsm.next = "COALESCE"
        with m.Elif(cqe_free_q):
            m.d.sync += qs.msn.eq(msn)
            # The CQE (or the overflow) is decided in the next cycle.
            m.d.sync += r.cqe_issue.eq(sel.imm_flag)
            with m.If(sel_more):
                fsm.next = "COMPLETE_GAP"
            with m.Else():
                fsm.next = "COALESCE"
    with fsm.State("COMPLETE_GAP"):
        # cqe_issue moves cq_prod in this cycle; cq_full and cqe_addr
        # follow it in the next.
        fsm.next = "COMPLETE_GAP2"
    with fsm.State("COMPLETE_GAP2"):
        # After ADV too: the selection, registered from the passed
        # entries, follows them in this cycle.
        fsm.next = "COMPLETE"
    with fsm.State("COALESCE"):
        # ECN echo covers the packets placed since the last ACK.
        with m.If(c.mark_ce):
            m.d.sync += [
                qs.ece.eq(1),
                qs.ce_count.eq(qs.ce_count + ~r.ce_count_sat),
            ]
        m.d.sync += [
            qs.unacked.eq(qs.unacked + ~r.unacked_sat),
            qs.svc_from.eq(c.mark_arrival),  # the ACK's service time counts from it
            bm_word.eq(c.widx(qs.epsn)),  # for ACK0
            c.ack_syn.eq(Syndrome.ACK),
        ]
        # The timer starts at the first unacknowledged packet (an ACK sent
        # now stops it again in ACK3).
        with m.If(~qs.armed):
            m.d.sync += [qs.armed.eq(1), qs.deadline.eq(c.scan.now + c.cfg.ack_t)]
        with m.If(r.ack_due):
            fsm.next = "ACK0"
        with m.Else():
            fsm.next = "WRITEBACK"


def cqe_write(c: WindowContext, r: MarkRegs):
    """The cycle after a completion of a WITH_IMMEDIATE message (COALESCE or
    COMPLETE_GAP): write its CQE, or count the overflow."""
    m, cnt = c.m, c.cnt
    with m.If(r.cqe_issue):
        m.d.sync += r.cqe_issue.eq(0)
        with m.If(~c.cfg.cq_enable | r.cq_slot.full):
            m.d.comb += cnt.cq_overflow.eq(1)
        with m.Else():
            m.d.comb += cnt.cqe_written.eq(1)
            m.d.sync += [c.cqe_valid.eq(1), c.qs.cq_prod.eq(c.qs.cq_prod + 1)]

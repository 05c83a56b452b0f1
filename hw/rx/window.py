"""The responder's per-QP PSN window: duplicate and window checks, the receive
bitmap, the cumulative PSN, message completion and ACK coalescing.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from hw.headers import Opcode
from hw.pipeline import OneHotFSM, load_in_groups, state_copy
from hw.protocol import PSN_BITS, Syndrome

from .dma import DmaDone, WriteCmd
from .layouts import (
    CQE_STATUS_SUCCESS,
    MAX_PENDING,
    AckJob,
    CqeJob,
    QpConfig,
    QpRxState,
    ReqKind,
    WindowReq,
)
from .window_ack import AckReader
from .window_advance import CqSlot, FirstHole
from .window_scan import TimerScan
from .window_tables import InFlightTable, PendingTable

__all__ = ["MAX_PENDING", "QpRxState", "RxPsnWindow", "WINDOW_COUNTERS", "ring_bits_for"]

AETH_ACK = Syndrome.ACK
NAK_TRIMMED = Syndrome.NAK_TRIMMED

WINDOW_COUNTERS = (
    "placed",
    "duplicate",
    "out_of_window",
    "wimm_full",
    "dma_error",
    "trimmed",
    "cqe_written",
    "cq_overflow",
    "acks_sent",
    "naks_sent",
    "probes_answered",
    "cq_full",
    "trim_stale",
)


def ring_bits_for(mpr_max: int, sack_bits: int) -> int:
    """Bits of receive bitmap per QP: the window plus one word, to a power of two."""
    return 1 << ceil_log2(mpr_max + sack_bits)


class RxPsnWindow(wiring.Component):
    """Per-QP PSN window, completion and ACK-coalescing engine (the responder's state).

    Interface
    ---------
    ``req``      In(stream.Signature(WindowReq)): validated frames, in order.
    ``place``    Out(stream.Signature(WriteCmd)): exactly one command per
                 ``req`` with ``payload_len > 0``, in ``req`` order: a write
                 (``notify``, ``tag`` = in-flight slot) for an accepted packet,
                 else a discard.
    ``done``     In(stream.Signature(DmaDone)): the B verdict of each placed
                 packet; only then is its PSN marked received. The engine
                 reads the verdict in IDLE and acknowledges it in the next
                 cycle: ``done.ready`` is a flip-flop, set for the one cycle
                 after IDLE took the verdict (the stream rules hold the
                 verdict and ``done.valid`` until then), so no logic of
                 ``done.valid`` comes back to the producer's stage.
    ``ack``      Out(stream.Signature(AckJob)): ACKs, NAKs, probe responses.
    ``cqe``      Out(stream.Signature(CqeJob)): receive completions.
    ``cfg_addr`` / ``cfg``: a 1-cycle lookup into the QP configuration.
    ``init``     In(stream.Signature(...)): (qp, epsn): clear the QP's bitmap
                 and state and set its expected PSN (host writes ``QP_EPSN``);
                 ``init_busy`` holds frame checks until it has arrived.
    ``counters`` Out: a one-cycle strobe per ``WINDOW_COUNTERS`` event.

    Addresses (``req.va``, ``place.addr``, ``cqe.addr``, the CQ base) are
    ``addr_width`` bits (32..64); a CQE's address, CQ base + slot x 32,
    wraps within them.

    Window: a PSN ``p`` of QP q with expected PSN ``e`` (= cum_psn + 1) is
    *new* when ``d = (p - e) mod 2^24`` is below the QP's window
    ``min(MPR x 128, mpr_max)`` (MPR = 0 reads as ``mpr_max``) and its bit
    is clear and it is not in flight; a *duplicate* when ``d >= 2^23`` (at
    or before cum_psn) or its bit is set or it is in flight; *out of window*
    otherwise. The bitmap of a QP is a ring of ``ring_bits`` bits indexed by
    the low PSN bits, in words of ``sack_bits``; a word is cleared when the
    cumulative PSN leaves it, so it is clean when the window reaches it again
    and the ring is consistent across the 2^24 wrap.

    Completion: every LAST/ONLY packet (with or without immediate) is held in
    a table of ``max_pending`` entries from acceptance until the cumulative
    PSN passes it; then MSN advances and, for a WITH_IMMEDIATE message, a CQE
    is issued. Passing several at once completes them in PSN order. A LAST
    packet is dropped (counted ``wimm_full``) when no entry is free, or when
    fewer than two are and it is not at the expected PSN: one entry stays for
    the LAST packet at the expected PSN, so the table never fills with
    messages that wait for a hole which is itself a LAST packet. A
    WITH_IMMEDIATE LAST packet is dropped (counted ``cq_full``) when its QP's
    CQ has no slot left for it: the CQEs written and not yet consumed
    (``cq_prod - cq_cons``) plus the QP's WITH_IMMEDIATE entries in the table
    fill the ring, or the ring is disabled. Neither drop is acknowledged, so
    the sender resends the packet like a loss; a message accepted has its
    CQE's slot, and ``cq_overflow`` counts only a CQE whose slot the host took
    back meanwhile (ring disabled, shrunk, or ``cq_cons`` moved past it).

    ACK coalescing: after a placed packet, an ACK goes out when AckReq is set
    or ``unacked`` reaches ``ACK_N`` (0 reads as 1); otherwise a timer of
    ``ACK_T`` cycles starts at the first unacknowledged packet, and a scan
    over the QPs sends the ACK once it expires. A duplicate is acknowledged
    at once; a NAK is sent at once. Every ACK/NAK resets the coalescing state.

    Latency (cycles, from the input being valid with the engine idle): check
    3 (+1 to issue ``place``); mark 4, plus 2 for the first bitmap word the
    cumulative PSN advances over and 4 per further word, plus 1 per
    completion (1 if there is none, and 2 gap cycles between two completions
    of one advance; a CQE is issued the cycle after its completion); an ACK
    adds 5 (4 before the bitmap's selection took two registered steps); a
    DMA error 2; a timer scan of one QP 4. Every decision is made
    from registered values (the checks are registered in CHECK, whether the
    marked PSN is the expected one in MARK, the ACK due in the cycle before
    COALESCE, a timer's expiry in SCAN, the accepted packet enters the tables
    in WRITEBACK with its PSN order against the pending entries, the passed
    completions are registered during the advance and the earliest of them
    in the cycle after), for 125 MHz on the ECP5. The state machine is
    one-hot (``OneHotFSM``), and the wide registers load under a state's
    flip-flop or a valid flag, not a decode: the request in IDLE, the ACK job
    while ``ack`` is not valid (``AckReader``: an ACK is built once both
    bitmap words are registered and shifted by whole bytes towards the
    expected PSN).

    Sub-components (docs/rx.md, "Inside ``RxPsnWindow``"): ``InFlightTable``
    (window_tables.py) holds the packets between check and B verdict;
    ``PendingTable`` (window_tables.py) the LAST packets until their
    completion, and which of them an advance passed, earliest first;
    ``FirstHole`` and ``CqSlot`` (window_advance.py) the first hole of the
    word advanced over and the next CQE's slot; ``TimerScan``
    (window_scan.py) the time and the ACK-timer scan; ``AckReader``
    (window_ack.py) the ACK job and the bitmap it carries.
    Throughput: one operation at a time; a packet costs about 11 cycles of
    engine time, far less than its payload takes on the datapath at any
    MTU >= 256.
    """

    def __init__(self, *, num_qps=16, sack_bits=64, mpr_max=1024, inflight=8,
                 max_pending=MAX_PENDING,
                 addr_width=64):
        if num_qps < 2 or num_qps & (num_qps - 1) or num_qps > 4096:
            raise ValueError(f"num_qps must be a power of two in 2..4096, not {num_qps!r}")
        if sack_bits not in (32, 64, 128, 256):
            raise ValueError(f"sack_bits must be 32, 64, 128 or 256, not {sack_bits!r}")
        if mpr_max % 128 or not 128 <= mpr_max <= 32640:
            raise ValueError(f"mpr_max must be a multiple of 128 in 128..32640, not {mpr_max!r}")
        if inflight < 2 or inflight & (inflight - 1):
            raise ValueError(f"inflight must be a power of two >= 2, not {inflight!r}")
        if not 1 <= max_pending <= 64:
            raise ValueError(f"max_pending must be 1..64, not {max_pending!r}")
        self.num_qps = num_qps
        self.qp_bits = exact_log2(num_qps)
        self.sack_bits = sack_bits
        self.mpr_max = mpr_max
        self.inflight = inflight
        self.max_pending = max_pending
        self.addr_width = addr_width
        self.ring_bits = ring_bits_for(mpr_max, sack_bits)
        self.ring_words = self.ring_bits // sack_bits
        self.tag_bits = exact_log2(inflight)
        super().__init__(
            {
                "req": In(stream.Signature(WindowReq(self.qp_bits, addr_width))),
                "place": Out(stream.Signature(WriteCmd(self.tag_bits, addr_width))),
                "done": In(stream.Signature(DmaDone(self.tag_bits))),
                "ack": Out(stream.Signature(AckJob(sack_bits))),
                "cqe": Out(stream.Signature(CqeJob(addr_width))),
                "cfg_addr": Out(self.qp_bits),
                "cfg": In(QpConfig(addr_width)),
                "init": In(
                    stream.Signature(
                        data.StructLayout({"qp": unsigned(self.qp_bits), "epsn": unsigned(24)})
                    )
                ),
                "init_busy": In(1),
                "counters": Out(data.StructLayout({n: unsigned(1) for n in WINDOW_COUNTERS})),
            }
        )

    def elaborate(self, platform):
        m = Module()
        W = self.sack_bits
        lw = exact_log2(W)
        lr = exact_log2(self.ring_words)
        qpb = self.qp_bits
        cnt = self.counters

        m.submodules.qstate = qmem = Memory(shape=QpRxState(), depth=self.num_qps, init=[])
        m.submodules.bitmap = bmem = Memory(
            shape=unsigned(W), depth=self.num_qps * self.ring_words, init=[]
        )
        q_rd = qmem.read_port()
        q_wr = qmem.write_port()
        b_rd = bmem.read_port()
        b_wr = bmem.write_port()

        # The time, which QP the next timer scan looks at, and whether it is due.
        m.submodules.scan = scan = TimerScan(qpb)
        now = scan.now

        def widx(psn):
            return psn[lw : lw + lr]

        # ---- the operation being worked on. Data registers that are read only
        # after being loaded (or with their valid) have no reset, which leaves
        # their flip-flops' LSR pin free to clear fields without a LUT.
        qp = Signal(qpb)
        rq = Signal(WindowReq(qpb, self.addr_width), reset_less=True)
        qs = Signal(QpRxState())
        cfg = Signal(QpConfig(self.addr_width), reset_less=True)
        bm_word = Signal(lr)  # bitmap word index being read (written in MARK, ADV)
        # The cycle after IDLE reads the word of rq.psn, loaded in IDLE (CHECK_RD
        # and MARK_RD need it; the other states after IDLE read no bitmap word).
        after_idle = Signal()
        m.d.comb += [
            q_rd.addr.eq(qp),
            self.cfg_addr.eq(qp),
            b_rd.addr.eq(Cat(Mux(after_idle, widx(rq.psn), bm_word), qp)),
            q_wr.addr.eq(qp),
            q_wr.data.eq(qs),
            b_wr.addr.eq(Cat(bm_word, qp)),
        ]

        # ---- in-flight table: accepted packets between check and mark
        m.submodules.inflight = flight = InFlightTable(qp_bits=qpb, slots=self.inflight)
        m.d.comb += [
            flight.request.qp.eq(rq.qp),
            flight.request.psn.eq(rq.psn),
            flight.request.ackreq.eq(rq.ackreq),
            flight.request.ce.eq(rq.ce),
            flight.read_slot.eq(self.done.payload.tag),
        ]
        f_rd_data = flight.read_row
        # (the slot entered in WRITEBACK, one-hot; set in CHECK_X)
        flight_enter = Signal(self.inflight)
        m.d.comb += flight.enter.eq(flight_enter)

        # ---- pending LAST packets, and which of them an advance passed
        m.submodules.pending = pending = PendingTable(
            qp_bits=qpb, tag_bits=self.tag_bits, entries=self.max_pending, sack_bits=W,
            ring_words=self.ring_words)

        # ---- outputs are registers, each emptied by its consumer
        place_valid = Signal()
        place_cmd = Signal(WriteCmd(self.tag_bits, self.addr_width), reset_less=True)
        m.d.comb += [self.place.valid.eq(place_valid), self.place.payload.eq(place_cmd)]
        with m.If(self.place.ready):
            m.d.sync += place_valid.eq(0)
        # The ACK job register and the bitmap it carries: AckReader.
        m.submodules.ack_reader = ack_reader = AckReader(
            sack_bits=W, qp_bits=qpb, addr_width=self.addr_width)
        wiring.connect(m, ack_reader.ack, wiring.flipped(self.ack))
        ack_valid = self.ack.valid
        cqe_valid = Signal()
        cqe_job = Signal(CqeJob(self.addr_width), reset_less=True)
        m.d.comb += [self.cqe.valid.eq(cqe_valid), self.cqe.payload.eq(cqe_job)]
        with m.If(self.cqe.ready):
            m.d.sync += cqe_valid.eq(0)
        # ~cqe_valid a cycle late, for COMPLETE: cqe_valid rises only the
        # cycle after a completion's cqe_issue (COMPLETE_GAP or COALESCE),
        # which COMPLETE never directly follows, so cqe_free_q implies
        # ~cqe_valid in COMPLETE; a CQE taken makes COMPLETE wait one cycle
        # more. COMPLETE's enables are then flip-flops and sel_any, not a LUT
        # of cqe_valid (docs/timing.md#rx-window)
        cqe_free_q = Signal()
        m.d.sync += cqe_free_q.eq(~cqe_valid)

        # ---- the checks of CHECK_X, registered in CHECK from the request, the
        # QP row and the bitmap word as they are read (the tables do not change
        # between CHECK and CHECK_X), so CHECK_X only combines flags.
        d = Signal(PSN_BITS)  # (psn - epsn) mod 2^24
        window_psns = Signal(range(self.mpr_max + 1))
        bit_set = Signal()
        flight_hit = Signal()
        is_last = Signal()
        has_imm = Signal()
        discard = Signal()  # a payload to drain if the packet is not placed
        chk_slot = Signal(self.tag_bits)
        chk_pend_free = Signal(range(self.max_pending))
        # CHECK's verdicts on room for a LAST packet: no pending entry for it
        # (an out-of-order one needs two free, so one stays for the LAST
        # packet at the expected PSN), and no free slot in its QP's CQ.
        chk_pend_no_room = Signal()
        chk_cq_no_room = Signal()
        # The QP's WITH_IMMEDIATE entries in the pending table, registered in
        # CHECK_RD from rq.qp (loaded in IDLE) and the entries (unchanged from
        # IDLE to WRITEBACK).
        pend_imm_q = Signal(range(self.max_pending + 1))
        # CHECK_X's decisions from flip-flops, registered in CHECK: the request's
        # kind, one flag each (DROP and unknown kinds: none), and the free in-flight
        # slot and pending entry one-hot (the enter vectors, set in CHECK_X, need
        # no decode of chk_slot or chk_pend_free)
        chk_kind = {k: Signal(name=f"chk_kind_{k.name.lower()}")
                    for k in (ReqKind.DATA, ReqKind.TRIM, ReqKind.NAK, ReqKind.PROBE)}
        chk_kind_other = Signal()
        chk_slot_oh = Signal(self.inflight)
        chk_pend_oh = Signal(self.max_pending)
        done_tag = Signal(self.tag_bits)  # the in-flight slot of the B verdict being handled
        # done.ready: set the cycle after IDLE takes a B verdict (in MARK_RD or
        # DMA_ERROR, the only states its branch goes to), when the transfer
        # happens; a flip-flop, so the done stage's flags and enables (the
        # skid's load, reset of its spare flag) have no LUT of done.valid
        # and the IDLE decision in front (docs/timing.md#rx-window).
        done_ack = Signal()
        # CHECK_X accepted the packet: WRITEBACK, next, enters it in the tables
        # at its in-flight slot and (a LAST packet) pending entry, one-hot.
        accept = Signal()
        pend_enter = Signal(self.max_pending)
        mpr_psns = Cat(Const(0, 7), self.cfg.mpr)
        d_c = Signal(24)
        window_psns_c = Signal(range(self.mpr_max + 1))
        m.d.comb += [
            d_c.eq(rq.psn - q_rd.data.epsn),
            window_psns_c.eq(
                Mux((self.cfg.mpr == 0) | (mpr_psns > self.mpr_max), self.mpr_max, mpr_psns)
            ),
        ]
        inside = Signal()  # d < window_psns
        # rq.psn's position in its word, one-hot, registered from rq (loaded in
        # IDLE) every cycle like rq_le below, so valid from CHECK_RD and MARK_RD
        # on: CHECK's bit_set is an AND-OR of it with the word read (3 LUT
        # levels for 32 bits) rather than a 32:1 mux selected by rq.psn (7 LUT
        # levels; docs/timing.md#rx-window), and MARK's marked bit is this
        # register rather than a LUT of rq_le.
        rq_bit = Signal(W)
        m.d.sync += rq_bit.eq(Cat(rq.psn[:lw] == i for i in range(W)))
        chk_values = [
            d.eq(d_c),
            window_psns.eq(window_psns_c),
            inside.eq(d_c < window_psns_c),
            bit_set.eq((b_rd.data & rq_bit).any()),
            flight_hit.eq(flight.hit),
            is_last.eq(
                Cat(*[rq.opcode == op for op in (
                    Opcode.WRITE_LAST, Opcode.WRITE_LAST_IMM, Opcode.WRITE_ONLY,
                    Opcode.WRITE_ONLY_IMM
                )]).any()
            ),
            has_imm.eq(
                (rq.opcode == Opcode.WRITE_LAST_IMM) | (rq.opcode == Opcode.WRITE_ONLY_IMM)
            ),
            discard.eq(rq.payload_len != 0),
            chk_slot.eq(flight.free_slot),
            chk_pend_free.eq(pending.free_slot),
            chk_pend_no_room.eq(
                ~pending.any_free | ((rq.psn != q_rd.data.epsn) & ~pending.two_free)
            ),
            chk_cq_no_room.eq(~self.cfg.cq_enable | (
                (q_rd.data.cq_prod - self.cfg.cq_cons + pend_imm_q)[:16]
                & (Const(0xFFFF, 16) << self.cfg.cq_log2)[:16]
            ).any()),
            chk_kind_other.eq(~Cat(rq.kind == k for k in chk_kind).any()),
            chk_slot_oh.eq(flight.free_onehot),
            chk_pend_oh.eq(pending.free_onehot),
        ] + [chk_kind[k].eq(rq.kind == k) for k in chk_kind]
        # WRITEBACK enters an accepted packet in the tables' LUT RAM rows.
        m.d.comb += [
            flight.write_slot.eq(chk_slot),
            pending.write_slot.eq(chk_pend_free),
            pending.row.imm_flag.eq(has_imm),
            pending.row.opcode.eq(rq.opcode),
            pending.row.imm.eq(rq.imm),
            pending.row.dma_len.eq(rq.dma_len),
            pending.request.qp.eq(rq.qp),
            pending.request.psn.eq(rq.psn),
            pending.request.imm.eq(has_imm),
            pending.request.tag.eq(chk_slot),
            pending.qp.eq(qp),
            pending.epsn.eq(qs.epsn),
            pending.tag.eq(done_tag),
        ]
        # An ACK is due when unacked + 1 >= ACK_N (0 reads as 1), i.e. when
        # unacked >= ack_thr; registered from the QP's lookup (the same QP
        # since IDLE, valid from ADV_RD on), and ack_due from it and the QP's
        # row (loaded in MARK) in the cycle before COALESCE.
        ack_thr = Signal(8)
        m.d.sync += ack_thr.eq(Mux(self.cfg.ack_n == 0, 0, self.cfg.ack_n - 1))

        # The syndrome of the ACK/NAK to send. An ACK carries cum_psn; a NAK
        # (only from CHECK_X) the PSN of the request, rq.psn.
        ack_syn = Signal(8)
        ack_is_ack = ack_reader.is_ack  # ack_syn is an ACK, registered with it
        m.d.comb += [
            ack_reader.word.eq(b_rd.data),
            ack_reader.qp_state.eq(qs),
            ack_reader.cfg.eq(cfg),
            ack_reader.request.eq(rq),
            ack_reader.syndrome.eq(ack_syn),
        ]

        # Advance bookkeeping
        mark_ackreq = Signal()
        ack_due = Signal()  # COALESCE sends an ACK (AckReq or ACK_N reached)
        m.d.sync += ack_due.eq(mark_ackreq | ~(qs.unacked < ack_thr))
        at_epsn = Signal()  # the marked PSN is the expected one: ADV_RD advances, from MARK
        mark_ce = Signal()
        # COALESCE's saturating counts, registered from the QP's row (loaded in
        # MARK, unchanged until COALESCE).
        ce_count_sat = Signal()
        unacked_sat = Signal()
        m.d.sync += [ce_count_sat.eq(qs.ce_count == 0xFFFF), unacked_sat.eq(qs.unacked == 0xFF)]

        scan_due_ack = scan.expired  # SCAN found the QP's ACK timer expired (decided in SCAN_X)
        m.d.comb += scan.row.eq(q_rd.data)

        # ---- completion: which pending LAST packets the advance passed, and in
        # which PSN order (PendingTable), all from registers so COMPLETE is
        # shallow.
        P = self.max_pending
        ones = (1 << W) - 1
        # The positions at or below rq.psn in its word, for the pending entry
        # WRITEBACK fills, registered from rq, which holds from IDLE to
        # WRITEBACK: the decode of the PSN is not in front of every entry's
        # positions, nor rq's fan-out. MARK, after MARK_RD, also takes the
        # marked bit and the hole mask from it.
        rq_le = Signal(W)
        m.d.sync += rq_le.eq(Const(ones, W) >> ~rq.psn[:lw])
        holes_r = Signal(W)  # the clear bits of the word ADV works on, from epsn on
        any_hole = Signal()  # holes_r.any(), registered with it
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
        first_hole = hole_finder.first
        adv_first = Signal()  # ADV is at the word of the PSN just marked
        sel_any = pending.sel_any  # an entry is passed
        sel_more = pending.sel_more  # two or more are
        sel = pending.sel_row  # the earliest one's completion

        # The CQ slot of the next completion, registered from qs and cfg (valid
        # two cycles after MARK loads them, and one cycle after cq_prod moves).
        m.submodules.cq_slot = cq_slot = CqSlot(self.addr_width)
        m.d.comb += [
            cq_slot.cq_prod.eq(qs.cq_prod),
            cq_slot.cq_cons.eq(cfg.cq_cons),
            cq_slot.cq_log2.eq(cfg.cq_log2),
            cq_slot.cq_base.eq(cfg.cq_base),
        ]
        cq_full, cqe_addr, cqe_phase = cq_slot.full, cq_slot.addr, cq_slot.phase
        cqe_issue = Signal()  # COMPLETE passed a WITH_IMMEDIATE message: CQE next cycle

        init_word = Signal(lr + 1)
        init_epsn = Signal(24, reset_less=True)  # the init's EPSN, loaded in IDLE
        # INIT is at its last word (a flip-flop, so the QP row's write enable is
        # one from flip-flops, no compare of init_word in front of it)
        init_last = Signal()

        qs_load = Signal()  # CHECK, MARK or SCAN: the QP's row arrives (set a cycle ahead)
        m.d.sync += qs_load.eq(0)

        # The engine's states (hw.pipeline.OneHotFSM, one flip-flop per state):
        # "in state X" is a flip-flop, not a decode of an encoded state, so the
        # enables and mux selects it drives start at a register. A state's
        # transitions exclude each other.
        STATES = ("IDLE", "DMA_ERROR", "DMA_ERROR2", "INIT", "CHECK_RD", "CHECK", "CHECK_X",
                  "PROBE", "MARK_RD", "MARK", "ADV_RD", "ADV_LD", "ADV_HOLES", "ADV", "COMPLETE",
                  "COMPLETE_GAP", "COMPLETE_GAP2", "COALESCE", "WRITEBACK", "SCAN_RD", "SCAN",
                  "SCAN_X", "ACK0", "ACK1", "ACK2", "ACK_SH", "ACK3")
        fsm = OneHotFSM(m, STATES, "IDLE")
        st, state, goto = fsm.st, fsm.state, fsm.goto
        m.d.comb += scan.check.eq(st.SCAN)
        m.d.sync += after_idle.eq(st.IDLE)
        m.d.comb += holes.eq(~b_rd.data & ~(rq_le & st.MARK.replicate(W)))

        # CHECK, MARK and SCAN load the QP's row and configuration as they
        # arrive. CHECK remembers where the peer's frames come from, for ACKs
        # (and a probe's answer); kept for DATA, TRIM and NAK (written back).
        # No state that writes the row runs while it arrives.
        with m.If(qs_load):
            from_req = st.CHECK
            m.d.sync += [
                qs.eq(q_rd.data),
                qs.ev.eq(Mux(from_req, rq.ev, q_rd.data.ev)),
                qs.mac.eq(Mux(from_req, rq.mac, q_rd.data.mac)),
                cfg.eq(self.cfg),
            ]

        m.d.comb += self.done.ready.eq(done_ack)
        m.d.sync += done_ack.eq(0)
        with state("IDLE"):
            # The operation's registers load in IDLE whatever it starts (IDLE lasts
            # one cycle and each path reads only what it needs of them), so the
            # flip-flop of IDLE is their enable. A B verdict is taken whenever
            # done.valid (else a scan is due and nothing reads them), a request
            # only without it.
            psn_in = Mux(self.done.valid, f_rd_data.psn, self.req.payload.psn)
            m.d.sync += [
                rq.eq(self.req.payload),
                rq.psn.eq(psn_in),
                init_epsn.eq(self.init.payload.epsn),
                done_tag.eq(self.done.payload.tag),
                mark_ackreq.eq(f_rd_data.ackreq),
                mark_ce.eq(f_rd_data.ce),
            ]
            start_check = (
                self.req.valid
                & ~place_valid
                & ~self.init_busy
                & ((self.req.payload.kind != ReqKind.DATA) | flight.any_free)
            )
            scan_due = scan.due
            with m.If(self.init.valid):
                m.d.comb += self.init.ready.eq(1)
                # (the QP's pending entries are dropped in INIT)
                m.d.sync += [
                    qp.eq(self.init.payload.qp),
                    init_word.eq(0),
                    init_last.eq(self.ring_words == 1),
                ]
                goto("INIT")
            with m.Elif(self.done.valid & ~scan_due):
                # (acknowledged in the next cycle: done_ack)
                m.d.sync += done_ack.eq(1)
                m.d.comb += scan.count.eq(1)
                # (its in-flight slot is freed in the next state, MARK_RD or
                # DMA_ERROR, from done_tag)
                m.d.sync += qp.eq(f_rd_data.qp)
                with m.If(self.done.payload.ok):
                    goto("MARK_RD")
                with m.Else():
                    m.d.comb += cnt.dma_error.eq(1)
                    goto("DMA_ERROR")
            with m.Elif(start_check & ~scan_due):
                m.d.comb += [self.req.ready.eq(1), scan.count.eq(1)]
                m.d.sync += qp.eq(self.req.payload.qp)
                goto("CHECK_RD")
            with m.Else():
                m.d.sync += qp.eq(scan.qp)
                m.d.comb += scan.start.eq(1)
                goto("SCAN_RD")

        # The B verdict's in-flight slot is freed the cycle after IDLE takes
        # it, in MARK_RD or DMA_ERROR (one-hot flip-flops, the only states
        # IDLE's verdict branch goes to) from done_tag (registered in IDLE):
        # done.ready (a LUT of done.valid far from the slots) is no longer in
        # the slots' clock enables (docs/timing.md#rx-window). any_free,
        # registered from the slots, sees the free slot by the next IDLE as
        # before (neither path returns to IDLE in fewer than three cycles).
        m.d.comb += [flight.release.eq(st.MARK_RD | st.DMA_ERROR), flight.release_slot.eq(done_tag)]

        with state("DMA_ERROR"):
            # The packet is lost: forget its completion (its pending entry
            # is the one in flight in its slot; the match is registered here
            # and applied in the next cycle).
            goto("DMA_ERROR2")
        with state("DMA_ERROR2"):
            goto("IDLE")

        with state("INIT"):
            # The QP's pending entries are dropped (in every cycle of INIT: no
            # entry is entered or read meanwhile).
            m.d.comb += [b_wr.en.eq(1), b_wr.data.eq(0)]
            m.d.sync += [
                init_word.eq(init_word + 1),
                init_last.eq(init_word == self.ring_words - 2),
            ]
            m.d.comb += b_wr.addr.eq(Cat(init_word[:lr], qp))
            with m.If(init_last):
                m.d.comb += q_wr.en.eq(1)
                goto("IDLE")
        # INIT sets the QP's row (written in its last cycle) to zero but the
        # EPSN, in every one of its cycles (ring_words >= 2 of them, as the
        # ring holds the window and one word more): the row's flip-flops
        # load under copies of INIT's flip-flop, each the enable of at most
        # 64 bits (no cycle added). Loaded in IDLE as the init was taken, they
        # had one LUT of the RX registers' init valid as the enable of all 178
        # bits (docs/timing.md#rx-window).
        init_copies = [state_copy(m, st.IDLE & self.init.valid, init_last, f"init_copy{k}")
                       for k in range((len(qs.as_value()) + 63) // 64)]
        init_row = Signal(QpRxState())
        m.d.comb += init_row.epsn.eq(init_epsn)
        load_in_groups(m, [(qs, init_row)], lambda k: init_copies[k])

        # ---- check: duplicate, window, then place or discard
        with state("CHECK_RD"):
            m.d.sync += [
                qs_load.eq(1),
                pend_imm_q.eq(pending.imm_count),
            ]
            goto("CHECK")
        with state("CHECK"):
            m.d.sync += chk_values
            goto("CHECK_X")
        with state("CHECK_X"):
            m.d.sync += [
                bm_word.eq(widx(qs.epsn)),  # for ACK0
                place_cmd.addr.eq(rq.va),
                place_cmd.len.eq(rq.payload_len),
                place_cmd.discard.eq(1),
                place_cmd.notify.eq(0),
                place_cmd.inline.eq(0),
                place_cmd.tag.eq(chk_slot),
                ack_syn.eq(AETH_ACK),
            ]
            # (the kinds' flags exclude each other)
            with m.If(chk_kind[ReqKind.DATA]):
                # The bit is only meaningful inside the window: beyond it the
                # ring aliases PSNs of the current window.
                with m.If(d[23] | (inside & (bit_set | flight_hit))):
                    m.d.comb += cnt.duplicate.eq(1)
                    m.d.sync += place_valid.eq(discard)
                    goto("ACK0")
                with m.Elif(~inside):
                    m.d.comb += cnt.out_of_window.eq(1)
                    m.d.sync += place_valid.eq(discard)
                    goto("WRITEBACK")
                with m.Elif(is_last & chk_pend_no_room):
                    m.d.comb += cnt.wimm_full.eq(1)
                    m.d.sync += place_valid.eq(discard)
                    goto("WRITEBACK")
                with m.Elif(has_imm & chk_cq_no_room):
                    # Not acknowledged until its CQE has a slot: the sender
                    # resends it (a completion is never lost once acknowledged).
                    m.d.comb += cnt.cq_full.eq(1)
                    m.d.sync += place_valid.eq(discard)
                    goto("WRITEBACK")
                with m.Else():
                    # Accepted: in flight until its B response (the
                    # tables are written in WRITEBACK, next).
                    m.d.sync += [
                        accept.eq(1),
                        flight_enter.eq(chk_slot_oh),
                        pend_enter.eq(chk_pend_oh & is_last.replicate(P)),
                    ]
                    m.d.sync += [
                        place_valid.eq(1),
                        place_cmd.discard.eq(0),
                        place_cmd.notify.eq(1),
                    ]
                    goto("WRITEBACK")
            with m.If(chk_kind[ReqKind.TRIM]):
                m.d.sync += place_valid.eq(discard)
                # Only a trim of a PSN still awaited (inside the window, not
                # received, not being written) is answered; any other is
                # stale (late or forged) and changes nothing.
                with m.If(d[23] | ~inside | bit_set | flight_hit):
                    m.d.comb += cnt.trim_stale.eq(1)
                    goto("WRITEBACK")
                with m.Elif(cfg.trim_nack):
                    m.d.comb += cnt.trimmed.eq(1)
                    m.d.sync += ack_syn.eq(NAK_TRIMMED)
                    goto("ACK0")
                with m.Else():
                    m.d.comb += cnt.trimmed.eq(1)
                    goto("WRITEBACK")
            with m.If(chk_kind[ReqKind.NAK]):
                m.d.sync += [place_valid.eq(discard), ack_syn.eq(rq.syndrome)]
                goto("ACK0")
            with m.If(chk_kind[ReqKind.PROBE]):
                m.d.sync += place_valid.eq(discard)
                goto("PROBE")
            with m.If(chk_kind_other):
                m.d.sync += place_valid.eq(discard)
                goto("IDLE")

        with state("PROBE"):
            with m.If(~ack_valid):
                # (ack_job follows the probe's answer while ack_valid is clear)
                m.d.comb += [cnt.probes_answered.eq(1), ack_reader.send.eq(1)]
                goto("IDLE")

        # ---- mark: set the bit, advance the cumulative PSN, complete
        with state("MARK_RD"):
            m.d.sync += [qs_load.eq(1), bm_word.eq(widx(rq.psn))]  # for MARK's write
            # The packet is written: its pending entry, if any, is no
            # longer in flight (its slot may be reused from now on).
            goto("MARK")
        with state("MARK"):
            m.d.comb += cnt.placed.eq(1)
            # the marked PSN's bit: rq_bit (registered in MARK_RD), no decode
            # of the PSN in front of the bitmap's write data
            new_word = b_rd.data | rq_bit
            m.d.comb += [b_wr.en.eq(1), b_wr.data.eq(new_word)]
            m.d.sync += [
                bm_word.eq(widx(q_rd.data.epsn)),
                adv_first.eq(1),
                # The word ADV looks at first is the one written here:
                # ~new_word from the marked bit on.
                holes_r.eq(holes),
                any_hole.eq(holes.any()),
            ]
            m.d.sync += at_epsn.eq(rq.psn == q_rd.data.epsn)
            goto("ADV_RD")
        with state("ADV_RD"):
            # After MARK the word is in holes_r already (this cycle lets
            # the registered completion values settle) unless the marked
            # PSN is not the expected one (no advance); after a retired
            # word the next one is read.
            with m.If(adv_first & ~at_epsn):
                goto("COALESCE")
            with m.Elif(adv_first):
                goto("ADV")
            with m.Else():
                goto("ADV_LD")
        with state("ADV_LD"):
            m.d.sync += [holes_r.eq(holes), any_hole.eq(holes.any())]
            goto("ADV_HOLES")
        with state("ADV_HOLES"):
            # The pending table's hole flags follow the word loaded in ADV_LD.
            goto("ADV")
        with state("ADV"):
            # holes_r: the clear bits of the word from epsn on. The next word is
            # set whether or not this one is retired (after a hole, MARK_RD or an
            # ACK's predecessor sets it again before its use).
            m.d.sync += [adv_first.eq(0), bm_word.eq(bm_word + 1)]
            with m.If(any_hole):
                # The first hole is in this word: epsn + (first_hole - b),
                # i.e. its low bits become first_hole (set by COMPLETE,
                # after the selection has followed the passed entries).
                goto("COMPLETE_GAP2")
            with m.Else():
                # Every PSN left in this word is in: retire the word
                # (epsn + (W - b) is the start of the next one).
                m.d.comb += [b_wr.en.eq(1), b_wr.data.eq(0)]
                m.d.sync += qs.epsn.eq(Cat(Const(0, lw), qs.epsn[lw:] + 1))
                goto("ADV_RD")
        with state("COMPLETE"):
            # The CQE of the selected completion, loaded whether or not there is
            # one (the enable is two flip-flops); seen only with cqe_valid, set
            # the cycle after a completion (never COMPLETE). The CQE register
            # free: cqe_free_q.
            msn = qs.msn + 1
            with m.If(cqe_free_q):
                m.d.sync += [
                    cqe_job.addr.eq(cqe_addr),
                    cqe_job.msn.eq(msn),
                    cqe_job.byte_len.eq(sel.dma_len),
                    cqe_job.imm.eq(sel.imm),
                    cqe_job.qpn.eq(qp),
                    cqe_job.status.eq(CQE_STATUS_SUCCESS),
                    cqe_job.opcode.eq(sel.opcode),
                    cqe_job.phase.eq(cqe_phase),
                ]
            m.d.sync += qs.epsn[:lw].eq(first_hole)
            with m.If(~sel_any):
                goto("COALESCE")
            with m.Elif(cqe_free_q):
                m.d.sync += qs.msn.eq(msn)
                # The CQE (or the overflow) is decided in the next cycle.
                m.d.sync += cqe_issue.eq(sel.imm_flag)
                with m.If(sel_more):
                    goto("COMPLETE_GAP")
                with m.Else():
                    goto("COALESCE")
        with state("COMPLETE_GAP"):
            # cqe_issue moves cq_prod in this cycle; cq_full and cqe_addr
            # follow it in the next.
            goto("COMPLETE_GAP2")
        with state("COMPLETE_GAP2"):
            # After ADV too: the selection, registered from the passed
            # entries, follows them in this cycle.
            goto("COMPLETE")
        with state("COALESCE"):
            # ECN echo covers the packets placed since the last ACK.
            with m.If(mark_ce):
                m.d.sync += [
                    qs.ece.eq(1),
                    qs.ce_count.eq(qs.ce_count + ~ce_count_sat),
                ]
            m.d.sync += [
                qs.unacked.eq(qs.unacked + ~unacked_sat),
                bm_word.eq(widx(qs.epsn)),  # for ACK0
                ack_syn.eq(AETH_ACK),
            ]
            # The timer starts at the first unacknowledged packet (an ACK sent
            # now stops it again in ACK3).
            with m.If(~qs.armed):
                m.d.sync += [qs.armed.eq(1), qs.deadline.eq(now + cfg.ack_t)]
            with m.If(ack_due):
                goto("ACK0")
            with m.Else():
                goto("WRITEBACK")

        with state("WRITEBACK"):
            # The QP's row; the tables are written below if CHECK_X
            # accepted the packet.
            m.d.comb += q_wr.en.eq(1)
            goto("IDLE")

        # ---- timer scan
        with state("SCAN_RD"):
            m.d.sync += qs_load.eq(1)
            goto("SCAN")
        with state("SCAN"):
            # (scan.expired registers the QP's timer)
            m.d.sync += ack_syn.eq(AETH_ACK)  # for the ACK SCAN_X may send
            goto("SCAN_X")
        with state("SCAN_X"):
            m.d.sync += bm_word.eq(widx(qs.epsn))  # for ACK0
            with m.If(scan_due_ack):
                goto("ACK0")
            with m.Else():
                goto("IDLE")

        # ---- ACK/NAK: read the two bitmap words from the expected PSN on (the
        # states that go to ACK0, CHECK_X, COALESCE and SCAN_X, address the first:
        # they have the QP's final epsn and read no bitmap word), register both,
        # shift them by whole bytes towards epsn in ACK_SH (registered in bm_sh),
        # and build the ACK from registers in ACK3 (no logic after the block RAM,
        # and the 64:1 selection of each bitmap bit in two registered steps).
        with state("ACK0"):
            m.d.sync += bm_word.eq(bm_word + 1)
            goto("ACK1")
        with state("ACK1"):
            m.d.comb += ack_reader.load_first.eq(1)
            goto("ACK2")
        with state("ACK2"):
            m.d.comb += ack_reader.load_second.eq(1)
            goto("ACK_SH")
        with state("ACK_SH"):
            goto("ACK3")
        with state("ACK3"):
            with m.If(~ack_valid):
                # (ack_job follows the ACK while ack_valid is clear)
                m.d.comb += [
                    cnt.acks_sent.eq(ack_is_ack),
                    cnt.naks_sent.eq(~ack_is_ack),
                    ack_reader.send.eq(1),
                ]
                m.d.sync += [
                    qs.unacked.eq(0),
                    qs.ece.eq(0),
                    qs.ce_count.eq(0),
                    qs.armed.eq(0),
                ]
                goto("WRITEBACK")

        m.d.comb += ack_reader.probe.eq(st.PROBE)

        # WRITEBACK enters an accepted packet in the tables (accept and the
        # enter vectors are set for that cycle only, so no state decode).
        with m.If(accept):
            m.d.sync += [accept.eq(0), flight_enter.eq(0), pend_enter.eq(0)]
            m.d.comb += [flight.write.eq(1), pending.write.eq(is_last)]
        # The pending table's operations, each in one state: a failed write's
        # entry is found in DMA_ERROR and dropped in DMA_ERROR2; INIT drops the
        # QP's entries; a B verdict clears its entry's in-flight flag in
        # MARK_RD; MARK starts an advance, ADV passes the entries of each word
        # advanced over, COMPLETE completes the earliest passed one.
        m.d.comb += [
            pending.enter.eq(pend_enter),
            pending.lost.eq(st.DMA_ERROR),
            pending.drop_lost.eq(st.DMA_ERROR2),
            pending.drop_qp.eq(st.INIT),
            pending.written.eq(st.MARK_RD),
            pending.restart.eq(st.MARK),
            pending.pass_word.eq(st.ADV),
            pending.complete.eq(st.COMPLETE & sel_any & cqe_free_q),
        ]

        # The cycle after a completion of a WITH_IMMEDIATE message (COALESCE or
        # COMPLETE_GAP): write its CQE, or count the overflow.
        with m.If(cqe_issue):
            m.d.sync += cqe_issue.eq(0)
            with m.If(~cfg.cq_enable | cq_full):
                m.d.comb += cnt.cq_overflow.eq(1)
            with m.Else():
                m.d.comb += cnt.cqe_written.eq(1)
                m.d.sync += [cqe_valid.eq(1), qs.cq_prod.eq(qs.cq_prod + 1)]
        return m

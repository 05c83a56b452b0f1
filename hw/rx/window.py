"""The responder's per-QP PSN window: duplicate and window checks, the receive
bitmap, the cumulative PSN, message completion and ACK coalescing.
"""

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from hw.pipeline import OneHotFSM
from hw.protocol import PSN_BITS

from .dma import DmaDone, WriteCmd
from .layouts import MAX_PENDING, AckJob, CqeJob, QpConfig, QpRxState, WindowReq
from .window_ack import AckReader, ack_states
from .window_check import check_datapath, check_flags, check_states, entry_rows
from .window_context import WindowContext
from .window_mark import cqe_write, mark_datapath, mark_holes, mark_states
from .window_scan import TimerScan, scan_states
from .window_start import start_states
from .window_tables import InFlightTable, PendingTable

__all__ = ["MAX_PENDING", "QpRxState", "RxPsnWindow", "WINDOW_COUNTERS", "ring_bits_for"]

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


# The engine's states, one flip-flop each, by family: the start of an
# operation and the two that need no check (window_start.py), the check
# (window_check.py), the mark and advance (window_mark.py), the row's write,
# the timer scan (window_scan.py) and the ACK (window_ack.py).
STATES = ("IDLE", "DMA_ERROR", "DMA_ERROR2", "INIT", "CHECK_RD", "CHECK", "CHECK_X",
          "PROBE", "MARK_RD", "MARK", "ADV_RD", "ADV_LD", "ADV_HOLES", "ADV", "COMPLETE",
          "COMPLETE_GAP", "COMPLETE_GAP2", "COALESCE", "WRITEBACK", "SCAN_RD", "SCAN",
          "SCAN_X", "ACK0", "ACK1", "ACK2", "ACK_SH", "ACK3")


def ring_bits_for(mpr_max: int, sack_bits: int) -> int:
    """Bits of receive bitmap per QP: the window plus one word, to a power of two."""
    return 1 << ceil_log2(mpr_max + sack_bits)


class RxPsnWindow(wiring.Component):
    """Per-QP PSN window, completion and ACK-coalescing engine (the responder's state).

    Interface
    ---------
    ``req``      In(stream.Signature(WindowReq)): validated frames, in order;
                 taken in IDLE as a check starts, or in CHECK_X for a
                 WITH_IMMEDIATE packet checked while writes are in flight.
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
    fill the ring, or the ring is disabled; or when it is not at the expected
    PSN and the QP's WITH_IMMEDIATE entries would fill the ring with it (a
    slot stays for the message they wait for). While writes are in flight
    such a request is only peeked at (IDLE does not take it): if this last
    rule alone refuses it, it is checked again once they have completed, so
    the verdict depends on the PSNs received, not on when B verdicts come.
    Neither drop is acknowledged, so
    the sender resends the packet like a loss; a message accepted has its
    CQE's slot, and ``cq_overflow`` counts only a CQE whose slot the host took
    back meanwhile (ring disabled, shrunk, or ``cq_cons`` moved past it).

    ACK coalescing: after a placed packet, an ACK goes out when AckReq is set
    or ``unacked`` reaches ``ACK_N`` (0 reads as 1); otherwise a timer of
    ``ACK_T`` cycles starts at the first unacknowledged packet, and a scan
    over the QPs sends the ACK once it expires. A duplicate is acknowledged
    at once; a NAK is sent at once. Every ACK/NAK resets the coalescing state.
    Each ACK/NAK carries the service time (docs/protocol.md): the cycles from
    IDLE taking the newest packet placed on the QP to the ACK, times
    ``ns_per_cycle`` (the clock's whole ns, 8 by default), in 64 ns units
    (``AckReader``).

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
    (window_ack.py) the ACK job and the bitmap it carries. The state
    machine's families are built by window_start.py (IDLE, DMA_ERROR, INIT),
    window_check.py (CHECK*, PROBE), window_mark.py (MARK*, ADV*, COMPLETE*,
    COALESCE), window_scan.py (SCAN*) and window_ack.py (ACK*), each from a
    ``WindowContext`` (window_context.py) of the shared registers.
    Throughput: one operation at a time; a packet costs about 11 cycles of
    engine time, far less than its payload takes on the datapath at any
    MTU >= 256.
    """

    def __init__(self, *, num_qps=16, sack_bits=64, mpr_max=1024, inflight=8,
                 max_pending=MAX_PENDING,
                 addr_width=64, plane_bits=0, ns_per_cycle=8, ipv6=False):
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
        if not isinstance(ns_per_cycle, int) or not 1 <= ns_per_cycle <= 1000:
            raise ValueError(f"ns_per_cycle must be an integer in 1..1000, not {ns_per_cycle!r}")
        self.num_qps = num_qps
        self.qp_bits = exact_log2(num_qps)
        self.sack_bits = sack_bits
        self.mpr_max = mpr_max
        self.inflight = inflight
        self.max_pending = max_pending
        self.addr_width = addr_width
        self.plane_bits = plane_bits
        self.ns_per_cycle = ns_per_cycle
        self.ipv6 = ipv6
        self.ring_bits = ring_bits_for(mpr_max, sack_bits)
        self.ring_words = self.ring_bits // sack_bits
        self.tag_bits = exact_log2(inflight)
        super().__init__(
            {
                "req": In(stream.Signature(WindowReq(self.qp_bits, addr_width, plane_bits,
                                                     ipv6))),
                "place": Out(stream.Signature(WriteCmd(self.tag_bits, addr_width))),
                "done": In(stream.Signature(DmaDone(self.tag_bits))),
                "ack": Out(stream.Signature(AckJob(sack_bits, plane_bits, ipv6))),
                "cqe": Out(stream.Signature(CqeJob(addr_width))),
                "cfg_addr": Out(self.qp_bits),
                "cfg": In(QpConfig(addr_width, ipv6)),
                "init": In(
                    stream.Signature(
                        data.StructLayout(
                            {"qp": unsigned(self.qp_bits), "epsn": unsigned(PSN_BITS)})
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

        m.submodules.qstate = qmem = Memory(shape=QpRxState(self.plane_bits, self.ipv6),
                                            depth=self.num_qps,
                                            init=[])
        m.submodules.bitmap = bmem = Memory(
            shape=unsigned(W), depth=self.num_qps * self.ring_words, init=[]
        )
        q_rd = qmem.read_port()
        q_wr = qmem.write_port()
        b_rd = bmem.read_port()
        b_wr = bmem.write_port()

        # The time, which QP the next timer scan looks at, and whether it is due.
        m.submodules.scan = scan = TimerScan(qpb, self.plane_bits, self.ipv6)

        # The engine's states (hw.pipeline.OneHotFSM, one flip-flop per state):
        # "in state X" is a flip-flop, not a decode of an encoded state, so the
        # enables and mux selects it drives start at a register. A state's
        # transitions exclude each other.
        fsm = OneHotFSM(m, STATES, "IDLE")
        st = fsm.st

        # ---- the operation being worked on. Data registers that are read only
        # after being loaded (or with their valid) have no reset, which leaves
        # their flip-flops' LSR pin free to clear fields without a LUT.
        qp = Signal(qpb)
        rq = Signal(WindowReq(qpb, self.addr_width, self.plane_bits, self.ipv6), reset_less=True)
        rq_arrival = Signal(PSN_BITS, reset_less=True)  # the time IDLE took the request
        qs = Signal(QpRxState(self.plane_bits, self.ipv6))
        cfg = Signal(QpConfig(self.addr_width, self.ipv6), reset_less=True)
        bm_word = Signal(lr)  # bitmap word index being read (written in MARK, ADV)
        # The cycle after IDLE reads the word of rq.psn, loaded in IDLE (CHECK_RD
        # and MARK_RD need it; the other states after IDLE read no bitmap word).
        after_idle = Signal()
        m.d.comb += [
            q_rd.addr.eq(qp),
            self.cfg_addr.eq(qp),
            b_rd.addr.eq(Cat(Mux(after_idle, rq.psn[lw : lw + lr], bm_word), qp)),
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
            flight.request.arrival.eq(rq_arrival),
            flight.read_slot.eq(self.done.payload.tag),
        ]
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
            sack_bits=W, qp_bits=qpb, addr_width=self.addr_width, plane_bits=self.plane_bits,
            ns_per_cycle=self.ns_per_cycle, ipv6=self.ipv6)
        wiring.connect(m, ack_reader.ack, wiring.flipped(self.ack))
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

        # The syndrome of the ACK/NAK to send. An ACK carries cum_psn; a NAK
        # (only from CHECK_X) the PSN of the request, rq.psn.
        ack_syn = Signal(8)
        qs_load = Signal()  # CHECK, MARK or SCAN: the QP's row arrives (set a cycle ahead)
        done_tag = Signal(self.tag_bits)  # the in-flight slot of the B verdict being handled
        mark_ackreq = Signal()
        mark_ce = Signal()
        mark_arrival = Signal(PSN_BITS, reset_less=True)
        # CHECK_X accepted the packet: WRITEBACK, next, enters it in the tables
        # at its in-flight slot and (a LAST packet) pending entry, one-hot.
        accept = Signal()
        pend_enter = Signal(self.max_pending)
        rq_bit = Signal(W)
        peek = Signal()
        c = WindowContext(
            m=m, win=self, fsm=fsm, W=W, lw=lw, lr=lr, q_rd=q_rd, q_wr=q_wr, b_rd=b_rd,
            b_wr=b_wr, scan=scan, flight=flight, pending=pending, ack_reader=ack_reader,
            qp=qp, rq=rq, qs=qs, cfg=cfg, qs_load=qs_load, bm_word=bm_word, rq_bit=rq_bit,
            done_tag=done_tag, mark_ackreq=mark_ackreq, mark_ce=mark_ce,
            rq_arrival=rq_arrival, mark_arrival=mark_arrival, peek=peek, accept=accept,
            flight_enter=flight_enter, pend_enter=pend_enter, place_valid=place_valid,
            place_cmd=place_cmd, cqe_valid=cqe_valid, cqe_job=cqe_job, cqe_free_q=cqe_free_q,
            ack_syn=ack_syn)

        # ---- the registers each state family reads, driven every cycle. The
        # statements below, the builders' included, keep their order: it is
        # the order of the netlist's processes, so a reordering shows as a
        # netlist change where there is none.
        chk = check_flags(c)
        check_datapath(c, chk)
        entry_rows(c, chk)
        m.d.comb += [
            ack_reader.word.eq(b_rd.data),
            ack_reader.qp_state.eq(qs),
            ack_reader.cfg.eq(cfg),
            ack_reader.request.eq(rq),
            ack_reader.syndrome.eq(ack_syn),
            ack_reader.now.eq(scan.now),
        ]
        m.d.comb += scan.row.eq(q_rd.data)
        mark = mark_datapath(c)
        m.d.sync += qs_load.eq(0)
        m.d.comb += scan.check.eq(st.SCAN)
        m.d.sync += after_idle.eq(st.IDLE)
        mark_holes(c, mark)

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
                *([qs.plane.eq(Mux(from_req, rq.plane, q_rd.data.plane))]
                  if self.plane_bits else []),
                *([qs.flow.eq(Mux(from_req, rq.flow, q_rd.data.flow))] if self.ipv6 else []),
                cfg.eq(self.cfg),
            ]

        # ---- the states, family by family
        start_states(c)  # IDLE, DMA_ERROR, DMA_ERROR2, INIT
        check_states(c, chk)  # CHECK_RD, CHECK, CHECK_X, PROBE
        mark_states(c, mark)  # MARK_RD .. COALESCE
        with fsm.State("WRITEBACK"):
            # The QP's row; the tables are written below if CHECK_X
            # accepted the packet.
            m.d.comb += q_wr.en.eq(1)
            fsm.next = "IDLE"
        scan_states(c)  # SCAN_RD, SCAN, SCAN_X
        ack_states(c)  # ACK0, ACK1, ACK2, ACK_SH, ACK3

        # WRITEBACK enters an accepted packet in the tables (accept and the
        # enter vectors are set for that cycle only, so no state decode).
        with m.If(accept):
            m.d.sync += [accept.eq(0), flight_enter.eq(0), pend_enter.eq(0)]
            m.d.comb += [flight.write.eq(1), pending.write.eq(chk.is_last)]
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
            pending.complete.eq(st.COMPLETE & pending.sel_any & cqe_free_q),
        ]
        cqe_write(c, mark)
        return m

"""The TX sequencer's WQE reads: each QP's next posted WQE read ahead into a
buffer (``WqePrefetch``), and the WQE read channel shared by that prefetch and
the sequencer's retransmit fetches (``BurstShare``)."""

from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..bits import all_below, onehot
from ..pipeline import OneHotFSM
from .arbiter import RoundRobin
from .dma import ReadData, ReadRequest
from .layouts import WQE_BYTES, WQE_KEPT_FIELDS, PrefetchedWqe
from .qp_settings import BRAM_QPS, row_address, row_port

__all__ = ["BurstShare", "WqePrefetch", "MAX_READS", "check_depth", "read_ahead", "slot_bits"]

# WQE reads the prefetch has in flight at most (requested, last beat not yet in)
MAX_READS = 4


def slot_bits(depth: int) -> int:
    """The bits of a buffer slot: a WQE's ring index mod ``depth``."""
    return (depth - 1).bit_length()


def read_ahead(depth: int | None, data_width: int, num_qps: int) -> int:
    """WQEs read ahead per QP, checked (``check_depth``): ``depth``, or with
    None the default, 4 where a 64-byte WRITE takes 3 beats or fewer (256
    bits and up), so that one QP's WQEs come as fast as its packets leave,
    and where the per-QP counts stay small (up to ``BRAM_QPS`` QPs); else 1."""
    if depth is None:
        depth = 4 if data_width >= 256 and num_qps <= BRAM_QPS else 1
    check_depth(depth, num_qps)
    return depth


def check_depth(depth: int, num_qps: int):
    """``WqePrefetch``'s ``depth`` (WQEs read ahead per QP): a power of two up
    to ``MAX_READS``, above 1 only up to ``BRAM_QPS`` QPs (its counts are
    flip-flops per QP)."""
    if depth < 1 or depth & (depth - 1) or depth > MAX_READS:
        raise ValueError(f"WQE read-ahead depth {depth}: use 1, 2 or 4 (WQEs read ahead "
                         f"per QP, at most the {MAX_READS} reads in flight)")
    if depth > 1 and num_qps > BRAM_QPS:
        raise ValueError(f"WQE read-ahead depth {depth} with {num_qps} QPs: above "
                         f"{BRAM_QPS} QPs use depth 1 (the deeper read-ahead keeps "
                         f"per-QP counts in flip-flops)")


class WqePrefetch(wiring.Component):
    """Each QP's next posted WQEs, read ahead of the sequencer: up to
    ``depth`` (1, 2 or 4) per QP.

    Interface: per QP (QP 0's lowest bits or 16-bit word) ``pi``/``ci``
    (the ring's producer and consumer indices) or, with ``ring_rows`` (the
    indices in ``RingRows``), ``ring_ne`` (per QP, ``pi != ci``) and
    ``ring_ci`` (``ci`` of ``ring_q`` of the cycle before, with that
    cycle's writes; with ``depth`` > 1 also ``ring_pi``, likewise);
    ``enable`` and ``op_halt``; with ``depth`` > 1, ``post_stb``/``post_q``:
    a doorbell of QP ``post_q`` (the decode's strobe; its ``pi`` reaches
    ADDR two cycles later);
    ``ring_q`` out, ``sq_base``/``sq_log2`` in: the ring settings of QP
    ``ring_q``, read by the caller at ``ring_q`` registered, so that they
    are valid two cycles after ``ring_q`` moves; ``req``/``data``: the WQE
    bursts (64 bytes each, up to ``MAX_READS`` in flight, their beats in
    the order of the requests; every beat is taken); ``ready`` (per QP): the
    QP's WQE at ``ci`` is in the buffer; ``take``/``take_q``: the sequencer
    consumed QP ``take_q``'s WQE (it moves that QP's ``ci`` in the same
    cycle); ``drop`` (per QP), with ``drop_stb``/``drop_q`` (the same event
    as a QP number, at most one QP a cycle): the QP's ring was reset (``ci``
    set to ``pi``): its buffered WQEs are dropped and reads under way for it
    discarded;
    ``rd_q``, ``rd_slot`` (depth > 1) -> ``rd_wqe``: the buffered WQE of the
    QP and slot (its ring index mod ``depth``: ``ci``'s low bits) given the
    cycle before (``row_port``, writes of that cycle included), the fields TX
    reads (``PrefetchedWqe``, hw/tx/layouts.py), each byte written as its
    beat passes.

    Per QP two counts, flip-flops of 0..``depth``: the WQEs reserved (read
    or being read, not taken) and those of them buffered (``ready`` is the
    second's "not 0"). A QP is read for while it is enabled, not halted, its
    ring holds a WQE (``pi != ci``, registered per nibble and then ORed: two
    cycles late; or ``ring_ne``, which ``RingRows`` moves at the end of the
    cycle after a take or a reset, or of the one after that when a take
    waits), fewer than ``depth`` are reserved and (``depth`` > 1) its ring
    may hold one past them (a flag cleared when a read finds ``pi`` there,
    set the cycle after a doorbell's strobe: after the clear of any read
    that saw the old ``pi``); round robin among those, the QP picked and not
    yet requested skipped (with ``depth`` > 1, REQ picks it again if the
    read it issues leaves it room).
    Only posted WQEs are read, each once, in ring order: the read is at
    ``ci`` (one WQE ahead, or none read since a reset) or one past the QP's
    last read (kept per QP in a LUT RAM, with ``depth`` > 1), and the ring
    check is made again in ADDR, two cycles after the pick, when it has seen
    ``ci`` as it was in the pick's cycle (a take or reset before it), and
    ``pi`` (``depth`` > 1). A reset in that cycle or later sets the read's
    cancel bit, and the read, if made, is discarded: its beats land in a row
    no count holds, before any read after the reset. A take moves ``ci``
    and the reserved count together, so the index past the last read is
    never stale. The ring settings are those of the read's ADDR: a QP's
    ``sq_base``/``sq_log2_size`` written with WQEs posted apply from its
    next read on.

    The requests go through states (PICK: a QP chosen; ROW: its settings
    read; ADDR: the slot's address registered, ``sq_base + (index mod
    2^sq_log2) x 64``, once a read in flight may be added; REQ: the request,
    until taken, when the next QP is chosen as in PICK and ROW follows); the
    reads in flight are a ring of ``MAX_READS`` registers (a QP, its buffer
    slot and its cancel bit each), whose oldest's row takes the beats as
    they come and whose QP's buffered count goes up after its last. Latency:
    ``ready`` is set the cycle after the burst's last beat, about 4 cycles
    plus the memory's latency and the burst's beats after the pick.
    Throughput: a request per 3 cycles while QPs wait (4 when the next is
    picked in PICK), whatever the memory's latency up to ``MAX_READS``
    reads in flight; one QP alone reads its WQEs 3 cycles apart with
    ``depth`` > 1, where one ahead waits for each to be taken.
    """

    def __init__(self, *, num_qps=16, data_width=64, addr_width=64, ring_rows=False, depth=1):
        if data_width > 8 * WQE_BYTES:
            self._MustUse__silence = True
            raise ValueError(f"WqePrefetch: data_width {data_width} is wider than a WQE "
                             f"({8 * WQE_BYTES} bits); use a datapath of 64..512 bits")
        check_depth(depth, num_qps)
        self.num_qps = num_qps
        self.data_width = data_width
        self.addr_width = addr_width
        self.ring_rows = ring_rows
        self.depth = depth
        qb = max(1, (num_qps - 1).bit_length())
        if ring_rows:
            ring = {"ring_ne": In(num_qps), "ring_ci": In(16)}
            if depth > 1:
                ring["ring_pi"] = In(16)
        else:
            ring = {"pi": In(16 * num_qps), "ci": In(16 * num_qps)}
        if depth > 1:
            ring.update(post_stb=In(1), post_q=In(qb), rd_slot=In(slot_bits(depth)))
        super().__init__({
            **ring,
            "enable": In(num_qps),
            "op_halt": In(num_qps),
            "ring_q": Out(qb),
            "sq_base": In(addr_width),
            "sq_log2": In(4),
            "req": Out(stream.Signature(ReadRequest(addr_width))),
            "data": In(stream.Signature(ReadData(data_width))),
            "ready": Out(num_qps),
            "take": In(1),
            "take_q": In(qb),
            "drop": In(num_qps),
            "drop_stb": In(1),
            "drop_q": In(qb),
            "rd_q": In(qb),
            "rd_wqe": Out(PrefetchedWqe()),
        })

    def elaborate(self, platform):
        m = Module()
        nq, nbytes, depth = self.num_qps, self.data_width // 8, self.depth
        wqe_beats = WQE_BYTES // nbytes
        sb = slot_bits(depth)

        pf_q = Signal.like(self.ring_q)  # the QP being read
        # ring_work: per QP, pi != ci; pf_ci: ci of pf_q (the rows': of the cycle
        # before); pf_pi likewise (read past the first WQE only)
        if self.ring_rows:
            ring_work, pf_ci = self.ring_ne, self.ring_ci
            pf_pi = self.ring_pi if depth > 1 else None
        else:
            ring_work = Signal(nq)
            for i in range(nq):
                pi, ci = self.pi[16 * i : 16 * (i + 1)], self.ci[16 * i : 16 * (i + 1)]
                ring_ne = Signal(4, name=f"ring_ne{i}")
                m.d.sync += [
                    ring_ne.eq(Cat(*[pi[4 * k : 4 * k + 4] != ci[4 * k : 4 * k + 4]
                                     for k in range(4)])),
                    ring_work[i].eq(ring_ne.any()),
                ]
            pf_ci = Array(self.ci[16 * i : 16 * (i + 1)] for i in range(nq))[pf_q]
            pf_pi = Array(self.pi[16 * i : 16 * (i + 1)] for i in range(nq))[pf_q]

        # Per QP, two counts (0..depth): the WQEs reserved (read or being read, not
        # taken) and those of them in the buffer; ready is the second's "not 0"
        cw = depth.bit_length()
        reserved = Array(Signal(cw, name=f"pf_reserved{i}") for i in range(nq))
        buffered = Array(Signal(cw, name=f"pf_buffered{i}") for i in range(nq))
        ready = Cat(*[buffered[i] != 0 for i in range(nq)])
        room = Cat(*[reserved[i] != depth for i in range(nq)])
        # depth > 1: per QP, the ring may hold a WQE past those reserved (cleared
        # when a read finds none, set by a doorbell once its pi has landed), and
        # the next read is at ci (none since a reset) or past the last read
        more = Signal(nq, init=(1 << nq) - 1)
        from_ci = Signal(nq, init=(1 << nq) - 1)
        m.submodules.rr = rr = RoundRobin(nq)
        m.d.comb += [
            rr.requests.eq(self.enable & ~self.op_halt & ring_work & room & more),
            self.ready.eq(ready),
        ]
        # a drop of one QP (the decode's reset strobe, as a QP number) seen by
        # the reads under way: a compare per read, not a flag per QP
        def dropped(q):
            return self.drop_stb & (self.drop_q == q)

        req_valid = Signal()
        req_addr = Signal(self.addr_width)
        m.d.comb += [
            self.ring_q.eq(pf_q),
            self.req.valid.eq(req_valid),
            self.req.payload.addr.eq(req_addr),
            self.req.payload.len.eq(wqe_beats - 1),
        ]

        # The reads in flight, oldest first (their beats come in that order): a
        # ring of MAX_READS registers, each a QP, the buffer slot of its WQE and
        # its cancel bit (the QP's ring was reset since its pick: its read is
        # discarded).
        Entry = data.StructLayout({"q": len(pf_q), "cancel": 1, **({"slot": sb} if sb else {})})
        slots = [Signal(Entry, name=f"read{i}") for i in range(MAX_READS)]
        in_use = Signal(MAX_READS)  # per slot: a read in flight
        head = Signal(range(MAX_READS))  # the oldest read's slot
        tail = Signal(range(MAX_READS))  # the next request's slot
        oldest = Array(slots)[head]
        beat = Signal(range(max(2, wqe_beats)))
        front = Signal()  # pf_q is picked and not yet requested (ROW, ADDR, REQ)
        pf_cancel = Signal()  # pf_q's ring was reset since its pick
        pf_index = Signal(16)  # the ring index ADDR reads at
        for slot in slots:
            with m.If(dropped(slot.q)):
                m.d.sync += slot.cancel.eq(1)

        # the buffer, a row per QP and slot (the WQE's ring index mod depth), a
        # byte lane per kept byte: byte k of PrefetchedWqe is the WQE's byte at
        # offset src[k], taken from its beat's lane
        src = [off + i for _, off, size in WQE_KEPT_FIELDS for i in range(size)]
        m.submodules.buf = buf = Memory(shape=8 * len(src), depth=nq * depth, init=[])
        buf_w = buf.write_port(granularity=8)
        ram = dict(block_ram=nq > BRAM_QPS)
        buf_r = row_port(buf, write=buf_w, **ram)
        beat_data = self.data.payload.data
        # the row of a QP's slot (depth 1: the QP's)
        def row(q, slot):
            return Cat(slot, q) if sb else q

        m.d.comb += [
            buf_w.addr.eq(row(oldest.q, oldest.slot if sb else None)),
            buf_w.data.eq(Cat(*[beat_data.word_select(o % nbytes, 8) for o in src])),
            buf_r.addr.eq(row_address(m, row(self.rd_q, self.rd_slot if sb else None),
                                      "pf_rd_q", **ram)),
            self.rd_wqe.eq(buf_r.data),
        ]
        byte_en = Cat(*[beat == o // nbytes for o in src])

        ring_mask = all_below(self.sq_log2, 16)  # (1 << sq_log2) - 1

        # the beats: every one is taken (a read in flight has room in the buffer)
        # and written into the row of the oldest read
        m.d.comb += self.data.ready.eq(1)
        done = Signal()  # the oldest read's last beat is taken
        arrived = Signal()  # ... and it was not cancelled: one more WQE of its QP buffered
        with m.If(self.data.valid):
            m.d.sync += beat.eq(beat + 1)
            m.d.comb += buf_w.en.eq(byte_en)
            with m.If(self.data.payload.last):
                m.d.sync += [beat.eq(0), head.eq(head + 1)]
                m.d.comb += [done.eq(1), arrived.eq(~oldest.cancel)]

        # The requests: a state flip-flop each (hw.pipeline.OneHotFSM).
        fsm = OneHotFSM(m, ("PICK", "ROW", "ADDR", "REQ"), init="PICK", name="prefetch_state")
        issued = Signal()  # a request is taken: its QP goes into the tail slot
        counted = Signal()  # ... and it counts (not cancelled)
        m.d.comb += counted.eq(issued & ~pf_cancel & ~dropped(pf_q))
        m.d.sync += in_use.eq((in_use | Mux(issued, onehot(tail, MAX_READS), 0))
                              & ~Mux(done, onehot(head, MAX_READS), 0))
        with m.If(issued):
            m.d.sync += [Array(slots)[tail].eq(Cat(pf_q, ~counted, pf_index[:sb])),
                         tail.eq(tail + 1)]
        with m.If(dropped(pf_q)):
            m.d.sync += pf_cancel.eq(1)

        # the counts: a count a read, take or drop of the QP (a take and a drop
        # are never the same QP: a dropped QP's WQE is not ready)
        for i in range(nq):
            take_i = self.take & (self.take_q == i)
            with m.If(self.drop[i]):
                m.d.sync += [reserved[i].eq(0), buffered[i].eq(0)]
            with m.Else():
                m.d.sync += [
                    reserved[i].eq(reserved[i] + (counted & (pf_q == i)) - take_i),
                    buffered[i].eq(buffered[i] + (arrived & (oldest.q == i)) - take_i),
                ]

        # the grant is under way (picked): not picked again, the search moves on
        # past it; with depth > 1, REQ picks its own QP again if the read it
        # issues leaves it room
        under_way = front & (rr.grant == pf_q)
        if depth > 1:
            under_way &= ~(fsm.ongoing("REQ") & (reserved[pf_q] < depth - 1))

        index = pf_ci
        nothing = ~ring_work.bit_select(pf_q, 1)  # ADDR: no WQE to read at index
        if depth > 1:
            index, nothing = self._read_index(m, pf_q, pf_ci, pf_pi, nothing, from_ci, more,
                                              fsm, counted, pf_index)

        def pick(otherwise=None):
            """The grant, unless it is under way: then only the search moves on
            (and the FSM to ``otherwise``, if given)."""
            m.d.comb += rr.next.eq(1)
            with m.If(~under_way):
                m.d.sync += [pf_q.eq(rr.grant), front.eq(1),
                             pf_cancel.eq(dropped(rr.grant))]
                fsm.next = "ROW"
            if otherwise is not None:
                with m.Else():
                    fsm.next = otherwise

        with fsm.State("PICK"):
            with m.If(rr.valid):
                pick()
        with fsm.State("ROW"):
            fsm.next = "ADDR"
        with fsm.State("ADDR"):
            m.d.sync += [req_addr.eq(self.sq_base + ((index & ring_mask) << 6)),
                         pf_index.eq(index)]
            with m.If(pf_cancel | dropped(pf_q) | nothing):
                # given up: the QP may be picked again
                m.d.sync += front.eq(0)
                fsm.next = "PICK"
            with m.Elif(~in_use.bit_select(tail, 1)):
                m.d.sync += req_valid.eq(1)
                fsm.next = "REQ"
        with fsm.State("REQ"):
            with m.If(self.req.ready):
                m.d.sync += [req_valid.eq(0), front.eq(0)]
                m.d.comb += issued.eq(1)
                # the next QP picked as the request goes, if one is not under way
                with m.If(rr.valid):
                    pick(otherwise="PICK")
                with m.Else():
                    fsm.next = "PICK"

        if depth > 1:
            # a doorbell's pi reaches ADDR two cycles after its strobe (the rows
            # write it the cycle after): its "more" is set the cycle after the
            # strobe, at or after the clear of an ADDR that read the old pi (set
            # after it: the set wins in a cycle of both)
            post, post_q = Signal(), Signal.like(self.post_q)
            m.d.sync += [post.eq(self.post_stb), post_q.eq(self.post_q)]
            with m.If(post):
                m.d.sync += more.bit_select(post_q, 1).eq(1)
        return m

    def _read_index(self, m, pf_q, pf_ci, pf_pi, ring_empty, from_ci, more, fsm, counted,
                    pf_index):
        """With ``depth`` > 1: the ring index ADDR reads at (``ci``, or one past
        the QP's last read, kept per QP in a LUT RAM written as a read is
        issued; both registered in ROW, when they cannot move: only the
        prefetch issues reads and a drop cancels the pick), and whether the
        ring holds a WQE there (``pi`` not reached: a read that finds none
        clears the QP's ``more``); returns the two."""
        nq = self.num_qps
        m.submodules.next_index = nxt = Memory(shape=16, depth=nq, init=[])
        nxt_w = nxt.write_port()
        nxt_r = nxt.read_port(domain="comb")
        next_r = Signal(16)
        from_ci_r = Signal()
        with m.If(fsm.ongoing("ROW")):
            m.d.sync += [next_r.eq(nxt_r.data), from_ci_r.eq(from_ci.bit_select(pf_q, 1))]
        m.d.comb += [nxt_r.addr.eq(pf_q), nxt_w.addr.eq(pf_q), nxt_w.data.eq(pf_index + 1),
                     nxt_w.en.eq(counted)]
        # a read leaves ci behind, a reset (drop) brings the QP back to it
        m.d.sync += from_ci.eq((from_ci & ~Mux(counted, onehot(pf_q, nq), 0)) | self.drop)
        index = Mux(from_ci_r, pf_ci, next_r)
        at_pi = index == pf_pi
        with m.If(fsm.ongoing("ADDR") & at_pi):
            m.d.sync += more.bit_select(pf_q, 1).eq(0)
        return index, ring_empty | at_pi


class BurstShare(wiring.Component):
    """Two clients' read bursts on one request/data stream pair.

    Interface: ``a_req``/``a_data`` and ``b_req``/``b_data`` (the clients:
    the sequencer's retransmit fetches and the prefetch), ``req``/``data``
    (the shared channel, whose beats come in the order of its requests).
    The channel is one client's at a time: the client whose request is
    presented while no burst is in flight (``a`` when both wait) owns it
    until its last burst in flight has its last beat taken, and may add
    bursts while the other does not wait (up to ``MAX_READS + 1`` in flight,
    more than the prefetch issues); every beat goes to the owner. A request
    once presented on ``req`` is never withdrawn.

    Latency 0 (the request and the beats pass through combinationally); the
    other client's request is presented the cycle after the owner's last
    beat.
    """

    def __init__(self, *, data_width=64, addr_width=64):
        req = stream.Signature(ReadRequest(addr_width))
        beats = stream.Signature(ReadData(data_width))
        super().__init__({
            "a_req": In(req), "a_data": Out(beats),
            "b_req": In(req), "b_data": Out(beats),
            "req": Out(req), "data": In(beats),
        })

    def elaborate(self, platform):
        m = Module()
        in_flight = Signal(range(MAX_READS + 2))  # the owner's bursts requested, not done
        held = Signal()  # a request was presented and not taken: it stays presented
        owner_b = Signal()
        other_waits = Mux(owner_b, self.a_req.valid, self.b_req.valid)
        busy = held | (in_flight != 0)
        # the client presented: the owner while it holds the channel (new bursts
        # only while the other does not wait, and room is left), else a first
        to_b = Mux(busy, owner_b, ~self.a_req.valid)
        may_present = held | ~busy | (~other_waits & (in_flight != MAX_READS + 1))
        m.d.sync += owner_b.eq(to_b)
        m.d.sync += held.eq(self.req.valid & ~self.req.ready)
        taken = self.req.valid & self.req.ready
        done = self.data.valid & self.data.ready & self.data.payload.last
        with m.If(taken & ~done):
            m.d.sync += in_flight.eq(in_flight + 1)
        with m.Elif(done & ~taken):
            m.d.sync += in_flight.eq(in_flight - 1)
        for client, chosen in ((self.a_req, ~to_b), (self.b_req, to_b)):
            with m.If(chosen & may_present):
                m.d.comb += [self.req.valid.eq(client.valid), self.req.payload.eq(client.payload),
                             client.ready.eq(self.req.ready)]
        for client, chosen in ((self.a_data, ~owner_b), (self.b_data, owner_b)):
            m.d.comb += client.payload.eq(self.data.payload)
            with m.If(chosen):
                m.d.comb += [client.valid.eq(self.data.valid), self.data.ready.eq(client.ready)]
        return m

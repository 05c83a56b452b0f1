"""The TX sequencer's WQE reads: each QP's next posted WQE read ahead into a
buffer (``WqePrefetch``), and the WQE read channel shared by that prefetch and
the sequencer's retransmit fetches (``BurstShare``)."""

from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..bits import all_below, onehot
from ..pipeline import OneHotFSM
from .arbiter import RoundRobin
from .dma import ReadData, ReadRequest
from .layouts import WQE_BYTES, WQE_KEPT_FIELDS, PrefetchedWqe
from .qp_settings import BRAM_QPS, row_address, row_port

__all__ = ["BurstShare", "WqePrefetch"]


class WqePrefetch(wiring.Component):
    """Each QP's next posted WQE, read ahead of the sequencer.

    Interface: per QP (QP 0's lowest bits or 16-bit word) ``pi``/``ci``
    (the ring's producer and consumer indices) or, with ``ring_rows`` (the
    indices in ``RingRows``), ``ring_ne`` (per QP, ``pi != ci``) and
    ``ring_ci`` (``ci`` of ``ring_q`` of the cycle before, with that
    cycle's writes); ``enable`` and ``op_halt``;
    ``ring_q`` out, ``sq_base``/``sq_log2`` in: the ring settings of QP
    ``ring_q``, read by the caller at ``ring_q`` registered, so that they
    are valid two cycles after ``ring_q`` moves; ``req``/``data``: the WQE
    bursts (64 bytes each, one at a time); ``ready`` (per QP): the QP's WQE at
    ``ci`` is in the buffer; ``take``/``take_q``: the sequencer consumed
    QP ``take_q``'s WQE (it moves that QP's ``ci`` in the same cycle);
    ``drop`` (per QP): the QP's ring was reset (``ci`` set to ``pi``): its
    buffered WQE is dropped and a read in flight for it discarded;
    ``rd_q`` -> ``rd_wqe``: the buffered WQE of the QP given the cycle
    before (``row_port``, writes of that cycle included), the fields TX reads
    (``PrefetchedWqe``, hw/tx/layouts.py), each byte written as its beat
    passes.

    A QP is read for while it is enabled, not halted, its ring holds a WQE
    (``pi != ci``, registered per nibble and then ORed: two cycles late;
    or ``ring_ne``, which ``RingRows`` moves at the end of the cycle after
    a take or a reset, or of the one after that when a take waits) and
    none of its WQEs is buffered or being read; round robin among those.
    Only posted WQEs are read (``ci`` is behind the doorbell), each once:
    the ring check is made again in ADDR, two cycles after the pick, when it
    has seen ``ci`` as it was in the pick's cycle (a take or reset before
    it); a reset in that cycle or later sets ``cancel``. ``ci`` of the QP
    being read cannot move (the sequencer takes only a ``ready`` WQE) except
    by ``drop``, which discards the read. The ring settings are those of the
    read's ADDR: a QP's ``sq_base``/``sq_log2_size`` written with WQEs posted
    apply from its next read on.

    States: PICK (a QP chosen), ROW (its settings read), ADDR (the slot's
    address registered: ``sq_base + (ci mod 2^sq_log2) x 64``), REQ (the
    request, until taken), DATA (the beats written into the buffer).
    Latency: ``ready`` is set the cycle after the burst's last beat, about 4
    cycles plus the memory's latency and the burst's beats after the pick.
    Throughput: one WQE burst at a time: a WQE per about 5 cycles plus the
    memory's latency and the burst's beats.
    """

    def __init__(self, *, num_qps=16, data_width=64, addr_width=64, ring_rows=False):
        if data_width > 8 * WQE_BYTES:
            self._MustUse__silence = True
            raise ValueError(f"WqePrefetch: data_width {data_width} is wider than a WQE "
                             f"({8 * WQE_BYTES} bits); use a datapath of 64..512 bits")
        self.num_qps = num_qps
        self.data_width = data_width
        self.addr_width = addr_width
        self.ring_rows = ring_rows
        qb = max(1, (num_qps - 1).bit_length())
        if ring_rows:
            ring = {"ring_ne": In(num_qps), "ring_ci": In(16)}
        else:
            ring = {"pi": In(16 * num_qps), "ci": In(16 * num_qps)}
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
            "rd_q": In(qb),
            "rd_wqe": Out(PrefetchedWqe()),
        })

    def elaborate(self, platform):
        m = Module()
        nq, nbytes = self.num_qps, self.data_width // 8
        wqe_beats = WQE_BYTES // nbytes

        pf_q = Signal.like(self.ring_q)  # the QP being read
        # ring_work: per QP, pi != ci; pf_ci: ci of pf_q (the rows': of the cycle before)
        if self.ring_rows:
            ring_work, pf_ci = self.ring_ne, self.ring_ci
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

        ready = Signal(nq)
        # (consulted in PICK alone: the QP being read is not among them then)
        m.submodules.rr = rr = RoundRobin(nq)
        m.d.comb += [
            rr.requests.eq(self.enable & ~self.op_halt & ring_work & ~ready),
            self.ready.eq(ready),
        ]

        cancel = Signal()  # the QP's ring was reset since the pick: discard the read
        dropped = self.drop.bit_select(pf_q, 1)
        req_valid = Signal()
        req_addr = Signal(self.addr_width)
        beat = Signal(range(max(2, wqe_beats)))
        m.d.comb += [
            self.ring_q.eq(pf_q),
            self.req.valid.eq(req_valid),
            self.req.payload.addr.eq(req_addr),
            self.req.payload.len.eq(wqe_beats - 1),
        ]

        # the buffer, a byte lane per kept byte: byte k of PrefetchedWqe is the
        # WQE's byte at offset src[k], taken from its beat's lane
        src = [off + i for _, off, size in WQE_KEPT_FIELDS for i in range(size)]
        m.submodules.buf = buf = Memory(shape=8 * len(src), depth=nq, init=[])
        buf_w = buf.write_port(granularity=8)
        ram = dict(block_ram=nq > BRAM_QPS)
        buf_r = row_port(buf, write=buf_w, **ram)
        beat_data = self.data.payload.data
        m.d.comb += [
            buf_w.addr.eq(pf_q),
            buf_w.data.eq(Cat(*[beat_data.word_select(o % nbytes, 8) for o in src])),
            buf_r.addr.eq(row_address(m, self.rd_q, "pf_rd_q", **ram)),
            self.rd_wqe.eq(buf_r.data),
        ]
        byte_en = Cat(*[beat == o // nbytes for o in src])

        ring_mask = all_below(self.sq_log2, 16)  # (1 << sq_log2) - 1
        # ready: set by a read's last beat, cleared by a take or a drop (never
        # the same QP: one being read is not ready, so not taken, and a drop
        # discards the read)
        ready_set = Signal(nq)
        ready_clear = Signal(nq)
        m.d.comb += ready_clear.eq(self.drop | Mux(self.take, onehot(self.take_q, nq), 0))
        m.d.sync += ready.eq((ready | ready_set) & ~ready_clear)

        # One flip-flop per state: DATA is the WQE channel's ready, which the AXI
        # slice's skid register takes with no decode in front.
        fsm = OneHotFSM(m, ("PICK", "ROW", "ADDR", "REQ", "DATA"), init="PICK",
                        name="prefetch_state")
        with fsm.State("PICK"):
            with m.If(rr.valid):
                m.d.comb += rr.next.eq(1)
                m.d.sync += [pf_q.eq(rr.grant), cancel.eq(self.drop.bit_select(rr.grant, 1))]
                fsm.next = "ROW"
        with fsm.State("ROW"):
            with m.If(dropped):
                m.d.sync += cancel.eq(1)
            fsm.next = "ADDR"
        with fsm.State("ADDR"):
            slot = pf_ci & ring_mask
            m.d.sync += req_addr.eq(self.sq_base + (slot << 6))
            with m.If(cancel | dropped | ~ring_work.bit_select(pf_q, 1)):
                fsm.next = "PICK"
            with m.Else():
                m.d.sync += req_valid.eq(1)
                fsm.next = "REQ"
        with fsm.State("REQ"):
            with m.If(dropped):
                m.d.sync += cancel.eq(1)
            with m.If(self.req.ready):
                m.d.sync += [req_valid.eq(0), beat.eq(0)]
                fsm.next = "DATA"
        with fsm.State("DATA"):
            m.d.comb += self.data.ready.eq(1)
            with m.If(dropped):
                m.d.sync += cancel.eq(1)
            with m.If(self.data.valid):
                m.d.sync += beat.eq(beat + 1)
                m.d.comb += buf_w.en.eq(byte_en)
                with m.If(self.data.payload.last):
                    with m.If(~cancel):
                        m.d.comb += ready_set.eq(onehot(pf_q, nq))
                    fsm.next = "PICK"

        return m


class BurstShare(wiring.Component):
    """Two clients' read bursts on one request/data stream pair, one burst
    at a time.

    Interface: ``a_req``/``a_data`` and ``b_req``/``b_data`` (the clients:
    the sequencer's retransmit fetches and the prefetch), ``req``/``data``
    (the shared channel). When both wait, ``a`` goes first. The choice is
    made when a request is presented and held to the last beat of its burst:
    a request once valid is never withdrawn, and every beat goes to the
    client that asked for it.

    Latency 0 (the request and the beats pass through combinationally); one
    burst at a time, the next presented the cycle after the last beat.
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
        busy = Signal()  # a request was presented and its burst's last beat not yet taken
        owner_b = Signal()
        to_b = Mux(busy, owner_b, ~self.a_req.valid)
        with m.If(~busy & self.req.valid):
            m.d.sync += [busy.eq(1), owner_b.eq(to_b)]
        with m.If(self.data.valid & self.data.ready & self.data.payload.last):
            m.d.sync += busy.eq(0)
        for client, chosen in ((self.a_req, ~to_b), (self.b_req, to_b)):
            with m.If(chosen):
                m.d.comb += [self.req.valid.eq(client.valid), self.req.payload.eq(client.payload),
                             client.ready.eq(self.req.ready)]
        for client, chosen in ((self.a_data, ~owner_b), (self.b_data, owner_b)):
            m.d.comb += client.payload.eq(self.data.payload)
            with m.If(chosen):
                m.d.comb += [client.valid.eq(self.data.valid), self.data.ready.eq(client.ready)]
        return m

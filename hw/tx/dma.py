"""AXI4 reads for the TX path: the shared read channel, payload bursts and
the realignment of unaligned host bytes."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..axi import AXI_BURST_INCR, AXI4Signature
from ..bits import index_select
from ..pipeline import BlockRamFIFO
from ..stream import Beat
from .layouts import PayloadDesc

__all__ = ["ReadRequest", "ReadData", "ReadArbiter", "PayloadReader", "Realigner", "SegmentInfo",
           "one_and_two_beats"]

AXI_MAX_BEATS = 256
AXI_BOUNDARY = 4096


def ReadRequest(addr_width=64):
    """One AXI4 read burst: beat-aligned ``addr_width``-bit address and beats - 1."""
    return data.StructLayout({"addr": unsigned(addr_width), "len": unsigned(8)})


def ReadData(data_width):
    return data.StructLayout({"data": unsigned(data_width), "last": unsigned(1)})


def SegmentInfo():
    """What the realigner needs to know of one packet's payload read: the
    first byte's lane, the length (1 or more) and whether it is 1..nbytes
    (``one_beat``) or nbytes + 1..2 * nbytes (``two_beats``) bytes at the
    realigner's width, decided by the writer (``one_and_two_beats``) from
    registers of its own, so that no compare of the length lies between
    the FIFO holding it and the realigner's registers."""
    return data.StructLayout({"lane": unsigned(6), "length": unsigned(13),
                              "one_beat": unsigned(1), "two_beats": unsigned(1)})


def one_and_two_beats(length, nbytes: int):
    """(``one_beat``, ``two_beats``) of ``SegmentInfo`` for a ``length`` of 1
    or more at ``nbytes`` bytes per beat, from the length's bits (no
    decrement): the bits above the lane 0, or nbytes; the bits above the
    lane 1 and a lane not 0, or 2 * nbytes."""
    lg = nbytes.bit_length() - 1
    one = (length[lg:] == 0) | (length == nbytes)
    two = ((length[lg:] == 1) & (length[:lg] != 0)) | (length == 2 * nbytes)
    return one, two


class ReadArbiter(wiring.Component):
    """Two read clients on one AXI4 master, writes tied off.

    Client 0 (``wqe_*``, WQE fetches, ARID 0) and client 1 (``pay_*``,
    payload, ARID 1) each give bursts on a request stream and take their
    R beats by RID, so an interconnect may return the two out of order.
    The AR choice alternates when both wait and is held until ARREADY (an
    AXI master may not withdraw ARVALID). ``m_axi`` and the requests carry
    ``addr_width``-bit addresses. Latency 0 cycles (AR and R are passed
    through combinationally); one AR per cycle, one R beat per cycle.
    """

    def __init__(self, data_width: int = 64, id_width: int = 4, addr_width: int = 64):
        self.data_width = data_width
        super().__init__(
            {
                "m_axi": Out(
                    AXI4Signature(addr_width=addr_width, data_width=data_width,
                                  id_width=id_width)
                ),
                "wqe_req": In(stream.Signature(ReadRequest(addr_width))),
                "wqe_data": Out(stream.Signature(ReadData(data_width))),
                "pay_req": In(stream.Signature(ReadRequest(addr_width))),
                "pay_data": Out(stream.Signature(ReadData(data_width))),
            }
        )

    def elaborate(self, platform):
        m = Module()
        axi = self.m_axi
        size = (self.data_width // 8).bit_length() - 1
        m.d.comb += [
            axi.awvalid.eq(0),
            axi.wvalid.eq(0),
            axi.bready.eq(1),
            axi.arsize.eq(size),
            axi.arburst.eq(AXI_BURST_INCR),
            axi.arcache.eq(0b0011),  # normal non-cacheable bufferable
            axi.arprot.eq(0b000),
            axi.arlock.eq(0),
        ]
        # the client granted last; held while its request waits for ARREADY
        owner = Signal()
        locked = Signal()
        choose_pay = Mux(
            locked, owner, Mux(self.wqe_req.valid & self.pay_req.valid, ~owner, self.pay_req.valid)
        )
        with m.If(choose_pay):
            m.d.comb += [
                axi.arvalid.eq(self.pay_req.valid),
                axi.araddr.eq(self.pay_req.payload.addr),
                axi.arlen.eq(self.pay_req.payload.len),
                axi.arid.eq(1),
                self.pay_req.ready.eq(axi.arready),
            ]
        with m.Else():
            m.d.comb += [
                axi.arvalid.eq(self.wqe_req.valid),
                axi.araddr.eq(self.wqe_req.payload.addr),
                axi.arlen.eq(self.wqe_req.payload.len),
                axi.arid.eq(0),
                self.wqe_req.ready.eq(axi.arready),
            ]
        with m.If(axi.arvalid):
            m.d.sync += [owner.eq(choose_pay), locked.eq(~axi.arready)]

        m.d.comb += [
            self.wqe_data.payload.data.eq(axi.rdata),
            self.wqe_data.payload.last.eq(axi.rlast),
            self.pay_data.payload.data.eq(axi.rdata),
            self.pay_data.payload.last.eq(axi.rlast),
        ]
        with m.If(axi.rid == 1):
            m.d.comb += [self.pay_data.valid.eq(axi.rvalid), axi.rready.eq(self.pay_data.ready)]
        with m.Else():
            m.d.comb += [self.wqe_data.valid.eq(axi.rvalid), axi.rready.eq(self.wqe_data.ready)]
        return m


class PayloadReader(wiring.Component):
    """AXI4 read bursts for each packet's payload.

    ``desc`` in (host address and length, 0..4096 bytes), ``req`` out (bursts
    with beat-aligned addresses, none crossing a 4 KiB boundary nor longer
    than 256 beats), ``info`` out (first byte's lane and length, for the
    ``Realigner``). Zero-length payloads issue nothing. ``info`` goes through
    a FIFO of ``max_outstanding`` (at least 2) packets, which bounds how far
    reads run ahead of the framer; its ``w_rdy`` is a flip-flop
    (``BlockRamFIFO`` in LUT RAM). ``desc`` is registered first (it comes
    from a block RAM's read port, late in the cycle) with its length - 1
    and whether it is not zero, so the length test and the span's adder
    start from flip-flops. Latency 2 cycles from ``desc`` to the first
    request; one burst per cycle. The burst length comes from narrow
    registers (the bytes left, the beat index below the boundary), not
    address-wide arithmetic, and taking a burst needs no subtraction (the
    boundaries still to cross count down). The burst registers load in
    every IDLE cycle, so their clock enable is the state or ``req.ready``,
    not the descriptor's handshake. Addresses are ``addr_width`` bits; the
    next burst's address wraps within them.
    """

    def __init__(self, data_width: int = 64, max_outstanding: int = 4, addr_width: int = 64):
        self.data_width = data_width
        self.max_outstanding = max_outstanding
        self.addr_width = addr_width
        super().__init__(
            {
                "desc": In(stream.Signature(PayloadDesc(addr_width))),
                "req": Out(stream.Signature(ReadRequest(addr_width))),
                "info": Out(stream.Signature(SegmentInfo())),
            }
        )

    def elaborate(self, platform):
        m = Module()
        nbytes = self.data_width // 8
        lg = nbytes.bit_length() - 1
        boundary = min(AXI_BOUNDARY, AXI_MAX_BEATS * nbytes)
        # SyncFIFOBuffered's ports and cycles, with ``w_rdy`` (and ``r_rdy``)
        # flip-flops: SyncFIFOBuffered's ``w_rdy`` is a compare of its level,
        # which was in front of ``desc.ready`` and so of the descriptor FIFO's
        # enables and read (5 levels into its ``out_free``).
        m.submodules.info_fifo = info_fifo = BlockRamFIFO(
            width=SegmentInfo().size, depth=self.max_outstanding, ram_style="distributed"
        )
        m.d.comb += [
            self.info.valid.eq(info_fifo.r_rdy),
            self.info.payload.eq(info_fifo.r_data),
            info_fifo.r_en.eq(self.info.ready),
        ]

        # The burst is planned from narrow registers: ``span_m1`` is the
        # packet's last byte relative to the beat-aligned ``addr`` (read
        # only for the burst that ends the packet); a burst that does not
        # end the packet runs to the next boundary, so its length in beats
        # - 1 is the complement of addr's beat bits below the boundary. The
        # packet's last byte relative to the boundary below its first byte
        # is split at the boundary into ``cross`` (the boundaries the packet
        # still crosses) and ``end_low`` (the last byte's offset below the
        # last boundary, the span of the burst that ends the packet when it
        # does not start it). Each burst after the first starts at a
        # boundary, so taking a burst needs no subtraction: ``cross`` counts
        # down, ``last`` is ``cross == 1`` and ``span_m1`` becomes
        # ``end_low``. No address-wide compare or subtract before ``req``,
        # which is one mux from flip-flops.
        bb = boundary.bit_length() - 1
        addr = Signal(self.addr_width)
        span_m1 = Signal(range(nbytes + (1 << 13)))
        to_boundary = Signal(bb - lg)  # beats - 1 up to the boundary
        m.d.comb += to_boundary.eq(~addr[lg:bb])
        last = Signal()
        cross = Signal(range((((1 << bb) - 1 + (1 << 13) - 2) >> bb) + 1))
        end_low = Signal(bb)

        # the input register: loaded when empty or taken in the same cycle,
        # with the length - 1 and whether it is not 0, so that neither the
        # length test nor a decrement lies behind it
        d = Signal(PayloadDesc(self.addr_width))
        d_len_m1 = Signal(13)
        d_nonzero = Signal()
        d_one_beat = Signal()
        d_two_beats = Signal()
        d_valid = Signal()
        d_take = Signal()
        m.d.comb += self.desc.ready.eq(~d_valid | d_take)
        with m.If(self.desc.ready):
            m.d.sync += d_valid.eq(self.desc.valid)
            with m.If(self.desc.valid):
                m.d.sync += [
                    d.eq(self.desc.payload),
                    d_len_m1.eq(self.desc.payload.length - 1),
                    d_nonzero.eq(self.desc.payload.length != 0),
                    Cat(d_one_beat, d_two_beats).eq(
                        Cat(*one_and_two_beats(self.desc.payload.length, nbytes))),
                ]

        # the info entry is the descriptor's, written when it is taken
        info_in = Signal(SegmentInfo())
        m.d.comb += [
            info_in.lane.eq(d.laddr[:lg]),
            info_in.length.eq(d.length),
            info_in.one_beat.eq(d_one_beat),
            info_in.two_beats.eq(d_two_beats),
            info_fifo.w_data.eq(info_in),
        ]
        # the last byte relative to the boundary below the first
        end = d.laddr[:bb] + d_len_m1

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += [
                    d_take.eq(d_valid & info_fifo.w_rdy),
                    info_fifo.w_en.eq(d_valid & d_nonzero),
                ]
                # the burst registers follow the descriptor in every IDLE
                # cycle (their clock enable is the state, not the
                # handshake); the cycle that takes it loads its values
                m.d.sync += [
                    addr.eq(d.laddr),
                    span_m1.eq(d.laddr[:lg] + d_len_m1),
                    last.eq((end >> bb) == 0),
                    cross.eq(end >> bb),
                    end_low.eq(end[:bb]),
                ]
                with m.If(d_take & d_nonzero):
                    m.next = "ISSUE"
            with m.State("ISSUE"):
                m.d.comb += [
                    self.req.valid.eq(1),
                    self.req.payload.addr.eq(Cat(Signal(lg), addr[lg:])),
                    self.req.payload.len.eq(Mux(last, span_m1 >> lg, to_boundary)),
                ]
                with m.If(self.req.ready):
                    m.d.sync += [
                        # the next burst starts at a boundary
                        addr.eq(Cat(Const(0, bb), addr[bb:] + 1)),
                        span_m1.eq(end_low),
                        cross.eq(cross - 1),
                        last.eq(cross == 1),
                    ]
                    with m.If(last):
                        m.next = "IDLE"
        return m


class Realigner(wiring.Component):
    """Unaligned AXI read beats to a packed payload stream.

    ``info`` in (first byte's lane in the first beat, length 1 or more, its
    one- and two-beat flags: ``SegmentInfo``), ``i`` in (R
    beats of the packet's bursts, in order; burst boundaries are not
    visible), ``o`` out (the payload bytes from lane 0, packed, ``last`` on
    the packet's final beat, lanes above ``keep`` zero). Each output beat is
    two consecutive input beats shifted down by the start lane; a packet
    needs at most one extra input beat, and when it needs none a final
    output beat is flushed without input. Latency 0 cycles (combinational
    shift from the registered previous beat). Throughput 1 beat/cycle. The
    packet's registers follow ``info`` in every IDLE cycle (their enable is
    the state), and whether it is one or two beats comes with ``info``
    (``SegmentInfo``: no compare of the length in front of ``keep`` and
    ``out_last``); whether the
    next beat is the last is a flip-flop too (``out_next_last``, registered
    with ``out_left``), so ``keep`` and ``out_last`` load from flip-flops.
    """

    def __init__(self, data_width: int = 64):
        self.data_width = data_width
        super().__init__(
            {
                "info": In(stream.Signature(SegmentInfo())),
                "i": In(stream.Signature(ReadData(data_width))),
                "o": Out(stream.Signature(Beat(data_width))),
            }
        )

    def elaborate(self, platform):
        m = Module()
        w = self.data_width
        nbytes = w // 8
        lg = nbytes.bit_length() - 1

        # The output beat is the ``nbytes`` bytes of (prev, cur) from byte
        # ``sel`` + 1: ``sel`` = first lane - 1 for an unaligned packet, and
        # nbytes - 1 (all of ``cur``) for an aligned one, so one registered
        # select serves both, and the flush too (the flushed beat's bytes are
        # all in ``prev``; its keep clears the lanes from ``cur``).
        sel = Signal(lg)
        aligned = Signal()  # first lane 0: beats pass straight through
        in_left = Signal(13 - lg + 2)  # input beats still to come, minus one
        out_left = Signal(13 - lg + 2)  # output beats still to send, minus one
        out_last = Signal()  # out_left == 0, registered with it
        out_next_last = Signal()  # out_left == 1, registered with it
        # the last beat's keep, registered: no byte count decoded behind it
        last_keep = Signal(nbytes)
        prev = Signal(w)
        have_prev = Signal()

        cur = self.i.payload.data
        pair = Cat(prev, cur)
        # each output byte a tree of 2:1 muxes on sel's bits (no decode of
        # sel fanning out to every bit), masked by ``keep``, a register of
        # its own (every beat but the last is full; it changes with
        # ``out_last``), so each lane's mask is one flip-flop
        window = Cat(*[index_select([pair.word_select(k + 1 + j, 8) for k in range(nbytes)], sel,
                                        exact=True)
                       for j in range(nbytes)])
        keep = Signal(nbytes)
        keep_bits = Cat(*[keep[i].replicate(8) for i in range(nbytes)])
        m.d.comb += [
            self.o.payload.data.eq(window & keep_bits),
            self.o.payload.keep.eq(keep),
            self.o.payload.last.eq(out_last),
        ]

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.info.ready.eq(1)
                # the packet's registers follow ``info`` in every IDLE cycle
                # (read only in STREAM and FLUSH, and ``o.valid`` is low
                # here): their enable is the state, not ``info.valid``
                info = self.info.payload
                first_lane = info.lane[:lg]
                # the last beat has ((length - 1) mod nbytes) + 1 bytes
                last_lane = (info.length[:lg] - 1)[:lg]
                last_keep_in = Cat(1, *[last_lane >= i for i in range(1, nbytes)])
                # one or two beats: flags in ``info`` (flip-flops)
                one_beat, two_beats = info.one_beat, info.two_beats
                m.d.sync += [
                    sel.eq(first_lane - 1),
                    aligned.eq(first_lane == 0),
                    in_left.eq((first_lane + info.length - 1) >> lg),
                    out_left.eq((info.length - 1) >> lg),
                    out_last.eq(one_beat),
                    out_next_last.eq(two_beats),
                    keep.eq(Mux(one_beat, last_keep_in, -1)),
                    last_keep.eq(last_keep_in),
                    have_prev.eq(0),
                ]
                with m.If(self.info.valid):
                    m.next = "STREAM"
            with m.State("STREAM"):
                with m.If(aligned):
                    m.d.comb += [self.o.valid.eq(self.i.valid), self.i.ready.eq(self.o.ready)]
                    with m.If(self.i.valid & self.o.ready):
                        m.d.sync += [in_left.eq(in_left - 1), out_left.eq(out_left - 1),
                                     out_last.eq(out_next_last),
                                     out_next_last.eq(out_left == 2),
                                     keep.eq(Mux(out_next_last, last_keep, -1))]
                        with m.If(out_last):
                            m.next = "IDLE"
                with m.Elif(~have_prev):
                    m.d.comb += self.i.ready.eq(1)
                    with m.If(self.i.valid):
                        m.d.sync += [prev.eq(cur), have_prev.eq(1), in_left.eq(in_left - 1)]
                        with m.If(in_left == 0):
                            m.next = "FLUSH"
                with m.Else():
                    m.d.comb += [self.o.valid.eq(self.i.valid), self.i.ready.eq(self.o.ready)]
                    with m.If(self.i.valid & self.o.ready):
                        m.d.sync += [
                            prev.eq(cur),
                            in_left.eq(in_left - 1),
                            out_left.eq(out_left - 1),
                            out_last.eq(out_next_last),
                            out_next_last.eq(out_left == 2),
                            keep.eq(Mux(out_next_last, last_keep, -1)),
                        ]
                        with m.If(out_last):
                            m.next = "IDLE"
                        with m.Elif(in_left == 0):
                            m.next = "FLUSH"
            with m.State("FLUSH"):
                # the packet's last beat (out_last is set): its bytes are in
                # ``prev``, the lanes above them (``cur``'s) cleared by keep
                m.d.comb += self.o.valid.eq(1)
                with m.If(self.o.ready):
                    m.next = "IDLE"
        return m

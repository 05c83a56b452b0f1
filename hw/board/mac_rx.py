"""The MAC's receive blocks: RxDecoder, RxFCSCheck and RxPacker (Ethernet
side, domain eth_rx) and RxFrameFilter (core side, domain sync).
The MAC and its data flow: hw/board/mac.py.
"""

from amaranth.hdl import (
    Array,
    Cat,
    Module,
    Mux,
    Signal,
)
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..crc import CRC32_INIT, CRC32_RESIDUE, crc32_bytes
from .mac_layouts import (
    ETH_PREAMBLE,
    ETH_SFD,
    FCS_BYTES,
    MIN_FRAME,
    BufferedBeat,
    RxByte,
    RxStatus,
    RxWord,
)
from .rgmii import DDRPairSignature

# ---------------------------------------------------------------------------
# RX, Ethernet side (domain eth_rx)


class RxDecoder(wiring.Component):
    """RGMII pairs to the bytes of a frame: DV/ER decode, preamble and SFD strip.

    Interface: ``rx`` (one RGMII cycle: rising/falling data and control),
    ``mii`` (1: 100/10 Mb/s, one nibble per cycle, the rising-edge one).
    Outputs, registered: ``byte`` with ``valid`` for each byte after the SFD;
    ``end`` for one cycle when DV falls after a frame, with ``odd_nibble``
    (MII: a half byte was left over) and ``rx_error`` (ER seen during the
    frame). A frame is recognised by any number of preamble bytes (nibbles)
    followed by the SFD; a DV period that starts with anything else is
    ignored until DV falls. ER outside DV (carrier extension, false carrier,
    in-band status) is ignored.
    Latency: 1 cycle. Throughput: one byte per cycle (GMII), one per two (MII).
    """

    rx: In(DDRPairSignature())
    mii: In(1)
    byte: Out(8)
    valid: Out(1)
    end: Out(1)
    odd_nibble: Out(1)
    rx_error: Out(1)

    def elaborate(self, platform):
        m = Module()
        dv = self.rx.ctl0
        er = self.rx.ctl0 ^ self.rx.ctl1
        gmii_byte = Cat(self.rx.d0, self.rx.d1)
        nibble = self.rx.d0
        low_nibble = Signal(4)
        half = Signal()  # MII: a low nibble is waiting for its high nibble
        er_seen = Signal()

        m.d.sync += [self.valid.eq(0), self.end.eq(0)]

        # Start of the frame data: the SFD byte (GMII), the SFD's high nibble (MII).
        is_sfd = Mux(self.mii, nibble == ETH_SFD >> 4, gmii_byte == ETH_SFD)
        is_preamble = Mux(self.mii, nibble == ETH_PREAMBLE & 0xF, gmii_byte == ETH_PREAMBLE)

        with m.FSM():
            with m.State("IDLE"):
                with m.If(dv):
                    m.d.sync += [er_seen.eq(er), half.eq(0)]
                    with m.If(is_sfd):
                        m.next = "DATA"
                    with m.Elif(is_preamble):
                        m.next = "PREAMBLE"
                    with m.Else():
                        m.next = "DISCARD"
            with m.State("PREAMBLE"):
                m.d.sync += er_seen.eq(er_seen | er)
                with m.If(~dv):
                    m.next = "IDLE"
                with m.Elif(is_sfd):
                    m.next = "DATA"
                with m.Elif(~is_preamble):
                    m.next = "DISCARD"
            with m.State("DATA"):
                with m.If(dv):
                    m.d.sync += er_seen.eq(er_seen | er)
                    with m.If(~self.mii):
                        m.d.sync += [self.byte.eq(gmii_byte), self.valid.eq(1)]
                    with m.Elif(~half):
                        m.d.sync += [low_nibble.eq(nibble), half.eq(1)]
                    with m.Else():
                        m.d.sync += [
                            self.byte.eq(Cat(low_nibble, nibble)),
                            self.valid.eq(1),
                            half.eq(0),
                        ]
                with m.Else():
                    m.d.sync += [
                        self.end.eq(1),
                        self.odd_nibble.eq(half),
                        self.rx_error.eq(er_seen),
                    ]
                    m.next = "IDLE"
            with m.State("DISCARD"):
                with m.If(~dv):
                    m.next = "IDLE"
        return m


class RxFCSCheck(wiring.Component):
    """Checks and strips the FCS; classifies the frame at its end.

    Interface: in, the decoder's ``byte``/``valid``/``end``/``odd_nibble``/
    ``rx_error``; out, ``o`` (an ``RxByte`` with ``o_valid``): the frame's
    bytes without the FCS, the last one with ``last`` and the frame's
    ``status``. The last 5 bytes are held back until the frame ends, so that
    the last data byte can carry ``last``; a frame with fewer than 5 bytes
    ends with a byte-less marker (``status.empty``).
    The CRC runs over data and FCS; the frame is good if the register then
    holds CRC32_RESIDUE. Lengths count the bytes after the SFD, FCS included.
    Latency: 5 bytes plus 1 cycle. Throughput: one byte per cycle.
    """

    def __init__(self, max_frame: int = 1518):
        self.max_frame = max_frame
        super().__init__(
            {
                "byte": In(8),
                "valid": In(1),
                "end": In(1),
                "odd_nibble": In(1),
                "rx_error": In(1),
                "o": Out(RxByte()),
                "o_valid": Out(1),
            }
        )

    def elaborate(self, platform):
        m = Module()
        held = Array(Signal(8, name=f"held{i}") for i in range(FCS_BYTES + 1))
        count = Signal(range(FCS_BYTES + 2))
        crc = Signal(32, init=CRC32_INIT)
        length = Signal(range(self.max_frame + 2))

        m.d.sync += self.o_valid.eq(0)
        with m.If(self.valid):
            m.d.sync += [held[0].eq(self.byte), crc.eq(crc32_bytes(crc, self.byte, 1))]
            for i in range(1, FCS_BYTES + 1):
                m.d.sync += held[i].eq(held[i - 1])
            with m.If(count == FCS_BYTES + 1):
                m.d.sync += [
                    self.o.data.eq(held[FCS_BYTES]),
                    self.o.last.eq(0),
                    self.o.status.eq(0),
                    self.o_valid.eq(1),
                ]
            with m.Else():
                m.d.sync += count.eq(count + 1)
            with m.If(length <= self.max_frame):
                m.d.sync += length.eq(length + 1)
        with m.Elif(self.end):
            m.d.sync += [
                self.o.data.eq(held[FCS_BYTES]),
                self.o.last.eq(1),
                self.o.status.fcs_bad.eq(crc != CRC32_RESIDUE),
                self.o.status.runt.eq(length < MIN_FRAME),
                self.o.status.oversize.eq(length > self.max_frame),
                self.o.status.odd_nibble.eq(self.odd_nibble),
                self.o.status.rx_error.eq(self.rx_error),
                self.o.status.overflow.eq(0),
                self.o.status.empty.eq(count != FCS_BYTES + 1),
                self.o_valid.eq(1),
                count.eq(0),
                length.eq(0),
                crc.eq(CRC32_INIT),
            ]
        return m


class RxPacker(wiring.Component):
    """Packs bytes into W-bit beats (lane 0 first) for the crossing to the core.

    Interface: ``i`` (an ``RxByte``) with ``i_valid``; ``o`` (an ``RxWord``)
    with ``o_valid``, and ``o_ready`` from the clock-crossing FIFO. There is
    no backpressure towards the PHY: a beat that finds the FIFO full is lost
    and the next beat written carries ``status.overflow``, so the core side
    drops the frame (and, if the lost beat was a frame's last, the frame it
    merged into). With the core clock above the line rate in beats
    (docs/board.md) the FIFO never fills.
    Latency: 1 cycle after the byte that completes a beat. Throughput: one
    byte per cycle, one beat per W/8 bytes.
    """

    def __init__(self, data_width: int = 64):
        self.data_width = data_width
        super().__init__(
            {
                "i": In(RxByte()),
                "i_valid": In(1),
                "o": Out(RxWord(data_width)),
                "o_valid": Out(1),
                "o_ready": In(1),
            }
        )

    def elaborate(self, platform):
        m = Module()
        lanes = self.data_width // 8
        acc = Signal(self.data_width)
        keep = Signal(lanes)
        lane = Signal(range(lanes))
        lost = Signal()

        with m.If(self.o_valid & ~self.o_ready):
            m.d.sync += lost.eq(1)
        with m.Elif(self.o_valid & self.o.status.overflow):
            m.d.sync += lost.eq(0)

        m.d.sync += self.o_valid.eq(0)
        with m.If(self.i_valid):
            byte_in = ~(self.i.last & self.i.status.empty)
            new_data = Cat(
                *[Mux(lane == i, self.i.data, acc.word_select(i, 8)) for i in range(lanes)]
            )
            new_keep = keep | Mux(byte_in, 1 << lane, 0)
            with m.If(self.i.last | (lane == lanes - 1)):
                status = Signal(RxStatus())
                m.d.comb += status.eq(Mux(self.i.last, self.i.status, 0))
                m.d.sync += [
                    self.o.data.eq(new_data),
                    self.o.keep.eq(new_keep),
                    self.o.last.eq(self.i.last),
                    self.o.status.eq(status),
                    self.o.status.overflow.eq(lost | (self.o_valid & ~self.o_ready)),
                    self.o_valid.eq(1),
                    acc.eq(0),
                    keep.eq(0),
                    lane.eq(0),
                ]
            with m.Else():
                m.d.sync += [acc.eq(new_data), keep.eq(new_keep), lane.eq(lane + 1)]
        return m



# ---------------------------------------------------------------------------
# Core side (domain sync)


class RxFrameFilter(wiring.Component):
    """Decides, on each frame's last beat, whether it is dropped, and counts why.

    Interface: ``i`` (stream of ``RxWord`` from the clock-crossing FIFO),
    ``o`` (stream of ``BufferedBeat`` into the RX PacketFIFO), ``pass_bad``,
    and one-cycle ``count_*`` strobes, one per frame, for the first reason
    in the order of the module docstring. A frame that lost a beat in the
    clock crossing is dropped and counted by ``count_lost``; the PacketFIFO
    counts the frames it has no space for.
    Latency: 0 (combinational). Throughput: one beat per cycle.
    """

    def __init__(self, data_width: int = 64):
        super().__init__(
            {
                "i": In(stream.Signature(RxWord(data_width))),
                "o": Out(stream.Signature(BufferedBeat(data_width))),
                "pass_bad": In(1),
                "count_lost": Out(1),
                "count_runt": Out(1),
                "count_oversize": Out(1),
                "count_odd_nibble": Out(1),
                "count_rx_error": Out(1),
                "count_bad_fcs": Out(1),
            }
        )

    def elaborate(self, platform):
        m = Module()
        word = self.i.payload
        st = word.status
        overflow_seen = Signal()  # a beat of this frame was lost in the crossing
        overflow = overflow_seen | st.overflow
        bad = st.runt | st.oversize | st.odd_nibble | st.rx_error | st.fcs_bad
        m.d.comb += [
            self.o.valid.eq(self.i.valid),
            self.i.ready.eq(self.o.ready),
            self.o.payload.data.eq(word.data),
            self.o.payload.keep.eq(word.keep),
            self.o.payload.last.eq(word.last),
            self.o.payload.user.eq(word.last & bad),
            self.o.payload.drop.eq(word.last & (overflow | st.empty | (bad & ~self.pass_bad))),
        ]
        handshake = self.i.valid & self.i.ready
        with m.If(handshake):
            m.d.sync += overflow_seen.eq(overflow & ~word.last)
        counted = handshake & word.last & ~overflow
        m.d.comb += [
            self.count_lost.eq(handshake & word.last & overflow),
            self.count_runt.eq(counted & st.runt),
            self.count_oversize.eq(counted & ~st.runt & st.oversize),
            self.count_odd_nibble.eq(counted & ~st.runt & ~st.oversize & st.odd_nibble),
            self.count_rx_error.eq(
                counted & ~st.runt & ~st.oversize & ~st.odd_nibble & st.rx_error
            ),
            self.count_bad_fcs.eq(
                counted & ~st.runt & ~st.oversize & ~st.odd_nibble & ~st.rx_error & st.fcs_bad
            ),
        ]
        return m

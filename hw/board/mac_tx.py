"""The MAC's transmit blocks: TxFrameFilter (core side, domain sync), and
TxUnpacker and TxFramer (Ethernet side, domain eth_tx).
The MAC and its data flow: hw/board/mac.py.
"""

from amaranth.hdl import (
    Cat,
    Const,
    Module,
    Mux,
    Signal,
)
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..bits import one_hot_select
from ..crc import CRC32_INIT, crc32_bytes
from ..pipeline import StreamRegister
from ..stream import AXIStreamSignature
from .mac_layouts import (
    ETH_PREAMBLE,
    ETH_SFD,
    FCS_BYTES,
    IFG_BYTES,
    MIN_FRAME,
    BufferedBeat,
    TxWord,
)
from .rgmii import DDRPairSignature


class TxFrameFilter(wiring.Component):
    """AXI4-Stream in, ``BufferedBeat`` out: a frame with ``tuser`` set on any
    beat is dropped at its last beat. ``tkeep`` = 0 is read as one byte, so
    every beat moves the frame forward.
    Latency: 0 (combinational). Throughput: one beat per cycle.
    """

    def __init__(self, data_width: int = 64):
        super().__init__(
            {
                "i": In(AXIStreamSignature(data_width)),
                "o": Out(stream.Signature(BufferedBeat(data_width))),
            }
        )

    def elaborate(self, platform):
        m = Module()
        user_seen = Signal()
        beat = self.o.payload
        m.d.comb += [
            self.o.valid.eq(self.i.tvalid),
            self.i.tready.eq(self.o.ready),
            beat.data.eq(self.i.tdata),
            beat.keep.eq(Mux(self.i.tkeep == 0, 1, self.i.tkeep)),
            beat.last.eq(self.i.tlast),
            beat.user.eq(0),
            beat.drop.eq(user_seen | self.i.tuser[0]),
        ]
        with m.If(self.i.tvalid & self.i.tready):
            m.d.sync += user_seen.eq(~self.i.tlast & (user_seen | self.i.tuser[0]))
        return m



# ---------------------------------------------------------------------------
# TX, Ethernet side (domain eth_tx)


class TxUnpacker(wiring.Component):
    """W-bit beats (lane 0 first) to bytes.

    Interface: ``i`` (stream of ``TxWord`` from the clock-crossing FIFO,
    whose read data may come straight from LUT RAM), ``o`` (stream of data
    byte with ``last``). A beat's bytes are its lanes up to the highest set
    ``keep`` bit (``keep`` is contiguous from lane 0; lane 0 is sent whatever
    its ``keep`` bit); a beat that is not its frame's last sends all its
    lanes.

    The input goes through a ``StreamRegister`` (the FIFO's read enable and
    read data meet no lane logic), and each lane's "the beat ends here" flag
    is worked out in front of it and registered with the data, so the
    lane-to-ready path is the one-hot lane ANDed with registered flags.
    Latency: 1 cycle (the input register). Throughput: one byte per cycle.
    """

    def __init__(self, data_width: int = 64):
        self.data_width = data_width
        super().__init__(
            {
                "i": In(stream.Signature(TxWord(data_width))),
                "o": Out(stream.Signature(data.StructLayout({"data": 8, "last": 1}))),
            }
        )

    def elaborate(self, platform):
        m = Module()
        lanes = self.data_width // 8
        # ``ends[i]``: the beat's bytes end at lane i (``keep`` is contiguous:
        # the last beat ends before its first clear keep bit; any beat ends at
        # the top lane). Worked out in front of the register, so ``at_end`` is
        # an AND-OR of flip-flops.
        word = self.i.payload
        ends = Cat(*(word.last & ~word.keep[i + 1] for i in range(lanes - 1)), Const(1, 1))
        m.submodules.reg = reg = StreamRegister(_EndsWord(self.data_width))
        m.d.comb += [
            reg.i.payload.data.eq(word.data),
            reg.i.payload.ends.eq(ends),
            reg.i.payload.last.eq(word.last),
            reg.i.valid.eq(self.i.valid),
            self.i.ready.eq(reg.i.ready),
        ]
        held = reg.o.payload
        lane = Signal(lanes, init=1)
        at_end = (lane & held.ends).any()
        byte = one_hot_select(lane, [held.data.word_select(i, 8) for i in range(lanes)])
        m.d.comb += [
            self.o.valid.eq(reg.o.valid),
            self.o.payload.data.eq(byte),
            self.o.payload.last.eq(held.last & at_end),
            reg.o.ready.eq(self.o.ready & at_end),
        ]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += lane.eq(Mux(at_end, 1, lane << 1))
        return m


class _EndsWord(data.StructLayout):
    """A ``TxWord`` in ``TxUnpacker``'s register: ``keep`` and ``last`` as
    one flag per lane, set where the beat's bytes end."""

    def __init__(self, data_width):
        super().__init__({"data": data_width, "ends": data_width // 8, "last": 1})


class TxFramer(wiring.Component):
    """Bytes of a frame to GMII/MII: preamble, SFD, padding, FCS, inter-frame gap.

    Interface: ``i`` (stream of data byte with ``last``), ``mii`` (1: one
    nibble per cycle, low nibble first, each sent at both clock edges), ``tx``
    (the RGMII pair per cycle: data, EN and EN xor ER).
    A frame is sent as 7 preamble bytes, the SFD, its data zero-padded to 60
    bytes, the FCS, then at least ``IFG_BYTES`` (12) byte times with EN low
    before the next preamble: back to back, the gap is exactly 12. If the
    data runs dry inside a frame (the clock-crossing FIFO underran, which the
    store-and-forward buffer before it prevents), the framer sends error
    bytes (EN and ER) until data comes, so the receiver drops the frame.
    Latency: 1 cycle from a byte to its first nibble on ``tx`` (the preamble
    goes first). Throughput: one byte per cycle (GMII), per two cycles (MII).
    """

    i: In(stream.Signature(data.StructLayout({"data": 8, "last": 1})))
    mii: In(1)
    tx: Out(DDRPairSignature())

    def elaborate(self, platform):
        m = Module()
        txd = Signal(8)
        tx_en = Signal()
        tx_er = Signal()
        phase = Signal()  # MII: 0 = low nibble on the pins, 1 = high nibble
        m.d.sync += phase.eq(self.mii & ~phase)
        step = ~self.mii | phase  # the cycle in which the next byte is chosen

        crc = Signal(32, init=CRC32_INIT)
        length = Signal(range(MIN_FRAME))
        count = Signal(range(IFG_BYTES + 1))
        fcs = Signal(32)

        def send(byte, *, en=1, er=0):
            return [txd.eq(byte), tx_en.eq(en), tx_er.eq(er)]

        with m.If(step):
            with m.FSM():
                with m.State("IDLE"):
                    m.d.sync += send(0, en=0)
                    with m.If(self.i.valid):
                        m.d.sync += [*send(ETH_PREAMBLE), count.eq(1)]
                        m.next = "PREAMBLE"
                with m.State("PREAMBLE"):
                    with m.If(count == 7):
                        m.d.sync += [*send(ETH_SFD), crc.eq(CRC32_INIT), length.eq(0)]
                        m.next = "DATA"
                    with m.Else():
                        m.d.sync += [*send(ETH_PREAMBLE), count.eq(count + 1)]
                with m.State("DATA"):
                    m.d.comb += self.i.ready.eq(1)
                    with m.If(self.i.valid):
                        byte = self.i.payload.data
                        new_crc = crc32_bytes(crc, byte, 1)
                        m.d.sync += [*send(byte), crc.eq(new_crc)]
                        with m.If(length != MIN_FRAME - FCS_BYTES):
                            m.d.sync += length.eq(length + 1)
                        with m.If(self.i.payload.last):
                            with m.If(length + 1 >= MIN_FRAME - FCS_BYTES):
                                m.d.sync += [fcs.eq(~new_crc), count.eq(0)]
                                m.next = "FCS"
                            with m.Else():
                                m.next = "PAD"
                    with m.Else():
                        m.d.sync += send(0, er=1)
                with m.State("PAD"):
                    new_crc = crc32_bytes(crc, Const(0, 8), 1)
                    m.d.sync += [*send(0), crc.eq(new_crc), length.eq(length + 1)]
                    with m.If(length + 1 == MIN_FRAME - FCS_BYTES):
                        m.d.sync += [fcs.eq(~new_crc), count.eq(0)]
                        m.next = "FCS"
                with m.State("FCS"):
                    m.d.sync += [*send(fcs.word_select(count[:2], 8)), count.eq(count + 1)]
                    with m.If(count == FCS_BYTES - 1):
                        m.d.sync += count.eq(IFG_BYTES)
                        m.next = "IFG"
                with m.State("IFG"):
                    m.d.sync += [*send(0, en=0), count.eq(count - 1)]
                    with m.If(count == 1):
                        m.next = "IDLE"

        nibble = Mux(phase, txd[4:], txd[:4])
        m.d.comb += [
            self.tx.d0.eq(Mux(self.mii, nibble, txd[:4])),
            self.tx.d1.eq(Mux(self.mii, nibble, txd[4:])),
            self.tx.ctl0.eq(tx_en),
            self.tx.ctl1.eq(tx_en ^ tx_er),
        ]
        return m

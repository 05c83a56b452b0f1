"""Ethernet MAC for RGMII at 1 Gb/s and 100 Mb/s, with an AXI4-Stream core side.

``RGMIIMAC`` is the top; it is built from small components, each usable and
testable alone (the byte-level ones run in the ``sync`` domain and are
renamed into the Ethernet clock domains by the top):

RX, PHY to core::

    RGMIIDDR    pins to a (rising, falling) pair per cycle          eth_rx
    RxDecoder   DV/ER, preamble and SFD strip, MII nibbles to bytes eth_rx
    RxFCSCheck  FCS check and strip, runt/oversize                  eth_rx
    RxPacker    bytes to W-bit beats                                eth_rx
    AsyncFIFO   eth_rx to sync
    RxFrameFilter  drop or tuser, per-reason counts                 sync
    StreamRegister  the filter's decision registered                sync
    PacketFIFO  store and forward, drops bad frames                 sync  -> rx_axis

TX, core to PHY::

    tx_axis ->  TxFrameFilter  tuser drops a frame                  sync
    PacketFIFO  store and forward                                   sync
    AsyncFIFO   sync to eth_tx
    TxUnpacker  W-bit beats to bytes (input registered)             eth_tx
    StreamRegister  bytes registered                                eth_tx
    TxFramer    preamble, SFD, pad, FCS, 12-byte IFG, MII nibbles   eth_tx
    RGMIIDDR    pair per cycle to the pins                          eth_tx/eth_tx90

Clock domains: ``sync`` is the core clock; ``eth_tx`` (125 MHz at 1 Gb/s,
25 MHz at 100 Mb/s) and ``eth_tx90`` (the same clock shifted by 90 degrees,
for the forwarded tx_clk) come from the board's clock generator; ``eth_rx``
is the PHY's rx_clk, defined by ``RGMIIDDR``. The core clock must carry one
W-bit beat per cycle faster than the line fills them: above 125 MHz / (W/8)
plus margin, so 20 MHz at W = 64 (see docs/board.md).

Frame checks on RX, each counted in ``stats`` (one reason per frame, in this
order): ``rx_overflow`` (no buffer space: always dropped), ``rx_runt`` (fewer
than 64 bytes with FCS), ``rx_oversize`` (more than ``max_frame`` bytes with
FCS), ``rx_odd_nibble`` (100 Mb/s: the frame ended on half a byte; cannot
happen at 1 Gb/s), ``rx_error`` (RX_ER seen during the frame), ``rx_bad_fcs``.
A bad frame is dropped unless ``rx_pass_bad`` is set; then it is delivered
with ``tuser`` = 1 on its last beat (frames that hold no byte once the FCS is
removed are dropped anyway). ``rx_frames`` counts good frames delivered.

Files: hw/board/mac_layouts.py (constants, counters, beat layouts),
hw/board/mac_rx.py (RxDecoder, RxFCSCheck, RxPacker, RxFrameFilter),
hw/board/packet_fifo.py (PacketFIFO), hw/board/mac_tx.py (TxFrameFilter,
TxUnpacker, TxFramer), and this file (RGMIIMAC, which joins them).
"""

from amaranth.hdl import (
    Cat,
    ClockDomain,
    ClockSignal,
    DomainRenamer,
    Module,
    ResetSignal,
    Signal,
)
from amaranth.lib import data, fifo, wiring
from amaranth.lib.cdc import FFSynchronizer, ResetSynchronizer
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ..pipeline import StreamRegister, forward_register
from ..stream import AXIStreamSignature, check_data_width
from .mac_layouts import (
    ETH_PREAMBLE,
    ETH_SFD,
    IFG_BYTES,
    MIN_FRAME,
    STATS,
    BufferedBeat,
    MACStatsSignature,
    RxStatus,
    RxWord,
    TxWord,
)
from .mac_rx import RxDecoder, RxFCSCheck, RxFrameFilter, RxPacker
from .mac_tx import TxFrameFilter, TxFramer, TxUnpacker
from .packet_fifo import PacketFIFO
from .rgmii import RGMIIDDR, RGMIIPinSignature

__all__ = [
    "ETH_PREAMBLE",
    "ETH_SFD",
    "IFG_BYTES",
    "MIN_FRAME",
    "MACStatsSignature",
    "PacketFIFO",
    "RGMIIMAC",
    "RxDecoder",
    "RxFCSCheck",
    "RxFrameFilter",
    "RxPacker",
    "RxStatus",
    "TxFrameFilter",
    "TxFramer",
    "TxUnpacker",
    "STATS",
]


# ---------------------------------------------------------------------------
# The MAC


class RGMIIMAC(wiring.Component):
    """Ethernet MAC: RGMII pins on one side, AXI4-Stream frames without FCS on the other.

    Ports (domain ``sync`` unless said):

    ``tx_axis`` In(AXIStreamSignature(W))
        Frames to send, without FCS; lane 0 first on the wire, packed
        ``tkeep``. ``tuser`` = 1 on any beat drops the frame. Frames shorter
        than 60 bytes are zero-padded. A frame longer than the TX buffer is
        dropped (``tx_dropped``).
    ``rx_axis`` Out(AXIStreamSignature(W))
        Received frames without FCS; ``tuser`` = 1 on the last beat marks a
        bad frame (only with ``rx_pass_bad``).
    ``mii_select`` In(1)
        0: 1 Gb/s (GMII bytes, eth_tx at 125 MHz); 1: 100/10 Mb/s (MII
        nibbles, eth_tx at 25/2.5 MHz). Static: change it only while idle.
    ``rx_pass_bad`` In(1)
        Deliver bad frames with ``tuser`` instead of dropping them.
    ``stats`` Out(MACStatsSignature())
        Wrapping 32-bit counters, see ``STATS``.
    ``rgmii`` Out(RGMIIPinSignature())
        The pins, only when ``pads`` is None (simulation, Verilog export).

    Parameters: ``data_width`` W (8 * power of two, 64 by default);
    ``max_frame``, the largest good frame in bytes with FCS (1518; 9018 for
    jumbo frames); ``rx_buffer``/``tx_buffer`` in bytes (at least
    ``2 * max_frame`` by default, rounded up to a power of two of beats);
    ``cdc_depth`` beats in each clock-crossing FIFO; ``pads`` for a platform.

    Latency (1 Gb/s, W = 64): RX, from the last FCS byte on the pins to the
    first beat on ``rx_axis``, about 9 eth_rx cycles plus the AsyncFIFO
    (about 4 sync cycles), the filter's register stage (1 cycle), the PacketFIFO
    (2 cycles) once the whole frame is in (store and forward) and the output
    register (1 cycle). TX, from the
    last beat of a frame to the first preamble nibble, 2 sync cycles into the
    PacketFIFO, the AsyncFIFO (about 4 eth_tx cycles), the register stages
    in the unpacker and after it (1 cycle each) and 1 cycle. Throughput:
    line rate in both directions (one byte per 125 MHz cycle) with
    back-to-back frames at the 12-byte minimum inter-frame gap, as long as
    the core clock meets the bound in the module docstring.
    """

    def __init__(
        self,
        data_width: int = 64,
        *,
        max_frame: int = 1518,
        rx_buffer: int | None = None,
        tx_buffer: int | None = None,
        cdc_depth: int = 8,
        pads=None,
    ):
        check_data_width(data_width, minimum=8, maximum=512)
        lanes = data_width // 8
        self.data_width = data_width
        self.max_frame = max_frame
        self.rx_depth = 1 << ceil_log2(-(-(rx_buffer or 2 * max_frame) // lanes))
        self.tx_depth = 1 << ceil_log2(-(-(tx_buffer or 2 * max_frame) // lanes))
        self.cdc_depth = cdc_depth
        self._pads = pads
        members = {
            "tx_axis": In(AXIStreamSignature(data_width)),
            "rx_axis": Out(AXIStreamSignature(data_width)),
            "mii_select": In(1),
            "rx_pass_bad": In(1),
            "stats": Out(MACStatsSignature()),
        }
        if pads is None:
            members["rgmii"] = Out(RGMIIPinSignature())
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        W = self.data_width
        m.submodules.ddr = ddr = RGMIIDDR(self._pads)
        m.domains.eth_rx = ClockDomain()
        m.d.comb += ClockSignal("eth_rx").eq(ddr.rx_clk)
        m.submodules.eth_rx_reset = ResetSynchronizer(ResetSignal("sync"), domain="eth_rx")
        if self._pads is None:
            wiring.connect(m, wiring.flipped(self.rgmii), ddr.pins)

        # RX on eth_rx
        rx_mii = Signal()
        m.submodules.rx_mii_sync = FFSynchronizer(self.mii_select, rx_mii, o_domain="eth_rx")
        rx_dom = DomainRenamer("eth_rx")
        m.submodules.rx_decoder = dec = rx_dom(RxDecoder())
        m.submodules.rx_fcs = fcs = rx_dom(RxFCSCheck(self.max_frame))
        m.submodules.rx_packer = packer = rx_dom(RxPacker(W))
        m.submodules.rx_cdc = rx_cdc = fifo.AsyncFIFO(
            width=RxWord(W).size, depth=self.cdc_depth, w_domain="eth_rx", r_domain="sync"
        )
        wiring.connect(m, ddr.rx, dec.rx)
        m.d.comb += [
            dec.mii.eq(rx_mii),
            fcs.byte.eq(dec.byte),
            fcs.valid.eq(dec.valid),
            fcs.end.eq(dec.end),
            fcs.odd_nibble.eq(dec.odd_nibble),
            fcs.rx_error.eq(dec.rx_error),
            packer.i.eq(fcs.o),
            packer.i_valid.eq(fcs.o_valid),
            rx_cdc.w_data.eq(packer.o),
            rx_cdc.w_en.eq(packer.o_valid),
            packer.o_ready.eq(rx_cdc.w_rdy),
        ]

        # RX on sync. The filter's output goes through a register stage: the
        # buffer's commit or drop, and its counters, would otherwise sit
        # behind the filter's decision and the FIFO's pointer compare (r_rdy).
        m.submodules.rx_filter = rx_filter = RxFrameFilter(W)
        m.submodules.rx_filter_reg = rx_reg = StreamRegister(BufferedBeat(W))
        m.submodules.rx_buffer = rx_buf = PacketFIFO(W, self.rx_depth, backpressure=False)
        m.d.comb += [
            rx_filter.i.payload.eq(rx_cdc.r_data),
            rx_filter.i.valid.eq(rx_cdc.r_rdy),
            rx_cdc.r_en.eq(rx_filter.i.ready),
            rx_filter.pass_bad.eq(self.rx_pass_bad),
        ]
        wiring.connect(m, rx_filter.o, rx_reg.i)
        wiring.connect(m, rx_reg.o, rx_buf.w)
        # The buffer's block RAM output reaches rx_axis through one flip-flop
        # per bit: its consumer is another block, placed apart.
        rx = self.rx_axis
        beat = rx_buf.r.payload
        forward_register(m, rx_buf.r.valid, rx_buf.r.ready,
                         Cat(beat.data, beat.keep, beat.last, beat.user),
                         rx.tvalid, rx.tready, Cat(rx.tdata, rx.tkeep, rx.tlast, rx.tuser),
                         "rx_out")

        # TX on sync
        m.submodules.tx_filter = tx_filter = TxFrameFilter(W)
        m.submodules.tx_buffer = tx_buf = PacketFIFO(W, self.tx_depth, backpressure=True)
        m.submodules.tx_cdc = tx_cdc = fifo.AsyncFIFO(
            width=TxWord(W).size, depth=self.cdc_depth, w_domain="sync", r_domain="eth_tx"
        )
        wiring.connect(m, wiring.flipped(self.tx_axis), tx_filter.i)
        wiring.connect(m, tx_filter.o, tx_buf.w)
        tx_word = Signal(TxWord(W))
        m.d.comb += [
            tx_word.data.eq(tx_buf.r.payload.data),
            tx_word.keep.eq(tx_buf.r.payload.keep),
            tx_word.last.eq(tx_buf.r.payload.last),
            tx_cdc.w_data.eq(tx_word),
        ]
        # The buffer's read side takes a flip-flop as its ready, so that its
        # block RAM's clock enable does not wait on the clock-crossing FIFO's
        # full compare: ``cdc_room`` says that a write in this cycle fits,
        # worked out a cycle ahead from the FIFO's w_level, which lags its
        # write pointer by a cycle, plus the writes of this cycle and the one
        # before (reads on the other side only make room).
        cdc_room = Signal(init=1)
        cdc_wrote = Signal()
        tx_write = tx_buf.r.valid & cdc_room
        m.d.comb += [tx_cdc.w_en.eq(tx_write), tx_buf.r.ready.eq(cdc_room)]
        m.d.sync += [cdc_wrote.eq(tx_write),
                     cdc_room.eq(tx_cdc.w_level + cdc_wrote + tx_write < self.cdc_depth)]

        # TX on eth_tx
        tx_mii = Signal()
        m.submodules.tx_mii_sync = FFSynchronizer(self.mii_select, tx_mii, o_domain="eth_tx")
        tx_dom = DomainRenamer("eth_tx")
        # The clock-crossing FIFO's read data (LUT RAM, read asynchronously)
        # and its read enable meet the unpacker's input register, not its
        # byte-lane logic (TxUnpacker).
        m.submodules.tx_unpacker = unpacker = tx_dom(TxUnpacker(W))
        # And the bytes: the lane select and the framer's CRC update would
        # otherwise be one path.
        m.submodules.tx_byte_reg = byte_reg = tx_dom(
            StreamRegister(data.StructLayout({"data": 8, "last": 1})))
        m.submodules.tx_framer = framer = tx_dom(TxFramer())
        m.d.comb += [
            unpacker.i.payload.eq(tx_cdc.r_data),
            unpacker.i.valid.eq(tx_cdc.r_rdy),
            tx_cdc.r_en.eq(unpacker.i.ready),
            framer.mii.eq(tx_mii),
        ]
        wiring.connect(m, unpacker.o, byte_reg.i)
        wiring.connect(m, byte_reg.o, framer.i)
        wiring.connect(m, framer.tx, ddr.tx)

        # Counters
        strobes = {
            "rx_frames": rx_buf.committed & ~rx_buf.committed_user,
            "rx_bad_fcs": rx_filter.count_bad_fcs,
            "rx_runt": rx_filter.count_runt,
            "rx_oversize": rx_filter.count_oversize,
            "rx_odd_nibble": rx_filter.count_odd_nibble,
            "rx_error": rx_filter.count_rx_error,
            "rx_overflow": rx_buf.overflowed | rx_filter.count_lost,
            "tx_frames": tx_buf.committed,
            "tx_dropped": tx_buf.dropped | tx_buf.overflowed,
        }
        # Each strobe is registered before it enables its 32 counter bits: the
        # RX filter's strobes come from the clock-crossing FIFO's read logic.
        for name, strobe in strobes.items():
            counter = getattr(self.stats, name)
            count = Signal(name=f"count_{name}")
            m.d.sync += count.eq(strobe)
            with m.If(count):
                m.d.sync += counter.eq(counter + 1)
        return m

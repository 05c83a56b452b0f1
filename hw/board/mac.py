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
    StreamRegister  read data and enable registered                 eth_tx
    TxUnpacker  W-bit beats to bytes                                eth_tx
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
"""

from amaranth.hdl import (
    Array,
    Cat,
    ClockDomain,
    ClockSignal,
    Const,
    DomainRenamer,
    Module,
    Mux,
    ResetSignal,
    Signal,
)
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.cdc import FFSynchronizer, ResetSynchronizer
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ..arbiter import one_hot_select
from ..crc import CRC32_INIT, CRC32_RESIDUE, crc32_bytes
from ..pipeline import StreamRegister, forward_register, unchecked_read_port
from ..stream import AXIStreamSignature, check_data_width
from .rgmii import RGMIIDDR, DDRPairSignature, RGMIIPinSignature

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

ETH_PREAMBLE = 0x55
ETH_SFD = 0xD5
IFG_BYTES = 12
MIN_FRAME = 64  # with FCS
FCS_BYTES = 4

# (name, description) of each 32-bit counter in ``stats``; they wrap.
STATS = (
    ("rx_frames", "good frames delivered on rx_axis"),
    ("rx_bad_fcs", "frames with a bad FCS"),
    ("rx_runt", "frames shorter than 64 bytes with FCS"),
    ("rx_oversize", "frames longer than max_frame bytes with FCS"),
    ("rx_odd_nibble", "100 Mb/s frames that ended on half a byte"),
    ("rx_error", "frames with RX_ER asserted by the PHY"),
    ("rx_overflow", "frames dropped for lack of buffer space"),
    ("tx_frames", "frames accepted whole for transmission"),
    ("tx_dropped", "frames dropped on TX: tuser set, or longer than the TX buffer"),
)


class MACStatsSignature(wiring.Signature):
    def __init__(self):
        super().__init__({name: Out(32) for name, _ in STATS})


class RxStatus(data.StructLayout):
    """Why a received frame is bad; valid with its last byte or beat."""

    def __init__(self):
        super().__init__(
            {
                "fcs_bad": 1,
                "runt": 1,
                "oversize": 1,
                "odd_nibble": 1,
                "rx_error": 1,
                "overflow": 1,  # a beat was lost crossing to the core clock
                "empty": 1,  # no byte left once the FCS is removed
            }
        )


class RxByte(data.StructLayout):
    def __init__(self):
        super().__init__({"data": 8, "last": 1, "status": RxStatus()})


class RxWord(data.StructLayout):
    """A beat crossing from eth_rx to the core clock."""

    def __init__(self, data_width):
        super().__init__(
            {
                "data": data_width,
                "keep": data_width // 8,
                "last": 1,
                "status": RxStatus(),
            }
        )


class TxWord(data.StructLayout):
    """A beat crossing from the core clock to eth_tx."""

    def __init__(self, data_width):
        super().__init__({"data": data_width, "keep": data_width // 8, "last": 1})


class BufferedBeat(data.StructLayout):
    """A beat into a PacketFIFO; ``drop`` is read on the last beat only."""

    def __init__(self, data_width):
        super().__init__(
            {
                "data": data_width,
                "keep": data_width // 8,
                "last": 1,
                "user": 1,
                "drop": 1,
            }
        )


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


class PacketFIFO(wiring.Component):
    """Store-and-forward frame FIFO that can drop a frame at its last beat.

    Interface: ``w`` (stream of ``BufferedBeat``), ``r`` (stream of
    ``stream.Beat``-like ``data``/``keep``/``last``/``user``). A frame
    becomes readable only once its last beat is written with ``drop`` = 0;
    with ``drop`` = 1 its beats are discarded. A frame that does not fit is
    discarded too: with ``backpressure`` (TX) ``w.ready`` falls while the
    buffer is full and frames are waiting to be read, and a frame that alone
    fills the buffer is discarded; without it (RX) ``w.ready`` is always 1 and
    a frame that meets a full buffer is discarded.
    Strobes for one cycle: ``committed`` (with ``committed_user``, the last
    beat's ``user``), ``dropped`` (on ``drop``, whether or not it also lacked
    space), ``overflowed`` (for lack of space only).
    Latency: 2 cycles from the last beat written to the first beat readable.
    Throughput: one beat per cycle in and out.
    """

    def __init__(self, data_width: int = 64, depth: int = 512, *, backpressure: bool = False):
        if depth & (depth - 1):
            raise ValueError(f"PacketFIFO depth must be a power of two, not {depth}")
        self.data_width, self.depth, self.backpressure = data_width, depth, backpressure
        self._stored = data.StructLayout(
            {"data": data_width, "keep": data_width // 8, "last": 1, "user": 1}
        )
        super().__init__(
            {
                "w": In(stream.Signature(BufferedBeat(data_width))),
                "r": Out(stream.Signature(self._stored)),
                "committed": Out(1),
                "committed_user": Out(1),
                "dropped": Out(1),
                "overflowed": Out(1),
            }
        )

    def elaborate(self, platform):
        m = Module()
        abits = ceil_log2(self.depth)
        # A read never meets a write of its entry (only committed beats are
        # read, and the write pointer reaches the read pointer only when the
        # buffer is full, when nothing is written), so no read-during-write
        # bypass (hw/pipeline.py unchecked_read_port).
        m.submodules.mem = mem = Memory(shape=self._stored, depth=self.depth, init=[],
                                        attrs={"no_rw_check": 1})
        wr = mem.write_port()
        rd = unchecked_read_port(m, mem)

        wp = Signal(abits + 1)
        wp_commit = Signal(abits + 1)
        rp = Signal(abits + 1)
        overflow = Signal()  # the current frame lost a beat: drop it at its end
        # The fill state is kept in counters and registered flags, so that no
        # pointer subtraction or compare lies between the registers and
        # w.ready, the write enable and the strobes: ``used`` = wp - rp,
        # ``readable`` = wp_commit - rp, ``full`` = (used == depth),
        # ``nothing_committed`` = (readable == 0).
        used = Signal(range(self.depth + 1))
        readable = Signal(range(self.depth + 1))
        full = Signal()
        nothing_committed = Signal(init=1)
        if self.backpressure:
            m.d.comb += self.w.ready.eq(~full | nothing_committed)
        else:
            m.d.comb += self.w.ready.eq(1)

        beat = self.w.payload
        handshake = self.w.valid & self.w.ready
        writes = handshake & ~full & ~overflow  # the beat goes into the memory
        lost = overflow | full
        commit = handshake & beat.last & ~lost & ~beat.drop
        drop = handshake & beat.last & (lost | beat.drop)
        load = ~nothing_committed & (~self.r.valid | self.r.ready)
        m.d.comb += [
            wr.addr.eq(wp[:abits]),
            wr.data.data.eq(beat.data),
            wr.data.keep.eq(beat.keep),
            wr.data.last.eq(beat.last),
            wr.data.user.eq(beat.user),
            wr.en.eq(writes),
        ]
        m.d.sync += [
            self.committed.eq(commit),
            # A frame dropped anyway is not also an overflow: each frame is
            # counted once.
            self.overflowed.eq(drop & ~beat.drop),
            self.dropped.eq(drop & beat.drop),
        ]
        with m.If(handshake):
            m.d.sync += overflow.eq(~beat.last & lost)
        with m.If(commit):
            m.d.sync += [wp_commit.eq(wp + 1), self.committed_user.eq(beat.user)]
        with m.If(drop):
            m.d.sync += wp.eq(wp_commit)
        with m.Elif(writes):
            m.d.sync += wp.eq(wp + 1)

        # The counters after this cycle's write, read and drop, picked from
        # candidates computed from the registers alone (the read decision
        # comes late, through the sink's ready): a drop leaves the readable
        # beats, a commit makes the whole frame readable (its last beat is
        # written in this cycle).
        used_inc, used_dec = Signal.like(used), Signal.like(used)
        readable_dec = Signal.like(readable)
        m.d.comb += [used_inc.eq(used + 1), used_dec.eq(used - 1),
                     readable_dec.eq(readable - 1)]
        used_written = Mux(load, used, used_inc)
        used_after = Mux(writes, used_written, Mux(load, used_dec, used))
        readable_after = Mux(load, readable_dec, readable)
        m.d.sync += [
            used.eq(Mux(drop, readable_after, used_after)),
            readable.eq(Mux(commit, used_written, readable_after)),
            # Full after a drop only when committed frames fill the buffer
            # (RX); otherwise it fills with the last free entry written.
            full.eq(~load & Mux(drop, readable == self.depth,
                                full | (writes & (used == self.depth - 1)))),
            # A commit leaves at least its last beat.
            nothing_committed.eq(~commit & Mux(load, readable == 1, nothing_committed)),
        ]

        m.d.comb += [rd.addr.eq(rp[:abits]), rd.en.eq(load), self.r.payload.eq(rd.data)]
        with m.If(load):
            m.d.sync += [rp.eq(rp + 1), self.r.valid.eq(1)]
        with m.Elif(self.r.ready):
            m.d.sync += self.r.valid.eq(0)
        return m


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

    Interface: ``i`` (stream of ``TxWord`` from the clock-crossing FIFO),
    ``o`` (stream of data byte with ``last``). A beat's bytes are its lanes up
    to the highest set ``keep`` bit (``keep`` is contiguous from lane 0; lane
    0 is sent whatever its ``keep`` bit).
    Latency: 0 (combinational from the FIFO's output). Throughput: one byte
    per cycle.
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
        word = self.i.payload
        # The lane is one-hot and each lane knows whether the beat ends there
        # (``keep`` is contiguous: the last beat ends before its first clear
        # keep bit), so ``at_end`` is an AND-OR, not an encoder and a compare.
        lane = Signal(lanes, init=1)
        final = Cat(*(word.last & ~word.keep[i + 1] for i in range(lanes - 1)), Const(1, 1))
        at_end = (lane & final).any()
        byte = one_hot_select(lane, [word.data.word_select(i, 8) for i in range(lanes)])
        m.d.comb += [
            self.o.valid.eq(self.i.valid),
            self.o.payload.data.eq(byte),
            self.o.payload.last.eq(word.last & at_end),
            self.i.ready.eq(self.o.ready & at_end),
        ]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += lane.eq(Mux(at_end, 1, lane << 1))
        return m


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
    after it and after the unpacker (1 cycle each) and 1 cycle. Throughput:
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
        # and its read enable go through a register stage: the unpacker's
        # byte-lane logic would otherwise sit between the FIFO's read pointer
        # and its read enable (8 LUT levels at 125 MHz).
        m.submodules.tx_cdc_reg = tx_reg = tx_dom(StreamRegister(TxWord(W)))
        m.submodules.tx_unpacker = unpacker = tx_dom(TxUnpacker(W))
        # And the bytes: the lane select and the framer's CRC update would
        # otherwise be one path.
        m.submodules.tx_byte_reg = byte_reg = tx_dom(
            StreamRegister(data.StructLayout({"data": 8, "last": 1})))
        m.submodules.tx_framer = framer = tx_dom(TxFramer())
        m.d.comb += [
            tx_reg.i.payload.eq(tx_cdc.r_data),
            tx_reg.i.valid.eq(tx_cdc.r_rdy),
            tx_cdc.r_en.eq(tx_reg.i.ready),
            framer.mii.eq(tx_mii),
        ]
        wiring.connect(m, tx_reg.o, unpacker.i)
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

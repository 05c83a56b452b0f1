"""Store-and-forward frame FIFO of the MAC (hw/board/mac.py), domain sync.
"""

from amaranth.hdl import (
    Module,
    Mux,
    Signal,
)
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from ..pipeline import unchecked_read_port
from .mac_layouts import (
    BufferedBeat,
)


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

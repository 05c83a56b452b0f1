"""The RX parser's frame FIFO: realigned payload beats in, released payload beats out.

``FrameBuffer`` holds the payload of the frames that ``hw.rx.parser.RxParser``
is checking or has accepted; the parser writes it, and releases each
accepted frame's beats as its header record leaves (``ReleaseSignature``,
from ``RecordQueue``).
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.headers import IPV6_SHIFT, OFF_EXT, by_family
from hw.pipeline import forward_register, skid, unchecked_read_port
from hw.stream import Beat

from .parser_checks import InputTapSignature
from .parser_decode import bth_beat, header_ends

__all__ = ["FrameBuffer", "FrameWriteSignature", "PayloadWriter", "ReleaseSignature"]


class FrameWriteSignature(wiring.Signature):
    """A write port of the frame FIFO, from the writer's side: ``en``,
    ``addr`` and ``data`` (a ``Beat``) of the write in this cycle."""

    def __init__(self, data_width, addr_bits):
        super().__init__({"en": Out(1), "addr": Out(addr_bits), "data": Out(Beat(data_width))})


class ReleaseSignature(wiring.Signature):
    """``en``: a record leaves in this cycle, releasing the next ``beats``
    payload beats of the frame FIFO to the reader."""

    def __init__(self, beats_shape):
        super().__init__({"en": Out(1), "beats": Out(beats_shape)})


class FrameBuffer(wiring.Component):
    """The frame FIFO of the RX parser and its reader.

    Interface: ``write`` In(``FrameWriteSignature``): the writer's write port,
    driven from flip-flops (the write lands in the cycle after the writer
    registers it); ``release`` In(``ReleaseSignature``); ``rd_ptr``
    Out(``ptr_bits``): the read pointer (one bit wider than the address, so
    that the writer can tell a full FIFO from an empty one); ``payload``
    Out(stream of ``Beat``): the released beats, in order.

    The writer owns the write pointer and writes only where the reader has
    read (it keeps the level within ``depth``); the reader reads only
    released beats, written cycles before, so the memory has no
    read-during-write bypass (hw/pipeline.py ``unchecked_read_port``).

    Latency: a beat is on ``payload`` 4 cycles after the release that covers
    it (the memory's read, its read register ``frame_q``, the register slice
    ``payload_reg``), when the output is not backpressured. Throughput: one
    beat per cycle.
    """

    def __init__(self, data_width, depth, max_payload_beats):
        self.data_width = data_width
        self.depth = depth
        self.ptr_bits = (depth - 1).bit_length() + 1
        super().__init__(
            {
                "write": In(FrameWriteSignature(data_width, self.ptr_bits - 1)),
                "release": In(ReleaseSignature(range(max_payload_beats + 1))),
                "rd_ptr": Out(self.ptr_bits),
                "payload": Out(stream.Signature(Beat(data_width))),
            }
        )

    def elaborate(self, platform):
        m = Module()
        ptr_bits = self.ptr_bits
        addr_bits = ptr_bits - 1
        m.submodules.storage = frames = Memory(shape=Beat(self.data_width), depth=self.depth,
                                              init=[], attrs={"no_rw_check": 1})
        wr = frames.write_port()
        rd = unchecked_read_port(m, frames)
        m.d.comb += [
            wr.en.eq(self.write.en),
            wr.addr.eq(self.write.addr),
            wr.data.eq(self.write.data),
        ]
        rd_ptr = Signal(ptr_bits)
        rel_ptr = Signal(ptr_bits)  # payload released by popped records
        m.d.comb += self.rd_ptr.eq(rd_ptr)
        with m.If(self.release.en):
            m.d.sync += rel_ptr.eq(rel_ptr + self.release.beats)

        # The memory's read register, a plain register of the read data
        # (``frame_q``, a ``forward_register``: no reset, one enable, so on
        # the board hw/board/outreg.py makes it the block RAMs' output
        # register, and the block RAM's long clock-to-output no longer meets
        # the skid's mux: docs/timing.md#rx-parser), then a register
        # slice (skid buffer), so that neither the memory's output nor
        # `payload.ready` meets logic on the other side of the interface.
        read = Signal()
        rd_valid = Signal()
        rd_taken = Signal()
        q_valid = Signal()
        q_data = Signal(len(rd.data.as_value()))
        q_ready = Signal()
        forward_register(m, rd_valid, rd_taken, rd.data.as_value(), q_valid, q_ready, q_data,
                         "frame_q")
        advance = ~rd_valid | rd_taken
        m.d.comb += [
            read.eq(advance & (rd_ptr != rel_ptr)),
            rd.en.eq(advance),
            rd.addr.eq(rd_ptr[:addr_bits]),
        ]
        with m.If(advance):
            m.d.sync += rd_valid.eq(read)
        with m.If(read):
            m.d.sync += rd_ptr.eq(rd_ptr + 1)
        skid(
            m,
            q_valid,
            q_ready,
            q_data,
            self.payload.valid,
            self.payload.ready,
            self.payload.payload.as_value(),
            name="payload_reg",
        )
        return m


class PayloadWriter(wiring.Component):
    """The RX parser's payload writer: realigns the input's payload bytes to
    lane 0 and writes them into the frame FIFO, committing an accepted
    frame's beats and rolling a dropped frame's back.

    Interface, in: ``beat`` (``InputTapSignature``), ``at_bth`` (the next
    beat is the BTH's beat, ``bth_beat``), with ``ipv6`` ``v6`` (the frame
    is IPv6, valid while ``at_bth``), ``eof`` (verdict stage 1: the
    cycle after a last beat); from decode stage A, ``first_beat`` (read
    while ``at_bth``) and ``shift`` (the payload's first lane, as an index
    into ``header_ends``'s shifts); from length stage B,
    ``writes_payload``, ``beats_m1``, ``one_beat`` and ``last_keep``; from
    verdict stage 3, ``v3`` (the stage holds a frame) and ``push`` (it is
    accepted). Out: ``write`` (``FrameWriteSignature``, registered),
    ``wr_ptr`` (the write pointer), ``wr_en`` (a beat is written this cycle,
    registered into ``write`` in the next) and ``took`` (the previous cycle
    took a beat).

    Latency: output beat j of a frame's payload is written in the cycle
    after input beat ``first_beat + j + 1`` is taken, or, for the final one,
    in the cycle after the frame's last beat (verdict stage 1), and lands in
    the memory a cycle after that. In stage 3 an accepted frame's payload is
    committed (``commit_ptr``), a dropped one's rolled back, in that cycle
    already. Throughput: one beat per cycle.
    """

    def __init__(self, data_width, header_bytes, ack_header_end, max_payload_beats, ptr_bits,
                 ipv6=False):
        self.data_width = data_width
        self.lanes = lanes = data_width // 8
        self.ack_header_end = ack_header_end
        self.max_payload_beats = max_payload_beats
        self.ptr_bits = ptr_bits
        self.ipv6 = ipv6
        _, shifts = header_ends(lanes, ack_header_end, ipv6)
        super().__init__(
            {
                "beat": In(InputTapSignature(data_width)),
                "at_bth": In(1),
                **({"v6": In(1)} if ipv6 else {}),
                "eof": In(1),
                "first_beat": In(range(header_bytes // lanes + 1)),
                "shift": In(range(len(shifts))),
                "writes_payload": In(1),
                "beats_m1": In(range(-1, max_payload_beats)),
                "one_beat": In(1),
                "last_keep": In(lanes),
                "v3": In(1),
                "push": In(1),
                "write": Out(FrameWriteSignature(data_width, ptr_bits - 1)),
                "wr_ptr": Out(ptr_bits),
                "wr_en": Out(1),
                "took": Out(1),
            }
        )

    def elaborate(self, platform):
        m = Module()
        lanes = self.lanes
        ends, shifts = header_ends(lanes, self.ack_header_end, self.ipv6)
        ptr_bits = self.ptr_bits
        addr_bits = ptr_bits - 1
        beat = self.beat
        wr = self.write
        wr_ptr = Signal(ptr_bits)
        commit_ptr = Signal(ptr_bits)
        end_ptr = Signal(ptr_bits)
        took = Signal()
        m.d.comb += [self.wr_ptr.eq(wr_ptr), self.took.eq(took)]

        # The previous beat taken, for realignment: `last_in` is the input of
        # the previous cycle, loaded in every cycle, and `held` the beat taken
        # before that, loaded when `took` (the previous cycle took a beat) says
        # `last_in` is one. So no wide register has `accept` as its clock enable
        # (a slow net: a LUT of the handshake driving hundreds of sinks).
        # Only the bytes of `prev` from the smallest realignment shift on are
        # used (below), so only those are kept.
        prev_lo = 8 * shifts[0]
        last_in = Signal(self.data_width - prev_lo)
        held = Signal(self.data_width - prev_lo)
        prev = Signal(self.data_width - prev_lo)  # bytes shifts[0].. of the beat
        m.d.sync += [last_in.eq(beat.data[prev_lo:]), took.eq(beat.accept)]
        with m.If(took):
            m.d.sync += held.eq(last_in)
        m.d.comb += prev.eq(Mux(took, last_in, held))

        # Payload: output beat j is complete once input beat first_beat + j + 1
        # arrives, or at the end of the frame. out_idx, the j of the next input
        # beat (beat - first_beat - 1), is counted in a register: before beat
        # k_bth + 1 it is only known to be negative (first_beat > k_bth, the
        # family's; out_idx starts below the later family's), and it stops at
        # max_payload_beats + 1, past any payload.
        k_bth = bth_beat(lanes)
        assert ends[0] // lanes > k_bth
        v6 = self.v6 if self.ipv6 else None
        k_start = bth_beat(lanes, self.ipv6)
        assert not self.ipv6 or (OFF_EXT + IPV6_SHIFT) // lanes > k_start
        oi_max = self.max_payload_beats + 1
        out_idx = Signal(range(-(k_start + 2), oi_max + 1), init=-(k_start + 2))
        incr = Signal()  # out_idx counts this cycle
        m.d.comb += incr.eq(beat.accept & ~beat.last & ~self.at_bth & (out_idx != oi_max))
        with m.If(beat.accept):
            with m.If(beat.last):
                m.d.sync += out_idx.eq(-(k_start + 2))
            with m.Elif(self.at_bth):
                m.d.sync += out_idx.eq(by_family(v6, k_bth, k_start) - self.first_beat)
        with m.If(incr):
            m.d.sync += out_idx.eq(out_idx + 1)
        # is_last (out_idx = beats_m1, given out_idx >= 0) from flip-flops:
        # last_ahead is the compare for the next cycle's out_idx, a cycle
        # ahead. out_idx = 0 may come in the first cycle stage B is valid,
        # where that compare would have seen stage B before it was: there
        # (at_zero) stage B's one_beat decides. out_idx >= 1 comes later.
        is_last = Signal()  # out_idx is the payload's last beat
        at_zero = Signal()
        last_ahead = Signal()
        with m.If(beat.accept):
            m.d.sync += at_zero.eq(incr & (out_idx == -1))
        m.d.sync += last_ahead.eq(
            Mux(incr, out_idx + 1 == self.beats_m1, out_idx == self.beats_m1)
        )
        m.d.comb += is_last.eq(Mux(at_zero, self.one_beat, last_ahead))
        # The payload's output beats are those with out_idx in [0,
        # payload_beats). The upper bound is a flip-flop, past_end (out_idx >
        # beats_m1), set as out_idx moves on from beats_m1, so that the write
        # enable (the write port's and wr_ptr's) is one LUT of the handshake
        # and flip-flops, not a compare of out_idx with payload_beats (5 LUT
        # levels and two carry chains; docs/timing.md#rx-parser). out_idx
        # is at 0 two cycles after beat k_bth at the earliest, when stage B is
        # valid; before that, out_idx < 0 keeps past_end clear.
        past_end = Signal()
        with m.If(beat.accept):
            with m.If(beat.last | self.at_bth):
                m.d.sync += past_end.eq(0)
            with m.Elif((out_idx >= 0) & is_last):
                m.d.sync += past_end.eq(1)
        # Verdict stage 1 writes the beat out_idx + 1 (still in `prev`) when the
        # last input beat left it in the payload: out_idx + 1 < payload_beats,
        # i.e. out_idx = -1 (payload_beats >= 1 by writes_payload, known only
        # then) or 0 <= out_idx < beats_m1. Registered at the last beat.
        flush_due = Signal()
        m.d.sync += flush_due.eq(
            beat.accept & beat.last & ((out_idx == -1) | ((out_idx >= 0) & ~past_end & ~is_last))
        )
        window = Cat(prev, Mux(self.eof, 0, beat.data))  # from byte shifts[0] of `prev`
        aligned = Signal(self.data_width)
        with m.Switch(self.shift):
            for i, s in enumerate(shifts):
                lo = 8 * s - prev_lo
                with m.Case(i) if i < len(shifts) - 1 else m.Default():
                    m.d.comb += aligned.eq(window[lo : lo + self.data_width])

        # A payload beat is written when an input beat completes it
        # (write_beat), or in verdict stage 1 when the frame's final one is
        # still in `prev` (flush_due). That one is the payload's last beat, as
        # is an input-completed beat at out_idx = beats_m1: an accepted
        # frame's lengths agree, so its payload ends in its last input beat
        # (a dropped one may write anything: it is rolled back, never read).
        # keep and last do not wait on which of the two writes: flush_due sets
        # them, and it is clear when an input beat writes (out_idx < 0 in the
        # flush cycle); without a write they are not written.
        # write_beat takes the input handshake as tvalid & room, without
        # accept's `first` term: out_idx >= 0 only after the frame's first beat.
        # So it is its own LUTs of flip-flops and tvalid, not a LUT after the
        # wide `accept` net (docs/timing.md#rx-parser).
        wr_en = self.wr_en
        write_beat = Signal()
        m.d.comb += [
            write_beat.eq(
                beat.valid & beat.room & self.writes_payload & (out_idx >= 0) & ~past_end
            ),
            wr_en.eq((flush_due & self.writes_payload) | write_beat),
        ]
        wr_last = is_last | flush_due
        wr_ptr_eff = Signal(ptr_bits)  # wr_ptr after a rollback (see stage 3)
        m.d.sync += [
            wr.en.eq(wr_en),
            wr.addr.eq(wr_ptr_eff[:addr_bits]),
            wr.data.data.eq(aligned),
            wr.data.keep.eq(Mux(wr_last, self.last_keep, (1 << lanes) - 1)),
            wr.data.last.eq(wr_last),
        ]
        # wr_en chooses the incremented pointer after the carry chain, rather
        # than entering it as the carry in
        m.d.sync += wr_ptr.eq(Mux(wr_en, (wr_ptr_eff + 1)[:ptr_bits], wr_ptr_eff))

        # Verdict stage 2 registers where the frame's payload ends (no payload
        # beat is written in that cycle); stage 3, from registered bits: an
        # accepted frame commits its payload (commit_ptr = end_ptr); a dropped
        # one rolls wr_ptr back to commit_ptr, in this cycle already
        # (wr_ptr_eff), as the next frame may write its first payload beat now
        # (at 512 bits).
        drop = Signal()
        m.d.sync += end_ptr.eq(wr_ptr)
        m.d.comb += [
            drop.eq(self.v3 & ~self.push),
            wr_ptr_eff.eq(Mux(drop, commit_ptr, wr_ptr)),
        ]
        with m.If(self.push):
            m.d.sync += commit_ptr.eq(end_ptr)
        return m

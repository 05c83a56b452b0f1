"""RoCEv2 ICRC appended to a frame at full rate."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..crc import ICRC_INIT, crc32_parts, crc32_tail, tail_shift
from ..headers import ICRC_MASKED_BYTES, OFF_IPV4
from ..pipeline import skid
from ..stream import Beat

__all__ = ["IcrcInserter", "ICRC_MASKED_BYTES", "keep_count", "count_keep"]

ICRC_START = OFF_IPV4  # the ICRC covers the frame from the IPv4 header on


def keep_count(keep):
    """Number of bytes of a packed ``keep`` (ones from lane 0 up)."""
    n = len(keep)
    count = Const(0, n.bit_length())
    for i in range(n):
        count = Mux(keep[i], i + 1, count)
    return count


def count_keep(count, nbytes):
    """Packed ``keep`` with the low ``count`` lanes set."""
    if isinstance(count, int):
        return Const((1 << min(count, nbytes)) - 1, nbytes)
    top = (1 << len(count)) - 1  # lanes a narrow count cannot reach stay 0
    return Cat(*[count > i if i < top else Const(0, 1) for i in range(nbytes)])


class IcrcInserter(wiring.Component):
    """Append the RoCEv2 ICRC to each frame of a packed byte stream.

    ``i``: frames from the Ethernet header to the last pad byte (IPv4 without
    options, RoCEv2 headers at the offsets of docs/protocol.md). ``o``: the
    same frames with the 4-byte ICRC appended, least-significant byte first.

    The CRC register is updated as each beat enters a one-beat holding
    register, so the final value is ready when the last beat leaves it: the
    ICRC fills the last beat's free lanes and, when fewer than 4 are free,
    one extra beat. In front of it, two pipeline stages: a skid buffer
    registers each beat with its CRC input bytes (masking and start lane
    applied, moved up by the lanes its byte count misses) and byte count
    (``i.ready`` is a flip-flop), then a register holds the data's part of
    the CRC (the CRC is linear) from one full-beat network over those moved
    bytes (``hw.crc.crc32_tail``), which serves every byte count; so the loop
    through the CRC register is the state's XOR tree and a three-way choice
    (every beat but the last is full), and the last beat's CRC, whatever its
    byte count, is registered, then inverted into the ICRC register as the
    beat moves on to the output register. Latency 4
    cycles. Throughput 1 beat/cycle, plus one cycle for frames
    whose ICRC spills into an extra beat.
    """

    def __init__(self, data_width: int = 64):
        self.data_width = data_width
        super().__init__(
            {
                "i": In(stream.Signature(Beat(data_width))),
                "o": Out(stream.Signature(Beat(data_width))),
            }
        )

    def elaborate(self, platform):
        m = Module()
        nbytes = self.data_width // 8
        w = self.data_width

        # Input stage (computed from ``i``, registered in a skid buffer with
        # the beat): the CRC's input bytes and their count. Masking and the
        # start of the ICRC coverage depend only on the beat's index in the
        # frame, up to the last beat holding a masked byte.
        last_special = max(ICRC_MASKED_BYTES) // nbytes
        beat_index = Signal(range(last_special + 2))
        start_beat, start_lane = divmod(ICRC_START, nbytes)

        masked = Signal(w)
        m.d.comb += masked.eq(self.i.payload.data)
        for b in range(last_special + 1):
            mask = 0
            for off in ICRC_MASKED_BYTES:
                if off // nbytes == b:
                    mask |= 0xFF << (8 * (off % nbytes))
            if mask:
                with m.If(beat_index == b):
                    m.d.comb += masked.eq(self.i.payload.data | mask)

        n_in = keep_count(self.i.payload.keep)
        crc_data = Signal(w)
        crc_count = Signal(range(nbytes + 1))
        with m.If(beat_index < start_beat):
            m.d.comb += [crc_data.eq(masked), crc_count.eq(0)]
        with m.Elif(beat_index == start_beat):
            m.d.comb += [crc_data.eq(masked >> (8 * start_lane)), crc_count.eq(n_in - start_lane)]
        with m.Else():
            m.d.comb += [crc_data.eq(masked), crc_count.eq(n_in)]

        # The last beat's bytes moved up by the lanes its count misses
        # (crc32_tail), here, so that the next stage has only the XOR network.
        crc_moved = tail_shift(crc_data, crc_count, nbytes)
        stage_in = Cat(self.i.payload.as_value(), crc_count, n_in, crc_moved)
        stage_out = Signal(len(stage_in))
        stage_valid = Signal()
        stage_ready = Signal()
        skid(m, self.i.valid, self.i.ready, stage_in, stage_valid, stage_ready, stage_out, "stage")
        with m.If(self.i.valid & self.i.ready):
            with m.If(self.i.payload.last):
                m.d.sync += beat_index.eq(0)
            with m.Elif(beat_index <= last_special):
                m.d.sync += beat_index.eq(beat_index + 1)
        t_beat = Signal(Beat(w))
        t_crc_count = Signal(range(nbytes + 1))
        t_n_in = Signal(range(nbytes + 1))
        t_crc_moved = Signal(w)
        m.d.comb += Cat(t_beat.as_value(), t_crc_count, t_n_in, t_crc_moved).eq(stage_out)

        # The CRC after k bytes is A_k * state ^ B_k * data (GF(2)): the data
        # part is computed from the first stage and registered in a second
        # (a plain pipeline register), so the loop through ``crc`` is one XOR
        # tree and the count's mux. Within a frame only three byte counts feed
        # the loop: 0 (before the coverage starts), the start beat's and a
        # full beat (every beat but the last is full: the framer's frames are
        # packed); the last beat's count is any. One full-beat network over
        # the data moved up by the missing bytes gives B_k * data for every
        # count k (``crc32_tail``'s data part), so it serves the loop's counts
        # and the last beat alike.
        start_count = nbytes - start_lane
        t_tail = crc32_parts(0, t_crc_moved, nbytes)[1]
        s_valid = Signal()
        s_ready = Signal()
        s_beat = Signal(Beat(w))
        s_tail = Signal(32)  # B_k * data for the beat's count k
        s_crc_count = Signal(range(nbytes + 1))
        s_n_in = Signal(range(nbytes + 1))
        m.d.comb += stage_ready.eq(~s_valid | s_ready)
        with m.If(stage_ready):
            m.d.sync += s_valid.eq(stage_valid)
            with m.If(stage_valid):
                m.d.sync += [
                    s_beat.eq(t_beat),
                    s_tail.eq(t_tail),
                    s_crc_count.eq(t_crc_count),
                    s_n_in.eq(t_n_in),
                ]

        def after(k):
            return crc32_parts(crc, 0, k)[0] ^ s_tail

        crc = Signal(32, init=ICRC_INIT)
        crc_loop = Signal(32)
        m.d.comb += crc_loop.eq(crc)
        with m.If(s_crc_count == nbytes):
            m.d.comb += crc_loop.eq(after(nbytes))
        if start_count != nbytes:
            with m.Elif(s_crc_count == start_count):
                m.d.comb += crc_loop.eq(after(start_count))
        # With each frame's last beat ``crc`` goes back to the initial value
        # and the CRC after that beat is registered in ``fin``.
        fin = Signal(32)
        icrc = Signal(32, name="icrc_value")  # registered as the last beat moves on to ``held``

        # h1: the beat whose CRC was just taken, before ``held``
        h1 = Signal(Beat(w))
        h1_valid = Signal()
        h1_count = Signal(range(nbytes + 1))
        held_ready = Signal()

        held = Signal(Beat(w))
        held_valid = Signal()
        held_count = Signal(range(nbytes + 1))
        spill = Signal()
        spill_data = Signal(32)
        spill_count = Signal(range(5))

        fits = Signal()  # the ICRC fits the held last beat (registered)
        held_keep = Signal(nbytes)  # the held beat's keep out (registered)
        out_data = Signal(w)
        m.d.comb += out_data.eq(held.data)
        with m.If(held.last):
            # lanes above keep are not trusted to be zero
            keep_bits = Cat(*[held.keep[i].replicate(8) for i in range(nbytes)])
            m.d.comb += out_data.eq((held.data & keep_bits) | (icrc << (8 * held_count))[:w])

        with m.If(spill):
            m.d.comb += [
                self.o.valid.eq(1),
                self.o.payload.data.eq(spill_data),
                self.o.payload.keep.eq(count_keep(spill_count, nbytes)),
                self.o.payload.last.eq(1),
            ]
            with m.If(self.o.ready):
                m.d.sync += spill.eq(0)
        with m.Elif(held_valid):
            m.d.comb += [
                self.o.valid.eq(1),
                self.o.payload.data.eq(out_data),
                self.o.payload.keep.eq(held_keep),
                self.o.payload.last.eq(held.last & fits),
            ]
            with m.If(self.o.ready):
                m.d.sync += held_valid.eq(0)
                with m.If(held.last & ~fits):
                    m.d.sync += [
                        spill.eq(1),
                        spill_data.eq(icrc >> (8 * (nbytes - held_count)).as_unsigned()),
                        spill_count.eq(held_count + 4 - nbytes),
                    ]

        m.d.comb += [
            held_ready.eq(~spill & (~held_valid | self.o.ready)),
            s_ready.eq(~h1_valid | held_ready),
        ]
        with m.If(h1_valid & held_ready):
            m.d.sync += [
                held.eq(h1),
                held_valid.eq(1),
                held_count.eq(h1_count),
                fits.eq(h1_count + 4 <= nbytes),
                held_keep.eq(
                    Mux(
                        h1.last,
                        count_keep(Mux(h1_count + 4 <= nbytes, h1_count + 4, nbytes), nbytes),
                        h1.keep,
                    )
                ),
                icrc.eq(~fin),
            ]
        with m.If(s_ready):
            m.d.sync += h1_valid.eq(s_valid)
        with m.If(s_valid & s_ready):
            m.d.sync += [
                h1.eq(s_beat),
                h1_count.eq(s_n_in),
                crc.eq(crc_loop),
            ]
            with m.If(s_beat.last):
                m.d.sync += [
                    crc.eq(ICRC_INIT),
                    fin.eq(crc32_tail(crc, 0, s_crc_count, nbytes)[0] ^ s_tail),
                ]
        return m

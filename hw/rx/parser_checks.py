"""The RX parser's checksum units: the IPv4 header checksum and the ICRC.

Both are parts of ``hw.rx.parser.RxParser``; its module docstring says when
the parser reads their outputs.
"""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.crc import CRC32_RESIDUE, ICRC_INIT, crc32_parts, crc32_state_py
from hw.headers import ICRC_MASKED_BYTES, IPV4, OFF_IPV4, by_family, icrc_mask

__all__ = ["FrameLength", "IcrcCheck", "InputTapSignature", "Ipv4Checksum"]


class InputTapSignature(wiring.Signature):
    """The RX parser's input beat as its parts watch it (they drive none of
    it): the stream's ``data``, ``keep``, ``last`` and ``valid``; ``room``,
    the parser's frame-FIFO room flag (``valid & room`` takes a beat except
    before a frame's first while the header FIFO is full); ``accept``, the
    beat is taken; ``nbytes``, the beat's byte count."""

    def __init__(self, data_width):
        lanes = data_width // 8
        super().__init__(
            {
                "data": Out(data_width),
                "keep": Out(lanes),
                "last": Out(1),
                "valid": Out(1),
                "room": Out(1),
                "accept": Out(1),
                "nbytes": Out(range(lanes + 1)),
            }
        )


def _adder_tree(m, terms, name):
    """The sum of ``terms``, as a balanced tree of two-input adders whose
    intermediate sums are kept apart (``keep``): yosys would otherwise merge
    them into one carry-save tree of LUT full adders, about twice the area of
    the ECP5's carry-chain adders (but shallower)."""
    level = 0
    while len(terms) > 2:
        sums = []
        for i in range(0, len(terms) - 1, 2):
            a, b = terms[i], terms[i + 1]
            s = Signal(
                max(len(a), len(b)) + 1, name=f"{name}_sum{level}_{i // 2}", attrs={"keep": 1}
            )
            m.d.comb += s.eq(a + b)
            sums.append(s)
        terms = sums + terms[len(terms) - len(terms) % 2 :]
        level += 1
    return sum(terms)


class Ipv4Checksum(wiring.Component):
    """The IPv4 header checksum check: the RFC 1071 sum of the header's ten
    16-bit words folds to 0xFFFF.

    Interface: ``header`` In(160), the 20 IPv4 header bytes in lane order
    (byte 0 in bits 0-7); ``ok`` Out(1), the header sums to 0xFFFF.

    Latency: ``stages`` (0, 1 or 2) cycles from ``header`` to ``ok``: with
    2, three partial sums are registered, then their sum; with 1, the sum.
    Throughput: one header per cycle.
    """

    def __init__(self, stages):
        if stages not in (0, 1, 2):
            raise ValueError(f"Ipv4Checksum stages must be 0, 1 or 2, not {stages!r}")
        self.stages = stages
        super().__init__({"header": In(8 * IPV4.size), "ok": Out(1)})

    def elaborate(self, platform):
        m = Module()
        byte = [self.header[8 * i : 8 * i + 8] for i in range(IPV4.size)]
        ip_words = [Cat(byte[i + 1], byte[i]) for i in range(0, IPV4.size, 2)]
        if self.stages >= 2:
            # (as carry-chain adders: there is time for them in these stages)
            groups = [ip_words[0:4], ip_words[4:8], ip_words[8:10]]
            partial = [Signal(18, name=f"ipsum_part{i}") for i in range(len(groups))]
            for i, (p, g) in enumerate(zip(partial, groups, strict=True)):
                m.d.sync += p.eq(_adder_tree(m, g, f"ipsum_part{i}"))
            ipsum_v = _adder_tree(m, partial, "ipsum")[:20]
        else:
            ipsum_v = sum(ip_words)[:20]
        if self.stages >= 1:
            ipsum = Signal(20)
            m.d.sync += ipsum.eq(ipsum_v)
        else:
            ipsum = ipsum_v[:20]
        # The ones-complement sum folds to 0xFFFF iff the sum is a nonzero
        # multiple of 0xFFFF, i.e. (the sum being < 10 * 0xFFFF) iff its low 16
        # bits are 0xFFFF minus its high 4 bits.
        m.d.comb += self.ok.eq((ipsum[4:16] == 0xFFF) & (ipsum[:4] == ~ipsum[16:20]))
        return m


class IcrcCheck(wiring.Component):
    """The RoCEv2 ICRC of a frame: the CRC-32 over the masked frame from
    byte 14 (the IPv4 header) to the end, ICRC included.

    Interface, in: ``beat`` (``InputTapSignature``: ``valid`` and ``room``
    are only enables, see below), ``took`` (the previous cycle took a beat)
    and ``hdr_beat_oh`` (the next beat is beat k of its frame, one-hot, for the
    header beats); with ``ipv6``, ``v6``: the frame is IPv6, valid with any
    beat that holds a masked byte (which IPv6 masks differ from IPv4's:
    ``hw.headers.icrc_mask``). Out: ``crc``, the CRC register, and
    ``residue``, the CRC-32 residue advanced by the frame's last beat's
    missing bytes as zeros: the frame's ICRC is good iff they are equal.

    Latency: a beat taken in cycle t is in ``crc`` from cycle t + 2 (its
    masked bytes are registered, then the CRC register takes them); after a
    frame's last beat in cycle t, ``crc`` and ``residue`` hold the frame's
    from cycle t + 2 until a beat is taken in cycle t + 1 or later.
    Throughput: one beat per cycle.
    """

    def __init__(self, data_width, header_beats, ipv6=False):
        self.data_width = data_width
        self.lanes = data_width // 8
        self.ipv6 = ipv6
        super().__init__(
            {
                "beat": In(InputTapSignature(data_width)),
                "took": In(1),
                "hdr_beat_oh": In(header_beats + 1),
                **({"v6": In(1)} if ipv6 else {}),
                "crc": Out(32),
                "residue": Out(32),
            }
        )

    def elaborate(self, platform):
        m = Module()
        lanes = self.lanes
        beat = self.beat
        beat_oh = self.hdr_beat_oh
        crc = Signal(32)
        m.d.comb += self.crc.eq(crc)
        # ICRC over the masked bytes from byte 14 to the end, ICRC included. The
        # beat's masked bytes are registered (the masking, from `beat_oh` and
        # the input's tlast and tkeep, is too deep to put in front of the CRC
        # network); in the next cycle the CRC register takes them, through one
        # network over the register and the whole beat (for the beat that
        # starts the CRC, the register's part is that of ICRC_INIT: a
        # constant). Bytes that are not CRC bytes are zeroed: those before
        # byte 14 (leading zeros leave the data part as if the beat started
        # there) and those after the frame's end in its last beat, so the last
        # beat goes through the full-beat network too and the register ends up
        # advanced over the frame and `lanes - nbytes` zero bytes. Advancing by
        # zero bytes is invertible, so verdict stage 2 compares the register
        # with the residue advanced by as many zero bytes (a constant per byte
        # count) instead.
        crc_start_beat, crc_start_lane = OFF_IPV4 // lanes, OFF_IPV4 % lanes
        assert crc_start_beat <= 1
        masked = Signal(self.data_width)
        m.d.comb += masked.eq(beat.data)
        if not self.ipv6:
            for pos in ICRC_MASKED_BYTES:
                with m.If(beat_oh[pos // lanes]):
                    m.d.comb += masked[8 * (pos % lanes) : 8 * (pos % lanes) + 8].eq(0xFF)
        else:
            # each byte ORed with its family's mask: a constant where the two agree
            mask4, mask6 = icrc_mask(False), icrc_mask(True)
            for pos in sorted(mask4.keys() | mask6.keys()):
                bits = by_family(self.v6, mask4.get(pos, 0), mask6.get(pos, 0))
                lane = masked[8 * (pos % lanes) : 8 * (pos % lanes) + 8]
                with m.If(beat_oh[pos // lanes]):
                    m.d.comb += lane.eq(beat.data[8 * (pos % lanes) : 8 * (pos % lanes) + 8]
                                        | bits)
        for i in range(lanes):
            before_start = beat_oh[crc_start_beat] if i < crc_start_lane else 0
            with m.If(before_start | (beat.last & ~beat.keep[i])):
                m.d.comb += masked[8 * i : 8 * i + 8].eq(0)
        crc_start = Signal()
        masked_q = Signal(self.data_width)
        crc_nbytes = Signal(range(lanes + 1))  # the beat's bytes (of the last one)
        # the residue advanced by the last beat's zero bytes; without a reset, as
        # synthesis makes its constants partly from the flip-flops' set/reset,
        # which would then share the (slow, global) reset's net
        crc_residue = Signal(32, reset_less=True)
        m.d.comb += self.residue.eq(crc_residue)
        m.d.sync += [
            crc_start.eq(beat_oh[crc_start_beat]),
            masked_q.eq(masked),
            crc_nbytes.eq(beat.nbytes),
            crc_residue.eq(
                Array(
                    Const(crc32_state_py(CRC32_RESIDUE, bytes(lanes - n)), 32)
                    for n in range(lanes + 1)
                )[crc_nbytes]
            ),
        ]
        # The CRC starts from ICRC_INIT at byte 14, so the start beat's state
        # part is a constant: that of ICRC_INIT over the beat's bytes from there.
        init_part = crc32_parts(Const(ICRC_INIT, 32), 0, lanes - crc_start_lane)[0]
        # masked_q's bits each feed about half of the 32 CRC bits' networks,
        # which spread out over the die, so each quarter of the CRC bits takes
        # its data from a copy of its own, which the placer can keep by them
        # (two copies are not enough: docs/timing.md#rx-parser). A copy needs to load
        # only when a beat is taken (only a taken beat's masked bytes are
        # read), so each loads under a different superset of that (always,
        # tvalid, room, either): flip-flops of different enables, which
        # synthesis does not merge.
        copies = [masked_q]
        for k, en in enumerate([beat.valid, beat.room, beat.valid | beat.room], start=1):
            copy = Signal(self.data_width, name=f"masked_q{k}")
            with m.If(en):
                m.d.sync += copy.eq(masked)
            copies.append(copy)
        with m.If(self.took):
            state_part = Mux(crc_start, init_part, crc32_parts(crc, 0, lanes)[0])
            data_part = Cat(*[crc32_parts(0, copy, lanes)[1][8 * k : 8 * k + 8]
                              for k, copy in enumerate(copies)])
            m.d.sync += crc.eq(state_part ^ data_part)
        return m


class FrameLength(wiring.Component):
    """The length in bytes of the RX parser's input frame, counted as its
    beats come in.

    Interface, in: ``len_beat`` (``InputTapSignature``: the counts load on
    ``valid & room``) and ``first`` (the next beat is a frame's first); out:
    ``frame_len``, 17 bits.

    Latency: ``frame_len`` is registered in every cycle as if that cycle's
    beat were taken and the frame's last, so it is the frame's length in
    the cycle after its last beat. Throughput: one beat per cycle.
    """

    def __init__(self, data_width):
        self.lanes = data_width // 8
        super().__init__(
            {
                "len_beat": In(InputTapSignature(data_width)),
                "first": In(1),
                "frame_len": Out(17),
            }
        )

    def elaborate(self, platform):
        m = Module()
        lanes = self.lanes
        lane_bits = (lanes - 1).bit_length()
        beat = self.len_beat
        frame_len = Signal(17)
        m.d.comb += self.frame_len.eq(frame_len)
        # The frame's length is counted in beats: `frame_beats`, the beats
        # taken before the next one, and `beats_p1`, one more (both
        # saturating), so no carry chain is in front of frame_len; the input's
        # tlast and tkeep only choose between the length with this beat full
        # and the beats before it with the beat's byte count as the low bits
        # (one mux after the tkeep decode, not a 17-bit adder after it;
        # docs/timing.md#rx-parser). frame_len is loaded in every
        # cycle, as if this cycle's beat were taken and the frame's last;
        # verdict stage 1 reads it in the cycle after the last beat. Once the
        # count saturates, frame_len stays at least 2^17 - lanes, longer than
        # any length it is compared with.
        frame_beats = Signal(17 - lane_bits)
        beats_p1 = Signal(len(frame_beats), init=1)
        beats_in = Mux(self.first, 0, frame_beats)  # before this beat
        beats_next = Mux(self.first, 1, beats_p1)  # with this beat
        beats_sum = Signal(len(frame_beats) + 1)  # the top bit is the carry out
        m.d.comb += beats_sum.eq(beats_next + 1)
        m.d.sync += frame_len.eq(
            Mux(
                ~beat.last | beat.keep[lanes - 1],  # nbytes == lanes
                Cat(Const(0, lane_bits), beats_next),
                Cat(beat.nbytes[:lane_bits], beats_in),
            )
        )
        # The counts load on tvalid & room, not on `accept` (which also
        # waits for hdr_room before a first beat): while `first`, they are
        # not read and their load is the first beat's, so they can load
        # then whether the beat is taken or not. That keeps their clock
        # enables off the `accept` net.
        with m.If(beat.valid & beat.room):
            m.d.sync += [
                frame_beats.eq(beats_next),
                beats_p1.eq(Mux(beats_sum[-1], beats_next, beats_sum)),
            ]
        return m

"""RoCEv2 ICRC appended to a frame at full rate."""

from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..bits import lane_operand, one_hot_select
from ..crc import ICRC_INIT, _matrix, crc32_parts, crc32_state_py, tail_rest, tail_shift
from ..headers import ICRC_MASKED_BYTES, OFF_IPV4, icrc_mask
from ..stream import Beat
from .layouts import TxBeat

__all__ = ["IcrcInserter", "ICRC_MASKED_BYTES", "keep_count", "count_keep"]

ICRC_START = OFF_IPV4  # the ICRC covers the frame from the IPv4 header on


def keep_count(keep):
    """Number of bytes of a packed ``keep`` (ones from lane 0 up)."""
    n = len(keep)
    count = Const(0, n.bit_length())
    for i in range(n):
        count = Mux(keep[i], i + 1, count)
    return count


def keep_tail_shift(word, keep):
    """``word`` moved up by the lanes a packed ``keep`` misses: ``tail_shift(word,
    keep_count(keep), len(keep))``, each lane a mux tree that bisects the byte
    count on ``keep``'s lanes (the count is at least k when lane k - 1 is
    set), so no binary count comes first."""
    nbytes = len(keep)
    zero = Const(0, 8)

    def pick(lane, lo, hi):
        # the byte moved into ``lane`` for a count in lo..hi
        if hi <= nbytes - lane - 1:
            return zero  # counts that leave the lane empty
        if lo == hi:
            return word.word_select(lane - nbytes + lo, 8)
        mid = (lo + hi + 1) // 2
        return Mux(keep[mid - 1], pick(lane, mid, hi), pick(lane, lo, mid - 1))

    return Cat(*[pick(lane, 0, nbytes) for lane in range(nbytes)])


def count_keep(count, nbytes):
    """Packed ``keep`` with the low ``count`` lanes set."""
    if isinstance(count, int):
        return Const((1 << min(count, nbytes)) - 1, nbytes)
    top = (1 << len(count)) - 1  # lanes a narrow count cannot reach stay 0
    return Cat(*[count > i if i < top else Const(0, 1) for i in range(nbytes)])


def _lane_masks(nbytes, b, v6=False):
    """The lanes of beat ``b`` of a frame to set (ICRC-masked bytes), to set
    the low nibble of (IPv6's first byte: the traffic class's high bits), and
    to clear (bytes before the ICRC's coverage starts), as three masks."""
    ones = nibbles = zeros = 0
    for lane, bits in enumerate(icrc_mask(v6).get(b * nbytes + lane, 0) for lane in range(nbytes)):
        if bits == 0xFF:
            ones |= 1 << lane
        elif bits:
            assert bits == 0x0F, "masks are whole bytes or a low nibble"
            nibbles |= 1 << lane
        if b * nbytes + lane < ICRC_START:
            zeros |= 1 << lane
    return ones, nibbles, zeros


class IcrcInserter(wiring.Component):
    """Append the RoCEv2 ICRC to each frame of a packed byte stream.

    ``i``: frames from the Ethernet header to the last pad byte (IPv4 without
    options, RoCEv2 headers at the offsets of docs/protocol.md). ``o``: the
    same frames with the 4-byte ICRC appended, least-significant byte first.
    With ``ipv6`` (a build parameter) ``i`` is ``TxBeat(data_width,
    ipv6=True)``: a frame whose beats carry ``v6`` is IPv6's, its masked bits
    ``icrc_mask(True)`` (the lanes to mask are registered per beat for both
    kinds, and the beat's ``v6`` picks one).

    The CRC register is updated as each beat enters a one-beat holding
    register, so the final value is ready when the last beat leaves it: the
    ICRC fills the last beat's free lanes and, when fewer than 4 are free,
    one extra beat. In front of it, three pipeline stages: a skid buffer
    registers each beat (``i.ready`` is a flip-flop); a register holds it
    with its CRC input bytes (masked bytes set, bytes before the coverage
    cleared, moved up by the lanes its byte count misses: a mux tree on
    ``keep``) and byte count; then a register holds the data's part of the
    CRC (the CRC is linear) from one full-beat network over those moved
    bytes (``hw.crc.crc32_tail``), which serves every byte count. The loop
    through the CRC register is the state's XOR tree for a full beat and a
    two-way choice (every beat but the last is full, and the state before
    the start beat is the initial value, so every other next value is a
    constant, chosen by a registered flag, XOR the data part). The last
    beat's CRC, whatever its byte count, is registered in two parts (the
    state moved up by the lanes the count misses; the rest of the state XOR
    the data part); the network over the moved state is taken in two
    registered steps (per ICRC bit, three partial XORs of at most 12 inputs,
    registered as the beat moves on to a second holding register; then
    their XOR, inverted, as the beat moves on to the output register: into
    the ICRC register (for a spill beat) and, placed at its lanes by a
    one-hot registered with the beat, into a register of the beat's width
    that the output ORs with the beat's data). The stages
    from the skid buffer's output register to the output register move together, on
    one enable (the output register free), so ``o.ready`` reaches their clock
    enables through one LUT rather than a chain of per-stage ready terms (a
    bubble between beats is not squeezed out while ``o`` stalls: the skid
    buffer's spare takes the beat then); that LUT is built once per ~72
    flip-flops it enables, from kept copies of its state flip-flops. Latency
    6 cycles (5 before the ICRC's network took two steps). Throughput 1
    beat/cycle, plus one cycle for frames whose ICRC spills into an extra
    beat.
    """

    def __init__(self, data_width: int = 64, ipv6: bool = False):
        self.data_width = data_width
        self.ipv6 = ipv6
        super().__init__(
            {
                "i": In(stream.Signature(TxBeat(data_width, ipv6))),
                "o": Out(stream.Signature(Beat(data_width))),
            }
        )

    def elaborate(self, platform):
        m = Module()
        q = SimpleNamespace()  # what one part builds and a later one reads
        self._input_stage(m, q)
        self._crc_input(m, q)
        self._crc_loop(m, q)
        self._icrc_network(m, q)
        self._output(m, q)
        return m

    def _adv_copy(self, m, q, group):
        """A copy of ``adv`` for one group of flip-flops: its own copies of
        ``spill`` and ``held_valid`` (set in ``_output``) and one LUT."""
        g_spill = Signal(name=f"spill_{group}")
        g_held_valid = Signal(name=f"held_valid_{group}")
        en = Signal(name=f"adv_{group}")
        m.d.comb += en.eq(~g_spill & (~g_held_valid | self.o.ready))
        q.adv_copies.append((g_spill, g_held_valid, en))
        return en

    def _input_stage(self, m, q):
        """The input stage: the beat in a skid buffer (``i.ready`` its spare's
        empty flag) whose output register ``r`` loads on ``adv``."""
        w = self.data_width
        # Input stage: the beat in a skid buffer (``i.ready`` is a flip-flop),
        # then a plain register ``t`` with the CRC's input bytes and their
        # count, computed from the skid buffer's flip-flops. Masking and the
        # start of the ICRC coverage depend only on the beat's index in the
        # frame, up to the last beat holding a masked byte.
        i_flat = self.i.payload.as_value()
        r_flat = Signal(len(i_flat))
        q.r_valid = Signal()
        q.held_valid = Signal()
        q.spill = Signal()
        # ``adv``: the stages from the skid buffer's output register on (r, t,
        # s, h1, h2, held) move on together when the output register is free;
        # it is one LUT of ``spill``, ``held_valid`` and ``o.ready`` (in the TX
        # engine a flip-flop of its ``out_reg``), and the clock enable of every
        # data register here: a chain of per-stage ready terms in front of
        # those wide enables was four LUTs deep. A stage's data registers load
        # on ``adv`` whether the beat before them is valid or not (its valid
        # bit says which). The LUT is built once per group of about 72
        # flip-flops it enables, from the group's own copies of ``spill`` and
        # ``held_valid`` (set below like them): one net cannot reach ~600 clock
        # enables in time (docs/timing.md#tx-icrc-inserter). Each copy's next
        # value is a function of the copy itself, so that synthesis does not
        # merge the copies (nor their LUTs) back into one.
        q.adv_copies = []

        # The skid buffer (StreamRegister's, ``hw.pipeline.skid``) but its
        # output register ``r`` loads on ``adv`` alone, a bubble in it left
        # while the stages stall (the spare takes the beat then): its clock
        # enable is the stages' one LUT, not a second LUT with ``~r_valid``.
        spare_valid = Signal(name="stage_spare_valid")
        spare_flat = Signal(len(i_flat), name="stage_spare_data")
        m.d.comb += self.i.ready.eq(~spare_valid)
        with m.If(~spare_valid):
            m.d.sync += spare_flat.eq(i_flat)
        q.adv_r = self._adv_copy(m, q, "r")
        with m.If(q.adv_r):
            with m.If(spare_valid):
                m.d.sync += [r_flat.eq(spare_flat), q.r_valid.eq(1), spare_valid.eq(0)]
            with m.Else():
                m.d.sync += [r_flat.eq(i_flat), q.r_valid.eq(self.i.valid)]
        with m.Elif(self.i.valid & ~spare_valid):
            m.d.sync += spare_valid.eq(1)
        q.r_beat = Signal(Beat(w))
        m.d.comb += q.r_beat.as_value().eq(r_flat[:len(q.r_beat.as_value())])
        q.r_v6 = r_flat[-1] if self.ipv6 else Const(0, 1)

    def _crc_input(self, m, q):
        """The CRC's input: each beat's covered bytes (masked lanes set, lanes
        before the coverage cleared, by its index in the frame) and byte count,
        registered in ``t`` with the last beat's bytes moved up by the lanes its
        count misses."""
        nbytes = self.data_width // 8
        w = self.data_width
        last_special = max(icrc_mask(self.ipv6)) // nbytes
        beat_index = Signal(range(last_special + 2))
        start_beat, q.start_lane = divmod(ICRC_START, nbytes)
        # The start beat is never full (its lanes below start_lane are not
        # covered), so the CRC loop always takes it from a constant (below):
        # the state a frame's last beat leaves in ``crc`` is never read.
        assert q.start_lane != 0, "the ICRC's start must not fall on a beat boundary"

        # The bytes before the coverage starts are zeroed rather than shifted
        # out: leading zero bytes leave a CRC from a zero state at zero, so
        # the data part is that of the covered bytes alone. The lanes to set
        # (masked) and to clear (not covered) are registered for the next
        # beat with its index.
        ones_lanes = Signal(nbytes, init=_lane_masks(nbytes, 0)[0])
        zero_lanes = Signal(nbytes, init=_lane_masks(nbytes, 0)[2])
        ones_bits = Cat(*[ones_lanes[i].replicate(8) for i in range(nbytes)])
        zero_bits = Cat(*[zero_lanes[i].replicate(8) for i in range(nbytes)])
        if self.ipv6:
            # an IPv6 frame's lanes to set, whole or their low nibble; the
            # lanes to clear are the same (the coverage starts at the IP header)
            ones6_lanes = Signal(nbytes, init=_lane_masks(nbytes, 0, True)[0])
            nib6_lanes = Signal(nbytes, init=_lane_masks(nbytes, 0, True)[1])
            ones6_bits = Cat(*[Cat(nib6_lanes[i].replicate(4), ones6_lanes[i].replicate(4))
                               | ones6_lanes[i].replicate(8) for i in range(nbytes)])
            ones_bits = Mux(q.r_v6, ones6_bits, ones_bits)
        # keep_tail_shift selects from it lane by lane
        covered = lane_operand(m, (q.r_beat.data | ones_bits) & ~zero_bits, w, "covered")

        # the byte count the CRC register's state goes through
        n_in = keep_count(q.r_beat.keep)
        crc_count = Signal(range(nbytes + 1))
        with m.If(beat_index < start_beat):
            m.d.comb += crc_count.eq(0)
        with m.Elif(beat_index == start_beat):
            m.d.comb += crc_count.eq(n_in - q.start_lane)
        with m.Else():
            m.d.comb += crc_count.eq(n_in)

        q.t_valid = Signal()
        q.t_beat = Signal(Beat(w))
        q.t_crc_count = Signal(range(nbytes + 1))
        q.t_full = Signal()  # t_crc_count == nbytes
        q.t_start = Signal()  # the start beat
        q.t_n_in = Signal(range(nbytes + 1))
        q.t_crc_moved = Signal(w)
        with m.If(self._adv_copy(m, q, "t")):
            m.d.sync += [q.t_valid.eq(q.r_valid), q.t_beat.eq(q.r_beat)]
        with m.If(self._adv_copy(m, q, "tc")):
            m.d.sync += [
                q.t_crc_count.eq(crc_count),
                q.t_full.eq(crc_count == nbytes),
                q.t_start.eq(beat_index == start_beat),
                q.t_n_in.eq(n_in),
                # the last beat's bytes moved up by the lanes its count misses
                # (crc32_tail), here, so that the next stage has only the XOR
                # network
                q.t_crc_moved.eq(keep_tail_shift(covered, q.r_beat.keep)),
            ]
        with m.If(q.r_valid & q.adv_r):
            with m.If(q.r_beat.last):
                m.d.sync += [
                    beat_index.eq(0),
                    ones_lanes.eq(_lane_masks(nbytes, 0)[0]),
                    zero_lanes.eq(_lane_masks(nbytes, 0)[2]),
                ]
                if self.ipv6:
                    m.d.sync += [ones6_lanes.eq(_lane_masks(nbytes, 0, True)[0]),
                                 nib6_lanes.eq(_lane_masks(nbytes, 0, True)[1])]
            with m.Elif(beat_index <= last_special):
                m.d.sync += beat_index.eq(beat_index + 1)
                with m.Switch(beat_index):
                    for b in range(last_special + 1):
                        with m.Case(b):
                            ones, _, zeros = _lane_masks(nbytes, b + 1)
                            m.d.sync += [ones_lanes.eq(ones), zero_lanes.eq(zeros)]
                            if self.ipv6:
                                ones6, nib6, _ = _lane_masks(nbytes, b + 1, True)
                                m.d.sync += [ones6_lanes.eq(ones6), nib6_lanes.eq(nib6)]

    def _crc_loop(self, m, q):
        """The CRC loop: the data part of ``t``'s bytes registered in ``s``, and
        the CRC register's next value, one XOR tree and a two-way choice."""
        nbytes = self.data_width // 8
        w = self.data_width
        # The CRC after k bytes is A_k * state ^ B_k * data (GF(2)): the data
        # part is computed from ``t`` and registered in ``s``, so the loop
        # through ``crc`` is one XOR tree and a two-way choice. One full-beat
        # network over the data moved up by the missing bytes gives B_k *
        # data for every count k (``crc32_tail``'s data part). Within a frame
        # the state goes through three byte counts: 0 before the coverage
        # starts, the start beat's, then full beats (every beat but the last
        # is full: the framer's frames are packed); the last beat's count is
        # any. Up to the start beat the state is the initial value, so the
        # CRC after the start beat is a constant's XOR the data part: the
        # loop is the data part XOR either a full beat's network over the
        # state or a constant chosen by a flag registered in ``s``
        # (``s_start``): the start beat's state, else the initial value. The
        # beats before the start beat (their data part is zero) thus take the
        # state to the initial value, and the start beat from a constant, so
        # what the last beat (not full, or full and not ``s_run``) leaves in
        # ``crc`` is never read: the next frame sets it again before its
        # first full beat. (A register with that constant XOR the data part
        # put the data part's network, and a mux on ``last``, in front of 32
        # more flip-flops; docs/timing.md#tx-icrc-inserter.)
        start_count = nbytes - q.start_lane
        start_state = crc32_state_py(ICRC_INIT, bytes(start_count))
        t_tail = crc32_parts(0, q.t_crc_moved, nbytes)[1]
        q.s_valid = Signal()
        q.s_beat = Signal(Beat(w))
        q.s_tail = Signal(32)  # B_k * data for the beat's count k
        q.s_crc_count = Signal(range(nbytes + 1))
        s_run = Signal()  # a full beat that does not end the frame
        s_start = Signal()  # the start beat: its state is start_state (else ICRC_INIT)
        q.s_n_in = Signal(range(nbytes + 1))
        with m.If(self._adv_copy(m, q, "s")):
            m.d.sync += [q.s_valid.eq(q.t_valid), q.s_beat.eq(q.t_beat)]
        q.adv_sc = self._adv_copy(m, q, "sc")
        with m.If(q.adv_sc):
            m.d.sync += [
                q.s_tail.eq(t_tail),
                q.s_crc_count.eq(q.t_crc_count),
                s_run.eq(q.t_full & ~q.t_beat.last),
                s_start.eq(q.t_start),
                q.s_n_in.eq(q.t_n_in),
            ]

        q.crc = Signal(32, init=ICRC_INIT)
        q.crc_loop = Mux(s_run, crc32_parts(q.crc, 0, nbytes)[0],
                       Mux(s_start, start_state, ICRC_INIT)) ^ q.s_tail

    def _icrc_network(self, m, q):
        """The last beat's ICRC network: the CRC after it in two registered
        parts, then three partial XORs per ICRC bit, then their XOR."""
        nbytes = self.data_width // 8
        w = self.data_width
        # With each frame's last beat the CRC after that beat (``crc32_tail``)
        # is registered in two parts: the state moved up by the lanes the count
        # misses, and the state's bytes the count does not reach XOR the data
        # part. The state part's network over the moved state (with the rest,
        # 25-35 inputs per ICRC bit) follows in two registered steps: as the
        # beat moves on to ``h2``, three partial XORs per bit of at most 12
        # inputs each (two LUT levels); as it moves on to ``held``, their XOR,
        # inverted, into the ICRC register (one LUT). In one step the network
        # is 5 LUT levels from ``fin_moved`` (docs/timing.md#tx-icrc-inserter).
        q.fin_moved = Signal(w)
        q.fin_rest = Signal(32)
        q.icrc = Signal(32, name="icrc_value")
        fin_inputs = [
            [q.fin_moved[i] for i in range(w) if (mask >> (32 + i)) & 1] + [q.fin_rest[j]]
            for j, mask in enumerate(_matrix(nbytes))
        ]
        n_parts = 3
        q.icrc_part = Signal(32 * n_parts)  # bit j's partial XORs at 3j, 3j+1, 3j+2
        q.part_values = []
        for inputs in fin_inputs:
            size = -(-len(inputs) // n_parts)
            q.part_values += [Cat(*inputs[k * size:(k + 1) * size]).xor() for k in range(n_parts)]
        q.icrc_final = lane_operand(  # placed at each of the beat's lanes
            m, Cat(*[~q.icrc_part[n_parts * j:n_parts * (j + 1)].xor() for j in range(32)]),
            w, "icrc_final")

    def _output(self, m, q):
        """The holding stages ``h1``, ``h2`` and ``held``, the ICRC placed in the
        held beat or sent in a spill beat, the output, and the stages' enables
        (``adv`` copies)."""
        nbytes = self.data_width // 8
        w = self.data_width
        # h1: the beat whose CRC was just taken, then h2, before ``held``
        h1 = Signal(Beat(w))
        h1_valid = Signal()
        h1_count = Signal(range(nbytes + 1))
        h2 = Signal(Beat(w))
        h2_valid = Signal()
        h2_count = Signal(range(nbytes + 1))

        held = Signal(Beat(w))
        spill_data = Signal(32)
        spill_count = Signal(range(5))

        fits = Signal()  # the ICRC fits the held last beat (registered)
        # If it does not: how many ICRC bytes spill (registered, 1..4) and,
        # one-hot, by how many bytes the ICRC shifts down for the spill beat
        # (bit j: the held beat has nbytes - j bytes), both from h2_count as
        # ``fits`` is, so no compare or subtraction of the held beat's count
        # lies in front of ``spill_data`` (docs/timing.md#tx-icrc-inserter)
        spill_n = Signal(range(5))
        spill_at = Signal(min(4, nbytes))
        held_keep = Signal(nbytes)  # the held beat's keep out (registered)
        # one-hot, with h2: the lane where h2's ICRC starts when it is a last
        # beat (none on other beats, nor when all of it spills), registered
        # from h1 so that no decode of h2_count comes before the placing
        h2_at = Signal(nbytes)
        # The ICRC placed at its lanes of the held beat (zero on other beats
        # and lanes): loaded with ``held`` from ``icrc_final`` through the
        # AND-OR of ``h2_at``, so the output's data is ``held.data`` (lanes
        # above keep cleared) OR this register, one LUT; placing the ICRC
        # register's value behind it (``icrc`` -> AND-OR -> spill mux ->
        # ``out_reg``) is too slow (docs/timing.md#tx-icrc-inserter). ``icrc``
        # itself is kept for the spill beat.
        icrc_placed = Signal(w)
        out_data = held.data | icrc_placed

        # The payload is the spill's or the held beat's whether or not one is
        # valid (it is read only with ``o.valid``): ``held_valid`` stays out
        # of the output's per-bit select, one input fewer on a path of 3 LUT
        # levels into ``out_reg``'s data (docs/timing.md#tx-icrc-inserter).
        m.d.comb += self.o.valid.eq(q.spill | q.held_valid)
        with m.If(q.spill):
            m.d.comb += [
                self.o.payload.data.eq(spill_data),
                self.o.payload.keep.eq(count_keep(spill_count, nbytes)),
                self.o.payload.last.eq(1),
            ]
            with m.If(self.o.ready):
                m.d.sync += q.spill.eq(0)
        with m.Else():
            m.d.comb += [
                self.o.payload.data.eq(out_data),
                self.o.payload.keep.eq(held_keep),
                self.o.payload.last.eq(held.last & fits),
            ]
            with m.If(q.held_valid & self.o.ready & held.last & ~fits):
                m.d.sync += [
                    q.spill.eq(1),
                    spill_data.eq(one_hot_select(
                        spill_at, [(q.icrc >> (8 * j))[:32] for j in range(len(spill_at))])),
                    spill_count.eq(spill_n),
                ]

        # ``adv``: ``held`` is free (a spill goes out first); its beat leaves as
        # it loads
        adv_held = self._adv_copy(m, q, "held")
        with m.If(adv_held):
            # lanes above keep are not trusted to be zero
            keep_bits = Cat(*[h2.keep[i].replicate(8) for i in range(nbytes)])
            m.d.sync += [
                held.eq(h2),
                held.data.eq(h2.data & keep_bits),
                q.held_valid.eq(h2_valid),
            ]
        adv_out = self._adv_copy(m, q, "out")
        with m.If(adv_out):
            m.d.sync += [
                fits.eq(h2_count + 4 <= nbytes),
                spill_n.eq((h2_count + 4 - nbytes)[:3]),
                spill_at.eq(Cat(*[h2_count == nbytes - j for j in range(len(spill_at))])),
                held_keep.eq(
                    Mux(
                        h2.last,
                        count_keep(Mux(h2_count + 4 <= nbytes, h2_count + 4, nbytes), nbytes),
                        h2.keep,
                    )
                ),
                q.icrc.eq(q.icrc_final),
            ]
        # (in groups of at most 64 bits, each under its own copy of ``adv``)
        placed = one_hot_select(h2_at, [(q.icrc_final << (8 * k))[:w] for k in range(nbytes)])
        for lo in range(0, w, 64):
            with m.If(self._adv_copy(m, q, f"placed{lo // 64}")):
                m.d.sync += icrc_placed[lo:lo + 64].eq(placed[lo:lo + 64])
        with m.If(self._adv_copy(m, q, "h1")):
            m.d.sync += [h1_valid.eq(q.s_valid), h1.eq(q.s_beat), h1_count.eq(q.s_n_in)]
        with m.If(self._adv_copy(m, q, "h2")):
            m.d.sync += [h2_valid.eq(h1_valid), h2.eq(h1), h2_count.eq(h1_count),
                         h2_at.eq(Cat(*[h1.last & (h1_count == k) for k in range(nbytes)]))]
        # ``fin_*`` and the partial XORs are read only with a last beat in h1
        # and h2; taking them with every beat keeps ``last`` out of their
        # enables (each group's copy enables at most 64 flip-flops)
        with m.If(self._adv_copy(m, q, "fin")):
            m.d.sync += q.fin_moved.eq(tail_shift(q.crc, q.s_crc_count, nbytes))
        with m.If(self._adv_copy(m, q, "rest")):
            m.d.sync += q.fin_rest.eq(tail_rest(q.crc, q.s_crc_count) ^ q.s_tail)
        half = len(q.icrc_part) // 2
        with m.If(self._adv_copy(m, q, "part0")):
            m.d.sync += q.icrc_part[:half].eq(Cat(*q.part_values[:half]))
        with m.If(self._adv_copy(m, q, "part1")):
            m.d.sync += q.icrc_part[half:].eq(Cat(*q.part_values[half:]))
        with m.If(q.s_valid & q.adv_sc):
            m.d.sync += q.crc.eq(q.crc_loop)
        # each group's copies of ``held_valid`` and ``spill``, set as those are
        # (held_valid with ``held``, spill by the output logic above)
        for g_spill, g_held_valid, en in q.adv_copies:
            with m.If(en):
                m.d.sync += g_held_valid.eq(h2_valid)
            with m.If(g_spill):
                with m.If(self.o.ready):
                    m.d.sync += g_spill.eq(0)
            with m.Elif(g_held_valid & self.o.ready & held.last & ~fits):
                m.d.sync += g_spill.eq(1)

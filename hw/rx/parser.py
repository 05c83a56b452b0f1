"""RX header parser: MAC frames in, checked header records and realigned payload out.

``RxParser`` is the first block of the receive path (docs/protocol.md). It
takes Ethernet frames without FCS from the MAC, parses Eth / IPv4 / UDP / BTH
and the opcode's extension headers, checks everything the wire format lets a
receiver check on its own (lengths, IPv4 checksum, UDP port, opcode, ICRC,
trimming) and hands on, for every accepted frame, one ``ParsedHeader`` record
followed by the frame's payload, realigned to lane 0 with pad and ICRC cut.

Interface
---------
``s_axis``    In(AXIStreamSignature(data_width, user_width=1)): frames from
              the MAC, packed (``tkeep`` contiguous from lane 0, only the
              last beat partial; ``tkeep`` of other beats is not looked at);
              ``tuser`` on the last beat marks a bad frame.
``hdr``       Out(stream.Signature(ParsedHeader(sack_bits))): one record per
              accepted frame. A frame's record is always handed over before
              the first beat of its payload; records may run ahead of the
              payload of earlier frames.
``payload``   Out(stream.Signature(Beat(data_width))): the payload of the
              accepted frames with ``payload_len > 0``, in frame order,
              payload byte 0 in lane 0 of the first beat, every beat full
              except the last (``last`` = 1, ``keep`` contiguous).
``trim_dscp`` In(6): the trim DSCP (0x3F by default); sampled at each
              frame's first beat.
``counters``  Out(ParserCounters): 32-bit saturating frame counters, one per
              verdict; every frame increments exactly one.

Verdicts, first match wins: bad_frame, truncated, not_ipv4, ipv4_options,
ipv4_checksum, not_roce, unknown_opcode, length_mismatch, bad_icrc, else
accepted. See ``RxParser`` for the exact conditions.

Structure
---------
Store and forward, because the ICRC verdict is known only at the end of the
frame. The *input stage* captures the first ``header_bytes`` of the frame into
a register, runs the ICRC over the masked bytes and writes the payload,
already realigned (a two-beat window shifted by the payload offset of the
opcode), into a frame FIFO (``amaranth.lib.memory``, through a registered
write port). The checks are prepared as the header arrives, so that no
decision waits on a deep network (125 MHz on the ECP5, ~6 LUT levels):

- *decode stage A*, registered at the beat holding the BTH's first bytes
  (from that beat's data and the captured bytes): opcode class, TVer,
  trimming, header length and the length overheads;
- *length stage B*, the cycle after: payload length and beats, whether it
  fits, the UDP/IPv4 length checks;
- the IPv4 checksum, in two stages from the captured header (at 64 bits;
  one at 128, none at 256/512 bits, where the header's last IPv4 byte may
  come in the frame's last beat);
- the ICRC: a beat's masked bytes (those before byte 14, and after the end
  in the last beat, zeroed) are registered, and the CRC register takes them
  in the next cycle through one XOR network over itself and the full beat,
  the last beat included;
  the register, advanced by the last beat's missing bytes as zeros, is
  compared with the residue advanced alike (a constant per byte count).

In the cycle after the last beat, *verdict stage 1* registers each check as a
flag (and the record); *stage 2* registers the ICRC comparison, the first
failing check and whether the frame passes; *stage 3* acts on these
registered bits: an accepted frame commits the FIFO write pointer and pushes
its record into a header FIFO, a dropped one rolls the write pointer back
(the next frame writes no payload before then, or, at 512 bits, writes where
the rollback puts it). The counters move in the cycle after. The header FIFO
holds the extension headers (RETH, ImmDt, AETH with SACK, probe), which no
opcode has two of, as the raw bytes after the BTH and the opcode class (and
the payload's beat count). The
*output stage* pops records (through two registers after the FIFO's block
RAM), spreads those bytes into the ``ParsedHeader``
fields of their class, and releases the committed payload beats of each popped
record to ``payload`` through the memory's read register and a register slice
(skid buffer).

Backpressure, as in a frame FIFO: ``tready`` is low while the frame FIFO is
full (it keeps one spare entry for the final payload beat that the verdict
stage may still write), at any beat, and before the first beat of a frame
while the header FIFO has no room for one more record (counting the frames
in the verdict stages). Both conditions are registered, from the previous
cycle's state, on the safe side: after the FIFO drains from full, ``tready``
may rise one cycle later than the room appears. Nothing is ever dropped or
overwritten for lack of space, and since the FIFO holds at least one
``max_payload`` frame plus two beats, a frame being written can always
complete once the committed frames ahead of it drain.

Latency: the record of a frame is valid on ``hdr`` 7 cycles after its last
input beat (3 before the verdict was pipelined, 5 before the record FIFO's
output register, 6 before its second output register), and its counter
moves two cycles before; its first payload
beat comes 4 cycles after the record is taken (2 before the output register
slice, 3 before the read data's register ``frame_q``). Throughput: 1 input
beat per cycle, no gap between frames, whenever the outputs are not
backpressured (``tready`` is high); 1 record per 2 cycles (the output
registers load only while empty; the validator takes one per 4) and 1
payload beat per cycle on the outputs.
"""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.crc import CRC32_RESIDUE, ICRC_INIT, crc32_parts, crc32_state_py
from hw.headers import (
    AETH,
    BTH,
    ETH,
    ETHERTYPE_IPV4,
    ICRC_BYTES,
    ICRC_MASKED_BYTES,
    IMMDT,
    IP_PROTO_UDP,
    IPV4,
    OFF_BTH,
    OFF_EXT,
    OFF_IMMDT,
    OFF_IPV4,
    OFF_SACK,
    OFF_UDP,
    PROBE,
    RETH,
    ROCE_UDP_PORT,
    SACK,
    UDP,
    Opcode,
    sack_bitmap,
)
from hw.pipeline import (
    BlockRamFIFO,
    forward_register,
    hold_register,
    saturating_increment,
    skid,
    unchecked_read_port,
)
from hw.stream import AXIStreamSignature, Beat

from .layouts import COUNTER_NAMES, ParsedHeader, ParserCounters, Verdict

__all__ = ["COUNTER_NAMES", "ParsedHeader", "ParserCounters", "RxParser", "Verdict"]

SUPPORTED_DATA_WIDTHS = (64, 128, 256, 512)

_HDR_FIXED = UDP.size + BTH.size  # UDP length covers these before the extension headers


def _bytes(raw, offset, size):
    """Bytes [offset, offset + size) of a lane-ordered Value."""
    return raw[8 * offset : 8 * (offset + size)]


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


class RxParser(wiring.Component):
    """RX header parser with store-and-forward drop (see the module docstring).

    Parameters
    ----------
    data_width : 64, 128, 256 or 512 bits of ``s_axis`` and ``payload``.
    sack_bits : the SACK bitmap width this NIC uses; an ACK whose
        ``sack_words`` disagrees is dropped as a length mismatch.
    max_payload : the largest payload accepted (the MTU), in bytes.
    fifo_depth : frame FIFO depth in beats, a power of two of at least one
        ``max_payload`` payload plus 2 beats; by default room for two payloads.

    A frame is dropped, and counted under the first verdict that applies, when

    - ``bad_frame``: ``tuser`` is set on its last beat;
    - ``truncated``: it ends before the end of its BTH, or before the end of
      its opcode's headers plus, unless trimmed, the ICRC;
    - ``not_ipv4``: EtherType != 0x0800, IP version != 4, MF set or a
      fragment offset;
    - ``ipv4_options``: IHL != 5;
    - ``ipv4_checksum``: the IPv4 header does not sum to 0xFFFF;
    - ``not_roce``: protocol != UDP or destination port != 4791;
    - ``unknown_opcode``: an opcode outside ``Opcode.ALL``, or TVer != 0;
    - ``length_mismatch``: frame length != 14 + IPv4 total length, UDP length
      != total length - 20, UDP length short of the opcode's headers + pad +
      ICRC, payload longer than ``max_payload``, an ACK whose bitmap is not
      ``sack_bits`` wide, or a trimmed frame with anything after its headers;
    - ``bad_icrc``: the CRC over the masked frame from byte 14, ICRC included,
      is not the CRC-32 residue (not checked on trimmed frames).

    A frame whose DSCP is ``trim_dscp`` is trimmed: it carries its headers
    only, no ICRC, and is handed on with ``trimmed`` = 1 and no payload.
    """

    def __init__(self, data_width=64, sack_bits=64, max_payload=4096, fifo_depth=None):
        if data_width not in SUPPORTED_DATA_WIDTHS:
            raise ValueError(
                f"RxParser data_width must be one of {SUPPORTED_DATA_WIDTHS}, not {data_width!r}"
            )
        sack_bitmap(sack_bits)
        if not isinstance(max_payload, int) or not 1 <= max_payload <= 0xFFFF:
            raise ValueError(f"max_payload must be 1..65535 bytes, not {max_payload!r}")
        self.data_width = data_width
        self.sack_bits = sack_bits
        self.max_payload = max_payload
        self.lanes = data_width // 8
        self.max_payload_beats = -(-max_payload // self.lanes)
        min_depth = self.max_payload_beats + 2
        if fifo_depth is None:
            fifo_depth = 1 << (max(2 * self.max_payload_beats, min_depth) - 1).bit_length()
        if (
            not isinstance(fifo_depth, int)
            or fifo_depth & (fifo_depth - 1)
            or fifo_depth < min_depth
        ):
            raise ValueError(
                f"fifo_depth must be a power of two of at least {min_depth} beats (one "
                f"{max_payload}-byte payload at {data_width} bits, plus 2), not {fifo_depth!r}"
            )
        self.fifo_depth = fifo_depth
        self.hdr_fifo_depth = 16

        # Header bytes from the start of the frame to the payload, per opcode.
        self.ack_header_end = OFF_SACK + SACK.size + sack_bits // 8
        self.header_bytes = max(OFF_IMMDT + IMMDT.size, self.ack_header_end)

        super().__init__(
            {
                "s_axis": In(AXIStreamSignature(data_width, user_width=1)),
                "hdr": Out(stream.Signature(ParsedHeader(sack_bits))),
                "payload": Out(stream.Signature(Beat(data_width))),
                "trim_dscp": In(6, init=0x3F),
                "counters": Out(ParserCounters),
            }
        )

    def elaborate(self, platform):
        m = Module()
        lanes = self.lanes
        lane_bits = (lanes - 1).bit_length()
        hdr_len = self.header_bytes
        hdr_beats = -(-hdr_len // lanes)
        assert OFF_EXT + RETH.size >= lanes, "the payload never starts in beat 0"
        assert RETH.size == PROBE.size

        axis = self.s_axis

        # ------------------------------------------------------------------
        # Input stage: one beat per cycle.
        # beat_oh[k]: the next beat is beat k of its frame, for the header beats
        # (one-hot, so that the per-beat selects are one LUT deep)
        n_oh = hdr_beats + 1
        beat_oh = Signal(n_oh, init=1)
        first = beat_oh[0]
        # the frame's length in bytes, as of its last beat (see below)
        frame_len = Signal(17)
        hdr = Signal(8 * hdr_len)  # captured header bytes, lane order
        crc = Signal(32)
        trim_dscp = Signal(6)
        bad_frame = Signal()
        # verdict stage 1 of a frame with more than one beat (a one-beat frame
        # is never accepted): the record's load enable, so a flip-flop
        rec_load = Signal()
        eof = Signal()  # verdict stage 1: the cycle after a frame's last beat
        v2 = Signal()  # verdict stage 2: the cycle after that

        accept = Signal()
        m.d.comb += accept.eq(axis.tvalid & axis.tready)
        # room in the frame FIFO and in the header FIFO (see `tready`, below)
        room = Signal(init=1)
        hdr_room = Signal(init=1)

        # The previous beat taken, for realignment: `last_in` is the input of
        # the previous cycle, loaded in every cycle, and `held` the beat taken
        # before that, loaded when `took` (the previous cycle took a beat) says
        # `last_in` is one. So no wide register has `accept` as its clock enable
        # (a slow net: a LUT of the handshake driving hundreds of sinks).
        # Only the bytes of `prev` from the smallest realignment shift on are
        # used (below), so only those are kept.
        ends = sorted({OFF_EXT + RETH.size, OFF_IMMDT + IMMDT.size, self.ack_header_end})
        # the payload's lane in its first beat (the realignment shift), as an
        # index into the few that occur
        shifts = sorted({end % lanes for end in ends})
        prev_lo = 8 * shifts[0]
        last_in = Signal(self.data_width - prev_lo)
        held = Signal(self.data_width - prev_lo)
        took = Signal()
        prev = Signal(self.data_width - prev_lo)  # bytes shifts[0].. of the beat
        m.d.sync += [last_in.eq(axis.tdata[prev_lo:]), took.eq(accept)]
        with m.If(took):
            m.d.sync += held.eq(last_in)
        m.d.comb += prev.eq(Mux(took, last_in, held))

        # Bytes of this beat: every beat but the last is full (packed stream).
        nbytes = Signal(range(lanes + 1))
        with m.If(~axis.tlast):
            m.d.comb += nbytes.eq(lanes)
        with m.Else():
            for i in range(lanes):
                with m.If(axis.tkeep[i]):
                    m.d.comb += nbytes.eq(i + 1)

        # Header fields as captured (the verdict only uses them once their bytes
        # are in; see the stages below for when that is).
        eth = ETH.unpack(_bytes(hdr, 0, ETH.size))
        ip = IPV4.unpack(_bytes(hdr, OFF_IPV4, IPV4.size))
        udp = UDP.unpack(_bytes(hdr, OFF_UDP, UDP.size))
        bth = BTH.unpack(_bytes(hdr, OFF_BTH, BTH.size))

        # ------------------------------------------------------------------
        # Decode stage A, registered at the beat that holds the BTH's first two
        # bytes (opcode, padcount, TVer), from that beat's data and the bytes
        # captured before it.
        k_bth = (OFF_BTH + 1) // lanes
        assert OFF_BTH // lanes == k_bth

        def view(offset, size):
            """Bytes [offset, offset + size) as of the end of beat k_bth (bytes
            after that beat: stale, not used)."""
            parts = []
            for b in range(offset, offset + size):
                src = axis.tdata if b // lanes == k_bth else hdr
                lo = 8 * (b % lanes) if b // lanes == k_bth else 8 * b
                parts.append(src[lo : lo + 8])
            return Cat(*parts)

        ip_v = IPV4.unpack(view(OFF_IPV4, IPV4.size))
        bth_v = BTH.unpack(view(OFF_BTH, BTH.size))
        opcode_v = bth_v["opcode"]
        is_write_v = Cat(*[opcode_v == op for op in Opcode.WRITES]).any()
        is_imm_v = Cat(*[opcode_v == op for op in Opcode.WITH_IMM]).any()
        is_ack_v = opcode_v == Opcode.ACKNOWLEDGE
        is_probe_v = Cat(*[opcode_v == op for op in Opcode.PROBES]).any()
        # header end (= the payload offset) per opcode class
        hend_v = Mux(
            is_imm_v,
            OFF_IMMDT + IMMDT.size,
            Mux(is_ack_v, self.ack_header_end, OFF_EXT + RETH.size),  # RETH or PROBE
        )
        cur_trim = Mux(first, self.trim_dscp, trim_dscp) if k_bth == 0 else trim_dscp

        is_write = Signal()
        is_imm = Signal()
        is_ack = Signal()
        is_probe = Signal()
        opcode_known = Signal()
        tver_bad = Signal()
        trimmed = Signal()
        # headers from UDP to payload, pad and ICRC: payload_len = UDP length - ovh
        ovh = Signal(8)
        ovh_max = Signal(17)  # ovh + max_payload
        ovh_beats = Signal(signed(9))  # ovh - (lanes - 1), for the beat count
        ovh_p1 = Signal(9)  # ovh + 1, for the beat count less one
        frame_need = Signal(range(hdr_len + ICRC_BYTES + 1))
        udp_need = Signal(range(hdr_len + 1))
        shift = Signal(range(len(shifts)))
        # The lengths that follow from the opcode class and padcount, chosen
        # among constants (a LUT per bit after the opcode decode) rather than
        # added up from them: an adder and an increment after the decode,
        # with the input's routing in front, are 5 levels and two carry
        # chains (docs/timing.md#rx-parser).
        class_ends = (
            (is_imm_v, OFF_IMMDT + IMMDT.size),
            (is_ack_v, self.ack_header_end),
            (None, OFF_EXT + RETH.size),  # RETH or PROBE
        )

        def per_class(length, shape):
            """length(header end, padcount) for the beat's opcode class and padcount."""
            value = None
            for is_class, end in reversed(class_ends):
                by_pad = Array(Const(length(end, pad), shape) for pad in range(4))
                choice = by_pad[bth_v["padcount"]]
                value = choice if is_class is None else Mux(is_class, choice, value)
            return value

        def ovh_of(end, pad):
            return end - OFF_UDP + ICRC_BYTES + pad

        # Loaded in every cycle while beat k_bth is the next beat (its last load
        # is the cycle that takes it), so that the enable is one flip-flop; the
        # stage's outputs are read from the cycle after beat k_bth until the
        # frame's verdict stage 1, before beat k_bth of the next frame is due
        # (at 512 bits, where k_bth = 0, they change at the end of stage 1).
        with m.If(beat_oh[k_bth]):
            trimmed_v = ip_v["dscp"] == cur_trim
            m.d.sync += [
                is_write.eq(is_write_v),
                is_imm.eq(is_imm_v),
                is_ack.eq(is_ack_v),
                is_probe.eq(is_probe_v),
                opcode_known.eq(is_write_v | is_ack_v | is_probe_v),
                tver_bad.eq(bth_v["tver"] != 0),
                trimmed.eq(trimmed_v),
                ovh.eq(per_class(ovh_of, ovh.shape())),
                ovh_max.eq(
                    per_class(lambda end, pad: ovh_of(end, pad) + self.max_payload, ovh_max.shape())
                ),
                ovh_beats.eq(
                    per_class(lambda end, pad: ovh_of(end, pad) - (lanes - 1), ovh_beats.shape())
                ),
                ovh_p1.eq(per_class(lambda end, pad: ovh_of(end, pad) + 1, ovh_p1.shape())),
                frame_need.eq(
                    Mux(
                        trimmed_v,
                        per_class(lambda end, pad: end, frame_need.shape()),
                        per_class(lambda end, pad: end + ICRC_BYTES, frame_need.shape()),
                    )
                ),
                udp_need.eq(per_class(lambda end, pad: end - OFF_UDP, udp_need.shape())),
            ]
            with m.Switch(hend_v):
                for end in ends:
                    with m.Case(end):
                        m.d.sync += shift.eq(shifts.index(end % lanes))

        # ------------------------------------------------------------------
        # Length stage B, every cycle, from stage A and the captured UDP and IPv4
        # lengths: valid from the second cycle after beat k_bth, which is before
        # the first payload beat is written and before the verdict stage of any
        # frame whose verdict depends on it.
        # payload_len, payload_beats and beats_m1 (payload_beats - 1) are only
        # meaningful with payload_fits
        fits_ge = Signal()
        fits_le = Signal()
        payload_fits = Signal()
        m.d.comb += payload_fits.eq(opcode_known & ~trimmed & fits_ge & fits_le)
        # payload_fits and payload_len > 0, one flip-flop for the write enable
        writes_payload = Signal()
        payload_len = Signal(16)
        payload_beats = Signal(range(self.max_payload_beats + 1))
        beats_m1 = Signal(range(-1, self.max_payload_beats))
        one_beat = Signal()  # payload_beats == 1
        last_keep = Signal(lanes)
        udp_need_ne = Signal()
        udp_total = Signal(17)  # UDP length + 20
        total_len_eth = Signal(17)
        plen = (udp["length"] - ovh)[:16]
        # (the low bits alone: a short subtraction, not the tail of the long one)
        rem = (udp["length"][:lane_bits] - ovh[:lane_bits])[:lane_bits]
        m.d.sync += [
            fits_ge.eq(udp["length"] >= ovh),
            writes_payload.eq(
                opcode_known & ~trimmed & (udp["length"] > ovh) & (udp["length"] <= ovh_max)
            ),
            fits_le.eq(udp["length"] <= ovh_max),
            payload_len.eq(plen),
            payload_beats.eq((udp["length"] - ovh_beats) >> lane_bits),
            beats_m1.eq((udp["length"] - ovh_p1) >> lane_bits),
            one_beat.eq(((udp["length"] - ovh_p1) >> lane_bits) == 0),
            last_keep.eq(
                Mux(rem == 0, (1 << lanes) - 1, (Const(1, lanes + 1) << rem) - 1)[:lanes]
            ),
            udp_need_ne.eq(udp["length"] != udp_need),
            udp_total.eq(udp["length"] + IPV4.size),
            total_len_eth.eq(ip["total_len"] + OFF_IPV4),
        ]

        # ------------------------------------------------------------------
        # IPv4 header checksum: the RFC 1071 sum of the ten 16-bit words (< 2^20),
        # in up to two pipeline stages after the header's last IPv4 byte is
        # captured, as many as fit before the verdict stage of the shortest frame
        # that gets to the checksum verdict (one that reaches the end of the BTH).
        ip_words = [
            Cat(_bytes(hdr, OFF_IPV4 + i + 1, 1), _bytes(hdr, OFF_IPV4 + i, 1))
            for i in range(0, IPV4.size, 2)
        ]
        ip_stages = min(2, (OFF_BTH + BTH.size - 1) // lanes - (OFF_UDP - 1) // lanes)
        if ip_stages >= 2:
            # (as carry-chain adders: there is time for them in these stages)
            groups = [ip_words[0:4], ip_words[4:8], ip_words[8:10]]
            partial = [Signal(18, name=f"ipsum_part{i}") for i in range(len(groups))]
            for i, (p, g) in enumerate(zip(partial, groups, strict=True)):
                m.d.sync += p.eq(_adder_tree(m, g, f"ipsum_part{i}"))
            ipsum_v = _adder_tree(m, partial, "ipsum")[:20]
        else:
            ipsum_v = sum(ip_words)[:20]
        if ip_stages >= 1:
            ipsum = Signal(20)
            m.d.sync += ipsum.eq(ipsum_v)
        else:
            ipsum = ipsum_v[:20]
        # The ones-complement sum folds to 0xFFFF iff the sum is a nonzero
        # multiple of 0xFFFF, i.e. (the sum being < 10 * 0xFFFF) iff its low 16
        # bits are 0xFFFF minus its high 4 bits.
        ipsum_ok = (ipsum[4:16] == 0xFFF) & (ipsum[:4] == ~ipsum[16:20])

        # ------------------------------------------------------------------
        # Payload: output beat j is complete once input beat first_beat + j + 1
        # arrives, or at the end of the frame. out_idx, the j of the next input
        # beat (beat - first_beat - 1), is counted in a register: before beat
        # k_bth + 1 it is only known to be negative (first_beat > k_bth), and it
        # stops at max_payload_beats + 1, past any payload.
        oi_max = self.max_payload_beats + 1
        out_idx = Signal(range(-(k_bth + 2), oi_max + 1), init=-(k_bth + 2))
        first_beat_v = Mux(
            is_imm_v,
            (OFF_IMMDT + IMMDT.size) // lanes,
            Mux(is_ack_v, self.ack_header_end // lanes, (OFF_EXT + RETH.size) // lanes),
        )
        assert ends[0] // lanes > k_bth
        incr = Signal()  # out_idx counts this cycle
        m.d.comb += incr.eq(accept & ~axis.tlast & ~beat_oh[k_bth] & (out_idx != oi_max))
        with m.If(accept):
            with m.If(axis.tlast):
                m.d.sync += out_idx.eq(-(k_bth + 2))
            with m.Elif(beat_oh[k_bth]):
                m.d.sync += out_idx.eq(k_bth - first_beat_v)
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
        with m.If(accept):
            m.d.sync += at_zero.eq(incr & (out_idx == -1))
        m.d.sync += last_ahead.eq(Mux(incr, out_idx + 1 == beats_m1, out_idx == beats_m1))
        m.d.comb += is_last.eq(Mux(at_zero, one_beat, last_ahead))
        # The payload's output beats are those with out_idx in [0,
        # payload_beats). The upper bound is a flip-flop, past_end (out_idx >
        # beats_m1), set as out_idx moves on from beats_m1, so that the write
        # enable (the write port's and wr_ptr's) is one LUT of the handshake
        # and flip-flops, not a compare of out_idx with payload_beats (5 LUT
        # levels and two carry chains; docs/timing.md#rx-parser). out_idx
        # is at 0 two cycles after beat k_bth at the earliest, when stage B is
        # valid; before that, out_idx < 0 keeps past_end clear.
        past_end = Signal()
        with m.If(accept):
            with m.If(axis.tlast | beat_oh[k_bth]):
                m.d.sync += past_end.eq(0)
            with m.Elif((out_idx >= 0) & is_last):
                m.d.sync += past_end.eq(1)
        # Verdict stage 1 writes the beat out_idx + 1 (still in `prev`) when the
        # last input beat left it in the payload: out_idx + 1 < payload_beats,
        # i.e. out_idx = -1 (payload_beats >= 1 by writes_payload, known only
        # then) or 0 <= out_idx < beats_m1. Registered at the last beat.
        flush_due = Signal()
        m.d.sync += flush_due.eq(
            accept & axis.tlast & ((out_idx == -1) | ((out_idx >= 0) & ~past_end & ~is_last))
        )
        window = Cat(prev, Mux(eof, 0, axis.tdata))  # from byte shifts[0] of `prev`
        aligned = Signal(self.data_width)
        with m.Switch(shift):
            for i, s in enumerate(shifts):
                lo = 8 * s - prev_lo
                with m.Case(i) if i < len(shifts) - 1 else m.Default():
                    m.d.comb += aligned.eq(window[lo : lo + self.data_width])

        # Frame FIFO; its write port is registered (the write lands one cycle
        # after wr_ptr moves, long before the reader may reach it).
        depth = self.fifo_depth
        ptr_bits = (depth - 1).bit_length() + 1
        # The reader reads only released beats, written cycles before, and
        # drops what it reads at rel_ptr: no read-during-write bypass
        # (hw/pipeline.py unchecked_read_port).
        m.submodules.frames = frames = Memory(shape=Beat(self.data_width), depth=depth, init=[],
                                              attrs={"no_rw_check": 1})
        wr = frames.write_port()
        rd = unchecked_read_port(m, frames)
        addr_bits = ptr_bits - 1
        wr_ptr = Signal(ptr_bits)
        commit_ptr = Signal(ptr_bits)
        rd_ptr = Signal(ptr_bits)
        rel_ptr = Signal(ptr_bits)  # payload released by popped records

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
        wr_en = Signal()
        write_beat = Signal()
        m.d.comb += [
            write_beat.eq(axis.tvalid & room & writes_payload & (out_idx >= 0) & ~past_end),
            wr_en.eq((flush_due & writes_payload) | write_beat),
        ]
        wr_last = is_last | flush_due
        wr_ptr_eff = Signal(ptr_bits)  # wr_ptr after a rollback (see stage 3)
        m.d.sync += [
            wr.en.eq(wr_en),
            wr.addr.eq(wr_ptr_eff[:addr_bits]),
            wr.data.data.eq(aligned),
            wr.data.keep.eq(Mux(wr_last, last_keep, (1 << lanes) - 1)),
            wr.data.last.eq(wr_last),
        ]
        # wr_en chooses the incremented pointer after the carry chain, rather
        # than entering it as the carry in
        m.d.sync += wr_ptr.eq(Mux(wr_en, (wr_ptr_eff + 1)[:ptr_bits], wr_ptr_eff))

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
        m.d.comb += masked.eq(axis.tdata)
        for pos in ICRC_MASKED_BYTES:
            with m.If(beat_oh[pos // lanes]):
                m.d.comb += masked[8 * (pos % lanes) : 8 * (pos % lanes) + 8].eq(0xFF)
        for i in range(lanes):
            before_start = beat_oh[crc_start_beat] if i < crc_start_lane else 0
            with m.If(before_start | (axis.tlast & ~axis.tkeep[i])):
                m.d.comb += masked[8 * i : 8 * i + 8].eq(0)
        crc_start = Signal()
        masked_q = Signal(self.data_width)
        crc_nbytes = Signal(range(lanes + 1))  # the beat's bytes (of the last one)
        # the residue advanced by the last beat's zero bytes; without a reset, as
        # synthesis makes its constants partly from the flip-flops' set/reset,
        # which would then share the (slow, global) reset's net
        crc_residue = Signal(32, reset_less=True)
        m.d.sync += [
            crc_start.eq(beat_oh[crc_start_beat]),
            masked_q.eq(masked),
            crc_nbytes.eq(nbytes),
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
        for k, en in enumerate([axis.tvalid, room, axis.tvalid | room], start=1):
            copy = Signal(self.data_width, name=f"masked_q{k}")
            with m.If(en):
                m.d.sync += copy.eq(masked)
            copies.append(copy)
        with m.If(took):
            state_part = Mux(crc_start, init_part, crc32_parts(crc, 0, lanes)[0])
            data_part = Cat(*[crc32_parts(0, copy, lanes)[1][8 * k : 8 * k + 8]
                              for k, copy in enumerate(copies)])
            m.d.sync += crc.eq(state_part ^ data_part)

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
        beats_in = Mux(first, 0, frame_beats)  # before this beat
        beats_next = Mux(first, 1, beats_p1)  # with this beat
        beats_sum = Signal(len(frame_beats) + 1)  # the top bit is the carry out
        m.d.comb += beats_sum.eq(beats_next + 1)
        m.d.sync += frame_len.eq(
            Mux(
                ~axis.tlast | axis.tkeep[lanes - 1],  # nbytes == lanes
                Cat(Const(0, lane_bits), beats_next),
                Cat(nbytes[:lane_bits], beats_in),
            )
        )
        # The counts load on tvalid & room, not on `accept` (which also
        # waits for hdr_room before a first beat): while `first`, they are
        # not read and their load is the first beat's, so they can load
        # then whether the beat is taken or not. That keeps their clock
        # enables off the `accept` net.
        with m.If(axis.tvalid & room):
            m.d.sync += [
                frame_beats.eq(beats_next),
                beats_p1.eq(Mux(beats_sum[-1], beats_next, beats_sum)),
            ]
        with m.If(accept):
            m.d.sync += beat_oh.eq(Mux(axis.tlast, 1, beat_oh << 1))
            with m.If(axis.tlast):
                m.d.sync += bad_frame.eq(axis.tuser[0])
        m.d.sync += [
            eof.eq(accept & axis.tlast),
            rec_load.eq(accept & axis.tlast & ~first),
            v2.eq(eof),
        ]
        # The header chunk of beat k (and the trim DSCP, at beat 0) follows the
        # input in every cycle while beat k is the next beat, not only when it
        # is taken: its clock enable is then one flip-flop, not `accept` (whose
        # net, with these ~600 sinks, was the slowest of the block). The chunk
        # holds the beat once it is taken, until beat k of the next frame is
        # due; before that it is stale for this frame anyway. Beat 0's chunk
        # changes from the cycle after a last beat (verdict stage 1) on, as it
        # did when the next frame's first beat came at once: stage 1 is the
        # last to read `hdr` (directly or through the IPv4 checksum and stage
        # B), and reads it in that cycle, before the change.
        with m.If(first):
            m.d.sync += trim_dscp.eq(self.trim_dscp)
        for k in range(hdr_beats):
            with m.If(beat_oh[k]):
                lo, hi = 8 * k * lanes, min(8 * (k + 1) * lanes, 8 * hdr_len)
                m.d.sync += hdr[lo:hi].eq(axis.tdata[: hi - lo])

        # ------------------------------------------------------------------
        # Verdict stage 1, in the cycle after the last beat: `hdr`, `frame_len`,
        # `prev` and stages A and B still hold the frame that ended. The checks
        # are registered as flags (and the record as it will be pushed).
        frag = (ip["flags"][0]) | (ip["frag_off"] != 0)
        ack_width_bad = is_ack & (
            SACK.unpack(_bytes(hdr, OFF_SACK, SACK.size))["sack_words"] != self.sack_bits // 32
        )
        checks = [  # (verdict, condition), first match wins
            (Verdict.BAD_FRAME, bad_frame),
            (
                Verdict.TRUNCATED,
                (frame_len < OFF_BTH + BTH.size) | (opcode_known & (frame_len < frame_need)),
            ),
            (
                Verdict.NOT_IPV4,
                (eth["ethertype"] != ETHERTYPE_IPV4) | (ip["version"] != 4) | frag,
            ),
            (Verdict.IPV4_OPTIONS, ip["ihl"] != 5),
            (Verdict.IPV4_CHECKSUM, ~ipsum_ok),
            (Verdict.NOT_ROCE, (ip["proto"] != IP_PROTO_UDP) | (udp["dport"] != ROCE_UDP_PORT)),
            (Verdict.UNKNOWN_OPCODE, ~opcode_known | tver_bad),
            (
                Verdict.LENGTH_MISMATCH,
                (frame_len != total_len_eth)
                | (udp_total != ip["total_len"])
                | Mux(trimmed, udp_need_ne, ~payload_fits)
                | ack_width_bad,
            ),
        ]
        flags = Signal(len(checks))
        check_icrc = Signal()  # the ICRC decides (not trimmed)
        m.d.sync += [flags[i].eq(cond) for i, (_, cond) in enumerate(checks)]
        m.d.sync += check_icrc.eq(~trimmed)

        # The record, as stored (in record_q and the header FIFO): the
        # extension headers of the opcode classes, which no frame has two of,
        # share their bytes, kept as the raw bytes after the BTH and the class;
        # the output stage spreads them into the ParsedHeader's fields.
        out_layout = ParsedHeader(self.sack_bits)
        extensions = ("reth", "imm", "aeth", "sack", "sack_bitmap", "probe")
        stored = data.StructLayout(
            {
                **{name: field.shape for name, field in out_layout if name not in extensions},
                "ext": unsigned(8 * (hdr_len - OFF_EXT)),
                "is_write": unsigned(1),
                "is_imm": unsigned(1),
                "is_ack": unsigned(1),
                "is_probe": unsigned(1),
                # the payload's beats in the frame FIFO, counted here so that the
                # output stage adds them to rel_ptr straight from the memory
                "beats": payload_beats.shape(),
            }
        )
        record = Signal(stored)
        m.d.comb += [
            record.eth_src.eq(eth["src"]),
            record.eth_dst.eq(eth["dst"]),
            record.ip_src.eq(ip["src"]),
            record.ip_dst.eq(ip["dst"]),
            record.dscp.eq(ip["dscp"]),
            record.ecn.eq(ip["ecn"]),
            record.ev.eq(udp["sport"]),
            record.trimmed.eq(trimmed),
            record.payload_len.eq(Mux(payload_fits, payload_len, 0)),
            record.beats.eq(Mux(payload_fits, payload_beats, 0)),
            record.ext.eq(hdr[8 * OFF_EXT :]),
            record.is_write.eq(is_write),
            record.is_imm.eq(is_imm),
            record.is_ack.eq(is_ack),
            record.is_probe.eq(is_probe),
        ]
        for name, value in bth.items():
            m.d.comb += record.bth[name].eq(value)
        # Held until the record is pushed in stage 3: the next frame's stage 1
        # comes 2 cycles later at the earliest, unless it has one beat.
        record_q = Signal(stored)
        with m.If(rec_load):
            m.d.sync += record_q.eq(record)

        # ------------------------------------------------------------------
        # Verdict stage 2: the ICRC check (per byte) and the first failing check,
        # registered. No payload beat is written in this cycle (the next
        # frame's first payload beat is its third beat at the earliest, and the
        # final beat of the frame, if any, was written in stage 1), so wr_ptr is
        # where the frame's payload ends.
        crc_ok = Signal(4)
        first_fail = Signal(len(checks))  # the first check that failed, one-hot
        any_fail = Signal()
        check_icrc_q = Signal()
        end_ptr = Signal(ptr_bits)
        v3 = Signal()
        # ``push`` (stage 3: the frame passes its checks and its ICRC matches,
        # or the ICRC does not decide) is the record FIFO's write enable: the
        # block RAMs' write enables, the FIFO's pointer and level, commit_ptr
        # and the rollback. So it is a flip-flop, registered here from the
        # flags and the whole CRC compare (a few LUT levels with few sinks),
        # not a LUT of partial verdicts in front of that wide net
        # (docs/timing.md#rx-parser). crc_ok, any_fail
        # and check_icrc_q tell the verdict.
        push = Signal()
        m.d.sync += [
            crc_ok[j].eq(crc[8 * j : 8 * j + 8] == crc_residue[8 * j : 8 * j + 8]) for j in range(4)
        ]
        m.d.sync += push.eq(v2 & ~flags.any() & ((crc == crc_residue) | ~check_icrc))
        m.d.sync += [
            first_fail[i].eq(flags[i] & ~flags[:i].any()) for i in range(len(checks))
        ]
        m.d.sync += [
            any_fail.eq(flags.any()),
            check_icrc_q.eq(check_icrc),
            end_ptr.eq(wr_ptr),
            v3.eq(v2),
        ]

        # Verdict stage 3, from registered bits: an accepted frame commits its
        # payload (commit_ptr = end_ptr) and pushes its record; a dropped one
        # rolls wr_ptr back to commit_ptr, in this cycle already (wr_ptr_eff),
        # as the next frame may write its first payload beat now (at 512 bits).
        icrc_bad = check_icrc_q & ~crc_ok.all()
        drop = Signal()
        m.d.comb += [
            drop.eq(v3 & ~push),
            wr_ptr_eff.eq(Mux(drop, commit_ptr, wr_ptr)),
        ]
        with m.If(push):
            m.d.sync += commit_ptr.eq(end_ptr)
        verdict_oh = Signal(len(COUNTER_NAMES))
        for i, (v, _) in enumerate(checks):
            m.d.comb += verdict_oh[v.value].eq(v3 & first_fail[i])
        m.d.comb += [
            verdict_oh[Verdict.BAD_ICRC.value].eq(v3 & ~any_fail & icrc_bad),
            verdict_oh[Verdict.ACCEPTED.value].eq(push),
        ]

        # The counters move in the cycle after (stage 4).
        count_inc = Signal(len(COUNTER_NAMES))
        m.d.sync += count_inc.eq(verdict_oh)
        counters = Signal(ParserCounters)
        m.d.comb += self.counters.eq(counters)
        for i, name in enumerate(COUNTER_NAMES):
            count = counters[name]
            saturating_increment(m, count, count_inc[i])

        # Without the FIFO's write guard: `push` comes only with room (tready
        # waits for hdr_room, below), so `push`, a flip-flop, is the block
        # RAMs' write enable as it is: no LUT in front of the 16 block RAMs'
        # byte enables (docs/timing.md#rx-parser).
        m.submodules.records = records = BlockRamFIFO(
            width=len(record.as_value()), depth=self.hdr_fifo_depth, write_guard=False
        )
        m.d.comb += [
            records.w_data.eq(record_q),
            records.w_en.eq(push),
        ]

        # A beat is taken only with room for its own payload beat and for the
        # one the verdict stage may write in the cycle after a last beat; a
        # frame only with room for its record (and the ones of the frames in
        # the verdict stages). Both are registered, from the previous cycle's
        # state, on the safe side: the frame FIFO gains at most one beat per
        # cycle (`used` counts up to the previous cycle's write, and wr_en says
        # whether this one writes), and the records in the FIFO or in flight at
        # most one. `room` is one flip-flop, so that `tready` and the input
        # handshake are one LUT deep.
        used = (wr_ptr - rd_ptr)[:ptr_bits]
        m.d.sync += [
            room.eq((used <= depth - 3) | ((used <= depth - 2) & ~wr_en)),
            hdr_room.eq(records.level + v3 + v2 + eof + 1 <= self.hdr_fifo_depth - 1),
        ]
        m.d.comb += axis.tready.eq(room & (~first | hdr_room))

        # ------------------------------------------------------------------
        # Output stage. The record FIFO's block RAM output passes two registers
        # (one flip-flop per bit each): the validator, and the ACK records it
        # passes on to reliability, are other blocks. The first (``rec_mid``)
        # drives only the second (``rec_out``), one sink per bit, so the
        # placer can keep it by the block RAMs, whose clock-to-output is
        # long (docs/timing.md#rx-parser). Each register loads only while
        # empty, so its enable (several hundred bits) is a flip-flop, and not
        # the validator's ready: ``rec_mid`` empties when ``rec_out`` is empty
        # (it moves there), ``rec_out`` when the validator takes it. A record taken
        # leaves ``rec_out`` empty for a cycle, so a record every 2 cycles at
        # most, which the validator's four cycles per header hide; the second
        # register adds a cycle of latency, not a bubble.
        # Two hw/pipeline.py ``hold_register``s: data without reset, the
        # enables copies of each register's "full" flag, one per 72 bits (two
        # block RAMs' outputs; one net to all ~560 bits is too slow:
        # docs/timing.md#rx-parser), so rec_mid's groups are whole 36-bit block-RAM columns and on
        # the board hw/board/outreg.py moves it into the block RAMs' output
        # registers.
        rec_bits = len(record.as_value())
        mid_valid, mid_ready, rec_valid = Signal(), Signal(), Signal()
        mid_data, rec_data = Signal(rec_bits), Signal(rec_bits)
        hold_register(m, records.r_rdy, records.r_en, records.r_data,
                      mid_valid, mid_ready, mid_data, "rec_mid")
        hold_register(m, mid_valid, mid_ready, mid_data,
                      rec_valid, self.hdr.ready, rec_data, "rec_out")
        out_rec = stored(rec_data)
        ext = out_rec.ext
        for name, _ in out_layout:
            if name not in extensions:
                m.d.comb += self.hdr.payload[name].eq(out_rec[name])
        with m.If(out_rec.is_write):
            for name, value in RETH.unpack(_bytes(ext, 0, RETH.size)).items():
                m.d.comb += self.hdr.payload.reth[name].eq(value)
        with m.If(out_rec.is_imm):
            imm = IMMDT.unpack(_bytes(ext, OFF_IMMDT - OFF_EXT, IMMDT.size))["imm"]
            m.d.comb += self.hdr.payload.imm.eq(imm)
        with m.If(out_rec.is_ack):
            for name, value in AETH.unpack(_bytes(ext, 0, AETH.size)).items():
                m.d.comb += self.hdr.payload.aeth[name].eq(value)
            for name, value in SACK.unpack(_bytes(ext, OFF_SACK - OFF_EXT, SACK.size)).items():
                m.d.comb += self.hdr.payload.sack[name].eq(value)
            bitmap_off = OFF_SACK + SACK.size - OFF_EXT
            bitmap = sack_bitmap(self.sack_bits).unpack(
                _bytes(ext, bitmap_off, self.sack_bits // 8)
            )["bitmap"]
            m.d.comb += self.hdr.payload.sack_bitmap.eq(bitmap)
        with m.If(out_rec.is_probe):
            for name, value in PROBE.unpack(_bytes(ext, 0, PROBE.size)).items():
                m.d.comb += self.hdr.payload.probe[name].eq(value)
        m.d.comb += self.hdr.valid.eq(rec_valid)
        with m.If(self.hdr.valid & self.hdr.ready):
            m.d.sync += rel_ptr.eq(rel_ptr + out_rec.beats)

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

"""The RX parser's header decode: opcode class and lengths, in two registered stages.

``ClassDecode`` (decode stage A) registers, at the beat that holds the BTH's
first bytes, what follows from the opcode, padcount, TVer and DSCP: the
opcode class, trimming, the header end and the length overheads.
``LengthCheck`` (length stage B) registers in the next cycle the payload
length and beats and the length checks, from stage A and the captured UDP and
IPv4 lengths. They are joined by ``DecodeSignature`` (``wiring.connect``).
Both are parts of ``hw.rx.parser.RxParser``; its module docstring says how
they fit in the frame's timeline.
"""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.headers import (
    BTH,
    ICRC_BYTES,
    IMMDT,
    IPV4,
    IPV6,
    IPV6_SHIFT,
    OFF_BTH,
    OFF_EXT,
    OFF_IMMDT,
    OFF_IPV4,
    OFF_IPV6,
    OFF_UDP,
    RETH,
    Opcode,
    by_family,
)

__all__ = ["ClassDecode", "DecodeSignature", "LengthCheck", "bth_beat", "header_ends"]


def header_ends(lanes, ack_header_end, ipv6=False):
    """(ends, shifts): the header ends (= payload offsets) of the opcode
    classes (over both families with ``ipv6``; ``ack_header_end`` is IPv4's),
    sorted, and the payload's lanes in its first beat (the realignment shifts)
    that occur, sorted."""
    ends = {OFF_EXT + RETH.size, OFF_IMMDT + IMMDT.size, ack_header_end}
    if ipv6:
        ends |= {end + IPV6_SHIFT for end in ends}
    ends = sorted(ends)
    return ends, sorted({end % lanes for end in ends})


def bth_beat(lanes, v6=False):
    """The beat of the frame that holds the BTH's first two bytes (over IPv6
    with ``v6``)."""
    off = OFF_BTH + (IPV6_SHIFT if v6 else 0)
    k_bth = (off + 1) // lanes
    assert off // lanes == k_bth
    return k_bth


class DecodeSignature(wiring.Signature):
    """Decode stage A's registers, as ``ClassDecode`` drives them."""

    def __init__(self, lanes, header_bytes, ack_header_end, ipv6=False):
        _, shifts = header_ends(lanes, ack_header_end, ipv6)
        super().__init__(
            {
                "is_write": Out(1),
                "is_imm": Out(1),
                "is_ack": Out(1),
                "is_probe": Out(1),
                "opcode_known": Out(1),
                "tver_bad": Out(1),
                "trimmed": Out(1),
                # headers from UDP to payload, pad and ICRC: payload_len = UDP length - ovh
                "ovh": Out(8),
                "ovh_max": Out(17),  # ovh + max_payload
                "ovh_beats": Out(signed(9)),  # ovh - (lanes - 1), for the beat count
                "ovh_p1": Out(9),  # ovh + 1, for the beat count less one
                "frame_need": Out(range(header_bytes + ICRC_BYTES + 1)),
                "udp_need": Out(range(header_bytes + 1)),
                "shift": Out(range(len(shifts))),
            }
        )


class ClassDecode(wiring.Component):
    """Decode stage A of the RX parser.

    Interface: ``beat_data`` (the input beat), ``hdr_bytes`` (the header
    bytes captured so far, lane order), ``at_bth`` (the next beat is the BTH's beat
    ``bth_beat(lanes, v6)``), ``first`` (the next beat is a frame's first),
    ``trim_dscp`` (the register input) and ``trim_dscp_q`` (its value sampled
    at the frame's first beat) in; with ``ipv6``, ``v6`` in (the frame is
    IPv6, valid while ``at_bth``); ``decoded`` (``DecodeSignature``) out, and
    ``first_beat``, the beat of the frame where the payload starts, decoded
    from ``data`` without a register (read while ``at_bth``).

    Latency: ``decoded`` is loaded in every cycle while ``at_bth`` (its last
    load is the cycle that takes beat ``bth_beat``), so its outputs hold the
    frame's values from the cycle after that beat until beat ``bth_beat`` of
    the next frame is due. Throughput: one frame per beat.
    """

    def __init__(self, data_width, header_bytes, ack_header_end, max_payload, ipv6=False):
        self.lanes = data_width // 8
        self.header_bytes = header_bytes
        self.ack_header_end = ack_header_end
        self.max_payload = max_payload
        self.ipv6 = ipv6
        super().__init__(
            {
                "beat_data": In(data_width),
                "hdr_bytes": In(8 * header_bytes),
                "at_bth": In(1),
                "first": In(1),
                "trim_dscp": In(6),
                "trim_dscp_q": In(6),
                **({"v6": In(1)} if ipv6 else {}),
                "decoded": Out(DecodeSignature(self.lanes, header_bytes, ack_header_end, ipv6)),
                "first_beat": Out(range(header_bytes // self.lanes + 1)),
            }
        )

    def elaborate(self, platform):
        m = Module()
        lanes = self.lanes
        ends, shifts = header_ends(lanes, self.ack_header_end, self.ipv6)
        hdr = self.hdr_bytes
        out = self.decoded
        v6 = self.v6 if self.ipv6 else None

        def view(offset, size, k_bth):
            """Bytes [offset, offset + size) as of the end of beat k_bth (bytes
            after that beat: stale, not used)."""
            parts = []
            for b in range(offset, offset + size):
                src = self.beat_data if b // lanes == k_bth else hdr
                lo = 8 * (b % lanes) if b // lanes == k_bth else 8 * b
                parts.append(src[lo : lo + 8])
            return Cat(*parts)

        # The DSCP and the BTH of the frame's family, each family's as of the
        # end of its own BTH beat.
        k_bth4 = bth_beat(lanes)
        dscp_v = IPV4.unpack(view(OFF_IPV4, IPV4.size, k_bth4))["dscp"]
        bth_bytes = view(OFF_BTH, BTH.size, k_bth4)
        if self.ipv6:
            k_bth6 = bth_beat(lanes, True)
            dscp_v = by_family(v6, dscp_v, IPV6.unpack(view(OFF_IPV6, IPV6.size, k_bth6))["dscp"])
            bth_bytes = by_family(v6, bth_bytes,
                                  view(OFF_BTH + IPV6_SHIFT, BTH.size, k_bth6))
        bth_v = BTH.unpack(bth_bytes)
        opcode_v = bth_v["opcode"]
        is_write_v = Cat(*[opcode_v == op for op in Opcode.WRITES]).any()
        is_imm_v = Cat(*[opcode_v == op for op in Opcode.WITH_IMM]).any()
        is_ack_v = opcode_v == Opcode.ACKNOWLEDGE
        is_probe_v = Cat(*[opcode_v == op for op in Opcode.PROBES]).any()

        def class_choice(of_end):
            """of_end(the opcode class's header end) for the beat's opcode
            class, among constants."""
            return Mux(
                is_imm_v,
                of_end(OFF_IMMDT + IMMDT.size),
                Mux(is_ack_v, of_end(self.ack_header_end), of_end(OFF_EXT + RETH.size)),
            )

        # header end (= the payload offset) per opcode class and family
        hend_v = by_family(v6, class_choice(lambda end: end),
                           class_choice(lambda end: end + IPV6_SHIFT))
        m.d.comb += self.first_beat.eq(
            by_family(v6, class_choice(lambda end: end // lanes),
                      class_choice(lambda end: (end + IPV6_SHIFT) // lanes)))
        trim_dscp = self.trim_dscp_q
        cur_trim = Mux(self.first, self.trim_dscp, trim_dscp) if k_bth4 == 0 else trim_dscp

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

        def frame_need(icrc):
            """The frame's length up to the end of its headers, plus ``icrc``
            (the overheads above are the same over either family)."""
            shape = out.frame_need.shape()
            return by_family(v6, per_class(lambda end, pad: end + icrc, shape),
                             per_class(lambda end, pad: end + IPV6_SHIFT + icrc, shape))

        # Loaded in every cycle while beat k_bth is the next beat (its last load
        # is the cycle that takes it), so that the enable is one flip-flop; the
        # stage's outputs are read from the cycle after beat k_bth until the
        # frame's verdict stage 1, before beat k_bth of the next frame is due
        # (at 512 bits, where k_bth = 0, they change at the end of stage 1).
        with m.If(self.at_bth):
            trimmed_v = dscp_v == cur_trim
            m.d.sync += [
                out.is_write.eq(is_write_v),
                out.is_imm.eq(is_imm_v),
                out.is_ack.eq(is_ack_v),
                out.is_probe.eq(is_probe_v),
                out.opcode_known.eq(is_write_v | is_ack_v | is_probe_v),
                out.tver_bad.eq(bth_v["tver"] != 0),
                out.trimmed.eq(trimmed_v),
                out.ovh.eq(per_class(ovh_of, out.ovh.shape())),
                out.ovh_max.eq(
                    per_class(lambda end, pad: ovh_of(end, pad) + self.max_payload,
                              out.ovh_max.shape())
                ),
                out.ovh_beats.eq(
                    per_class(lambda end, pad: ovh_of(end, pad) - (lanes - 1),
                              out.ovh_beats.shape())
                ),
                out.ovh_p1.eq(per_class(lambda end, pad: ovh_of(end, pad) + 1, out.ovh_p1.shape())),
                out.frame_need.eq(
                    Mux(
                        trimmed_v,
                        frame_need(0),
                        frame_need(ICRC_BYTES),
                    )
                ),
                out.udp_need.eq(per_class(lambda end, pad: end - OFF_UDP, out.udp_need.shape())),
            ]
            with m.Switch(hend_v):
                for end in ends:
                    with m.Case(end):
                        m.d.sync += out.shift.eq(shifts.index(end % lanes))
        return m


class LengthCheck(wiring.Component):
    """Length stage B of the RX parser.

    Interface: ``decoded`` (``DecodeSignature``, from ``ClassDecode``),
    ``udp_length`` and ``ip_total_len`` (the captured header's IPv4 total
    length, or with ``ipv6`` and ``v6`` set, IPv6's payload length) in; out:
    ``payload_fits`` (the opcode is known, the frame not trimmed and its UDP
    length leaves 0 to ``max_payload`` bytes of payload: a gate of the
    registers, not registered itself), and registered: ``writes_payload``
    (``payload_fits`` and ``payload_len > 0``), ``payload_len``,
    ``payload_beats``, ``beats_m1`` (``payload_beats - 1``), ``one_beat``
    (``payload_beats == 1``), ``last_keep`` (the payload's last beat's
    ``keep``), ``udp_need_ne`` (the UDP length is not the headers' length,
    for a trimmed frame), ``udp_total`` (UDP length + 20; over IPv6, the UDP
    length) and ``total_len_eth`` (IPv4 total length + 14; over IPv6, the
    payload length + 54): the IP length and the frame's length that the UDP
    length and the IP length give. The payload figures are only meaningful
    with ``payload_fits``.

    Latency: every register loads in every cycle, so the outputs follow the
    inputs one cycle later; from the second cycle after beat ``bth_beat``
    they hold the frame's values. Throughput: one frame per cycle.
    """

    def __init__(self, data_width, header_bytes, ack_header_end, max_payload_beats, ipv6=False):
        self.lanes = data_width // 8
        self.ipv6 = ipv6
        super().__init__(
            {
                "decoded": In(DecodeSignature(self.lanes, header_bytes, ack_header_end, ipv6)),
                "udp_length": In(16),
                "ip_total_len": In(16),
                **({"v6": In(1)} if ipv6 else {}),
                "payload_fits": Out(1),
                "writes_payload": Out(1),
                "payload_len": Out(16),
                "payload_beats": Out(range(max_payload_beats + 1)),
                "beats_m1": Out(range(-1, max_payload_beats)),
                "one_beat": Out(1),
                "last_keep": Out(self.lanes),
                "udp_need_ne": Out(1),
                "udp_total": Out(17),
                "total_len_eth": Out(17),
            }
        )

    def elaborate(self, platform):
        m = Module()
        lanes = self.lanes
        lane_bits = (lanes - 1).bit_length()
        dec = self.decoded
        v6 = self.v6 if self.ipv6 else None
        ovh, udp_length = dec.ovh, self.udp_length
        fits_ge = Signal()
        fits_le = Signal()
        m.d.comb += self.payload_fits.eq(dec.opcode_known & ~dec.trimmed & fits_ge & fits_le)
        plen = (udp_length - ovh)[:16]
        # (the low bits alone: a short subtraction, not the tail of the long one)
        rem = (udp_length[:lane_bits] - ovh[:lane_bits])[:lane_bits]
        m.d.sync += [
            fits_ge.eq(udp_length >= ovh),
            self.writes_payload.eq(
                dec.opcode_known & ~dec.trimmed & (udp_length > ovh) & (udp_length <= dec.ovh_max)
            ),
            fits_le.eq(udp_length <= dec.ovh_max),
            self.payload_len.eq(plen),
            self.payload_beats.eq((udp_length - dec.ovh_beats) >> lane_bits),
            self.beats_m1.eq((udp_length - dec.ovh_p1) >> lane_bits),
            self.one_beat.eq(((udp_length - dec.ovh_p1) >> lane_bits) == 0),
            self.last_keep.eq(
                Mux(rem == 0, (1 << lanes) - 1, (Const(1, lanes + 1) << rem) - 1)[:lanes]
            ),
            self.udp_need_ne.eq(udp_length != dec.udp_need),
            self.udp_total.eq(udp_length + by_family(v6, IPV4.size, 0)),
            self.total_len_eth.eq(
                self.ip_total_len + by_family(v6, OFF_IPV4, OFF_IPV6 + IPV6.size)),
        ]
        return m

"""Header layouts of the MRC wire format (docs/protocol.md), for the gateware.

Each header is a ``Header``: a name, a size in bytes and its fields as
(name, bit offset, width) in *network* order, bit 0 being the most
significant bit of the header's first byte, exactly as docs/protocol.md
draws them. From that one table a header gives:

- ``layout``: an ``amaranth.lib.data.StructLayout`` of the fields in host
  order, for parsed header records (``hdr.psn`` reads like the spec);
- ``unpack(raw)``: the fields, as Values, of a header held in a Value whose
  byte lane i (bits 8i..8i+7) is the header's byte i, the lane order of
  ``hw.stream``: pure wiring, no logic;
- ``pack(view)``: the inverse, header bytes in lane order from field values.

``tests/unit/test_headers_match.py`` holds these tables to the scapy layers
in ``host_driver/layers.py`` byte for byte.
"""

from amaranth.hdl import Cat, Const, Mux, Value, unsigned
from amaranth.lib import data

from .protocol import (
    ETHERTYPE_IPV4,
    ETHERTYPE_IPV6,
    IP_PROTO_UDP,
    PSN_BITS,
    ROCE_UDP_PORT,
    SRV6_LOCATOR_BITS,
    SRV6_USID_BITS,
    SRV6_USIDS,
    EvFormat,
    Opcode,
)

__all__ = [
    "AETH",
    "BTH",
    "ETH",
    "IMMDT",
    "IPV4",
    "IPV6",
    "PROBE",
    "RETH",
    "SACK",
    "UDP",
    "Header",
    "sack_bitmap",
    "Opcode",
    "ETHERTYPE_IPV4",
    "ETHERTYPE_IPV6",
    "icrc_mask",
    "by_family",
    "ev_fields",
    "ev_fold",
    "OFF_IPV6_DST",
    "IP_PROTO_UDP",
    "ROCE_UDP_PORT",
    "PATH_MTU",
    "mtu_code",
]

# Path MTU: IBTA's 3-bit code (as QP_CTRL.mtu holds it) and its bytes.
PATH_MTU = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}


def mtu_code(mtu: int) -> int:
    """The IBTA path-MTU code of ``mtu`` bytes; a ValueError names the field."""
    for code, size in PATH_MTU.items():
        if size == mtu:
            return code
    raise ValueError(f"mtu must be one of {sorted(PATH_MTU.values())}, not {mtu!r}")


class Header:
    def __init__(self, name: str, size: int, fields: list[tuple[str, int, int]]):
        self.name = name
        self.size = size
        self.fields = fields
        end = 0
        for fname, offset, width in fields:
            if offset != end:
                raise ValueError(f"{name}.{fname}: gap or overlap at bit {offset}")
            end = offset + width
        if end != 8 * size:
            raise ValueError(f"{name}: fields cover {end} bits of {8 * size}")
        self.layout = data.StructLayout({f: unsigned(w) for f, _, w in fields})

    def offset_of(self, field: str) -> int:
        """Byte offset of a byte-aligned field inside the header."""
        for fname, offset, _width in self.fields:
            if fname == field:
                if offset % 8:
                    raise ValueError(f"{self.name}.{field} is not byte-aligned")
                return offset // 8
        raise KeyError(field)

    @staticmethod
    def _lane_bit(p: int) -> int:
        # network bit p is bit 7 - p % 8 of byte p // 8
        return 8 * (p // 8) + 7 - p % 8

    def unpack(self, raw: Value) -> dict[str, Value]:
        """Fields of the header held in ``raw`` (lane order), as Values."""
        raw = Value.cast(raw)
        if len(raw) < 8 * self.size:
            raise ValueError(f"{self.name} needs {8 * self.size} bits, got {len(raw)}")
        return {
            fname: Cat(*[raw[self._lane_bit(p)] for p in reversed(range(off, off + w))])
            for fname, off, w in self.fields
        }

    def pack(self, fields) -> Value:
        """Header bytes in lane order from a mapping or view of field values."""
        bits = [None] * (8 * self.size)
        for fname, off, w in self.fields:
            given = fields[fname] if fname in _keys(fields) else 0
            value = Cat(Value.cast(given), Const(0, w))[:w]  # zero-extend or truncate to w
            for i in range(w):
                # field bit w-1-i (MSB first) is network bit off+i
                bits[self._lane_bit(off + i)] = value[w - 1 - i]
        return Cat(*bits)


def _keys(fields):
    if isinstance(fields, dict):
        return fields.keys()
    return [name for name, _ in fields.shape()]


ETH = Header("eth", 14, [("dst", 0, 48), ("src", 48, 48), ("ethertype", 96, 16)])

IPV4 = Header(
    "ipv4",
    20,
    [
        ("version", 0, 4),
        ("ihl", 4, 4),
        ("dscp", 8, 6),
        ("ecn", 14, 2),
        ("total_len", 16, 16),
        ("ident", 32, 16),
        ("flags", 48, 3),
        ("frag_off", 51, 13),
        ("ttl", 64, 8),
        ("proto", 72, 8),
        ("checksum", 80, 16),
        ("src", 96, 32),
        ("dst", 128, 32),
    ],
)

# RoCEv2 over IPv6: the traffic class is DSCP and ECN as in IPv4's TOS byte.
IPV6 = Header(
    "ipv6",
    40,
    [
        ("version", 0, 4),
        ("dscp", 4, 6),
        ("ecn", 10, 2),
        ("flow_label", 12, 20),
        ("payload_len", 32, 16),
        ("next_header", 48, 8),
        ("hop_limit", 56, 8),
        ("src", 64, 128),
        ("dst", 192, 128),
    ],
)

UDP = Header(
    "udp", 8, [("sport", 0, 16), ("dport", 16, 16), ("length", 32, 16), ("checksum", 48, 16)]
)

BTH = Header(
    "bth",
    12,
    [
        ("opcode", 0, 8),
        ("se", 8, 1),
        ("migreq", 9, 1),
        ("padcount", 10, 2),
        ("tver", 12, 4),
        ("pkey", 16, 16),
        ("fecn", 32, 1),
        ("becn", 33, 1),
        ("resv6", 34, 6),
        ("dqpn", 40, 24),
        ("ackreq", 64, 1),
        ("resv7", 65, 7),
        ("psn", 72, PSN_BITS),
    ],
)

RETH = Header("reth", 16, [("va", 0, 64), ("rkey", 64, 32), ("dma_len", 96, 32)])

IMMDT = Header("immdt", 4, [("imm", 0, 32)])

AETH = Header("aeth", 4, [("syndrome", 0, 8), ("msn", 8, 24)])

# The MRC SACK extension without its bitmap; the bitmap follows, 32 x sack_words bits.
SACK = Header(
    "sack",
    12,
    [
        ("svc_hi", 0, 8),
        ("cum_psn", 8, PSN_BITS),
        ("svc_lo", 32, 8),
        ("sack_base", 40, PSN_BITS),
        ("ece", 64, 1),
        ("resv_c", 65, 7),
        ("sack_words", 72, 8),
        ("ce_count", 80, 16),
    ],
)

PROBE = Header(
    "probe",
    16,
    [("probe_id", 0, 32), ("ev", 32, 16), ("resv", 48, 16), ("timestamp", 64, 64)],
)


def sack_bitmap(bits: int) -> Header:
    """The SACK bitmap as a header of its own: one big-endian field of ``bits``."""
    if bits % 32 or not 32 <= bits <= 8160:
        raise ValueError(f"SACK bitmap width must be a multiple of 32 in 32..8160, not {bits}")
    return Header("sack_bitmap", bits // 8, [("bitmap", 0, bits)])


# Byte offsets of each header in a frame, per docs/protocol.md.
OFF_ETH = 0
OFF_IPV4 = OFF_ETH + ETH.size  # 14
OFF_UDP = OFF_IPV4 + IPV4.size  # 34
OFF_BTH = OFF_UDP + UDP.size  # 42
OFF_EXT = OFF_BTH + BTH.size  # 54: RETH, AETH or PROBE
OFF_IMMDT = OFF_EXT + RETH.size  # 70
OFF_SACK = OFF_EXT + AETH.size  # 58
ICRC_BYTES = 4

# Frame byte offsets that the ICRC sees as 0xFF (docs/protocol.md): IPv4 TOS,
# TTL and header checksum, UDP checksum, BTH byte 4 (FECN, BECN, resv6).
ICRC_MASKED_BYTES = (
    OFF_IPV4 + 1,
    OFF_IPV4 + 8,
    OFF_IPV4 + 10,
    OFF_IPV4 + 11,
    OFF_UDP + 6,
    OFF_UDP + 7,
    OFF_BTH + 4,
)

# In a frame over IPv6 every header after the IP header starts IPV6_SHIFT bytes
# later than over IPv4.
IPV6_SHIFT = IPV6.size - IPV4.size  # 20
OFF_IPV6 = OFF_IPV4  # 14
OFF_UDP6 = OFF_UDP + IPV6_SHIFT  # 54
OFF_BTH6 = OFF_BTH + IPV6_SHIFT  # 62
OFF_EXT6 = OFF_EXT + IPV6_SHIFT  # 74


def by_family(v6, v4_value, v6_value):
    """``v4_value`` in a block built without IPv6 (``v6`` None), else the
    value of the frame's family (``v6``, a 1-bit Value: 1 for IPv6)."""
    return v4_value if v6 is None else Mux(v6, v6_value, v4_value)


OFF_IPV6_DST = OFF_IPV6 + IPV6.offset_of("dst")  # 38


def ev_fold(ev):
    """The XOR of an EV's 16-bit words, in gateware (``hw.protocol.ev_echo``):
    a 16-bit EV is itself."""
    fold = ev[:16]
    for i in range(16, len(ev), 16):
        fold = fold ^ ev[i : i + 16]
    return fold


def ev_fields(ev, ev_format, ev_width, peer=None):
    """Where an EV rides (``hw.protocol.EvFormat``), in gateware: the frame's
    (UDP source port, IPv6 flow label, destination address) from the EV entry's
    ``ev_width`` bits ``ev``, the QP's ``ev_format`` and its peer's 128-bit
    address ``peer``. The gateware of ``stev_fields``, ``srv6_sport`` and
    ``srv6_carrier``; a format wider than ``ev_width`` is sent as UDP's. The
    address is the SRv6 carrier to ``peer`` (None without SRv6 or a peer),
    whatever the format: the caller puts it on the wire for SRv6 only."""
    if ev_width <= 16:
        return ev[:16], Const(0, 16), None
    sport, flow = ev[:16], Mux(ev_format == EvFormat.STEV, ev[16:32], 0)
    if ev_width < SRV6_USIDS * SRV6_USID_BITS:
        return sport, flow, None
    srv6 = ev_format == EvFormat.SRV6
    fold = ev_fold(ev[: SRV6_USIDS * SRV6_USID_BITS])
    sport = Mux(srv6, Cat(fold[:14], Const(0b11, 2)), sport)
    carrier = None
    if peer is not None:
        low = 128 - SRV6_LOCATOR_BITS - SRV6_USIDS * SRV6_USID_BITS
        carrier = Cat(Const(0, low), ev[: SRV6_USIDS * SRV6_USID_BITS],
                      peer[128 - SRV6_LOCATOR_BITS :])
    return sport, flow, carrier


def icrc_mask(ipv6: bool) -> dict[int, int]:
    """The bits the ICRC sees as ones, per frame byte offset: {offset: bit mask}.
    IPv4: ``ICRC_MASKED_BYTES`` whole. IPv6: the traffic class and flow label
    (all of bytes 0..3 of the IPv6 header but the version nibble), the hop
    limit, the UDP checksum and BTH byte 4 (docs/protocol.md)."""
    if not ipv6:
        return dict.fromkeys(ICRC_MASKED_BYTES, 0xFF)
    return {OFF_IPV6: 0x0F, OFF_IPV6 + 1: 0xFF, OFF_IPV6 + 2: 0xFF, OFF_IPV6 + 3: 0xFF,
            OFF_IPV6 + 7: 0xFF, OFF_UDP6 + 6: 0xFF, OFF_UDP6 + 7: 0xFF, OFF_BTH6 + 4: 0xFF}

"""The MRC protocol's constants, defined once (docs/protocol.md).

Gateware, driver (``host_driver``), scapy layers and golden model (``sim.model``)
all import these; nothing else in the repository spells their values.

- ``PSN_BITS``: the BTH's packet sequence number is 24 bits; PSN arithmetic
  is modulo ``1 << PSN_BITS``, and a PSN is "after" another when their
  difference modulo that is below ``PSN_HALF``.
- ``Opcode``: BTH opcodes of the wire format (IBTA RC writes and ACKNOWLEDGE,
  MRC's probes in the manufacturer-specific range).
- ``Syndrome``: AETH syndromes (ACK, and the NAK codes the NIC sends or takes).
- ``CqeStatus``: the CQE status byte, verbs' ``ibv_wc_status`` values.
- ``SVC_TIME_BITS``, ``SVC_TIME_UNIT_NS``, ``SVC_TIME_MAX``: the SACK
  extension's service time, the responder's time from taking the newest data
  packet it placed to its ACK, in units of 64 ns rounded down, saturating at
  ``SVC_TIME_MAX`` (which says "that or longer": no RTT sample).
- ``MAX_PLANES``, ``PLANE_BITS``: a NIC has 1..8 planes (MAC ports, each its
  own fabric); an EV entry names its plane in ``PLANE_BITS`` bits.
- ``QpState``, ``EvState``: verbs QP states and MRC EV states, as the
  registers hold them; both are Amaranth enums with a shape, so gateware uses
  them as field shapes and Python code compares them with the register values.
  The golden model names states by their ``.name`` (``"RTS"``, ``"GOOD"``).
- ``EvFormat`` and its helpers: where a QP's EV rides in its frames (MRC's
  three profiles' formats, docs/protocol.md "EV formats"):
  - ``UDP``: the EV (16 bits) is the UDP source port;
  - ``STEV`` (IPv6): EV bits 15..0 are the UDP source port and bits 31..16
    the flow label's low 16 bits (its high 4 bits 0);
  - ``SRV6`` (IPv6): the EV is a uSID list, ``SRV6_USIDS`` uSIDs of
    ``SRV6_USID_BITS``, the first in the EV's top bits, ended by a zero uSID
    or by the last. The destination address on the wire is the uSID carrier
    ``srv6_carrier``: the peer address's first ``SRV6_LOCATOR_BITS`` (the
    locator), the uSIDs, zeros. A fabric node whose uSID leads the list
    consumes it (``srv6_shift``). The list's last uSID is the peer's own
    (its address is the locator, that uSID, zeros), so once the fabric has
    consumed the others the address is the peer's: the ICRC covers the
    peer's address (the address the receiver sees, as RFC 8200 8.1's
    pseudo-header takes a routing header's final destination). The source
    port is ``srv6_sport``.
  A probe's PROBE header carries ``ev_echo`` of its EV (the XOR of its
  16-bit words: the EV itself in the UDP format), which the answer echoes.
"""

from amaranth.lib import enum

__all__ = [
    "PSN_BITS",
    "PSN_MASK",
    "PSN_HALF",
    "ETHERTYPE_IPV4",
    "ETHERTYPE_IPV6",
    "ECN_NOT_ECT",
    "ECN_ECT1",
    "ECN_ECT0",
    "ECN_CE",
    "IP_TTL",
    "IP_FLAGS_DF",
    "PKEY_DEFAULT",
    "TRIM_DSCP_DEFAULT",
    "IP_PROTO_UDP",
    "ROCE_UDP_PORT",
    "SVC_TIME_BITS",
    "SVC_TIME_UNIT_NS",
    "SVC_TIME_MAX",
    "svc_time_split",
    "svc_time_join",
    "MAX_PLANES",
    "PLANE_BITS",
    "plane_bits",
    "Opcode",
    "Syndrome",
    "QpState",
    "EvState",
    "CqeStatus",
    "EvFormat",
    "EV_FORMAT_BITS",
    "EV_WIDTHS",
    "ev_formats",
    "ev_hi_words",
    "ev_hi_values",
    "check_ev_width",
    "SRV6_USIDS",
    "SRV6_USID_BITS",
    "SRV6_LOCATOR_BITS",
    "stev_fields",
    "srv6_carrier",
    "srv6_shift",
    "srv6_sport",
    "srv6_usids",
    "ev_echo",
]

PSN_BITS = 24
PSN_MASK = (1 << PSN_BITS) - 1
PSN_HALF = 1 << (PSN_BITS - 1)

ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_IPV6 = 0x86DD
# the IP header's ECN codepoints (RFC 3168); the NIC sends ECT(0) and reads CE
ECN_NOT_ECT, ECN_ECT1, ECN_ECT0, ECN_CE = 0, 1, 2, 3
IP_TTL = 64  # the NIC's IPv4 TTL and IPv6 hop limit
IP_FLAGS_DF = 0b010  # IPv4 flags: don't fragment
PKEY_DEFAULT = 0xFFFF  # the BTH's partition key: the default partition, full member
TRIM_DSCP_DEFAULT = 0x3F  # the DSCP that marks a trimmed packet, unless configured
IP_PROTO_UDP = 17
ROCE_UDP_PORT = 4791

# The SACK extension's service time: 16 bits of 64 ns units (up to 4.19 ms, so
# that an ACK coalescing timer's wait fits), its high byte in the extension's
# byte 0 and its low byte in byte 4 (docs/protocol.md).
SVC_TIME_BITS = 16
SVC_TIME_UNIT_NS = 64
SVC_TIME_MAX = (1 << SVC_TIME_BITS) - 1


def svc_time_split(units: int) -> tuple[int, int]:
    """The SACK extension's (``svc_hi``, ``svc_lo``) bytes of a service time of
    ``units`` (of ``SVC_TIME_UNIT_NS``), saturating at ``SVC_TIME_MAX``."""
    if units < 0:
        raise ValueError(f"a service time is not negative, not {units!r}")
    v = min(int(units), SVC_TIME_MAX)
    return v >> 8, v & 0xFF


def svc_time_join(hi: int, lo: int) -> int:
    """The service time, in units of ``SVC_TIME_UNIT_NS``, of the SACK extension's
    ``svc_hi`` and ``svc_lo``."""
    return (hi & 0xFF) << 8 | (lo & 0xFF)


MAX_PLANES = 8
PLANE_BITS = 3  # (MAX_PLANES - 1).bit_length()


def plane_bits(num_planes) -> int:
    """The bits that tag a frame or record with its plane in a NIC of
    ``num_planes``: ``PLANE_BITS``, or 0 with one plane (nothing to tag).
    Raises ValueError for a count outside 1..MAX_PLANES."""
    if not isinstance(num_planes, int) or not 1 <= num_planes <= MAX_PLANES:
        raise ValueError(f"num_planes must be in 1..{MAX_PLANES}, not {num_planes!r}")
    return PLANE_BITS if num_planes > 1 else 0


class Opcode:
    """BTH opcodes of the MRC wire format (RC transport, IBTA vol. 1 table 38,
    plus MRC's EV probes in the manufacturer-specific range 0xC0..0xFF)."""

    WRITE_FIRST = 0x06
    WRITE_MIDDLE = 0x07
    WRITE_LAST = 0x08
    WRITE_LAST_IMM = 0x09
    WRITE_ONLY = 0x0A
    WRITE_ONLY_IMM = 0x0B
    ACKNOWLEDGE = 0x11
    PROBE_REQ = 0xC0
    PROBE_RESP = 0xC1

    WRITES = (WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, WRITE_LAST_IMM, WRITE_ONLY, WRITE_ONLY_IMM)
    LAST = (WRITE_LAST, WRITE_LAST_IMM, WRITE_ONLY, WRITE_ONLY_IMM)  # end a message
    WITH_IMM = (WRITE_LAST_IMM, WRITE_ONLY_IMM)
    PROBES = (PROBE_REQ, PROBE_RESP)
    ALL = WRITES + (ACKNOWLEDGE,) + PROBES
    NAMES = {
        WRITE_FIRST: "WRITE_FIRST",
        WRITE_MIDDLE: "WRITE_MIDDLE",
        WRITE_LAST: "WRITE_LAST",
        WRITE_LAST_IMM: "WRITE_LAST_WITH_IMMEDIATE",
        WRITE_ONLY: "WRITE_ONLY",
        WRITE_ONLY_IMM: "WRITE_ONLY_WITH_IMMEDIATE",
        ACKNOWLEDGE: "ACKNOWLEDGE",
        PROBE_REQ: "MRC_PROBE_REQUEST",
        PROBE_RESP: "MRC_PROBE_RESPONSE",
    }


class Syndrome:
    """AETH syndromes: bits 7..5 select ACK (000), RNR NAK (001) or NAK (011)."""

    ACK = 0x1F  # ACK with "invalid credit count": MRC has no end-to-end credits
    NAK_PSN_SEQ_ERROR = 0x60
    NAK_INVALID_REQUEST = 0x61
    NAK_REMOTE_ACCESS = 0x62
    NAK_REMOTE_OP = 0x63
    NAK_TRIMMED = 0x70  # MRC: NAK code 16 (reserved in IBTA), after UET's TRIMMED
    NAMES = {
        ACK: "ACK",
        NAK_PSN_SEQ_ERROR: "NAK_PSN_SEQUENCE_ERROR",
        NAK_INVALID_REQUEST: "NAK_INVALID_REQUEST",
        NAK_REMOTE_ACCESS: "NAK_REMOTE_ACCESS_ERROR",
        NAK_REMOTE_OP: "NAK_REMOTE_OPERATIONAL_ERROR",
        NAK_TRIMMED: "NAK_TRIMMED",
    }


class QpState(enum.IntEnum, shape=3):
    """Verbs QP states, as ``QP_CTRL.state`` and the QP status registers hold them."""

    RESET = 0
    INIT = 1
    RTR = 2
    RTS = 3
    ERROR = 4


class EvState(enum.IntEnum, shape=2):
    """MRC EV states, as the EV table holds them (docs/protocol.md, "EV states")."""

    GOOD = 0
    ASSUMED_BAD = 1
    DENIED = 2


class CqeStatus:
    """Send-CQE status (byte 0x14), verbs' ibv_wc_status values: LOC_QP_OP_ERR
    (IBV_WC_LOC_QP_OP_ERR) is a WQE the requester cannot execute: an unknown
    opcode; FLUSHED is IBV_WC_WR_FLUSH_ERR; REM_INV_REQ (IBV_WC_REM_INV_REQ_ERR)
    and REM_ACCESS (IBV_WC_REM_ACCESS_ERR) a NAK 0x61 / 0x62 from the responder."""

    SUCCESS, RETRY_EXCEEDED, LOC_QP_OP_ERR, FLUSHED, REM_INV_REQ, REM_ACCESS = 0, 1, 2, 5, 9, 10


class EvFormat(enum.IntEnum, shape=2):
    """Where a QP's EV rides in its frames (the module's docstring), as the
    QP registers hold it."""

    UDP = 0
    STEV = 1
    SRV6 = 2


SRV6_USIDS = 4
SRV6_USID_BITS = 16
SRV6_LOCATOR_BITS = 32
# The EV bits each format uses.
EV_FORMAT_BITS = {EvFormat.UDP: 16, EvFormat.STEV: 32,
                  EvFormat.SRV6: SRV6_USIDS * SRV6_USID_BITS}
_USID_MASK = (1 << SRV6_USID_BITS) - 1
_ADDR_BITS = 128
# A block's EV entries hold ``ev_width`` bits (a build parameter): 16 for the
# UDP format, 32 for STEV as well, 64 for SRv6 as well.
EV_WIDTHS = (16, 32, 64)


def ev_formats(ev_width: int) -> tuple:
    """The formats whose EVs an entry of ``ev_width`` bits holds."""
    return tuple(f for f in EvFormat if EV_FORMAT_BITS[f] <= ev_width)


def ev_hi_words(ev_width: int) -> int:
    """The registers that carry an EV's bits above 15 (``ev_value_hi``): word
    i holds EV bits 32i+47..32i+16."""
    return -(-(ev_width - 16) // 32)


def ev_hi_values(ev: int, ev_width: int) -> list[int]:
    """The ``ev_value_hi`` words that carry EV ``ev``'s bits above 15."""
    return [ev >> 16 + 32 * k & 0xFFFF_FFFF for k in range(ev_hi_words(ev_width))]


def check_ev_width(ev_width, ipv6) -> int:
    """``ev_width`` checked against the build: a ValueError says what to fix."""
    if ev_width not in EV_WIDTHS:
        raise ValueError(f"ev_width must be one of {EV_WIDTHS} (16: the UDP format; 32: STEV "
                         f"too; 64: SRv6 too), not {ev_width!r}")
    if ev_width > 16 and not ipv6:
        raise ValueError(f"ev_width {ev_width} holds STEV or SRv6 EVs, which ride in IPv6 "
                         "headers: build with ipv6=True, or use ev_width=16")
    return ev_width


def stev_fields(ev: int) -> tuple[int, int]:
    """A STEV EV's (UDP source port, flow label)."""
    return ev & 0xFFFF, (ev >> 16) & 0xFFFF


def srv6_usids(ev: int) -> list[int]:
    """An SRv6 EV's uSIDs, first hop first, up to the first zero."""
    out = []
    for i in reversed(range(SRV6_USIDS)):
        usid = (ev >> (SRV6_USID_BITS * i)) & _USID_MASK
        if not usid:
            break
        out.append(usid)
    return out


def srv6_carrier(peer: int, ev: int) -> int:
    """The destination address a frame of SRv6 EV ``ev`` to ``peer`` (a
    128-bit IPv6 address) carries: the peer's locator, the uSIDs, zeros."""
    low = _ADDR_BITS - SRV6_LOCATOR_BITS - SRV6_USIDS * SRV6_USID_BITS
    locator = peer >> (_ADDR_BITS - SRV6_LOCATOR_BITS)
    usids = ev & ((1 << (SRV6_USIDS * SRV6_USID_BITS)) - 1)
    return (locator << (_ADDR_BITS - SRV6_LOCATOR_BITS)) | (usids << low)


def srv6_shift(address: int) -> int:
    """``address`` with its first uSID consumed: what a node whose uSID leads
    the carrier forwards (the locator kept, the rest moved up, zeros in)."""
    keep = _ADDR_BITS - SRV6_LOCATOR_BITS
    rest = address & ((1 << keep) - 1)
    return (address >> keep << keep) | ((rest << SRV6_USID_BITS) & ((1 << keep) - 1))


def ev_echo(ev: int) -> int:
    """The XOR of an EV's 16-bit words: what a probe's PROBE header carries
    (and its answer echoes) for it; a UDP-format EV is itself."""
    fold = 0
    while ev:
        fold ^= ev & 0xFFFF
        ev >>= 16
    return fold


def srv6_sport(ev: int) -> int:
    """An SRv6 frame's UDP source port: the XOR of the EV's uSIDs
    (``ev_echo``), in the dynamic range (0xC000 | its low 14 bits), so that a
    hashing node still spreads it."""
    return 0xC000 | (ev_echo(ev) & 0x3FFF)

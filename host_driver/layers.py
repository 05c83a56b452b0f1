"""Scapy layers for the MRC wire format (docs/protocol.md).

MRC rides on RoCEv2: Ethernet II / IPv4 or IPv6 / UDP (destination port 4791,
source port = entropy value) / BTH / extension headers / payload / pad / ICRC.
The builders take IPv6 addresses (``src_ip``/``dst_ip`` with colons, both of
one family) and an IPv6 ``flow_label``; ``icrc()``, ``check_frame()``,
``trim()`` and ``header_len()`` handle both families.

Layers defined here:

``BTH``       Base Transport Header, 12 bytes, ICRC kept as a trailer field
``RETH``      RDMA Extended Transport Header, 16 bytes (on *every* WRITE packet)
``ImmDt``     Immediate data, 4 bytes (on WRITE_LAST/ONLY_WITH_IMMEDIATE)
``AETH``      ACK Extended Transport Header, 4 bytes
``MRCSack``   MRC SACK extension after the AETH: cumulative PSN, SACK base,
              ECN echo and a bitmap of ``sack_words`` x 32 bits
``MRCProbe``  EV probe request/response body, 16 bytes

``icrc()`` and ``ipv4_checksum()`` work on raw bytes, independently of scapy,
so hardware tests can check frames without trusting the layer that built them.
"""

from __future__ import annotations

import struct
import zlib

from scapy.fields import (
    BitEnumField,
    BitField,
    ByteEnumField,
    ByteField,
    FCSField,
    Field,
    IntField,
    LongField,
    ShortField,
    XBitField,
    XByteField,
    XIntField,
    XLongField,
    XShortField,
)
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw, bind_layers, split_layers

from hw.protocol import PSN_BITS, PSN_MASK, ROCE_UDP_PORT, Opcode, Syndrome

# The wire format's constants: one definition, in hw/protocol.py.
OP_WRITE_FIRST = Opcode.WRITE_FIRST
OP_WRITE_MIDDLE = Opcode.WRITE_MIDDLE
OP_WRITE_LAST = Opcode.WRITE_LAST
OP_WRITE_LAST_IMM = Opcode.WRITE_LAST_IMM
OP_WRITE_ONLY = Opcode.WRITE_ONLY
OP_WRITE_ONLY_IMM = Opcode.WRITE_ONLY_IMM
OP_ACKNOWLEDGE = Opcode.ACKNOWLEDGE
OP_PROBE_REQ = Opcode.PROBE_REQ
OP_PROBE_RESP = Opcode.PROBE_RESP
WRITE_OPCODES = Opcode.WRITES
IMM_OPCODES = Opcode.WITH_IMM
PROBE_OPCODES = Opcode.PROBES
OPCODES = Opcode.NAMES

AETH_ACK = Syndrome.ACK
NAK_PSN_SEQ_ERROR = Syndrome.NAK_PSN_SEQ_ERROR
NAK_INVALID_REQUEST = Syndrome.NAK_INVALID_REQUEST
NAK_REMOTE_ACCESS = Syndrome.NAK_REMOTE_ACCESS
NAK_REMOTE_OP = Syndrome.NAK_REMOTE_OP
NAK_TRIMMED = Syndrome.NAK_TRIMMED
SYNDROMES = Syndrome.NAMES

ECN_NOT_ECT = 0
ECN_ECT1 = 1
ECN_ECT0 = 2
ECN_CE = 3

TRIM_DSCP_DEFAULT = 0x3F

HDR_ETH, HDR_IPV4, HDR_IPV6, HDR_UDP, HDR_BTH = 14, 20, 40, 8, 12
ETHERTYPE_IPV4, ETHERTYPE_IPV6 = 0x0800, 0x86DD
HDR_RETH, HDR_IMMDT, HDR_AETH, HDR_ICRC = 16, 4, 4, 4
HDR_SACK_FIXED = 12  # MRCSack without its bitmap
HDR_PROBE = 16
SACK_BITS_DEFAULT = 64

# CRC-32 state after the 8 bytes of ones that stand in for the masked LRH.
_ICRC_PREFIX = b"\xff" * 8


def ipv4_checksum(header: bytes) -> int:
    """One's-complement sum over an IPv4 header whose checksum field is zero."""
    total = 0
    for i in range(0, len(header), 2):
        total += (header[i] << 8) | header[i + 1]
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return (~total) & 0xFFFF


def is_ipv6(frame: bytes) -> bool:
    """The frame's EtherType is IPv6 (else it is taken as IPv4)."""
    return frame[12:14] == ETHERTYPE_IPV6.to_bytes(2, "big")


def ip_header_len(frame: bytes) -> int:
    """Bytes of the frame's IP header: 40 for IPv6, IHL x 4 for IPv4."""
    return HDR_IPV6 if is_ipv6(frame) else (frame[14] & 0x0F) * 4


def udp_offset(frame: bytes) -> int | None:
    """Where the UDP header of an Ethernet / IPv4 or IPv6 / UDP frame starts (None
    for anything else, or a frame too short for its UDP header)."""
    if is_ipv6(frame):
        off, proto_at = 14 + HDR_IPV6, 20
    elif frame[12:14] == ETHERTYPE_IPV4.to_bytes(2, "big") and len(frame) > 23:
        off, proto_at = 14 + (frame[14] & 0x0F) * 4, 23
    else:
        return None
    return off if len(frame) >= off + HDR_UDP and frame[proto_at] == 17 else None


def bth_offset(frame: bytes) -> int | None:
    """Where the BTH of a RoCEv2 frame starts (IPv4 without options, or IPv6, UDP to
    port 4791, long enough for a BTH), else None."""
    off = udp_offset(frame)
    if off is None or off != 14 + (HDR_IPV6 if is_ipv6(frame) else HDR_IPV4):
        return None
    bth = off + HDR_UDP
    if len(frame) < bth + HDR_BTH or int.from_bytes(frame[off + 2:off + 4], "big") \
            != ROCE_UDP_PORT:
        return None
    return bth


def with_ecn(frame: bytes, ecn: int) -> bytes:
    """The frame with its IP ECN bits set to ``ecn`` (IPv4: its checksum fixed)."""
    out = bytearray(frame)
    if is_ipv6(frame):
        out[15] = (out[15] & 0xCF) | ecn << 4  # the traffic class's low 2 bits
        return bytes(out)
    out[15] = (out[15] & 0xFC) | ecn
    out[24:26] = b"\x00\x00"
    out[24:26] = ipv4_checksum(bytes(out[14:34])).to_bytes(2, "big")
    return bytes(out)


def ip_ecn(frame: bytes) -> int:
    """The frame's IP ECN bits (IPv4 TOS or IPv6 traffic class, low 2 bits)."""
    return (frame[15] >> 4) & 3 if is_ipv6(frame) else frame[15] & 3


def ip_dscp(frame: bytes) -> int:
    """The frame's DSCP (the upper 6 bits of IPv4's TOS or IPv6's traffic class)."""
    if is_ipv6(frame):
        return ((frame[14] & 0x0F) << 4 | frame[15] >> 4) >> 2
    return frame[15] >> 2


def icrc(frame: bytes) -> int:
    """RoCEv2 ICRC of an Ethernet frame (no FCS) whose last 4 bytes are the ICRC.

    CRC-32 over 8 bytes of ones, the IP header with its variant fields masked
    to ones (IPv4: TOS, TTL and checksum; IPv6: traffic class, flow label and
    hop limit), the UDP header with its checksum masked to ones, the BTH with
    its byte 4 (FECN, BECN, resv6) masked to ones, and everything after the
    BTH up to the ICRC. Returned as the value that goes on the wire
    least-significant byte first.
    """
    ihl = ip_header_len(frame)
    ip = bytearray(frame[14 : 14 + ihl])
    if is_ipv6(frame):
        ip[0] |= 0x0F  # version kept; traffic class and flow label: ones
        ip[1:4] = b"\xff\xff\xff"
        ip[7] = 0xFF  # hop limit
    else:
        ip[1] = 0xFF
        ip[8] = 0xFF
        ip[10:12] = b"\xff\xff"
    udp_off = 14 + ihl
    udp = bytearray(frame[udp_off : udp_off + 8])
    udp[6:8] = b"\xff\xff"
    bth_off = udp_off + 8
    bth = bytearray(frame[bth_off : bth_off + 12])
    bth[4] = 0xFF
    rest = frame[bth_off + 12 : -4]
    return zlib.crc32(_ICRC_PREFIX + bytes(ip) + bytes(udp) + bytes(bth) + rest) & 0xFFFFFFFF


def frame_icrc_field(frame: bytes) -> int:
    """The ICRC carried by a frame, as the same integer ``icrc()`` returns."""
    return struct.unpack("<I", frame[-4:])[0]


def check_frame(frame: bytes) -> tuple[bool, bool]:
    """(IPv4 checksum good, ICRC good) for raw frame bytes; IPv6 has no header
    checksum, so its first answer is True."""
    if is_ipv6(frame):
        return True, icrc(frame) == frame_icrc_field(frame)
    ihl = (frame[14] & 0x0F) * 4
    hdr = bytearray(frame[14 : 14 + ihl])
    got = (hdr[10] << 8) | hdr[11]
    hdr[10:12] = b"\x00\x00"
    return ipv4_checksum(bytes(hdr)) == got, icrc(frame) == frame_icrc_field(frame)


class VarIntField(Field):
    """Unsigned big-endian integer whose byte length comes from another field."""

    __slots__ = ["length_from"]

    def __init__(self, name, default, length_from):
        self.length_from = length_from
        Field.__init__(self, name, default)

    def addfield(self, pkt, s, val):
        n = self.length_from(pkt)
        return s + int(val or 0).to_bytes(n, "big")

    def getfield(self, pkt, s):
        n = self.length_from(pkt)
        return s[n:], int.from_bytes(s[:n], "big")

    def i2repr(self, pkt, x):
        return f"0x{int(x or 0):0{self.length_from(pkt) * 2}x}"


class BTH(Packet):
    """Base Transport Header; the ICRC is the packet's 4-byte trailer."""

    name = "BTH"
    fields_desc = [
        ByteEnumField("opcode", 0, OPCODES),
        BitField("se", 0, 1),
        BitField("migreq", 0, 1),
        BitField("padcount", None, 2),
        BitField("tver", 0, 4),
        XShortField("pkey", 0xFFFF),
        BitField("fecn", 0, 1),
        BitField("becn", 0, 1),
        BitField("resv6", 0, 6),
        BitField("dqpn", 0, 24),
        BitField("ackreq", 0, 1),
        BitField("resv7", 0, 7),
        BitField("psn", 0, PSN_BITS),
        FCSField("icrc", None, fmt="!I"),  # same representation as scapy.contrib.roce
    ]

    def post_build(self, p, pay):
        # scapy's trailer field hands us the 12 header bytes in p, and the
        # upper layers followed by the 4-byte ICRC placeholder in pay.
        head, pay, trailer = p, pay[:-4], pay[-4:]
        pad = (-len(pay)) % 4
        if self.padcount is None:
            head = head[:1] + bytes([(head[1] & 0xCF) | (pad << 4)]) + head[2:]
            pay = pay + b"\x00" * pad
        frame = head + pay + trailer
        if self.icrc is None:
            frame = frame[:-4] + struct.pack("<I", self._compute_icrc(frame))
        return frame

    def _compute_icrc(self, bth_onwards: bytes) -> int:
        udp = self.underlayer
        ip = udp.underlayer if udp is not None else None
        if not isinstance(udp, UDP) or not isinstance(ip, (IP, IPv6)):
            return 0
        # self_build() gives the underlayers' own bytes without recursing back
        # into this layer; lengths still unset there are filled in here.
        ip_hdr = bytearray(ip.self_build())
        udp_hdr = bytearray(udp.self_build()[:8])
        total_udp = 8 + len(bth_onwards)
        udp_hdr[4:6] = total_udp.to_bytes(2, "big")
        if isinstance(ip, IPv6):
            ip_hdr = ip_hdr[:HDR_IPV6]
            ip_hdr[4:6] = total_udp.to_bytes(2, "big")  # payload length
            ethertype = ETHERTYPE_IPV6
        else:
            if ip.ihl is None:
                ip_hdr[0] = (ip_hdr[0] & 0xF0) | (len(ip_hdr) // 4)
            ip_hdr[2:4] = (len(ip_hdr) + total_udp).to_bytes(2, "big")
            ethertype = ETHERTYPE_IPV4
        fake = (b"\x00" * 12 + ethertype.to_bytes(2, "big") + bytes(ip_hdr) + bytes(udp_hdr)
                + bth_onwards)
        return icrc(fake)


class RETH(Packet):
    name = "RETH"
    fields_desc = [XLongField("va", 0), XIntField("rkey", 0), IntField("dma_len", 0)]

    def guess_payload_class(self, payload):
        bth = self.underlayer
        if isinstance(bth, BTH) and bth.opcode in IMM_OPCODES:
            return ImmDt
        return Raw


class ImmDt(Packet):
    name = "ImmDt"
    fields_desc = [XIntField("imm", 0)]


class AETH(Packet):
    name = "AETH"
    fields_desc = [ByteEnumField("syndrome", AETH_ACK, SYNDROMES), XBitField("msn", 0, 24)]

    def guess_payload_class(self, payload):
        if len(payload) >= HDR_SACK_FIXED:
            return MRCSack
        return Raw


class MRCSack(Packet):
    """MRC SACK extension: follows the AETH of every MRC ACK/NAK."""

    name = "MRCSack"
    fields_desc = [
        XByteField("resv_a", 0),
        BitField("cum_psn", 0, PSN_BITS),
        XByteField("resv_b", 0),
        BitField("sack_base", 0, PSN_BITS),
        BitEnumField("ece", 0, 1, {0: "no_ce", 1: "ce_seen"}),
        BitField("resv_c", 0, 7),
        ByteField("sack_words", SACK_BITS_DEFAULT // 32),
        ShortField("ce_count", 0),
        VarIntField("bitmap", 0, length_from=lambda p: 4 * p.sack_words),
    ]

    def sacked_psns(self) -> list[int]:
        """PSNs the bitmap reports received, in bitmap order."""
        return [
            (self.sack_base + i) & PSN_MASK
            for i in range(32 * self.sack_words)
            if (self.bitmap >> i) & 1
        ]


class MRCProbe(Packet):
    """EV probe request/response body; the response echoes the request."""

    name = "MRCProbe"
    fields_desc = [
        XIntField("probe_id", 0),
        XShortField("ev", 0),
        XShortField("resv", 0),
        LongField("timestamp", 0),
    ]


for _op in WRITE_OPCODES:
    bind_layers(BTH, RETH, opcode=_op)
bind_layers(BTH, AETH, opcode=OP_ACKNOWLEDGE)
for _op in PROBE_OPCODES:
    bind_layers(BTH, MRCProbe, opcode=_op)


def bind() -> None:
    """Make UDP port 4791 dissect with these layers.

    scapy.contrib.roce binds the same port to its own BTH; whichever binding
    came first wins. Call this after importing that module to take the port back.
    """
    import sys

    other = sys.modules.get("scapy.contrib.roce")
    if other is not None:
        split_layers(UDP, other.BTH, dport=ROCE_UDP_PORT)
    split_layers(UDP, BTH, dport=ROCE_UDP_PORT)
    bind_layers(UDP, BTH, dport=ROCE_UDP_PORT)


bind()


# ---------------------------------------------------------------------------
# Builders: one function per frame kind, so tests and models build the same
# bytes the hardware does.


def _l3(src_mac, dst_mac, src_ip, dst_ip, ev, dscp, ecn, flow_label=0):
    """Ethernet / IPv4 or IPv6 (by the addresses' family: colons are IPv6) / UDP."""
    if not 0 <= ev <= 0xFFFF:
        raise ValueError(f"EV {ev:#x} does not fit the 16-bit UDP source port")
    v6 = [":" in str(a) for a in (src_ip, dst_ip)]
    if v6[0] != v6[1]:
        raise ValueError(f"src_ip {src_ip!r} and dst_ip {dst_ip!r} must be of one family")
    if not 0 <= flow_label < 1 << 20 or (flow_label and not v6[0]):
        raise ValueError(f"flow_label must be a 20-bit value, and only with IPv6 addresses: "
                         f"{flow_label!r}")
    if v6[0]:
        ip = IPv6(src=src_ip, dst=dst_ip, tc=(dscp << 2) | ecn, fl=flow_label, hlim=64)
    else:
        ip = IP(src=src_ip, dst=dst_ip, tos=(dscp << 2) | ecn, flags="DF", ttl=64, id=0)
    return Ether(src=src_mac, dst=dst_mac) / ip / UDP(sport=ev, dport=ROCE_UDP_PORT, chksum=0)


DEFAULT_ADDR = dict(
    src_mac="02:00:00:00:00:01",
    dst_mac="02:00:00:00:00:02",
    src_ip="10.0.0.1",
    dst_ip="10.0.0.2",
    flow_label=0,
)


def write_packet(
    *,
    opcode: int,
    dqpn: int,
    psn: int,
    va: int,
    rkey: int,
    dma_len: int,
    payload: bytes = b"",
    imm: int | None = None,
    ev: int = 0xC000,
    ackreq: int = 0,
    dscp: int = 0,
    ecn: int = ECN_ECT0,
    **addr,
):
    """An RDMA WRITE packet: RETH on every packet, ImmDt on *_WITH_IMMEDIATE."""
    if opcode not in WRITE_OPCODES:
        raise ValueError(f"opcode {opcode:#x} is not an RDMA WRITE opcode")
    if (opcode in IMM_OPCODES) != (imm is not None):
        raise ValueError("imm must be given exactly for the WITH_IMMEDIATE opcodes")
    a = {**DEFAULT_ADDR, **addr}
    pkt = _l3(a["src_mac"], a["dst_mac"], a["src_ip"], a["dst_ip"], ev, dscp, ecn,
              a["flow_label"])
    pkt = pkt / BTH(opcode=opcode, dqpn=dqpn, psn=psn & PSN_MASK, ackreq=ackreq)
    pkt = pkt / RETH(va=va, rkey=rkey, dma_len=dma_len)
    if imm is not None:
        pkt = pkt / ImmDt(imm=imm)
    if payload:
        pkt = pkt / Raw(payload)
    return pkt


def ack_packet(
    *,
    dqpn: int,
    cum_psn: int,
    sack_base: int | None = None,
    bitmap: int = 0,
    sack_bits: int = SACK_BITS_DEFAULT,
    syndrome: int = AETH_ACK,
    msn: int = 0,
    psn: int | None = None,
    ece: int = 0,
    ce_count: int = 0,
    ev: int = 0xC000,
    **addr,
):
    """An MRC ACK (or NAK): BTH ACKNOWLEDGE / AETH / MRCSack."""
    if sack_bits % 32 or not 32 <= sack_bits <= 32 * 255:
        raise ValueError(f"sack_bits {sack_bits} must be a multiple of 32 in 32..8160")
    if bitmap >> sack_bits:
        raise ValueError(f"bitmap has bits beyond sack_bits={sack_bits}")
    if sack_base is None:
        sack_base = (cum_psn + 1) & PSN_MASK
    a = {**DEFAULT_ADDR, **addr}
    return (
        _l3(a["src_mac"], a["dst_mac"], a["src_ip"], a["dst_ip"], ev, 0, ECN_ECT0,
            a["flow_label"])
        / BTH(opcode=OP_ACKNOWLEDGE, dqpn=dqpn, psn=(cum_psn if psn is None else psn) & PSN_MASK)
        / AETH(syndrome=syndrome, msn=msn)
        / MRCSack(
            cum_psn=cum_psn & PSN_MASK,
            sack_base=sack_base & PSN_MASK,
            ece=ece,
            ce_count=ce_count,
            sack_words=sack_bits // 32,
            bitmap=bitmap,
        )
    )


def probe_packet(
    *, response: bool, dqpn: int, probe_id: int, ev: int, timestamp: int, **addr
):
    """An EV probe request or response; sent on the EV it probes."""
    a = {**DEFAULT_ADDR, **addr}
    return (
        _l3(a["src_mac"], a["dst_mac"], a["src_ip"], a["dst_ip"], ev, 0, ECN_ECT0,
            a["flow_label"])
        / BTH(opcode=OP_PROBE_RESP if response else OP_PROBE_REQ, dqpn=dqpn, psn=0)
        / MRCProbe(probe_id=probe_id, ev=ev, timestamp=timestamp)
    )


def header_len(opcode: int, sack_bits: int = SACK_BITS_DEFAULT, ipv6: bool = False) -> int:
    """Bytes from the start of the frame to the payload for an opcode."""
    base = HDR_ETH + (HDR_IPV6 if ipv6 else HDR_IPV4) + HDR_UDP + HDR_BTH
    if opcode in WRITE_OPCODES:
        return base + HDR_RETH + (HDR_IMMDT if opcode in IMM_OPCODES else 0)
    if opcode == OP_ACKNOWLEDGE:
        return base + HDR_AETH + HDR_SACK_FIXED + sack_bits // 8
    if opcode in PROBE_OPCODES:
        return base + HDR_PROBE
    raise ValueError(f"opcode {opcode:#x} is not part of the MRC wire format")


def trim(frame: bytes, trim_dscp: int = TRIM_DSCP_DEFAULT) -> bytes:
    """What a trimming switch makes of a data frame: headers only, DSCP rewritten.

    The payload, pad and ICRC are cut, the IP and UDP lengths rewritten and
    the IPv4 checksum recomputed; the frame carries no ICRC (UET 1.0 style).
    IPv6: the traffic class's DSCP is rewritten, its ECN kept.
    """
    v6 = is_ipv6(frame)
    udp_off = 14 + (HDR_IPV6 if v6 else HDR_IPV4)
    opcode = frame[udp_off + HDR_UDP]
    keep = header_len(opcode, ipv6=v6)
    out = bytearray(frame[:keep])
    out[udp_off + 4 : udp_off + 6] = (keep - udp_off).to_bytes(2, "big")
    if v6:
        tc = (trim_dscp << 2) | ((out[15] >> 4) & 0x3)
        out[14] = (out[14] & 0xF0) | tc >> 4
        out[15] = (out[15] & 0x0F) | (tc & 0xF) << 4
        out[18:20] = (keep - udp_off).to_bytes(2, "big")  # payload length
        return bytes(out)
    out[15] = (trim_dscp << 2) | (out[15] & 0x3)
    out[16:18] = (keep - 14).to_bytes(2, "big")
    out[24:26] = b"\x00\x00"
    out[24:26] = ipv4_checksum(bytes(out[14:34])).to_bytes(2, "big")
    return bytes(out)


def write_payload(pkt) -> bytes:
    """The RDMA payload of a dissected WRITE packet, without the pad bytes."""
    bth = pkt[BTH]
    raw = bytes(pkt[Raw].load) if Raw in pkt else b""
    return raw[: len(raw) - bth.padcount] if bth.padcount else raw

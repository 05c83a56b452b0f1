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

The functions on raw frame bytes (``icrc()``, ``check_frame()``, ``trim()``,
``header_len()``, the offsets, ECN and DSCP) live in host_driver/wire.py,
independent of scapy, so that hardware tests can check frames without
trusting the layer that built them; this module re-exports them.

IPv6 frames' EV fields (hw/protocol.py ``EvFormat``): ``flow_label()``,
``ipv6_dst()`` and ``with_ipv6_dst()`` read and rewrite them on raw bytes.
A STEV frame is built with ``flow_label`` and ``ev`` from ``stev_fields``.
An SRv6 frame is built to the peer (its ICRC over the peer's address) with
``ev=srv6_sport(ev)``, then ``srv6_frame(frame, ev)`` puts the uSID carrier
in its destination, the ICRC untouched, as the NIC does; ``srv6_shifted()``
is what a fabric node that consumes the first uSID forwards.
"""

from __future__ import annotations

import struct

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
    XIntField,
    XLongField,
    XShortField,
)
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw, bind_layers, split_layers

from hw.protocol import (
    PSN_BITS,
    PSN_MASK,
    ROCE_UDP_PORT,
    Opcode,
    Syndrome,
    srv6_carrier,
    srv6_shift,
    svc_time_join,
    svc_time_split,
)

# the raw-bytes helpers, re-exported: the layers' users read them here
from .wire import (  # noqa: F401
    ECN_CE,
    ECN_ECT0,
    ECN_ECT1,
    ECN_NOT_ECT,
    ETHERTYPE_IPV4,
    ETHERTYPE_IPV6,
    HDR_AETH,
    HDR_BTH,
    HDR_ETH,
    HDR_ICRC,
    HDR_IMMDT,
    HDR_IPV4,
    HDR_IPV6,
    HDR_PROBE,
    HDR_RETH,
    HDR_SACK_FIXED,
    HDR_UDP,
    SACK_BITS_DEFAULT,
    TRIM_DSCP_DEFAULT,
    bth_offset,
    check_frame,
    frame_icrc_field,
    header_len,
    icrc,
    ip_dscp,
    ip_ecn,
    ip_header_len,
    ipv4_checksum,
    is_ipv6,
    trim,
    udp_offset,
    with_ecn,
)

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
    """MRC SACK extension: follows the AETH of every MRC ACK/NAK. The service
    time (``svc_time``, in units of 64 ns) is split over ``svc_hi`` and ``svc_lo``."""

    name = "MRCSack"
    fields_desc = [
        ByteField("svc_hi", 0),
        BitField("cum_psn", 0, PSN_BITS),
        ByteField("svc_lo", 0),
        BitField("sack_base", 0, PSN_BITS),
        BitEnumField("ece", 0, 1, {0: "no_ce", 1: "ce_seen"}),
        BitField("resv_c", 0, 7),
        ByteField("sack_words", SACK_BITS_DEFAULT // 32),
        ShortField("ce_count", 0),
        VarIntField("bitmap", 0, length_from=lambda p: 4 * p.sack_words),
    ]

    @property
    def svc_time(self) -> int:
        """The responder's service time in units of ``SVC_TIME_UNIT_NS`` (64 ns;
        ``SVC_TIME_MAX``: that or longer)."""
        return svc_time_join(self.svc_hi, self.svc_lo)

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
    svc_time: int = 0,
    ev: int = 0xC000,
    **addr,
):
    """An MRC ACK (or NAK): BTH ACKNOWLEDGE / AETH / MRCSack; ``svc_time``:
    the responder's service time in units of 64 ns (saturates at ``SVC_TIME_MAX``)."""
    if sack_bits % 32 or not 32 <= sack_bits <= 32 * 255:
        raise ValueError(f"sack_bits {sack_bits} must be a multiple of 32 in 32..8160")
    if bitmap >> sack_bits:
        raise ValueError(f"bitmap has bits beyond sack_bits={sack_bits}")
    if sack_base is None:
        sack_base = (cum_psn + 1) & PSN_MASK
    svc_hi, svc_lo = svc_time_split(svc_time)
    a = {**DEFAULT_ADDR, **addr}
    return (
        _l3(a["src_mac"], a["dst_mac"], a["src_ip"], a["dst_ip"], ev, 0, ECN_ECT0,
            a["flow_label"])
        / BTH(opcode=OP_ACKNOWLEDGE, dqpn=dqpn, psn=(cum_psn if psn is None else psn) & PSN_MASK)
        / AETH(syndrome=syndrome, msn=msn)
        / MRCSack(
            svc_hi=svc_hi,
            svc_lo=svc_lo,
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


def write_payload(pkt) -> bytes:
    """The RDMA payload of a dissected WRITE packet, without the pad bytes."""
    bth = pkt[BTH]
    raw = bytes(pkt[Raw].load) if Raw in pkt else b""
    return raw[: len(raw) - bth.padcount] if bth.padcount else raw


# ---------------------------------------------------------------------------
# IPv6 EV fields on raw frame bytes (Ethernet II / IPv6 at byte 14).

_IPV6_DST = slice(14 + 24, 14 + 40)


def flow_label(frame: bytes) -> int:
    """The frame's IPv6 flow label (20 bits); 0 for a frame that is not IPv6."""
    if not is_ipv6(frame):
        return 0
    return (frame[15] & 0x0F) << 16 | frame[16] << 8 | frame[17]


def _need_ipv6(frame: bytes) -> None:
    if not is_ipv6(frame) or len(frame) < _IPV6_DST.stop:
        raise ValueError("not an Ethernet / IPv6 frame")


def ipv6_dst(frame: bytes) -> int:
    """The frame's IPv6 destination address as a 128-bit integer."""
    _need_ipv6(frame)
    return int.from_bytes(frame[_IPV6_DST], "big")


def with_ipv6_dst(frame: bytes, dst: int) -> bytes:
    """The frame with IPv6 destination address ``dst`` (an integer); its ICRC
    is not recomputed."""
    _need_ipv6(frame)
    return bytes(frame[:_IPV6_DST.start]) + dst.to_bytes(16, "big") + bytes(
        frame[_IPV6_DST.stop:])


def srv6_frame(frame: bytes, ev: int) -> bytes:
    """A frame built to the peer, sent on SRv6 EV ``ev``: its destination
    the uSID carrier ``srv6_carrier(peer, ev)``, its ICRC still the one over
    the peer's address (what the NIC sends)."""
    return with_ipv6_dst(frame, srv6_carrier(ipv6_dst(frame), ev))


def srv6_shifted(frame: bytes) -> bytes:
    """The frame with its destination's first uSID consumed (``srv6_shift``):
    what a fabric node whose uSID leads the carrier forwards."""
    return with_ipv6_dst(frame, srv6_shift(ipv6_dst(frame)))

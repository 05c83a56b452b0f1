"""The MRC wire format on raw frame bytes (docs/protocol.md), without scapy.

Header sizes, ECN codes, and the functions that read or rewrite a frame
where it lies: the IP family and header length, the UDP and BTH offsets,
ECN and DSCP, the ICRC (``icrc()``: IPv4's or IPv6's masked fields), the
IPv4 checksum, ``check_frame()``, ``header_len()`` and ``trim()`` (what a
trimming switch makes of a data frame). Hardware tests check frames with
these, without trusting the scapy layers that built them; host_driver.layers
re-exports every name.
"""

from __future__ import annotations

import struct
import zlib

from hw.protocol import (  # noqa: F401 (re-exported: the layers' users read them here)
    ECN_CE,
    ECN_ECT0,
    ECN_ECT1,
    ECN_NOT_ECT,
    ETHERTYPE_IPV4,
    ETHERTYPE_IPV6,
    ROCE_UDP_PORT,
    TRIM_DSCP_DEFAULT,
    Opcode,
)

HDR_ETH, HDR_IPV4, HDR_IPV6, HDR_UDP, HDR_BTH = 14, 20, 40, 8, 12
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


def header_len(opcode: int, sack_bits: int = SACK_BITS_DEFAULT, ipv6: bool = False) -> int:
    """Bytes from the start of the frame to the payload for an opcode."""
    base = HDR_ETH + (HDR_IPV6 if ipv6 else HDR_IPV4) + HDR_UDP + HDR_BTH
    if opcode in Opcode.WRITES:
        return base + HDR_RETH + (HDR_IMMDT if opcode in Opcode.WITH_IMM else 0)
    if opcode == Opcode.ACKNOWLEDGE:
        return base + HDR_AETH + HDR_SACK_FIXED + sack_bits // 8
    if opcode in Opcode.PROBES:
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

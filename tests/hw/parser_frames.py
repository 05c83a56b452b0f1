"""Stimulus and reference model for hw/rx/parser.py's RxParser, shared by its
cocotb regression (tests/hw/test_rx_parser.py), its Amaranth-simulator tests
(tests/unit/test_rx_parser_amaranth.py) and its benchmark (sim/bench/parser.py):
valid frames of every kind, byte edits that break one check, and
``expect_frame``, a Python reference of the parser written from
docs/protocol.md (verdict, header fields, payload)."""

from __future__ import annotations

import dataclasses
import ipaddress
import itertools
import os
import random

from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether

from host_driver import layers as L
from hw.rx.parser import ParsedHeader

SACK_BITS = int(os.environ.get("RX_PARSER_SACK_BITS", "64"))
MAX_PAYLOAD = int(os.environ.get("RX_PARSER_MAX_PAYLOAD", "4096"))
# the cocotb build's: the parser built with ipv6 (tests/hw/parser_tb.py run(ipv6=True))
IPV6 = os.environ.get("RX_PARSER_IPV6", "0") == "1"
TRIM_DSCP = L.TRIM_DSCP_DEFAULT
ALL_OPCODES = L.WRITE_OPCODES + (L.OP_ACKNOWLEDGE,) + L.PROBE_OPCODES


# ---------------------------------------------------------------------------
# Reference model: what the parser must do with one frame (docs/protocol.md).


@dataclasses.dataclass
class Expected:
    verdict: str
    fields: dict | None = None  # the ParsedHeader record, nested like the layout
    payload: bytes = b""


def _ones_complement_ok(header: bytes) -> bool:
    total = sum((header[i] << 8) | header[i + 1] for i in range(0, len(header), 2))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total == 0xFFFF


def _zero(layout) -> dict:
    return {name: (_zero(f.shape) if hasattr(f.shape, "members") else 0) for name, f in layout}


def expect_frame(
    frame: bytes,
    tuser: bool = False,
    trim_dscp: int = TRIM_DSCP,
    sack_bits: int = SACK_BITS,
    max_payload: int = MAX_PAYLOAD,
    ipv6: bool = IPV6,
) -> Expected:
    """The verdict, record and payload for a frame, first failing check wins;
    ``ipv6``: of a parser built with ``ipv6`` (else an IPv6 frame is not_ipv4)."""
    n = len(frame)
    if tuser:
        return Expected("bad_frame")
    v6 = ipv6 and L.is_ipv6(frame)
    sh = L.HDR_IPV6 - L.HDR_IPV4 if v6 else 0  # the headers after IP start later
    if n < 54 + sh:
        return Expected("truncated")
    opcode = frame[42 + sh]
    dscp = ((frame[14] & 0xF) << 2 | frame[15] >> 6) if v6 else frame[15] >> 2
    trimmed = dscp == trim_dscp
    known = opcode in ALL_OPCODES
    if known:
        hlen = L.header_len(opcode, sack_bits, ipv6=v6)
        if n < hlen + (0 if trimmed else 4):
            return Expected("truncated")
    ethertype = int.from_bytes(frame[12:14], "big")
    flags_frag = int.from_bytes(frame[20:22], "big")
    if v6:
        if frame[14] >> 4 != 6:
            return Expected("not_ipv4")
    elif ethertype != 0x0800 or frame[14] >> 4 != 4 or flags_frag & 0x3FFF:
        return Expected("not_ipv4")
    if not v6 and frame[14] & 0xF != 5:
        return Expected("ipv4_options")
    if not v6 and not _ones_complement_ok(frame[14:34]):
        return Expected("ipv4_checksum")
    proto = frame[20] if v6 else frame[23]
    if proto != 17 or int.from_bytes(frame[36 + sh : 38 + sh], "big") != L.ROCE_UDP_PORT:
        return Expected("not_roce")
    if not known or frame[43 + sh] & 0xF:
        return Expected("unknown_opcode")
    # IPv4's total length covers its header, IPv6's payload length does not
    ip_len = int.from_bytes(frame[18:20] if v6 else frame[16:18], "big")
    ip_header = 0 if v6 else L.HDR_IPV4
    udp_len = int.from_bytes(frame[38 + sh : 40 + sh], "big")
    pad = (frame[43 + sh] >> 4) & 3
    udp_hlen = hlen - 34 - sh  # UDP header to the payload
    if trimmed:
        payload_len = 0
        length_ok = udp_len == udp_hlen
    else:
        payload_len = udp_len - udp_hlen - pad - 4
        length_ok = 0 <= payload_len <= max_payload
    if opcode == L.OP_ACKNOWLEDGE and frame[67 + sh] * 32 != sack_bits:
        length_ok = False
    frame_len = 14 + ip_len + (L.HDR_IPV6 if v6 else 0)
    if n != frame_len or udp_len != ip_len - ip_header or not length_ok:
        return Expected("length_mismatch")
    if not trimmed and L.icrc(frame) != L.frame_icrc_field(frame):
        return Expected("bad_icrc")

    # Accepted: the record from scapy's dissection, not from the offsets above.
    eth = Ether(frame[: 42 + sh])
    ip, udp = eth[IPv6 if v6 else L.IP], eth[L.UDP]
    tos = ip.tc if v6 else ip.tos
    bth = L.BTH(frame[42 + sh :] + (b"\0" * 4 if trimmed else b""))
    fields = _zero(ParsedHeader(sack_bits, ipv6=ipv6))
    fields.update(
        eth_src=int(eth.src.replace(":", ""), 16),
        eth_dst=int(eth.dst.replace(":", ""), 16),
        ip_src=int(ipaddress.ip_address(ip.src)),
        ip_dst=int(ipaddress.ip_address(ip.dst)),
        dscp=tos >> 2,
        ecn=tos & 3,
        ev=udp.sport,
        payload_len=payload_len,
        trimmed=int(trimmed),
        **({"v6": int(v6), "flow": ip.fl if v6 else 0} if ipv6 else {}),
    )
    fields["bth"] = {name: bth.getfieldval(name) for name in fields["bth"]}
    for layer, key in ((L.RETH, "reth"), (L.AETH, "aeth"), (L.MRCProbe, "probe")):
        if layer in bth:
            fields[key] = {name: bth[layer].getfieldval(name) for name in fields[key]}
    if L.ImmDt in bth:
        fields["imm"] = bth[L.ImmDt].imm
    if L.MRCSack in bth:
        sack = bth[L.MRCSack]
        fields["sack"] = {name: sack.getfieldval(name) for name in fields["sack"]}
        fields["sack_bitmap"] = sack.bitmap
    payload = frame[hlen : hlen + payload_len]
    if opcode in L.WRITE_OPCODES and not trimmed:
        assert L.write_payload(bth) == payload, "model and scapy disagree on the payload"
    return Expected("accepted", fields, payload)


# ---------------------------------------------------------------------------
# Stimulus: valid frames of every kind, and byte edits that break one check.


def fix_ipv4_checksum(frame: bytearray) -> bytearray:
    frame[24:26] = b"\0\0"
    frame[24:26] = L.ipv4_checksum(bytes(frame[14:34])).to_bytes(2, "big")
    return frame


def fix_icrc(frame: bytearray) -> bytearray:
    frame[-4:] = L.icrc(bytes(frame)).to_bytes(4, "little")
    return frame


def valid_frame(rng: random.Random, kind: int | str, payload_len: int = 0,
                v6: bool = False) -> bytes:
    """A well-formed frame: an opcode, or "trimmed"; over IPv6 with ``v6``
    (with a random flow label)."""
    address = ipaddress.IPv6Address if v6 else ipaddress.IPv4Address
    addr = dict(
        src_mac=":".join(f"{rng.randrange(256):02x}" for _ in range(6)),
        dst_mac=":".join(f"{rng.randrange(256):02x}" for _ in range(6)),
        src_ip=str(address(rng.getrandbits(128 if v6 else 32))),
        dst_ip=str(address(rng.getrandbits(128 if v6 else 32))),
        **({"flow_label": rng.getrandbits(20)} if v6 else {}),
    )
    ev = rng.getrandbits(16)
    if kind == "trimmed":
        op = rng.choice(L.WRITE_OPCODES)
        return L.trim(valid_frame(rng, op, rng.randrange(1, 64), v6), TRIM_DSCP)
    if kind in L.WRITE_OPCODES:
        return bytes(
            L.write_packet(
                opcode=kind,
                dqpn=rng.getrandbits(24),
                psn=rng.getrandbits(24),
                va=rng.getrandbits(64),
                rkey=rng.getrandbits(32),
                dma_len=rng.getrandbits(31),
                imm=rng.getrandbits(32) if kind in L.IMM_OPCODES else None,
                payload=rng.randbytes(payload_len),
                ackreq=rng.getrandbits(1),
                ev=ev,
                dscp=rng.choice([0, 0, 26, 46]),
                ecn=rng.randrange(4),
                **addr,
            )
        )
    if kind == L.OP_ACKNOWLEDGE:
        return bytes(
            L.ack_packet(
                dqpn=rng.getrandbits(24),
                cum_psn=rng.getrandbits(24),
                bitmap=rng.getrandbits(SACK_BITS),
                sack_bits=SACK_BITS,
                syndrome=rng.choice(list(L.SYNDROMES)),
                msn=rng.getrandbits(24),
                ece=rng.getrandbits(1),
                ce_count=rng.getrandbits(16),
                ev=ev,
                **addr,
            )
        )
    if kind in L.PROBE_OPCODES:
        return bytes(
            L.probe_packet(
                response=kind == L.OP_PROBE_RESP,
                dqpn=rng.getrandbits(24),
                probe_id=rng.getrandbits(32),
                ev=ev,
                timestamp=rng.getrandbits(64),
                **addr,
            )
        )
    raise ValueError(kind)


def _set(frame, offset, value: bytes, ip_fix=False, icrc_fix=False):
    f = bytearray(frame)
    f[offset : offset + len(value)] = value
    if ip_fix:
        fix_ipv4_checksum(f)
    if icrc_fix:
        fix_icrc(f)
    return bytes(f)


def _lengths(frame, total_delta=0, udp_delta=0, icrc_fix=True):
    f = bytearray(frame)
    total = int.from_bytes(f[16:18], "big") + total_delta
    udp = int.from_bytes(f[38:40], "big") + udp_delta
    f[16:18] = total.to_bytes(2, "big")
    f[38:40] = udp.to_bytes(2, "big")
    fix_ipv4_checksum(f)
    if icrc_fix:
        fix_icrc(f)
    return bytes(f)


def _flip(frame, offset):
    f = bytearray(frame)
    f[offset] ^= 0x01
    return bytes(f)


def malformed_cases(rng: random.Random) -> list[tuple[str, bytes, bool, str]]:
    """(name, frame, tuser, the counter it must land in): one check broken each."""
    w = valid_frame(rng, L.OP_WRITE_ONLY, 40)
    w0 = valid_frame(rng, L.OP_WRITE_ONLY, 0)
    imm = valid_frame(rng, L.OP_WRITE_LAST_IMM, 13)
    ack = valid_frame(rng, L.OP_ACKNOWLEDGE)
    cases = [
        ("tuser", w, True, "bad_frame"),
        ("tuser on a garbage frame", rng.randbytes(7), True, "bad_frame"),
        ("ethertype IPv6", _set(w, 12, b"\x86\xdd"), False, "not_ipv4"),
        ("ethertype ARP", _set(w, 12, b"\x08\x06"), False, "not_ipv4"),
        ("IP version 6", _set(w, 14, b"\x65", ip_fix=True), False, "not_ipv4"),
        ("more fragments", _set(w, 20, b"\x20\x00", ip_fix=True), False, "not_ipv4"),
        ("fragment offset", _set(w, 20, b"\x40\x08", ip_fix=True), False, "not_ipv4"),
        ("IHL 6", _set(w, 14, b"\x46", ip_fix=True), False, "ipv4_options"),
        ("IHL 4", _set(w, 14, b"\x44"), False, "ipv4_options"),
        ("bad IP checksum", _flip(w, 25), False, "ipv4_checksum"),
        ("TTL changed, checksum not", _set(w, 22, b"\x3f"), False, "ipv4_checksum"),
        ("UDP dport 4790", _set(w, 36, b"\x12\xb6"), False, "not_roce"),
        ("protocol TCP", _set(w, 23, b"\x06", ip_fix=True), False, "not_roce"),
        ("opcode 0x04 (SEND_ONLY)", _set(w, 42, b"\x04", icrc_fix=True), False, "unknown_opcode"),
        ("opcode 0xFF", _set(w, 42, b"\xff", icrc_fix=True), False, "unknown_opcode"),
        ("TVer 1", _set(w, 43, bytes([w[43] | 1]), icrc_fix=True), False, "unknown_opcode"),
        ("total length +4", _lengths(w, total_delta=4), False, "length_mismatch"),
        ("total length -4", _lengths(w, total_delta=-4), False, "length_mismatch"),
        ("UDP length -4", _lengths(w, udp_delta=-4), False, "length_mismatch"),
        ("both lengths +4", _lengths(w, 4, 4), False, "length_mismatch"),
        ("frame shorter than total length", w[:-8], False, "length_mismatch"),
        ("frame longer than total length", w + b"\0" * 4, False, "length_mismatch"),
        (
            "UDP length short of the pad",
            _set(w0, 43, bytes([w0[43] | 0x30]), icrc_fix=True),
            False,
            "length_mismatch",
        ),
        ("ACK sack_words 3", _set(ack, 67, b"\x03", icrc_fix=True), False, "length_mismatch"),
        ("ACK sack_words 1", _set(ack, 67, b"\x01", icrc_fix=True), False, "length_mismatch"),
        (
            "payload over max_payload",
            valid_frame(rng, L.OP_WRITE_ONLY, MAX_PAYLOAD + 4),
            False,
            "length_mismatch",
        ),
        (
            "trimmed with payload",
            _set(w, 15, bytes([TRIM_DSCP << 2 | 2]), ip_fix=True),
            False,
            "length_mismatch",
        ),
        (
            "trimmed with ICRC",
            _set(w0, 15, bytes([TRIM_DSCP << 2 | 2]), ip_fix=True),
            False,
            "length_mismatch",
        ),
        ("bad ICRC, payload bit", _flip(w, 80), False, "bad_icrc"),
        ("bad ICRC, ICRC bit", _flip(w, len(w) - 1), False, "bad_icrc"),
        ("bad ICRC, DQPN bit", _flip(imm, 49), False, "bad_icrc"),
        ("bad ICRC, pad byte", _flip(imm, len(imm) - 5), False, "bad_icrc"),
        ("bad ICRC, ACK bitmap", _flip(ack, 75), False, "bad_icrc"),
    ]
    # Masked bytes do not count: a change there keeps the ICRC good.
    cases.append(
        ("ECN bits changed (masked)", _set(w, 15, b"\x03", ip_fix=True), False, "accepted")
    )
    cases.append(("FECN set (masked)", _set(w, 46, b"\x80"), False, "accepted"))
    for cut in (1, 13, 14, 20, 33, 41, 53):
        cases.append((f"cut at {cut}", w[:cut], False, "truncated"))
    for cut in (54, 60, 69, 73):
        cases.append((f"write cut at {cut}", w0[:cut], False, "truncated"))
    cases.append(("imm cut at 77", imm[:77], False, "truncated"))
    cases.append(("ACK cut inside the bitmap", ack[:75], False, "truncated"))
    cases.append(("trimmed cut inside the RETH", L.trim(w)[:66], False, "truncated"))
    return cases


def _lengths6(frame, plen_delta=0, udp_delta=0):
    """An IPv6 frame with its payload length and UDP length moved, ICRC fixed."""
    f = bytearray(frame)
    f[18:20] = (int.from_bytes(f[18:20], "big") + plen_delta).to_bytes(2, "big")
    f[58:60] = (int.from_bytes(f[58:60], "big") + udp_delta).to_bytes(2, "big")
    return bytes(fix_icrc(f))


def _dscp6(frame, dscp):
    """An IPv6 frame with its traffic class's DSCP set (the ICRC masks it)."""
    f = bytearray(frame)
    f[14] = f[14] & 0xF0 | dscp >> 2
    f[15] = f[15] & 0x3F | (dscp & 3) << 6
    return bytes(f)


def malformed_cases_v6(rng: random.Random) -> list[tuple[str, bytes, bool, str]]:
    """As ``malformed_cases``, over IPv6, for a parser built with ``ipv6``."""
    w = valid_frame(rng, L.OP_WRITE_ONLY, 40, v6=True)
    w0 = valid_frame(rng, L.OP_WRITE_ONLY, 0, v6=True)
    ack = valid_frame(rng, L.OP_ACKNOWLEDGE, v6=True)
    v4 = valid_frame(rng, L.OP_WRITE_ONLY, 40)
    cases = [
        ("v6: tuser", w, True, "bad_frame"),
        ("v6: version 4", _set(w, 14, bytes([0x40 | w[14] & 0xF]), icrc_fix=True), False,
         "not_ipv4"),
        ("v6 header, IPv4 EtherType", _set(w, 12, b"\x08\x00"), False, "not_ipv4"),
        ("IPv4 header, IPv6 EtherType", _set(v4, 12, b"\x86\xdd"), False, "not_ipv4"),
        ("v6: next header TCP", _set(w, 20, b"\x06", icrc_fix=True), False, "not_roce"),
        ("v6: hop-by-hop options", _set(w, 20, b"\x00", icrc_fix=True), False, "not_roce"),
        ("v6: UDP dport 4790", _set(w, 56, b"\x12\xb6", icrc_fix=True), False, "not_roce"),
        ("v6: opcode 0x04", _set(w, 62, b"\x04", icrc_fix=True), False, "unknown_opcode"),
        ("v6: TVer 1", _set(w, 63, bytes([w[63] | 1]), icrc_fix=True), False, "unknown_opcode"),
        ("v6: payload length +4", _lengths6(w, 4), False, "length_mismatch"),
        ("v6: payload length -4", _lengths6(w, -4), False, "length_mismatch"),
        ("v6: UDP length -4", _lengths6(w, 0, -4), False, "length_mismatch"),
        ("v6: both lengths +4", _lengths6(w, 4, 4), False, "length_mismatch"),
        ("v6: frame longer", w + b"\0" * 4, False, "length_mismatch"),
        ("v6: ACK sack_words 3", _set(ack, 87, b"\x03", icrc_fix=True), False,
         "length_mismatch"),
        ("v6: trimmed with payload", _dscp6(w, TRIM_DSCP), False, "length_mismatch"),
        ("v6: trimmed with ICRC", _dscp6(w0, TRIM_DSCP), False, "length_mismatch"),
        ("v6: bad ICRC, payload bit", _flip(w, 100), False, "bad_icrc"),
        ("v6: bad ICRC, ICRC bit", _flip(w, len(w) - 1), False, "bad_icrc"),
        ("v6: bad ICRC, destination bit", _flip(w, 53), False, "bad_icrc"),
        ("v6: bad ICRC, ACK bitmap", _flip(ack, 95), False, "bad_icrc"),
        # masked: the flow label, the ECN bits, the hop limit, BTH byte 4
        ("v6: flow label changed (masked)", _set(w, 16, b"\x5a\xa5"), False, "accepted"),
        ("v6: ECN changed (masked)", _set(w, 15, bytes([w[15] ^ 0x30])), False, "accepted"),
        ("v6: hop limit changed (masked)", _set(w, 21, b"\x01"), False, "accepted"),
        ("v6: FECN set (masked)", _set(w, 66, b"\x80"), False, "accepted"),
    ]
    for cut in (13, 14, 54, 61, 73):
        cases.append((f"v6: cut at {cut}", w[:cut], False, "truncated"))
    for cut in (74, 89, 93):
        cases.append((f"v6: write cut at {cut}", w0[:cut], False, "truncated"))
    cases.append(("v6: ACK cut inside the bitmap", ack[:95], False, "truncated"))
    return cases


def payload_lengths(lanes: int) -> list[int]:
    """0..2 beats and a bit (every lane offset of the payload end), around a few
    beat multiples, and the MTU."""
    near = {k * lanes + d for k in (4, 16, 64) for d in (-1, 0, 1)}
    return sorted(set(range(0, 2 * lanes + 5)) | near | {MAX_PAYLOAD - 1, MAX_PAYLOAD})


def random_frame(rng: random.Random, ipv6: bool = IPV6) -> tuple[bytes, bool]:
    """A frame for the random mix: mostly valid, or broken in a random way;
    with ``ipv6``, half of them over IPv6."""
    kind = rng.choice(list(ALL_OPCODES) + ["trimmed"] * 2 + list(L.WRITE_OPCODES))
    pl = rng.randrange(0, 300) if rng.random() < 0.8 else rng.randrange(0, MAX_PAYLOAD + 1)
    v6 = ipv6 and rng.random() < 0.5
    frame = valid_frame(rng, kind, pl, v6)
    tuser = False
    r = rng.random()
    if r < 0.55:
        pass
    elif r < 0.65:
        frame = frame[: rng.randrange(1, len(frame))]
    elif r < 0.75:
        f = bytearray(frame)
        for _ in range(rng.randrange(1, 4)):
            f[rng.randrange(min(len(f), 90))] = rng.randrange(256)
        frame = bytes(f)
    elif r < 0.80:
        f = bytearray(frame)
        f[rng.randrange(len(f))] ^= 1 << rng.randrange(8)
        frame = bytes(f)
    elif r < 0.85:
        frame = _lengths(frame, rng.choice([-8, -4, 4, 8]), rng.choice([0, 0, -4, 4]))
    elif r < 0.88:
        tuser = True
    elif r < 0.93:
        frame = rng.randbytes(rng.randrange(1, 200))
    elif v6:  # a field the parser checks, the ICRC fixed while the frame is IPv6
        f = bytearray(frame)
        f[rng.choice([12, 14, 18, 20, 56, 58, 62, 63, 87])] = rng.randrange(256)
        frame = bytes(fix_icrc(f) if L.is_ipv6(bytes(f)) else f)
    else:
        f = bytearray(frame)
        f[rng.choice([12, 14, 23, 36, 42, 43, 67])] = rng.randrange(256)
        fix_ipv4_checksum(f)
        if f[14] & 0xF == 5:  # the ICRC's IPv4 header is IHL words long
            fix_icrc(f)
        frame = bytes(f)
    return frame, tuser


def cycle_pause():
    return itertools.cycle([1, 1, 1, 0])


def random_pause(rng: random.Random, p=0.3):
    while True:
        yield rng.random() < p

"""The Wireshark dissector (host_driver/wireshark/mrc.lua; host_driver/dissector.py).

tshark runs the plugin on the model demo's pcap (`make sim`'s model part: data,
ACKs, probes, retransmissions over a failing path) and on frames of every kind
that host_driver.layers builds (each WRITE opcode with odd payload lengths,
ImmDt, a trimmed packet, ACKs with SACK bitmaps of 32 to 128 bits, ECN echo
and CE counts, NAK TRIMMED and the other NAKs, probe requests and responses).
Every frame must decode with no expert error, and every field the plugin
shows must equal scapy's reading of the same bytes. A truncated frame and an
unknown opcode must get the plugin's expert errors, so that "no error" is not
vacuous. Needs tshark (Debian: `apt-get install tshark`); skipped without it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from scapy.layers.inet import UDP
from scapy.layers.l2 import Ether
from scapy.utils import PcapReader, wrpcap

from host_driver import layers as L
from host_driver.dissector import LUA_PATH, constants, generated_block
from hw.protocol import Opcode, Syndrome

TSHARK = shutil.which("tshark")
PI_ERROR = 0x00800000  # Wireshark's expert severity "error"
needs_tshark = pytest.mark.skipif(TSHARK is None, reason="tshark is not installed "
                                  "(Debian: apt-get install tshark)")

FIELDS = ("frame.protocols", "_ws.expert.severity", "_ws.expert.message", "mrc.ev",
          "mrc.bth.opcode", "mrc.bth.se", "mrc.bth.padcount", "mrc.bth.pkey", "mrc.bth.dqpn",
          "mrc.bth.ackreq", "mrc.bth.psn", "mrc.reth.va", "mrc.reth.rkey",
          "mrc.reth.dma_len", "mrc.immdt", "mrc.aeth.syndrome", "mrc.aeth.msn",
          "mrc.sack.svc_time", "mrc.sack.cum_psn", "mrc.sack.base", "mrc.sack.ece",
          "mrc.sack.words", "mrc.sack.ce_count", "mrc.sack.bitmap", "mrc.sack.received",
          "mrc.probe.id", "mrc.probe.round", "mrc.probe.ev_index", "mrc.probe.ev",
          "mrc.probe.timestamp", "mrc.trimmed", "mrc.payload", "mrc.pad", "mrc.icrc")


def test_plugin_constants_come_from_the_protocol_definition():
    assert generated_block(LUA_PATH.read_text()) == constants(), (
        "host_driver/wireshark/mrc.lua is stale: run `python -m host_driver.dissector`")
    for name in (*Opcode.NAMES.values(), *Syndrome.NAMES.values()):
        assert f'"{name}"' in constants()


IPV6 = dict(src_ip="fd00::1", dst_ip="fd00::2", flow_label=0x5A5A5)


def built_frames() -> list[bytes]:
    """One frame of every kind and field shape the NIC sends, over IPv4 and IPv6."""
    return _built_frames({}) + _built_frames(IPV6)


def _built_frames(addr) -> list[bytes]:
    out = []
    for k, op in enumerate(Opcode.WRITES):
        imm = 0x1000 + k if op in Opcode.WITH_IMM else None
        for n in (0, 1, 3, 64 + k):
            pkt = L.write_packet(opcode=op, dqpn=0x123 + k, psn=(L.PSN_MASK - 2 + n) & L.PSN_MASK,
                                 va=0x1_0000_0003 + n, rkey=0xABC0 + k, dma_len=4096 + n,
                                 payload=bytes(range(n)), imm=imm, ev=0xC000 + n, ackreq=n & 1,
                                 **addr)
            out.append(bytes(pkt))
    out.append(L.trim(bytes(L.write_packet(opcode=Opcode.WRITE_MIDDLE, dqpn=5, psn=77, va=0x40,
                                           rkey=1, dma_len=9000, payload=bytes(1024),
                                           **addr))))
    out.append(L.trim(bytes(L.write_packet(opcode=Opcode.WRITE_LAST_IMM, dqpn=5, psn=78, va=0x40,
                                           rkey=1, dma_len=9000, payload=bytes(100),
                                           imm=0xFEEDF00D, **addr))))
    for bits in (32, 64, 128):
        for syndrome in Syndrome.NAMES:
            out.append(bytes(L.ack_packet(
                dqpn=0x100, cum_psn=L.PSN_MASK - 1, bitmap=(0b1011 << (bits - 8)) | 0b101,
                sack_bits=bits, syndrome=syndrome, msn=bits, psn=None if syndrome ==
                Syndrome.ACK else 12345, ece=bits == 64, ce_count=bits * 3, ev=0xC100 + bits,
                svc_time={32: 0, 64: 0x1234, 128: 0xFFFF}[bits], **addr)))
    for response in (False, True):
        out.append(bytes(L.probe_packet(response=response, dqpn=0x101, probe_id=7 << 8 | 3,
                                        ev=0xC003, timestamp=123_456_789_012, **addr)))
    return out


def tshark_fields(pcap) -> list[dict[str, str]]:
    cmd = [TSHARK, "-X", f"lua_script:{LUA_PATH}", "-r", str(pcap), "-T", "fields",
           "-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=,"]
    for name in FIELDS:
        cmd += ["-e", name]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [dict(zip(FIELDS, line.split("\t"), strict=True)) for line in out.splitlines()]


def _int(s: str) -> int:
    return int(s, 0)


def expected(frame: bytes) -> dict[str, int | str | None]:
    """The plugin's fields as scapy reads the frame."""
    bth_off = L.bth_offset(frame)
    op = frame[bth_off]
    words = frame[bth_off + 25] if op == Opcode.ACKNOWLEDGE else 2  # the SACK's sack_words
    offset = L.header_len(op, 32 * words, ipv6=L.is_ipv6(frame))
    trimmed = len(frame) == offset  # headers only: scapy's BTH takes its last 4 bytes as ICRC
    p = L.BTH(frame[bth_off:] + bytes(4)) if trimmed else Ether(frame)
    bth = p[L.BTH]
    want = {"mrc.ev": Ether(frame)[UDP].sport, "mrc.bth.opcode": op, "mrc.bth.se": bth.se,
            "mrc.bth.padcount": bth.padcount, "mrc.bth.pkey": bth.pkey,
            "mrc.bth.dqpn": bth.dqpn, "mrc.bth.ackreq": bth.ackreq, "mrc.bth.psn": bth.psn}
    if op in Opcode.WRITES:
        reth = p[L.RETH]
        want.update({"mrc.reth.va": reth.va, "mrc.reth.rkey": reth.rkey,
                     "mrc.reth.dma_len": reth.dma_len})
        if op in Opcode.WITH_IMM:
            want["mrc.immdt"] = int.from_bytes(frame[offset - 4:offset], "big")
    elif op == Opcode.ACKNOWLEDGE:
        s = p[L.MRCSack]
        want.update({"mrc.aeth.syndrome": p[L.AETH].syndrome, "mrc.aeth.msn": p[L.AETH].msn,
                     "mrc.sack.svc_time": s.svc_time,
                     "mrc.sack.cum_psn": s.cum_psn, "mrc.sack.base": s.sack_base,
                     "mrc.sack.ece": s.ece, "mrc.sack.words": s.sack_words,
                     "mrc.sack.ce_count": s.ce_count,
                     "mrc.sack.bitmap": s.bitmap.to_bytes(4 * s.sack_words, "big").hex(),
                     "mrc.sack.received": ", ".join(map(str, s.sacked_psns()))
                     or "none"})
    else:
        pr = p[L.MRCProbe]
        want.update({"mrc.probe.id": pr.probe_id, "mrc.probe.round": pr.probe_id >> 8,
                     "mrc.probe.ev_index": pr.probe_id & 0xFF, "mrc.probe.ev": pr.ev,
                     "mrc.probe.timestamp": pr.timestamp})
    if trimmed:
        want["mrc.trimmed"] = 1
        return want
    body = frame[offset:-4]
    pad = bth.padcount
    want["mrc.payload"] = body[:len(body) - pad].hex() or None
    want["mrc.pad"] = body[len(body) - pad:].hex() or None
    want["mrc.icrc"] = L.frame_icrc_field(frame)
    return want


def got(row: dict[str, str]) -> dict[str, int | str | None]:
    out = {}
    for name, text in row.items():
        if not name.startswith("mrc.") or text == "":
            continue
        hexes = ("mrc.sack.bitmap", "mrc.payload", "mrc.pad")
        out[name] = text if name in hexes or name == "mrc.sack.received" else _int(text)
    return out


@needs_tshark
def test_every_frame_decodes_and_matches_scapy(tmp_path):
    demo = tmp_path / "demo"
    subprocess.run([sys.executable, "-m", "sim", "--model-only", "--out", str(demo)],
                   check=True, capture_output=True)
    with PcapReader(str(demo / "traffic.pcap")) as reader:
        frames = [bytes(p) for p in reader]
    kinds = {f[42] for f in frames}  # the demo's frames are IPv4
    assert {Opcode.WRITE_FIRST, Opcode.WRITE_MIDDLE, Opcode.ACKNOWLEDGE,
            Opcode.PROBE_REQ} <= kinds, kinds
    frames += built_frames()
    pcap = tmp_path / "all.pcap"
    wrpcap(str(pcap), [Ether(f) for f in frames])
    rows = tshark_fields(pcap)
    assert len(rows) == len(frames)
    for i, (frame, row) in enumerate(zip(frames, rows, strict=True)):
        assert row["frame.protocols"].endswith(":udp:mrc"), (i, row["frame.protocols"])
        # over IPv6, Wireshark's UDP dissector flags RoCEv2's zero UDP checksum (see
        # tests/unit/test_layers_ipv6.py); nothing else may be flagged
        udp_zero = "Illegal checksum value (0)" if L.is_ipv6(frame) else ""
        assert row["_ws.expert.message"] == udp_zero, (i, row)
        want = {k: v for k, v in expected(frame).items() if v is not None}
        assert got(row) == want, f"frame {i + 1}: {frame.hex()}"


@needs_tshark
def test_malformed_and_unknown_frames_get_expert_errors(tmp_path):
    ack = bytes(L.ack_packet(dqpn=1, cum_psn=5, sack_bits=64))
    probe = bytearray(bytes(L.probe_packet(response=False, dqpn=1, probe_id=1, ev=0xC000,
                                           timestamp=1)))
    probe[42] = 0x64  # an opcode MRC does not send
    shorts = []
    for n in (60, 74):  # within the SACK's fixed part; half of its 64-bit bitmap, no ICRC
        short = bytearray(ack[:n])  # the IPv4 and UDP lengths rewritten to fit
        short[16:18] = (n - 14).to_bytes(2, "big")
        short[38:40] = (n - 34).to_bytes(2, "big")
        shorts.append(bytes(short))
    pcap = tmp_path / "bad.pcap"
    wrpcap(str(pcap), [Ether(f) for f in (*shorts, bytes(probe))])
    rows = tshark_fields(pcap)
    assert [r["frame.protocols"] for r in rows] == ["eth:ethertype:ip:udp:mrc"] * 3
    assert [r["_ws.expert.severity"] for r in rows] == [str(PI_ERROR)] * 3
    assert [r["_ws.expert.message"] for r in rows] == [
        "too short for its AETH and SACK", "too short for its SACK bitmap", "opcode 0x64"]

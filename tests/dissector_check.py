"""The Wireshark dissector's check, shared by its own test
(tests/unit/test_wireshark_dissector.py) and the system tests that run it on
RTL traffic (tests/system/test_ipv6.py): tshark with host_driver/wireshark/
mrc.lua over a pcap, each frame's fields against scapy's reading of the same
bytes (``expected``, ``got``), and no expert error but the zero UDP checksum
that Wireshark flags over IPv6 (``check_frames``)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from scapy.layers.inet import UDP
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap

from host_driver import layers as L
from host_driver.dissector import LUA_PATH
from hw.protocol import Opcode

__all__ = ["FIELDS", "PI_ERROR", "TSHARK", "check_frames", "expected", "got", "needs_tshark",
           "tshark_fields"]

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


def check_frames(frames: list[bytes], pcap) -> None:
    """tshark with the plugin decodes every frame (written to ``pcap``) as
    MRC, with no expert error but IPv6's zero UDP checksum, and every field it
    shows equals scapy's reading."""
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

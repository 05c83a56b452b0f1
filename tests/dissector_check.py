"""The Wireshark dissector's check, shared by its own test
(tests/unit/test_wireshark_dissector.py) and the system tests that run it on
RTL traffic (tests/system/test_ipv6.py): tshark with host_driver/wireshark/
mrc.lua over a pcap, each frame's fields against scapy's reading of the same
bytes (``expected``, ``got``), and no expert error but the zero UDP checksum
that Wireshark flags over IPv6 (``check_frames``).

The EV's fields follow the plugin's rule (docs/protocol.md, "EV formats"):
``ev_fields`` reads them by it, given the SRv6 locators that tshark gets as
the plugin's preference ``mrc.srv6_locators`` (none unless given)."""

from __future__ import annotations

import ipaddress
import shutil
import subprocess

import pytest
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap

from host_driver import layers as L
from host_driver.dissector import LUA_PATH
from hw.protocol import (
    EV_FORMAT_BITS,
    SRV6_LOCATOR_BITS,
    SRV6_USID_BITS,
    SRV6_USIDS,
    EvFormat,
    Opcode,
    srv6_usids,
)

__all__ = ["FIELDS", "PI_ERROR", "TSHARK", "check_frames", "ev_fields", "expected", "got",
           "locator", "needs_tshark", "tshark_fields"]

TSHARK = shutil.which("tshark")
PI_ERROR = 0x00800000  # Wireshark's expert severity "error"
needs_tshark = pytest.mark.skipif(TSHARK is None, reason="tshark is not installed "
                                  "(Debian: apt-get install tshark)")

FIELDS = ("frame.protocols", "_ws.expert.severity", "_ws.expert.message", "mrc.ev.format",
          "mrc.ev", "mrc.srv6.locator", "mrc.srv6.usid",
          "mrc.bth.opcode", "mrc.bth.se", "mrc.bth.padcount", "mrc.bth.pkey", "mrc.bth.dqpn",
          "mrc.bth.ackreq", "mrc.bth.psn", "mrc.reth.va", "mrc.reth.rkey",
          "mrc.reth.dma_len", "mrc.immdt", "mrc.aeth.syndrome", "mrc.aeth.msn",
          "mrc.sack.svc_time", "mrc.sack.cum_psn", "mrc.sack.base", "mrc.sack.ece",
          "mrc.sack.words", "mrc.sack.ce_count", "mrc.sack.bitmap", "mrc.sack.received",
          "mrc.probe.id", "mrc.probe.round", "mrc.probe.ev_index", "mrc.probe.ev",
          "mrc.probe.timestamp", "mrc.trimmed", "mrc.payload", "mrc.pad", "mrc.icrc")


Locator = int | str  # a 32-bit locator, or the preference's text for one
_ADDR_BITS = 128  # an IPv6 address


def locator(entry: Locator) -> int:
    """The locator an entry of the plugin's ``mrc.srv6_locators`` names: an
    int is the locator; a str is an IPv6 prefix of ``SRV6_LOCATOR_BITS``
    ("fd00:5256::/32") or the locator in hex ("0xfd005256")."""
    if isinstance(entry, int):
        return entry
    if ":" not in entry:
        return int(entry, 16)
    net = ipaddress.IPv6Network(entry, strict=False)
    if "/" in entry and net.prefixlen != SRV6_LOCATOR_BITS:
        raise ValueError(f"an SRv6 locator is a /{SRV6_LOCATOR_BITS} prefix, not {entry!r}")
    return int(net.network_address) >> (_ADDR_BITS - SRV6_LOCATOR_BITS)


def _pref(srv6_locators) -> str:
    return ",".join(e if isinstance(e, str) else f"0x{e:08x}" for e in srv6_locators)


def tshark_fields(pcap, srv6_locators: tuple[Locator, ...] = ()) -> list[dict[str, str]]:
    """tshark's ``FIELDS`` of each frame, with the plugin's preference
    ``mrc.srv6_locators`` set to ``srv6_locators`` if any."""
    cmd = [TSHARK, "-X", f"lua_script:{LUA_PATH}", "-r", str(pcap), "-T", "fields",
           "-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=,"]
    if srv6_locators:
        cmd += ["-o", f"mrc.srv6_locators:{_pref(srv6_locators)}"]
    for name in FIELDS:
        cmd += ["-e", name]
    run = subprocess.run(cmd, check=True, capture_output=True, text=True)
    assert "mrc.srv6_locators" not in run.stderr, run.stderr  # the plugin took every locator
    return [dict(zip(FIELDS, line.split("\t"), strict=True)) for line in run.stdout.splitlines()]


def _int(s: str) -> int:
    return int(s, 0)


def _ev(fmt: EvFormat, ev: int) -> dict[str, int]:
    return {"mrc.ev.format": int(fmt), "mrc.ev": ev}


def _srv6(address: int) -> dict[str, int | tuple[int, ...] | None]:
    """The SRV6 fields of a uSID carrier: its locator, the uSIDs in it up to
    the first zero, and the EV they make (the first uSID in its top bits)."""
    slots_bits = SRV6_USIDS * SRV6_USID_BITS
    after_locator = _ADDR_BITS - SRV6_LOCATOR_BITS
    usids = srv6_usids(address >> (after_locator - slots_bits) & ((1 << slots_bits) - 1))
    ev = sum(u << (slots_bits - SRV6_USID_BITS * (i + 1)) for i, u in enumerate(usids))
    return {**_ev(EvFormat.SRV6, ev), "mrc.srv6.locator": address >> after_locator,
            "mrc.srv6.usid": tuple(usids) or None}


def ev_fields(frame: bytes, srv6_locators: tuple[Locator, ...] = ()) -> dict:
    """The plugin's EV fields of ``frame``, by its rule: IPv4, UDP format (the
    source port); IPv6 with a nonzero flow label, STEV (the flow label's low
    bits above the source port); IPv6 to an address in one of
    ``srv6_locators``, SRV6; any other IPv6, UDP format."""
    p = Ether(frame)
    sport = p[UDP].sport
    if IPv6 not in p:
        return _ev(EvFormat.UDP, sport)
    if p[IPv6].fl:
        port_bits = EV_FORMAT_BITS[EvFormat.UDP]
        flow_bits = EV_FORMAT_BITS[EvFormat.STEV] - port_bits
        return _ev(EvFormat.STEV, (p[IPv6].fl & ((1 << flow_bits) - 1)) << port_bits | sport)
    dst = int(ipaddress.IPv6Address(p[IPv6].dst))
    if dst >> (_ADDR_BITS - SRV6_LOCATOR_BITS) in {locator(e) for e in srv6_locators}:
        return _srv6(dst)
    return _ev(EvFormat.UDP, sport)


def expected(frame: bytes, srv6_locators: tuple[Locator, ...] = ()) -> dict:
    """The plugin's fields as scapy reads the frame (with ``srv6_locators`` as
    the plugin's SRv6 locators)."""
    bth_off = L.bth_offset(frame)
    op = frame[bth_off]
    words = frame[bth_off + 25] if op == Opcode.ACKNOWLEDGE else 2  # the SACK's sack_words
    offset = L.header_len(op, 32 * words, ipv6=L.is_ipv6(frame))
    trimmed = len(frame) == offset  # headers only: scapy's BTH takes its last 4 bytes as ICRC
    p = L.BTH(frame[bth_off:] + bytes(4)) if trimmed else Ether(frame)
    bth = p[L.BTH]
    want = {**ev_fields(frame, srv6_locators), "mrc.bth.opcode": op, "mrc.bth.se": bth.se,
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


def got(row: dict[str, str]) -> dict:
    """The plugin's fields of a ``tshark_fields`` row, as ``expected`` gives them."""
    out = {}
    for name, text in row.items():
        if not name.startswith("mrc.") or text == "":
            continue
        if name in ("mrc.sack.bitmap", "mrc.payload", "mrc.pad", "mrc.sack.received"):
            out[name] = text
        elif name == "mrc.srv6.usid":  # repeated, first hop first
            out[name] = tuple(map(_int, text.split(",")))
        else:
            out[name] = _int(text)
    return out


def check_frames(frames: list[bytes], pcap, srv6_locators: tuple[Locator, ...] = ()) -> None:
    """tshark with the plugin decodes every frame (written to ``pcap``) as
    MRC, with no expert error but IPv6's zero UDP checksum, and every field it
    shows equals scapy's reading; ``srv6_locators``: the plugin's SRv6
    locators (``locator``'s forms), none by default."""
    wrpcap(str(pcap), [Ether(f) for f in frames])
    rows = tshark_fields(pcap, srv6_locators)
    assert len(rows) == len(frames)
    for i, (frame, row) in enumerate(zip(frames, rows, strict=True)):
        assert row["frame.protocols"].endswith(":udp:mrc"), (i, row["frame.protocols"])
        # over IPv6, Wireshark's UDP dissector flags RoCEv2's zero UDP checksum (see
        # tests/unit/test_layers_ipv6.py); nothing else may be flagged
        udp_zero = "Illegal checksum value (0)" if L.is_ipv6(frame) else ""
        assert row["_ws.expert.message"] == udp_zero, (i, row)
        want = {k: v for k, v in expected(frame, srv6_locators).items() if v is not None}
        assert got(row) == want, f"frame {i + 1}: {frame.hex()}"

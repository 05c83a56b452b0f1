"""The Wireshark dissector (host_driver/wireshark/mrc.lua; host_driver/dissector.py).

tshark runs the plugin on the model demo's pcap (`make sim`'s model part: data,
ACKs, probes, retransmissions over a failing path) and on frames of every kind
that host_driver.layers builds (each WRITE opcode with odd payload lengths,
ImmDt, a trimmed packet, ACKs with SACK bitmaps of 32 to 128 bits, ECN echo
and CE counts, NAK TRIMMED and the other NAKs, probe requests and responses).
Every frame must decode with no expert error, and every field the plugin
shows must equal scapy's reading of the same bytes. A truncated frame and an
unknown opcode must get the plugin's expert errors, so that "no error" is not
vacuous.

The EV: frames of each format (IPv4 and IPv6 UDP, STEV, SRv6 carriers with 1
to 4 uSIDs, as sent and after fabric nodes consumed some) decode to the
format, EV, locator and uSIDs written out here, by the plugin's rule
(docs/protocol.md, "EV formats"); SRv6 frames decode as UDP format without
the locator preference, and a preference entry that is not a locator is
reported. Needs tshark (Debian: `apt-get install tshark`); skipped without it.
"""

from __future__ import annotations

import ipaddress
import subprocess
import sys

from scapy.layers.l2 import Ether
from scapy.utils import PcapReader, wrpcap

from host_driver import layers as L
from host_driver.dissector import LUA_PATH, constants, generated_block
from hw.protocol import EvFormat, Opcode, Syndrome, srv6_sport, stev_fields
from tests.dissector_check import (
    PI_ERROR,
    TSHARK,
    check_frames,
    got,
    needs_tshark,
    tshark_fields,
)


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


# SRv6 domains, each locator given to the plugin in one of the preference's forms.
LOCATORS = ("fd00:5256::/32", "0xFD00AAAA", "fd00:bbbb::")
PEERS = {"fd00:5256::": 0xFD005256, "fd00:aaaa::": 0xFD00AAAA, "fd00:bbbb::": 0xFD00BBBB}


def _kinds(ev_sport: int, addr) -> list[bytes]:
    """A WRITE, a trimmed WRITE, an ACK and a probe on source port ``ev_sport``."""
    write = bytes(L.write_packet(opcode=Opcode.WRITE_ONLY, dqpn=7, psn=9, va=0x40, rkey=2,
                                 dma_len=5, payload=bytes(5), ev=ev_sport, **addr))
    return [write, L.trim(write),
            bytes(L.ack_packet(dqpn=7, cum_psn=9, ev=ev_sport, **addr)),
            bytes(L.probe_packet(response=False, dqpn=7, probe_id=1, ev=ev_sport,
                                 timestamp=3, **addr))]


def _want(fmt: EvFormat, ev: int, locator=None, usids=()) -> dict:
    out = {"mrc.ev.format": int(fmt), "mrc.ev": ev}
    if locator is not None:
        out["mrc.srv6.locator"] = locator
    if usids:
        out["mrc.srv6.usid"] = tuple(usids)
    return out


def _usid_ev(usids: list[int]) -> int:
    """The SRv6 EV of ``usids`` (first hop first): the first in bits 63..48."""
    return sum(u << (48 - 16 * i) for i, u in enumerate(usids))


def _srv6_cases(peer: str) -> list[tuple[bytes, dict, int]]:
    """SRv6 frames to ``peer`` with 1..4 uSIDs, as sent and after the fabric consumed
    each uSID in turn: (frame, the EV fields the plugin shows, the source port)."""
    locator = PEERS[peer]
    out = []
    for usids in ([0xA001], [0xA001, 0xB002], [0xA001, 0xB002, 0xC003],
                  [0xA001, 0xB002, 0xC003, 0xD004]):
        ev = _usid_ev(usids)
        sport = srv6_sport(ev)
        for frame in _kinds(sport, dict(src_ip="fd00:1::1", dst_ip=peer)):
            frame = L.srv6_frame(frame, ev)
            for seen in range(len(usids), -1, -1):  # the uSIDs still in the address
                left = usids[len(usids) - seen:]
                out.append((frame, _want(EvFormat.SRV6, _usid_ev(left), locator, left), sport))
                frame = L.srv6_shifted(frame)
    # a zero uSID ends the list: what follows it is not an EV's
    frame = L.srv6_frame(_kinds(0xC000, dict(src_ip="fd00:1::1", dst_ip=peer))[0],
                         0xA001_0000_B002_0000)
    out.append((frame, _want(EvFormat.SRV6, 0xA001_0000_0000_0000, locator, [0xA001]), 0xC000))
    return out


def _ev_only(row) -> dict:
    return {k: v for k, v in got(row).items() if k.startswith(("mrc.ev", "mrc.srv6."))}


def _check_evs(cases: list[tuple[bytes, dict]], pcap, srv6_locators=()) -> None:
    """Every frame decodes with no expert error but IPv6's zero UDP checksum, its
    fields equal scapy's reading, and its EV fields are exactly the ones given."""
    frames = [frame for frame, _ in cases]
    check_frames(frames, pcap, srv6_locators=srv6_locators)
    rows = tshark_fields(pcap, srv6_locators)
    for i, ((frame, want), row) in enumerate(zip(cases, rows, strict=True)):
        assert _ev_only(row) == want, (i, ipaddress.IPv6Address(L.ipv6_dst(frame))
                                       if L.is_ipv6(frame) else "IPv4")


def _udp_and_stev_cases() -> list[tuple[bytes, dict]]:
    stev = 0x1234_C567
    sport, flow = stev_fields(stev)
    cases = [(f, _want(EvFormat.UDP, 0xC123)) for f in _kinds(0xC123, {})]
    cases += [(f, _want(EvFormat.UDP, 0xC124))
              for f in _kinds(0xC124, dict(src_ip="fd00:1::1", dst_ip="fd00::2"))]
    # a nonzero flow label is STEV, to an address in an SRv6 locator too
    cases += [(f, _want(EvFormat.STEV, stev))
              for f in _kinds(sport, dict(src_ip="fd00:1::1", dst_ip="fd00:5256::",
                                          flow_label=flow))]
    # the flow label's top 4 bits are not EV bits
    cases += [(f, _want(EvFormat.STEV, 0x0001_C000))
              for f in _kinds(0xC000, dict(src_ip="fd00:1::1", dst_ip="fd00::2",
                                           flow_label=0xF0001))]
    return cases


@needs_tshark
def test_ev_of_each_format(tmp_path):
    cases = _udp_and_stev_cases()
    for peer in PEERS:
        cases += [(frame, want) for frame, want, _ in _srv6_cases(peer)]
    assert {w["mrc.ev.format"] for _, w in cases} == set(map(int, EvFormat))
    _check_evs(cases, tmp_path / "ev.pcap", srv6_locators=LOCATORS)


@needs_tshark
def test_srv6_frames_without_the_locator_preference_are_udp_format(tmp_path):
    cases = [(frame, _want(EvFormat.UDP, sport))
             for peer in PEERS for frame, _, sport in _srv6_cases(peer)]
    _check_evs(cases, tmp_path / "no_pref.pcap")
    # a locator of the other domain only: the first domain's frames stay UDP format
    first = [(frame, _want(EvFormat.UDP, sport))
             for frame, _, sport in _srv6_cases("fd00:5256::")]
    _check_evs(first, tmp_path / "other_pref.pcap", srv6_locators=LOCATORS[1:])


@needs_tshark
def test_a_preference_entry_that_is_no_locator_is_reported_and_left_out(tmp_path):
    frame, _, sport = _srv6_cases("fd00:5256::")[0]
    pcap = tmp_path / "bad_pref.pcap"
    wrpcap(str(pcap), [Ether(frame)])
    run = subprocess.run([TSHARK, "-X", f"lua_script:{LUA_PATH}", "-r", str(pcap),
                          "-o", "mrc.srv6_locators:fd00:5256::/48, fd00:5256:::, 0x1fd005256",
                          "-T", "fields", "-e", "mrc.ev.format", "-e", "mrc.ev"],
                         check=True, capture_output=True, text=True)
    for entry in ("fd00:5256::/48", "fd00:5256:::", "0x1fd005256"):
        assert f"not an SRv6 locator: {entry}\n" in run.stderr, run.stderr
    assert run.stdout.split() == [str(int(EvFormat.UDP)), f"0x{sport:016x}"]


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
    check_frames(frames, tmp_path / "all.pcap")


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

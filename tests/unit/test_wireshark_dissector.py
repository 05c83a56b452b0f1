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

import subprocess
import sys

from scapy.layers.l2 import Ether
from scapy.utils import PcapReader, wrpcap

from host_driver import layers as L
from host_driver.dissector import LUA_PATH, constants, generated_block
from hw.protocol import Opcode, Syndrome
from tests.dissector_check import PI_ERROR, check_frames, needs_tshark, tshark_fields


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

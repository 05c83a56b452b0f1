"""The wire format over IPv6 in host_driver.layers: the builders, the ICRC (IPv6's
masked fields: traffic class, flow label, hop limit), trimming, checked both
ways against scapy.contrib.roce and against tshark's own RoCEv2 dissector
(Wireshark's InfiniBand dissector on UDP 4791, without our plugin)."""

from __future__ import annotations

import ipaddress
import shutil
import subprocess

import pytest
import scapy.contrib.roce as scapy_roce
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import wrpcap

from host_driver import layers as L
from hw.protocol import (
    Opcode,
    Syndrome,
    srv6_carrier,
    srv6_shift,
    srv6_sport,
    srv6_usids,
    stev_fields,
)
from tests import seeds

V6 = dict(src_ip="fd00:0:0:1::a", dst_ip="fd00:0:0:2::b", flow_label=0xABCDE)
BTH_FIELDS = ["opcode", "padcount", "pkey", "fecn", "becn", "dqpn", "ackreq", "psn"]
UDP_OFF = 14 + L.HDR_IPV6
BTH_OFF = UDP_OFF + L.HDR_UDP


def frames() -> list[bytes]:
    """Frames of every kind over IPv6."""
    rng = seeds.rng(66)
    out = []
    for op in Opcode.WRITES:
        for n in (0, 1, 7, 200):
            out.append(bytes(L.write_packet(
                opcode=op, dqpn=rng.randrange(1 << 24), psn=rng.randrange(1 << 24),
                va=rng.randrange(1 << 64), rkey=rng.randrange(1 << 32), dma_len=4096 + n,
                payload=bytes(rng.randrange(256) for _ in range(n)),
                imm=0x55AA0000 + n if op in Opcode.WITH_IMM else None,
                # an EV in the dynamic port range, as the driver's: tshark gives a
                # UDP frame to the dissector of its lower port first, so a source
                # port a dissector claims (37, TIME) would hide the RoCE one
                ev=rng.randrange(0xC000, 1 << 16), ackreq=n & 1, dscp=n % 64, **V6)))
    for syndrome in Syndrome.NAMES:
        out.append(bytes(L.ack_packet(dqpn=7, cum_psn=rng.randrange(1 << 24),
                                      bitmap=rng.randrange(1 << 64), syndrome=syndrome,
                                      msn=3, ece=1, ce_count=9, **V6)))
    for response in (False, True):
        out.append(bytes(L.probe_packet(response=response, dqpn=7, probe_id=0x1203, ev=0xC003,
                                        timestamp=987_654_321, **V6)))
    return out


def test_frames_are_ipv6_with_a_good_icrc():
    for f in frames():
        p = Ether(f)
        assert f[12:14] == b"\x86\xdd" and p[IPv6].nh == 17 and p[IPv6].hlim == 64
        assert p[IPv6].fl == V6["flow_label"] and p[IPv6].plen == len(f) - UDP_OFF
        assert p[UDP].dport == L.ROCE_UDP_PORT and p[UDP].len == len(f) - UDP_OFF
        assert L.check_frame(f) == (True, True)


def test_ours_against_scapy_roce_both_ways():
    """scapy.contrib.roce reads our BTH as we do and, given our headers and
    payload, computes our ICRC; a frame it builds verifies with our icrc()."""
    for f in frames():
        ours = Ether(f)[L.BTH]
        theirs = scapy_roce.BTH(f[BTH_OFF:])
        for name in BTH_FIELDS:
            assert getattr(theirs, name) == getattr(ours, name), name
        rebuilt = bytes(Ether(f[:14]) / IPv6(f[14:UDP_OFF]) / UDP(f[UDP_OFF:BTH_OFF])
                        / scapy_roce.BTH(**{n: getattr(ours, n) for n in BTH_FIELDS})
                        / Raw(f[BTH_OFF + L.HDR_BTH:-4]))
        assert rebuilt == f
    theirs = bytes(Ether() / IPv6(src="2001:db8::1", dst="2001:db8::2", tc=0x9A, fl=0x54321)
                   / UDP(sport=0xC0DE, dport=4791, chksum=0)
                   / scapy_roce.BTH(opcode=Opcode.WRITE_MIDDLE, dqpn=0x123456, psn=0xFFFFFE)
                   / Raw(bytes(range(64))))
    assert L.check_frame(theirs) == (True, True)
    assert Ether(theirs)[L.BTH].dqpn == 0x123456


def test_icrc_masks_exactly_ipv6s_variant_fields():
    """Traffic class, flow label and hop limit may change in flight: the ICRC
    ignores them. The addresses, the payload length and the next header may not."""
    f = frames()[3]
    want = L.icrc(f)
    for offset, mask in ((14, 0x0F), (15, 0xFF), (16, 0xFF), (17, 0xFF), (21, 0xFF)):
        g = bytearray(f)
        g[offset] ^= mask
        assert L.icrc(bytes(g)) == want, offset
    for offset in (18, 19, 20, 22, 37, 38, 53):  # length, next header, addresses
        g = bytearray(f)
        g[offset] ^= 0x01
        assert L.icrc(bytes(g)) != want, offset


def test_trim_over_ipv6():
    """A trimmed IPv6 data packet: its headers only, no ICRC, both lengths
    rewritten, the DSCP the trim's and the ECN kept."""
    for f in frames():
        op = f[BTH_OFF]
        if op not in Opcode.WRITES:
            continue
        t = L.trim(f)
        assert len(t) == L.header_len(op, ipv6=True) and t[:14] == f[:14]
        p = Ether(t)
        tc = Ether(f)[IPv6].tc
        assert p[IPv6].tc == (L.TRIM_DSCP_DEFAULT << 2) | (tc & 3)
        assert p[IPv6].plen == p[UDP].len == len(t) - UDP_OFF
        assert t[UDP_OFF + L.HDR_UDP:] == f[UDP_OFF + L.HDR_UDP:len(t)]


def test_families_and_flow_label_are_checked():
    with pytest.raises(ValueError, match="one family"):
        L.write_packet(opcode=Opcode.WRITE_ONLY, dqpn=1, psn=1, va=0, rkey=1, dma_len=0,
                       src_ip="10.0.0.1", dst_ip="fd00::2")
    with pytest.raises(ValueError, match="only with IPv6"):
        L.ack_packet(dqpn=1, cum_psn=1, flow_label=5)
    with pytest.raises(ValueError, match="20-bit"):
        L.probe_packet(response=False, dqpn=1, probe_id=1, ev=1, timestamp=0,
                       **{**V6, "flow_label": 1 << 20})


def addr(value: int) -> str:
    return str(ipaddress.IPv6Address(value))


def write_to(dst: int, ev: int, flow_label: int = 0, src: int = 0xFD00 << 112 | 1) -> bytes:
    """A WRITE_ONLY frame to ``dst`` with UDP source port ``ev``."""
    return bytes(L.write_packet(opcode=Opcode.WRITE_ONLY, dqpn=0x21, psn=9, va=0x1000, rkey=3,
                                dma_len=64, payload=bytes(range(64)), ev=ev,
                                src_ip=addr(src), dst_ip=addr(dst), flow_label=flow_label))


def test_flow_label_and_destination_on_raw_bytes():
    """``flow_label`` and ``ipv6_dst`` read an IPv6 frame's fields as scapy
    does; ``with_ipv6_dst`` changes the destination's 16 bytes and nothing
    else (the ICRC neither: the frame no longer checks)."""
    for f in frames():
        p = Ether(f)[IPv6]
        assert L.flow_label(f) == p.fl == V6["flow_label"]
        assert L.ipv6_dst(f) == int(ipaddress.IPv6Address(p.dst))
    f = frames()[0]
    g = L.with_ipv6_dst(f, 0x2001_0DB8 << 96 | 5)
    assert Ether(g)[IPv6].dst == "2001:db8::5" and L.ipv6_dst(g) == 0x2001_0DB8 << 96 | 5
    assert g[:38] == f[:38] and g[54:] == f[54:]
    assert L.check_frame(g) == (True, False)
    v4 = bytes(L.ack_packet(dqpn=1, cum_psn=3))
    assert L.flow_label(v4) == 0
    with pytest.raises(ValueError, match="IPv6"):
        L.ipv6_dst(v4)
    with pytest.raises(ValueError, match="IPv6"):
        L.with_ipv6_dst(v4, 1)


def test_stev_frames_carry_the_ev_in_flow_label_and_source_port():
    """A STEV EV built as ``stev_fields`` splits it: source port = EV bits
    15..0, flow label = bits 31..16. The ICRC masks the flow label, so two
    EVs that differ only there give one ICRC."""
    ev = 0x1234_C0DE
    sport, label = stev_fields(ev)
    f = write_to(0xFD00 << 112 | 2, sport, label)
    assert (L.flow_label(f), Ether(f)[UDP].sport) == (0x1234, 0xC0DE)
    assert L.check_frame(f) == (True, True)
    g = write_to(0xFD00 << 112 | 2, sport, stev_fields(0x4321_C0DE)[1])
    assert L.flow_label(g) == 0x4321 and L.frame_icrc_field(g) == L.frame_icrc_field(f)


# An SRv6 fabric (hw/protocol.py): the locator, the NICs' own uSIDs (a NIC's
# address is locator:uSID::) and an EV through two fabric nodes to the peer.
LOCATOR = 0xFD00_00AA
PEER_USID = 0x0B02
PEER = LOCATOR << 96 | PEER_USID << 80
SRV6_EV = 0x0E03 << 48 | 0x0F07 << 32 | PEER_USID << 16


def test_srv6_frame_is_valid_once_the_fabric_consumed_its_usids():
    """``srv6_frame`` puts the carrier in a frame built to the peer and keeps
    its ICRC (the one over the peer's address). Each fabric node consumes its
    uSID (``srv6_shift`` on the destination's bytes); the frame is ICRC-valid
    only after the last fabric uSID, and is then the frame to the peer byte
    for byte."""
    to_peer = write_to(PEER, srv6_sport(SRV6_EV), src=LOCATOR << 96 | 0x0B01 << 80)
    assert L.check_frame(to_peer) == (True, True)
    carrier = L.srv6_frame(to_peer, SRV6_EV)
    assert L.ipv6_dst(carrier) == srv6_carrier(PEER, SRV6_EV)
    assert Ether(carrier)[IPv6].dst == "fd00:aa:e03:f07:b02::"
    assert [i for i in range(len(carrier)) if carrier[i] != to_peer[i]] == [
        i for i in range(38, 54) if carrier[i] != to_peer[i]]
    assert carrier[-4:] == to_peer[-4:]
    frame = carrier
    for _fabric_usid in srv6_usids(SRV6_EV)[:-1]:  # the last uSID is the peer's own
        assert L.check_frame(frame) == (True, False)
        shifted = srv6_shift(int.from_bytes(frame[38:54], "big")).to_bytes(16, "big")
        assert L.srv6_shifted(frame) == frame[:38] + shifted + frame[54:]
        frame = L.srv6_shifted(frame)
    assert frame == to_peer and L.check_frame(frame) == (True, True)


IBTA_RETH = (Opcode.WRITE_FIRST, Opcode.WRITE_ONLY, Opcode.WRITE_ONLY_IMM)


def tshark_reads_payload_as_ethertype(f: bytes) -> bool:
    """Wireshark's InfiniBand dissector (packet-infiniband.c, parse_PAYLOAD) takes
    a payload whose bytes 2..3 are zero for an Ethernet payload, with bytes 0..1
    its EtherType, and hands it on. A random payload (or one byte and its three
    pad bytes: X 00 00 00) can look so; tshark then decodes our opaque data as
    whatever that EtherType is and may call it malformed. The payload is where
    IBTA's headers end: our RETH on MIDDLE and LAST is payload to Wireshark."""
    op = f[BTH_OFF]
    if op not in Opcode.WRITES:
        return False
    start = (BTH_OFF + L.HDR_BTH + (16 if op in IBTA_RETH else 0)
             + (4 if op in Opcode.WITH_IMM else 0))
    payload = f[start:-4]
    gsi = f[BTH_OFF + 5:BTH_OFF + 8] == b"\0\0\1"
    return not gsi and len(payload) >= 4 and payload[2:4] == b"\0\0"


@pytest.mark.skipif(shutil.which("tshark") is None,
                    reason="tshark is not installed (Debian: apt-get install tshark)")
def test_tsharks_own_roce_dissector_reads_our_ipv6_frames(tmp_path):
    """Wireshark's InfiniBand dissector (no plugin) decodes our IPv6 frames'
    BTH, RETH and AETH as we built them. Its only complaint is UDP's zero
    checksum, which RoCEv2 sends over IPv6 as over IPv4 (docs/protocol.md,
    "IPv6": RFC 6935's zero checksum for a tunnel, the ICRC covering the
    packet); no other expert message."""
    fs = frames()
    pcap = tmp_path / "v6.pcap"
    wrpcap(str(pcap), [Ether(f) for f in fs])
    names = ("frame.protocols", "_ws.expert.message", "infiniband.bth.opcode",
             "infiniband.bth.destqp", "infiniband.bth.psn", "infiniband.reth.va",
             "infiniband.reth.r_key", "infiniband.reth.dmalen", "infiniband.aeth.msn")
    cmd = ["tshark", "-r", str(pcap), "-T", "fields", "-E", "separator=/t"]
    for n in names:
        cmd += ["-e", n]
    rows = [dict(zip(names, line.split("\t"), strict=True)) for line in
            subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()]
    assert len(rows) == len(fs)
    for f, row in zip(fs, rows, strict=True):
        bth = Ether(f)[L.BTH]
        assert "ipv6:udp:infiniband" in row["frame.protocols"], row
        experts = row["_ws.expert.message"].split(",")
        assert experts[0] == "Illegal checksum value (0)", row
        # tshark's verdict on the payload, when it decodes it as another protocol,
        # is about our random data, not about our headers
        assert len(experts) == 1 or tshark_reads_payload_as_ethertype(f), row
        assert int(row["infiniband.bth.opcode"], 0) == bth.opcode
        assert int(row["infiniband.bth.destqp"], 0) == bth.dqpn
        assert int(row["infiniband.bth.psn"], 0) == bth.psn
        if bth.opcode in Opcode.WRITES and bth.opcode not in IBTA_RETH:
            # MRC's RETH on MIDDLE and LAST: IBTA has none there, so Wireshark's
            # dissector takes it for payload (our plugin decodes it)
            assert row["infiniband.reth.va"] == "", row
        elif bth.opcode in Opcode.WRITES:
            reth = Ether(f)[L.RETH]
            assert (int(row["infiniband.reth.va"], 0), int(row["infiniband.reth.r_key"], 0),
                    int(row["infiniband.reth.dmalen"], 0)) == (reth.va, reth.rkey,
                                                               reth.dma_len)
        elif bth.opcode == Opcode.ACKNOWLEDGE:
            assert int(row["infiniband.aeth.msn"], 0) == Ether(f)[L.AETH].msn


@pytest.mark.skipif(shutil.which("tshark") is None,
                    reason="tshark is not installed (Debian: apt-get install tshark)")
def test_tshark_reads_a_one_byte_payload_as_ethertype(tmp_path):
    """The rule above is tshark's: one payload byte 0x08 and its three pad bytes
    read as EtherType 0x0800 (IPv4); 0x07 (EtherType 0x0700) is no protocol.
    (Not on QP 1, the GSI QP, whose payload tshark reads as a MAD.)"""
    pcap = tmp_path / "one.pcap"
    fs = [bytes(L.write_packet(opcode=Opcode.WRITE_ONLY, dqpn=0x123456, psn=1, va=0, rkey=1,
                               dma_len=1, payload=bytes([b]), **V6)) for b in (0x08, 0x07)]
    wrpcap(str(pcap), [Ether(f) for f in fs])
    out = subprocess.run(["tshark", "-r", str(pcap), "-T", "fields", "-e", "frame.protocols"],
                         check=True, capture_output=True, text=True).stdout.split()
    assert [tshark_reads_payload_as_ethertype(f) for f in fs] == [True, True]
    assert out[0].endswith("infiniband:ethertype:ip") and out[1].endswith("infiniband:data"), out

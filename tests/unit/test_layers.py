"""The scapy layers against the wire format, scapy's own RoCE codec and pcap."""

import struct

import pytest
import scapy.contrib.roce as scapy_roce
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import rdpcap, wrpcap

from host_driver import layers as L
from tests import seeds


@pytest.fixture(autouse=True)
def _our_layers_on_4791():
    L.bind()


def _raw(pkt) -> bytes:
    return bytes(pkt)


WRITE_CASES = [
    (L.OP_WRITE_FIRST, 256, None),
    (L.OP_WRITE_MIDDLE, 1024, None),
    (L.OP_WRITE_LAST, 13, None),
    (L.OP_WRITE_LAST_IMM, 1, 0x12345678),
    (L.OP_WRITE_ONLY, 0, None),
    (L.OP_WRITE_ONLY_IMM, 4093, 0xFFFFFFFF),
]


@pytest.mark.parametrize("opcode,length,imm", WRITE_CASES)
def test_write_roundtrip(opcode, length, imm):
    payload = bytes(seeds.rng(length).randrange(256) for _ in range(length))
    pkt = L.write_packet(
        opcode=opcode, dqpn=0xABCDE, psn=0xFFFFFE, va=0x1122334455667788, rkey=0xCAFEF00D,
        dma_len=0x10000, payload=payload, imm=imm, ev=0xBEEF, ackreq=1,
    )
    frame = _raw(pkt)
    assert len(frame) == L.header_len(opcode) + length + (-length % 4) + 4
    assert L.check_frame(frame) == (True, True)
    back = Ether(frame)
    assert back[UDP].sport == 0xBEEF and back[UDP].dport == 4791
    assert back[IP].tos & 3 == L.ECN_ECT0 and back[IP].flags == "DF"
    bth = back[L.BTH]
    assert (bth.opcode, bth.dqpn, bth.psn, bth.ackreq, bth.padcount) == (
        opcode, 0xABCDE, 0xFFFFFE, 1, -length % 4)
    reth = back[L.RETH]
    assert (reth.va, reth.rkey, reth.dma_len) == (0x1122334455667788, 0xCAFEF00D, 0x10000)
    if imm is None:
        assert L.ImmDt not in back
    else:
        assert back[L.ImmDt].imm == imm
    assert L.write_payload(back) == payload
    # Rebuilding the dissected packet gives the same bytes.
    assert _raw(back) == frame


def test_fixed_offsets_match_protocol_doc():
    frame = _raw(L.write_packet(opcode=L.OP_WRITE_ONLY_IMM, dqpn=0x010203, psn=0x040506,
                                va=0x0708090A0B0C0D0E, rkey=0x0F101112, dma_len=0x13141516,
                                imm=0x1718191A, ev=0x1B1C, payload=b"\xAA"))
    assert frame[12:14] == b"\x08\x00"
    assert frame[34:36] == b"\x1b\x1c" and frame[36:38] == (4791).to_bytes(2, "big")
    assert frame[42] == 0x0B and frame[47:50] == b"\x01\x02\x03" and frame[51:54] == b"\x04\x05\x06"
    assert frame[54:62] == bytes(range(7, 15)) and frame[62:66] == bytes(range(15, 19))
    assert frame[66:70] == bytes(range(19, 23)) and frame[70:74] == bytes(range(23, 27))
    assert frame[74] == 0xAA and frame[75:78] == b"\0\0\0"


@pytest.mark.parametrize("sack_bits", [32, 64, 256])
def test_ack_roundtrip(sack_bits):
    bitmap = seeds.rng(sack_bits).getrandbits(sack_bits) | 1 << (sack_bits - 1)
    pkt = L.ack_packet(dqpn=77, cum_psn=0xFFFFFF, bitmap=bitmap, sack_bits=sack_bits,
                       ece=1, ce_count=513, msn=9, ev=0x1234)
    frame = _raw(pkt)
    assert len(frame) == L.header_len(L.OP_ACKNOWLEDGE, sack_bits) + 4
    assert L.check_frame(frame) == (True, True)
    back = Ether(frame)
    assert back[L.AETH].syndrome == L.AETH_ACK and back[L.AETH].msn == 9
    sack = back[L.MRCSack]
    assert sack.cum_psn == 0xFFFFFF and sack.sack_base == 0  # wraps
    assert (sack.ece, sack.ce_count) == (1, 513)
    assert (sack.sack_words, sack.bitmap) == (sack_bits // 32, bitmap)
    assert sack.sacked_psns()[-1] == sack_bits - 1
    assert frame[59:62] == b"\xff\xff\xff"
    assert frame[-4 - sack_bits // 8:-4] == bitmap.to_bytes(sack_bits // 8, "big")
    assert _raw(back) == frame


def test_nak_trimmed_roundtrip():
    frame = _raw(L.ack_packet(dqpn=5, cum_psn=99, psn=105, syndrome=L.NAK_TRIMMED))
    back = Ether(frame)
    assert back[L.BTH].psn == 105 and back[L.AETH].syndrome == L.NAK_TRIMMED
    assert back[L.MRCSack].cum_psn == 99 and back[L.MRCSack].sack_base == 100
    assert L.check_frame(frame) == (True, True)


@pytest.mark.parametrize("response", [False, True])
def test_probe_roundtrip(response):
    frame = _raw(L.probe_packet(response=response, dqpn=3, probe_id=0xDEAD, ev=0x4321,
                                timestamp=123456789012))
    assert len(frame) == 74 and L.check_frame(frame) == (True, True)
    back = Ether(frame)
    assert back[L.BTH].opcode == (L.OP_PROBE_RESP if response else L.OP_PROBE_REQ)
    probe = back[L.MRCProbe]
    assert (probe.probe_id, probe.ev, probe.timestamp) == (0xDEAD, 0x4321, 123456789012)
    assert back[UDP].sport == 0x4321


def test_trim_keeps_headers_and_rewrites_dscp():
    full = _raw(L.write_packet(opcode=L.OP_WRITE_LAST_IMM, dqpn=1, psn=2, va=3, rkey=4,
                               dma_len=5000, imm=6, payload=bytes(1000)))
    cut = L.trim(full, trim_dscp=0x3F)
    assert len(cut) == 74 and cut[:14] == full[:14]
    ip = IP(cut[14:34])
    assert ip.tos >> 2 == 0x3F and ip.len == 60
    assert L.check_frame(cut)[0]  # IPv4 checksum recomputed
    assert cut[42:74] == full[42:74]  # BTH, RETH, ImmDt intact


def test_icrc_detects_corruption_but_not_masked_fields():
    frame = bytearray(_raw(L.write_packet(opcode=L.OP_WRITE_ONLY, dqpn=1, psn=2, va=3, rkey=4,
                                          dma_len=8, payload=b"12345678")))
    masked = bytearray(frame)
    masked[15] ^= 0x03  # ECN -> CE on the way: ICRC must still hold
    masked[22] -= 1  # TTL decremented by a router
    masked[46] = 0xC0  # FECN/BECN
    assert L.icrc(bytes(masked)) == L.frame_icrc_field(bytes(masked))
    for offset in (14 + 12, 42, 51, 60, 70, 77):
        bad = bytearray(frame)
        bad[offset] ^= 0x01
        assert L.icrc(bytes(bad)) != L.frame_icrc_field(bytes(bad)), offset


def test_builders_reject_bad_arguments():
    with pytest.raises(ValueError, match="not an RDMA WRITE"):
        L.write_packet(opcode=L.OP_ACKNOWLEDGE, dqpn=1, psn=1, va=0, rkey=0, dma_len=0)
    with pytest.raises(ValueError, match="imm must be given"):
        L.write_packet(opcode=L.OP_WRITE_ONLY_IMM, dqpn=1, psn=1, va=0, rkey=0, dma_len=0)
    with pytest.raises(ValueError, match="16-bit"):
        L.write_packet(opcode=L.OP_WRITE_ONLY, dqpn=1, psn=1, va=0, rkey=0, dma_len=0, ev=0x10000)
    with pytest.raises(ValueError, match="multiple of 32"):
        L.ack_packet(dqpn=1, cum_psn=0, sack_bits=48)
    with pytest.raises(ValueError, match="beyond sack_bits"):
        L.ack_packet(dqpn=1, cum_psn=0, bitmap=1 << 64)


# ---- interop with scapy.contrib.roce, both ways ---------------------------------

BTH_FIELDS = ["opcode", "padcount", "pkey", "fecn", "becn", "dqpn", "ackreq", "psn", "icrc"]


def _their_frame(opcode, payload, **bth):
    return _raw(
        Ether(src="02:00:00:00:00:0a", dst="02:00:00:00:00:0b")
        / IP(src="192.0.2.1", dst="192.0.2.2", tos=0x02, flags="DF")
        / UDP(sport=0xC123, dport=4791, chksum=0)
        / scapy_roce.BTH(opcode=opcode, **bth)
        / Raw(payload)
    )


@pytest.mark.parametrize("opcode", [0x06, 0x07, 0x0A, 0x0B, 0x11])
def test_theirs_parses_with_ours(opcode):
    rng = seeds.rng(opcode)
    payload = bytes(rng.randrange(256) for _ in range(40))
    frame = _their_frame(opcode, payload, dqpn=0x123456, psn=0xFFFFF0, ackreq=1, padcount=0)
    assert L.check_frame(frame) == (True, True)  # their ICRC verifies with ours
    theirs = scapy_roce.BTH(frame[42:])
    ours = L.BTH(frame[42:])
    for name in BTH_FIELDS:
        assert getattr(ours, name) == getattr(theirs, name), name
    assert struct.pack("!I", ours.icrc) == frame[-4:]


@pytest.mark.parametrize("opcode,length,imm", WRITE_CASES[:4])
def test_ours_parses_with_theirs(opcode, length, imm):
    frame = _raw(L.write_packet(opcode=opcode, dqpn=0x0BEEF, psn=12345, va=0x1000, rkey=7,
                                dma_len=4096, payload=bytes(range(256))[:length] * 1, imm=imm))
    ours = Ether(frame)[L.BTH]
    their_pkt = Ether(frame[:42]) / scapy_roce.BTH(frame[42:])
    theirs = their_pkt[scapy_roce.BTH]
    for name in BTH_FIELDS:
        assert getattr(theirs, name) == getattr(ours, name), name
    # scapy's codec, given our header fields and payload, computes the same ICRC.
    rebuilt = _raw(
        Ether(frame[:14]) / IP(frame[14:34]) / UDP(frame[34:42])
        / scapy_roce.BTH(**{n: getattr(ours, n) for n in BTH_FIELDS if n != "icrc"})
        / Raw(frame[54:-4])
    )
    assert rebuilt == frame


def test_ack_interop_aeth():
    frame = _raw(L.ack_packet(dqpn=9, cum_psn=1000, syndrome=L.NAK_PSN_SEQ_ERROR, msn=0x42))
    theirs = scapy_roce.BTH(frame[42:])
    assert theirs.opcode == 0x11 and theirs.psn == 1000
    aeth = theirs[scapy_roce.AETH]
    assert aeth.syndrome == L.NAK_PSN_SEQ_ERROR and aeth.msn == 0x42


def test_pcap_roundtrip(tmp_path):
    pkts = [
        L.write_packet(opcode=L.OP_WRITE_FIRST, dqpn=1, psn=10, va=0, rkey=1, dma_len=600,
                       payload=bytes(256)),
        L.write_packet(opcode=L.OP_WRITE_LAST_IMM, dqpn=1, psn=11, va=256, rkey=1, dma_len=600,
                       payload=bytes(range(256)) + bytes(88), imm=5),
        L.ack_packet(dqpn=2, cum_psn=11, bitmap=0),
        L.probe_packet(response=False, dqpn=2, probe_id=1, ev=0xC001, timestamp=99),
    ]
    path = tmp_path / "mrc.pcap"
    wrpcap(str(path), pkts)
    back = rdpcap(str(path))
    assert [bytes(p) for p in back] == [bytes(p) for p in pkts]
    assert back[1][L.ImmDt].imm == 5 and back[2][L.MRCSack].cum_psn == 11
    assert all(L.check_frame(bytes(p)) == (True, True) for p in back)

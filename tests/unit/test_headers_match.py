"""hw/headers.py and host_driver/layers.py describe the same bytes (docs/protocol.md)."""


import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from host_driver import layers as L
from hw import headers as H
from tests import seeds


@pytest.fixture(autouse=True)
def _our_layers_on_4791():
    L.bind()


def _evaluate(width, frame: bytes, build):
    """Run ``build(signal)`` -> {name: Value} on a signal holding ``frame``; return ints."""
    sig = Signal(width)
    exprs = build(sig)
    out = {}

    async def bench(ctx):
        ctx.set(sig, int.from_bytes(frame, "little"))
        for name, expr in exprs.items():
            out[name] = ctx.get(expr)

    sim = Simulator(Module())
    sim.add_testbench(bench)
    sim.run()
    return out


def _unpack_at(header, offset):
    def build(sig):
        return header.unpack(sig[8 * offset : 8 * (offset + header.size)])

    return build


# the test ids name the frames, not their random bytes: one id whatever the
# run's seed, so that .test_durations and pytest-split know them
FRAME_IDS = ["write_first", "write_last_imm", "write_only_imm"]


def _frames():
    rng = seeds.rng(7)
    for opcode in (L.OP_WRITE_FIRST, L.OP_WRITE_LAST_IMM, L.OP_WRITE_ONLY_IMM):
        yield bytes(L.write_packet(
            opcode=opcode, dqpn=rng.getrandbits(24), psn=rng.getrandbits(24),
            va=rng.getrandbits(64), rkey=rng.getrandbits(32), dma_len=rng.getrandbits(31),
            imm=rng.getrandbits(32) if opcode in L.IMM_OPCODES else None,
            ev=rng.getrandbits(16), ackreq=1, dscp=0x2A, payload=b"xyz"))


@pytest.mark.parametrize("frame", list(_frames()), ids=FRAME_IDS)
def test_unpack_matches_scapy(frame):
    pkt = Ether(frame)
    f = {}
    for header, offset in ((H.ETH, 0), (H.IPV4, 14), (H.UDP, 34), (H.BTH, 42), (H.RETH, 54)):
        f[header.name] = _evaluate(8 * len(frame), frame, _unpack_at(header, offset))
    assert f["eth"]["ethertype"] == 0x0800
    assert f["eth"]["dst"] == int(pkt[Ether].dst.replace(":", ""), 16)
    ip = pkt[IP]
    assert (f["ipv4"]["version"], f["ipv4"]["ihl"], f["ipv4"]["total_len"]) == (4, 5, ip.len)
    assert (f["ipv4"]["dscp"], f["ipv4"]["ecn"]) == (ip.tos >> 2, ip.tos & 3)
    assert (f["ipv4"]["flags"], f["ipv4"]["ttl"], f["ipv4"]["checksum"]) == (2, 64, ip.chksum)
    assert f["udp"]["sport"] == pkt[UDP].sport and f["udp"]["length"] == pkt[UDP].len
    for name in ("opcode", "se", "padcount", "tver", "pkey", "dqpn", "ackreq", "psn"):
        assert f["bth"][name] == getattr(pkt[L.BTH], name), name
    for name in ("va", "rkey", "dma_len"):
        assert f["reth"][name] == getattr(pkt[L.RETH], name), name


def test_ack_and_probe_headers_match_scapy():
    bitmap = seeds.rng(3).getrandbits(64)
    frame = bytes(L.ack_packet(dqpn=0x77, cum_psn=0xABCDEF, sack_base=0xABCDF5, bitmap=bitmap,
                               syndrome=L.NAK_TRIMMED, msn=0x123456, ece=1, ce_count=0xBEE))
    aeth = _evaluate(8 * len(frame), frame, _unpack_at(H.AETH, H.OFF_EXT))
    sack = _evaluate(8 * len(frame), frame, _unpack_at(H.SACK, H.OFF_SACK))
    bm = _evaluate(8 * len(frame), frame, _unpack_at(H.sack_bitmap(64), H.OFF_SACK + H.SACK.size))
    assert aeth == {"syndrome": L.NAK_TRIMMED, "msn": 0x123456}
    assert (sack["cum_psn"], sack["sack_base"], sack["ece"]) == (0xABCDEF, 0xABCDF5, 1)
    assert (sack["sack_words"], sack["ce_count"]) == (2, 0xBEE)
    assert bm["bitmap"] == bitmap
    frame = bytes(L.probe_packet(response=True, dqpn=1, probe_id=0xA1B2C3D4, ev=0x5566,
                                 timestamp=0x0102030405060708))
    probe = _evaluate(8 * len(frame), frame, _unpack_at(H.PROBE, H.OFF_EXT))
    assert probe == {"probe_id": 0xA1B2C3D4, "ev": 0x5566, "resv": 0,
                     "timestamp": 0x0102030405060708}


@pytest.mark.parametrize("frame", list(_frames()), ids=FRAME_IDS)
def test_pack_gives_scapy_bytes(frame):
    """pack() of the unpacked fields rebuilds every header byte for byte."""
    for header, offset in ((H.ETH, 0), (H.IPV4, 14), (H.UDP, 34), (H.BTH, 42), (H.RETH, 54)):
        fields = _evaluate(8 * len(frame), frame, _unpack_at(header, offset))

        def build(sig, header=header, fields=fields):
            return {"raw": header.pack({k: v for k, v in fields.items()})}

        packed = _evaluate(8, b"\0", build)["raw"]
        assert packed.to_bytes(header.size, "little") == frame[offset : offset + header.size]


def test_offsets_match_layers():
    assert H.OFF_BTH == L.HDR_ETH + L.HDR_IPV4 + L.HDR_UDP
    assert H.OFF_IMMDT + H.IMMDT.size == L.header_len(L.OP_WRITE_ONLY_IMM)
    assert H.OFF_EXT + H.RETH.size == L.header_len(L.OP_WRITE_ONLY)
    assert H.OFF_SACK + H.SACK.size + 8 == L.header_len(L.OP_ACKNOWLEDGE)
    assert H.OFF_EXT + H.PROBE.size == L.header_len(L.OP_PROBE_REQ)
    assert set(H.Opcode.ALL) == set(L.OPCODES)


def test_header_table_rejects_gaps():
    with pytest.raises(ValueError, match="gap or overlap"):
        H.Header("bad", 2, [("a", 0, 4), ("b", 8, 8)])
    with pytest.raises(ValueError, match="cover"):
        H.Header("bad", 2, [("a", 0, 8)])
    with pytest.raises(ValueError, match="multiple of 32"):
        H.sack_bitmap(48)

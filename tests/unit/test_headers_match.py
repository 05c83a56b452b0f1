"""hw/headers.py and host_driver/layers.py describe the same bytes (docs/protocol.md)."""


import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
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


V6 = dict(src_ip="2001:db8::1", dst_ip="2001:db8:0:7::2", flow_label=0xABCDE)


def _frame_v6(opcode=L.OP_WRITE_ONLY_IMM):
    rng = seeds.rng(11)
    return bytes(L.write_packet(opcode=opcode, dqpn=rng.getrandbits(24),
                                psn=rng.getrandbits(24), va=rng.getrandbits(64),
                                rkey=rng.getrandbits(32), dma_len=77, imm=rng.getrandbits(32),
                                ev=rng.getrandbits(16), ackreq=1, dscp=0x2A, payload=b"xyz",
                                **V6))


def test_ipv6_headers_match_scapy():
    """Over IPv6 the headers after the IP header sit IPV6_SHIFT bytes later;
    unpack reads scapy's fields and pack rebuilds the bytes."""
    frame = _frame_v6()
    pkt = Ether(frame)
    eth = _evaluate(8 * len(frame), frame, _unpack_at(H.ETH, 0))
    ip6 = _evaluate(8 * len(frame), frame, _unpack_at(H.IPV6, H.OFF_IPV6))
    udp = _evaluate(8 * len(frame), frame, _unpack_at(H.UDP, H.OFF_UDP6))
    bth = _evaluate(8 * len(frame), frame, _unpack_at(H.BTH, H.OFF_BTH6))
    reth = _evaluate(8 * len(frame), frame, _unpack_at(H.RETH, H.OFF_EXT6))
    ip = pkt[IPv6]
    assert eth["ethertype"] == H.ETHERTYPE_IPV6
    assert (ip6["version"], ip6["dscp"], ip6["ecn"]) == (6, ip.tc >> 2, ip.tc & 3)
    assert (ip6["flow_label"], ip6["payload_len"]) == (0xABCDE, ip.plen)
    assert (ip6["next_header"], ip6["hop_limit"]) == (H.IP_PROTO_UDP, ip.hlim)
    assert ip6["src"] == int.from_bytes(frame[22:38], "big") and ip6["src"] >> 96 == 0x20010DB8
    assert udp["length"] == pkt[UDP].len and bth["psn"] == pkt[L.BTH].psn
    assert reth["dma_len"] == 77
    fields = dict(ip6)

    def build(sig):
        return {"raw": H.IPV6.pack(fields)}

    packed = _evaluate(8, b"\0", build)["raw"]
    assert packed.to_bytes(40, "little") == frame[H.OFF_IPV6:H.OFF_IPV6 + 40]


@pytest.mark.parametrize("ipv6", [False, True], ids=["ipv4", "ipv6"])
def test_icrc_mask_is_what_the_icrc_ignores(ipv6):
    """Flipping a bit ``icrc_mask`` names leaves the ICRC as it was (scapy's
    roce ICRC over our layers); flipping any other bit of the headers before
    the BTH's end changes it (but IPv4's version and IHL byte, which says
    where the headers are)."""
    frame = bytearray(_frame_v6() if ipv6 else next(_frames()))
    mask = H.icrc_mask(ipv6)
    want = L.icrc(bytes(frame))
    end = (H.OFF_BTH6 if ipv6 else H.OFF_BTH) + H.BTH.size
    for off in range(H.OFF_IPV4 + (not ipv6), end):
        for bit in range(8):
            flipped = bytearray(frame)
            flipped[off] ^= 1 << bit
            same = L.icrc(bytes(flipped)) == want
            assert same == bool(mask.get(off, 0) >> bit & 1), (off, bit)


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

"""hw/tx/packet_desc.py ``PacketDescriptors``: every field of the header and
payload descriptors against a Python reference: the RDMA WRITE opcodes of
the IB spec (FIRST 0x06, MIDDLE 0x07, LAST 0x08, LAST_IMM 0x09, ONLY 0x0A,
ONLY_IMM 0x0B), SE on a WITH_IMMEDIATE message's last packet, AckReq on a
last packet or a retransmission, the addresses + offset a cycle later
(wrapping at their widths), the rest from the WQE and the QP's settings; built with ``ipv6``, the
128-bit peer address from its four lanes and ``v6`` from ``qp_ip6``."""


import pytest
from amaranth.sim import Simulator

from hw.tx.packet_desc import PacketDescriptors
from hw.tx.qp_settings import cfg_lanes
from tests import seeds

ADDR_WIDTH = 48
WIDTHS = {"laddr": ADDR_WIDTH, "raddr": 64, "length": 32, "rkey": 32, "imm": 32, "with_imm": 1,
          "wqe_index": 16, "pkt_index": 24}


def opcode(first, last, with_imm):
    if first and last:
        return 0x0B if with_imm else 0x0A
    if first:
        return 0x06
    if last:
        return 0x09 if with_imm else 0x08
    return 0x07


@pytest.mark.parametrize("ipv6", [False, True], ids=["ipv4", "ipv6"])
def test_packet_descriptors(ipv6):
    dut = PacketDescriptors(ADDR_WIDTH, ipv6)
    rng = seeds.rng(3)
    lanes = {name: i for i, (name, _, _) in enumerate(cfg_lanes(ipv6))}
    seen = set()

    async def bench(ctx):
        prev = None  # (raddr + offset, laddr + offset) of the cycle before
        for _ in range(2000):
            wqe = {name: rng.getrandbits(w) for name, w in WIDTHS.items()}
            offset = rng.choice([0, 256, 4096, rng.getrandbits(32)])
            first, last, retx = rng.getrandbits(1), rng.getrandbits(1), rng.getrandbits(1)
            length, psn, ev = rng.getrandbits(13), rng.getrandbits(24), rng.getrandbits(16)
            settings = rng.getrandbits(32 * len(lanes))
            ctx.set(dut.wqe, wqe)
            for name, value in (("offset", offset), ("first", first), ("last", last),
                                ("retx", retx), ("length", length), ("psn", psn),
                                ("ev_value", ev), ("settings", settings)):
                ctx.set(getattr(dut, name), value)

            def lane(name, bits, settings=settings):
                return settings >> (32 * lanes[name]) & ((1 << bits) - 1)

            h, p = ctx.get(dut.hdr), ctx.get(dut.pay)
            want = {
                "opcode": opcode(first, last, wqe["with_imm"]),
                "se": wqe["with_imm"] & last, "ackreq": last | retx, "dqpn": lane("dqpn", 24),
                "psn": psn, "rkey": wqe["rkey"], "dma_len": wqe["length"], "imm": wqe["imm"],
                "length": length, "ev": ev,
                "dst_mac": lane("dst_mac_lo", 32) | lane("dst_mac_hi", 16) << 32,
                "dst_ip": lane("dst_ip", 32), "dscp": lane("dscp", 6),
            }
            if ipv6:
                want["dst_ip"] |= (lane("dst_ip6_1", 32) << 32 | lane("dst_ip6_2", 32) << 64
                                   | lane("dst_ip6_3", 32) << 96)
                want["v6"] = lane("ip6", 1)
            assert {k: getattr(h, k) for k in want} == want
            assert p.length == length
            if prev is not None:
                assert (h.va, p.laddr) == prev
            seen.add(want["opcode"])
            prev = ((wqe["raddr"] + offset) % (1 << 64),
                    (wqe["laddr"] + offset) % (1 << ADDR_WIDTH))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen == {0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B}

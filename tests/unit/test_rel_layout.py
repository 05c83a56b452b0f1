"""The reliability block's register layout as QPs grow (hw/reliability/registers.py
``region_bases``): the QP blocks, the QP6 words and the EV table never overlap,
the EV table starts at a power of two, up to 256 QPs nothing moves; and a
512-QP ReliabilityEngine, whose regions have moved, keeps every word of its
last QPs and EVs apart from its first ones, in Amaranth's simulator."""

import pytest
from amaranth.sim import Simulator

from hw.reliability import ReliabilityEngine
from hw.reliability.registers import (
    MAX_QPS,
    QP6_STRIDE,
    QP_BASE,
    QP_STRIDE,
    region_bases,
    register_map,
)

from .csrbus import csr_read, csr_write

pytestmark = pytest.mark.usefixtures("invariant_checks")


@pytest.mark.parametrize("num_qps", [2, 16, 256, 512, 1024, MAX_QPS])
def test_regions_apart(num_qps):
    qp6, ev = region_bases(num_qps)
    assert ev & (ev - 1) == 0
    assert QP_BASE + num_qps * QP_STRIDE <= qp6
    assert qp6 + num_qps * QP6_STRIDE <= ev
    if num_qps <= 256:
        assert (qp6, ev) == (0x6000, 0x8000)
    # RegisterMap refuses overlapping registers
    rmap = register_map(num_qps, 16, 64, ipv6=True, ev_width=64)
    assert rmap["ev"].addr(0) == ev and rmap["peer_v6"].addr(0) == qp6 + 12


def test_512_qps_words_apart():
    """Distinct values in QP 0's and QP 511's words (QP block, IPv6 words) and
    in the first and last EV entries read back as written."""
    nq, E = 512, 2
    dut = ReliabilityEngine(num_qps=nq, evs_per_qp=E, sack_bits=32, window=16,
                            clk_freq_hz=1_000_000, ipv6=True, csr_addr_width=17)
    rmap = register_map(nq, E, 16, ipv6=True)
    assert dut.ev_base == 0x10000
    writes = [("sq_base_lo", 0, 0x1000), ("sq_base_lo", nq - 1, 0x2000),
              ("sq_base_lo", 256, 0x3000), ("peer_ip", nq - 1, 0x0A000002),
              ("peer_ip6_2", 0, 0x11111111), ("peer_ip6_2", nq - 1, 0x22222222),
              ("ev", 0, 0xC000), ("ev", nq * E - 1, 0xC123), ("ev", 256 * E, 0xC456)]

    async def bench(ctx):
        await ctx.tick().repeat(nq + 40)  # the records' clear after reset
        for name, index, value in writes:
            await csr_write(ctx, dut.csr, rmap[name].addr(index), value)
            await ctx.tick().repeat(3)
        for name, index, value in writes:
            got = await csr_read(ctx, dut.csr, rmap[name].addr(index),
                                 latency=ReliabilityEngine.CSR_READ_LATENCY)
            assert got & 0xFFFF_FFFF == value, (name, index, hex(got))
        # a QP word not written reads 0
        got = await csr_read(ctx, dut.csr, rmap["sq_base_lo"].addr(1),
                             latency=ReliabilityEngine.CSR_READ_LATENCY)
        assert got == 0

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()

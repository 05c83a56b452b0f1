"""AXI4Arbiter: three cocotbext-axi masters share one AxiRam through the arbiter."""

import random

import cocotb
import pytest
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiBus, AxiMaster, AxiRam

from sim.cocotb_runner import run_cocotb
from tests import seeds

NUM_MASTERS = 3
REGION = 0x4000  # bytes of RAM per master


class TB:
    def __init__(self, dut):
        self.dut = dut
        cocotb.start_soon(Clock(dut.clk, 8, unit="ns").start())
        self.masters = [
            AxiMaster(AxiBus.from_prefix(dut, f"s{i}_axi", bus_separator="__"), dut.clk, dut.rst)
            for i in range(NUM_MASTERS)
        ]
        self.ram = AxiRam(AxiBus.from_prefix(dut, "m_axi", bus_separator="__"), dut.clk, dut.rst,
                          size=NUM_MASTERS * REGION)

    def set_backpressure(self, seed):
        rng = seeds.rng(seed)

        def pauses():
            while True:
                yield rng.random() < 0.3

        for ch in (self.ram.write_if.aw_channel, self.ram.write_if.w_channel,
                   self.ram.read_if.ar_channel, self.ram.read_if.r_channel):
            ch.set_pause_generator(pauses())
        self.ram.write_if.b_channel.set_pause_generator(pauses())

    async def reset(self):
        self.dut.rst.value = 1
        for _ in range(4):
            await RisingEdge(self.dut.clk)
        self.dut.rst.value = 0
        for _ in range(2):
            await RisingEdge(self.dut.clk)


async def _worker(tb, index, rng, ops):
    """Random writes then read-backs inside this master's own region."""
    master = tb.masters[index]
    base = index * REGION
    shadow = bytearray(REGION)
    for _ in range(ops):
        offset = rng.randrange(REGION - 600)
        length = rng.randrange(1, 600)
        data = bytes(rng.randrange(256) for _ in range(length))
        await master.write(base + offset, data, awid=rng.randrange(16))
        shadow[offset : offset + length] = data
        offset = rng.randrange(REGION - 600)
        length = rng.randrange(1, 600)
        got = await master.read(base + offset, length, arid=rng.randrange(16))
        assert bytes(got.data) == bytes(shadow[offset : offset + length]), (index, offset, length)
    return shadow


@cocotb.test(timeout_time=5, timeout_unit="ms")
async def concurrent_masters(dut):
    tb = TB(dut)
    tb.set_backpressure(1)
    await tb.reset()
    rng = seeds.rng(2)
    tasks = [cocotb.start_soon(_worker(tb, i, random.Random(rng.random()), 40))
             for i in range(NUM_MASTERS)]
    shadows = [await t for t in tasks]
    for i, shadow in enumerate(shadows):
        assert tb.ram.read(i * REGION, REGION) == bytes(shadow), i


@cocotb.test(timeout_time=5, timeout_unit="ms")
async def fairness_under_contention(dut):
    """Three masters each post 20 back-to-back 1-beat writes; grants interleave."""
    tb = TB(dut)
    await tb.reset()
    order = []

    async def watch():
        while True:
            await RisingEdge(dut.clk)
            if dut.m_axi__awvalid.value and dut.m_axi__awready.value:
                order.append(int(dut.m_axi__awid.value) >> 4)

    cocotb.start_soon(watch())
    ops = [tb.masters[i].init_write(i * REGION + 8 * k, bytes([i]) * 8)
           for k in range(20) for i in range(NUM_MASTERS)]
    for op in ops:
        await op.wait()
    assert sorted(order) == sorted([i for i in range(NUM_MASTERS)] * 20)
    # While all three are backlogged no master gets two grants in a row.
    busy = order[: 3 * 15]
    assert all(a != b for a, b in zip(busy[:-1], busy[1:], strict=True)), busy


@pytest.mark.parametrize("testcase", ["concurrent_masters", "fairness_under_contention"])
def test_axi_arbiter(testcase):
    from hw.axi_arbiter import AXI4Arbiter

    run_cocotb(name="axi_arbiter_3", elaborate=lambda: AXI4Arbiter(NUM_MASTERS, 32, 64, 4),
               toplevel="axi_arbiter", test_module="tests.hw.test_axi_arbiter", testcase=testcase)


def test_axi_arbiter_refuses_a_shallow_w_order_fifo():
    """At 2 entries an AW taken right after another would lose its W order entry."""
    from hw.axi_arbiter import AXI4Arbiter

    with pytest.raises(ValueError, match="w_fifo_depth must be at least 4, not 2"):
        AXI4Arbiter(NUM_MASTERS, 32, 64, 4, w_fifo_depth=2)
    AXI4Arbiter(NUM_MASTERS, 32, 64, 4, w_fifo_depth=4)

"""hw.rx.dma.RxDmaResponses alone in Amaranth's simulator: entries and B
responses in, one report per notify entry out, in entry order, ``ok`` the AND
of its responses' OKAY (1 for an entry without bursts), under random B and
``done`` back-pressure; the latency from the last B to ``done``."""


import pytest
from amaranth.sim import Simulator

from hw.axi import AXI_RESP_OKAY
from hw.rx.dma import RxDmaResponses
from tests import seeds

AXI_RESP_SLVERR = 2


def _entries(rng, n):
    out = []
    for tag in range(n):
        none = rng.random() < 0.2
        out.append({"tag": tag % 16, "notify": int(none or rng.random() < 0.7), "none": int(none),
                    "last": 0 if none else rng.randrange(3)})
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_reports_in_order_with_status(seed):
    rng = seeds.rng(seed)
    dut = RxDmaResponses(tag_width=4, max_bursts=20, depth=4)
    entries = _entries(rng, 60)
    # the responses of each entry with bursts, and the report each should give
    resps, want = [], []
    for e in entries:
        if e["none"]:
            want.append((e["tag"], 1))
            continue
        rs = [AXI_RESP_SLVERR if rng.random() < 0.15 else AXI_RESP_OKAY
              for _ in range(e["last"] + 1)]
        resps += rs
        if e["notify"]:
            want.append((e["tag"], int(all(r == AXI_RESP_OKAY for r in rs))))
    got = []

    async def writer(ctx):
        for e in entries:
            while not ctx.get(dut.entry.ready):
                await ctx.tick()
            ctx.set(dut.entry.valid, 1)
            for k, v in e.items():
                ctx.set(getattr(dut.entry.payload, k), v)
            await ctx.tick()
            ctx.set(dut.entry.valid, 0)
            for _ in range(rng.randrange(3)):
                await ctx.tick()

    async def bus(ctx):
        for r in resps:
            ctx.set(dut.bvalid, 1)
            ctx.set(dut.bresp, r)
            await ctx.tick().until(dut.bready)
            ctx.set(dut.bvalid, 0)
            for _ in range(rng.randrange(2)):
                await ctx.tick()

    async def sink(ctx):
        for _ in range(3000):
            ready = rng.random() < 0.6
            ctx.set(dut.done.ready, ready)
            if ready and ctx.get(dut.done.valid):
                got.append((ctx.get(dut.done.payload.tag), ctx.get(dut.done.payload.ok)))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(writer, background=True)
    sim.add_testbench(bus, background=True)
    sim.add_testbench(sink)
    sim.run()
    assert got == want


def test_latency_from_last_b_to_done():
    dut = RxDmaResponses(tag_width=4, max_bursts=20, depth=4)
    cycles = {}

    async def bench(ctx):
        ctx.set(dut.done.ready, 1)
        ctx.set(dut.entry.valid, 1)
        ctx.set(dut.entry.payload.tag, 5)
        ctx.set(dut.entry.payload.notify, 1)
        ctx.set(dut.entry.payload.last, 1)
        await ctx.tick()
        ctx.set(dut.entry.valid, 0)
        ctx.set(dut.bvalid, 1)
        ctx.set(dut.bresp, AXI_RESP_OKAY)
        n = 0
        seen = 0
        while True:
            bready = ctx.get(dut.bready)
            await ctx.tick()
            n += 1
            if bready:
                seen += 1
                if seen == 2:
                    ctx.set(dut.bvalid, 0)
                    cycles["last_b"] = n
            if ctx.get(dut.done.valid):
                cycles["done"] = n
                assert ctx.get(dut.done.payload.tag) == 5 and ctx.get(dut.done.payload.ok) == 1
                break
            assert n < 20

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    # the report is registered the cycle after the last B, enters its queue, then leaves it
    assert cycles["done"] - cycles["last_b"] == 2

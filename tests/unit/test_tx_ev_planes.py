"""TX's EV table (hw/tx/ev.py) with planes, in Amaranth's simulator: after
reset every QP's EV i is on plane i mod num_planes; a controller write sets an
entry's plane with its value and state, read back on the CSR port and on the
sequencer's port a cycle after the address; a plane the NIC lacks is kept as
written (the plane split drops its frames); with one plane nothing is stored.
``good`` holds the GOOD entries whose plane's link is up (a plane the NIC
lacks: down), a cycle after ``link_up`` moves, and ``link_rose`` pulses as a
link comes up."""

import pytest
from amaranth.sim import Simulator

from hw.protocol import PLANE_BITS
from hw.tx.ev import EvTable, default_ev_plane, default_ev_value
from tests import seeds


async def _wait_ready(ctx, dut):
    await ctx.tick().until(dut.bus.ready)


async def _read_seq(ctx, dut, sel):
    ctx.set(dut.bus.val_sel, sel)
    await ctx.tick()
    return ctx.get(dut.bus.value), ctx.get(dut.bus.plane)


async def _write_entry(ctx, dut, sel, value, plane):
    """A controller write of entry ``sel`` (GOOD), then 2 idle cycles: writes 3
    cycles apart, as the CSR bridge issues them."""
    ctx.set(dut.bus.csr_sel, sel)
    ctx.set(dut.bus.csr_value, value)
    ctx.set(dut.bus.csr_plane, plane)
    ctx.set(dut.bus.csr_state, 0)
    ctx.set(dut.bus.csr_we, 1)
    await ctx.tick()
    ctx.set(dut.bus.csr_we, 0)
    await ctx.tick().repeat(2)


async def _read_csr(ctx, dut, sel):
    ctx.set(dut.bus.csr_sel, sel)
    await ctx.tick()
    return ctx.get(dut.bus.csr_r_value), ctx.get(dut.bus.csr_r_plane)


@pytest.mark.parametrize("num_qps, evs, planes", [(4, 8, 2), (2, 16, 3), (4, 4, 8), (2, 8, 1)])
def test_ev_planes(num_qps, evs, planes):
    dut = EvTable(num_qps, evs, planes)
    rng = seeds.rng(num_qps * 100 + evs * 10 + planes)
    eb = (evs - 1).bit_length()
    want = {(q << eb) | i: (default_ev_value(i), default_ev_plane(i, planes) if planes > 1 else 0)
            for q in range(num_qps) for i in range(evs)}

    async def bench(ctx):
        await _wait_ready(ctx, dut)
        for sel, entry in want.items():
            assert await _read_seq(ctx, dut, sel) == entry, f"default of entry {sel}"
        # planes 0..7, some beyond the NIC's
        for _ in range(40):
            sel = rng.choice(list(want))
            value, plane = rng.getrandbits(16), rng.randrange(1 << PLANE_BITS)
            await _write_entry(ctx, dut, sel, value, plane)
            want[sel] = (value, plane if planes > 1 else 0)
            assert await _read_csr(ctx, dut, sel) == want[sel]
        for sel, entry in want.items():
            assert await _read_seq(ctx, dut, sel) == entry, f"entry {sel}"

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def test_num_planes_checked():
    with pytest.raises(ValueError, match=r"num_planes must be in 1\.\.8, not 9"):
        EvTable(4, 4, 9)
    with pytest.raises(ValueError, match=r"num_planes must be in 1\.\.8, not 0"):
        EvTable(4, 4, 0)


@pytest.mark.parametrize("num_qps, evs, planes", [(4, 8, 2), (2, 16, 3), (4, 4, 8)])
def test_good_only_on_live_planes(num_qps, evs, planes):
    dut = EvTable(num_qps, evs, planes)
    rng = seeds.rng(f"live-{num_qps}-{evs}-{planes}")
    eb = (evs - 1).bit_length()
    plane_of = {(q, i): default_ev_plane(i, planes) for q in range(num_qps) for i in range(evs)}
    checked = {"rows": 0, "rose": 0}

    async def bench(ctx):
        await _wait_ready(ctx, dut)
        links = (1 << planes) - 1
        for step in range(150):
            if rng.random() < 0.5:  # a controller write: a plane, GOOD
                q, i = rng.randrange(num_qps), rng.randrange(evs)
                plane = rng.randrange(1 << PLANE_BITS)
                await _write_entry(ctx, dut, q << eb | i, rng.getrandbits(16), plane)
                plane_of[(q, i)] = plane
            if rng.random() < 0.3:
                new = rng.getrandbits(planes)
                ctx.set(dut.link_up, new)
                await ctx.tick()
                assert ctx.get(dut.bus.link_rose) == 0  # it pulsed in the cycle of the change
                checked["rose"] += bool(new & ~links)
                links = new
            q = rng.randrange(num_qps)
            ctx.set(dut.bus.good_qp, q)
            await ctx.tick()
            want = sum(1 << i for i in range(evs)
                       if plane_of[(q, i)] < planes and links >> plane_of[(q, i)] & 1)
            assert ctx.get(dut.bus.good) == want, f"step {step}: QP {q}"
            checked["rows"] += 1

    async def rose(ctx):
        prev = (1 << planes) - 1
        async for _, _, links, pulse in ctx.tick().sample(dut.link_up, dut.bus.link_rose):
            # sampled at the edge: the pulse of the cycle the link rose
            assert pulse == bool(links & ~prev), (links, prev, pulse)
            prev = links

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.add_testbench(rose, background=True)
    sim.run()
    assert checked["rose"] > 3

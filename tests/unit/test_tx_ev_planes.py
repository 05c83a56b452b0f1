"""TX's EV table (hw/tx/ev.py) with planes, in Amaranth's simulator: after
reset every QP's EV i is on plane i mod num_planes; a controller write sets an
entry's plane with its value and state, read back on the CSR port and on the
sequencer's port a cycle after the address; a plane the NIC lacks is kept as
written (the plane split drops its frames); with one plane nothing is stored."""

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
        # writes, 3 cycles apart as the CSR bridge issues them; planes 0..7, some
        # beyond the NIC's
        for _ in range(40):
            sel = rng.choice(list(want))
            value, plane = rng.getrandbits(16), rng.randrange(1 << PLANE_BITS)
            ctx.set(dut.bus.csr_sel, sel)
            ctx.set(dut.bus.csr_value, value)
            ctx.set(dut.bus.csr_plane, plane)
            ctx.set(dut.bus.csr_state, 0)
            ctx.set(dut.bus.csr_we, 1)
            await ctx.tick()
            ctx.set(dut.bus.csr_we, 0)
            await ctx.tick().repeat(2)
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

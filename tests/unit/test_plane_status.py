"""PlaneStatus (hw/nic/plane_status.py), the ``planes`` register block, in
Amaranth's simulator against its register map: ``link_up`` reads the input,
``link_changes`` gathers every plane whose link moved until a read clears the
bits it returned (a change in the read's cycle stays for the next read) and
drives ``irq`` meanwhile; each plane's counters count exactly their strobes,
``absent_drops`` its own, and no strobe reaches another counter."""

import pytest
from amaranth.sim import Simulator

from hw.counters import CounterBank
from hw.nic.plane_status import PlaneStatus, plane_register_map
from tests import seeds
from tests.unit.csrbus import csr_read

pytestmark = pytest.mark.usefixtures("invariant_checks")


def test_refuses_one_plane():
    with pytest.raises(ValueError, match="num_planes must be in 2..8"):
        PlaneStatus(1)


def test_map_layout():
    rm = plane_register_map(4)
    assert rm["tx_frames"].addr(3) == 0x50 and rm["rx_frames"].addr(1) == 0x34
    assert rm["link_drops"].addr(0) == 0x28 and rm["absent_drops"].offset == 0x2C


@pytest.mark.parametrize("n", [2, 3, 8])
def test_links_events_and_counters(n):
    rng = seeds.rng(f"plane_status_{n}")
    dut = PlaneStatus(n)
    rm = dut.register_map
    lag = CounterBank.lag(4 * n)
    names = ("tx_frame", "rx_frame", "link_drop")
    counts = {name: [0] * n for name in names}
    absent = 0
    checks = {"events": 0, "irq_seen": 0}

    async def bench(ctx):
        nonlocal absent
        link = (1 << n) - 1
        pending = 0  # the model of link_changes
        for step in range(300):
            # strobes of random planes this cycle
            for name in names:
                bits = rng.getrandbits(n) if rng.random() < 0.5 else 0
                ctx.set(getattr(dut, name), bits)
                for p in range(n):
                    counts[name][p] += bits >> p & 1
            drop = rng.random() < 0.2
            ctx.set(dut.absent_drop, drop)
            absent += drop
            if rng.random() < 0.1:
                new = rng.getrandbits(n)
                pending |= new ^ link
                link = new
                ctx.set(dut.link_up, link)
            await ctx.tick()
            for name in names:
                ctx.set(getattr(dut, name), 0)
            ctx.set(dut.absent_drop, 0)
            if rng.random() < 0.15:
                # the change of the cycle before this read is in it
                assert ctx.get(dut.irq) == (pending != 0)
                checks["irq_seen"] += ctx.get(dut.irq)
                got = await csr_read(ctx, dut.csr, rm["link_changes"].offset)
                assert got == pending, f"step {step}: link_changes 0x{got:x}, not 0x{pending:x}"
                checks["events"] += got != 0
                pending = 0
                assert await csr_read(ctx, dut.csr, rm["link_up"].offset) == link
        for _ in range(lag):
            await ctx.tick()
        for name in names:
            reg = rm[name + "s"]
            for p in range(n):
                got = await csr_read(ctx, dut.csr, reg.addr(p))
                assert got == counts[name][p], f"{reg.name}[{p}] {got}, not {counts[name][p]}"
        # the fourth word of planes other than 0 reads 0
        for p in range(1, n):
            assert await csr_read(ctx, dut.csr, rm["tx_frames"].addr(p) + 12) == 0
        assert await csr_read(ctx, dut.csr, rm["absent_drops"].offset) == absent
        assert not ctx.get(dut.irq) or await csr_read(ctx, dut.csr, rm["link_changes"].offset)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert checks["events"] > 3 and checks["irq_seen"] > 3  # the test saw events


def test_change_in_the_read_cycle_is_kept():
    dut = PlaneStatus(2)
    rm = dut.register_map

    async def bench(ctx):
        ctx.set(dut.link_up, 0b01)  # plane 1 goes down
        await ctx.tick()
        await ctx.tick()
        # a read strobed in the cycle plane 0 goes down: it returns plane 1's
        # change; plane 0's is seen the cycle after and stays
        ctx.set(dut.link_up, 0b00)
        assert await csr_read(ctx, dut.csr, rm["link_changes"].offset) == 0b10
        assert ctx.get(dut.irq)
        assert await csr_read(ctx, dut.csr, rm["link_changes"].offset) == 0b01
        await ctx.tick()
        assert not ctx.get(dut.irq)
        assert await csr_read(ctx, dut.csr, rm["link_changes"].offset) == 0

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()

"""hw.board.mdio.MDIOMaster against a Python clause-22 PHY model in
Amaranth's simulator: writes land in the PHY's registers, reads return
them, the frame has its preamble, ST, OP, addresses and turnaround, and
the master lets go of the line for the PHY's half of a read."""

from amaranth.sim import Simulator

from hw.board.mdio import MDIOMaster
from tests.models.mdio_phy import PHYModel

DIVISOR = 2


def test_mdio_read_write():
    dut = MDIOMaster(DIVISOR)
    phy = PHYModel(phy_addr=0)
    results = []

    async def line_model(ctx):
        prev_mdc = 0
        async for _, _, mdc, o, oe in ctx.tick().sample(dut.mdc, dut.mdio_o, dut.mdio_oe):
            line = o if oe else (1 if phy.drive is None else phy.drive)
            if oe and phy.drive is not None:
                raise AssertionError("both ends drive MDIO")
            if mdc and not prev_mdc:
                phy.rising_edge(line, bool(oe))
            ctx.set(dut.mdio_i, 1 if phy.drive is None else phy.drive)
            prev_mdc = mdc

    async def access(ctx, reg, *, read, wdata=0, phy_addr=0):
        ctx.set(dut.phy, phy_addr)
        ctx.set(dut.reg, reg)
        ctx.set(dut.wdata, wdata)
        ctx.set(dut.read, read)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        await ctx.tick().until(~dut.busy)
        return ctx.get(dut.rdata)

    async def host(ctx):
        results.append(await access(ctx, 21, read=True))
        await access(ctx, 22, read=False, wdata=2)  # page 2
        await access(ctx, 21, read=False, wdata=0x1026)  # RX delay on, TX delay off
        results.append(await access(ctx, 21, read=True))
        results.append(await access(ctx, 22, read=True))
        await access(ctx, 5, read=False, wdata=0xBEEF, phy_addr=3)  # another PHY

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(host)
    sim.add_process(line_model)
    sim.run()
    assert results == [0x1006, 0x1026, 2]
    assert phy.regs == {21: 0x1026, 22: 2}
    assert phy.frames == [(2, 0, 21), (1, 0, 22), (1, 0, 21), (2, 0, 21), (2, 0, 22), (1, 3, 5)]
    assert phy.bad_turnaround == 0

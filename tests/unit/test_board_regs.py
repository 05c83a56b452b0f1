"""hw.board.regs.MACRegisters in Amaranth's simulator: identity, control and
counters read back at the offsets the register map documents."""

from amaranth.sim import Simulator

from hw.board.mac import STATS
from hw.board.regs import MAC_TYPE_ID, MAC_VERSION, MACRegisters


def test_mac_registers():
    dut = MACRegisters(data_width=64, max_frame=9018, next_offset=0x100)
    reg = dut.map
    results = {}

    async def access(ctx, addr, value=None):
        ctx.set(dut.csr.addr, addr)
        if value is None:
            ctx.set(dut.csr.r_stb, 1)
            await ctx.tick()
            ctx.set(dut.csr.r_stb, 0)
            return ctx.get(dut.csr.r_data)
        ctx.set(dut.csr.w_data, value)
        ctx.set(dut.csr.w_stb, 1)
        await ctx.tick()
        ctx.set(dut.csr.w_stb, 0)

    async def testbench(ctx):
        for i, (name, _) in enumerate(STATS):
            ctx.set(getattr(dut.stats, name), 0x1000 * (i + 1) + i)
        results["id"] = await access(ctx, reg["ID"].offset)
        results["next"] = await access(ctx, reg["NEXT"].offset)
        results["params"] = await access(ctx, reg["PARAMS"].offset)
        results["ctrl0"] = await access(ctx, reg["CTRL"].offset)
        await access(ctx, reg["CTRL"].offset, 0b11)
        results["pins"] = (ctx.get(dut.mii_select), ctx.get(dut.rx_pass_bad))
        results["ctrl1"] = await access(ctx, reg["CTRL"].offset)
        await access(ctx, reg["CTRL"].offset, 0b10)
        results["pins2"] = (ctx.get(dut.mii_select), ctx.get(dut.rx_pass_bad))
        results["counters"] = [
            await access(ctx, reg[f"CNT_{name.upper()}"].offset) for name, _ in STATS
        ]
        results["hole"] = await access(ctx, 0xFC)
        # An MDIO write starts the access a cycle later; a read strobed in
        # between already reads busy.
        await access(ctx, reg["MDIO"].offset, 1 << 26 | 3 << 21)
        results["mdio_busy"] = await access(ctx, reg["MDIO"].offset) >> 31

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()
    assert results["id"] == (MAC_TYPE_ID << 16) | MAC_VERSION
    assert results["next"] == 0x100
    assert results["params"] == (9018 << 16) | 64
    assert results["ctrl0"] == 0 and results["ctrl1"] == 0b11
    assert results["pins"] == (1, 1) and results["pins2"] == (0, 1)
    assert results["counters"] == [0x1000 * (i + 1) + i for i in range(len(STATS))]
    assert results["hole"] == 0
    assert results["mdio_busy"] == 1
    assert "CNT_RX_BAD_FCS" in reg.markdown()

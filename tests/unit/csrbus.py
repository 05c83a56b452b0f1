"""CSR bus accesses (hw/csr.py ``CSRBusSignature``) from an Amaranth simulator testbench."""


async def csr_write(ctx, bus, addr, value):
    """One write strobe of ``value`` to ``addr``."""
    ctx.set(bus.addr, addr)
    ctx.set(bus.w_data, value)
    ctx.set(bus.w_stb, 1)
    await ctx.tick()
    ctx.set(bus.w_stb, 0)


async def csr_read(ctx, bus, addr, latency=2):
    """One read strobe at ``addr``; the value on ``r_data`` ``latency`` cycles after
    it (the block's read latency)."""
    ctx.set(bus.addr, addr)
    ctx.set(bus.r_stb, 1)
    await ctx.tick()
    ctx.set(bus.r_stb, 0)
    for _ in range(latency - 1):
        await ctx.tick()
    return ctx.get(bus.r_data)

"""CSR bus accesses (hw/csr.py ``CSRBusSignature``) and AXI4-Lite transactions from an
Amaranth simulator testbench."""


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


async def axil_write(ctx, axil, addr, data, strb=0xF):
    ctx.set(axil.awaddr, addr)
    ctx.set(axil.awvalid, 1)
    ctx.set(axil.wdata, data)
    ctx.set(axil.wstrb, strb)
    ctx.set(axil.wvalid, 1)
    ctx.set(axil.bready, 1)
    await ctx.tick().until(axil.awready)
    ctx.set(axil.awvalid, 0)
    ctx.set(axil.wvalid, 0)
    (resp,) = await ctx.tick().sample(axil.bresp).until(axil.bvalid)
    ctx.set(axil.bready, 0)
    return resp


async def axil_read(ctx, axil, addr):
    ctx.set(axil.araddr, addr)
    ctx.set(axil.arvalid, 1)
    ctx.set(axil.rready, 1)
    await ctx.tick().until(axil.arready)
    ctx.set(axil.arvalid, 0)
    (data,) = await ctx.tick().sample(axil.rdata).until(axil.rvalid)
    ctx.set(axil.rready, 0)
    return data

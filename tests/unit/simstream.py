"""Stream transfers (amaranth.lib.stream) from an Amaranth simulator testbench."""


async def send_record(ctx, port, values, settle=0):
    """Drive one record on ``port``: each ``(signal, value)`` of ``values`` set
    (fields of ``port.payload``), ``valid`` held until the sink is ready, then
    ``settle`` cycles more."""
    for signal, value in values:
        ctx.set(signal, value)
    ctx.set(port.valid, 1)
    await ctx.tick().until(port.ready)
    ctx.set(port.valid, 0)
    if settle:
        await ctx.tick().repeat(settle)

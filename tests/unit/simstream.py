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


async def collect_frames(ctx, valid, ready, data, keep, last, got, count, *, seed, p_ready=0.7):
    """Take ``count`` frames of a packed byte stream into ``got`` (bytes each),
    ``ready`` high with probability ``p_ready`` per cycle (``seed``'s
    sequence): ``valid``/``ready``/``data``/``keep``/``last`` are the
    stream's signals (an ``amaranth.lib.stream`` port's or an AXI-Stream
    one's). Every beat's ``keep`` must be packed (ones from lane 0 up)."""
    from tests import seeds

    rng = seeds.rng(seed)
    nbytes = len(keep)
    frame = b""
    while len(got) < count:
        take = rng.random() < p_ready
        ctx.set(ready, take)
        _, _, v, d, k, e = await ctx.tick().sample(valid, data, keep, last)
        if v and take:
            n = bin(k).count("1")
            assert k == (1 << n) - 1, "keep not packed"
            frame += d.to_bytes(nbytes, "little")[:n]
            if e:
                got.append(frame)
                frame = b""

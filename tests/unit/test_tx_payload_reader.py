"""Amaranth-simulator tests of the TX PayloadReader (hw/tx/dma.py): its AXI
bursts and ``info`` entries against a reference split of each payload at the
4 KiB / 256-beat boundary, with random backpressure, and its cycles (2 from a
descriptor to its first request, one burst per cycle)."""


import pytest
from amaranth.sim import Simulator

from hw.tx.dma import AXI_BOUNDARY, AXI_MAX_BEATS, PayloadReader
from tests import seeds

ADDR_WIDTH = 32


def reference_bursts(laddr, length, nbytes):
    """(beat-aligned address, beats - 1) of each burst of one payload."""
    boundary = min(AXI_BOUNDARY, AXI_MAX_BEATS * nbytes)
    out = []
    start, end = laddr, laddr + length  # bytes [start, end)
    while start < end:
        stop = min(end, (start // boundary + 1) * boundary)
        first_beat = start // nbytes
        last_beat = (stop - 1) // nbytes
        out.append(((first_beat * nbytes) % (1 << ADDR_WIDTH), last_beat - first_beat))
        start = stop
    return out


def cases(nbytes, rng):
    boundary = min(AXI_BOUNDARY, AXI_MAX_BEATS * nbytes)
    out = [(0x1000, 0), (0x1003, 1), (0, 4096), (5, 4096), (boundary - 1, 2),
           (boundary - 3, 4096), (boundary - nbytes, nbytes), (3 * boundary - 7, 8191),
           ((1 << ADDR_WIDTH) - 5, 20), (boundary - 1, 1), (boundary, boundary + 1)]
    out += [(rng.randrange(1 << 16), n) for n in (nbytes - 1, nbytes, nbytes + 1,
                                                   2 * nbytes, 2 * nbytes + 1)]
    for _ in range(60):
        base = rng.choice([rng.randrange(1 << ADDR_WIDTH),
                           rng.randrange(4) * boundary - rng.randrange(2 * nbytes) % boundary])
        length = rng.choice([0, 1, rng.randrange(1, 64), rng.randrange(1, 4097),
                             boundary - rng.randrange(3), rng.randrange(1, 8192)])
        out.append((base % (1 << ADDR_WIDTH), length))
    return out


def run(w, descs, ready_p, seed):
    dut = PayloadReader(w, max_outstanding=4, addr_width=ADDR_WIDTH)
    nbytes = w // 8
    reqs, infos, stamps = [], [], {"desc": [], "req": []}
    expected = sum(1 for _, n in descs if n)

    async def feed(ctx):
        cycle = 0
        for laddr, length in descs:
            ctx.set(dut.desc.payload.laddr, laddr)
            ctx.set(dut.desc.payload.length, length)
            ctx.set(dut.desc.valid, 1)
            while True:
                _, _, ready = await ctx.tick().sample(dut.desc.ready)
                cycle += 1
                if ready:
                    break
            stamps["desc"].append(cycle)
            ctx.set(dut.desc.valid, 0)

    async def take_req(ctx):
        rng = seeds.rng(seed)
        cycle = 0
        while True:
            ready = rng.random() < ready_p
            ctx.set(dut.req.ready, ready)
            _, _, valid, addr, ln = await ctx.tick().sample(
                dut.req.valid, dut.req.payload.addr, dut.req.payload.len)
            cycle += 1
            if valid and ready:
                reqs.append((addr, ln))
                stamps["req"].append(cycle)

    async def take_info(ctx):
        rng = seeds.rng(seed + 1)
        while True:
            ready = rng.random() < ready_p
            ctx.set(dut.info.ready, ready)
            _, _, valid, lane, length, one, two = await ctx.tick().sample(
                dut.info.valid, dut.info.payload.lane, dut.info.payload.length,
                dut.info.payload.one_beat, dut.info.payload.two_beats)
            if valid and ready:
                infos.append((lane, length, one, two))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(feed)
    sim.add_testbench(take_req, background=True)
    sim.add_testbench(take_info, background=True)
    sim.run_until(1e-8 * (200 + 4 * sum(len(reference_bursts(a, n, nbytes)) + 2
                                        for a, n in descs)))
    want = [b for a, n in descs for b in reference_bursts(a, n, nbytes)]
    assert reqs == want
    assert infos[:expected] == [(a % nbytes, n, int(n <= nbytes), int(nbytes < n <= 2 * nbytes))
                                for a, n in descs if n]
    assert len(infos) == expected
    return stamps


@pytest.mark.parametrize("w", [64, 128, 512])
@pytest.mark.parametrize("ready_p", [1.0, 0.4])
def test_payload_reader_bursts(w, ready_p):
    """Bursts split at the boundary (2 KiB at 64 bits, 4 KiB above), beat-aligned,
    up to 4 boundaries crossed in one payload, zero lengths skipped, addresses
    wrapping at ``addr_width``; ``info`` one entry per non-empty payload."""
    rng = seeds.rng(w)
    run(w, cases(w // 8, rng), ready_p, seed=w)


def test_payload_reader_cycles():
    """With every ready high: a descriptor's first request 2 cycles after it is
    taken (its register, then IDLE), its bursts on consecutive cycles, and the
    next packet's first burst 2 cycles after the last one of the packet before."""
    w, nbytes = 64, 8
    descs = [(0x100, 100), (2048 - 3, 4096), (0x7, 8), (0x10, 0), (0x20, 1)]
    stamps = run(w, descs, 1.0, seed=0)
    d, r = stamps["desc"], stamps["req"]
    counts = [len(reference_bursts(a, n, nbytes)) for a, n in descs]
    assert counts == [1, 3, 1, 0, 1]
    # packet 0: taken at d[0], first burst at d[0] + 2
    assert r[0] == d[0] + 2
    # packet 1: its three bursts back to back, starting 2 cycles after packet 0's
    assert r[1:4] == [r[0] + 2, r[0] + 3, r[0] + 4]
    assert r[4] == r[3] + 2
    # the empty payload costs an IDLE cycle
    assert r[5] == r[4] + 3

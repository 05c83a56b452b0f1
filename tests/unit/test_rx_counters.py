"""The RX counters through the CSR bus (RxRegisters and its CounterBank).

Every counter's strobe is driven at random while reads of random counters
are strobed every cycle: each read must hold every event strobed at least
``COUNTER_LAG`` cycles before its ``r_stb`` and none after it, at the
counter's own address (``CNT_<name>`` of the register map); an address of
the counters' slot past the last counter reads 0, and the other registers
read as before among the counter reads."""


from amaranth.sim import Simulator

from hw.rx.regs import COUNTER_BASE, COUNTER_LAG, COUNTERS, RxRegisters
from tests import seeds

from .csrbus import csr_read, csr_write


def test_counters_count_every_strobe_at_their_address():
    rng = seeds.rng(11)
    dut = RxRegisters(num_qps=2, num_mrs=2, addr_width=32)
    rmap = dut.map
    lat = dut.CSR_READ_LATENCY
    names = list(COUNTERS)
    parser = [n for n in names if n.startswith("parser_")]
    others = [n for n in names if not n.startswith("parser_")]
    assert [rmap[f"CNT_{n.upper()}"].offset for n in names] == [
        COUNTER_BASE + 4 * i for i in range(len(names))]
    history = {n: [0] for n in names}  # history[n][t]: events of n before cycle t
    reads = []  # (r_stb cycle, counter, value)
    cycles = 900

    async def bench(ctx):
        pending = []  # (answer cycle, r_stb cycle, counter)
        for t in range(cycles + COUNTER_LAG + len(names) + lat):
            busy = t < cycles
            density = (0.1, 0.6, 1.0)[(t // 150) % 3] if busy else 0.0
            fired = {n for n in names if rng.random() < density}
            for n in names:
                history[n].append(history[n][-1] + (n in fired))
            ctx.set(dut.parser_events, sum(1 << i for i, n in enumerate(parser) if n in fired))
            for n in others:
                ctx.set(dut.events[n], n in fired)
            i = rng.randrange(len(names)) if busy else (t - cycles) % len(names)
            ctx.set(dut.csr.addr, COUNTER_BASE + 4 * i)
            ctx.set(dut.csr.r_stb, 1)
            pending.append((t + lat, t, names[i]))
            await ctx.tick()
            while pending and pending[0][0] == t + 1:
                _, stb, name = pending.pop(0)
                reads.append((stb, name, ctx.get(dut.csr.r_data)))
        ctx.set(dut.csr.r_stb, 0)
        ctx.set(dut.parser_events, 0)
        for n in others:
            ctx.set(dut.events[n], 0)
        await ctx.tick()
        reads.append(("past", None, await csr_read(
            ctx, dut.csr, COUNTER_BASE + 4 * len(names), lat)))
        await csr_write(ctx, dut.csr, rmap["OWN_IP"].addr(), 0x0A00_0001)
        reads.append(("own_ip", None, await csr_read(ctx, dut.csr, rmap["OWN_IP"].addr(), lat)))
        reads.append(("dscp", None, await csr_read(ctx, dut.csr, rmap["TRIM_DSCP"].addr(), lat)))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    extras = {stb: value for stb, name, value in reads if name is None}
    assert extras == {"past": 0, "own_ip": 0x0A00_0001, "dscp": 0x3F}
    settled = set()
    for stb, name, value in reads:
        if name is None:
            continue
        h = history[name]
        low = h[max(0, stb - COUNTER_LAG + 1)]  # every event at least COUNTER_LAG old
        high = h[stb + 1]  # none strobed after r_stb
        assert low <= value <= high, (
            f"r_stb cycle {stb}: {name} read {value}, events {low}..{high}")
        if stb >= cycles + COUNTER_LAG:
            assert value == h[-1], f"{name}: {value} after the strobes stopped, not {h[-1]}"
            settled.add(name)
    assert settled == set(names)

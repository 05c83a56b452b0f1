"""hw.counters.CounterBank against an exact count (Amaranth simulator).

Each read must be the count of the events of the cycles before some cycle c,
with r - LAG < c <= r for a read addressed in cycle r (so every event at
least LAG cycles old is in it), saturated or wrapped as the counter's mode
says, and exactly the count the bank's docstring gives (as of the counter's
last visit at or before r - 3); after the strobes stop, every counter must
read its exact count. The
bank's pending bound (an invariant) is checked each cycle (the
``invariant_checks`` fixture)."""


import pytest
from amaranth.hdl import ClockDomain, Module
from amaranth.sim import DomainReset, Simulator

from hw.counters import CounterBank
from tests import seeds

pytestmark = pytest.mark.usefixtures("invariant_checks")


def _fold(value, width, saturate):
    return min(value, (1 << width) - 1) if saturate else value % (1 << width)


def run_bank(bank, strobes, reads, *, reset_at=None):
    """Drive ``strobes[t]`` (a bit mask) and ``reads[t]`` (a counter) in cycle
    t, then idle for the bank's LAG and read every counter. Checks each read
    against the exact count and returns the final values. ``reset_at``: a
    reset of 3 cycles (strobes high in it, not counted) before cycle
    ``reset_at``; the count starts again from ``init`` then, and the visits
    from counter 0."""
    n, width = bank.n, bank.width
    cycles = len(strobes)
    start = reset_at or 0
    # counts[t][i]: events of counter i in cycles start .. t - 1
    counts = {start: [0] * n}
    for t in range(start, cycles):
        counts[t + 1] = [c + (strobes[t] >> i & 1) for i, c in enumerate(counts[t])]
    final = []

    def count(i, c):
        return _fold(bank.init[i] + counts[min(c, cycles)][i], width, bank.saturate[i])

    def check(r, i, got):
        if r < start:
            return
        # The bound every read keeps: all events LAG cycles old, none of cycle r.
        lo = max(start, r - bank.LAG + 1)
        allowed = {count(i, c) for c in range(lo, r + 1)}
        assert got in allowed, (
            f"cycle {r}: counter {i} read {got}, expected one of {sorted(allowed)} "
            f"(events so far {counts[min(r, cycles)][i]})")
        # Exactly: the events before the counter's last visit at or before r - 3.
        last = r - 3 - (r - 3 - start - i) % bank.period
        exact = count(i, last) if last >= start else bank.init[i]
        assert got == exact, f"cycle {r}: counter {i} read {got}, not {exact}"

    m = Module()
    m.domains.sync = cd = ClockDomain()
    m.submodules.bank = bank

    asked = []  # (cycle, rd_addr) not answered yet

    async def bench(ctx):
        for r in range(cycles + bank.LAG + n + 1):
            if r == reset_at:
                ctx.set(cd.rst, 1)
                ctx.set(bank.strobe, (1 << n) - 1)
                for _ in range(3):
                    try:
                        await ctx.tick()
                    except DomainReset:  # the tick, taken in reset
                        pass
                ctx.set(cd.rst, 0)
            in_run = r < cycles
            ctx.set(bank.strobe, strobes[r] if in_run else 0)
            addr = reads[r] if in_run else (r - cycles - bank.LAG) % n
            ctx.set(bank.rd_addr, addr)
            await ctx.tick()
            asked.append((r, addr))
            if len(asked) > bank.read_register:  # the answer of rd_addr of cycle r0
                r0, addr0 = asked.pop(0)
                got = ctx.get(bank.rd_data)
                check(r0, addr0, got)
                if r0 >= cycles + bank.LAG:
                    final.append((addr0, got))

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    for i, got in final:
        assert got == count(i, cycles), i
    return dict(final)


@pytest.mark.parametrize("n", [1, 3, 7, 30])
def test_random_strobes_and_reads(n):
    rng = seeds.rng(n)
    bank = CounterBank(n)
    cycles = 1500
    strobes, reads = [], []
    for t in range(cycles):
        density = (0.05, 0.5, 1.0)[(t // 200) % 3]
        strobes.append(sum(1 << i for i in range(n) if rng.random() < density))
        reads.append(rng.randrange(n))
    run_bank(bank, strobes, reads)


@pytest.mark.parametrize("n", [5, 40])
def test_registered_read(n):
    """``read_register=True``: the same answers, a cycle later."""
    rng = seeds.rng(70 + n)
    bank = CounterBank(n, read_register=True)
    strobes = [rng.getrandbits(n) | 1 for _ in range(700)]
    run_bank(bank, strobes, [rng.choice((0, rng.randrange(n))) for _ in range(700)])


def test_all_counters_every_cycle():
    """The pending accumulators' worst case: every counter strobed in every
    cycle for long bursts, read in turn."""
    n = 12
    bank = CounterBank(n)
    pattern = [(1 << n) - 1] * 800 + [0] * 50 + [(1 << n) - 1] * 400
    values = run_bank(bank, pattern, [t % n for t in range(len(pattern))])
    assert all(v == 1200 for v in values.values())


@pytest.mark.parametrize("n", [4, 9])
def test_one_counter_read_while_written(n):
    """One counter strobed every cycle and read every cycle: the reads meet the
    scanner's write of that counter (the read-during-write bypass)."""
    bank = CounterBank(n)
    cycles = 600
    values = run_bank(bank, [1 << (n - 1)] * cycles, [n - 1] * cycles)
    assert values[n - 1] == cycles


def test_saturate_and_wrap_at_the_edge():
    """Per-counter modes at 8 bits, preloaded a few events below the top."""
    n = 6
    saturate = (True, False, True, False, True, False)
    init = (250, 250, 255, 255, 0, 0)
    bank = CounterBank(n, width=8, saturate=saturate, init=init)
    rng = seeds.rng(6)
    strobes = [rng.getrandbits(n) | 0b1111 for _ in range(300)]
    values = run_bank(bank, strobes, [rng.randrange(n) for _ in range(300)])
    assert values[0] == 255 and values[2] == 255
    assert values[1] == (250 + 300) % 256 and values[3] == (255 + 300) % 256


def test_full_width_saturates():
    bank = CounterBank(2, saturate=(True, False), init=(2**32 - 5, 2**32 - 5))
    values = run_bank(bank, [0b11] * 20, [t % 2 for t in range(20)])
    assert values == {0: 2**32 - 1, 1: 15}


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_bad_parameters_say_what_to_fix():
    with pytest.raises(ValueError, match="saturate"):
        CounterBank(3, saturate=(True, False))
    with pytest.raises(ValueError, match="init"):
        CounterBank(2, width=8, init=(0, 256))
    with pytest.raises(ValueError, match="n >= 1"):
        CounterBank(0)


@pytest.mark.parametrize("n", [3, 9])
def test_reset_clears_to_init(n):
    """A reset mid-run: every counter restarts from its initial value (reads
    in the first pass after the reset included), and counts from there."""
    rng = seeds.rng(40 + n)
    init = [rng.randrange(1000) for _ in range(n)]
    bank = CounterBank(n, init=init)
    cycles = 400
    strobes = [rng.getrandbits(n) for _ in range(cycles)]
    reads = [rng.randrange(n) for _ in range(cycles)]
    run_bank(bank, strobes, reads, reset_at=200)

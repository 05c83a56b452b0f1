"""hw/tx/scheduler.py: ``QpScheduler`` grants, cycle for cycle, what a Python
reference of the rule grants (round robin over the QPs that are enabled, have
work -- a part-sent WQE, or a prefetched one -- and are not parked), and
``EvChoice`` picks the next GOOD EV after the cursor, avoiding a
retransmission's last EV unless it is the only GOOD one."""


import pytest
from amaranth.sim import Simulator

from hw.tx.scheduler import EvChoice, QpScheduler
from tests import seeds


def next_after(bits, n, last):
    """The first set bit of ``bits`` after position ``last``, wrapping; None if none."""
    for k in range(1, n + 1):
        i = (last + k) % n
        if bits >> i & 1:
            return i
    return None


@pytest.mark.parametrize("nq", [1, 2, 5, 16])
def test_qp_scheduler(nq):
    dut = QpScheduler(nq)
    rng = seeds.rng(nq)
    flags = ("enable", "wqe_active", "wqe_ready", "win_blocked", "ev_blocked", "op_halt",
             "wimm_park", "at_bound")
    log = {"grants": 0, "ready_only": 0}

    async def bench(ctx):
        wimm_wait = 0
        last = nq - 1
        for _ in range(3000):
            f = {name: sum(int(rng.random() < p) << i for i in range(nq))
                 for name, p in zip(flags, (0.8, 0.3, 0.4, 0.2, 0.2, 0.1, 0.3, 0.5), strict=True)}
            for name in flags:
                ctx.set(getattr(dut, name), f[name])
            take = int(rng.random() < 0.7)
            ctx.set(dut.next, take)
            # the reference's choice this cycle
            work = f["wqe_active"] | f["wqe_ready"]
            req = f["enable"] & work & ~(f["win_blocked"] | f["ev_blocked"] | f["op_halt"]
                                        | wimm_wait)
            want = next_after(req, nq, last)
            assert ctx.get(dut.wimm_wait) == wimm_wait
            assert ctx.get(dut.valid) == (want is not None)
            if want is not None:
                assert ctx.get(dut.grant) == want
                log["grants"] += 1
                log["ready_only"] += not (f["wqe_active"] >> want & 1)
                if take:
                    last = want
            await ctx.tick()
            wimm_wait = f["wimm_park"] & f["at_bound"]

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert log["grants"] > 300 and log["ready_only"] > 50


@pytest.mark.parametrize("ne", [1, 2, 16])
def test_ev_choice(ne):
    dut = EvChoice(ne)
    rng = seeds.rng(ne)
    eb = max(1, (ne - 1).bit_length())
    log = {"found": 0, "avoided": 0}

    async def bench(ctx):
        for _ in range(2000):
            good = rng.choice([rng.getrandbits(ne), (1 << ne) - 1, 0, 1 << rng.randrange(ne)])
            cursor, retx, avoid = rng.randrange(ne), rng.getrandbits(1), rng.randrange(1 << eb)
            for name, value in (("good", good), ("cursor", cursor), ("retx", retx),
                                ("avoid", avoid)):
                ctx.set(getattr(dut, name), value)
            usable = good
            if retx and avoid < ne and good & ~(1 << avoid):
                usable = good & ~(1 << avoid)
            want = next_after(usable, ne, cursor)
            assert ctx.get(dut.found) == (want is not None)
            if want is not None:
                assert ctx.get(dut.index) == want
                log["found"] += 1
                log["avoided"] += usable != good
            await ctx.delay(1e-9)

    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()
    assert log["found"] > 1000 and (ne == 1 or log["avoided"] > 100)

"""ProbeSweep (hw/reliability/probe_sweep.py) in Amaranth's simulator, driven as the
reliability core drives it (take a sweep event, load the QP's EVs, emit until done),
with random ticks, EV masks and FIFO room: each round carries the next number, every
QP is swept once per round in order, each loaded EV gets exactly one request (the
lowest first, ``probe_id`` = round << 8 | EV), and ``sweeping`` is 1 while a round
is pending and 0 once its last QP's requests are queued."""

from amaranth.sim import Simulator

from hw.reliability.probe_sweep import ProbeSweep
from tests import seeds

NQ, E = 3, 4


def test_rounds_match_reference():
    dut = ProbeSweep(num_qps=NQ, evs=E)
    rng = seeds.rng(9)
    pushed, want, swept = [], [], []
    checks = {"idle_after_round": 0, "sweeping_while_pending": 0}

    async def bench(ctx):
        state, q, round_done = "idle", 0, False
        for cyc in range(6000):  # no tick in the last 500 cycles: the last round ends
            pending = ctx.get(dut.pending)
            take = state == "idle" and pending and rng.random() < 0.5
            # no tick while the last QP's requests are queued: the next round would
            # start at once and the rest of them carry its number (ProbeSweep's
            # precondition: the engine's probe period is far longer than a sweep); a
            # tick while a round is pending is ignored. The tick is registered: one
            # raised as the last QP is taken acts once it has been.
            last_taken = take and ctx.get(dut.qpn) == NQ - 1
            quiet = (pending and not last_taken) or not ctx.get(dut.sweeping)
            tick = int(quiet and cyc < 5500 and rng.random() < 0.01)
            ctx.set(dut.tick, tick)
            ctx.set(dut.room, int(rng.random() < 0.7))
            ctx.set(dut.taken, 0)
            ctx.set(dut.load, 0)
            ctx.set(dut.emit, 0)
            if pending:
                assert ctx.get(dut.sweeping)
                checks["sweeping_while_pending"] += 1
            if round_done and not pending:
                assert not ctx.get(dut.sweeping)  # unless a round starts: checked above
                checks["idle_after_round"] += 1
            round_done = False
            if ctx.get(dut.push):
                r = ctx.get(dut.req)
                pushed.append((r.qpn, r.ev_index, r.probe_id))
            nxt = state
            if take:
                q = ctx.get(dut.qpn)
                swept.append((ctx.get(dut.round), q))
                ctx.set(dut.taken, 1)
                nxt = "load"
            elif state == "load":
                evs = rng.choice([0, rng.randrange(1 << E), (1 << E) - 1])
                ctx.set(dut.evs, evs)
                ctx.set(dut.qp, q)
                ctx.set(dut.load, 1)
                rnd = ctx.get(dut.round)
                want.extend((q, ev, rnd << 8 | ev) for ev in range(E) if evs >> ev & 1)
                nxt = "emit"
            elif state == "emit":
                ctx.set(dut.qp, q)
                ctx.set(dut.emit, 1)
                if ctx.get(dut.done):
                    nxt = "idle"
                    # the last QP's requests queued: no round pending after this cycle
                    round_done = q == NQ - 1 and not tick and not ctx.get(dut.pending)
            state = nxt
            await ctx.tick()
            if round_done:  # a tick the cycle before may start the next round now
                round_done = not ctx.get(dut.pending)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert pushed == want and len(want) > 100
    rounds = sorted({r for r, _ in swept})
    assert rounds == list(range(1, len(rounds) + 1)) and len(rounds) > 10
    for r in rounds:  # every QP once per round, in order
        assert [q for rr, q in swept if rr == r] == list(range(NQ)), r
    assert checks["idle_after_round"] > 5 and checks["sweeping_while_pending"] > 100, checks

"""EvEvidence (hw/reliability/ev_evidence.py) in Amaranth's simulator: random EV
states, loss runs and drop counts against docs/protocol.md's rule: one more loss adds
1 to the EV's loss run and drop count (saturating), and a GOOD EV whose loss run
reaches ``ev_loss_threshold`` (0: never) turns ASSUMED_BAD, unless no more than
``ev_min_active`` EVs are GOOD (the floor)."""


from amaranth.sim import Simulator

from hw.reliability.ev_evidence import EvEvidence
from hw.reliability.layouts import EvState
from tests import seeds

E = 8


def model(states, losses, drops, threshold, min_active):
    good = sum(s == EvState.GOOD for s in states)
    out = []
    for s, loss, drop in zip(states, losses, drops, strict=True):
        loss1 = min(loss + 1, 15)
        bad = s == EvState.GOOD and threshold != 0 and loss1 >= threshold
        out.append((loss1, min(drop + 1, 0xFFFF), bad, bad and good > min_active))
    return out


def test_evidence_matches_rule():
    dut = EvEvidence(evs=E)
    rng = seeds.rng(4)
    cases = []
    for _ in range(500):
        states = [rng.choice([EvState.GOOD] * 3 + [EvState.ASSUMED_BAD, EvState.DENIED, 3])
                  for _ in range(E)]
        losses = [rng.choice([0, 1, 2, 3, 14, 15, rng.randrange(16)]) for _ in range(E)]
        drops = [rng.choice([0, 0xFFFE, 0xFFFF, rng.randrange(1 << 16)]) for _ in range(E)]
        cases.append((states, losses, drops, rng.randrange(16), rng.choice([0, 1, 2, 5, 200])))
    got = []

    async def bench(ctx):
        for states, losses, drops, threshold, min_active in cases:
            for i in range(E):
                ctx.set(dut.ev_state[i], states[i])
                ctx.set(dut.ev_loss[i], losses[i])
                ctx.set(dut.ev_drops[i], drops[i])
            ctx.set(dut.threshold, threshold)
            ctx.set(dut.min_active, min_active)
            await ctx.tick()
            to_bad, bad_ok = ctx.get(dut.to_bad), ctx.get(dut.bad_ok)
            got.append([(ctx.get(dut.loss_inc[i]), ctx.get(dut.drops_inc[i]),
                         bool(to_bad >> i & 1), bool(bad_ok >> i & 1)) for i in range(E)])

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    want = [model(*c) for c in cases]
    assert got == want
    flat = [e for case in want for e in case]
    assert sum(e[2] and e[3] for e in flat) > 100 and sum(e[2] and not e[3] for e in flat) > 20

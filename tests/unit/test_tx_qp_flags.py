"""hw/tx/qp_flags.py ``QpFlags``: the unparks and CSR writes of ``apply_writes``
and ``apply_doorbell``, under random stimulus, against a Python model of its
docstring. A stand-in for the Sequencer's FSM sets park flags at random before
them (as the FSM's states do), so each clear must hit its own QP and no other
(``link_rose`` clears every QP's ``ev_blocked``)."""

import random
from types import SimpleNamespace

from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from hw.tx.qp_flags import QpFlags
from hw.tx.regs import CTRL_ENABLE_BIT

NQ = 4
FLAGS = ("enable", "win_blocked", "ev_blocked", "op_halt", "wimm_park", "wqe_active")


def test_qp_flags_clears_hit_their_own_qp():
    f = QpFlags(NQ, 2)
    qw = SimpleNamespace(unpark=Signal(), q=Signal(2), ctrl=Signal(), data=Signal(32),
                         reset=Signal(NQ), flush=Signal(NQ), doorbell=Signal())
    ev = SimpleNamespace(became_good=Signal(), became_good_qp=Signal(2), link_rose=Signal())
    ack_apply, wb_clear = Signal(NQ), Signal(NQ)
    sets = {name: Signal(NQ, name=f"set_{name}") for name in FLAGS}
    m = Module()
    for name, s in sets.items():  # the FSM's writes, overridden by what follows
        reg = getattr(f, name)
        m.d.sync += reg.eq(reg | s)
    f.apply_writes(m, qw, ack_apply, wb_clear, ev)
    f.apply_doorbell(m, qw)
    rng = random.Random(3)
    mismatches = []

    async def bench(ctx):
        state = {name: 0 for name in FLAGS}
        pi, ci = [0] * NQ, [0] * NQ
        for cycle in range(2000):
            ins = {"unpark": rng.random() < 0.2, "q": rng.randrange(NQ),
                   "ctrl": rng.random() < 0.2, "data": rng.getrandbits(32),
                   "reset": rng.getrandbits(NQ) if rng.random() < 0.1 else 0,
                   "flush": rng.getrandbits(NQ) if rng.random() < 0.1 else 0,
                   "doorbell": rng.random() < 0.2}
            good, good_qp = rng.random() < 0.3, rng.randrange(NQ)
            rose = rng.random() < 0.05
            acks = rng.getrandbits(NQ) if rng.random() < 0.3 else 0
            new_sets = {name: rng.getrandbits(NQ) if rng.random() < 0.3 else 0 for name in FLAGS}
            for name, v in ins.items():
                ctx.set(getattr(qw, name), v)
            ctx.set(ev.became_good, good)
            ctx.set(ev.became_good_qp, good_qp)
            ctx.set(ev.link_rose, rose)
            ctx.set(ack_apply, acks)
            for name, v in new_sets.items():
                ctx.set(sets[name], v)
            q = 1 << ins["q"]
            want_clear = acks | (q if ins["unpark"] else 0)
            if ctx.get(wb_clear) != want_clear:
                mismatches.append((cycle, "wb_clear", ctx.get(wb_clear), want_clear))
            await ctx.tick()
            nxt = {name: state[name] | new_sets[name] for name in FLAGS}
            nxt["win_blocked"] &= ~want_clear & ~ins["reset"]
            if good:
                nxt["ev_blocked"] &= ~(1 << good_qp)
            if rose:  # a plane's link came up: every QP looks again
                nxt["ev_blocked"] = 0
            if ins["ctrl"]:
                nxt["enable"] = nxt["enable"] & ~q | (q if ins["data"] >> CTRL_ENABLE_BIT & 1
                                                      else 0)
                nxt["ev_blocked"] &= ~q
                nxt["op_halt"] &= ~q
            nxt["wqe_active"] &= ~ins["reset"]
            nxt["wimm_park"] &= ~(ins["reset"] | ins["flush"])
            for i in range(NQ):
                if ins["reset"] >> i & 1:
                    ci[i] = pi[i]
            if ins["doorbell"]:
                pi[ins["q"]] = ins["data"] & 0xFFFF
            state = {name: v & (1 << NQ) - 1 for name, v in nxt.items()}
            got = {name: ctx.get(getattr(f, name)) for name in FLAGS}
            got_ring = ([ctx.get(p) for p in f.pi], [ctx.get(c) for c in f.ci])
            if got != state or got_ring != (pi, ci):
                mismatches.append((cycle, got, state, got_ring, (pi, ci)))

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert not mismatches, mismatches[:3]

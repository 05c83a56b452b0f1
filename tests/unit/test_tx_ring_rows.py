"""hw/tx/ring_rows.py ``RingRows``: checked every cycle against a Python model
of its rules -- a decode write (INIT's zeroing, a doorbell's ``pi``, a
reset's ``ci := pi``) lands with its ``ne`` flag at the end of the cycle after
its strobe; a take (``ci + 1``) likewise, or a cycle later when it meets a
write; the read ports give the row of the address of the cycle before, with
that cycle's writes (``ring_pi``, the port reading several WQEs ahead
needs, included); the EV cursors take EMIT's writes and INIT's
``evs_per_qp - 1``. Stimulus: INIT's rows on consecutive cycles, then takes
at least two cycles apart and decode writes at least three apart, mostly on
a few QPs, with the doorbell a few WQEs ahead of ``ci`` or equal to it."""

import pytest
from amaranth.sim import Simulator

from hw.tx.ring_rows import RingRows
from tests import seeds

EVS = 16
MASK = 0xFFFF


class Model:
    def __init__(self, nq):
        self.nq = nq
        self.pi, self.ci = [0] * nq, [0] * nq
        self.cursor = [0] * nq
        self.ne = [0] * nq
        self.out = {}
        self.update = None  # (kind, q, pi): chosen this cycle, written the next
        self.wait = None  # the QP of a take waiting for a write
        self.log = {"waited": 0, "ne_on": 0, "ne_off": 0, "reset": 0}

    def step(self, i):
        if self.update is not None:
            kind, q, w_pi = self.update
            if kind == "init":
                self.pi[q] = self.ci[q] = 0
            elif kind == "doorbell":
                self.pi[q] = w_pi
            elif kind == "reset":
                self.ci[q] = self.pi[q]
                self.log["reset"] += 1
            else:
                self.ci[q] = (self.ci[q] + 1) & MASK
            new = int(self.pi[q] != self.ci[q])
            if new != self.ne[q]:
                self.log["ne_on" if new else "ne_off"] += 1
            self.ne[q] = new
        if i["w_init"]:
            self.cursor[i["w_q"]] = EVS - 1
        elif i["cursor_we"]:
            self.cursor[i["cursor_q"]] = i["cursor_data"]
        self.out = dict(cur_ci=self.ci[i["cur_q_next"]], cur_cursor=self.cursor[i["cur_q_next"]],
                        ring_ci=self.ci[i["ring_q"]], ring_pi=self.pi[i["ring_q"]],
                        csr_pi=self.pi[i["csr_q"]], csr_ci=self.ci[i["csr_q"]])
        w = next((k for k in ("init", "doorbell", "reset") if i[f"w_{k}"]), None)
        take = i["take"] or self.wait is not None
        take_q = self.wait if self.wait is not None else i["take_q"]
        if w is not None:
            self.update = (w, i["w_q"], i["w_pi"])
        elif take:
            self.update = ("take", take_q, 0)
        else:
            self.update = None
        self.wait = take_q if take and w is not None else None
        self.log["waited"] += self.wait is not None


@pytest.mark.parametrize("nq", [8, 64])
def test_ring_rows(nq):
    dut = RingRows(nq, EVS, ring_pi=True)
    rng = seeds.rng(f"ring_rows{nq}")
    model = Model(nq)
    names = ("take", "take_q", "w_q", "w_init", "w_doorbell", "w_reset", "w_pi", "cur_q_next",
             "cursor_we", "cursor_q", "cursor_data", "ring_q", "csr_q")

    async def bench(ctx):
        last = {"take": -9, "w": -9}
        init = list(range(nq))
        hot = rng.sample(range(nq), 3)  # most events on a few QPs
        for cycle in range(6000):
            i = dict.fromkeys(names, 0)
            i.update(cur_q_next=rng.choice(hot), ring_q=rng.choice(hot),
                     csr_q=rng.randrange(nq))
            if init:
                i.update(w_init=1, w_q=init.pop(0))
            else:
                if cycle - last["take"] >= 2 and rng.random() < 0.3:
                    last["take"] = cycle
                    i.update(take=1, take_q=rng.choice(hot))
                if cycle - last["w"] >= 3 and rng.random() < 0.2:
                    last["w"] = cycle
                    q = rng.choice(hot + [rng.randrange(nq)])
                    if rng.random() < 0.15:
                        i.update(w_reset=1, w_q=q)
                    else:
                        ahead = rng.choice([0, 0, 1, 2, 3, 7, 0x8000, MASK])
                        i.update(w_doorbell=1, w_q=q, w_pi=(model.ci[q] + ahead) & MASK)
                if rng.random() < 0.1:
                    i.update(cursor_we=1, cursor_q=rng.choice(hot),
                             cursor_data=rng.randrange(EVS))
            for name in names:
                ctx.set(getattr(dut, name), i[name])
            assert ctx.get(dut.ne) == sum(b << q for q, b in enumerate(model.ne)), cycle
            if cycle:
                for name, value in model.out.items():
                    assert ctx.get(getattr(dut, name)) == value, (cycle, name)
            await ctx.tick()
            model.step(i)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    log = model.log
    assert log["waited"] > 50 and log["ne_on"] > 50 and log["ne_off"] > 50, log
    assert log["reset"] > 20, log

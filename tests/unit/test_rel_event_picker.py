"""EventPicker (hw/reliability/intake.py) in Amaranth's simulator: random sources,
doorbells and takes, driven as the reliability core drives it (a source holds until
taken), against a cycle model of its docstring: the choice by priority among the
sources valid the cycle before, its QP, no choice in the cycle after one is taken,
and doorbells pending per QP, the lowest first."""

from amaranth.sim import Simulator

from hw.reliability.intake import SOURCES, EventPicker
from tests import seeds

NQ = 6


class Model:
    def __init__(self):
        self.take, self.take_any, self.qpn, self.sent_ok = 0, False, 0, 0
        self.pend, self.db_q, self.db_any, self.db_taken = 0, 0, False, False

    def step(self, valid, qpns, sent_qpn, doorbell, doorbell_qpn, idle, doorbell_taken):
        pend = self.pend
        if doorbell_taken:
            pend &= ~(1 << self.db_q)
        if doorbell and doorbell_qpn < NQ:
            pend |= 1 << doorbell_qpn
        avail = valid + [self.db_any and not self.db_taken]
        self.db_taken = bool(doorbell_taken)
        if idle and self.take_any:
            self.take, self.take_any = 0, False
        else:
            first = next((i for i, v in enumerate(avail) if v), None)
            self.take = 0 if first is None else 1 << first
            self.take_any = first is not None
            self.sent_ok = int(sent_qpn < NQ)
            five = next((i for i, v in enumerate(valid) if v), None)
            self.qpn = qpns[five] if five is not None else self.db_q
        # the lowest pending QP; unspecified (None) with none pending
        self.db_q = (self.pend & -self.pend).bit_length() - 1 if self.pend else None
        self.db_any = self.pend != 0
        self.pend = pend


def test_picker_matches_cycle_model():
    dut = EventPicker(num_qps=NQ)
    rng = seeds.rng(3)
    model = Model()
    checked = {"taken": [0] * len(SOURCES), "qpn": 0}

    async def bench(ctx):
        valid = [0] * 5
        qpns = [0] * 5
        for cyc in range(4000):
            for k in range(5):
                if not valid[k] and rng.random() < 0.15:
                    valid[k] = 1
                    qpns[k] = rng.randrange(NQ)
            sent_qpn = rng.choice([qpns[1], qpns[1], NQ, 1 << 23])
            doorbell = int(rng.random() < 0.2)
            doorbell_qpn = rng.choice([rng.randrange(NQ), rng.randrange(NQ), NQ + 3, 1 << 20 | 2])
            idle = int(rng.random() < 0.7)
            take = ctx.get(dut.take)
            db_taken = int(bool(idle and take >> 5 & 1))
            ctx.set(dut.valid, sum(v << k for k, v in enumerate(valid)))
            for name, value in zip(("cmd", "sent", "ack", "tmo", "sweep"), qpns, strict=True):
                ctx.set(getattr(dut, f"{name}_qpn"), value)
            ctx.set(dut.sent_qpn, sent_qpn)
            ctx.set(dut.doorbell, doorbell)
            ctx.set(dut.doorbell_qpn, doorbell_qpn)
            ctx.set(dut.idle, idle)
            ctx.set(dut.doorbell_taken, db_taken)
            # the sent record's QP as given, its low bits (a QP out of range: sent_ok 0)
            read_at = [*qpns[:1], sent_qpn % 8, *qpns[2:]]
            model.step(list(valid), read_at, sent_qpn, doorbell, doorbell_qpn, idle,
                       db_taken)
            if idle and take:  # the core takes the source chosen
                k = take.bit_length() - 1
                checked["taken"][k] += 1
                if k < 5:
                    valid[k] = 0
            await ctx.tick()
            got = (ctx.get(dut.take), ctx.get(dut.sent_ok))
            assert got == (model.take, model.sent_ok), f"cycle {cyc}"
            if model.qpn is not None:  # unspecified: nothing chosen, no doorbell pending
                assert ctx.get(dut.qpn) == model.qpn, f"cycle {cyc}"
                checked["qpn"] += 1

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert min(checked["taken"]) > 20 and checked["qpn"] > 3000, checked

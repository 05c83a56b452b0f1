"""TimerDeadline (hw/reliability/deadline.py) in Amaranth's simulator: every write
comes out 4 cycles later, in order, with the deadline the golden model's timer value
gives (``sim.model`` ``QpConfig.timeout_ns``), counted from ``now`` of the write's
cycle."""


from amaranth.sim import Simulator

from hw.reliability.deadline import TimerDeadline
from hw.reliability.timer import DEADLINE_BITS
from sim.model import QpConfig
from sim.model.qp import RTO_UNIT_NS
from tests import seeds

UNIT = 128  # cycles per 1.024 us at 125 MHz
MASK = (1 << DEADLINE_BITS) - 1


def model_deadline(now, t, retries, linear_cnt):
    """The deadline from the golden model's timer value; t above 24 (which the
    driver refuses) is held at the model's largest timeout, 2^24 units."""
    cfg = QpConfig(rto_exp=min(t, 24), linear_cnt=linear_cnt)
    units = int(cfg.timeout_ns(retries) / RTO_UNIT_NS)
    if t > 24:
        units = 1 << 24
    return (now + UNIT * units) & MASK


def test_deadline_matches_model():
    dut = TimerDeadline(num_qps=8, gen_bits=4, timeout_unit=UNIT)
    rng = seeds.rng(7)
    cycles = 600
    sent, got = [], []

    async def bench(ctx):
        for cyc in range(cycles + 6):
            now = (0xFF_FFFF_F000 + 97 * cyc) & MASK  # wraps past 2^40 during the run
            w = {"qpn": rng.randrange(8), "armed": rng.randrange(2), "gen": rng.randrange(16),
                 "retries": rng.randrange(32), "t": rng.choice([0, 1, 5, 12, 24, 25, 31]),
                 "linear_cnt": rng.randrange(8)}
            valid = int(cyc < cycles and rng.random() < 0.6)
            ctx.set(dut.now, now)
            ctx.set(dut.write.payload, w)
            ctx.set(dut.write.valid, valid)
            if ctx.get(dut.timer_arm.valid):
                a = ctx.get(dut.timer_arm.payload)
                got.append((cyc, a.qpn, a.armed, a.gen, a.deadline))
            if valid:
                sent.append((cyc + 4, w["qpn"], w["armed"], w["gen"],
                             model_deadline(now, w["t"], w["retries"], w["linear_cnt"])))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert len(sent) > 300
    assert got == sent

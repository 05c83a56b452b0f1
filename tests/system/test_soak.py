"""The seeded soak (``make test-long``; docs/verification.md, "Seeds"): random
two-NIC scenarios (sim/system/soak.py: loss, CE marks, trims, reordering,
path windows, flaps and failures, 1 to 4 QPs, message sizes from 1 byte to
16 KiB, ring or stream), drawn from the run's seed, each run on the two RTL
NICs (test_system's Verilator build, sim_build/system_two_nic_sim) and on
the golden model, both held to ``soak.check_run``: every shard byte exact,
each direction's payload the workload's, the path events at the scenario's
times, the fabric's counts equal to the captured frames' fates.

It draws scenarios until ``MRC_SOAK_MINUTES`` (``make test-long
SOAK_MINUTES=m``; 20 by default) have passed, then finishes the one under
way: the time limits how many scenarios run, never a check. Each scenario
prints a line (its number, what it is, the RTL's simulated time and the
wall time) to the terminal and to ``build/soak/progress.log``.

Scenario k is drawn from the run's seed and k alone. A failure names the
scenario, keeps its table in ``build/soak/failed.json`` and prints the
command that replays it first (``MRC_SOAK_FIRST=k``: start at scenario k).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from sim.cocotb_runner import ROOT
from tests import seeds

pytestmark = pytest.mark.long

MINUTES_ENV = "MRC_SOAK_MINUTES"
FIRST_ENV = "MRC_SOAK_FIRST"
OUT = ROOT / "build" / "soak"


def progress(line: str) -> None:
    """To the terminal even under pytest's capture and xdist, and to the log."""
    with open(OUT / "progress.log", "a") as f:
        f.write(line + "\n")
    print(line, file=sys.__stderr__, flush=True)


def test_seeded_soak(tmp_path):
    from sim.system import demo
    from sim.system.scenario import parse
    from sim.system.scenario_run import model_raw
    from sim.system.soak import check_run, describe, draw

    minutes = float(os.environ.get(MINUTES_ENV, "20"))
    first = k = int(os.environ.get(FIRST_ENV, "0"))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "progress.log").write_text("")
    start = time.monotonic()
    progress(f"soak: seed {seeds.run_seed()}, {minutes:g} min, from scenario {first}")
    while k == first or time.monotonic() - start < minutes * 60:
        table = draw(seeds.rng(f"soak {k}"), k)
        cfg = parse(table, f"soak{k}")
        t0 = time.monotonic()
        try:
            rtl = demo.simulate(tmp_path / f"soak{k}", cfg, waves=False,
                                name="system_two_nic_sim", tag="soak")
            check_run(rtl, cfg)
            check_run(model_raw(cfg), cfg)
        except BaseException:
            (OUT / "failed.json").write_text(json.dumps(table, indent=1))
            progress(f"soak: scenario {k} FAILED: {describe(table)} (its table: "
                     f"{OUT / 'failed.json'}); replay it first: {FIRST_ENV}={k} make test-long "
                     f"SEED={seeds.run_seed()} TESTS=tests/system/test_soak.py")
            raise
        k += 1
        progress(f"soak: scenario {k - 1} passed in {time.monotonic() - t0:.0f} s "
                 f"({rtl['sim_end_ns'] / 1e3:.0f} us simulated): {describe(table)}; "
                 f"{(time.monotonic() - start) / 60:.1f} of {minutes:g} min")
    progress(f"soak: {k - first} scenarios passed on the RTL and the model in "
             f"{(time.monotonic() - start) / 60:.1f} min")
    Path(OUT / "summary.json").write_text(json.dumps(
        {"seed": seeds.run_seed(), "first": first, "scenarios": k - first, "minutes": minutes}))

"""``make bench`` section ``speed``: how fast the two-NIC system simulates,
the old harness against the new one, in one run.

Both run the demo's driver-level script (``sim.system.demo``, the ring
workload with its byte-exact checks) on two NicCores under Verilator:

- ``cocotb`` (the old harness): the bare two-NIC top with cocotbext-axi's
  AxiRam host memories and AXI-stream sink/source on the MAC ports, every
  cycle in Python;
- ``sim`` (the new one, what the tests use): the top inside ``two_nic_sim``
  (sim/system/simhw.py), host memories and MAC streams in the simulator, the
  fabric and driver in Python woken per frame and per poll.

For each system scenario (the demo's; sim/bench/system.py's), waves off,
and the demo's scenario again with the waveform of the NICs' ports (FST, as
``make sim`` writes it), it reports simulated cycles per second of wall time
(the workload's, build excluded) of both and the ratio new / old. Then a
profile (cProfile inside the simulator's Python, ``COCOTB_ENABLE_PROFILING``)
of a short run of each harness: where the wall time goes, by component.

    python -m sim.bench --only speed            # print
    python -m sim.bench.speed --quick           # a short scenario only
"""

from __future__ import annotations

import argparse
import os
import platform
import pstats
import time
from pathlib import Path

from sim.system.demo import CLK_NS, DemoConfig, analyse, simulate

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "build" / "bench" / "speed"
HARNESSES = ("cocotb", "sim")
# one build per harness and waveform setting (a shared one would rebuild on every switch)
BUILDS = {("cocotb", False): "system_two_nic", ("sim", False): "system_two_nic_sim",
          ("cocotb", "fst"): "system_demo_cocotb", ("sim", "fst"): "system_demo"}
PROFILE_CFG = DemoConfig(rounds=2, shard_bytes=64 * 1024)


def scenarios() -> list[tuple[str, DemoConfig]]:
    from sim.bench.system import scenarios as system_scenarios

    return [("demo's ring, 5 x 128 KiB", DemoConfig()), *system_scenarios()]


def measure(harness: str, cfg: DemoConfig, waves, tag: str, profile: bool = False) -> dict:
    """One run; the demo's summary plus the raw record's test directory."""
    name = BUILDS[(harness, waves)]
    old = os.environ.get("COCOTB_ENABLE_PROFILING")
    os.environ["COCOTB_ENABLE_PROFILING"] = "1" if profile else "0"
    try:
        raw = simulate(OUT / tag / harness, cfg, waves=waves, name=name, tag=f"speed_{tag}",
                       harness=harness)
    finally:
        if old is None:
            os.environ.pop("COCOTB_ENABLE_PROFILING", None)
        else:
            os.environ["COCOTB_ENABLE_PROFILING"] = old
    summary = analyse(raw)
    if not summary["verified"]:
        raise RuntimeError(f"{harness} harness, {tag}: the run failed its checks: "
                           f"{summary['errors']}")
    summary["test_dir"] = raw["test_dir"]
    summary["wall_test_s"] = raw["wall_test_s"]
    return summary


# ---- profile -------------------------------------------------------------------------------

COMPONENTS = (  # (label, substrings of the coroutine's file or name), first match wins
    ("MAC streams: cocotbext-axi AXI-stream sink/source", ("cocotbext/axi/axis.py",)),
    ("host memory: cocotbext-axi AxiRam (AXI4 slave and its channels)",
     ("cocotbext/axi/axi_slave.py", "cocotbext/axi/axi_ram.py", "cocotbext/axi/axi_channels.py",
      "AXIRAM_CHANNELS")),
    ("CSR: cocotbext-axi AxiLiteMaster (and its channels)", ("cocotbext/axi/axil", "CHANNELS")),
    ("fabric model (per frame)", ("sim/system/fabric.py", "sim/system/simhw.py")),
    ("host driver and workload (polling, checks)",
     ("host_driver/", "sim/system/demo.py", "sim/system/harness.py")),
    ("cocotb triggers (ClockCycles, clock)", ("cocotb/",)),
)


def breakdown(pstat: Path, axiram: bool) -> dict[str, float]:
    """Seconds of the profiled run spent in each component's coroutines (the
    time of every resume of a task, by the file of its coroutine). The
    channel coroutines (cocotbext/axi/stream.py) are AxiRam's when
    ``axiram`` (the old harness), else the AxiLiteMaster's."""
    stats = pstats.Stats(str(pstat)).stats
    out = dict.fromkeys([c for c, _ in COMPONENTS] + ["other Python"], 0.0)
    for func, (_cc, _nc, _tt, _ct, callers) in stats.items():
        for caller, (_c, _n, _t, cum) in callers.items():
            # a task's coroutine is resumed by coroutine.send (cocotb/task.py)
            if "of 'coroutine' objects" not in caller[2] or func[0] == "~":
                continue
            where = f"{func[0]}:{func[2]}"
            if "cocotbext/axi/stream.py" in where:
                where = "AXIRAM_CHANNELS" if axiram else "CHANNELS"
            label = next((c for c, keys in COMPONENTS if any(k in where for k in keys)),
                         "other Python")
            out[label] += cum
    return out


def profile(harness: str) -> dict:
    summary = measure(harness, PROFILE_CFG, False, "profile", profile=True)
    parts = breakdown(Path(summary["test_dir"]) / "cocotb.pstat", axiram=harness == "cocotb")
    return {"wall_s": summary["wall_test_s"], "cycles": summary["elapsed_ns"] / CLK_NS,
            "parts": parts}


# ---- report --------------------------------------------------------------------------------

def _load() -> str:
    try:
        return " / ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def run(quick: bool = False, waves: tuple = ("off", "fst")) -> str:
    """The section; ``waves``: which of the waves-off cases and the FST case to run."""
    t0 = time.monotonic()
    rows = []
    cases = []
    if "off" in waves:
        cases += [(title, cfg, False) for title, cfg in scenarios()]
    if "fst" in waves:
        cases.append((scenarios()[0][0] + ", ports-only FST waveform", scenarios()[0][1],
                      "fst"))
    if quick:
        cases = [("short demo (2 rounds x 64 KiB)", PROFILE_CFG, False)]
    for k, (title, cfg, waves) in enumerate(cases):
        got = {h: measure(h, cfg, waves, f"case{k}") for h in HARNESSES}
        rows.append((title, got["cocotb"]["elapsed_ns"] / CLK_NS,
                     {h: got[h]["cycles_per_s"] for h in HARNESSES},
                     {h: got[h]["cycles_per_cpu_s"] for h in HARNESSES},
                     {h: got[h]["wall_workload_s"] for h in HARNESSES}))
    profiles = {h: profile(h) for h in HARNESSES}
    return render(rows, profiles, time.monotonic() - t0)


def render(rows, profiles, wall) -> str:
    lines = [
        "## Simulation speed (two NICs)",
        "",
        f"`sim/bench/speed.py` (`python -m sim.bench --only speed`, {wall:.0f} s; "
        f"{platform.machine()}, one process on a 2-core machine shared with other jobs). "
        "The demo's driver-level script (ring workload, byte-exact checks) on two NicCores "
        "under Verilator, with the old harness (`cocotb`: cocotbext-axi AxiRam host memories "
        "and AXI-stream models on the MAC ports, in Python every cycle) and the new one "
        "(`sim`: `sim/system/simhw.py`, host memories and MAC streams in the simulator, "
        "the fabric and the driver in Python per frame and per poll). Simulated cycles "
        "(125 MHz) per second of the workload's wall time, build excluded, and per "
        "second of the simulator process's CPU time (what a quiet machine turns into "
        f"wall time; load average at the start: {_load()}). The target of issue 27 is "
        "30,000 on the demo's scenario with the waveform off.",
        "",
        "| scenario | simulated cycles (old) | old: cycles/s | new: cycles/s | new / old | "
        "old: per CPU s | new: per CPU s | new / old (CPU) | old wall s | new wall s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for title, cycles, cps, cpu, wall_s in rows:
        lines.append(f"| {title} | {cycles:.0f} | {cps['cocotb']:.0f} | {cps['sim']:.0f} | "
                     f"{cps['sim'] / cps['cocotb']:.1f} | {cpu['cocotb']:.0f} | "
                     f"{cpu['sim']:.0f} | {cpu['sim'] / cpu['cocotb']:.1f} | "
                     f"{wall_s['cocotb']:.1f} | {wall_s['sim']:.1f} |")
    lines += [
        "",
        f"Where the time goes (cProfile inside the simulator's Python, one run of "
        f"{PROFILE_CFG.rounds} rounds x {PROFILE_CFG.shard_bytes // 1024} KiB per harness, "
        "waves off; seconds spent in each component's coroutines; the rest of the wall "
        "time is Verilator's model, cocotb's GPI and the profiler; the profiler slows "
        "Python about 2x, so read shares, not absolute times; in the old harness the "
        "AxiLiteMaster's channel coroutines are counted with AxiRam's, both being "
        "cocotbext-axi's stream.py):",
        "",
        "| component | old harness s | old % of wall | new harness s | new % of wall |",
        "|---|---:|---:|---:|---:|",
    ]
    labels = list(profiles["cocotb"]["parts"])
    for label in labels:
        cells = []
        for h in HARNESSES:
            p = profiles[h]
            sec = p["parts"].get(label, 0.0)
            cells += [f"{sec:.2f}", f"{100 * sec / p['wall_s']:.1f}"]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    cells = []
    for h in HARNESSES:
        p = profiles[h]
        rest = p["wall_s"] - sum(p["parts"].values())
        cells += [f"{rest:.2f}", f"{100 * rest / p['wall_s']:.1f}"]
    lines.append("| simulator (Verilator model, GPI), setup, profiler | " + " | ".join(cells)
                 + " |")
    cells = []
    for h in HARNESSES:
        cells += [f"{profiles[h]['wall_s']:.2f}", "100"]
    lines.append("| wall time of the test | " + " | ".join(cells) + " |")
    lines.append("")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="one short scenario (2 rounds x 64 KiB) and the profiles")
    parser.add_argument("--waves", nargs="+", choices=("off", "fst"), default=["off", "fst"],
                        help="the waves-off scenarios, the FST case, or both (default)")
    args = parser.parse_args(argv)
    print(run(quick=args.quick, waves=tuple(args.waves)))


if __name__ == "__main__":
    main()


__all__ = ["run", "breakdown", "scenarios"]

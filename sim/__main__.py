"""``make sim``: the project's main demo.

By default it runs, in order:

1. the whole NIC: two RTL NicCores under Verilator joined by the cocotb
   multipath fabric, driven through the host driver: a ring of 16 rounds of
   512 KiB in both directions (8 MiB sent and 8 MiB received per NIC,
   sim/system/scenarios/demo.toml) over 8 paths while one path is
   blackholed and comes back (``sim.system.demo``), into ``build/sim/system/``;
2. a golden-model scenario of the MRC transport over a faulty multipath
   fabric (one of 8 paths blackholed mid-transfer), side by side with
   go-back-N RoCE and oblivious spraying (``sim.mrcsim``), into
   ``build/sim/<scenario>/``. It runs in a child process from the start,
   beside step 1 (one core each once step 1's build is done); its report is
   printed when step 1 is over.

``--parser`` (``make sim PARSER=1``) adds the RX header parser demo (scapy
traffic, valid and malformed, through the Verilated parser,
``sim.parser_demo``, into ``build/sim/parser/``); it has a Verilator build
of its own, so it is not in the default run, which must stay within
120 s on a quiet 2-core machine, the two-NIC build included.
``--model-only`` (``make sim MODEL=1``) runs just the model scenario.

``--scenario FILE`` (``make sim SCENARIO=<name>``) runs one scenario file
(sim/system/scenario.py, docs/scenarios.md) instead: on the two RTL NICs and
on the golden model side by side (``sim.system.scenario_run``), into
``build/sim/scenario-<name>/``; ``--seed N`` overrides its seed (or the
demo's); ``--list`` lists the shipped scenarios. The demo of step 1 is itself
the scenario file ``sim/system/scenarios/demo.toml``.

Then it writes ``build/sim/report.md`` and ``report.json`` (every step's
summary) and ``build/sim/traffic.pcap``: the two-NIC run's frames (both
directions, simulated timestamps; ``traffic_fates.csv`` gives each frame's
fate), or, without that step, the other steps' frames concatenated.
"""

import argparse
import json
import shutil
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _system_step(out: Path, cfg=None) -> dict:
    from sim.system import demo
    from sim.system.scenario import load

    return demo.run(out / "system", cfg or load("demo"))


def _parser_step(out: Path) -> dict:
    from sim import parser_demo

    return parser_demo.run(out / "parser")


def _model_step(out: Path) -> dict:
    from sim import mrcsim

    return mrcsim.demo(out)


def _model_step_quiet(out: Path) -> tuple[dict, str]:
    """The model step with its printed report captured: (summary, text)."""
    import contextlib
    import io

    text = io.StringIO()
    t0 = time.monotonic()
    with contextlib.redirect_stdout(text), contextlib.redirect_stderr(io.StringIO()):
        summary = _model_step(out)
    summary = json.loads(json.dumps(summary, default=str))
    summary["step_wall_s"] = time.monotonic() - t0
    return summary, text.getvalue()


def _start_aside(steps: list, out: Path) -> list:
    """The default run's model step, started in a child process next to the
    others (it uses one core, the RTL simulation the other): the same step,
    whose summary and report come back when its turn comes."""
    from concurrent.futures import ProcessPoolExecutor

    if len(steps) < 2 or steps[-1][0] != "model":
        return steps
    pool = ProcessPoolExecutor(max_workers=1)
    future = pool.submit(_model_step_quiet, out)

    def collect(_out: Path) -> dict:
        summary, text = future.result()
        pool.shutdown()
        print(text, end="")
        return summary

    key, title, _func = steps[-1]
    return steps[:-1] + [(key, title, collect)]


# (key, title, function(outdir) -> summary with "outdir" and files under it)
SYSTEM_STEPS = [("system", "Two RTL NICs over a faulty 8-path fabric", _system_step)]
PARSER_STEPS = [("parser", "RX header parser on Verilator", _parser_step)]
MODEL_STEPS = [("model", "MRC golden model: one of 8 paths blackholed", _model_step)]


def steps_for(*, model_only: bool = False, parser: bool = False, scenario=None,
              demo_cfg=None) -> list:
    """The steps to run; ``scenario`` (a checked DemoConfig from a scenario
    file) replaces the default steps with that scenario on the RTL and the
    golden model side by side (only the model with ``model_only``);
    ``demo_cfg`` replaces the system step's scenario file (demo.toml)."""
    if scenario is not None:
        from sim.system.scenario_run import run

        side = "the golden model" if model_only else "two RTL NICs and the golden model"
        return [("scenario", f"Scenario {scenario.name} on {side}",
                 lambda out: run(scenario, out / f"scenario-{scenario.name}",
                                 rtl=not model_only))]
    if model_only:
        return list(MODEL_STEPS)
    system = SYSTEM_STEPS
    if demo_cfg is not None:
        system = [(key, title, lambda out: _system_step(out, demo_cfg))
                  for key, title, _f in SYSTEM_STEPS]
    return system + (PARSER_STEPS if parser else []) + MODEL_STEPS


def list_text() -> str:
    """``--list``: every shipped scenario with its one-line description."""
    from sim.system.scenario import SCENARIO_DIR, list_scenarios

    rows = list_scenarios()
    width = max(len(name) for name, _ in rows)
    lines = [f"Scenarios in {SCENARIO_DIR.relative_to(ROOT)}/ (make sim SCENARIO=<name>, "
             "python -m sim --scenario <name or file>; format: docs/scenarios.md):"]
    lines += [f"  {name:<{width}}  {desc}" for name, desc in rows]
    return "\n".join(lines)


def _merge_pcaps(out: Path, dirs: list[Path]) -> int:
    """Concatenate every step's pcap (raw Ethernet frames, malformed ones included)."""
    from scapy.utils import RawPcapReader, RawPcapWriter

    frames = []
    for d in dirs:
        for pcap in sorted(d.glob("*.pcap")):
            frames.extend(data for data, _ in RawPcapReader(str(pcap)))
    with RawPcapWriter(str(out / "traffic.pcap"), linktype=1) as writer:
        writer.write_header(None)
        for data in frames:
            writer.write(data)
    return len(frames)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m sim", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "sim")
    parser.add_argument("--model-only", action="store_true", help="only the model scenario")
    parser.add_argument("--parser", action="store_true", help="add the RX parser demo")
    parser.add_argument("--scenario", metavar="FILE",
                        help="a scenario file (or a name from --list): run it on the two RTL "
                        "NICs and on the golden model, side by side")
    parser.add_argument("--seed", type=int, help="the scenario's seed instead of the file's")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    args = parser.parse_args(argv)
    if args.list:
        print(list_text())
        return
    from sim.system.scenario import ScenarioError, load

    scenario = demo_cfg = None
    if args.scenario is not None:
        if args.parser:
            parser.error("--parser runs with the default steps only, not with --scenario")
        try:
            scenario = load(args.scenario, seed=args.seed)
        except ScenarioError as exc:
            parser.error(str(exc))
    elif args.seed is not None:
        if args.model_only:
            parser.error("--seed needs --scenario, or the default (RTL) demo")
        demo_cfg = load("demo", seed=args.seed)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    summaries, dirs, sections = {}, [], []
    steps = _start_aside(steps_for(model_only=args.model_only, parser=args.parser,
                                   scenario=scenario, demo_cfg=demo_cfg), out)
    for key, title, func in steps:
        print(f"\n=== {title} ===", flush=True)
        t0 = time.monotonic()
        summary = func(out)
        d = Path(summary["outdir"])
        summaries[key] = summary
        dirs.append(d)
        report = d / "report.md"
        body = report.read_text() if report.exists() else ""
        rel = d.relative_to(out)
        took = (f"{summary['step_wall_s']:.0f} s of wall time, beside the steps before it"
                if "step_wall_s" in summary else f"{time.monotonic() - t0:.0f} s of wall time")
        sections.append(f"## {title}\n\nFiles in `{rel}/`; step took {took}.\n\n{body}")
    two_nic = next((k for k in ("system", "scenario") if k in summaries), None)
    if two_nic is not None:
        system_dir = Path(summaries[two_nic]["outdir"])
        for name in ("traffic.pcap", "traffic_fates.csv"):
            shutil.copyfile(system_dir / name, out / name)
        frames = summaries[two_nic]["pcap_frames"]
        pcap_note = ("the two-NIC run's frames, both directions" if
                     summaries[two_nic].get("pcap_of", "rtl") == "rtl" else
                     "the golden model's frames, both directions")
    else:
        frames = _merge_pcaps(out, dirs)
        (out / "traffic_fates.csv").unlink(missing_ok=True)
        pcap_note = "every step's frames"
    (out / "report.md").write_text("# make sim\n\n" + "\n\n".join(sections))
    (out / "report.json").write_text(json.dumps(summaries, indent=1, default=str))
    print(f"\nWrote {out}/report.md, report.json and traffic.pcap ({frames} frames: "
          f"{pcap_note}); per-step outputs in "
          f"{', '.join(str(d.relative_to(out)) + '/' for d in dirs)}; "
          f"{time.monotonic() - t_start:.0f} s in all")


if __name__ == "__main__":
    main()

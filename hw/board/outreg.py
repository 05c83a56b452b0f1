"""Block-RAM output registers for the ECP5 flow: a pass on yosys's JSON netlist,
between ``synth_ecp5`` and nextpnr.

Without its output register (``REGMODE_x = "NOREG"``, what yosys always
chooses) a DP16KD's read data leaves the block late in the cycle, and the
routing to the first flip-flop comes on top, so a block RAM's read data must
leave the block from a register (docs/timing.md, the timing journal, has the
figures). With the output register (``OUTREG``) the data comes from a register
inside the block, early in the cycle, one cycle later. yosys's memory
mapping for the ECP5 never sets it, so the RTL registers the read data in the
fabric (every block-RAM FIFO has an output register after the RAM) and this
pass moves that register into the block RAM:

For each DP16KD read side (port A or B; in the 36-bit pseudo-dual-port mode
yosys uses, both ports' data pins carry port B's read), when every data pin
of the side that is used drives exactly one sink, the D input of a
``TRELLIS_FF`` that

- is clocked by the RAM side's clock, on the rising edge;
- has no set/reset (``LSR`` unconnected or constant 0) and powers up at 0
  (``REGSET = "RESET"``, the block's output register's value after
  configuration), no GSR;
- shares its clock enable (``CEMUX`` ``CE``, ``INV`` or ``1``) with all the
  other flip-flops of the side,

the side gets ``REGMODE = "OUTREG"`` with that clock enable on its ``OCE``
pin (through an inverting LUT4 when the flip-flops' ``CEMUX`` is ``INV``,
one per enable net), the data pins drive the flip-flops' ``Q`` nets, and the
flip-flops go. The register (in the fabric a flip-flop that takes the RAM's
data when enabled) is the same register inside the block: the block RAM's
read latch holds between reads as before, and the output register loads it
when ``OCE`` is high; nothing changes cycle by cycle. Sides whose data pins
reach logic, or flip-flops with a reset, are left as they are: the pass
changes nothing it cannot prove is a plain enabled register. To let it take a
register, write it in the RTL with ``reset_less=True`` and every bit of it
straight from the RAM's read data (``hw/pipeline.py``'s ``BlockRamFIFO`` users
do).

Command line: ``python -m hw.board.outreg NETLIST.json`` rewrites the file in
place and prints what it did (``hw.board.build`` runs it between yosys and
nextpnr unless ``--no-bram-outreg``).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

__all__ = ["absorb_output_registers", "main"]

# yosys LUT4 INIT, bit 15 first: Z = ~D (A, B and C tied to 0)
_INVERTER_INIT = "0000000011111111"
_LUT_PORTS = {"A": "input", "B": "input", "C": "input", "D": "input", "Z": "output"}


def _top(netlist: dict) -> dict:
    tops = [m for m in netlist["modules"].values() if int(m["attributes"].get("top", 0))]
    if len(tops) != 1:
        raise ValueError(f"expected one top module in the netlist, found {len(tops)}")
    return tops[0]


def _width(param) -> int:
    """A yosys integer parameter (a binary string in JSON, or an int)."""
    return param if isinstance(param, int) else int(param, 2)


def _read_sides(cell: dict) -> list[tuple[str, list[str]]]:
    """(side letter(s), data output pins) of a DP16KD's read ports."""
    conns = cell["connections"]
    pins = {s: sorted((p for p in conns if p.startswith(f"DO{s}")),
                      key=lambda p: int(p[3:])) for s in "AB"}
    if _width(cell["parameters"].get("DATA_WIDTH_A", 18)) == 36:
        return [("AB", pins["A"] + pins["B"])]  # pseudo-dual port: one read, on B
    return [("A", pins["A"]), ("B", pins["B"])]


def absorb_output_registers(netlist: dict) -> dict:
    """Rewrites ``netlist`` (yosys JSON, after ``synth_ecp5``) in place; returns
    counts: ``rams`` (sides given OUTREG), ``flops`` (flip-flops removed),
    ``inverters`` (LUT4s added) and ``skipped`` (read sides with used data
    pins left alone, with the first reason for each)."""
    top = _top(netlist)
    cells = top["cells"]
    sinks: dict[object, list[tuple[str, str]]] = defaultdict(list)
    for name, cell in cells.items():
        for port, bits in cell["connections"].items():
            if cell["port_directions"].get(port) != "output":
                for b in bits:
                    if isinstance(b, int):
                        sinks[b].append((name, port))
    for port in top.get("ports", {}).values():
        if port.get("direction") != "input":
            for b in port["bits"]:
                if isinstance(b, int):
                    sinks[b].append(("<port>", "<port>"))
    next_bit = 1 + max((b for c in cells.values() for bits in c["connections"].values()
                        for b in bits if isinstance(b, int)), default=1)
    inverters: dict[object, int] = {}
    stats = {"rams": 0, "flops": 0, "inverters": 0, "skipped": {}}

    def oce_net(ce, cemux):
        nonlocal next_bit
        if cemux.strip() == "1":
            return "1"
        if cemux == "CE":
            return ce
        if ce not in inverters:  # CEMUX INV: the register loads when CE is low
            inverters[ce] = next_bit
            cells[f"$outreg$inv${next_bit}"] = {
                "hide_name": 1, "type": "LUT4", "parameters": {"INIT": _INVERTER_INIT},
                "attributes": {}, "port_directions": dict(_LUT_PORTS),
                "connections": {"A": ["0"], "B": ["0"], "C": ["0"], "D": [ce],
                                "Z": [next_bit]}}
            next_bit += 1
            stats["inverters"] += 1
        return inverters[ce]

    for name in [n for n, c in cells.items() if c["type"] == "DP16KD"]:
        ram = cells[name]
        params, conns = ram["parameters"], ram["connections"]
        for sides, pins in _read_sides(ram):
            used = [p for p in pins if isinstance(conns[p][0], int) and sinks.get(conns[p][0])]
            if not used:
                continue
            why, flops, enable = None, [], None
            clk_pin = "CLKB" if len(sides) == 2 else f"CLK{sides}"
            for s in sides:
                if params.get(f"REGMODE_{s}", "NOREG") != "NOREG":
                    why = f"REGMODE_{s} already {params[f'REGMODE_{s}']}"
                if conns.get(f"RST{s}", ["0"]) != ["0"]:
                    why = why or f"RST{s} is connected"
                if params.get(f"CLK{s}MUX", f"CLK{s}") not in (f"CLK{s}", "CLK"):
                    why = why or f"CLK{s}MUX inverted"
            if len(sides) == 2 and conns["CLKA"] != conns["CLKB"]:
                # the pseudo-dual-port mode's port A data pins: their output
                # register may be port A's, so both ports on the one clock
                why = why or "CLKA and CLKB differ"
            for p in used:
                if why:
                    break
                s = sinks[conns[p][0]]
                ff = cells.get(s[0][0]) if len(s) == 1 else None
                if ff is None or ff["type"] != "TRELLIS_FF" or s[0][1] != "DI":
                    why = f"{p} does not drive one flip-flop's DI alone"
                    break
                fp, fc = ff["parameters"], ff["connections"]
                if fc["CLK"] != conns[clk_pin] or fp.get("CLKMUX", "CLK") != "CLK":
                    why = f"{p}'s flip-flop has another clock"
                elif fc.get("LSR", ["0"]) != ["0"] or fp.get("REGSET", "RESET") != "RESET":
                    why = f"{p}'s flip-flop has a set/reset ({s[0][0]})"
                elif fp.get("GSR", "DISABLED") != "DISABLED":
                    why = f"{p}'s flip-flop uses GSR"
                else:
                    key = (fp.get("CEMUX", "1").strip(), tuple(fc.get("CE", ["1"])))
                    if key[0] == "1":
                        key = ("1", ("1",))
                    if enable not in (None, key):
                        why = f"{p}'s flip-flop has another clock enable"
                    enable = key
                    flops.append((p, s[0][0]))
            if why:
                stats["skipped"][f"{name} {sides}"] = why
                continue
            cemux, ce = enable
            oce = oce_net(ce[0], cemux)
            for s in sides:
                params[f"REGMODE_{s}"] = "OUTREG"
                conns[f"OCE{s}"] = [oce]
            for p, ff_name in flops:
                conns[p] = list(cells.pop(ff_name)["connections"]["Q"])
            stats["rams"] += 1
            stats["flops"] += len(flops)
    return stats


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m hw.board.outreg NETLIST.json", file=sys.stderr)
        return 2
    path = Path(args[0])
    netlist = json.loads(path.read_text())
    stats = absorb_output_registers(netlist)
    path.write_text(json.dumps(netlist))
    print(f"hw.board.outreg: {stats['rams']} block-RAM read sides given their output "
          f"register ({stats['flops']} flip-flops moved in, {stats['inverters']} "
          f"enable inverters); {len(stats['skipped'])} left as they are:")
    for side, why in sorted(stats["skipped"].items()):
        print(f"  {side}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

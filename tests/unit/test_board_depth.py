"""hw/board/depth.py on small hand-made ECP5 netlists: the levels it counts
per cell type, where paths start and end, and the names it reports."""

from hw.board.depth import analyse

LUT_PORTS = {"A": "input", "B": "input", "C": "input", "D": "input", "Z": "output"}
FF_PORTS = {"CLK": "input", "DI": "input", "CE": "input", "LSR": "input", "M": "input",
            "Q": "output"}
CCU_PORTS = {**{f"{p}{i}": "input" for p in "ABCD" for i in (0, 1)}, "CIN": "input",
             "S0": "output", "S1": "output", "COUT": "output"}


def lut(a, z):
    return {"type": "LUT4", "port_directions": LUT_PORTS,
            "connections": {"A": [a], "B": ["0"], "C": ["0"], "D": ["0"], "Z": [z]}}


def ff(d, q):
    return {"type": "TRELLIS_FF", "port_directions": FF_PORTS,
            "connections": {"CLK": [2], "DI": [d], "CE": ["1"], "LSR": ["0"], "M": ["0"],
                            "Q": [q]}}


def ccu(a, cin, s0, cout):
    conns = {p: ["0"] for p, d in CCU_PORTS.items() if d == "input"}
    conns.update({"A0": [a], "CIN": [cin], "S0": [s0], "S1": ["x"], "COUT": [cout]})
    return {"type": "CCU2C", "port_directions": CCU_PORTS, "connections": conns}


def netlist(cells, nets, ports=None):
    return {"modules": {"top": {
        "attributes": {"top": 1},
        "ports": ports or {},
        "cells": cells,
        "netnames": {name: {"bits": bits, "hide_name": int(name.startswith("$"))}
                     for name, bits in nets.items()},
    }}}


def test_lut_chain_between_registers():
    # src (FF, bit 10) -> 3 LUTs -> dst (FF); a second FF fed straight from src.
    cells = {"src": ff(20, 10), "l1": lut(10, 11), "l2": lut(11, 12), "l3": lut(12, 13),
             "dst": ff(13, 20), "near": ff(10, 21)}
    nets = {"counter.value": [10], "$abc$1": [11], "$abc$2": [12], "$abc$3": [13],
            "state": [20], "copy": [21]}
    result, path, _, loops = analyse(netlist(cells, nets))
    assert not loops
    depth, label, bit = result[0]
    assert depth == 3.0 and label == "state (DI)"
    assert path(bit)[0] == "counter.value"
    near = [d for d, lab, _ in result if lab == "copy (DI)"]
    assert near == [0.0]


def test_carry_chain_is_cheaper_than_luts():
    # src -> CCU2C (enter the chain: 1.0) -> COUT -> CCU2C CIN -> COUT (0.1)
    #     -> CCU2C CIN -> S0 (0.25) -> dst
    cells = {"src": ff(30, 10), "c1": ccu(10, "0", 11, 12), "c2": ccu("0", 12, 15, 16),
             "c3": ccu("0", 16, 13, 14), "dst": ff(13, 30)}
    nets = {"a": [10], "s_low": [11], "carry": [12], "sum": [13], "carry_out": [14],
            "mid": [15], "carry2": [16], "r": [30]}
    result, _, _, _ = analyse(netlist(cells, nets))
    depth = dict((lab, d) for d, lab, _ in result)["r (DI)"]
    assert abs(depth - (1.0 + 0.1 + 0.25)) < 1e-9


def test_block_ram_output_starts_late_and_ports_are_endpoints():
    bram = {"type": "DP16KD",
            "port_directions": {"CLKA": "input", "ADA0": "input", "DOA0": "output"},
            "connections": {"CLKA": [2], "ADA0": [40], "DOA0": [41]}}
    cells = {"ram": bram, "l1": lut(41, 42), "addr": ff(43, 40)}
    nets = {"ram_out": [41], "$abc$9": [42], "rd_addr": [40], "next_addr": [43]}
    ports = {"o": {"direction": "output", "bits": [42]},
             "i": {"direction": "input", "bits": [43]}}
    result, _, _, _ = analyse(netlist(cells, nets, ports))
    by_label = {lab: d for d, lab, _ in result}
    assert by_label["port o[0]"] == 3.0 + 1.0
    # the RAM's address input is an endpoint, fed straight from a register
    assert by_label["ram_out (ADA0)"] == 0.0


def test_ipv6_synthesis_is_of_the_nic_not_the_soc(tmp_path):
    """``--ipv6`` builds NicCore with ipv6; the SoC (the board's) has none, so
    asking for it says what to do instead of synthesising the IPv4 SoC."""
    import pytest

    from hw.board.depth import synthesise

    with pytest.raises(ValueError, match="--ipv6 synthesises NicCore or one of its blocks"):
        synthesise("soc", tmp_path, ipv6=True)

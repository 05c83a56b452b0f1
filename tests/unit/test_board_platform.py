"""The MAC's platform form elaborates for the Versa ECP5 with the vendor DDR
cells on the RGMII pins. Needs the [board] extra; skipped without it."""

import os
import subprocess
import time
from pathlib import Path

import pytest

pytest.importorskip("amaranth_boards")

from amaranth.hdl import ClockDomain, ClockSignal, Elaboratable, Module  # noqa: E402
from amaranth.lib import io  # noqa: E402
from amaranth_boards.versa_ecp5 import VersaECP5Platform  # noqa: E402

from hw.board.mac import RGMIIMAC  # noqa: E402


class _Top(Elaboratable):
    """Both RGMII ports (their control pins are named differently), one clock."""

    def elaborate(self, platform):
        m = Module()
        m.submodules.clk = clk = io.Buffer("i", platform.request("clk100", dir="-"))
        for name in ("sync", "eth_tx", "eth_tx90"):
            m.domains += ClockDomain(name)
            m.d.comb += ClockSignal(name).eq(clk.i)
        for port in (0, 1):
            m.submodules[f"mac{port}"] = RGMIIMAC(pads=platform.request("eth_rgmii", port, dir="-"))
        return m


def test_versa_ecp5_ddr_cells():
    plan = VersaECP5Platform().prepare(_Top())
    rtlil = plan.files["top.il"]
    rtlil = rtlil if isinstance(rtlil, str) else rtlil.decode()
    # Per port: rxd[3:0] and rx_ctl in, txd[3:0], tx_ctl and tx_clk out.
    assert rtlil.count("cell \\IDDRX1F") == 2 * 5
    assert rtlil.count("cell \\ODDRX1F") == 2 * 6


# ---- the board's clock generator (hw/board/clocks.py) -------------------------------------------

import re  # noqa: E402

from amaranth.hdl import Signal  # noqa: E402

from hw.board.clocks import VCO_HZ, VersaClocks, core_divider  # noqa: E402


class _ClockTop(Elaboratable):
    """VersaClocks on the Versa's oscillator, one register per domain on an LED."""

    def elaborate(self, platform):
        m = Module()
        m.submodules.clocks = clocks = VersaClocks(125_000_000)
        m.submodules.clk = clk = io.Buffer("i", platform.request("clk100", dir="-"))
        m.d.comb += clocks.clk100.eq(clk.i)
        for i, domain in enumerate(("sync", "eth_tx", "eth_tx90")):
            toggle = Signal(name=f"toggle_{domain}")
            m.d[domain] += toggle.eq(~toggle)
            m.submodules[f"led{i}"] = led = io.Buffer("o", platform.request("led", i, dir="-"))
            m.d.comb += led.o.eq(toggle)
        return m


def _param(rtlil: str, name: str) -> int:
    return int(re.search(rf"parameter \\{name} (\d+)", rtlil).group(1))


def test_versa_clocks_pll():
    plan = VersaECP5Platform().prepare(_ClockTop())
    rtlil = plan.files["top.il"]
    rtlil = rtlil if isinstance(rtlil, str) else rtlil.decode()
    assert rtlil.count("cell \\EHXPLLL") == 1
    # 100 MHz / CLKI_DIV * CLKFB_DIV is the feedback output (CLKOP = eth_tx); the VCO
    # is that times CLKOP_DIV.
    pfd = 100e6 / _param(rtlil, "CLKI_DIV")
    assert pfd * _param(rtlil, "CLKFB_DIV") == 125e6
    assert pfd * _param(rtlil, "CLKFB_DIV") * _param(rtlil, "CLKOP_DIV") == VCO_HZ
    assert 400e6 <= VCO_HZ <= 800e6  # EHXPLLL's VCO range
    for out in ("CLKOS", "CLKOS2"):
        assert VCO_HZ / _param(rtlil, f"{out}_DIV") == 125e6
    # eth_tx90: one VCO cycle later than eth_tx, a quarter of its period.
    assert _param(rtlil, "CLKOS_CPHASE") - _param(rtlil, "CLKOP_CPHASE") == 1
    assert _param(rtlil, "CLKOS_DIV") == 4
    lpf = plan.files["top.lpf"]
    lpf = lpf if isinstance(lpf, str) else lpf.decode()
    for net in ("clocks.eth_tx", "clocks.eth_tx90", "clocks.core"):
        assert f'FREQUENCY NET "{net}" 125000000.0 HZ;' in lpf


def test_versa_clocks_core_frequency():
    assert core_divider(125_000_000) == 4
    assert core_divider(100_000_000) == 5
    assert core_divider(62_500_000) == 8
    for bad in (130_000_000, 0, 250_000_000, "125 MHz"):
        with pytest.raises(ValueError, match="core_hz"):
            VersaClocks(bad)


# ---- make bitstream's report reading (hw/board/build.py) ----------------------------------------

from hw.board.build import (  # noqa: E402
    nextpnr_options,
    router_diverging,
    run_watched,
    summarise,
    timing_failures,
    tool_env,
)

_REPORT = {  # the shape of nextpnr's --report JSON
    "fmax": {
        "$glbnet$clocks.core": {"achieved": 131.2, "constraint": 125.0},
        "$glbnet$clocks.eth_tx": {"achieved": 118.4, "constraint": 125.0},
    },
    "utilization": {
        "TRELLIS_COMB": {"available": 43848, "used": 40000},
        "TRELLIS_FF": {"available": 43848, "used": 20000},
        "DP16KD": {"available": 108, "used": 47},
        "TRELLIS_IO": {"available": 245, "used": 27},
    },
}


def test_build_timing_check():
    assert timing_failures(_REPORT) == ["$glbnet$clocks.eth_tx: 118.4 MHz < 125.0 MHz"]
    ok = {**_REPORT, "fmax": {k: {**v, "achieved": 125.0} for k, v in _REPORT["fmax"].items()}}
    assert timing_failures(ok) == []
    text = summarise(_REPORT)
    assert "| LUT4 (TRELLIS_COMB) | 40000 | 43848 | 91.2 |" in text
    assert "| $glbnet$clocks.eth_tx | 118.4 | 125.0 | **FAIL** |" in text
    assert "| $glbnet$clocks.core | 131.2 | 125.0 | met |" in text


def test_build_nextpnr_options():
    """Timing-driven rip-up is on unless turned off; the report and SDF are
    always asked for (the summary and sta.py read them); extra options last."""
    opts = nextpnr_options(5, "router2", True).split()
    assert opts[:5] == ["--seed", "5", "--router", "router2", "--timing-allow-fail"]
    assert "--tmg-ripup" in opts
    assert opts[opts.index("--report") + 1] == "versa_top.report.json"
    assert opts[opts.index("--sdf") + 1] == "versa_top.sdf"
    assert "--placer" not in opts  # nextpnr's default placer unless one is named
    plain = nextpnr_options(1, "router1", False, "--placer-heap-beta 0.7")
    assert "--tmg-ripup" not in plain.split() and plain.endswith("--placer-heap-beta 0.7")
    static = nextpnr_options(6, "router2", True, placer="static").split()
    assert static[static.index("--placer") + 1] == "static"


def _router_log(counts, start=1, tmgfail=None):
    """router2's iteration lines (nextpnr-ecp5 0.x with --tmg-ripup); ``tmgfail``
    the failing arcs of each line (0 for all by default)."""
    tmgfail = tmgfail or [0] * len(counts)
    return "".join(f"Info:     iter={i} wires={700000 + i} overused={n} overuse={n} "
                   f"tmgfail={t} archfail=NA\n"
                   for i, (n, t) in enumerate(zip(counts, tmgfail, strict=True), start))


def test_router_diverging():
    """The routings that converged (r1rip5, r4rip6: at most 149 overused wires
    after iteration 30) pass; r2rip1's (1,735 at iteration 40 and rising) and
    one still unrouted at iteration 300 stop; a log before routing passes."""
    assert router_diverging("Info: Running main router loop...\n") is None
    converged = _router_log([16000, 5000, 900] + [149] * 40 + [2, 1, 0])
    assert router_diverging(converged) is None
    early = _router_log([16000, 8000, 3000])  # the first iterations are always crowded
    assert router_diverging(early) is None
    diverging = _router_log([5000] * 5 + [700] * 30 + [1735] * 5)
    assert router_diverging(diverging) == "1735 overused wires at router iteration 40"
    slow = _router_log([300] * 299 + [2])
    assert router_diverging(slow) == "still 2 overused wires at router iteration 300"
    assert router_diverging(_router_log([300] * 299 + [0])) is None
    # routed, the timing-driven rip-up stuck on 4 arcs (f20_h31: from iteration 248 on)
    stuck = [5000, 900] + [20] * 10 + [0] * 100
    assert router_diverging(_router_log(stuck[:-1], tmgfail=[0] * 12 + [4] * 99)) is None
    assert router_diverging(_router_log(stuck, tmgfail=[0] * 12 + [4] * 100)) == (
        "routed since iteration 13, but the timing-driven rip-up still has 4 arcs failing at "
        "iteration 112 (--no-tmg-ripup gives the routed result)")
    ends = _router_log([5000, 900] + [0] * 150, tmgfail=[0, 0] + [3] * 80 + [0] * 70)
    assert router_diverging(ends) is None  # the rip-up met timing in time


def test_run_watched_stops_a_diverging_router(tmp_path):
    """The build script is stopped, process group and all, once its log shows
    routing that will not converge; a script that ends is waited for, and a
    failing one raises."""
    log = tmp_path / "versa_top.tim"
    lines = _router_log([5000] * 45).splitlines()
    (tmp_path / "diverge.sh").write_text(
        "".join(f"echo '{line}' >> versa_top.tim\n" for line in lines)
        + "sleep 600 &\necho $! > child.pid\nwait\n")
    assert run_watched("diverge.sh", tmp_path, dict(os.environ), log, poll=0.1) == (
        "5000 overused wires at router iteration 45")
    # the script's child (nextpnr's place) got the signal too: it is gone, or
    # dead and waiting for its new parent to reap it
    child = int((tmp_path / "child.pid").read_text())
    for _ in range(200):
        try:
            if Path(f"/proc/{child}/stat").read_text().split(") ")[1][0] == "Z":
                break
        except (FileNotFoundError, ProcessLookupError):
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the script's child {child} still runs after the stop")
    (tmp_path / "ok.sh").write_text("echo 'Info: done' > versa_top.tim\n")
    assert run_watched("ok.sh", tmp_path, dict(os.environ), log, poll=0.1) is None
    (tmp_path / "fail.sh").write_text("exit 3\n")
    with pytest.raises(subprocess.CalledProcessError):
        run_watched("fail.sh", tmp_path, dict(os.environ), log, poll=0.1)


def test_build_tool_env():
    env = tool_env({"YOSYS": "/opt/yosys", "PATH": "/usr/bin"})
    assert env["YOSYS"] == "/opt/yosys"  # an explicit path is kept
    for var in ("NEXTPNR_ECP5", "ECPPACK"):
        assert env[var].endswith("yowasp-" + var.lower().replace("_", "-"))


"""The MAC's platform form elaborates for the Versa ECP5 with the vendor DDR
cells on the RGMII pins. Needs the [board] extra; skipped without it."""

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

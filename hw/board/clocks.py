"""Clocks and resets of the Versa ECP5 board top: one EHXPLLL from the 100 MHz
oscillator, a reset synchroniser per domain.

``VersaClocks(core_hz)`` defines three clock domains::

    eth_tx    125 MHz   CLKOP, the PLL's feedback: RGMII TX data (ODDRX1F)
    eth_tx90  125 MHz   CLKOS, eth_tx + 90 degrees (2 ns): only the
                        forwarded tx_clk (constraints/versa_ecp5.md)
    sync      core_hz   CLKOS2: NicCore, the MAC's core side, the UART bridge

The VCO runs at 500 MHz (100 MHz / CLKI_DIV 4 = 25 MHz at the phase detector,
x CLKFB_DIV 5 = 125 MHz on CLKOP, whose divider is 4): a quarter of the
125 MHz period is exactly one VCO cycle, so ``eth_tx90`` is CLKOS with
the same divider and its coarse phase one VCO step later. The core clock
is 500 MHz / n for an integer n, so ``core_hz`` must be one of 500/n MHz
(125, 100, 83.3, 62.5, ...); other values raise a ValueError.

Resets: every domain is held in reset while the PLL is unlocked or the
board's reset button (``rst``, active low on the Versa) is pressed, and
released through a ``ResetSynchronizer`` in its own clock (asynchronous
assertion, release two edges later). The core's (``sync``) reset leaves
its synchroniser through a DCCA onto a global clock network, the fabric's
one net that reaches every flip-flop of the device without general routing.
``eth_rx`` is not defined here: the MAC defines it from the PHY's
``rx_clk`` with its reset synchronised from ``sync``'s.

Interface: ``clk100`` (Signal, the oscillator, from the platform's
``clk100`` buffer), ``rst`` (Signal, 1 = reset request), ``locked`` (Out,
the PLL's LOCK, for an LED). Latency of a reset release: 2 cycles of each
domain's clock after LOCK rises and ``rst`` falls.

The clocks are declared to the toolchain (``platform.add_clock_constraint``,
a ``FREQUENCY NET`` line in the LPF) on the PLL outputs, so nextpnr times
each domain at its own frequency.
"""

from amaranth.hdl import (
    ClockDomain,
    ClockSignal,
    Elaboratable,
    Instance,
    Module,
    ResetSignal,
    Signal,
)
from amaranth.lib.cdc import AsyncFFSynchronizer, ResetSynchronizer

__all__ = ["VCO_HZ", "ETH_TX_HZ", "VersaClocks", "core_divider"]

REF_HZ = 100_000_000
VCO_HZ = 500_000_000
ETH_TX_HZ = 125_000_000
CLKI_DIV = 4
CLKFB_DIV = 5
ETH_DIV = VCO_HZ // ETH_TX_HZ  # 4: one VCO cycle = 90 degrees of eth_tx
# The DCC (global clock buffer) that puts the core's reset on a global network:
# nextpnr's name for the LFE5UM-45F's second bottom DCC.
RESET_DCC_BEL = "X40/Y71/BDCC1"


def core_divider(core_hz) -> int:
    """The CLKOS2 divider for ``core_hz``; ValueError if 500 MHz / n cannot make it."""
    if not isinstance(core_hz, (int, float)) or core_hz <= 0:
        raise ValueError(f"core_hz must be a positive frequency in Hz, not {core_hz!r}")
    div = round(VCO_HZ / core_hz)
    if not 1 <= div <= 128 or abs(VCO_HZ / div - core_hz) > 1:
        near = sorted({VCO_HZ // d for d in (3, 4, 5, 6, 8)}, reverse=True)
        raise ValueError(f"core_hz must be 500 MHz / n for an integer n in 3..128 (the PLL's "
                         f"VCO runs at 500 MHz for the 90-degree eth_tx90), e.g. "
                         f"{', '.join(f'{f / 1e6:g} MHz' for f in near)}; not {core_hz!r}")
    if VCO_HZ / div > 200e6:
        raise ValueError(f"core_hz {core_hz!r} is above the 200 MHz this design can close on "
                         f"the ECP5; use 125 MHz (n = 4) or less")
    return div


class VersaClocks(Elaboratable):
    """The board's PLL and reset synchronisers (module docstring)."""

    def __init__(self, core_hz=125_000_000):
        self.core_div = core_divider(core_hz)
        self.core_hz = VCO_HZ // self.core_div if VCO_HZ % self.core_div == 0 \
            else VCO_HZ / self.core_div
        self.clk100 = Signal()
        self.rst = Signal()
        self.locked = Signal()

    def elaborate(self, platform):
        m = Module()
        eth_tx = Signal()
        eth_tx90 = Signal()
        core = Signal()
        m.submodules.pll = Instance(
            "EHXPLLL",
            a_FREQUENCY_PIN_CLKI=str(REF_HZ / 1e6),
            a_FREQUENCY_PIN_CLKOP=str(ETH_TX_HZ / 1e6),
            a_FREQUENCY_PIN_CLKOS=str(ETH_TX_HZ / 1e6),
            a_FREQUENCY_PIN_CLKOS2=f"{VCO_HZ / self.core_div / 1e6:.4f}",
            a_ICP_CURRENT="12",
            a_LPF_RESISTOR="8",
            a_MFG_ENABLE_FILTEROPAMP="1",
            a_MFG_GMCREF_SEL="2",
            p_PLLRST_ENA="DISABLED",
            p_INTFB_WAKE="DISABLED",
            p_STDBY_ENABLE="DISABLED",
            p_DPHASE_SOURCE="DISABLED",
            p_OUTDIVIDER_MUXA="DIVA",
            p_OUTDIVIDER_MUXB="DIVB",
            p_OUTDIVIDER_MUXC="DIVC",
            p_OUTDIVIDER_MUXD="DIVD",
            p_CLKI_DIV=CLKI_DIV,
            p_FEEDBK_PATH="CLKOP",
            p_CLKFB_DIV=CLKFB_DIV,
            p_CLKOP_ENABLE="ENABLED",
            p_CLKOP_DIV=ETH_DIV,
            p_CLKOP_CPHASE=ETH_DIV - 1,
            p_CLKOP_FPHASE=0,
            # One VCO cycle (2 ns) after CLKOP: 90 degrees of 125 MHz.
            p_CLKOS_ENABLE="ENABLED",
            p_CLKOS_DIV=ETH_DIV,
            p_CLKOS_CPHASE=ETH_DIV - 1 + 1,
            p_CLKOS_FPHASE=0,
            p_CLKOS2_ENABLE="ENABLED",
            p_CLKOS2_DIV=self.core_div,
            p_CLKOS2_CPHASE=self.core_div - 1,
            p_CLKOS2_FPHASE=0,
            p_CLKOS3_ENABLE="DISABLED",
            i_CLKI=self.clk100,
            i_CLKFB=eth_tx,
            i_RST=0,
            i_STDBY=0,
            i_PHASESEL0=0,
            i_PHASESEL1=0,
            i_PHASEDIR=1,
            i_PHASESTEP=1,
            i_PHASELOADREG=1,
            i_PLLWAKESYNC=0,
            i_ENCLKOP=0,
            i_ENCLKOS=0,
            i_ENCLKOS2=0,
            i_ENCLKOS3=0,
            o_CLKOP=eth_tx,
            o_CLKOS=eth_tx90,
            o_CLKOS2=core,
            o_LOCK=self.locked,
        )
        if platform is not None:
            platform.add_clock_constraint(eth_tx, ETH_TX_HZ)
            platform.add_clock_constraint(eth_tx90, ETH_TX_HZ)
            platform.add_clock_constraint(core, VCO_HZ / self.core_div)

        for name, clk in (("sync", core), ("eth_tx", eth_tx), ("eth_tx90", eth_tx90)):
            m.domains += ClockDomain(name)
            m.d.comb += ClockSignal(name).eq(clk)
            if name != "sync":
                m.submodules[f"{name}_reset"] = ResetSynchronizer(
                    ~self.locked | self.rst, domain=name)
        # The core's reset reaches every flip-flop of the design (about 25,000
        # LSR pins and some LUT inputs): on general routing that one net is far
        # too slow (docs/timing.md#board-soc); on a global clock network (a
        # DCCA, as the clocks use) every sink is reached with the clock's own
        # insertion delay, so what is left of the path is the synchroniser's
        # clock-to-output and its route into the DCCA.
        sync_rst = Signal()
        sync_rst_global = Signal()
        m.submodules.sync_reset = AsyncFFSynchronizer(
            ~self.locked | self.rst, sync_rst, o_domain="sync")
        # The DCCA is placed by hand on a bottom DCC (the clocks take left and
        # right ones): nextpnr places a free DCCA before the logic, on the top
        # DCC TDCC0, and router2 then finds no route from the synchroniser into
        # it (docs/timing.md#board-soc); the synchroniser's flip-flop is drawn
        # next to a DCC fixed in advance.
        m.submodules.sync_reset_global = Instance(
            "DCCA", a_BEL=RESET_DCC_BEL, i_CLKI=sync_rst, i_CE=1, o_CLKO=sync_rst_global)
        m.d.comb += ResetSignal("sync").eq(sync_rst_global)
        return m

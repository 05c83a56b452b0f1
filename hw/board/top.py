"""The Versa ECP5 board top: BoardSoC on the pins, with its clocks and resets.

``VersaTop`` is an Elaboratable for ``amaranth_boards.versa_ecp5.
VersaECP5Platform`` (LFE5UM-45F, CABGA381; ``versa_ecp5_5g`` for the
LFE5UM5G-45F board works the same). It holds:

* ``VersaClocks`` (hw/board/clocks.py): an EHXPLLL from the 100 MHz
  ``clk100`` oscillator making ``sync`` (the core, ``core_hz``, 125 MHz by
  default), ``eth_tx`` (125 MHz) and ``eth_tx90`` (125 MHz + 90 degrees, only
  for the forwarded ``tx_clk``), each with a reset synchroniser; the reset
  button (``rst``) and PLL lock reset every domain.
* ``BoardSoC`` (hw/board/soc.py): NicCore, the RGMII MAC on ``eth_rgmii``
  port ``port`` (0 by default), the BRAM host-memory window, the UART bridge
  on ``uart`` 0, the register blocks, the LED logic.
* The PHY's reset (``eth_rgmii.rst``, active low on the board) held for
  ``PHY_RESET_CYCLES`` core cycles (2**21, 16.8 ms at 125 MHz; the 88E1512
  wants at least 10 ms) after the core leaves reset, and the MDIO pins:
  ``mdc`` an output, ``mdio`` a tristate buffer (the board has the pull-up).
* The 8 user LEDs (``led`` 0..7, inverted by the platform) driven by
  BoardSoC's ``leds`` (hw/board/soc.py ``LEDS``).

Clock constraints, written into the LPF as ``FREQUENCY`` lines: the three
PLL outputs (``VersaClocks``) and the ``rx_clk`` pin of the RGMII port at 125
MHz (``eth_rx``). nextpnr times every path inside each domain; crossings go
through AsyncFIFO / FFSynchronizer / ResetSynchronizer only, and nextpnr
does not time paths between unrelated clocks. There is no I/O timing
constraint: nextpnr-ecp5 has none (constraints/versa_ecp5.md).

1 Gb/s only on the board: ``eth_tx`` is fixed at 125 MHz. The MAC's 100/10
Mb/s modes need ``eth_tx`` at 25/2.5 MHz, which would take a second PLL
output and a DCSC clock switch here; not built.
"""

from amaranth.hdl import Elaboratable, Module, Signal
from amaranth.lib import io

from .clocks import ETH_TX_HZ, VersaClocks

__all__ = ["PHY_RESET_CYCLES", "VERSA_NIC_PARAMS", "VersaTop"]

PHY_RESET_CYCLES = 1 << 21

# NicCore as built for the LFE5UM-45F: the smallest NicCore the parameters allow,
# bar data_width, with 32-bit DMA addresses (BOARD_NIC_PARAMS addr_width), without
# UET NSCC (the window is the packet window) and without the EV generator (EXPLICIT
# EV profiles only). Keep it so: the 45F has room for neither larger parameters
# nor either block. Most of NicCore does not scale with these parameters (RX's
# header and ACK records, TX's ICRC networks, LUT-RAM FIFOs), so the rest of the
# device is the margin the router needs, and logic added to the board's NicCore
# must leave it. The evidence for each choice: docs/timing.md, "NicCore on the
# 45F: what fits", "Area work: the DMA address width" and "the Versa NicCore
# without NSCC and the EV generator".
VERSA_NIC_PARAMS = dict(num_qps=2, evs_per_qp=2, sack_bits=32, max_mtu=512, mpr_max=128,
                        num_mrs=1, window=16, inflight_depth=16, nscc=False, ev_gen=False)


class VersaTop(Elaboratable):
    """See the module docstring.

    Parameters: ``core_hz`` (the ``sync`` clock; 500 MHz / n, 125 MHz by
    default), ``port`` (RGMII port, 0 or 1), ``baud`` (UART, 115200), and
    any BoardSoC keyword (``mem_size``, NicCore parameters such as
    ``num_qps``) in ``soc_params``; NicCore parameters not given are
    ``VERSA_NIC_PARAMS``'.
    """

    def __init__(self, *, core_hz=125_000_000, port=0, baud=115200, **soc_params):
        soc_params = {**VERSA_NIC_PARAMS, **soc_params}
        if port not in (0, 1):
            raise ValueError(f"port must be 0 or 1 (the Versa's two RGMII ports), not {port!r}")
        self.clocks = VersaClocks(core_hz)
        self.core_hz = int(self.clocks.core_hz)
        self.port = port
        self.baud = baud
        self.soc_params = soc_params
        self.soc = None

    def nic_params(self) -> dict:
        """NicCore's parameters in this build."""
        from .soc import BOARD_NIC_PARAMS

        return {**BOARD_NIC_PARAMS, **{k: v for k, v in self.soc_params.items()
                                       if k in BOARD_NIC_PARAMS}}

    def describe(self) -> str:
        nic = self.nic_params()
        nic_s = ", ".join(f"{k}={v}" for k, v in nic.items())
        return (f"VersaTop: core {self.core_hz / 1e6:g} MHz, eth_tx/eth_tx90 "
                f"{ETH_TX_HZ / 1e6:g} MHz, RGMII port {self.port}, UART {self.baud} baud; "
                f"NicCore({nic_s})")

    def elaborate(self, platform):
        from .soc import BoardSoC

        m = Module()
        m.submodules.clocks = clocks = self.clocks
        m.submodules.clk100 = clk100 = io.Buffer("i", platform.request("clk100", 0, dir="-"))
        m.submodules.rst = rst = io.Buffer("i", platform.request("rst", 0, dir="-"))
        m.d.comb += [clocks.clk100.eq(clk100.i), clocks.rst.eq(rst.i)]

        rgmii = platform.request("eth_rgmii", self.port, dir="-")
        platform.add_clock_constraint(rgmii.rx_clk.io, ETH_TX_HZ)
        self.soc = soc = BoardSoC(clk_freq_hz=self.core_hz, baud=self.baud, rgmii_pads=rgmii,
                                  **self.soc_params)
        m.submodules.soc = soc

        uart = platform.request("uart", 0, dir="-")
        m.submodules.uart_rx = uart_rx = io.Buffer("i", uart.rx)
        m.submodules.uart_tx = uart_tx = io.Buffer("o", uart.tx)
        m.d.comb += [soc.uart_rx.eq(uart_rx.i), uart_tx.o.eq(soc.uart_tx)]

        # PHY reset: asserted while sync is in reset and for PHY_RESET_CYCLES after.
        phy_rst_count = Signal(range(PHY_RESET_CYCLES + 1), init=PHY_RESET_CYCLES)
        with m.If(phy_rst_count != 0):
            m.d.sync += phy_rst_count.eq(phy_rst_count - 1)
        m.submodules.phy_rst = phy_rst = io.Buffer("o", rgmii.rst)
        m.d.comb += phy_rst.o.eq(phy_rst_count != 0)

        m.submodules.mdc = mdc = io.Buffer("o", rgmii.mdc)
        m.submodules.mdio = mdio = io.Buffer("io", rgmii.mdio)
        m.d.comb += [
            mdc.o.eq(soc.mdc),
            mdio.o.eq(soc.mdio_o),
            mdio.oe.eq(soc.mdio_oe),
            soc.mdio_i.eq(mdio.i),
        ]

        for i in range(len(soc.leds)):
            led = platform.request("led", i, dir="-")
            m.submodules[f"led{i}"] = buf = io.Buffer("o", led)
            m.d.comb += buf.o.eq(soc.leds[i])
        return m

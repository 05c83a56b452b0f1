"""RGMII pin interface: the only place that knows about clock edges and DDR.

RGMII (HP/Broadcom RGMII v2.0) carries one GMII byte per clock cycle on four
data pins and one control pin, at both clock edges:

    rising edge   rxd/txd = data[3:0]   rx_ctl/tx_ctl = DV (EN)
    falling edge  rxd/txd = data[7:4]   rx_ctl/tx_ctl = DV xor ER (EN xor ER)

At 1 Gb/s the clock is 125 MHz. At 100 Mb/s (25 MHz) each cycle carries one
MII nibble, sent at both edges; :class:`hw.board.mac.RGMIIMAC` handles that
above this layer.

``RGMIIDDR`` turns the pins into a pair of values per clock cycle and back:

    rx  (domain ``eth_rx``, clocked by the PHY's rx_clk)
        d0, ctl0   the rising-edge sample
        d1, ctl1   the falling-edge sample that follows it
    tx  (domain ``eth_tx``, 125 MHz from the board clock generator)
        d0, ctl0   driven on the pins from the rising edge
        d1, ctl1   driven on the pins from the falling edge
    tx_clk pin     forwarded from domain ``eth_tx90`` (``eth_tx`` shifted by
                   90 degrees): its edges fall in the middle of the data eye,
                   which is what the PHY expects with its TX delay disabled.

The rx side assumes the clock arrives centred in the data eye, which is
what the PHY gives with its RX internal delay enabled (constraints/
versa_ecp5.md): each edge of rx_clk samples the data directly.

Two forms with the same behaviour at this interface:

* ``pads=None``: a behavioural model for simulation and Verilog export.
  The pins are ports of the component (``pins``); the DDR input is a
  rising-edge and a falling-edge register, the DDR output a clock-selected
  mux of a rising-edge and a falling-edge register, exactly as the
  vendor primitives behave at zero delay.
* ``pads`` given (``platform.request("eth_rgmii", 0, dir="-")`` with
  subsignals ``rx_clk``, ``rx_ctl`` (or ``rx_ctrl``), ``rx_data``,
  ``tx_clk``, ``tx_ctl`` (or ``tx_ctrl``), ``tx_data``):
  ``amaranth.lib.io.DDRBuffer`` on each pin, which the ECP5 platform maps to
  IDDRX1F / ODDRX1F.

Latency: rx, 1 rx_clk cycle from the falling-edge sample to ``d0``/``d1``
(the platform primitives may add pipeline stages, see
``amaranth.lib.io.DDRBuffer``); tx, ``d0`` is on the pins from the next
rising edge. Throughput: one pair per clock, both directions.

The ``eth_rx`` domain is the receive clock: ``rx_clk`` (an output of this
component, the buffered pin) is its clock, and the parent defines the domain
(``RGMIIMAC`` does, with its reset synchronised from ``sync``).
"""

from amaranth.hdl import Cat, ClockDomain, ClockSignal, Module, Mux, Signal
from amaranth.lib import io, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["RGMIIDDR", "RGMIIPinSignature", "DDRPairSignature"]


class RGMIIPinSignature(wiring.Signature):
    """RGMII pins, MAC side (``Out`` members are driven by the MAC)."""

    def __init__(self):
        super().__init__(
            {
                "rx_clk": In(1),
                "rxd": In(4),
                "rx_ctl": In(1),
                "tx_clk": Out(1),
                "txd": Out(4),
                "tx_ctl": Out(1),
            }
        )


class DDRPairSignature(wiring.Signature):
    """One clock cycle of RGMII: the rising-edge and the falling-edge values."""

    def __init__(self):
        super().__init__({"d0": Out(4), "d1": Out(4), "ctl0": Out(1), "ctl1": Out(1)})


class RGMIIDDR(wiring.Component):
    """DDR I/O for the RGMII pins (see the module docstring)."""

    def __init__(self, pads=None):
        self._pads = pads
        members = {
            "rx": Out(DDRPairSignature()),
            "tx": In(DDRPairSignature()),
            "rx_clk": Out(1),
        }
        if pads is None:
            members["pins"] = Out(RGMIIPinSignature())
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()

        if self._pads is None:
            pins = self.pins
            m.d.comb += self.rx_clk.eq(pins.rx_clk)
            # Falling-edge registers of the behavioural DDR cells.
            m.domains.eth_rx_neg = ClockDomain(clk_edge="neg", reset_less=True, local=True)
            m.domains.eth_tx_neg = ClockDomain(clk_edge="neg", reset_less=True, local=True)
            m.d.comb += [
                ClockSignal("eth_rx_neg").eq(pins.rx_clk),
                ClockSignal("eth_tx_neg").eq(ClockSignal("eth_tx")),
            ]
            rise = Signal(5)
            fall = Signal(5)
            m.d.eth_rx += rise.eq(Cat(pins.rxd, pins.rx_ctl))
            m.d.eth_rx_neg += fall.eq(Cat(pins.rxd, pins.rx_ctl))
            # The pair (rising sample, following falling sample) moves to the
            # core side together on the next rising edge.
            m.d.eth_rx += [
                self.rx.d0.eq(rise[:4]),
                self.rx.ctl0.eq(rise[4]),
                self.rx.d1.eq(fall[:4]),
                self.rx.ctl1.eq(fall[4]),
            ]

            tx_rise = Signal(5)
            tx_fall = Signal(5)
            tx_fall_neg = Signal(5)
            m.d.eth_tx += [
                tx_rise.eq(Cat(self.tx.d0, self.tx.ctl0)),
                tx_fall.eq(Cat(self.tx.d1, self.tx.ctl1)),
            ]
            m.d.eth_tx_neg += tx_fall_neg.eq(tx_fall)
            tx_pins = Mux(ClockSignal("eth_tx"), tx_rise, tx_fall_neg)
            m.d.comb += [
                pins.txd.eq(tx_pins[:4]),
                pins.tx_ctl.eq(tx_pins[4]),
                # ODDR(D0=1, D1=0) clocked by eth_tx90 is eth_tx90 itself.
                pins.tx_clk.eq(ClockSignal("eth_tx90")),
            ]
            return m

        pads = self._pads
        # amaranth-boards names the control pins rx_ctl/tx_ctl on some boards
        # and ports, rx_ctrl/tx_ctrl on others (Versa ECP5 port 1).
        pad_rx_ctl = getattr(pads, "rx_ctl", None) or pads.rx_ctrl
        pad_tx_ctl = getattr(pads, "tx_ctl", None) or pads.tx_ctrl
        m.submodules.rx_clk_buf = rx_clk_buf = io.Buffer("i", pads.rx_clk)
        m.d.comb += self.rx_clk.eq(rx_clk_buf.i)
        m.submodules.rxd = rxd = io.DDRBuffer("i", pads.rx_data, i_domain="eth_rx")
        m.submodules.rx_ctl = rx_ctl = io.DDRBuffer("i", pad_rx_ctl, i_domain="eth_rx")
        m.d.comb += [
            self.rx.d0.eq(rxd.i[0]),
            self.rx.d1.eq(rxd.i[1]),
            self.rx.ctl0.eq(rx_ctl.i[0]),
            self.rx.ctl1.eq(rx_ctl.i[1]),
        ]
        m.submodules.txd = txd = io.DDRBuffer("o", pads.tx_data, o_domain="eth_tx")
        m.submodules.tx_ctl = tx_ctl = io.DDRBuffer("o", pad_tx_ctl, o_domain="eth_tx")
        m.submodules.tx_clk = tx_clk = io.DDRBuffer("o", pads.tx_clk, o_domain="eth_tx90")
        m.d.comb += [
            txd.o[0].eq(self.tx.d0),
            txd.o[1].eq(self.tx.d1),
            tx_ctl.o[0].eq(self.tx.ctl0),
            tx_ctl.o[1].eq(self.tx.ctl1),
            tx_clk.o[0].eq(1),
            tx_clk.o[1].eq(0),
        ]
        return m

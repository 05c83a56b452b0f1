"""MDIO (IEEE 802.3 clause 22) management master, for the PHY's RGMII delays.

The board top must set the 88E1512's RGMII delay bits (page 2, register 21;
constraints/versa_ecp5.md) before the MAC can talk to it; the host does that
through this master, reached over the UART bridge.

Frame (64 MDC cycles)::

    32 x '1' preamble, ST = 01, OP = 01 write / 10 read, PHYAD[4:0],
    REGAD[4:0], TA (write: 10, read: the PHY turns the line round),
    DATA[15:0]; all MSB first.

The master changes MDIO at MDC's falling edge and samples it at MDC's
rising edge (the PHY drives read data after a rising edge, valid until the
next one), as clause 22 specifies.

Interface: ``mdc``, ``mdio_o``/``mdio_oe``/``mdio_i`` (the MDIO pin through a
tristate buffer; it needs a pull-up); a command: ``phy``, ``reg``, ``wdata``,
``read``, ``start`` (one cycle, ignored while ``busy``); ``rdata`` holds the
last read's data once ``busy`` falls.
Latency: 64 MDC periods (``2 * divisor`` cycles each) from ``start`` to
``busy`` falling. Throughput: one access per 64 MDC periods. MDC must stay
at or below 2.5 MHz: ``divisor`` >= clock / 5 MHz.
"""

from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["MDIOMaster"]


class MDIOMaster(wiring.Component):
    mdc: Out(1)
    mdio_o: Out(1)
    mdio_oe: Out(1)
    mdio_i: In(1)
    phy: In(5)
    reg: In(5)
    wdata: In(16)
    read: In(1)
    start: In(1)
    busy: Out(1)
    rdata: Out(16)

    def __init__(self, divisor: int):
        if divisor < 1:
            raise ValueError(f"MDIO divisor must be at least 1, not {divisor}")
        self.divisor = divisor
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        timer = Signal(range(self.divisor))
        bit = Signal(range(64))  # the bit now on the line, 0 = first preamble bit
        frame = Signal(64)  # shifted out MSB first
        is_read = Signal()
        tick = Signal()
        shift = Signal()

        with m.If(~self.busy):  # the start reloads the timer: its first tick is a period away
            m.d.sync += [tick.eq(self.divisor == 1), shift.eq(0)]
        opcode = Cat(~self.read, self.read)  # 01 write, 10 read (MSB first on the line)
        with m.If(~self.busy & self.start):
            # Bits 63..32 preamble, 31..30 ST, 29..28 OP, 27..23 PHYAD,
            # 22..18 REGAD, 17..16 TA, 15..0 DATA.
            m.d.sync += [
                frame.eq(
                    Cat(
                        self.wdata,
                        Const(0b10, 2),
                        self.reg,
                        self.phy,
                        opcode,
                        Const(0b01, 2),
                        Const(0xFFFF_FFFF, 32),
                    )
                ),
                is_read.eq(self.read),
                bit.eq(0),
                timer.eq(self.divisor - 1),
                self.busy.eq(1),
                self.mdc.eq(0),
            ]
        with m.Elif(self.busy):
            # During a read the PHY owns the line from the TA bits on.
            m.d.comb += [
                self.mdio_o.eq(frame[63]),
                self.mdio_oe.eq(~(is_read & (bit >= 46))),
            ]
            # ``tick`` (timer at 0: MDC toggles) and ``shift`` (tick with MDC high:
            # the falling edge, next bit) are registered, computed from the timer a
            # cycle ahead, so the frame's 64-bit enable is a flip-flop, not a compare.
            with m.If(~tick):
                m.d.sync += [timer.eq(timer - 1), tick.eq(timer == 1),
                             shift.eq((timer == 1) & self.mdc)]
            with m.Else():
                m.d.sync += [timer.eq(self.divisor - 1), self.mdc.eq(~self.mdc),
                             tick.eq(self.divisor == 1), shift.eq((self.divisor == 1) & ~self.mdc)]
                with m.If(~self.mdc & (bit >= 48)):  # rising edge now: the PHY samples, we sample
                    m.d.sync += self.rdata.eq(Cat(self.mdio_i, self.rdata[:-1]))
        with m.If(shift):  # falling edge now: next bit on the line (never while idle)
            m.d.sync += [frame.eq(frame << 1), bit.eq(bit + 1)]
            with m.If(bit == 63):
                m.d.sync += self.busy.eq(0)
        return m

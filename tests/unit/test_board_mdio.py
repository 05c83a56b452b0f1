"""hw.board.mdio.MDIOMaster against a Python clause-22 PHY model in
Amaranth's simulator: writes land in the PHY's registers, reads return
them, the frame has its preamble, ST, OP, addresses and turnaround, and
the master lets go of the line for the PHY's half of a read."""

from amaranth.sim import Simulator

from hw.board.mdio import MDIOMaster

DIVISOR = 2


class PHYModel:
    """Samples MDIO at MDC rising edges; drives read data after them."""

    def __init__(self, phy_addr: int):
        self.phy_addr = phy_addr
        self.regs = {21: 0x1006}
        self.bits: list[int] = []
        self.drive: int | None = None  # the PHY's output on the line, None = released
        self.frames: list[tuple] = []
        self.bad_turnaround = 0

    def rising_edge(self, line: int, master_drives: bool):
        self.bits.append(line)
        n = len(self.bits)
        start = self._frame_start()
        if start is None:
            return
        k = n - start  # bits of this frame so far (after the preamble)
        frame = self.bits[start:]
        if k == 14:
            op = frame[2] << 1 | frame[3]
            self._op = op
            self._phy = int("".join(map(str, frame[4:9])), 2)
            self._reg = int("".join(map(str, frame[9:14])), 2)
            if op == 0b10 and self._phy == self.phy_addr:
                self.drive = None  # first TA bit: nobody drives
                self._read_value = self.regs.get(self._reg, 0xFFFF)
        if k == 15 and self._op == 0b10 and self._phy == self.phy_addr:
            self.drive = 0  # second TA bit
            if master_drives:
                self.bad_turnaround += 1
        if 16 <= k < 32 and self._op == 0b10 and self._phy == self.phy_addr:
            self.drive = (self._read_value >> (31 - k)) & 1
            if master_drives:
                self.bad_turnaround += 1
        if k == 32:
            if self._op == 0b01 and self._phy == self.phy_addr:
                assert frame[14:16] == [1, 0], "write turnaround is not 10"
                self.regs[self._reg] = int("".join(map(str, frame[16:32])), 2)
            self.frames.append((self._op, self._phy, self._reg))
            self.drive = None
            self.bits = []

    def _frame_start(self):
        """Index of the first ST bit (ST = 01 after 32 preamble ones), if seen."""
        bits = self.bits
        for i in range(32, len(bits) - 1):
            if bits[i - 32 : i] == [1] * 32 and bits[i] == 0 and bits[i + 1] == 1:
                return i
        return None


def test_mdio_read_write():
    dut = MDIOMaster(DIVISOR)
    phy = PHYModel(phy_addr=0)
    results = []

    async def line_model(ctx):
        prev_mdc = 0
        async for _, _, mdc, o, oe in ctx.tick().sample(dut.mdc, dut.mdio_o, dut.mdio_oe):
            line = o if oe else (1 if phy.drive is None else phy.drive)
            if oe and phy.drive is not None:
                raise AssertionError("both ends drive MDIO")
            if mdc and not prev_mdc:
                phy.rising_edge(line, bool(oe))
            ctx.set(dut.mdio_i, 1 if phy.drive is None else phy.drive)
            prev_mdc = mdc

    async def access(ctx, reg, *, read, wdata=0, phy_addr=0):
        ctx.set(dut.phy, phy_addr)
        ctx.set(dut.reg, reg)
        ctx.set(dut.wdata, wdata)
        ctx.set(dut.read, read)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        await ctx.tick().until(~dut.busy)
        return ctx.get(dut.rdata)

    async def host(ctx):
        results.append(await access(ctx, 21, read=True))
        await access(ctx, 22, read=False, wdata=2)  # page 2
        await access(ctx, 21, read=False, wdata=0x1026)  # RX delay on, TX delay off
        results.append(await access(ctx, 21, read=True))
        results.append(await access(ctx, 22, read=True))
        await access(ctx, 5, read=False, wdata=0xBEEF, phy_addr=3)  # another PHY

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(host)
    sim.add_process(line_model)
    sim.run()
    assert results == [0x1006, 0x1026, 2]
    assert phy.regs == {21: 0x1026, 22: 2}
    assert phy.frames == [(2, 0, 21), (1, 0, 22), (1, 0, 21), (2, 0, 21), (2, 0, 22), (1, 3, 5)]
    assert phy.bad_turnaround == 0

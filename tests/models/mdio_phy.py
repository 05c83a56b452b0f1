"""A clause-22 MDIO PHY: the peer of hw/board/mdio.py's MDIOMaster."""



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

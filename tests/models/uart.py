"""An 8N1 UART for cocotb benches (cocotbext-uart is not installed): drives
a DUT's ``rx`` and decodes its ``tx``."""

from __future__ import annotations

import cocotb
from cocotb.queue import Queue
from cocotb.triggers import FallingEdge, Timer, with_timeout


class UartModel:
    """8N1 UART at ``bit_ns`` per bit: ``write`` drives ``rx``, a monitor
    decodes ``tx`` into ``received`` and records framing errors."""

    def __init__(self, rx, tx, bit_ns: float, timeout_bits: int = 40):
        self.rx, self.tx, self.bit_ns = rx, tx, bit_ns
        self.timeout_bits = timeout_bits  # the bridge's idle timeout, in bits
        self.rx.value = 1
        self.received: Queue[int] = Queue()
        self.framing_errors = 0
        cocotb.start_soon(self._monitor())

    async def send_byte(self, byte: int, *, stop: int = 1, bit_ns: float | None = None):
        bit = bit_ns or self.bit_ns
        for level in [0] + [(byte >> i) & 1 for i in range(8)] + [stop]:
            self.rx.value = level
            await Timer(bit, unit="ns")
        self.rx.value = 1

    async def write(self, data: bytes, *, bit_ns: float | None = None):
        for b in data:
            await self.send_byte(b, bit_ns=bit_ns)

    async def read(self, n: int, timeout_ns: float | None = None) -> bytes:
        """Up to ``n`` bytes; stops early when none comes for ``timeout_ns``."""
        timeout_ns = timeout_ns or (self.timeout_bits + 40) * self.bit_ns
        out = bytearray()
        while len(out) < n:
            try:
                out.append(await with_timeout(self.received.get(), timeout_ns, "ns"))
            except cocotb.triggers.SimTimeoutError:
                break
        return bytes(out)

    async def _monitor(self):
        while True:
            await FallingEdge(self.tx)
            await Timer(self.bit_ns / 2, unit="ns")
            if int(self.tx.value):
                continue  # a glitch
            byte = 0
            for i in range(8):
                await Timer(self.bit_ns, unit="ns")
                byte |= int(self.tx.value) << i
            await Timer(self.bit_ns, unit="ns")
            if not int(self.tx.value):
                self.framing_errors += 1
            self.received.put_nowait(byte)

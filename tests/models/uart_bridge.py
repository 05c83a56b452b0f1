"""``BridgeModel``: a byte-level reference of hw/board/uart.py's framing as
docs/board.md specifies it, standing in for the serial port."""

import struct

from host_driver.uart_transport import (
    CMD_READ,
    CMD_WRITE,
    checksum,
)
from hw.board import uart as gateware


class BridgeModel:
    """A serial port with the bridge behind it: ``write`` takes request
    bytes, ``read`` returns response bytes. ``regs`` is the AXI slave; an
    address in ``slverr`` answers SLVERR."""

    def __init__(self):
        self.regs: dict[int, int] = {}
        self.slverr: set[int] = set()
        self.pending = bytearray()
        self.out = bytearray()
        self.corrupt_next = False
        self.truncate_next = False

    def _respond(self, status: int, data: int = 0):
        body = struct.pack(">BI", status, data)
        frame = bytearray(body + bytes([checksum(body)]))
        if self.corrupt_next:
            frame[2] ^= 0x08
            self.corrupt_next = False
        if self.truncate_next:
            frame = frame[:3]
            self.truncate_next = False
        self.out += frame

    def write(self, data: bytes):
        self.pending += data
        while self.pending:
            cmd = self.pending[0]
            if cmd not in (CMD_READ, CMD_WRITE):
                # The gateware discards until the line is quiet: one reply.
                self.pending.clear()
                self._respond(gateware.STATUS_BAD_COMMAND)
                return
            length = 10 if cmd == CMD_WRITE else 6
            if len(self.pending) < length:
                return  # the gateware would time out; the test never stops half way
            frame, self.pending = bytes(self.pending[:length]), self.pending[length:]
            if sum(frame) & 0xFF:
                self._respond(gateware.STATUS_BAD_CHECKSUM)
                continue
            addr = int.from_bytes(frame[1:5], "big")
            if addr in self.slverr:
                self._respond(2)
            elif cmd == CMD_WRITE:
                self.regs[addr] = int.from_bytes(frame[5:9], "big")
                self._respond(0)
            else:
                self._respond(0, self.regs.get(addr, 0))

    def read(self, n: int) -> bytes:
        data, self.out = bytes(self.out[:n]), self.out[n:]
        return data

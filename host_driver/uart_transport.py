"""Host side of the UART-to-AXI4-Lite bridge (hw/board/uart.py, docs/board.md).

``UARTTransport`` gives the host driver ``read32(addr)`` / ``write32(addr,
value)`` over any object with ``read(n) -> bytes`` and ``write(data)``: a
``serial.Serial`` on a real board (``open_serial``), or a fake in tests.
``AsyncUARTTransport`` is the same over a port whose ``read``/``write`` are
coroutines (a cocotb UART model).

Every request gets exactly one 6-byte response. A response with a bridge
error status raises ``UARTBridgeError``; a short or corrupt response raises
``UARTLinkError``. Requests are not retried: a write whose response was lost
may have been applied, and registers can have side effects (doorbells).
After ``UARTLinkError`` call ``resync()`` (waits out the bridge's quiet
timeout and drops stale bytes) before the next request.
"""

from __future__ import annotations

import struct
import time

__all__ = [
    "AXI_RESP_NAMES",
    "CMD_READ",
    "CMD_WRITE",
    "RESPONSE_BYTES",
    "STATUS_NAMES",
    "AsyncUARTTransport",
    "UARTBridgeError",
    "UARTLinkError",
    "UARTTransport",
    "checksum",
    "decode_response",
    "encode_read",
    "encode_write",
    "open_serial",
]

CMD_READ = 0x52  # 'R'
CMD_WRITE = 0x57  # 'W'
RESPONSE_BYTES = 6
AXI_RESP_NAMES = {0: "OKAY", 1: "EXOKAY", 2: "SLVERR", 3: "DECERR"}
STATUS_NAMES = {
    **AXI_RESP_NAMES,
    0x80: "bad checksum",
    0x81: "bad command",
    0x82: "UART framing error",
    0x83: "request timeout",
}


class UARTLinkError(IOError):
    """The response was short or failed its checksum."""


class UARTBridgeError(IOError):
    """The bridge answered with an error status (not OKAY)."""

    def __init__(self, status: int, addr: int, op: str):
        self.status, self.addr, self.op = status, addr, op
        name = STATUS_NAMES.get(status, f"unknown status 0x{status:02x}")
        super().__init__(f"{op} 0x{addr:08x}: {name} (0x{status:02x})")


def checksum(frame: bytes) -> int:
    """The byte that makes the sum of ``frame`` plus itself 0 modulo 256."""
    return -sum(frame) & 0xFF


def encode_read(addr: int) -> bytes:
    body = struct.pack(">BI", CMD_READ, addr & 0xFFFFFFFF)
    return body + bytes([checksum(body)])


def encode_write(addr: int, value: int) -> bytes:
    body = struct.pack(">BII", CMD_WRITE, addr & 0xFFFFFFFF, value & 0xFFFFFFFF)
    return body + bytes([checksum(body)])


def decode_response(frame: bytes) -> tuple[int, int]:
    """(status, data) of a response; raises UARTLinkError if it is not one."""
    if len(frame) != RESPONSE_BYTES:
        raise UARTLinkError(f"response of {len(frame)} bytes, expected {RESPONSE_BYTES}")
    if sum(frame) & 0xFF:
        raise UARTLinkError(f"response {frame.hex()} fails its checksum")
    status, data = struct.unpack(">BI", frame[:5])
    return status, data


def _result(frame: bytes, addr: int, op: str) -> int:
    status, data = decode_response(frame)
    if status != 0:
        raise UARTBridgeError(status, addr, op)
    return data


class UARTTransport:
    """Register access over a blocking byte port (pyserial ``Serial`` or a fake).

    ``quiet_time`` (seconds) must exceed the bridge's quiet timeout (40 bit
    times by default: 0.35 ms at 115200 baud); ``resync`` waits that long.
    """

    def __init__(self, port, *, quiet_time: float = 0.01):
        self.port = port
        self.quiet_time = quiet_time

    def _transact(self, request: bytes) -> bytes:
        self.port.write(request)
        return bytes(self.port.read(RESPONSE_BYTES))

    def read32(self, addr: int) -> int:
        return _result(self._transact(encode_read(addr)), addr, "read")

    def write32(self, addr: int, value: int) -> None:
        _result(self._transact(encode_write(addr, value)), addr, "write")

    def resync(self) -> None:
        """Let the bridge time out any partial request, then drop what it sent."""
        time.sleep(self.quiet_time)
        reset_input = getattr(self.port, "reset_input_buffer", None)
        if reset_input is not None:
            reset_input()
        else:
            while self.port.read(RESPONSE_BYTES):
                pass


class AsyncUARTTransport:
    """The same over a port whose ``read(n)`` and ``write(data)`` are coroutines."""

    def __init__(self, port):
        self.port = port

    async def _transact(self, request: bytes) -> bytes:
        await self.port.write(request)
        return bytes(await self.port.read(RESPONSE_BYTES))

    async def read32(self, addr: int) -> int:
        return _result(await self._transact(encode_read(addr)), addr, "read")

    async def write32(self, addr: int, value: int) -> None:
        _result(await self._transact(encode_write(addr, value)), addr, "write")


def open_serial(port: str, baud: int = 115200, *, timeout: float = 0.5) -> UARTTransport:
    """A UARTTransport on a serial port. Needs pyserial (not a project dependency)."""
    try:
        import serial
    except ImportError as exc:  # pragma: no cover - depends on the host
        raise ImportError("open_serial needs pyserial: pip install pyserial") from exc
    return UARTTransport(serial.Serial(port, baud, timeout=timeout))

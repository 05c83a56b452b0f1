"""cocotb regression of hw.board.uart.UARTToAXI4Lite under Verilator.

``TB`` starts the clock, binds cocotbext-axi's ``AxiLiteSlave`` to ``m_axil``
over a RAM whose out-of-range accesses answer SLVERR, and a bit-banged UART
model (below; cocotbext-uart is not installed) to ``rx``/``tx``. The host side is the real
``host_driver.uart_transport.AsyncUARTTransport`` over the model, so the
framing is checked from both ends: every request's effect on the RAM, every
response byte, and the error statuses (bad checksum, bad command, framing
error, timeout), each followed by a good request to show the bridge is back
in step. The model also checks the bridge's TX bit timing (each bit sampled
at its middle, stop bit high) and sends at +-3 % baud error.
"""

from __future__ import annotations

import logging
import os

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, Timer
from cocotbext.axi import AxiLiteBus, AxiLiteSlave

from host_driver.uart_transport import (
    RESPONSE_BYTES,
    AsyncUARTTransport,
    UARTBridgeError,
    decode_response,
    encode_read,
    encode_write,
)
from hw.board.uart import (
    STATUS_BAD_CHECKSUM,
    STATUS_BAD_COMMAND,
    STATUS_FRAMING,
    STATUS_TIMEOUT,
    UARTToAXI4Lite,
)
from tests import seeds
from tests.models.uart import UartModel

CLK_NS = 10
DIVISOR = int(os.environ.get("BOARD_UART_DIVISOR", "8"))
TIMEOUT_BITS = 40
BIT_NS = CLK_NS * DIVISOR
RAM_SIZE = 0x1000


class CheckedRam:
    """The AXI slave's target: ``size`` bytes of RAM; an access beyond them
    raises, which cocotbext-axi's AxiLiteSlave answers with SLVERR."""

    def __init__(self, size: int):
        self.mem = bytearray(size)

    def _check(self, addr: int, n: int):
        if addr + n > len(self.mem):
            raise IndexError(f"access 0x{addr:x}+{n} beyond 0x{len(self.mem):x}")

    async def read(self, addr: int, n: int) -> bytes:
        self._check(addr, n)
        return bytes(self.mem[addr : addr + n])

    async def write(self, addr: int, data: bytes):
        self._check(addr, len(data))
        self.mem[addr : addr + len(data)] = data

    def peek(self, addr: int, n: int) -> bytes:
        return bytes(self.mem[addr : addr + n])

    def poke(self, addr: int, data: bytes):
        self.mem[addr : addr + len(data)] = data


class TB:
    def __init__(self, dut):
        self.dut = dut
        self.log = dut._log
        cocotb.start_soon(Clock(dut.clk, CLK_NS, unit="ns").start())
        self.ram = CheckedRam(RAM_SIZE)
        self.slave = AxiLiteSlave(
            AxiLiteBus.from_prefix(dut, "m_axil", bus_separator="__"),
            dut.clk,
            dut.rst,
            target=self.ram,
        )
        self.slave.write_if.log.setLevel(logging.ERROR)
        self.slave.read_if.log.setLevel(logging.ERROR)
        self.uart = UartModel(dut.rx, dut.tx, BIT_NS, TIMEOUT_BITS)
        self.host = AsyncUARTTransport(self.uart)

    async def reset(self):
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 4)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 4)

    async def response(self) -> tuple[int, int]:
        return decode_response(await self.uart.read(RESPONSE_BYTES))

    async def assert_silent(self, bits: int = 60):
        extra = await self.uart.read(1, timeout_ns=bits * BIT_NS)
        assert not extra, f"unexpected byte {extra.hex()} from the bridge"

    async def check_alive(self, rng):
        """A write and a read back: the bridge is in step again."""
        addr = rng.randrange(RAM_SIZE // 4) * 4
        value = rng.getrandbits(32)
        await self.host.write32(addr, value)
        assert await self.host.read32(addr) == value


@cocotb.test()
async def test_read_write(dut):
    """Random writes and reads through the transport, checked against the RAM."""
    tb = TB(dut)
    await tb.reset()
    rng = seeds.rng(1)
    shadow = {}
    for _ in range(24):
        addr = rng.randrange(RAM_SIZE // 4) * 4
        if rng.random() < 0.5 or not shadow:
            value = rng.getrandbits(32)
            await tb.host.write32(addr, value)
            shadow[addr] = value
            assert tb.ram.peek(addr, 4) == value.to_bytes(4, "little")
        else:
            addr = rng.choice(list(shadow))
            assert await tb.host.read32(addr) == shadow[addr]
    # A value placed by the testbench reads back through the bridge.
    tb.ram.poke(0x10, (0xA5C3_0F01).to_bytes(4, "little"))
    assert await tb.host.read32(0x10) == 0xA5C3_0F01
    assert tb.uart.framing_errors == 0


@cocotb.test()
async def test_slave_error(dut):
    """SLVERR from the slave comes back as status 2 for reads and writes."""
    tb = TB(dut)
    await tb.reset()
    for op in ("read", "write"):
        try:
            if op == "read":
                await tb.host.read32(RAM_SIZE + 0x40)
            else:
                await tb.host.write32(RAM_SIZE + 0x40, 1)
        except UARTBridgeError as err:
            assert err.status == 2, err
        else:
            raise AssertionError(f"{op} beyond the RAM did not fail")
    await tb.check_alive(seeds.rng(2))


@cocotb.test()
async def test_bad_checksum(dut):
    """A corrupted request is answered at once with STATUS_BAD_CHECKSUM and
    not executed."""
    tb = TB(dut)
    await tb.reset()
    tb.ram.poke(0x20, bytes(4))
    request = bytearray(encode_write(0x20, 0x12345678))
    request[6] ^= 0x40
    await tb.uart.write(bytes(request))
    assert await tb.response() == (STATUS_BAD_CHECKSUM, 0)
    assert tb.ram.peek(0x20, 4) == bytes(4), "a write with a bad checksum was applied"
    request = bytearray(encode_read(0x20))
    request[-1] ^= 1
    await tb.uart.write(bytes(request))
    assert await tb.response() == (STATUS_BAD_CHECKSUM, 0)
    await tb.check_alive(seeds.rng(3))


@cocotb.test()
async def test_bad_command(dut):
    """An unknown command byte: the rest is discarded until the line is quiet,
    then one STATUS_BAD_COMMAND response."""
    tb = TB(dut)
    await tb.reset()
    await tb.uart.write(b"X" + encode_write(0x30, 0xDEADBEEF)[1:] + b"RW")
    assert await tb.response() == (STATUS_BAD_COMMAND, 0)
    await tb.assert_silent()
    assert tb.ram.peek(0x30, 4) == bytes(4)
    await tb.check_alive(seeds.rng(4))


@cocotb.test()
async def test_framing_error(dut):
    """A byte with a low stop bit inside a request: STATUS_FRAMING, once."""
    tb = TB(dut)
    await tb.reset()
    request = encode_write(0x40, 0x01020304)
    await tb.uart.write(request[:3])
    await tb.uart.send_byte(request[3], stop=0)
    await tb.uart.write(request[4:])
    assert await tb.response() == (STATUS_FRAMING, 0)
    await tb.assert_silent()
    assert tb.ram.peek(0x40, 4) == bytes(4)
    # A break (line low for 3 byte times) on an idle bridge.
    tb.dut.rx.value = 0
    await Timer(30 * BIT_NS, unit="ns")
    tb.dut.rx.value = 1
    assert await tb.response() == (STATUS_FRAMING, 0)
    await tb.assert_silent()
    await tb.check_alive(seeds.rng(5))


@cocotb.test()
async def test_timeout(dut):
    """A request that stops half way is answered with STATUS_TIMEOUT after the
    quiet time, not before."""
    tb = TB(dut)
    await tb.reset()
    await tb.uart.write(encode_read(0x50)[:3])
    early = await tb.uart.read(1, timeout_ns=(TIMEOUT_BITS - 4) * BIT_NS)
    assert not early, "answered before the quiet timeout"
    assert await tb.response() == (STATUS_TIMEOUT, 0)
    await tb.check_alive(seeds.rng(6))


@cocotb.test()
async def test_baud_tolerance(dut):
    """The host's clock 3 % fast or slow: requests still land."""
    tb = TB(dut)
    await tb.reset()
    for skew in (0.97, 1.03):
        value = seeds.rng(7).getrandbits(32) ^ int(skew * 100)
        await tb.uart.write(encode_write(0x60, value), bit_ns=BIT_NS * skew)
        assert await tb.response() == (0, 0)
        await tb.uart.write(encode_read(0x60), bit_ns=BIT_NS * skew)
        assert await tb.response() == (0, value)


# ---------------------------------------------------------------------------
# pytest


def run(**kwargs):
    from sim.cocotb_runner import run_cocotb

    return run_cocotb(
        name=f"board_uart_d{DIVISOR}",
        elaborate=lambda: UARTToAXI4Lite(DIVISOR, addr_width=32, timeout=TIMEOUT_BITS),
        toplevel="uart_axil",
        test_module="tests.hw.test_board_uart",
        **kwargs,
    )


def test_board_uart():
    run()

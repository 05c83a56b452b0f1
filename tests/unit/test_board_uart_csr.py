"""The host's path to the MAC's registers on the board, in Amaranth's
simulator: UART bit stream -> UARTToAXI4Lite -> AXI4LiteToCSR ->
MACRegisters, requests and responses framed by host_driver.uart_transport."""

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from host_driver.uart_transport import decode_response, encode_read, encode_write
from hw.board.regs import MAC_TYPE_ID, MAC_VERSION, MACRegisters
from hw.board.uart import UARTToAXI4Lite
from hw.csr import AXI4LiteToCSR

DIVISOR = 4


def test_registers_over_uart():
    m = Module()
    m.submodules.uart = uart = UARTToAXI4Lite(DIVISOR, addr_width=8, timeout=20)
    m.submodules.axil = axil = AXI4LiteToCSR(addr_width=8)
    m.submodules.regs = regs = MACRegisters(addr_width=8)
    wiring.connect(m, uart.m_axil, axil.s_axil)
    wiring.connect(m, axil.csr, regs.csr)
    responses = []

    async def send(ctx, frame: bytes):
        for byte in frame:
            for level in [0] + [(byte >> i) & 1 for i in range(8)] + [1]:
                ctx.set(uart.rx, level)
                await ctx.tick().repeat(DIVISOR)

    async def recv(ctx, n=6) -> bytes:
        out = bytearray()
        while len(out) < n:
            await ctx.tick().until(~uart.tx)  # start bit
            await ctx.tick().repeat(DIVISOR // 2)
            byte = 0
            for i in range(8):
                await ctx.tick().repeat(DIVISOR)
                byte |= ctx.get(uart.tx) << i
            await ctx.tick().repeat(DIVISOR)
            assert ctx.get(uart.tx) == 1, "stop bit low"
            out.append(byte)
        return bytes(out)

    async def host(ctx):
        ctx.set(uart.rx, 1)
        await ctx.tick().repeat(10)
        for request in (
            encode_read(0x00),
            encode_read(0x08),
            encode_write(0x0C, 0b10),
            encode_read(0x0C),
        ):
            await send(ctx, request)
            responses.append(decode_response(await recv(ctx)))
        responses.append(ctx.get(regs.rx_pass_bad))

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(host)
    sim.run()
    assert responses == [
        (0, (MAC_TYPE_ID << 16) | MAC_VERSION),
        (0, (1518 << 16) | 64),
        (0, 0),
        (0, 0b10),
        1,
    ]

"""The host's path to the MAC's registers on the board, in Amaranth's
simulator: UART bit stream -> UARTToAXI4Lite -> AXI4LiteToCSR ->
MACRegisters, requests and responses framed by host_driver.uart_transport;
then the PHY's RGMII delay bits set through the MDIO register, against the
PHY model of tests/unit/test_board_mdio.py."""

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from host_driver.uart_transport import decode_response, encode_read, encode_write
from hw.board.regs import MAC_TYPE_ID, MAC_VERSION, MACRegisters
from hw.board.uart import UARTToAXI4Lite
from hw.csr import AXI4LiteToCSR
from tests.models.mdio_phy import PHYModel

DIVISOR = 4


def test_registers_over_uart():
    m = Module()
    m.submodules.uart = uart = UARTToAXI4Lite(DIVISOR, addr_width=8, timeout=20)
    m.submodules.axil = axil = AXI4LiteToCSR(addr_width=8)
    m.submodules.regs = regs = MACRegisters(addr_width=8, mdio_divisor=2)
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

    phy = PHYModel(phy_addr=0)

    async def mdio_line(ctx):
        prev_mdc = 0
        async for _, _, mdc, o, oe in ctx.tick().sample(regs.mdc, regs.mdio_o, regs.mdio_oe):
            if mdc and not prev_mdc:
                phy.rising_edge(o if oe else (1 if phy.drive is None else phy.drive), bool(oe))
            ctx.set(regs.mdio_i, 1 if phy.drive is None else phy.drive)
            prev_mdc = mdc

    async def transact(ctx, request):
        await send(ctx, request)
        return decode_response(await recv(ctx))

    async def mdio(ctx, word):
        """One MDIO access through the register; returns the register when idle."""
        assert await transact(ctx, encode_write(0x40, word)) == (0, 0)
        while True:
            status, value = await transact(ctx, encode_read(0x40))
            assert status == 0
            if not value >> 31:
                return value

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
        await mdio(ctx, (0 << 21) | (22 << 16) | 2)  # page 2
        await mdio(ctx, (0 << 21) | (21 << 16) | 0x1026)  # RX delay on, TX delay off
        responses.append(await mdio(ctx, (1 << 26) | (0 << 21) | (21 << 16)))

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(host)
    sim.add_process(mdio_line)
    sim.run()
    assert responses == [
        (0, (MAC_TYPE_ID << 16) | MAC_VERSION),
        (0, (1518 << 16) | 64),
        (0, 0),
        (0, 0b10),
        1,
        0x1026,
    ]
    assert phy.regs == {21: 0x1026, 22: 2} and phy.bad_turnaround == 0

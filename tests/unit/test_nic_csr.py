"""hw/nic/csr.py: the CSR interconnect (uniform headers, decode, injected
writes) and the device-info block, in Amaranth's simulator; NicCore's
parameter checks and block layout."""

import pytest
from amaranth.hdl import Cat, ClockDomain, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In
from amaranth.sim import Simulator

from hw.csr import AXI4LiteToCSR, CSRBusSignature, RegisterMap
from hw.nic.csr import (
    DEVICE_INFO_PARAMS,
    DEVICE_INFO_TYPE_ID,
    NIC_VERSION,
    BlockWindow,
    CsrInterconnect,
    DeviceInfo,
    device_info_register_map,
    header_word,
)
from tests.unit.csrbus import axil_read, axil_write, csr_read, csr_write

BB = 8  # 256-byte windows keep the simulation small
# NicCore tests construct the blocks without elaborating them.
pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")


class RegFile(wiring.Component):
    """A block with 8 RW words (word 0 and 1 hold its own, non-uniform ID/NEXT)
    that counts its read and write strobes; it answers reads ``latency``
    (1 or 2) cycles after ``r_stb``."""

    def __init__(self, own_id, latency=1):
        self.own_id, self.latency = own_id, latency
        super().__init__({"csr": In(CSRBusSignature(BB))})
        self.reads = Signal(8)
        self.writes = Signal(8)
        self.words = [Signal(32, name=f"w{i}", init=own_id if i == 0 else 0) for i in range(8)]

    def elaborate(self, platform):
        m = Module()
        csr = self.csr
        idx = csr.addr[2:5]
        with m.If(csr.w_stb):
            m.d.sync += self.writes.eq(self.writes + 1)
            for i, w in enumerate(self.words):
                with m.If(idx == i):
                    m.d.sync += w.eq(csr.w_data)
        first = Signal(32)
        with m.If(csr.r_stb):
            m.d.sync += self.reads.eq(self.reads + 1)
            for i, w in enumerate(self.words):
                with m.If(idx == i):
                    m.d.sync += first.eq(w)
        if self.latency == 1:  # held while addr holds, as the interconnect asks
            m.d.comb += csr.r_data.eq(first)
            return m
        # latency 2, 3: the word only in the cycle it is due, 0 before and after
        due = Signal(self.latency)
        m.d.sync += due.eq(Cat(csr.r_stb, due[:-1]))
        for k in range(self.latency - 1):
            later = Signal(32, name=f"later{k}")
            m.d.sync += later.eq(first)
            first = later
        m.d.comb += csr.r_data.eq(Mux(due[-1], first, 0))
        return m


def _map(name, type_id, version):
    rm = RegisterMap(name, type_id, version, name)
    rm.add("own_id", 0, "RO", "the block's own ID word")
    rm.add("data", 8, "RW", "data words", count=6)
    return rm


PARAMS = {name: 0x100 + i for i, (name, _, _) in enumerate(DEVICE_INFO_PARAMS)}
SCRATCH = device_info_register_map()["scratch"].offset


class Top:
    """Device info and two register files behind the interconnect and a bridge.
    ``mixed``: the blocks answer at latencies 1 (device info), 2 and 3 (the
    windows say so), the interconnect at ``latency`` (3)."""

    def __init__(self, latency=1, mixed=False):
        self.info = DeviceInfo(PARAMS, addr_width=BB)
        lat = (1, 2, 3) if mixed else (0, latency, latency)
        # a block that packs its own ID the other way round, as reliability does
        self.blocks = [RegFile(0x0001_0007, lat[1]), RegFile(0x0002_0008, lat[2])]
        maps = [self.info.register_map, _map("a", 0x0007, 1), _map("b", 0x0008, 2)]
        self.windows = [BlockWindow(rm.name, i << BB, rm, (i + 1) << BB if i < 2 else 0,
                                    lat[i])
                        for i, rm in enumerate(maps)]
        self.ic = CsrInterconnect(self.windows, BB, block_read_latency=latency)
        self.bridge = AXI4LiteToCSR(self.ic.addr_width, read_latency=self.ic.read_latency)
        m = Module()
        m.submodules.ic, m.submodules.bridge, m.submodules.info = self.ic, self.bridge, self.info
        wiring.connect(m, self.bridge.csr, self.ic.csr)
        wiring.connect(m, self.ic.bus(0), self.info.csr)
        for i, b in enumerate(self.blocks):
            m.submodules[f"blk{i}"] = b
            wiring.connect(m, self.ic.bus(i + 1), b.csr)
        self.m = m

    def run(self, bench):
        sim = Simulator(self.m)
        sim.add_clock(1e-8)
        sim.add_testbench(bench)
        sim.run()


@pytest.mark.parametrize("latency", [1, 2, 3])
def test_header_walk_finds_every_block_with_uniform_headers(latency):
    top = Top(latency)
    axil = top.bridge.s_axil
    found = []

    async def bench(ctx):
        offset = 0
        while True:
            header = await axil_read(ctx, axil, offset)
            found.append((offset, header >> 16, header & 0xFFFF))
            offset = await axil_read(ctx, axil, offset + 4)
            if offset == 0:
                break
            assert len(found) < 8, "next pointers loop"
        # header reads never reached the blocks
        assert ctx.get(top.blocks[0].reads) == 0 and ctx.get(top.blocks[1].reads) == 0
        # the block's own ID word is still there, hidden behind the header
        assert ctx.get(top.blocks[0].words[0]) == 0x0001_0007

    top.run(bench)
    assert found == [(0, DEVICE_INFO_TYPE_ID, 1), (1 << BB, 0x0007, 1), (2 << BB, 0x0008, 2)]


@pytest.mark.parametrize("latency, mixed", [(1, False), (2, False), (3, False), (3, True)])
def test_reads_and_writes_reach_only_their_block(latency, mixed):
    top = Top(latency, mixed)
    axil = top.bridge.s_axil

    async def bench(ctx):
        a, b = 1 << BB, 2 << BB
        assert await axil_write(ctx, axil, a + 8, 0xAAAA0001) == 0
        assert await axil_write(ctx, axil, b + 8, 0xBBBB0002) == 0
        assert await axil_write(ctx, axil, b + 0x1C, 0xBBBB0007) == 0
        assert await axil_read(ctx, axil, a + 8) == 0xAAAA0001
        assert await axil_read(ctx, axil, b + 8) == 0xBBBB0002
        assert await axil_read(ctx, axil, b + 0x1C) == 0xBBBB0007
        assert ctx.get(top.blocks[0].writes) == 1 and ctx.get(top.blocks[1].writes) == 2
        assert ctx.get(top.blocks[0].reads) == 1 and ctx.get(top.blocks[1].reads) == 2
        # header words are read only: the write is dropped, the header stays
        await axil_write(ctx, axil, a + 0, 0xDEADBEEF)
        await axil_write(ctx, axil, a + 4, 0xDEADBEEF)
        assert ctx.get(top.blocks[0].writes) == 1
        assert await axil_read(ctx, axil, a) == header_word(top.windows[1].regmap)
        assert await axil_read(ctx, axil, a + 4) == b
        # beyond the last window: reads 0, touches nothing
        await axil_write(ctx, axil, (3 << BB) + 8, 0x12345678)
        assert await axil_read(ctx, axil, (3 << BB) + 8) == 0
        assert ctx.get(top.blocks[1].writes) == 2

    top.run(bench)


def test_device_info_reports_parameters_and_scratch():
    top = Top()
    axil = top.bridge.s_axil
    rm = device_info_register_map()

    async def bench(ctx):
        for name, value in PARAMS.items():
            assert await axil_read(ctx, axil, rm[name].addr()) == value, name
        assert await axil_read(ctx, axil, rm["scratch"].addr()) == 0
        await axil_write(ctx, axil, rm["scratch"].addr(), 0x5A5AA5A5)
        assert await axil_read(ctx, axil, rm["scratch"].addr()) == 0x5A5AA5A5
        # parameter words ignore writes
        await axil_write(ctx, axil, rm["num_qps"].addr(), 0)
        assert await axil_read(ctx, axil, rm["num_qps"].addr()) == PARAMS["num_qps"]

    top.run(bench)


@pytest.mark.parametrize("latency", [1, 2])
def test_device_info_scratch_read_right_after_a_write(latency):
    """SCRATCH is applied a cycle after w_stb; a read strobed in that cycle
    (the bus driven directly) returns the written word all the same. Every
    parameter word reads back, an unaligned or unmapped address reads 0."""
    dut = DeviceInfo(PARAMS, read_latency=latency)
    bus = dut.csr

    async def bench(ctx):
        for value in (0x5A5AA5A5, 0x0F0F0F0F, 0):
            await csr_write(ctx, bus, SCRATCH, value)
            assert await csr_read(ctx, bus, SCRATCH, latency=latency) == value
            assert await csr_read(ctx, bus, SCRATCH, latency=latency) == value
        await csr_write(ctx, bus, SCRATCH, 0x1234)
        for name, offset, _ in DEVICE_INFO_PARAMS:
            assert await csr_read(ctx, bus, offset, latency=latency) == PARAMS[name]
        for addr in (SCRATCH + 1, SCRATCH + 8, 0x100, 0x8000 | SCRATCH):
            assert await csr_read(ctx, bus, addr, latency=latency) == 0

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("latency, mixed", [(1, False), (2, False), (3, True)])
def test_injected_writes_land_between_host_accesses(latency, mixed):
    top = Top(latency, mixed)
    axil = top.bridge.s_axil
    inject = top.ic.inject
    b = 2 << BB
    pending = [(2, 0x10 + 4 * (i % 4), 0xC0DE0000 + i) for i in range(12)]

    async def injector(ctx):
        for block, addr, value in pending:
            ctx.set(inject.valid, 1)
            ctx.set(inject.payload, {"block": block, "addr": addr, "data": value})
            await ctx.tick().until(inject.ready)
        ctx.set(inject.valid, 0)

    async def bench(ctx):
        await axil_write(ctx, axil, b + 8, 0x11111111)
        # the host keeps reading a word the injector never touches
        for _ in range(16):
            assert await axil_read(ctx, axil, b + 8) == 0x11111111
        for _ in range(8):
            await ctx.tick()
        last = {}
        for _, addr, value in pending:
            last[addr] = value
        for addr, value in last.items():
            assert await axil_read(ctx, axil, b + addr) == value
        assert ctx.get(top.blocks[1].writes) == 1 + len(pending)
        assert ctx.get(top.blocks[0].writes) == 0

    sim = Simulator(top.m)
    sim.add_clock(1e-8)
    sim.add_process(injector)
    sim.add_testbench(bench)
    sim.run()


def test_interconnect_rejects_bad_windows():
    info = device_info_register_map()
    with pytest.raises(ValueError, match="must sit at 0x100"):
        CsrInterconnect([BlockWindow("i", 0, info, 0), BlockWindow("x", 0x200, info, 0)], BB)
    with pytest.raises(ValueError, match="needs 0x48 bytes, more than its 0x40-byte window"):
        CsrInterconnect([BlockWindow("i", 0, info, 0)], 6)
    with pytest.raises(ValueError, match=r"block i's read_latency must be 1\.\.2 cycles \(the "
                                         r"interconnect's block_read_latency\) or 0"):
        CsrInterconnect([BlockWindow("i", 0, info, 0, 3)], BB, block_read_latency=2)
    with pytest.raises(ValueError, match="block_read_latency must be 1, 2 or 3 cycles, not 4"):
        CsrInterconnect([BlockWindow("i", 0, info, 0)], BB, block_read_latency=4)
    with pytest.raises(ValueError, match=r"missing parameters \['build_id'\]"):
        DeviceInfo({k: v for k, v in PARAMS.items() if k != "build_id"})
    with pytest.raises(ValueError, match="num_qps must fit 32 bits"):
        DeviceInfo({**PARAMS, "num_qps": 1 << 32})


# ---- NicCore: parameters and layout (constructed, not elaborated) ----------------------

SMALL = dict(num_qps=2, evs_per_qp=8, max_mtu=1024, mpr_max=256, num_mrs=2,
             inflight_depth=64, window=64)


def test_nic_core_layout():
    from hw.nic.core import BLOCK_ORDER, NicCore

    nic = NicCore(**SMALL)
    assert nic.block_bits == 16 and nic.csr_addr_width == 19 and nic.id_width == 6
    assert [w.name for w in nic.windows] == list(BLOCK_ORDER)
    assert [w.regmap.type_id for w in nic.windows] == [1, 2, 3, 4, 5]
    assert [w.next_base for w in nic.windows] == [0x10000, 0x20000, 0x30000, 0x40000, 0]
    # TX and RX take their read mux in two registered steps (3 cycles), device
    # info and reliability answer after 2 and pass one delay register, the EV
    # generator after 1 and two; a read is 7 cycles AR -> R (bridge 1,
    # interconnect 3, block 3)
    assert [w.read_latency for w in nic.windows] == [2, 3, 3, 2, 1]
    assert nic.csr_block_read_latency == 3
    assert nic.device_params()["nic_version"] == NIC_VERSION
    # a large reliability map (QPs x EVs) widens every window
    big = NicCore(num_qps=256, evs_per_qp=128, window=64, inflight_depth=64)
    assert big.block_bits == 18 and big.csr_addr_width == 21


@pytest.mark.parametrize("kwargs, message", [
    (dict(data_width=48), "data_width must be a power of two"),
    (dict(data_width=1024), r"data_width must be in 64\.\.512"),
    (dict(num_qps=3), r"num_qps must be a power of two in 2\.\.4096, not 3"),
    (dict(num_qps=8192), r"num_qps must be a power of two in 2\.\.4096, not 8192"),
    (dict(evs_per_qp=1), r"evs_per_qp must be a power of two in 2\.\.128, not 1"),
    (dict(evs_per_qp=12), r"evs_per_qp must be a power of two in 2\.\.128, not 12"),
    (dict(sack_bits=48), "sack_bits must be 32, 64, 128 or 256, not 48"),
    (dict(max_mtu=1500), r"max_mtu must be a power of two in 256\.\.4096, not 1500"),
    (dict(mpr_max=100), "mpr_max must be a multiple of 128 PSNs"),
    (dict(num_mrs=0), r"num_mrs must be in 1\.\.4095, not 0"),
    (dict(inflight_depth=8), r"inflight_depth must be a power of two in 16\.\.32768"),
    (dict(window=3), r"window must be a power of two in 2\.\.256, not 3"),
    (dict(window=128, inflight_depth=64), r"window \(128 PSNs tracked by reliability\) must "
                                          r"not exceed inflight_depth \(64"),
    (dict(window=256, inflight_depth=256, mpr_max=128), r"must not exceed mpr_max \(128"),
    (dict(clk_freq_hz=1000), "clk_freq_hz must be an integer in 1 MHz..1 GHz"),
    (dict(build_id=-1), "build_id must fit 32 bits"),
    (dict(csr_addr_width=18), r"csr_addr_width must be in 19\.\.32 for 5 blocks of "
                              r"0x10000 bytes, not 18"),
    (dict(addr_width=31), r"addr_width \(bits of a host DMA address\) must be an integer in "
                          r"32\.\.64, not 31"),
    (dict(addr_width=65), r"addr_width \(bits of a host DMA address\) must be an integer in "
                          r"32\.\.64, not 65"),
])
def test_nic_core_parameter_errors(kwargs, message):
    from hw.nic.core import NicCore

    with pytest.raises(ValueError, match=message):
        NicCore(**{**SMALL, **kwargs})


def test_nic_core_exports_with_32_bit_dma_addresses():
    import re

    from amaranth.back import verilog

    from hw.nic.core import NicCore

    nic = NicCore(**SMALL, addr_width=32)
    assert nic.device_params()["addr_width"] == 32
    assert NicCore(**SMALL).device_params()["addr_width"] == 64
    text = verilog.convert(nic, name="nic_core", emit_src=False)
    for port in ("m_axi__awaddr", "m_axi__araddr"):
        assert re.search(rf"output \[31:0\] {port};", text), port


def test_tx_control_bridge_turns_updates_into_tx_register_writes():
    from hw.nic.core import TxControlBridge
    from hw.reliability.layouts import QpState
    from hw.tx.regs import CTRL_FLUSH_BIT, QP_BASE, QP_STRIDE, Q

    dut = TxControlBridge()
    writes = []

    async def sink(ctx):
        ctx.set(dut.inject.ready, 1)
        async for _clk_edge, _rst, valid, payload in ctx.tick().sample(
                dut.inject.valid, dut.inject.payload):
            if valid:
                writes.append((payload.addr, payload.data))

    async def bench(ctx):
        # a state change waiting goes before a window update
        ctx.set(dut.cwnd_update.payload, {"qpn": 1, "cwnd": 37})
        ctx.set(dut.cwnd_update.valid, 1)
        ctx.set(dut.qp_state_update.payload, {"qpn": 1, "state": QpState.ERROR})
        ctx.set(dut.qp_state_update.valid, 1)
        await ctx.tick().until(dut.qp_state_update.ready)
        ctx.set(dut.qp_state_update.payload, {"qpn": 0, "state": QpState.RTS})
        await ctx.tick().until(dut.qp_state_update.ready)  # taken without a write
        ctx.set(dut.qp_state_update.valid, 0)
        await ctx.tick().until(dut.cwnd_update.ready)
        ctx.set(dut.cwnd_update.valid, 0)
        for _ in range(3):
            await ctx.tick()

    m = Module()
    m.domains.sync = ClockDomain()  # the bridge is combinational
    m.submodules.dut = dut
    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_process(sink)
    sim.add_testbench(bench)
    sim.run()
    # ERROR: stop and flush (enable 0, flush 1: the QP's max_wimm count to 0)
    assert writes == [(QP_BASE + QP_STRIDE + Q.CTRL, 1 << CTRL_FLUSH_BIT),
                      (QP_BASE + QP_STRIDE + Q.CWND, 37)]


def test_tx_control_bridge_handshakes_against_its_rule():
    """Every state, with and without a window update waiting, TX ready or not,
    against the docstring's rule: a QP entering ERROR or RESET waits for TX to take
    its write; any other state change is taken at once with no write, even while TX
    is not ready; a window update goes only when no state change waits."""
    from hw.nic.core import TxControlBridge
    from hw.protocol import QpState
    from hw.tx.regs import CTRL_FLUSH_BIT, CTRL_RESET_BIT, QP_BASE, QP_STRIDE, Q

    dut = TxControlBridge()
    cases = [(sv, state, cv, ready) for sv in (0, 1) for state in range(8) for cv in (0, 1)
             for ready in (0, 1)]

    def rule(sv, state, cv, ready):
        """(inject valid, addr, data, state ready, cwnd ready), addr and data if valid."""
        if sv:
            stops = state in (QpState.ERROR, QpState.RESET)
            bit = CTRL_RESET_BIT if state == QpState.RESET else CTRL_FLUSH_BIT
            return (int(stops), QP_BASE + 5 * QP_STRIDE + Q.CTRL if stops else None,
                    1 << bit if stops else None, int(not stops or bool(ready)), 0)
        return cv, QP_BASE + 6 * QP_STRIDE + Q.CWND if cv else None, 99 if cv else None, 0, ready

    got = []

    async def bench(ctx):
        ctx.set(dut.qp_state_update.payload.qpn, 5)
        ctx.set(dut.cwnd_update.payload, {"qpn": 6, "cwnd": 99})
        for sv, state, cv, ready in cases:
            ctx.set(dut.qp_state_update.valid, sv)
            ctx.set(dut.qp_state_update.payload.state, state)
            ctx.set(dut.cwnd_update.valid, cv)
            ctx.set(dut.inject.ready, ready)
            valid = ctx.get(dut.inject.valid)
            p = ctx.get(dut.inject.payload)
            got.append((valid, p.addr if valid else None, p.data if valid else None,
                        ctx.get(dut.qp_state_update.ready) if sv else 0,
                        ctx.get(dut.cwnd_update.ready)))

    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()
    for case, g in zip(cases, got, strict=True):
        assert g == rule(*case), case


@pytest.mark.parametrize("base", [0, 0x4000])
def test_doorbell_snoop_reports_only_doorbell_writes(base):
    """Every write of a QP's qp_doorbell in TX's block (at ``base`` on the
    observed bus) reaches reliability as {qpn, producer} in the next cycle;
    other registers, cycles without a write strobe, QPs beyond num_qps and
    addresses outside the block do not."""
    from hw.nic.core import DoorbellSnoop
    from hw.tx.regs import QP_BASE, QP_STRIDE, Q

    dut = DoorbellSnoop(num_qps=4, addr_width=16, base=base)
    accesses = [  # (addr, w_stb, data)
        (base + QP_BASE + 2 * QP_STRIDE + Q.DOORBELL, 1, 0x2345),
        (base + QP_BASE + 2 * QP_STRIDE + Q.CTRL, 1, 1),
        (base + QP_BASE + 0 * QP_STRIDE + Q.DOORBELL, 0, 7),
        (base + QP_BASE + 3 * QP_STRIDE + Q.DOORBELL, 1, 0xFFFF),
        (base + QP_BASE + 4 * QP_STRIDE + Q.DOORBELL, 1, 9),
        (base + Q.DOORBELL, 1, 5),
        (base + QP_BASE + 1 * QP_STRIDE + Q.DOORBELL - 0x2000, 1, 6),
        (base + QP_BASE + 0 * QP_STRIDE + Q.DOORBELL, 1, 0),
        (0, 0, 0),
    ]
    seen = []

    async def bench(ctx):
        for cycle, (addr, w_stb, data) in enumerate(accesses):
            ctx.set(dut.addr, addr % (1 << 16))
            ctx.set(dut.w_stb, w_stb)
            ctx.set(dut.w_data, data)
            await ctx.tick()
            if ctx.get(dut.sq_producer.valid):
                p = ctx.get(dut.sq_producer.payload)
                seen.append((cycle, p.qpn, p.producer))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen == [(0, 2, 0x2345), (3, 3, 0xFFFF), (7, 0, 0)]

"""hw/reliability blocks in Amaranth's simulator: parameter checks, the register map,
the retransmit timer scan and the probe frame builder."""

import ipaddress
from pathlib import Path

import pytest
from amaranth.hdl import Module
from amaranth.sim import Simulator
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from host_driver import layers as L
from hw.protocol import EvFormat, ev_echo, srv6_carrier, srv6_sport, stev_fields
from hw.reliability import ReliabilityEngine
from hw.reliability.engine import timeout_unit_cycles
from hw.reliability.probe import ProbeBuilder
from hw.reliability.registers import QP_BASE, register_map
from hw.reliability.timer import RetransmitTimers

from .csrbus import csr_read, csr_write

# the simulator checks each OneHotFSM's vector stays one-hot (tests/unit/conftest.py)
pytestmark = pytest.mark.usefixtures("invariant_checks")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_qps=0), "num_qps"),
        (dict(num_qps=8192), "num_qps"),
        (dict(evs_per_qp=12), "evs_per_qp"),
        (dict(evs_per_qp=256), "evs_per_qp"),
        (dict(sack_bits=48), "SACK bitmap"),
        (dict(clk_freq_hz=100), "clk_freq_hz"),
        (dict(data_width=48), "data_width"),
        (dict(window=48), "window"),
        (dict(num_qps=256, evs_per_qp=64), "csr_addr_width"),
        (dict(addr_width=65), r"addr_width .* 32\.\.64, not 65"),
    ],
)
def test_parameters_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ReliabilityEngine(**kwargs)


def test_timeout_unit():
    assert timeout_unit_cycles(125_000_000) == 128  # 1.024 us at 8 ns
    assert timeout_unit_cycles(250_000_000) == 256
    assert timeout_unit_cycles(156_250_000) == 160
    assert timeout_unit_cycles(1_000_000) == 1


def test_register_map():
    r = register_map(16, 16, 64)
    assert r.type_id == 0x0004
    assert r["qp_ctrl"].addr(3) == QP_BASE + 3 * 0x40
    assert r["ev"].addr(17) == 0x8000 + 17 * 4
    assert r.size == 0x8000 + 16 * 16 * 4
    text = r.markdown()
    assert "`ev_event`" in text and "| RP |" in text
    # docs/reliability.md's table is the build's with ipv6 and 64-bit EVs (its
    # extra rows marked)
    doc = (Path(__file__).parents[2] / "docs" / "reliability.md").read_text()
    assert register_map(16, 16, 64, ipv6=True, ev_width=64).markdown().rstrip("\n") in doc


def test_ring_bases_keep_addr_width_bits():
    """At addr_width 40, ``sq_base_hi`` and ``cq_base_hi`` keep 8 bits and read 0 above."""
    dut = ReliabilityEngine(num_qps=2, evs_per_qp=2, window=16, addr_width=40)
    rmap = register_map(2, 2, 16)
    writes = {"sq_base_lo": 0x1000, "sq_base_hi": 0xFFFF_FF12, "cq_base_lo": 0x2000,
              "cq_base_hi": 0xFFFF_FF34}
    got = {}

    async def bench(ctx):
        for name, value in writes.items():
            await csr_write(ctx, dut.csr, rmap[name].addr(1), value)
        for name in writes:
            got[name] = await csr_read(ctx, dut.csr, rmap[name].addr(1))

    _run(dut, bench)
    assert got == {"sq_base_lo": 0x1000, "sq_base_hi": 0x12, "cq_base_lo": 0x2000,
                   "cq_base_hi": 0x34}


def test_ev_entries_write_and_read_back():
    """Each (QP, EV) entry of the ``ev`` block reads back its 16-bit value, and its
    state GOOD (0 in bits 17:16: a write without bit 31 leaves the state alone); a
    global register written around them keeps its own value."""
    nq, evs = 2, 4
    dut = ReliabilityEngine(num_qps=nq, evs_per_qp=evs, window=16)
    rmap = register_map(nq, evs, 16)
    values = {i: 0x1000 + 0x111 * i for i in range(nq * evs)}
    got = {}

    async def bench(ctx):
        await csr_write(ctx, dut.csr, rmap["ev_loss_threshold"].addr(), 5)
        for i, v in values.items():
            await csr_write(ctx, dut.csr, rmap["ev"].addr(i), 0xABCD_0000 | v)  # no set_state
        for i in values:
            got[i] = await csr_read(ctx, dut.csr, rmap["ev"].addr(i))
        got["threshold"] = await csr_read(ctx, dut.csr, rmap["ev_loss_threshold"].addr())

    _run(dut, bench)
    assert got == {**values, "threshold": 5}


def _run(dut, bench, *processes):
    """Simulate ``dut`` at 100 MHz with the testbench ``bench`` and any
    free-running ``processes`` (output sinks)."""
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    for process in processes:
        sim.add_process(process)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("num_qps", [3, 16])
def test_timer_scan(num_qps):
    """Reports come 0..num_qps+1 cycles after the deadline, with the generation; a
    disarmed entry never reports; an unread report holds the scan."""
    dut = RetransmitTimers(num_qps)
    seen = []

    async def bench(ctx):
        for q, delay, gen in [(1, 5, 3), (num_qps - 1, 40, 7), (0, 2, 1)]:
            deadline = ctx.get(dut.now) + delay
            ctx.set(dut.arm.valid, 1)
            ctx.set(dut.arm.payload, {"qpn": q, "armed": 1, "gen": gen, "deadline": deadline})
            await ctx.tick()
            ctx.set(dut.arm.valid, 0)
            ctx.set(dut.expired.ready, 1)
            for _ in range(delay + num_qps + 4):
                await ctx.tick()
                if ctx.get(dut.expired.valid):
                    break
            assert ctx.get(dut.expired.valid)
            seen.append((ctx.get(dut.expired.payload.qpn), ctx.get(dut.expired.payload.gen),
                         ctx.get(dut.now) - 1 - deadline))
            ctx.set(dut.arm.valid, 1)
            ctx.set(dut.arm.payload, {"qpn": q, "armed": 0, "gen": 0, "deadline": 0})
            await ctx.tick()
            ctx.set(dut.arm.valid, 0)
            await ctx.tick().repeat(3)
        # disarmed: silent
        for _ in range(3 * num_qps):
            await ctx.tick()
            assert not ctx.get(dut.expired.valid)
        # held: an expired entry keeps its report until taken
        ctx.set(dut.expired.ready, 0)
        ctx.set(dut.arm.valid, 1)
        ctx.set(dut.arm.payload, {"qpn": 2 % num_qps, "armed": 1, "gen": 5,
                                  "deadline": ctx.get(dut.now)})
        await ctx.tick()
        ctx.set(dut.arm.valid, 0)
        await ctx.tick().repeat(4 * num_qps)
        assert ctx.get(dut.expired.valid) and ctx.get(dut.expired.payload.gen) == 5

    _run(dut, bench)
    assert [(q, g) for q, g, _ in seen] == [(1, 3), (num_qps - 1, 7), (0, 1)]
    assert all(0 <= err <= num_qps + 1 for _, _, err in seen), seen


OWN_IP6, PEER_IP6 = "fd00::1:0:0:1", "fd00::2:0:0:2"


def _probe_frames(dut, data_width, peers, ev=0xC00B):
    """The frames the builder sends for one probe request per peer (``net_data``)
    on EV value ``ev``."""
    m = Module()
    m.submodules.dut = dut
    lanes = data_width // 8
    frames = []

    async def bench(ctx):
        ctx.set(dut.own_mac, 0x0200_0000_0001)
        ctx.set(dut.own_ip, 0x0A00_0001)
        if dut.ipv6:
            ctx.set(dut.own_ip6, int(ipaddress.IPv6Address(OWN_IP6)))
        ctx.set(dut.now_ns, 123_456_789)
        ctx.set(dut.ev_data, ev)
        ctx.set(dut.m_axis.tready, 1)
        for peer in peers:
            ctx.set(dut.net_data, peer)
            ctx.set(dut.req.valid, 1)
            ctx.set(dut.req.payload, {"qpn": 2, "ev_index": 3, "probe_id": 0x4203})
            await ctx.tick()
            ctx.set(dut.req.valid, 0)
            data = b""
            for _ in range(60):
                await ctx.tick()
                if ctx.get(dut.ev_addr) != 2 * 8 + 3 or ctx.get(dut.net_addr) != 2:
                    raise AssertionError("configuration read from the wrong address")
                if ctx.get(dut.m_axis.tvalid):
                    keep = ctx.get(dut.m_axis.tkeep)
                    word = ctx.get(dut.m_axis.tdata).to_bytes(lanes, "little")
                    data += bytes(word[i] for i in range(lanes) if keep >> i & 1)
                    if ctx.get(dut.m_axis.tlast):
                        frames.append(data)
                        break
            await ctx.tick()

    _run(m, bench)
    return frames


PEER4 = {"peer_mac": 0x0200_0000_0002, "peer_ip": 0x0A00_0002, "dest_qpn": 0x123}


@pytest.mark.parametrize("data_width", [64, 128])
def test_probe_frame(data_width):
    """The probe request is a valid MRC frame: IPv4 checksum and ICRC as scapy computes."""
    dut = ProbeBuilder(num_qps=4, evs_per_qp=8, data_width=data_width)
    (frame,) = _probe_frames(dut, data_width, [PEER4])
    assert len(frame) == 74
    assert L.check_frame(frame) == (True, True)
    pkt = Ether(frame)
    assert pkt.dst == "02:00:00:00:00:02" and pkt.src == "02:00:00:00:00:01"
    assert pkt[IP].dst == "10.0.0.2" and pkt[IP].ttl == 64 and pkt[IP].flags == "DF"
    assert pkt[UDP].sport == 0xC00B and pkt[UDP].dport == 4791 and pkt[UDP].chksum == 0
    bth = pkt[L.BTH]
    assert (bth.opcode, bth.dqpn, bth.psn, bth.pkey) == (L.OP_PROBE_REQ, 0x123, 0, 0xFFFF)
    probe = pkt[L.MRCProbe]
    assert (probe.probe_id, probe.ev, probe.timestamp) == (0x4203, 0xC00B, 123_456_789)
    expect = bytes(L.probe_packet(response=False, dqpn=0x123, probe_id=0x4203, ev=0xC00B,
                                  timestamp=123_456_789))
    assert frame == expect


@pytest.mark.parametrize("data_width", [64, 128, 512])
def test_probe_frame_ipv6(data_width):
    """Built with ``ipv6``, the builder sends each QP's probe over its peer's
    family: byte-exact against the driver's layers (ICRC over IPv6's masked
    fields), an IPv4 peer's as without ``ipv6``."""
    dut = ProbeBuilder(num_qps=4, evs_per_qp=8, data_width=data_width, ipv6=True)
    peer6 = int(ipaddress.IPv6Address(PEER_IP6))
    peers = [{**PEER4, "peer_ip": peer6 & 0xFFFF_FFFF, "peer_ip6": peer6 >> 32, "peer_v6": 1},
             {**PEER4, "peer_v6": 0}]
    frame6, frame4 = _probe_frames(dut, data_width, peers)
    common = dict(response=False, dqpn=0x123, probe_id=0x4203, ev=0xC00B,
                  timestamp=123_456_789)
    assert frame6 == bytes(L.probe_packet(src_ip=OWN_IP6, dst_ip=PEER_IP6, **common))
    assert L.check_frame(frame6) == (True, True)
    assert frame4 == bytes(L.probe_packet(**common))


@pytest.mark.parametrize("data_width", [64, 512])
def test_probe_frame_ev_formats(data_width):
    """With 64-bit EVs, a probe carries its EV in its QP's format: STEV's flow
    label and source port, SRv6's source port and carrier (the ICRC over the
    peer's address: ``host_driver.layers.srv6_frame``), PROBE's ``ev`` the
    EV's ``ev_echo``; an IPv4 peer's probe is UDP's whatever the format
    bits."""
    dut = ProbeBuilder(num_qps=4, evs_per_qp=8, data_width=data_width, ipv6=True, ev_width=64)
    ev = 0x0E01_0E02_00A7_C00B
    peer6 = int(ipaddress.IPv6Address(PEER_IP6))
    v6 = {**PEER4, "peer_ip": peer6 & 0xFFFF_FFFF, "peer_ip6": peer6 >> 32}
    peers = [{**v6, "peer_v6": 1 | EvFormat.STEV << 1},
             {**v6, "peer_v6": 1 | EvFormat.SRV6 << 1},
             {**v6, "peer_v6": 1 | EvFormat.UDP << 1},
             {**PEER4, "peer_v6": EvFormat.SRV6 << 1}]
    stev, srv6, udp, v4 = _probe_frames(dut, data_width, peers, ev=ev)
    common = dict(response=False, dqpn=0x123, probe_id=0x4203, timestamp=123_456_789)
    to6 = dict(src_ip=OWN_IP6, dst_ip=PEER_IP6)

    def probe(sport, **kw):
        pkt = L.probe_packet(ev=ev_echo(ev), **common, **kw)
        pkt[L.UDP].sport = sport
        return bytes(pkt)

    sport, flow = stev_fields(ev)
    assert stev == probe(sport, flow_label=flow, **to6)
    assert srv6 == L.srv6_frame(probe(srv6_sport(ev), **to6), ev)
    assert L.ipv6_dst(srv6) == srv6_carrier(peer6, ev)
    assert udp == probe(ev & 0xFFFF, **to6)
    assert v4 == probe(ev & 0xFFFF)
    for frame in (stev, udp, v4):
        assert L.check_frame(frame) == (True, True)


@pytest.mark.parametrize("data_width, addr_width",
                         [(64, 64), (128, 64), (256, 64), (512, 64), (64, 32)])
def test_completion_writer(data_width, addr_width):
    """WQE read and CQE write at every data width, against a byte-array memory
    model; at 32-bit addresses the ring bases' bits above 32 are not used. A
    SUCCESS of an unsignaled WQE (WQE 2) writes no CQE and takes no ring entry;
    its error does; the CQE carries the WQE's ring index at 0x18."""
    from hw.reliability.completion import CompletionWriter
    from hw.reliability.layouts import WqeFlags

    dut = CompletionWriter(num_qps=2, data_width=data_width, addr_width=addr_width)
    assert len(dut.m_axi.araddr) == len(dut.m_axi.awaddr) == addr_width
    high = 0xAB << 32 if addr_width == 32 else 0  # dropped by the 32-bit writer
    lanes = data_width // 8
    mem = bytearray(1 << 16)
    sq, cq = 0x1000, 0x8000
    for i in range(4):
        wqe = bytearray(64)
        wqe[0] = 0x0B
        wqe[1] = 0 if i == 2 else WqeFlags.SIGNALED
        wqe[4:8] = (0xABC0 + i).to_bytes(4, "little")
        wqe[8:16] = (0x1122334455660000 + i).to_bytes(8, "little")
        wqe[0x20:0x24] = (100 * (i + 1)).to_bytes(4, "little")
        mem[sq + 64 * i : sq + 64 * i + 64] = wqe
    writes = []

    async def axi_slave(ctx):
        axi = dut.m_axi
        ctx.set(axi.arready, 1)
        ctx.set(axi.awready, 1)
        ctx.set(axi.wready, 1)
        while True:
            await ctx.tick()
            if ctx.get(axi.arvalid):
                addr, beats = ctx.get(axi.araddr), ctx.get(axi.arlen) + 1
                assert ctx.get(axi.arsize) == (lanes - 1).bit_length()
                for k in range(beats):
                    ctx.set(axi.rvalid, 1)
                    a = addr + k * lanes
                    ctx.set(axi.rdata, int.from_bytes(mem[a : a + lanes], "little"))
                    ctx.set(axi.rlast, k == beats - 1)
                    await ctx.tick().until(axi.rready)
                ctx.set(axi.rvalid, 0)
            if ctx.get(axi.awvalid):
                addr = ctx.get(axi.awaddr)
                size = 1 << ctx.get(axi.awsize)
                beats = ctx.get(axi.awlen) + 1
                base = addr & ~(lanes - 1)
                for k in range(beats):
                    while not ctx.get(axi.wvalid):
                        await ctx.tick()
                    data = ctx.get(axi.wdata).to_bytes(lanes, "little")
                    strb = ctx.get(axi.wstrb)
                    for b in range(lanes):
                        if strb >> b & 1:
                            mem[base + k * lanes + b] = data[b]
                    assert ctx.get(axi.wlast) == (k == beats - 1)
                    await ctx.tick()
                writes.append((addr, size * beats if size < lanes else 32))
                ctx.set(axi.bvalid, 1)
                await ctx.tick().until(axi.bready)
                ctx.set(axi.bvalid, 0)

    async def bench(ctx):
        ctx.set(dut.cfg_data, {"sq_base": high | sq, "cq_base": high | cq, "sq_log2": 2,
                               "cq_log2": 1})
        await ctx.tick().repeat(4)  # reset sweep of the producer indices
        for wqe_index, status in ((1, 0), (2, 0), (7, 1), (0, 5), (6, 5)):
            ctx.set(dut.req.valid, 1)
            ctx.set(dut.req.payload, {"qpn": 1, "wqe_index": wqe_index, "status": status})
            await ctx.tick().until(dut.req.ready)
            ctx.set(dut.req.valid, 0)
            if (wqe_index, status) == (2, 0):  # unsignaled SUCCESS: back to IDLE, no CQE
                await ctx.tick()
                await ctx.tick().until(dut.req.ready)
                assert len(writes) == 1
            else:
                await ctx.tick().until(dut.cqe_done)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(axi_slave, background=True)
    sim.add_testbench(bench)
    sim.run()

    def cqe(slot):
        raw = mem[cq + 32 * slot : cq + 32 * slot + 32]
        return (int.from_bytes(raw[0:8], "little"), int.from_bytes(raw[8:12], "little"),
                int.from_bytes(raw[12:16], "little"), int.from_bytes(raw[16:20], "little"),
                raw[0x14], raw[0x15], raw[0x17], int.from_bytes(raw[0x18:0x20], "little"))

    assert [a for a, _ in writes] == [cq, cq + 32, cq, cq + 32]  # 2-entry ring
    # ring pass 2 (phase 0) overwrote pass 1: WQE 0 FLUSHED, WQE 2 (6 mod 4) FLUSHED
    # (unsignaled, but an error); pass 1 had WQE 1 SUCCESS, WQE 3 (7 mod 4)
    # RETRY_EXCEEDED, and nothing for WQE 2's SUCCESS
    assert cqe(0) == (0x1122334455660000, 0, 0xABC0, 1, 5, 0x0B, 0x00, 0)
    assert cqe(1) == (0x1122334455660002, 0, 0xABC2, 1, 5, 0x0B, 0x00, 6)
    assert mem[cq + 64 : cq + 96] == bytes(32)  # nothing outside the ring


async def _put(ctx, port, wait=16, **fields):
    """Offer one record on ``port``, then wait ``wait`` cycles: 16 is long enough for
    the core's event and the timer write it makes (4 cycles after FINAL)."""
    ctx.set(port.payload, fields)
    ctx.set(port.valid, 1)
    await ctx.tick().until(port.ready)
    ctx.set(port.valid, 0)
    if wait:
        await ctx.tick().repeat(wait)


def test_core_error_completes_every_posted_wqe():
    """ReliabilityCore alone: on the controller's ERROR the QP's completion
    requests cover every WQE the host has posted (``sq_producer``), begun by TX
    or not, from the oldest uncompleted one and across the 16-bit index wrap;
    on retry exhaustion the first is RETRY_EXCEEDED; una does not move (no
    ack_update that would reopen TX's window)."""
    from hw.reliability.core import ReliabilityCore
    from hw.reliability.layouts import CqeStatus, QpState

    dut = ReliabilityCore(num_qps=4, evs_per_qp=4, sack_bits=32, window=16, timeout_unit=4)
    cpl, acks, arms = [], [], []

    async def sinks(ctx):
        ctx.set(dut.cpl.ready, 1)
        ctx.set(dut.ack_update.ready, 1)
        for port in (dut.retx, dut.ev_update, dut.cwnd_update, dut.cc_event,
                     dut.qp_state_update,
                     dut.probe_req, dut.event):
            ctx.set(port.ready, 1)
        async for _clk, _rst, c_valid, c, a_valid, a, t_valid, t in ctx.tick().sample(
                dut.cpl.valid, dut.cpl.payload, dut.ack_update.valid, dut.ack_update.payload,
                dut.timer_arm.valid, dut.timer_arm.payload):
            if c_valid and not c.clear:
                cpl.append((c.qpn, c.wqe_index, c.status))
            if a_valid:
                acks.append((a.qpn, a.una_psn))
            if t_valid and t.armed:
                arms.append((t.qpn, t.gen))


    async def bench(ctx):
        # the configuration a host writes: t = 0, 1 linear + 1 doubling retry
        ctx.set(dut.rel_data, {"t": 0, "linear_cnt": 1, "exp_cnt": 1, "ev_min_active": 1})
        ctx.set(dut.params, {"cwnd_min": 1, "cwnd_max": 16, "cwnd_init": 16})
        await ctx.tick().repeat(8)  # the records' clear after reset
        for q, producer in ((1, 0xFFFD), (2, 7)):
            await _put(ctx, dut.sq_producer, qpn=q, producer=producer)
            await _put(ctx, dut.cmd, qpn=q, state=QpState.RTS)
        # QP 1: 6 WQEs posted from 0xFFFD (the index wraps); WQE 0xFFFD done, 0xFFFE
        # part sent, 0xFFFF.. 0x0002 not begun; the controller sets ERROR
        await _put(ctx, dut.sq_producer, qpn=1, producer=0x0003)
        await _put(ctx, dut.sent, qpn=1, psn=100, ev_index=0, last=1, wqe_index=0xFFFD)
        await _put(ctx, dut.sent, qpn=1, psn=101, ev_index=1, last=0, wqe_index=0xFFFE)
        await _put(ctx, dut.peer_ack, bth={"opcode": 0x11, "dqpn": 1, "psn": 100},
                   aeth={"syndrome": 0x1F}, sack={"cum_psn": 100, "sack_base": 101})
        await _put(ctx, dut.cmd, qpn=1, state=QpState.ERROR)
        # QP 2: 3 WQEs posted, one begun; its timer runs out (3 reports)
        await _put(ctx, dut.sq_producer, qpn=2, producer=10)
        await _put(ctx, dut.sent, qpn=2, psn=500, ev_index=2, last=0, wqe_index=7)
        for _ in range(3):
            q, gen = arms[-1]
            assert q == 2
            await _put(ctx, dut.expired, qpn=2, gen=gen)
        await ctx.tick().repeat(20)

    _run(dut, bench, sinks)
    S, R, F = CqeStatus.SUCCESS, CqeStatus.RETRY_EXCEEDED, CqeStatus.FLUSHED
    assert [c for c in cpl if c[0] == 1] == [(1, 0xFFFD, S), (1, 0xFFFE, F), (1, 0xFFFF, F),
                                             (1, 0, F), (1, 1, F), (1, 2, F)]
    assert [c for c in cpl if c[0] == 2] == [(2, 7, R), (2, 8, F), (2, 9, F)]
    # the first sent record of each QP and the ACK move una; the ERRORs do not
    assert acks == [(1, 100), (1, 101), (2, 500)], acks


def test_core_sent_window_edge():
    """ReliabilityCore alone: a QP in RTS records new PSNs while nxt - una is below the
    window; the one that would make it exceed the window is dropped (``sent_dropped``,
    nxt unchanged) until an ACK moves una; the record written back (FINAL) is the one
    read for the next event of the QP, whose records arrive back to back."""
    from hw.reliability.core import ReliabilityCore
    from hw.reliability.layouts import QpState

    W = 16
    dut = ReliabilityCore(num_qps=2, evs_per_qp=2, sack_bits=32, window=W, timeout_unit=4)

    async def sinks(ctx):
        for port in (dut.cpl, dut.ack_update, dut.retx, dut.ev_update, dut.cwnd_update,
                     dut.cc_event,
                     dut.qp_state_update, dut.probe_req, dut.event):
            ctx.set(port.ready, 1)


    async def record(ctx, q):
        ctx.set(dut.rec_addr, q)
        await ctx.tick()
        return ctx.get(dut.rec_data.una), ctx.get(dut.rec_data.nxt)

    dropped = [0]  # sent_dropped strobes (the engine's counter bank counts them)

    async def count_drops(ctx):
        async for _, _, strobe in ctx.tick().sample(dut.counter_strobes.sent_dropped):
            dropped[0] += strobe

    async def bench(ctx):
        ctx.set(dut.rel_data, {"t": 4, "linear_cnt": 1, "exp_cnt": 1, "ev_min_active": 1})
        ctx.set(dut.params, {"cwnd_min": 1, "cwnd_max": W, "cwnd_init": W})
        await ctx.tick().repeat(8)  # the records' clear after reset
        await _put(ctx, dut.cmd, qpn=1, state=QpState.RTS)
        for k in range(W):  # back to back: each the cycle the core takes it
            await _put(ctx, dut.sent, wait=0, qpn=1, psn=100 + k, ev_index=0, last=1,
                      wqe_index=k)
        await ctx.tick().repeat(16)
        assert await record(ctx, 1) == (100, 100 + W)
        assert dropped[0] == 0
        await _put(ctx, dut.sent, qpn=1, psn=100 + W, ev_index=0, last=1, wqe_index=W)
        assert dropped[0] == 1  # nxt - una = W: full
        assert await record(ctx, 1) == (100, 100 + W)
        await _put(ctx, dut.peer_ack, wait=60, bth={"opcode": 0x11, "dqpn": 1, "psn": 100},
                   aeth={"syndrome": 0x1F}, sack={"cum_psn": 100, "sack_base": 101})
        assert await record(ctx, 1) == (101, 100 + W)
        await _put(ctx, dut.sent, qpn=1, psn=100 + W, ev_index=0, last=1, wqe_index=W)
        assert dropped[0] == 1
        assert await record(ctx, 1) == (101, 101 + W)
        assert await record(ctx, 0) == (0, 0)  # the other QP untouched

    _run(dut, bench, sinks, count_drops)


@pytest.mark.parametrize("svc", [0, 17, 78, 625, 4000, 65_535])
def test_core_rtt_sample_is_less_the_service_time(svc):
    """ReliabilityCore alone: the RTT sample an ACK gives congestion control
    (``cc_event.rtt``, in 16-cycle units) is the time since the newest PSN it
    acknowledges was sent, less the ACK's service time (``svc_hi``/``svc_lo``, 64 ns
    units, in RTT units rounded down at the core's clock, ``svc_units``), not below 0; a
    saturated service time leaves no sample (``rtt_valid`` clear)."""
    from hw.protocol import SVC_TIME_MAX, svc_time_split
    from hw.reliability.cc_defaults import RTT_UNIT_CYCLES, svc_units
    from hw.reliability.core import ReliabilityCore
    from hw.reliability.layouts import QpState
    from hw.reliability.nscc import NsccKind

    clk = 125_000_000
    dut = ReliabilityCore(num_qps=2, evs_per_qp=2, sack_bits=32, window=16, timeout_unit=4096,
                          clk_freq_hz=clk)
    events, now = [], [0]

    async def sinks(ctx):
        for port in (dut.cpl, dut.ack_update, dut.retx, dut.ev_update, dut.cwnd_update,
                     dut.cc_event, dut.qp_state_update, dut.probe_req, dut.event):
            ctx.set(port.ready, 1)
        async for _clk, _rst, valid, ev in ctx.tick().sample(dut.cc_event.valid,
                                                             dut.cc_event.payload):
            now[0] += 1
            ctx.set(dut.now, now[0])
            if valid and ev.kind == NsccKind.ACK.value:
                events.append((ev.rtt_valid, ev.rtt))


    hi, lo = svc_time_split(svc)
    times = []

    async def bench(ctx):
        ctx.set(dut.rel_data, {"t": 4, "linear_cnt": 1, "exp_cnt": 1, "ev_min_active": 1})
        ctx.set(dut.params, {"cwnd_min": 1, "cwnd_max": 16, "cwnd_init": 16, "target_rtt": 9})
        await ctx.tick().repeat(8)
        await _put(ctx, dut.cmd, wait=40, qpn=1, state=QpState.RTS)
        times.append(now[0])
        await _put(ctx, dut.sent, wait=40, qpn=1, psn=100, ev_index=0, last=1, wqe_index=0)
        await ctx.tick().repeat(7000)  # ~440 RTT units, 56 us at 125 MHz
        times.append(now[0])
        await _put(ctx, dut.peer_ack, wait=40, bth={"opcode": 0x11, "dqpn": 1, "psn": 100},
                   aeth={"syndrome": 0x1F},
                   sack={"cum_psn": 100, "sack_base": 101, "svc_hi": hi, "svc_lo": lo})

    _run(dut, bench, sinks)
    assert len(events) == 1, events
    valid, rtt = events[0]
    assert valid == (svc != SVC_TIME_MAX)
    if valid:
        # the sample's ends are read from a 16-cycle clock, and the core takes the
        # ACK and reaches its window step within 2 units of the ACK's arrival
        raw = (times[1] - times[0]) // RTT_UNIT_CYCLES
        want = max(raw - svc_units(svc, clk), 0)
        assert want - 1 <= rtt <= want + 3, (rtt, want, raw)
        assert svc_units(svc, clk) == svc // 2  # 125 MHz: 128 ns RTT units

"""Probe responses must answer the probe outstanding on their EV (docs/security.md,
"Probe responses"): ``ProbeReplyCheck`` on its own, and ``ReliabilityEngine``
with an ASSUMED_BAD EV that a replayed or unsolicited answer must not revive,
in Amaranth's simulator."""

import pytest
from amaranth.sim import Simulator
from scapy.layers.l2 import Ether

from host_driver import layers as L
from hw.headers import Opcode
from hw.reliability import ReliabilityEngine
from hw.reliability.layouts import QpState
from hw.reliability.probe import ProbeReplyCheck
from hw.reliability.registers import RTT_NS_MAX, register_map

from .csrbus import csr_read, csr_write
from .simstream import send_record

# the simulator checks each OneHotFSM's vector stays one-hot (tests/unit/conftest.py)
pytestmark = pytest.mark.usefixtures("invariant_checks")

# (opcode, round, timestamp, sweeping) records, with the check's inputs round 10
# (sweeping: being sent, else sent), the previous round started at 1000 ns, now
# 5000 ns; and whether each passes
ROUND, PREV_START, NOW = 10, 1000, 5000
CASES = [
    ((Opcode.PROBE_RESP, 10, 4000, 1), True),
    ((Opcode.PROBE_RESP, 10, 4000, 0), True),
    # the round before, at its start: outstanding on the QPs round 10 has not
    # reached yet; once round 10 is sent, replaced on every EV it probes
    ((Opcode.PROBE_RESP, 9, 1000, 1), True),
    ((Opcode.PROBE_RESP, 9, 1000, 0), False),
    ((Opcode.PROBE_RESP, 8, 4000, 1), False),  # two rounds back: replayed
    ((Opcode.PROBE_RESP, 11, 4000, 0), False),  # a round not sent yet
    ((Opcode.PROBE_RESP, 10, 999, 0), False),  # sent before the previous round began
    ((Opcode.PROBE_RESP, 10, NOW + 100, 0), False),  # from the future
    ((Opcode.PROBE_RESP, 0x2345, 4000, 1), False),
    ((Opcode.ACKNOWLEDGE, 3, 0, 0), True),  # not a probe response: not checked
]


def test_probe_reply_check_block():
    """Each record of CASES passes or is dropped as it says; a passed probe
    response carries its round trip (now - timestamp) on ``rtt_ns``, an ACK 0,
    and a round trip beyond ``RTT_NS_MAX`` reads ``RTT_NS_MAX``."""
    dut = ProbeReplyCheck(sack_bits=32)
    out, stale = [], []
    late = PREV_START + RTT_NS_MAX + 2  # RTT_NS_MAX + 2 ns after a probe stamped 1000

    async def bench(ctx):
        ctx.set(dut.probing, 1)
        ctx.set(dut.round, ROUND)
        for start in (PREV_START, 3000):  # two round starts: the previous, the current
            ctx.set(dut.now_ns, start)
            ctx.set(dut.tick, 1)
            await ctx.tick()
        ctx.set(dut.tick, 0)
        ctx.set(dut.now_ns, NOW)
        p = dut.i.payload
        for (opcode, rnd, ts, sweeping), _ in CASES:
            ctx.set(dut.sweeping, sweeping)
            await send_record(ctx, dut.i, [(p.bth.opcode, opcode),
                                           (p.probe.probe_id, rnd << 8 | 1),
                                           (p.probe.timestamp, ts)], settle=4)
        # a round trip past the field's range: within the rounds' times, saturated
        ctx.set(dut.now_ns, late)
        await send_record(ctx, dut.i, [(p.bth.opcode, Opcode.PROBE_RESP),
                                       (p.probe.probe_id, ROUND << 8 | 1),
                                       (p.probe.timestamp, 1000)], settle=4)
        ctx.set(dut.now_ns, NOW)
        # probing off: no probe is outstanding, the best answer is refused
        ctx.set(dut.probing, 0)
        await send_record(ctx, dut.i, [(p.bth.opcode, Opcode.PROBE_RESP),
                                       (p.probe.probe_id, ROUND << 8 | 1),
                                       (p.probe.timestamp, 4000)], settle=4)

    async def sink(ctx):
        ctx.set(dut.o.ready, 1)
        async for clk, _rst, valid, payload, s, rtt in ctx.tick().sample(
                dut.o.valid, dut.o.payload, dut.stale, dut.rtt_ns):
            if clk and valid:
                out.append((payload.bth.opcode, payload.probe.probe_id >> 8,
                            payload.probe.timestamp, rtt))
            if clk:
                stale.append(s)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.add_process(sink)
    sim.run()
    want = [(*rec[:3], NOW - rec[2] if rec[0] == Opcode.PROBE_RESP else 0)
            for rec, ok in CASES if ok]
    assert out == [*want, (Opcode.PROBE_RESP, ROUND, 1000, RTT_NS_MAX)]
    assert sum(stale) == sum(not ok for _, ok in CASES) + 1


def test_replayed_probe_response_does_not_revive_an_ev():
    """ReliabilityEngine, QP 1 in RTS with EVs 0xC000/0xC001: a PSN sent on EV 1
    times out until EV 1 is ASSUMED_BAD; probes go out every period. A copy of
    the first probe's answer replayed after three more rounds, an answer to a
    probe never sent (a later round) and the answer to the probe before the
    latest are dropped (``probes_stale``) and leave EV 1 ASSUMED_BAD; the
    answer to the latest probe brings it back (as the golden model: only the
    EV's latest probe is outstanding). Its EV event carries the answer's round
    trip: the engine's ns clock (1,000 ns a cycle here) at the check, less the
    probe's timestamp; the event of the loss carries none."""
    E, q = 2, 1
    dut = ReliabilityEngine(num_qps=2, evs_per_qp=E, sack_bits=32, window=16,
                            clk_freq_hz=1_000_000, data_width=64)
    rmap = register_map(2, E, 16)
    probes = []  # (probe_id, timestamp) of every probe request sent
    period = 400
    cycles = [0]  # clock edges since the start: the engine's ns clock is 1000 x this

    async def probe_sink(ctx):
        ctx.set(dut.m_axis_probe.tready, 1)
        for port in (dut.retx, dut.ack_update, dut.ev_update, dut.cwnd_update,
                     dut.qp_state_update):
            ctx.set(port.ready, 1)
        ctx.set(dut.m_axi.awready, 0)
        frame = b""
        async for clk, _rst, valid, data, keep, last in ctx.tick().sample(
                dut.m_axis_probe.tvalid, dut.m_axis_probe.tdata, dut.m_axis_probe.tkeep,
                dut.m_axis_probe.tlast):
            cycles[0] += clk
            if clk and valid:
                frame += bytes((data >> 8 * i) & 0xFF for i in range(8) if keep >> i & 1)
                if last:
                    p = Ether(frame)[L.MRCProbe]
                    probes.append((p.probe_id, p.timestamp))
                    frame = b""

    async def answer(ctx, probe_id, timestamp):
        p = dut.peer_ack.payload
        await send_record(ctx, dut.peer_ack, [
            (p.bth.opcode, Opcode.PROBE_RESP), (p.bth.dqpn, q), (p.probe.probe_id, probe_id),
            (p.probe.ev, 0xC001), (p.probe.timestamp, timestamp)], settle=40)

    async def read(ctx, name):
        return await csr_read(ctx, dut.csr, rmap[name].addr(),
                              latency=ReliabilityEngine.CSR_READ_LATENCY)

    async def ev_state(ctx):
        word = await csr_read(ctx, dut.csr, rmap["ev"].addr(q * E + 1),
                              latency=ReliabilityEngine.CSR_READ_LATENCY)
        return word >> 16 & 3

    async def bench(ctx):
        await ctx.tick().repeat(40)  # the records' clear after reset
        w = [("ev_loss_threshold", 0, 1),
             ("qp_rel_cfg", q, 0 | 7 << 5 | 25 << 8),  # t = 0, retry forever
             ("ev", q * E, 0xC000), ("ev", q * E + 1, 0xC001),
             ("qp_ctrl", q, QpState.RTS)]
        for name, index, value in w:
            await csr_write(ctx, dut.csr, rmap[name].addr(index), value)
            await ctx.tick().repeat(4)
        await ctx.tick().repeat(20)
        s = dut.sent.payload
        await send_record(ctx, dut.sent, [(s.qpn, q), (s.psn, 100), (s.ev_index, 1),
                                          (s.last, 1)])
        for _ in range(200):
            await ctx.tick().repeat(10)
            if await ev_state(ctx) == 1:
                break
        assert await ev_state(ctx) == 1, "EV 1 did not become ASSUMED_BAD"
        await csr_write(ctx, dut.csr, rmap["probe_period"].addr(), period)
        while len(probes) < 4:
            await ctx.tick().repeat(20)
        first_id, first_ts = probes[0]
        await answer(ctx, first_id, first_ts)  # replayed: three rounds old
        assert await ev_state(ctx) == 1, "a replayed probe answer revived EV 1"
        last_id, last_ts = probes[-1]
        await answer(ctx, last_id + (5 << 8), last_ts)  # a round never sent
        assert await ev_state(ctx) == 1, "an unsolicited probe answer revived EV 1"
        # the answer to the probe before the latest: replaced once the latest
        # round is sent, on every QP (QP 1 is the last one a round sweeps)
        prev_id, prev_ts = probes[-2]
        assert prev_id >> 8 == (last_id >> 8) - 1
        await answer(ctx, prev_id, prev_ts)
        assert await ev_state(ctx) == 1, "the answer to a replaced probe revived EV 1"
        stale = await csr_read(ctx, dut.csr, rmap["cnt_probes_stale"].addr(),
                               latency=ReliabilityEngine.CSR_READ_LATENCY)
        assert stale == 3
        last_id, last_ts = probes[-1]
        sent_ns = cycles[0] * 1000
        await answer(ctx, last_id, last_ts)  # the answer to the latest probe
        assert await ev_state(ctx) == 0, "the answer to the outstanding probe was refused"
        events = []
        while await read(ctx, "ev_event_count"):
            events.append((await read(ctx, "ev_event_rtt"), await read(ctx, "ev_event")))
        assert [(e >> 8 & 0xF, rtt >> 31) for rtt, e in events] == [(1 << 2, 1), (1, 1)]
        assert events[0][0] & RTT_NS_MAX == 0  # GOOD -> ASSUMED_BAD: no round trip
        # taken the edge after it is offered, timed at the check one cycle later
        rtt = events[1][0] & RTT_NS_MAX
        assert sent_ns - last_ts < rtt <= sent_ns - last_ts + 3000, (rtt, sent_ns, last_ts)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_process(probe_sink)
    sim.add_testbench(bench)
    sim.run()


def test_probes_over_each_peers_family():
    """ReliabilityEngine built with ``ipv6``: QP 0's peer is IPv4, QP 1's IPv6
    (``peer_ip6_*``, ``peer_v6``, ``own_ip6``, which read back as written). An
    EV of each goes ASSUMED_BAD; a probe round sends each QP's probe over its
    peer's family, byte-exact against the driver's layers."""
    import ipaddress

    E = 2
    dut = ReliabilityEngine(num_qps=2, evs_per_qp=E, sack_bits=32, window=16,
                            clk_freq_hz=1_000_000, data_width=64, ipv6=True)
    rmap = register_map(2, E, 16, ipv6=True)
    own6, peer6 = (int(ipaddress.IPv6Address(a)) for a in ("fd00::a", "fd00:1::b"))
    frames = []

    async def probe_sink(ctx):
        ctx.set(dut.m_axis_probe.tready, 1)
        for port in (dut.retx, dut.ack_update, dut.ev_update, dut.cwnd_update,
                     dut.qp_state_update):
            ctx.set(port.ready, 1)
        frame = b""
        async for clk, _rst, valid, data, keep, last in ctx.tick().sample(
                dut.m_axis_probe.tvalid, dut.m_axis_probe.tdata, dut.m_axis_probe.tkeep,
                dut.m_axis_probe.tlast):
            if clk and valid:
                frame += bytes((data >> 8 * i) & 0xFF for i in range(8) if keep >> i & 1)
                if last:
                    frames.append(frame)
                    frame = b""

    async def bench(ctx):
        await ctx.tick().repeat(40)  # the records' clear after reset
        w = [("ev_loss_threshold", 0, 1), ("own_mac_lo", 0, 0xA), ("own_ip", 0, 0x0A000001),
             *[("own_ip6", i, own6 >> 32 * i & 0xFFFF_FFFF) for i in range(4)],
             ("peer_mac_lo", 0, 0xB0), ("peer_ip", 0, 0x0A000002), ("dest_qpn", 0, 0x10),
             ("peer_mac_lo", 1, 0xB1), ("peer_ip", 1, peer6 & 0xFFFF_FFFF), ("dest_qpn", 1, 0x11),
             *[(f"peer_ip6_{i}", 1, peer6 >> 32 * i & 0xFFFF_FFFF) for i in (1, 2, 3)],
             ("peer_v6", 1, 1)]
        for q in (0, 1):
            w += [("qp_rel_cfg", q, 7 << 5 | 25 << 8), ("ev", q * E, 0xC000 + q),
                  ("ev", q * E + 1, 0xD000 + q), ("qp_ctrl", q, QpState.RTS)]
        for name, index, value in w:
            await csr_write(ctx, dut.csr, rmap[name].addr(index), value)
            await ctx.tick().repeat(4)
        for name, index, value in w[:-8]:  # the address words read back
            got = await csr_read(ctx, dut.csr, rmap[name].addr(index),
                                 latency=ReliabilityEngine.CSR_READ_LATENCY)
            assert got == value, (name, index, hex(got))
        await ctx.tick().repeat(20)
        s = dut.sent.payload
        for q in (0, 1):
            await send_record(ctx, dut.sent, [(s.qpn, q), (s.psn, 100), (s.ev_index, 1),
                                              (s.last, 1)])
        await ctx.tick().repeat(1500)  # the timeouts: each EV 1 ASSUMED_BAD
        await csr_write(ctx, dut.csr, rmap["probe_period"].addr(), 400)
        while len(frames) < 2:
            await ctx.tick().repeat(20)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_process(probe_sink)
    sim.add_testbench(bench)
    sim.run()
    by_qpn = {Ether(f)[L.BTH].dqpn: f for f in frames[:2]}
    for dqpn, (src, dst), ev in ((0x10, ("10.0.0.1", "10.0.0.2"), 0xD000),
                                 (0x11, ("fd00::a", "fd00:1::b"), 0xD001)):
        frame = by_qpn[dqpn]
        p = Ether(frame)[L.MRCProbe]
        assert frame == bytes(L.probe_packet(
            response=False, dqpn=dqpn, probe_id=p.probe_id, ev=ev, timestamp=p.timestamp,
            src_mac="00:00:00:00:00:0a", dst_mac=f"00:00:00:00:00:{0xB0 + dqpn - 0x10:02x}",
            src_ip=src, dst_ip=dst))

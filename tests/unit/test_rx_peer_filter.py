"""Peer frames (ACK/NAK, probe responses) from forged or misaddressed senders
never reach reliability (docs/security.md, "Peer frames"): ``RxPeerFilter``
on its own and inside ``RxPipeline`` (records as the parser gives them, the
QP table written through the CSR bus), in Amaranth's simulator."""

import pytest
from amaranth.sim import Simulator

from hw.headers import Opcode
from hw.rx.engine import RxPipeline
from hw.rx.layouts import QpState
from hw.rx.peer_filter import PEER_FILTER_COUNTERS, RxPeerFilter

from .csrbus import csr_read, csr_write

# the simulator checks each OneHotFSM's vector stays one-hot (tests/unit/conftest.py)
pytestmark = pytest.mark.usefixtures("invariant_checks")

OWN_IP, OWN_MAC = 0x0A000002, 0x02_00_00_00_00_02
PEER_IP, PEER_MAC = 0x0A000001, 0x02_00_00_00_00_01
FORGER_IP = 0x0A000042  # 10.0.0.66, the address of issue 26's forged ACK
QP = 1  # in RTS; QP 0 is in RTR (a responder only)
NUM_QPS = 2


def frame(**over):
    """A peer frame's header record: by default a genuine ACK to QP 1."""
    f = dict(opcode=Opcode.ACKNOWLEDGE, ip_src=PEER_IP, ip_dst=OWN_IP, eth_dst=OWN_MAC,
             dqpn=QP, psn=9, cum_psn=9, sack_base=10, probe_id=0)
    f.update(over)
    return f


# (the frame, the counter that drops it or None when it passes)
CASES = [
    (frame(), None),
    (frame(ip_src=FORGER_IP), "peer_bad_source"),
    (frame(ip_dst=0x0A000009), "peer_not_for_us"),
    (frame(ip_dst=0x0A000009, eth_dst=0x02_00_00_00_00_09), "peer_not_for_us"),
    (frame(eth_dst=0x02_00_00_00_00_09), "peer_bad_mac"),
    (frame(dqpn=0), "peer_qp_state"),  # RTR: not a requester
    (frame(dqpn=NUM_QPS), "peer_bad_qpn"),
    (frame(dqpn=0x10000 | QP), "peer_bad_qpn"),  # high DestQP bits are not ignored
    (frame(sack_base=12), "peer_bad_sack"),
    (frame(cum_psn=0xFFFFFF, sack_base=0), None),  # cum_psn + 1 wraps
    (frame(opcode=Opcode.PROBE_RESP, cum_psn=0, sack_base=0, probe_id=0x101), None),
    (frame(opcode=Opcode.PROBE_RESP, ip_src=FORGER_IP, cum_psn=0, sack_base=0),
     "peer_bad_source"),
    (frame(ip_src=FORGER_IP, sack_base=3), "peer_bad_source"),  # the first failure counts
]


def set_header(ctx, hdr, f):
    ctx.set(hdr.bth.opcode, f["opcode"])
    ctx.set(hdr.bth.dqpn, f["dqpn"])
    ctx.set(hdr.bth.psn, f["psn"])
    ctx.set(hdr.ip_src, f["ip_src"])
    ctx.set(hdr.ip_dst, f["ip_dst"])
    ctx.set(hdr.eth_src, PEER_MAC)
    ctx.set(hdr.eth_dst, f["eth_dst"])
    ctx.set(hdr.sack.cum_psn, f["cum_psn"])
    ctx.set(hdr.sack.sack_base, f["sack_base"])
    ctx.set(hdr.probe.probe_id, f["probe_id"])
    ctx.set(hdr.payload_len, 0)


def expected_counts(cases=CASES):
    counts = dict.fromkeys(PEER_FILTER_COUNTERS, 0)
    for _, reason in cases:
        if reason:
            counts[reason] += 1
    return counts


def simulate(dut, bench, process):
    """``bench`` and the free-running ``process`` on ``dut`` at 100 MHz."""
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.add_process(process)
    sim.run()


def passed_frames():
    return [(f["ip_src"], f["dqpn"], f["sack_base"]) for f, reason in CASES if reason is None]


def run_filter(dut, cases, cfg, own_ip6=None):
    """``cases`` (frame, reason) through ``dut`` (an ``RxPeerFilter``), one at
    a time, QP q's configuration ``cfg[q]`` = (state, peer_ip[, peer_v6])
    given the cycle after its lookup: the (ip_src, dqpn, sack_base) of the
    records that come out, and the strobes of each counter."""
    out, strobes = [], dict.fromkeys(PEER_FILTER_COUNTERS, 0)

    async def bench(ctx):
        ctx.set(dut.own_ip, OWN_IP)
        ctx.set(dut.own_mac, OWN_MAC)
        if own_ip6 is not None:
            ctx.set(dut.own_ip6, own_ip6)
        for f, _ in cases:
            set_header(ctx, dut.i.payload, f)
            if own_ip6 is not None:
                ctx.set(dut.i.payload.v6, f.get("v6", 0))
            ctx.set(dut.i.valid, 1)
            await ctx.tick().until(dut.i.ready)
            ctx.set(dut.i.valid, 0)
            await ctx.delay(1e-9)
            for _ in range(4):  # whatever happens to a record happens by then
                await ctx.tick()

    async def model_and_sink(ctx):
        ctx.set(dut.o.ready, 1)
        async for clk_edge, _rst, *vals in ctx.tick().sample(
                dut.cfg_addr, dut.o.valid, dut.o.payload, *(
                    getattr(dut.counters, n) for n in PEER_FILTER_COUNTERS)):
            if not clk_edge:
                continue
            a, valid, payload, *counts = vals
            if valid:
                out.append((payload.ip_src, payload.bth.dqpn, payload.sack.sack_base))
            for n, c in zip(PEER_FILTER_COUNTERS, counts, strict=True):
                strobes[n] += c
            # the 1-cycle lookup: after the edge, the configuration of the
            # address registered at it
            state, peer, *family = cfg[a]
            ctx.set(dut.cfg.state, state)
            ctx.set(dut.cfg.peer_ip, peer)
            if family:
                ctx.set(dut.cfg.peer_v6, family[0])

    simulate(dut, bench, model_and_sink)
    return out, strobes


def test_peer_filter_block():
    """Each check of ``RxPeerFilter`` drops its frames and strobes its counter
    once; the frames that pass come out unchanged, in order."""
    dut = RxPeerFilter(num_qps=NUM_QPS, sack_bits=64)
    cfg = {0: (QpState.RTR, PEER_IP), 1: (QpState.RTS, PEER_IP)}
    out, strobes = run_filter(dut, CASES, cfg)
    assert out == passed_frames()
    assert strobes == expected_counts()


OWN_IP6 = 0x2001_0DB8_0000_0000_0000_0000_0000_0002
PEER_IP6 = 0x2001_0DB8_0000_0000_0000_0000_0000_0001


def test_peer_filter_block_ipv6():
    """Built with ``ipv6``: QP 1's peer is IPv6, QP 2's IPv4. An IPv6 frame
    passes only from QP 1's peer to ``own_ip6`` (all 128 bits: one whose low
    32 bits are ``own_ip`` is not for us), an IPv4 one only from QP 2's; a
    frame over the other family than the peer's is a bad source, whatever
    its address's low bits."""
    dut = RxPeerFilter(num_qps=4, sack_bits=64, ipv6=True)
    v6 = dict(ip_src=PEER_IP6, ip_dst=OWN_IP6, v6=1)
    cases = [
        (frame(**v6), None),
        (frame(**v6, dqpn=2), "peer_bad_source"),  # QP 2's peer is IPv4
        (frame(dqpn=2), None),
        (frame(), "peer_bad_source"),  # QP 1's peer is IPv6
        (frame(**dict(v6, ip_dst=OWN_IP6 ^ (1 << 100))), "peer_not_for_us"),
        (frame(**dict(v6, ip_dst=OWN_IP)), "peer_not_for_us"),
        (frame(**dict(v6, ip_src=PEER_IP6 ^ (1 << 64))), "peer_bad_source"),
        (frame(**dict(v6, ip_src=PEER_IP)), "peer_bad_source"),
        (frame(dqpn=2, ip_dst=OWN_IP6), "peer_not_for_us"),  # over IPv4: own_ip
        # the same 128-bit value over the other family: QP 3's peer is ::10.0.0.1
        (frame(dqpn=3), "peer_bad_source"),
        (frame(**dict(v6, ip_src=PEER_IP), dqpn=2), "peer_bad_source"),
        (frame(**dict(v6, ip_src=PEER_IP), dqpn=3), None),
    ]
    cfg = {0: (QpState.RTR, PEER_IP, 0), 1: (QpState.RTS, PEER_IP6, 1),
           2: (QpState.RTS, PEER_IP, 0), 3: (QpState.RTS, PEER_IP, 1)}
    out, strobes = run_filter(dut, cases, cfg, own_ip6=OWN_IP6)
    assert out == [(f["ip_src"], f["dqpn"], f["sack_base"]) for f, reason in cases
                   if reason is None]
    assert strobes == expected_counts(cases)


@pytest.mark.parametrize("backpressure", [False, True])
def test_rx_pipeline_drops_forged_peer_frames(backpressure):
    """Through ``RxPipeline``: only the genuine peer frames reach ``peer_ack``
    and each dropped one is counted in its ``CNT_PEER_*`` register;
    ``CNT_PEER_FRAMES`` counts them all (forged ACKs went through before)."""
    dut = RxPipeline(num_qps=NUM_QPS, num_mrs=1, sack_bits=64)
    rmap = dut.register_map
    out, counts = [], {}

    async def bench(ctx):
        for name, value in (("OWN_IP", OWN_IP), ("OWN_MAC_LO", OWN_MAC & 0xFFFFFFFF),
                            ("OWN_MAC_HI", OWN_MAC >> 32)):
            await csr_write(ctx, dut.csr, rmap[name].addr(), value)
        for q, state in ((0, QpState.RTR), (1, QpState.RTS)):
            await csr_write(ctx, dut.csr, rmap["QP_PEER_IP"].addr(q), PEER_IP)
            await csr_write(ctx, dut.csr, rmap["QP_CTRL"].addr(q), state.value)
        for _ in range(4):
            await ctx.tick()
        for f, _ in CASES:
            set_header(ctx, dut.hdr.payload, f)
            ctx.set(dut.hdr.valid, 1)
            await ctx.tick().until(dut.hdr.ready)
            ctx.set(dut.hdr.valid, 0)
        for _ in range(60):
            await ctx.tick()
        for name in ("peer_frames",) + PEER_FILTER_COUNTERS:
            counts[name] = await csr_read(ctx, dut.csr, rmap[f"CNT_{name.upper()}"].addr(),
                                          latency=RxPipeline.CSR_READ_LATENCY)

    async def sink(ctx):
        k = 0
        async for clk_edge, _rst, valid, ready, payload in ctx.tick().sample(
                dut.peer_ack.valid, dut.peer_ack.ready, dut.peer_ack.payload):
            if clk_edge and valid and ready:
                out.append((payload.ip_src, payload.bth.dqpn, payload.sack.sack_base))
            k += 1
            ctx.set(dut.peer_ack.ready, 0 if backpressure and k % 3 else 1)

    simulate(dut, bench, sink)
    assert out == passed_frames()
    assert counts == {"peer_frames": len(CASES), **expected_counts()}

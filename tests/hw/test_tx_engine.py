"""cocotb regression of hw.tx.engine.TxEngine under Verilator, on the bench
of tests/hw/tx_tb.py (``TB``: cocotbext-axi models around the engine;
``Host``: WQEs and doorbells; ``Scoreboard``: the packets each message must
become, a Python reference written from docs/protocol.md and docs/tx.md).

Every frame is dissected with the project's scapy layers and checked field by
field against the reference, then rebuilt byte for byte with
``host_driver.layers.write_packet`` from the reference and host memory; the
IPv4 checksum and ICRC are verified with ``check_frame``. The build has
``ipv6`` (``TX_IPV6``, 1 by default): a QP whose peer is an IPv6 address
frames over IPv6, checked the same way. The EV (UDP source
port) of every packet must be GOOD for its QP at the time the packet was
committed (the ``sent`` record's cycle).

pytest builds one Verilator model (``tx_engine_w64``) shared by all cocotb
tests of this module; a long random soak is behind ``@pytest.mark.long``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import cocotb
import pytest
from cocotb.triggers import ClockCycles

from host_driver import layers as L
from hw.protocol import EvFormat, ev_hi_words
from hw.tx.layouts import EvState
from hw.tx.regs import EV_PLANE_LSB, QP_BASE, QP_STRIDE, TX_TYPE_ID, G, Q
from tests import seeds
from tests.hw.tx_tb import (
    CLK_NS,
    DATA_WIDTH,
    EV_WIDTH,
    EVS_PER_QP,
    INFLIGHT,
    IPV6,
    NUM_PLANES,
    NUM_QPS,
    SRC_IP,
    SRC_IP6,
    QpConfig,
    bench_case,
    check_counters,
    ip_int,
    make_tb,
    run,
)

ROOT = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------------------
# Tests


def message_lengths(mtu: int) -> list[int]:
    return sorted(
        {
            0,
            1,
            3,
            7,
            8,
            9,
            63,
            64,
            255,
            256,
            257,
            mtu - 1,
            mtu,
            mtu + 1,
            2 * mtu + 3,
            4095,
            4096,
            4097,
            3 * mtu + mtu // 2 + 5,
        }
    )


@cocotb.test()
@cocotb.parametrize(mtu=[256, 1024, 4096])
async def test_messages(dut, mtu):
    """Lengths 0..64 KiB, aligned and not, across 4 KiB pages, with and without
    immediate, on 4 QPs at once; random memory latency and MAC backpressure."""
    tb, host = await make_tb(dut, seed=mtu)
    rng = seeds.rng(mtu + 1)
    qps = [0, 5, 10, 15][:NUM_QPS]
    for q in qps:
        await host.open_qp(
            QpConfig(
                q,
                mtu=mtu,
                dscp=q * 3 % 64,
                next_psn=rng.getrandbits(24),
                dst_mac=f"02:00:00:00:01:{q:02x}",
                dst_ip=f"10.1.0.{q + 2}",
            )
        )
    lengths = message_lengths(mtu)
    for i, n in enumerate(lengths):
        q = qps[i % len(qps)]
        imm = rng.getrandbits(32) if rng.random() < 0.5 else None
        # some buffers start just below a 4 KiB page so the read crosses it
        laddr = None
        if i % 3 == 0:
            page = (host.buf_next + 4096) & ~4095
            laddr = page - rng.randrange(1, 64)
            host.buf_next = laddr
            laddr = host.alloc(n, rng, align_offset=0)
        await host.post(q, n, rng, imm=imm, laddr=laddr)
    await host.post(qps[0], 65536, rng, imm=0x12345678)
    await host.post(qps[1], 65536 - 3, rng, laddr=host.alloc(65536, rng, align_offset=5))
    await host.sb.wait_all(tb, ack=True)
    await check_counters(tb, host)


@cocotb.test()
async def test_many_qps(dut):
    """All QPs at once with mixed MTUs: every packet right, and the round-robin
    visits every QP with work once per round."""
    tb, host = await make_tb(dut, seed=11)
    rng = seeds.rng(12)
    for q in range(NUM_QPS):
        await host.open_qp(QpConfig(q, mtu=256, next_psn=rng.getrandbits(24)), enable=False)
    # 12 packets per QP, posted while disabled, then all enabled
    for q in range(NUM_QPS):
        await host.post(q, 4 * 256, rng, doorbell=False)
        await host.post(q, 8 * 256 - rng.randrange(200), rng, imm=q, doorbell=False)
        await host.ring_doorbell(q)
    for q in range(NUM_QPS):
        await tb.write(tb.qreg(q, Q.CTRL), 1)
    await host.sb.wait_all(tb)
    order = host.sb.order
    # once every QP has sent (each was enabled and its first WQE read ahead),
    # and a round after that (the read-ahead, faster than these packets take
    # WQEs, catching up with the QPs whose first WQE ran out meanwhile),
    # each window of NUM_QPS consecutive packets holds every QP once, until
    # the first QP runs dry (its last packet)
    all_in = max(order.index(q) for q in range(NUM_QPS)) + 1
    assert all_in < 4 * NUM_QPS, order
    first_dry = min(len(order) - 1 - order[::-1].index(q) for q in range(NUM_QPS))
    steady = order[all_in + NUM_QPS : first_dry + 1]
    assert len(steady) >= 5 * NUM_QPS, order
    for i in range(len(steady) - NUM_QPS + 1):
        window = steady[i : i + NUM_QPS]
        assert len(set(window)) == NUM_QPS, f"not round-robin at {i}: {window} in {order}"
    # second phase: different MTUs, random lengths, all QPs
    for q in range(NUM_QPS):
        mtu = rng.choice([256, 512, 1024, 2048, 4096])
        await tb.write(tb.qreg(q, Q.MTU), mtu)
        host.cfg[q].mtu = mtu
        for _ in range(3):
            await host.post(
                q,
                rng.randrange(0, 9000),
                rng,
                imm=rng.getrandbits(32) if rng.random() < 0.3 else None,
            )
    # up to 27 KB per QP at 8 bytes a cycle: the time allowed grows with the QPs
    await host.sb.wait_all(tb, timeout_cycles=200_000 * max(1, NUM_QPS // 16), ack=True)
    await check_counters(tb, host)


@cocotb.test(skip=not IPV6)
async def test_ipv6_peers(dut):
    """QPs whose peers are IPv6 addresses beside QPs with IPv4 peers, every
    QP with messages of every packet kind at once: each frame over its QP's
    family, byte-exact against scapy's (IPv6: traffic class, flow label 0,
    hop limit 64, payload length; the ICRC over IPv6's masks). A QP moved
    from IPv4 to IPv6 between messages frames the next ones over IPv6."""
    tb, host = await make_tb(dut, seed=31)
    rng = seeds.rng(32)
    qps = list(range(min(NUM_QPS, 4)))
    for q in qps:
        peer = f"2001:db8:{q:x}::{q + 2:x}" if q % 2 else f"10.2.0.{q + 2}"
        await host.open_qp(QpConfig(q, mtu=rng.choice([256, 1024]), dscp=rng.getrandbits(6),
                                    next_psn=rng.getrandbits(24), dst_ip=peer,
                                    dst_mac=f"02:00:00:00:02:{q:02x}"))
    for i in range(24):
        q = qps[i % len(qps)]
        await host.post(q, rng.choice([0, 1, 3, 64, 255, 256, 257, 1500, 3000]), rng,
                        imm=rng.getrandbits(32) if rng.random() < 0.4 else None)
    await host.sb.wait_all(tb, ack=True)
    # QP 0 moves to an IPv6 peer (its new address first, then the family)
    cfg = host.cfg[qps[0]]
    cfg.dst_ip = "fd00::abcd:1"
    for i, off in enumerate((Q.DST_IP, Q.DST_IP6_1, Q.DST_IP6_2, Q.DST_IP6_3)):
        await tb.write(tb.qreg(qps[0], off), ip_int(cfg.dst_ip) >> (32 * i) & 0xFFFFFFFF)
    await tb.write(tb.qreg(qps[0], Q.IP6), 1)
    for n in (0, 700, 2500):
        await host.post(qps[0], n, rng, imm=n or None)
    await host.sb.wait_all(tb, ack=True)
    v6 = sum(frame[12:14] == b"\x86\xdd" for _, frame in tb.frames)
    assert 0 < v6 < len(tb.frames), f"{v6} of {len(tb.frames)} frames over IPv6"
    assert await tb.read(G.SRC_IP6 + 12) == ip_int(SRC_IP6) >> 96
    assert await tb.read(tb.qreg(qps[1], Q.IP6)) == 1
    await check_counters(tb, host)


@cocotb.test(skip=EV_WIDTH < 64)
async def test_ev_formats(dut):
    """QPs of each EV format over IPv6 (UDP, STEV, SRv6), beside an IPv4 QP
    whose format bits say SRv6, with 64-bit EVs of their own (the bits above
    15 through ev_value_hi), messages of every packet kind at once under the
    sink's backpressure: each frame carries its EV where its format puts it
    (STEV's flow label, SRv6's carrier and source port; the IPv4 QP's as
    UDP's), byte-exact against scapy's, the SRv6 frames' ICRC over the
    peer's address; the entries read back whole."""
    tb, host = await make_tb(dut, seed=33)
    rng = seeds.rng(34)
    formats = [EvFormat.UDP, EvFormat.STEV, EvFormat.SRV6, EvFormat.SRV6]
    qps = list(range(min(NUM_QPS, len(formats))))
    for q in qps:
        v6 = q < 3
        peer = f"fd00:0:{q + 2:x}::" if v6 else f"10.2.0.{q + 2}"
        await host.open_qp(QpConfig(q, mtu=rng.choice([256, 1024]), dscp=rng.getrandbits(6),
                                    next_psn=rng.getrandbits(24), dst_ip=peer,
                                    dst_mac=f"02:00:00:00:02:{q:02x}", ev_format=formats[q]))
        for i in range(EVS_PER_QP):
            ev = (0x0E00 + i) << 48 | (q + 2) << 32 | rng.getrandbits(32)
            await host.set_ev(q, i, value=ev)
    for i in range(32):
        q = qps[i % len(qps)]
        await host.post(q, rng.choice([0, 1, 3, 64, 255, 256, 257, 1500, 3000]), rng,
                        imm=rng.getrandbits(32) if rng.random() < 0.4 else None)
    await host.sb.wait_all(tb, ack=True)
    for q in qps:
        await tb.write(G.EV_SELECT, 5 | q << 8)
        words = [await tb.read(G.EV_VALUE_HI + 4 * k) for k in range(ev_hi_words(EV_WIDTH))]
        assert words == [host.ev_value[(q, 5)] >> 16 + 32 * k & 0xFFFFFFFF
                         for k in range(len(words))]
    flows = {L.flow_label(frame) for _, frame in tb.frames}
    assert len(flows) > 1, "no STEV flow label on the wire"
    await check_counters(tb, host)


@cocotb.test()
async def test_psn_wrap(dut):
    """PSNs wrap from 0xFFFFFF to 0, for sending, the window and ack_update."""
    tb, host = await make_tb(dut, seed=21)
    rng = seeds.rng(22)
    await host.open_qp(QpConfig(3, mtu=256, next_psn=0xFFFFF0, cwnd=24))
    await host.post(3, 40 * 256 + 17, rng, imm=7)  # 41 packets, PSN 0xFFFFF0..0x000018
    await ClockCycles(tb.dut.clk, 3000)
    host.sb.check(tb)
    assert len(tb.sent) == 24, f"{len(tb.sent)} sent with a window of 24"
    # acknowledge across the wrap
    await tb.ack(3, 0x000002)
    assert await tb.read(tb.qreg(3, Q.UNA_PSN)) == 0x000002
    await host.sb.wait_all(tb)
    psns = [r["psn"] for _, r in tb.sent]
    assert psns[15:18] == [0xFFFFFF, 0x000000, 0x000001], psns[14:19]
    await check_counters(tb, host)


@cocotb.test()
async def test_unknown_opcode_and_reset(dut):
    """A WQE whose opcode TX does not know becomes no packet: one sent record
    with op_err and its ring index, the consumer index past it, and no new work
    from the QP (the WQE after it is not sent) while a retransmission of its
    PSNs in flight still goes; qp_ctrl.reset empties the ring (consumer =
    doorbell) and drops a part-sent WQE (another QP, parked on its window),
    after which each QP sends exactly the host's next WQE."""
    tb, host = await make_tb(dut, seed=71)
    rng = seeds.rng(72)
    q, q2 = 2, 5
    await host.open_qp(QpConfig(q, mtu=256, next_psn=0x500))
    await host.open_qp(QpConfig(q2, mtu=256, next_psn=0x700, cwnd=2))
    await host.post(q, 600, rng)  # 3 packets, WQE 0
    await host.post(q2, 5 * 256, rng)  # 5 packets, 2 go out (cwnd 2)
    await ClockCycles(tb.dut.clk, 3000)
    bad = host.pi[q]
    await host.post_unsent(q, 100, rng, opcode=0x07)
    await host.post_unsent(q, 100, rng)
    await host.ring_doorbell(q)
    await ClockCycles(tb.dut.clk, 3000)
    host.sb.check(tb)
    assert tb.refused == [{"qpn": q, "wqe_index": bad}], tb.refused
    assert await tb.read(tb.qreg(q, Q.CONSUMER)) == bad + 1
    assert await tb.read(tb.qreg(q, Q.STATUS)) & 1 == 0  # no part-sent WQE
    assert len(host.sb.pending[q]) == 0 and host.sb.checked_frames == len(tb.frames) == 5
    st2 = await tb.read(tb.qreg(q2, Q.STATUS))
    assert st2 & 3 == 3 and st2 >> 8 == 2, hex(st2)  # part sent, parked, 2 in flight
    # the halted QP still retransmits its PSNs in flight
    host.sb.expect_retx(q, 0x501)
    await tb.retx(q, 0x501)
    await ClockCycles(tb.dut.clk, 2000)
    host.sb.check(tb)
    assert host.sb.retx_expected == [] and len(tb.refused) == 1
    # reset: consumer = doorbell, the part-sent WQE of q2 dropped
    for qq in (q, q2):
        await tb.write(tb.qreg(qq, Q.CTRL), 2)
        assert await tb.read(tb.qreg(qq, Q.CONSUMER)) == host.pi[qq]
        assert await tb.read(tb.qreg(qq, Q.STATUS)) & 3 == 0
        assert await tb.read(tb.qreg(qq, Q.CTRL)) == 0
    del host.sb.pending[q2][:]  # the 3 packets of q2's WQE not sent
    for qq, psn in ((q, 0x900), (q2, 0xA00)):
        await tb.write(tb.qreg(qq, Q.NEXT_PSN), psn)
        host.next_psn[qq] = psn
        await tb.write(tb.qreg(qq, Q.CWND), 256)
        await host.post(qq, 300, rng)
        await tb.write(tb.qreg(qq, Q.CTRL), 1)
    await host.sb.wait_all(tb)
    assert len(tb.refused) == 1
    await check_counters(tb, host)


@cocotb.test()
async def test_max_wimm(dut):
    """qp_max_wimm bounds a QP's WRITE_WITH_IMM messages started and not completed:
    at the bound the next WITH_IMM WQE is not sent and the QP's WQEs behind it
    (a plain WRITE too) wait, while another QP sends and the QP's own
    retransmissions go; each wimm_done (reliability's SUCCESS completion) lets
    one more start. qp_wimm_outstanding and qp_status.wimm_blocked show it;
    qp_ctrl.reset and .flush set the count to 0, bound 0 is no bound."""
    tb, host = await make_tb(dut, seed=81)
    rng = seeds.rng(82)
    q, q2 = 4, 9
    await host.open_qp(QpConfig(q, mtu=256, next_psn=0x300))
    await host.open_qp(QpConfig(q2, mtu=256, next_psn=0x400))
    await tb.write(tb.qreg(q, Q.MAX_WIMM), 2)
    assert await tb.read(tb.qreg(q, Q.MAX_WIMM)) == 2

    async def settle(sent):
        await ClockCycles(tb.dut.clk, 2500)
        host.sb.check(tb)
        assert len(tb.sent) == sent, f"{len(tb.sent)} packets sent, expected {sent}"

    async def outstanding(qp):
        return await tb.read(tb.qreg(qp, Q.WIMM_OUTSTANDING))

    async def blocked(qp):
        return (await tb.read(tb.qreg(qp, Q.STATUS))) >> 3 & 1

    await host.post(q, 600, rng, imm=0xA)  # 3 packets
    await host.post(q, 100, rng, imm=0xB)
    await host.post(q, 100, rng, imm=0xC)  # the third: waits
    await host.post(q, 300, rng)  # a plain WRITE behind it: waits too (2 packets)
    await host.post(q, 50, rng, imm=0xE)
    for _ in range(3):  # another QP, no bound: all go
        await host.post(q2, 100, rng, imm=7)
    await settle(4 + 3)
    assert [p.imm for p in host.sb.pending[q]][:1] == [0xC]
    assert await outstanding(q) == 2 and await blocked(q) == 1
    assert await outstanding(q2) == 3 and await blocked(q2) == 0
    # a retransmission of the parked QP still goes
    host.sb.expect_retx(q, 0x301)
    await tb.retx(q, 0x301)
    await settle(8)
    # one completes: C and the WRITE behind it go, E waits
    await tb.wimm_done(q)
    await settle(8 + 1 + 2)
    assert await outstanding(q) == 2 and await blocked(q) == 1
    # a completion for another QP or a QPN beyond the table changes nothing here
    await tb.wimm_done(q2)
    await tb.wimm_done(NUM_QPS + 3)
    await settle(11)
    assert await outstanding(q2) == 2
    await tb.wimm_done(q)
    await host.sb.wait_all(tb)
    assert await outstanding(q) == 2 and await blocked(q) == 0
    for _ in range(4):  # never below 0
        await tb.wimm_done(q)
    assert await outstanding(q) == 0
    # bound 1, reset: the count and the parked WQE go, the QP restarts at the doorbell
    await tb.write(tb.qreg(q, Q.MAX_WIMM), 1)
    sent = len(tb.sent)
    await host.post(q, 100, rng, imm=1)
    await host.post(q, 100, rng, imm=2)
    await settle(sent + 1)
    assert await outstanding(q) == 1 and await blocked(q) == 1
    await tb.write(tb.qreg(q, Q.CTRL), 2)  # reset
    assert await outstanding(q) == 0 and await blocked(q) == 0
    del host.sb.pending[q][:]
    await tb.write(tb.qreg(q, Q.NEXT_PSN), 0x900)
    host.next_psn[q] = 0x900
    await host.post(q, 100, rng, imm=3)
    await tb.write(tb.qreg(q, Q.CTRL), 1)
    await host.sb.wait_all(tb)
    assert await outstanding(q) == 1
    # flush (reliability's ERROR): the count to 0
    await tb.write(tb.qreg(q, Q.CTRL), 4)
    assert await outstanding(q) == 0 and await tb.read(tb.qreg(q, Q.CTRL)) == 0
    # bound 0: none; a bound above the in-flight table reads back as written
    await tb.write(tb.qreg(q, Q.MAX_WIMM), 0)
    await tb.write(tb.qreg(q, Q.CTRL), 1)
    for i in range(4):
        await host.post(q, 10, rng, imm=i)
    await host.sb.wait_all(tb)
    assert await outstanding(q) == 4
    await tb.write(tb.qreg(q2, Q.MAX_WIMM), 0xFFFF)
    assert await tb.read(tb.qreg(q2, Q.MAX_WIMM)) == 0xFFFF
    await check_counters(tb, host)


@cocotb.test()
async def test_window(dut):
    """min(MPR x 128, cwnd) limits the PSNs in flight; acks reopen it."""
    tb, host = await make_tb(dut, seed=31)
    rng = seeds.rng(32)
    q = 7
    await host.open_qp(QpConfig(q, mtu=256, cwnd=5, next_psn=0x1000))
    for _ in range(30):
        await host.post(q, rng.randrange(0, 300), rng)  # 1 or 2 packets each
    total = len(host.sb.pending[q])
    una = 0x1000
    rounds = 0
    while True:
        await ClockCycles(tb.dut.clk, 400)
        host.sb.check(tb)
        sent = len(tb.sent)
        status = await tb.read(tb.qreg(q, Q.STATUS))
        inflight = status >> 8
        assert inflight == sent - (una - 0x1000), (inflight, sent, una)
        if sent == total:
            break
        assert inflight == 5, f"window of 5 not filled: {inflight} in flight"
        assert status & 2, "QP not parked on its window"
        # acknowledge a random part of what is in flight
        una += rng.randrange(1, 6)
        await tb.ack(q, una)
        rounds += 1
    assert rounds >= 5
    # a stale ack (behind una) and one beyond next_psn are ignored
    await tb.ack(q, una - 3)
    await tb.ack(q, 0x1000 + total + 5)
    assert await tb.read(tb.qreg(q, Q.UNA_PSN)) == una
    # MPR limits too: MPR 1 = 128 PSNs, with cwnd out of the way
    await tb.ack(q, 0x1000 + total)
    await tb.write(tb.qreg(q, Q.CWND), 1000)
    await tb.write(tb.qreg(q, Q.MPR), 1)
    await host.post(q, 140 * 256, rng)
    await ClockCycles(tb.dut.clk, 128 * 90 + 2000)
    host.sb.check(tb)
    assert len(tb.sent) == total + 128, f"{len(tb.sent) - total} sent with MPR 128"
    await tb.ack(q, 0x1000 + total + 100)
    await host.sb.wait_all(tb)
    await check_counters(tb, host)


@cocotb.test()
async def test_retransmit(dut):
    """Retransmit requests for arbitrary PSNs re-read the payload and go out on
    another GOOD EV; PSNs not in flight are ignored and counted."""
    tb, host = await make_tb(dut, seed=41)
    rng = seeds.rng(42)
    for q in (1, 2):
        await host.open_qp(QpConfig(q, mtu=1024, next_psn=0xFFFFF8 if q == 2 else 100))
    for _ in range(6):
        for q in (1, 2):
            await host.post(
                q,
                rng.randrange(0, 5000),
                rng,
                imm=rng.getrandbits(32) if rng.random() < 0.5 else None,
            )
    await host.sb.wait_all(tb)
    inflight = {q: [p.psn for p in host.sb.by_psn.values() if p.qp == q] for q in (1, 2)}
    requests = []
    for _ in range(30):
        q = rng.choice((1, 2))
        psn = rng.choice(inflight[q])
        requests.append((q, psn))
    for q, psn in requests:
        host.sb.expect_retx(q, psn)
        await tb.retx(q, psn, reason=rng.randrange(3))
    await host.sb.wait_all(tb)
    for q, psn, old, new in host.sb.retx_seen:
        assert old != new, f"QP {q} PSN {psn:#x} retransmitted on the EV it last used ({old})"
    # the same PSN again: must avoid the EV of the retransmit, not the original
    q, psn = requests[0]
    host.sb.expect_retx(q, psn)
    await tb.retx(q, psn)
    await host.sb.wait_all(tb)
    assert host.sb.retx_seen[-1][2] != host.sb.retx_seen[-1][3]
    # not in flight: an acknowledged PSN, one never sent, a QP out of range
    ignored0 = await tb.read(G.RETX_IGNORED)
    una = (min(inflight[1]) + 3) & L.PSN_MASK
    await tb.ack(1, una)
    await tb.retx(1, min(inflight[1]))
    await tb.retx(2, host.next_psn[2])
    await tb.retx(NUM_QPS + 3, 0)
    await ClockCycles(tb.dut.clk, 300)
    host.sb.check(tb)
    assert await tb.read(G.RETX_IGNORED) == ignored0 + 3
    assert host.sb.outstanding() == 0
    # with one GOOD EV left, a retransmit uses it even if it was the last one
    for i in range(1, EVS_PER_QP):
        await host.set_ev(2, i, state=EvState.DENIED)
    psn = host.next_psn[2]
    await host.post(2, 10, rng)
    await host.sb.wait_all(tb)
    host.sb.expect_retx(2, psn)
    await tb.retx(2, psn)
    await host.sb.wait_all(tb)
    assert host.sb.retx_seen[-1][2:] == (0, 0)
    await check_counters(tb, host)


@cocotb.test()
async def test_ev_states(dut):
    """EVs going ASSUMED_BAD or DENIED mid-message (by CSR and by ev_update) are
    not used from the next packet on; a QP with no GOOD EV stalls and resumes;
    spreading over the GOOD EVs stays even."""
    tb, host = await make_tb(dut, seed=51)
    rng = seeds.rng(52)
    q = 4
    await host.open_qp(QpConfig(q, mtu=256, cwnd=256, mpr=2))
    values = rng.sample(range(1, 0x10000), EVS_PER_QP)
    for i, v in enumerate(values):
        state = EvState.DENIED if i in (3, 9) else EvState.GOOD
        await host.set_ev(q, i, value=v, state=state)
    for _ in range(2):
        await host.post(q, 120 * 256 + 1, rng)
    # change states while the message streams
    changes = [
        (5, EvState.ASSUMED_BAD, True),
        (0, EvState.DENIED, False),
        (12, EvState.ASSUMED_BAD, False),
        (3, EvState.GOOD, True),
        (15, EvState.ASSUMED_BAD, True),
    ]
    for index, state, via_stream in changes:
        await ClockCycles(tb.dut.clk, rng.randrange(200, 900))
        await host.set_ev(q, index, state=state, via_stream=via_stream)
        await tb.ack(q, tb.sent[-1][1]["psn"] if tb.sent else 0)
    await host.sb.wait_all(tb)
    # spreading since the last change: most- vs least-used GOOD EV
    t_last = host.ev_history[-1][0] + 8 * CLK_NS
    uses = Counter(r["ev_index"] for t, r in tb.sent if t >= t_last)
    good = [i for i in range(EVS_PER_QP) if host.ev_state[(q, i)] == EvState.GOOD]
    assert set(uses) <= set(good)
    counts = [uses[i] for i in good]
    n = sum(counts)
    assert n >= 4 * len(good), "too few packets to judge spreading"
    assert max(counts) - min(counts) <= 1, f"round-robin spreading off: {uses}"
    # every EV of the QP not GOOD: the QP parks, then resumes on the one made GOOD
    await tb.ack(q, host.next_psn[q])
    for i in good:
        await host.set_ev(q, i, state=EvState.ASSUMED_BAD, via_stream=bool(i % 2))
    sent_before = len(tb.sent)
    await host.post(q, 10 * 256, rng)
    await ClockCycles(tb.dut.clk, 2000)
    assert len(tb.sent) == sent_before, "packets sent with no GOOD EV"
    status = await tb.read(tb.qreg(q, Q.STATUS))
    assert status & 4, "QP not parked for want of a GOOD EV"
    await host.set_ev(q, 7, state=EvState.GOOD)
    await host.sb.wait_all(tb)
    assert {r["ev_index"] for _, r in tb.sent[sent_before:]} == {7}
    # the CSR view of the table
    await tb.write(G.EV_SELECT, 5 | (q << 8))
    assert await tb.read(G.EV_ENTRY) == host.ev_entry(q, 5)
    assert host.ev_value[(q, 5)] == values[5] and host.ev_state[(q, 5)] == EvState.ASSUMED_BAD
    await check_counters(tb, host)


@cocotb.test()
async def test_spreading(dut):
    """Over N packets with a fixed set of GOOD EVs, use counts differ by at most
    one: max/min <= ceil(N/G)/floor(N/G)."""
    tb, host = await make_tb(dut, seed=61, latency=False, backpressure=False)
    rng = seeds.rng(62)
    for q in (0, 1):
        await host.open_qp(QpConfig(q, mtu=256))
    bad = {0: {2, 3, 7, 11, 12}, 1: set(range(1, EVS_PER_QP, 2))}
    for q in (0, 1):
        for i in sorted(bad[q]):
            await host.set_ev(q, i, state=EvState.DENIED if i % 2 else EvState.ASSUMED_BAD)
    # planes as a controller binds them, any of the NIC's (checked per frame)
    for i in range(EVS_PER_QP):
        await host.set_ev(1, i, state=host.ev_state[(1, i)], plane=rng.randrange(NUM_PLANES))
    acked = {0: 0, 1: 0}
    for _ in range(4):
        for q in (0, 1):
            await host.post(q, 100 * 256, rng)
        await host.sb.wait_all(tb)
        for q in (0, 1):
            await tb.ack(q, host.next_psn[q])
            acked[q] = host.next_psn[q]
    for q in (0, 1):
        uses = host.sb.ev_uses[q]
        good = [i for i in range(EVS_PER_QP) if i not in bad[q]]
        assert set(uses) == set(good), f"QP {q}: EVs used {sorted(uses)}, GOOD {good}"
        n = sum(uses.values())
        counts = [uses[i] for i in good]
        bound = -(-n // len(good)) / (n // len(good))
        tb.log.info(
            "QP %d: %d packets over %d EVs, max/min %.4f (bound %.4f)",
            q,
            n,
            len(good),
            max(counts) / min(counts),
            bound,
        )
        assert max(counts) / min(counts) <= bound, uses


async def ev_entries_unchanged(tb, host, q):
    for i in range(EVS_PER_QP):
        await tb.write(G.EV_SELECT, i | (q << 8))
        assert await tb.read(G.EV_ENTRY) == host.ev_entry(q, i), f"EV {i} changed"


@cocotb.test(skip=NUM_PLANES < 2)
async def test_links_steer_spraying(dut):
    """A plane whose link is down (``link_up``) is not sprayed on: the QP's
    packets spread evenly over its GOOD EVs on live planes and none leaves on
    the dead plane, with no EV's state changed; an EV bound to a plane the NIC
    lacks is never used. A QP whose every EV is on a dead plane stalls, and
    resumes on that plane as its link comes back."""
    tb, host = await make_tb(dut, seed=71, latency=False, backpressure=False)
    rng = seeds.rng(72)
    q = 2
    all_up = (1 << NUM_PLANES) - 1
    await host.open_qp(QpConfig(q, mtu=256))
    await host.set_ev(q, 0, plane=7)  # 7: a plane the NIC lacks
    dut.link_up.value = all_up & ~0b10
    start, frames0 = len(tb.sent), len(tb.frame_planes)
    await host.post(q, 64 * 256, rng)
    await host.sb.wait_all(tb, ack=True)
    uses = Counter(r["ev_index"] for _, r in tb.sent[start:])
    live = [i for i in range(EVS_PER_QP) if host.ev_plane[(q, i)] not in (1, 7)]
    assert sorted(uses) == live, f"EVs used {sorted(uses)}, live {live}"
    counts = [uses[i] for i in live]
    assert max(counts) - min(counts) <= 1, f"uneven over the live planes: {uses}"
    assert set(tb.frame_planes[frames0:]) == set(range(NUM_PLANES)) - {1}
    await ev_entries_unchanged(tb, host, q)

    # every EV on the dead plane: the QP stalls, then the link comes back
    for i in range(EVS_PER_QP):
        await host.set_ev(q, i, plane=1)
    start, frames0 = len(tb.sent), len(tb.frame_planes)
    await host.post(q, 16 * 256, rng)
    await ClockCycles(dut.clk, 3000)
    assert len(tb.sent) == start, "a packet left with every EV's plane down"
    dut.link_up.value = all_up
    await host.sb.wait_all(tb, ack=True)
    uses = Counter(r["ev_index"] for _, r in tb.sent[start:])
    assert sorted(uses) == list(range(EVS_PER_QP)), uses
    assert set(tb.frame_planes[frames0:]) == {1}
    await ev_entries_unchanged(tb, host, q)
    await check_counters(tb, host)


@cocotb.test()
async def test_registers(dut):
    """Block header, parameters, RW registers read back, bad MTUs ignored."""
    tb, host = await make_tb(dut, seed=71, latency=False, backpressure=False)
    assert await tb.read(G.ID) == (TX_TYPE_ID << 16) | 1
    assert await tb.read(G.NUM_QPS) == NUM_QPS
    assert await tb.read(G.EVS_PER_QP) == EVS_PER_QP
    caps = await tb.read(G.CAPS)
    assert caps & 0xFF == DATA_WIDTH // 8 and (caps >> 8) & 0xF == 12
    assert 1 << ((caps >> 12) & 0xF) == INFLIGHT
    assert (caps >> 16) & 1 == IPV6
    rng = seeds.rng(72)
    for q in (0, NUM_QPS - 1):
        vals = {
            Q.DEST_QPN: rng.getrandbits(24),
            Q.DST_MAC_LO: rng.getrandbits(32),
            Q.DST_MAC_HI: rng.getrandbits(16),
            Q.DST_IP: rng.getrandbits(32),
            Q.DSCP: rng.getrandbits(6),
            Q.SQ_BASE_LO: rng.getrandbits(26) << 6,
            Q.SQ_BASE_HI: rng.getrandbits(32),
            Q.SQ_LOG2_SIZE: rng.randrange(16),
            Q.MPR: rng.getrandbits(8),
            Q.CWND: rng.getrandbits(16),
            Q.NEXT_PSN: rng.getrandbits(24),
            Q.MTU: 2048,
        }
        for off, v in vals.items():
            await tb.write(tb.qreg(q, off), v)
        for off, v in vals.items():
            assert await tb.read(tb.qreg(q, off)) == v, f"QP {q} register {off:#x}"
        assert await tb.read(tb.qreg(q, Q.UNA_PSN)) == vals[Q.NEXT_PSN]
        for bad in (0, 100, 128, 8192, 3000):
            await tb.write(tb.qreg(q, Q.MTU), bad)
            assert await tb.read(tb.qreg(q, Q.MTU)) == 2048
    await tb.write(G.EV_SELECT, 3 | (2 << 8))
    assert await tb.read(G.EV_SELECT) == 3 | (2 << 8)
    # default: 0xC000 + index, GOOD, plane index mod num_planes (0 with one plane)
    assert await tb.read(G.EV_ENTRY) == 0xC003 | (3 % NUM_PLANES) << EV_PLANE_LSB
    assert await tb.read(G.SRC_IP) == ip_int(SRC_IP)
    assert await tb.read(QP_BASE + NUM_QPS * QP_STRIDE) == 0  # beyond the last QP


@cocotb.test(skip=not os.environ.get("TX_SOAK"))
async def test_soak(dut):
    """Random traffic on every QP with random retransmits, acks and EV changes."""
    tb, host = await make_tb(dut, seed=int(os.environ.get("TX_SEED", "81")))
    rng = seeds.rng(int(os.environ.get("TX_SEED", "81")) + 1)
    for q in range(NUM_QPS):
        await host.open_qp(
            QpConfig(q, mtu=rng.choice([256, 1024, 4096]), next_psn=rng.getrandbits(24))
        )
    for _ in range(int(os.environ["TX_SOAK"])):
        q = rng.randrange(NUM_QPS)
        await host.post(
            q,
            rng.choice([rng.randrange(64), rng.randrange(20000)]),
            rng,
            imm=rng.getrandbits(32) if rng.random() < 0.3 else None,
        )
        host.sb.check(tb)
        if rng.random() < 0.2 and tb.sent:
            _, rec = rng.choice(tb.sent[-50:])
            una = await tb.read(tb.qreg(rec["qpn"], Q.UNA_PSN))
            if (rec["psn"] - una) & L.PSN_MASK < 0x800000:
                host.sb.expect_retx(rec["qpn"], rec["psn"])
                await tb.retx(rec["qpn"], rec["psn"])
        if rng.random() < 0.1:
            i = rng.randrange(1, EVS_PER_QP)
            await host.set_ev(q, i, state=rng.choice([0, 0, 1, 2]), via_stream=rng.random() < 0.5)
    await host.sb.wait_all(tb, timeout_cycles=2_000_000, ack=True)
    await check_counters(tb, host)


# ---------------------------------------------------------------------------
@cocotb.test()
async def test_throughput(dut):
    """With memory at full speed and no backpressure, 64 KiB messages leave at
    one beat per cycle (>= 0.95 of the frames' beats), and 64-byte writes, on
    four QPs and on one, at >= 0.9 of the wire's packet rate (each WQE
    prefetched while the packets before it are sent)."""
    r = await bench_case(dut, [65536] * 2, 1024, [0])
    assert r["cycles"] <= r["beats"] / 0.95, r
    for qps in ([0, 1, 2, 3], [0]):
        r = await bench_case(dut, [64] * 64, 1024, qps)
        assert r["cycles"] <= r["beats"] / 0.9, r


@cocotb.test(skip=DATA_WIDTH != 512)
async def test_control_rate(dut):
    """At 512 bits, where a 64-byte WRITE's frame is 3 beats, 64-byte WRITEs
    over four QPs and on one leave at no less than 0.9 of the wire: the
    sequencer's front half checks the next packet while its back half emits
    one, a packet per 3 cycles (on one QP, each WQE taken as the packet
    before it is emitted), and the WQE read-ahead, 4 per QP, keeps WQEs
    ready (docs/tx.md, "Scheduling" and "Limitations")."""
    for qps in ([0, 1, 2, 3], [0]):
        r = await bench_case(dut, [64] * 64, 1024, qps)
        assert r["cycles"] <= r["beats"] / 0.9, (qps, r)


# ---------------------------------------------------------------------------
# pytest entry points


def test_tx_engine():
    run()


@pytest.mark.long
def test_tx_engine_soak():
    run(testcase="test_soak", extra_env={"TX_SOAK": "400"})


@pytest.mark.long
def test_tx_engine_control_rate_512():
    """``test_control_rate`` on the 512-bit build (the bench's, ``tx_engine_w512``),
    in a process of its own: tests/hw/tx_tb.py reads its width when imported."""
    code = ("import sys; from cocotb_tools.check_results import get_results; "
            "from tests.hw.tx_tb import run; "
            "sys.exit(get_results(run(testcase='test_control_rate'))[1] != 0)")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT,
                   env={**os.environ, "TX_DATA_WIDTH": "512", "PYTHONPATH": str(ROOT)})

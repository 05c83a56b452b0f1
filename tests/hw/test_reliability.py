"""cocotb regression of hw.reliability.ReliabilityEngine under Verilator.

The block runs alone on the bench of tests/hw/rel_tb.py: a scripted requester
stands in for TX, driving ``sent`` and answering ``retx`` on another GOOD EV,
and a scripted responder drives ``peer_ack`` with the records RX would hand
over for ACK / SACK / NAK / probe-response frames built with scapy. Checks:
the retransmit requests, the ACK / EV / window / QP-state updates to TX, the
CQEs in host memory, the EV event queue and counters via CSR, and the probe
frames byte for byte (IPv4 checksum and ICRC by ``layers.check_frame``).
The comparisons with the golden model are in tests/hw/test_rel_model.py.

pytest runs it on two Verilator models: ``rel_q4`` (4 QPs, 8 EVs, a
15.625 MHz clock so the timeout unit is 16 cycles) for every behavioural
case, and ``rel_125m`` (2 QPs, 2 EVs, 125 MHz) for the cycle count of
1.024 us x 2^t.
"""

from __future__ import annotations

import os
from collections import deque

import cocotb
import pytest
from cocotb.triggers import ClockCycles, RisingEdge
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from host_driver import layers as L
from hw.reliability.cc_defaults import (
    DATA_WIRE_OVERHEAD,
    DEFAULT_BASE_RTT_NS,
    start_cwnd_packets,
    target_rtt_units,
)
from hw.reliability.nscc import nscc_params
from hw.reliability.nscc_path import (
    nscc_register_values,
    nscc_register_words,
    nscc_reset_values,
)
from sim import coverage as fcov
from sim.model.cc import Nscc, NsccParams
from tests import seeds
from tests.hw.rel_tb import (
    CONFIG,
    CQ_BASE,
    OWN_IP,
    OWN_MAC,
    PEER_IP,
    PEER_MAC,
    QP_MEM,
    RING_LOG2,
    TB,
    UNIT,
    P,
    ev_value,
    nominal_ns,
    pop_events,
    run,
)

# ---------------------------------------------------------------------------
# Tests (rel_q4)


@cocotb.test(skip=CONFIG != "rel_q4")
async def test_registers(dut):
    tb = TB(dut)
    await tb.reset()
    blk = await tb.read("block_id")
    assert blk == 0x0004 | (2 << 16)
    params = await tb.read("params")
    assert params == P["num_qps"] | P["evs_per_qp"] << 14 | P["window"] << 22
    assert await tb.read("timeout_unit") == UNIT == 16
    await tb.setup(qps=(0, 3))
    assert await tb.read("qp_ctrl", 3) == 3
    assert await tb.read("qp_rel_cfg", 3) == 12 | 2 << 5 | 3 << 8 | 1 << 16 | 3 << 24
    assert await tb.read("cq_base_lo", 3) == CQ_BASE + 3 * QP_MEM
    assert await tb.read("dest_qpn", 3) == 0x103
    assert await tb.read("peer_mac_hi", 3) == 0x0200
    assert await tb.read("ev", 3 * 8 + 5) == ev_value(3, 5)  # GOOD in [17:16]
    assert await tb.read("qp_ctrl", 1) == 0  # never started
    # NSCC's start and target at the default base RTT (hw/reliability/cc_defaults.py)
    assert (await tb.read("qp_cc", 0)) & 0xFFFF == start_cwnd_packets(
        DEFAULT_BASE_RTT_NS, 64 * P["clk_freq_hz"], 4096, P["window"])
    assert await tb.read("target_rtt") == target_rtt_units(
        DEFAULT_BASE_RTT_NS, P["clk_freq_hz"]) < 0xFFFF
    await tb.write("cwnd_ai", 300)
    assert await tb.read("cwnd_ai") == 300


@cocotb.test(skip=CONFIG != "rel_q4")
async def test_ack_completions(dut):
    """Cumulative ACKs free PSNs and complete WQEs in order; stale and unsent ACKs."""
    tb = TB(dut)
    await tb.reset()
    await tb.setup(qps=(1,), sack_thr=4)
    q = 1
    sizes = [2, 1, 3]  # packets per WQE
    psn0 = 0xFFFFFE  # crosses the 24-bit wrap
    psn = psn0
    for w, n in enumerate(sizes):
        tb.post_wqe(q, w, wr_id=0x1000 + w, length=1000 * n, imm=0xA0 + w)
        for k in range(n):
            tb.send(q, psn, ev=(psn % 8), last=int(k == n - 1), wqe=w)
            psn += 1
    await tb.settle(50)
    assert await tb.read("una_psn", q) == psn0
    assert await tb.read("nxt_psn", q) == (psn0 + 6) & 0xFFFFFF
    # ACK the first WQE (2 packets)
    tb.ack(q, psn0 + 1)
    await tb.settle()
    assert [c["wr_id"] for c in tb.cqes(q)] == [0x1000]
    assert tb.ack_upd.records()[-1] == {"qpn": q, "una_psn": (psn0 + 2) & 0xFFFFFF, "sacked": 0}
    # a SACK of the last WQE's packets does not complete it before the cumulative ACK;
    # TX learns that 3 of the 4 PSNs in flight are SACKed (its window holds one)
    tb.ack(q, psn0 + 1, bitmap=0b1110)
    await tb.settle()
    assert len(tb.cqes(q)) == 1
    assert tb.ack_upd.records()[-1] == {"qpn": q, "una_psn": (psn0 + 2) & 0xFFFFFF, "sacked": 3}
    updates = len(tb.ack_upd.records())
    # duplicate of an old ACK: harmless
    before = await tb.counters()
    tb.ack(q, psn0)
    await tb.settle()
    after = await tb.counters()
    assert after["acks_stale"] == before["acks_stale"] + 1
    assert len(tb.ack_upd.records()) == updates  # nothing moved: no update
    # an ACK for a PSN never sent: dropped and counted, nothing changes
    tb.ack(q, psn0 + 9)
    await tb.settle()
    after2 = await tb.counters()
    assert after2["acks_unsent"] == after["acks_unsent"] + 1
    assert await tb.read("una_psn", q) == (psn0 + 2) & 0xFFFFFF
    tb.ack(q, psn0 + 5)
    await tb.settle()
    cqes = tb.cqes(q)
    assert [c["wr_id"] for c in cqes] == [0x1000, 0x1001, 0x1002]
    assert [c["status"] for c in cqes] == [0, 0, 0]
    assert [c["byte_len"] for c in cqes] == [2000, 1000, 3000]
    assert [c["imm"] for c in cqes] == [0xA0, 0xA1, 0xA2]
    assert all(c["qpn"] == q and c["opcode"] == 0x0A for c in cqes)
    assert await tb.read("una_psn", q) == (psn0 + 6) & 0xFFFFFF
    assert tb.ack_upd.records()[-1] == {"qpn": q, "una_psn": (psn0 + 6) & 0xFFFFFF, "sacked": 0}
    assert tb.retx.records() == []
    assert dut.irq.value == 1
    status = await tb.read("irq_status")
    assert status & 2
    assert (await tb.read("irq_status")) & 2 == 0
    counters = await tb.counters()
    assert counters["cqes"] == 3 and counters["dma_errors"] == 0
    assert counters["acks"] == 4  # 5 ACKs, 1 for unsent PSNs


@cocotb.test(skip=CONFIG != "rel_q4")
async def test_sack_hole(dut):
    """A hole passed by sack_threshold SACKed PSNs is retransmitted at once, once."""
    tb = TB(dut)
    await tb.reset()
    await tb.setup(sack_thr=3, ev_thr=0)
    for psn in range(12):
        tb.post_wqe(0, psn, wr_id=psn, length=100)
        tb.send(0, 100 + psn, ev=psn % 8, wqe=psn)
    await tb.settle(50)
    # 100, 101 delivered; 102 missing; 103, 104 SACKed: 2 past the hole, below threshold
    tb.ack(0, 101, bitmap=0b110)
    await tb.settle()
    assert tb.retx.records() == []
    # 105 arrives: 3 past the hole
    tb.ack(0, 101, bitmap=0b1110)
    await tb.settle()
    assert tb.retx.records() == [{"qpn": 0, "psn": 102, "reason": 1}]
    # the same evidence again, and more: no second request for 102
    tb.ack(0, 101, bitmap=0b11110)
    await tb.settle()
    assert len(tb.retx.records()) == 1
    # the retransmission goes out on another EV (TX's choice), then a second hole at 107
    tb.send(0, 102, ev=5, retx=1, wqe=2)
    tb.ack(0, 101, bitmap=0b111011110)  # 103..106 and 108..110 received, 107 missing
    await tb.settle()
    assert [r["psn"] for r in tb.retx.records()] == [102, 107]
    tb.ack(0, 110)
    await tb.settle()
    assert await tb.read("una_psn", 0) == 111
    assert [c["wr_id"] for c in tb.cqes(0)] == list(range(11))
    c = await tb.counters()
    assert c["retx_sack"] == 2 and c["retx_timeout"] == 0


async def _trim_psn_3(dut, **setup):
    """PSNs 0..5 sent (window 20), then NAK TRIMMED for 3 with 0..2 received: PSN 3
    resent at once (reason 2) and the window cut to 18. Returns the TB."""
    tb = TB(dut)
    await tb.reset()
    await tb.setup(cwnd_init=20, cwnd_trim_dec=2, **setup)
    for psn in range(6):
        tb.send(0, psn, ev=psn % 8, wqe=psn)
    await tb.settle(50)
    tb.ack(0, 1, syndrome=L.NAK_TRIMMED, psn=3, bitmap=0b1)  # 2 received, 3 trimmed
    await tb.settle()
    assert tb.retx.records() == [{"qpn": 0, "psn": 3, "reason": 2}]
    assert tb.cwnd_upd.records()[-1] == {"qpn": 0, "cwnd": 18}
    return tb


@cocotb.test(skip=CONFIG != "rel_q4")
async def test_nak_trimmed(dut):
    """NAK TRIMMED retransmits that PSN at once and takes cwnd_trim_dec off the window."""
    tb = await _trim_psn_3(dut)
    # a NAK for an already SACKed or unsent PSN does nothing
    tb.ack(0, 1, syndrome=L.NAK_TRIMMED, psn=2, bitmap=0b1)
    tb.ack(0, 1, syndrome=L.NAK_TRIMMED, psn=9, bitmap=0b1)
    await tb.settle()
    assert len(tb.retx.records()) == 1
    c = await tb.counters()
    assert c["retx_nak"] == 1 and c["naks_trimmed"] == 3
    assert c["ev_to_bad"] == 0  # trims are congestion, not path failure
    # other NAK syndromes (but 0x61 and 0x62, test_fatal_naks) are counted and ignored
    tb.ack(0, 1, syndrome=L.NAK_REMOTE_OP, psn=4)
    await tb.settle()
    c2 = await tb.counters()
    assert c2["acks_ignored"] == c["acks_ignored"] + 1 and c2["acks"] == c["acks"]
    assert len(tb.retx.records()) == 1 and await tb.read("qp_ctrl", 0) == 3


@cocotb.test(skip=CONFIG != "rel_q4")
async def test_nak_trimmed_once_per_psn(dut):
    """A second NAK TRIMMED for a PSN already resent by a NAK is refused and counted
    (naks_trim_repeat): one retransmit and one window cut per PSN between timeouts.
    The timer resends it; a NAK of the timeout's copy is honoured again."""
    t = 8
    tb = await _trim_psn_3(dut, t=t, ev_thr=0)
    tb.send(0, 3, ev=4, retx=1, wqe=3)  # TX resends it
    # the resent copy trimmed too (or a forged NAK naming it): refused, twice
    for _ in range(2):
        tb.ack(0, 1, syndrome=L.NAK_TRIMMED, psn=3, bitmap=0b1)
    await tb.settle()
    assert len(tb.retx.records()) == 1
    assert min(r["cwnd"] for r in tb.cwnd_upd.records()) == 18
    c = await tb.counters()
    assert (c["naks_trimmed"], c["retx_nak"], c["naks_trim_repeat"]) == (3, 1, 2), c
    assert c["timeouts"] == 0
    # the timer resends every PSN in flight but the SACKed one, 3 among them
    start = len(tb.retx.items)
    await ClockCycles(dut.clk, (UNIT << t) + 10 * ERROR_BOUND)
    assert [r for _, r in tb.retx.items[start:]] == [
        {"qpn": 0, "psn": p, "reason": 0} for p in (3, 4, 5)]
    for p in (3, 4, 5):
        tb.send(0, p, ev=(p + 2) % 8, retx=1, wqe=p)
    cuts = len(tb.cwnd_upd.records())
    # the timeout's copy of 3 trimmed: a fast retransmit again, and a window cut
    tb.ack(0, 1, syndrome=L.NAK_TRIMMED, psn=3, bitmap=0b1)
    await tb.settle()
    assert tb.retx.records()[-1] == {"qpn": 0, "psn": 3, "reason": 2}
    new_cwnd = [r["cwnd"] for r in tb.cwnd_upd.records()[cuts:]]
    assert new_cwnd and new_cwnd[-1] < tb.cwnd_upd.records()[cuts - 1]["cwnd"], new_cwnd
    c2 = await tb.counters()
    assert (c2["retx_nak"], c2["naks_trim_repeat"], c2["timeouts"]) == (2, 2, 1), c2


@cocotb.test(skip=CONFIG != "rel_q4")
async def test_controller_error_and_reset(dut):
    """ERROR from the controller flushes the WQEs in flight; RESET clears the QP and
    its CQ ring position; RTS starts it again from any PSN."""
    tb = TB(dut)
    await tb.reset()
    await tb.setup(qps=(2,))
    q = 2
    for w in range(3):
        tb.post_wqe(q, w, wr_id=0x900 + w, length=10)
    tb.send(q, 7, ev=0, wqe=0)
    tb.send(q, 8, ev=1, wqe=1, last=0)
    tb.send(q, 9, ev=2, wqe=1)
    tb.send(q, 10, ev=3, wqe=2, last=0)
    tb.ack(q, 7)
    await tb.settle()
    await tb.write("qp_ctrl", 4, q)  # ERROR
    await tb.settle()
    cqes = tb.cqes(q)
    assert [(c["wr_id"], c["status"]) for c in cqes] == [(0x900, 0), (0x901, 5), (0x902, 5)]
    assert tb.qps_upd.records()[-1] == {"qpn": q, "state": 4}
    assert await tb.read("qp_ctrl", q) == 4
    # nothing is tracked in ERROR
    before = (await tb.counters())["sent_dropped"]
    tb.send(q, 11, ev=0, wqe=3)
    await tb.settle()
    assert (await tb.counters())["sent_dropped"] == before + 1
    # RESET, RTS, and a new start: completions from ring slot 0 again
    await tb.write("qp_ctrl", 0, q)
    await tb.write("qp_ctrl", 3, q)
    await tb.settle(50)
    assert await tb.read("qp_ctrl", q) == 3
    tb.ram.write(CQ_BASE + q * QP_MEM, bytes(32 * 4))
    tb.post_wqe(q, 5, wr_id=0xA05, length=20)
    tb.send(q, 5000, ev=4, wqe=5)
    await tb.settle(50)
    assert await tb.read("una_psn", q) == 5000
    tb.ack(q, 5000)
    await tb.settle()
    assert [(c["wr_id"], c["status"], c["byte_len"]) for c in tb.cqes(q)] == [(0xA05, 0, 20)]


async def _first_timeout(tb, q, t, sent_psn):
    """Cycles from the sent record entering the block to the timeout retx request."""
    start = len(tb.retx.items)
    tb.send(q, sent_psn, ev=0)
    while tb.sent.accepted == 0 or tb.sent.queue:
        await RisingEdge(tb.dut.clk)
    t0 = tb.cycle
    while len(tb.retx.items) == start:
        await RisingEdge(tb.dut.clk)
    cycle, rec = tb.retx.items[start]
    assert rec["reason"] == 0 and rec["psn"] == sent_psn
    return cycle - t0


# Detection error bound (docs/reliability.md): the scan visits each QP every num_qps
# cycles, plus the sent record's processing, the report handshake, a record load and
# the FIFO to the retx port.
ERROR_BOUND = P["num_qps"] + 12


@cocotb.test()
async def test_timeout_accuracy(dut):
    """The first timeout fires within the documented error after 1.024 us x 2^t."""
    tb = TB(dut)
    await tb.reset()
    ts = [0, 1, 2, 3, 5] if CONFIG == "rel_q4" else [0, 1, 2]
    await tb.setup(t=0, linear=7, exp=25, ev_thr=0)
    errors = []
    for i, t in enumerate(ts):
        q = i % P["num_qps"]
        await tb.write("qp_rel_cfg", t | 7 << 5 | 25 << 8 | 1 << 16 | 3 << 24, q)
        await tb.write("qp_ctrl", 0, q)
        await tb.write("qp_ctrl", 3, q)
        await ClockCycles(tb.dut.clk, 5)
        tb.sent.accepted = 0
        measured = await _first_timeout(tb, q, t, 1000 * i)
        expected = UNIT << t
        errors.append(measured - expected)
        dut._log.info("t=%d: timeout after %d cycles, nominal %d", t, measured, expected)
        assert 0 <= measured - expected <= ERROR_BOUND, (t, measured, expected)
        await tb.write("qp_ctrl", 0, q)  # stop it
    dut._log.info("detection error (cycles) per t: %s", errors)


@cocotb.test(skip=CONFIG != "rel_q4")
async def test_backoff_and_exhaustion(dut):
    """linear_cnt timeouts at the base, exp_cnt doubling, then ERROR with error CQEs."""
    tb = TB(dut)
    await tb.reset()
    t, linear, exp = 1, 2, 3
    await tb.setup(t=t, linear=linear, exp=exp, ev_thr=0)
    for w in range(3):
        tb.post_wqe(0, w, wr_id=0x77 + w, length=64)
    tb.send(0, 50, ev=1, wqe=0)
    tb.send(0, 51, ev=2, wqe=1)
    tb.send(0, 52, ev=3, wqe=2, last=0)  # WQE 2 partly sent
    while tb.sent.queue:
        await RisingEdge(dut.clk)
    t0 = tb.cycle

    def on_retx(rec):
        # the requester answers each retransmission request on another EV
        tb.send(0, rec["psn"], ev=(rec["psn"] + 4) % 8, retx=1, wqe=0)

    tb.retx.callback = on_retx
    base = UNIT << t
    budget = base * (linear + 1 + 2 + 4 + 8) + 50 * ERROR_BOUND
    await ClockCycles(dut.clk, budget)
    recs = tb.retx.items
    assert all(r["reason"] == 0 for _, r in recs)
    # each timeout retransmits the 3 outstanding PSNs
    rounds = [recs[i][0] for i in range(0, len(recs), 3)]
    assert [r["psn"] for _, r in recs] == [50, 51, 52] * (linear + exp)
    intervals = [b - a for a, b in zip([t0] + rounds[:-1], rounds, strict=True)]
    nominal = [base] * (linear + 1) + [base << k for k in range(1, exp)]
    dut._log.info("timeout intervals %s, nominal %s", intervals, nominal)
    assert len(intervals) == len(nominal)
    for got, want in zip(intervals, nominal, strict=True):
        assert abs(got - want) <= ERROR_BOUND + 3 * 8, (intervals, nominal)
    for want in nominal:
        fcov.sample_backoff((want // base).bit_length() - 1)
    # the (linear + exp + 1)-th timeout, 2^exp base timeouts after the last: ERROR
    err_cycle, err = tb.qps_upd.items[-1]
    assert err == {"qpn": 0, "state": 4}
    assert abs(err_cycle - rounds[-1] - (base << exp)) <= ERROR_BOUND + 3 * 8
    assert await tb.read("qp_ctrl", 0) == 4
    cqes = tb.cqes(0)
    assert [(c["wr_id"], c["status"]) for c in cqes] == [(0x77, 1), (0x78, 5), (0x79, 5)]
    assert all(c["byte_len"] == 0 for c in cqes)
    c = await tb.counters()
    assert c["timeouts"] == linear + exp + 1 and c["retry_exhausted"] == 1
    fcov.sample_backoff(exp)  # the last interval, base << exp, ended in exhaustion
    fcov.sample_backoff("exhausted")
    # nothing more happens to a QP in ERROR
    tb.ack(0, 52)
    await tb.settle()
    assert len(tb.cqes(0)) == 3


@cocotb.test(skip=CONFIG != "rel_q4")
async def test_timeout_blames_the_oldest_psn_only(dut):
    """A timeout is loss evidence against the EV of the oldest PSN in flight, the
    one the timer waited on, and no other: PSNs sent after it may still be on
    their way. Every unSACKed PSN is retransmitted."""
    tb = TB(dut)
    await tb.reset()
    await tb.setup(t=5, linear=7, exp=25, ev_thr=1)  # 512 cycles: one timeout here
    for w in range(4):
        tb.post_wqe(0, w, wr_id=0x90 + w, length=64)
    for k, ev in enumerate((2, 4, 6, 7)):
        tb.send(0, 60 + k, ev=ev, wqe=k)
    await tb.settle(20)
    tb.ack(0, 59, bitmap=0b1000)  # PSN 63 (EV 7) SACKed: not in the walk
    while len(tb.retx.items) < 3:
        await RisingEdge(dut.clk)
    await tb.settle(50)
    assert [(r["psn"], r["reason"]) for _, r in tb.retx.items] == [(60, 0), (61, 0), (62, 0)]
    assert tb.ev_upd.records() == [{"qpn": 0, "ev_index": 2, "state": 1}]
    assert (await pop_events(tb)) == [dict(qpn=0, ev=2, old=0, new=1, drops=1)]
    for ev in (4, 6, 7):
        assert await tb.read("ev", ev) >> 16 & 3 == 0, ev
    c = await tb.counters()
    assert c["timeouts"] == 1 and c["ev_to_bad"] == 1 and c["retx_timeout"] == 3


@cocotb.test(skip=CONFIG != "rel_q4")
async def test_error_flushes_posted_wqes(dut):
    """Retry exhaustion completes every WQE the host has posted (the doorbell's
    producer index), not only those TX has begun: RETRY_EXCEEDED for the oldest,
    FLUSHED for the rest in ring order, including WQEs TX never fetched. The
    oldest unacknowledged PSN does not move (no ack_update that would reopen
    TX's window). The controller's ERROR does the same for a QP that has sent
    nothing since RTS, from the producer index at RTS."""
    tb = TB(dut)
    await tb.reset()
    q, t, linear, exp = 1, 0, 1, 1
    await tb.setup(t=t, linear=linear, exp=exp, ev_thr=0, qps=(q,))
    first = 0xFFFE  # the 16-bit WQE index wraps during the flush
    tb.doorbell(q, first)  # WQEs posted and completed before this test
    await tb.write("qp_ctrl", 0, q)
    await tb.write("qp_ctrl", 3, q)  # RTS again: completions start at producer `first`
    await tb.settle(20)
    for w in range(6):
        tb.post_wqe(q, first + w, wr_id=0x500 + w, length=4096, imm=w, opcode=1)
    tb.doorbell(q, first + 6)
    tb.send(q, 900, ev=0, wqe=first, last=0)  # WQE 0 part sent, 1..5 not begun
    await tb.settle(20)
    upd_before = len(tb.ack_upd.items)
    tb.retx.callback = lambda rec: tb.send(q, rec["psn"], ev=1, retx=1, wqe=first)
    await ClockCycles(dut.clk, (UNIT << t) * (linear + 1 + 2 + 4) + 20 * ERROR_BOUND)
    assert tb.qps_upd.records()[-1] == {"qpn": q, "state": 4}
    cqes = tb.cqes(q)
    assert [(c["wr_id"], c["status"], c["byte_len"], c["imm"], c["qpn"]) for c in cqes] == [
        (0x500 + w, 1 if w == 0 else 5, 0, w, q) for w in range(6)]
    assert len(tb.ack_upd.items) == upd_before, tb.ack_upd.items[upd_before:]
    assert await tb.read("una_psn", q) == 900
    # a QP that sent nothing since RTS: the controller's ERROR flushes what was posted
    q2 = 3
    await tb.setup(qps=(q2,))
    tb.doorbell(q2, 40)
    await tb.write("qp_ctrl", 0, q2)
    await tb.write("qp_ctrl", 3, q2)
    await tb.settle(20)
    for w in range(3):
        tb.post_wqe(q2, 40 + w, wr_id=0x600 + w, length=10)
    tb.doorbell(q2, 43)
    await tb.settle(20)
    await tb.write("qp_ctrl", 4, q2)
    await tb.settle()
    assert [(c["wr_id"], c["status"]) for c in tb.cqes(q2)] == [(0x600 + w, 5) for w in range(3)]
    c = await tb.counters()
    assert c["cqes"] == 9 and c["retry_exhausted"] == 1


@cocotb.test(skip=CONFIG != "rel_q4")
async def test_requester_corner_cases(dut):
    """Send completions as verbs: a CQE on success only for a signaled WQE (its
    ring index at 0x18); a WQE TX refused (a sent record with op_err) completes
    LOC_QP_OP_ERR once the WQEs before it have (at once when nothing is in
    flight), every later posted WQE FLUSHED, and the QP goes to ERROR; a
    doorbell while in ERROR completes the WQEs posted since FLUSHED; after
    RESET such a flush starts at the producer index of the reset."""
    tb = TB(dut)
    await tb.reset()
    q, q2 = 2, 3
    await tb.setup(qps=(q, q2), sack_thr=0)
    S, E, F = 0, 2, 5  # SUCCESS, LOC_QP_OP_ERR, FLUSHED
    # signaled: WQE 0 no (1 packet), 1 yes (2 packets), 2 no
    for w, (n, sig) in enumerate([(100, False), (2000, True), (100, False)]):
        tb.post_wqe(q, w, wr_id=0x700 + w, length=n, signaled=sig)
    tb.doorbell(q, 3)
    for psn, wqe, last in ((100, 0, 1), (101, 1, 0), (102, 1, 1), (103, 2, 1)):
        tb.send(q, psn, ev=psn % 8, last=last, wqe=wqe)
    await tb.settle(50)
    tb.ack(q, 103)
    await tb.settle()

    def got(qq, start=0):
        return [(c["wr_id"], c["status"], c["byte_len"], c["wqe_index"])
                for c in tb.cqes(qq)[start:]]

    assert got(q) == [(0x701, S, 2000, 1)]
    assert (await tb.counters())["cqes"] == 1
    # WQE 3 in flight, WQE 4 refused, WQE 5 posted: 4 waits for 3's ACK
    tb.post_wqe(q, 3, wr_id=0x703, length=100)
    tb.post_wqe(q, 4, wr_id=0x704, length=100, opcode=0x07, signaled=False)
    tb.post_wqe(q, 5, wr_id=0x705, length=100)
    tb.doorbell(q, 6)
    tb.send(q, 104, ev=0, wqe=3)
    tb.refuse(q, 4)
    await tb.settle()
    assert got(q) == [(0x701, S, 2000, 1)]
    assert await tb.read("qp_ctrl", q) == 3
    tb.ack(q, 104)
    await tb.settle()
    assert got(q) == [(0x701, S, 2000, 1), (0x703, S, 100, 3), (0x704, E, 0, 4),
                      (0x705, F, 0, 5)]
    assert await tb.read("qp_ctrl", q) == 4
    assert tb.qps_upd.records()[-1] == {"qpn": q, "state": 4}
    # posted while in ERROR: FLUSHED on the doorbell
    for w in (6, 7):
        tb.post_wqe(q, w, wr_id=0x700 + w, length=10)
    tb.doorbell(q, 8)
    await tb.settle()
    assert got(q, 4) == [(0x706, F, 0, 6), (0x707, F, 0, 7)]
    # RESET (the CQ ring restarts at 0), INIT, ERROR from INIT (no flush), then a
    # doorbell: the WQEs posted since the reset's producer index (8) are flushed
    await tb.write("qp_ctrl", 0, q)
    await tb.settle(20)
    for w in (8, 9):
        tb.post_wqe(q, w, wr_id=0x700 + w, length=10)
    await tb.write("qp_ctrl", 1, q)
    await tb.write("qp_ctrl", 4, q)
    tb.doorbell(q, 10)
    await tb.settle()
    assert got(q)[:2] == [(0x708, F, 0, 8), (0x709, F, 0, 9)]
    # a refused WQE with nothing in flight (the QP's first since RTS) completes at once
    tb.post_wqe(q2, 0, wr_id=0x800, length=10, opcode=0x07)
    tb.post_wqe(q2, 1, wr_id=0x801, length=10)
    tb.doorbell(q2, 2)
    tb.refuse(q2, 0)
    await tb.settle()
    assert got(q2) == [(0x800, E, 0, 0), (0x801, F, 0, 1)]
    assert await tb.read("qp_ctrl", q2) == 4
    c = await tb.counters()
    assert c["cqes"] == 1 + 3 + 2 + 2 + 2 and c["sent_dropped"] == 0, c


@cocotb.test(skip=CONFIG != "rel_q4")
async def test_fatal_naks(dut):
    """NAK 0x62 (remote access error) and 0x61 (invalid request) as verbs
    (docs/reliability.md): what the NAK's cumulative PSN acknowledges completes
    SUCCESS; the oldest WQE left completes with the error (status REM_ACCESS 10,
    REM_INV_REQ 9), every later posted WQE FLUSHED, begun by TX or not; the QP
    goes to ERROR with no ack_update; counted naks_fatal. A NAK after that is
    ignored."""
    tb = TB(dut)
    await tb.reset()
    for q, syndrome, status in ((1, L.NAK_REMOTE_ACCESS, 10), (2, L.NAK_INVALID_REQUEST, 9)):
        await tb.setup(qps=(q,))
        for w in range(4):
            tb.post_wqe(q, w, wr_id=0x700 + w, length=2048)
        tb.doorbell(q, 4)
        # WQE 0 = PSN 0..1, WQE 1 = PSN 2..3, WQE 2 = PSN 4 (sent), WQE 3 not begun
        for psn, wqe, last in ((0, 0, 0), (1, 0, 1), (2, 1, 0), (3, 1, 1), (4, 2, 1)):
            tb.send(q, psn, ev=psn, wqe=wqe, last=last)
        await tb.settle(20)
        before = await tb.counters()
        upd_before = len(tb.ack_upd.items)
        tb.ack(q, 1, syndrome=syndrome, psn=2, bitmap=0b100)  # 0, 1 and 4 in; 2 refused
        await tb.settle()
        assert tb.qps_upd.records()[-1] == {"qpn": q, "state": 4}
        assert await tb.read("qp_ctrl", q) == 4
        assert [(c["wr_id"], c["status"]) for c in tb.cqes(q)] == [
            (0x700, 0), (0x701, status), (0x702, 5), (0x703, 5)]
        assert len(tb.ack_upd.items) == upd_before, tb.ack_upd.items[upd_before:]
        c = await tb.counters()
        assert c["naks_fatal"] == before["naks_fatal"] + 1
        assert c["retry_exhausted"] == 0 and c["cqes"] == before["cqes"] + 4
        tb.ack(q, 3, syndrome=syndrome, psn=3)
        await tb.settle()
        c2 = await tb.counters()
        assert c2["acks_ignored"] == c["acks_ignored"] + 1 and c2["naks_fatal"] == c["naks_fatal"]
        assert len(tb.cqes(q)) == 4


async def _lose_on(tb, q, ev, psn, thr=1):
    """Send psn on ev and psn+1 on another EV, SACK only psn+1: psn is lost (threshold 1)."""
    tb.send(q, psn, ev=ev, wqe=psn)
    tb.send(q, psn + 1, ev=(ev + 1) % 8, wqe=psn + 1)
    await tb.settle(20)
    tb.ack(q, psn - 1, bitmap=0b10)
    await tb.settle(50)
    tb.send(q, psn, ev=(ev + 2) % 8, retx=1, wqe=psn)  # TX resends it on another EV
    tb.ack(q, psn + 1)
    await tb.settle(50)




@cocotb.test(skip=CONFIG != "rel_q4")
async def test_ev_bad_and_probe(dut):
    """Losses make an EV ASSUMED_BAD; it is probed every period; an answer restores it."""
    tb = TB(dut)
    await tb.reset()
    period = 400
    await tb.setup(sack_thr=1, ev_thr=2, probe_period=period)
    # EV 5 DENIED by the controller: never probed
    await tb.write("ev", (1 << 31) | (2 << 16) | ev_value(0, 5), 5)
    await tb.settle(20)
    assert tb.ev_upd.records() == [{"qpn": 0, "ev_index": 5, "state": 2}]
    assert (await pop_events(tb)) == [dict(qpn=0, ev=5, old=0, new=2, drops=0)]
    tb.ev_upd.items.clear()
    psn = 10
    await _lose_on(tb, 0, 3, psn)  # first loss on EV 3
    assert tb.ev_upd.records() == []
    # a delivery on EV 3 in between resets its loss run
    tb.send(0, psn + 2, ev=3, wqe=0)
    tb.ack(0, psn + 2)
    await tb.settle()
    await _lose_on(tb, 0, 3, psn + 3)
    assert tb.ev_upd.records() == []
    await _lose_on(tb, 0, 3, psn + 5)  # second loss in a row: bad
    assert tb.ev_upd.records() == [{"qpn": 0, "ev_index": 3, "state": 1}]
    assert dut.irq.value == 1
    events = await pop_events(tb)
    assert events == [dict(qpn=0, ev=3, old=0, new=1, drops=3)]
    assert await tb.read("ev", 3) >> 16 & 3 == 1
    # probes: one per period, on EV 3 only, well formed
    frames = []
    for _ in range(2):
        frame = await tb.probe_sink.recv()
        frames.append(bytes(frame.tdata))
    for raw in frames:
        assert len(raw) == 74
        assert L.check_frame(raw) == (True, True)
        pkt = Ether(raw)
        assert pkt.src == OWN_MAC and pkt.dst == PEER_MAC
        assert pkt[IP].src == OWN_IP and pkt[IP].dst == PEER_IP and pkt[IP].tos == 2
        assert pkt[UDP].sport == ev_value(0, 3) and pkt[UDP].dport == 4791
        bth = pkt[L.BTH]
        assert bth.opcode == L.OP_PROBE_REQ and bth.dqpn == 0x100 and bth.psn == 0
        assert pkt[L.MRCProbe].ev == ev_value(0, 3)
    ts = [Ether(r)[L.MRCProbe].timestamp for r in frames]
    ns_per_cycle = round(1e9 / P["clk_freq_hz"])
    assert abs((ts[1] - ts[0]) - period * ns_per_cycle) <= 40 * ns_per_cycle
    # an answer to the outstanding probe naming another EV value is ignored
    # (an answer to an older round would not reach the core: ProbeReplyCheck,
    # tests/unit/test_rel_probe_check.py)
    bogus = tb.probe_answer(frames[-1])
    bogus["probe"]["ev"] ^= 1
    tb.acks.send(bogus)
    await tb.settle()
    assert len(tb.ev_upd.records()) == 1
    tb.acks.send(tb.probe_answer(frames[-1]))
    await tb.settle()
    assert tb.ev_upd.records()[-1] == {"qpn": 0, "ev_index": 3, "state": 0}
    events = await pop_events(tb)
    assert events == [dict(qpn=0, ev=3, old=1, new=0, drops=3)]
    # no more probes once every EV is GOOD
    tb.probe_sink.clear()
    await ClockCycles(dut.clk, 3 * period)
    assert tb.probe_sink.empty()
    c = await tb.counters()
    assert c["ev_to_bad"] == 1 and c["ev_to_good"] == 1 and c["probe_resps"] == 2


@cocotb.test(skip=CONFIG != "rel_q4")
async def test_ev_min_active_and_denied(dut):
    """The floor keeps ev_min_active GOOD EVs; DENIED is the controller's alone."""
    tb = TB(dut)
    await tb.reset()
    await tb.setup(sack_thr=1, ev_thr=1, min_active=5)
    # the controller denies EV 7: GOOD -> DENIED, counted as not GOOD for the floor
    await tb.write("ev", (1 << 31) | (2 << 16) | ev_value(0, 7), 7)
    await tb.settle(20)
    assert tb.ev_upd.records() == [{"qpn": 0, "ev_index": 7, "state": 2}]
    psn = 0
    for ev in range(5):  # 7 GOOD; losses on EVs 0..4, the floor lets 2 go bad
        await _lose_on(tb, 0, ev, psn + 1)
        psn += 2
    bad = [r["ev_index"] for r in tb.ev_upd.records() if r["state"] == 1]
    assert bad == [0, 1]
    c = await tb.counters()
    assert c["floor_blocked"] == 3
    # losses on the DENIED EV change nothing
    await _lose_on(tb, 0, 7, psn + 1)
    assert len(tb.ev_upd.records()) == 3
    states = [(await tb.read("ev", e)) >> 16 & 3 for e in range(8)]
    assert states == [1, 1, 0, 0, 0, 0, 0, 2]
    # release: DENIED -> GOOD by the controller
    await tb.write("ev", (1 << 31) | ev_value(0, 7), 7)
    await tb.settle(20)
    assert tb.ev_upd.records()[-1] == {"qpn": 0, "ev_index": 7, "state": 0}
    events = await pop_events(tb)
    assert [(e["ev"], e["old"], e["new"]) for e in events] == [
        (7, 0, 2), (0, 0, 1), (1, 0, 1), (7, 2, 0)]
    # the controller denies an ASSUMED_BAD EV: ASSUMED_BAD -> DENIED
    await tb.write("ev", (1 << 31) | (2 << 16) | ev_value(0, 0), 0)
    await tb.settle(20)
    assert tb.ev_upd.records()[-1] == {"qpn": 0, "ev_index": 0, "state": 2}
    assert [(e["ev"], e["old"], e["new"]) for e in await pop_events(tb)] == [(0, 1, 2)]
    assert (await tb.read("ev", 0)) >> 16 & 3 == 2


@cocotb.test(skip=CONFIG != "rel_q4")
async def test_cwnd_ecn(dut):
    """ECN echo with a high RTT halves the window once per window; clean ACKs grow it back."""
    tb = TB(dut)
    await tb.reset()
    await tb.setup(cwnd_init=32, cwnd_md_shift=1, target_rtt=0, cwnd_ai=256 * 8,
                   cwnd_ai_fast=256 * 8)
    psn = 0
    cwnds = []

    async def round_trip(ece, n=8):
        nonlocal psn
        for _ in range(n):
            tb.send(0, psn, ev=psn % 8, wqe=psn)
            psn += 1
        await tb.settle(30)
        for k in range(n // 4):
            tb.ack(0, psn - n + 4 * k + 3, ece=ece)
        await tb.settle(60)
        cwnds.append((await tb.read("qp_cc", 0)) & 0xFFFF)

    await round_trip(1)
    assert cwnds[-1] == 16  # one decrease per window, though two ACKs were marked
    await round_trip(1)
    assert cwnds[-1] == 8  # the next window: decreased again
    for _ in range(4):
        await round_trip(0)
    assert cwnds[2:] == sorted(cwnds[2:]) and cwnds[-1] > 8
    updates = [r["cwnd"] for r in tb.cwnd_upd.records()]
    assert updates[:3] == [32, 16, 8]  # RTS, then one cut per window
    assert updates[3:] == list(range(9, cwnds[-1] + 1))  # +1 packet at a time
    c = await tb.counters()
    assert c["retx_timeout"] == c["retx_sack"] == 0


@cocotb.test(skip=CONFIG != "rel_q4")
async def test_cwnd_ecn_reset_target(dut):
    """With ``target_rtt`` as reset, an ECN echo reacts: its RTT sample below NSCC's
    target at the default base RTT holds the window, one at or above it cuts it."""
    tb = TB(dut)
    await tb.reset()
    await tb.setup(cwnd_init=32)  # room to cut; every other CC register as reset
    target = await tb.read("target_rtt")
    assert target < 0xFFFF

    async def marked_round_trip(first, rtt_units):
        for k in range(4):
            tb.send(0, first + k, ev=k, wqe=first + k)
        await tb.sent.drain()
        await ClockCycles(dut.clk, rtt_units * 16)
        tb.ack(0, first + 3, ece=1)
        await tb.settle(60)
        return (await tb.read("qp_cc", 0)) & 0xFFFF

    assert await marked_round_trip(0, target // 2) == 32  # below the target: hold
    assert await marked_round_trip(4, target + 2) == 16  # at/above it: cut in half


@cocotb.test(skip=CONFIG != "rel_q4")
async def test_cwnd_ecn_without_a_sample(dut):
    """An ACK that delivers no PSN of first transmission carries no RTT sample: its
    ECN echo is judged by the QP's last verdict (``delay_high``), not by the time
    since the last sample. Here the last sample was low, so a duplicate ACK with
    ECE long after it holds the window; a fresh sample at or above the target then
    cuts it."""
    tb = TB(dut)
    await tb.reset()
    await tb.setup(cwnd_init=32)
    target = await tb.read("target_rtt")
    for k in range(4):
        tb.send(0, k, ev=k, wqe=k)
    await tb.sent.drain()
    await ClockCycles(dut.clk, target // 2 * 16)
    tb.ack(0, 3, ece=0)  # a sample below the target: delay_high = 0
    await tb.settle(60)
    window = (await tb.read("qp_cc", 0)) & 0xFFFF
    await ClockCycles(dut.clk, (target + 2) * 16)
    tb.ack(0, 3, ece=1)  # the same cumulative PSN again: no sample
    await tb.settle(60)
    assert (await tb.read("qp_cc", 0)) & 0xFFFF == window
    for k in range(4, 8):
        tb.send(0, k, ev=k % 4, wqe=k)
    await tb.sent.drain()
    await ClockCycles(dut.clk, (target + 2) * 16)
    tb.ack(0, 7, ece=1)  # a sample at or above the target, with ECE: cut
    await tb.settle(60)
    assert (await tb.read("qp_cc", 0)) & 0xFFFF == window - window // 2


@cocotb.test(skip=CONFIG != "rel_q4")
async def test_cwnd_duplicate_acks_do_not_grow_it(dut):
    """The window grows by the PSNs an ACK newly acknowledges, so ACKs that repeat
    the cumulative PSN (no PSN new) leave it as it is, however many."""
    tb = TB(dut)
    await tb.reset()
    await tb.setup(cwnd_init=32, cwnd_ai_fast=256 * 4)  # +1 packet per 8 newly acked
    for k in range(4):
        tb.send(0, k, ev=k, wqe=k)
    await tb.sent.drain()
    tb.ack(0, 3)
    await tb.settle(60)
    window = (await tb.read("qp_cc", 0)) & 0xFFFF
    for _ in range(24):
        tb.ack(0, 3)
    await tb.settle(400)
    assert (await tb.read("qp_cc", 0)) & 0xFFFF == window
    assert [r["cwnd"] for r in tb.cwnd_upd.records()][-1] == window


@cocotb.test(skip=CONFIG != "rel_q4")
async def test_nscc_window(dut):
    """NSCC on (``nscc_ctrl.enabled``, written before RTS): the windows TX gets are
    NSCC's in packets of ``mtu_wire``, not the packet window's. RTS starts the QP at
    ``max_cwnd``; ECN-marked ACKs with an RTT far above the target cut it (at most
    once per base RTT); unmarked ACKs below the target grow it back to
    ``max_cwnd``; a NAK TRIMMED takes one packet off (then its ACK step); a
    timeout halves it. Each window is checked against the golden model's NSCC run
    on the steps the test made, with the RTT the test measured (within a unit of
    the core's sample): within one packet."""
    tb = TB(dut)
    await tb.reset()
    unit_ns = 16e9 / P["clk_freq_hz"]
    mtu_wire = 1024 + DATA_WIRE_OVERHEAD
    values = nscc_register_values(clk_freq_hz=P["clk_freq_hz"], mtu_wire=mtu_wire,
                                  rate_bps=1e9, base_rtt_ns=20 * unit_ns,
                                  max_cwnd=24 * mtu_wire + 100)
    await tb.setup(cwnd_init=32, **nscc_register_words(values))
    params = NsccParams(**nscc_params({f: v for word in values.values() for f, v in word.items()},
                                      unit_ns, mtu_wire))
    model = Nscc(params, mtu_wire)
    await tb.settle(80)
    assert [r["cwnd"] for r in tb.cwnd_upd.records()] == [24]  # START: max_cwnd, not 32
    expect = [(model.cwnd, "start")]
    psn = 0

    async def round_trip(rtt_units, ece=0, trim=False):
        nonlocal psn
        first = psn
        start = nominal_ns()
        for k in range(8):
            tb.send(0, psn, ev=k, wqe=psn)
            psn += 1
        await tb.sent.drain()
        await ClockCycles(dut.clk, rtt_units * 16)
        for k in (3, 7):
            if trim and k == 7:  # a NAK TRIMMED of PSN 5 first: nothing new, no sample
                tb.ack(0, first + 3, syndrome=L.NAK_TRIMMED, psn=first + 5)
                await tb.settle(80)
                model.on_trim(nominal_ns(), mtu_wire)
                expect.append((model.cwnd, "trim"))
                model.on_ack(nominal_ns(), 0, False, None)
                expect.append((model.cwnd, "trim's ack step"))
            now = nominal_ns()
            tb.ack(0, first + k, ece=ece)
            await tb.settle(80)
            model.on_ack(now, 4 * mtu_wire, bool(ece), now - start)
            expect.append((model.cwnd, f"ack, rtt {rtt_units} units, ece {ece}"))

    for _ in range(2):
        await round_trip(60, ece=1)  # delay 40 units, far above the 15 of the target
    for _ in range(6):
        await round_trip(4)  # below the base RTT: no queueing delay
    await round_trip(4, trim=True)
    got = [r["cwnd"] for r in tb.cwnd_upd.records()]
    assert len(got) == len(expect), (got, expect)
    for (window, what), packets in zip(expect, got, strict=True):
        assert abs(packets - window // mtu_wire) <= 1, (
            what, packets, window / mtu_wire, got, [(w / mtu_wire, x) for w, x in expect])
    assert min(got) <= 12 and got[-5] == 24  # cut by half, back at max_cwnd before the trim
    assert got[-3] == got[-4] - 1  # the trim: one packet off
    # a timeout halves it (the requester does not answer: ACK timeout 2^2 units)
    await tb.write("qp_rel_cfg", 2 | 2 << 5 | 1 << 16 | 3 << 24, 0)
    before = got[-1]
    tb.send(0, psn, ev=0, wqe=psn)
    await tb.settle(16 * UNIT)
    assert tb.cwnd_upd.records()[len(got)]["cwnd"] == max(1, before // 2), tb.cwnd_upd.records()
    assert (await tb.counters())["timeouts"] >= 1


async def lossless_run(dut, packets, seed=1):
    """A lossless, unmarked fabric: no retransmission, every WQE completes, no shrink."""
    rng = seeds.rng(seed)

    def bp():
        def gen():
            while True:
                yield rng.random() < 0.2
        return gen()

    tb = TB(dut, backpressure=bp)
    await tb.reset()
    qps = (0, 1, 2)
    await tb.setup(qps=qps, t=6, sack_thr=3, cwnd_init=16, cwnd_ai=64, cwnd_ai_fast=64)
    state = {q: dict(nxt=0, una=0, wqe=0, left=0, ev=0, cwnd=16, acked=0) for q in qps}
    for q in qps:
        for w in range(1 << RING_LOG2):
            tb.post_wqe(q, w, wr_id=(q << 32) | w, length=64)

    def on_cwnd(rec):
        state[rec["qpn"]]["cwnd"] = rec["cwnd"]

    def on_una(rec):
        state[rec["qpn"]]["una"] = rec["una_psn"]

    tb.cwnd_upd.callback = on_cwnd
    tb.ack_upd.callback = on_una
    in_flight = deque()  # (q, psn) in delivery order
    sent_total = 0
    done_cycles = 0
    while sent_total < packets or in_flight:
        q = rng.choice(qps)
        s = state[q]
        if sent_total < packets and s["nxt"] - s["una"] < s["cwnd"] and len(tb.sent.queue) < 4:
            if s["left"] == 0:
                s["left"] = rng.choice([1, 1, 2, 4])
            s["left"] -= 1
            tb.send(q, s["nxt"], ev=s["ev"] % 8, last=int(s["left"] == 0), wqe=s["wqe"])
            if s["left"] == 0:
                s["wqe"] += 1
            s["ev"] += 1
            in_flight.append((q, s["nxt"]))
            s["nxt"] += 1
            sent_total += 1
        # the responder acks every 4 packets, or whatever is in flight when idle
        if len(in_flight) >= 4 or (sent_total >= packets and in_flight) or rng.random() < 0.05:
            acked = {}
            for _ in range(min(4, len(in_flight))):
                aq, apsn = in_flight.popleft()
                acked[aq] = apsn
            await ClockCycles(dut.clk, rng.randint(20, 60))
            for aq, apsn in acked.items():
                tb.ack(aq, apsn)
        await ClockCycles(dut.clk, rng.randint(1, 8))
        done_cycles += 1
    await tb.settle(500)
    assert tb.retx.records() == [], tb.retx.records()[:5]
    cw = [r["cwnd"] for r in tb.cwnd_upd.records()]
    for q in qps:
        seq = [r["cwnd"] for r in tb.cwnd_upd.records() if r["qpn"] == q]
        assert seq == sorted(seq), f"QP {q} window shrank: {seq}"
        assert seq[0] == 16 and seq[-1] > 16, seq  # cwnd_init, then growth
        s = state[q]
        assert await tb.read("una_psn", q) == s["nxt"]
        # every WQE completed, in order, SUCCESS: slot i of the 64-entry ring holds the
        # last CQE k with k mod 64 = i, phase 1 on even passes of the ring
        n = s["wqe"]
        ring = 1 << RING_LOG2
        for i in range(min(n, ring)):
            k = max(k for k in range(i, n, ring))
            raw = tb.ram.read(CQ_BASE + q * QP_MEM + 32 * i, 32)
            assert int.from_bytes(raw[0:8], "little") == (q << 32) | i, (q, i, k)
            assert raw[0x14] == 0 and raw[0x17] >> 7 == ((k // ring) & 1 == 0), (q, i, k)
    c = await tb.counters()
    assert c["timeouts"] == 0 and c["acks_unsent"] == 0
    assert c["cqes"] == sum(state[q]["wqe"] for q in qps)
    dut._log.info("lossless: %d packets, %d ACKs, window updates %d", packets, c["acks"],
                  len(cw))


@cocotb.test(skip=CONFIG != "rel_q4")
async def test_lossless(dut):
    await lossless_run(dut, int(os.environ.get("REL_LOSSLESS_PACKETS", "10000")),
                       seed=int(os.environ.get("REL_LOSSLESS_SEED", "1")))


# ---------------------------------------------------------------------------
# Against the golden model (sim/model): the model's requester QP picks the EVs and
# sends; the same ACK sequence goes to the model and to the block; the PSNs they
# retransmit, and the EV transitions, must be the same.


# ---------------------------------------------------------------------------
# sim/bench/rel.py: ACK processing rate and timeout error (not part of the regression)


@cocotb.test(skip=not os.environ.get("REL_BENCH_OUT"))
async def bench_ack_rate(dut):
    import json

    tb = TB(dut)
    await tb.reset()
    await tb.setup(qps=(0, 1, 2), t=20, sack_thr=1, ev_thr=0)
    cases = []

    async def measure(name, q, packets, acks):
        # 16-packet WQEs, so that the CQE writes (about 12 cycles each against the
        # AxiRam) do not set the pace
        for psn in range(packets):
            tb.send(q, psn, ev=psn % 8, last=int(psn % 16 == 15), wqe=psn // 16)
        await tb.settle(20)
        start = len(tb.acks.accept_cycles)
        for ack in acks:
            tb.ack(q, *ack)
        await tb.settle(200)
        cyc = tb.acks.accept_cycles[start:]
        # n ACKs: the intervals between n + 1 accepts (the engine takes the next ACK
        # the cycle after it finishes the previous one)
        cases.append(dict(name=name, acks=len(cyc) - 1, cycles=cyc[-1] - cyc[0]))

    await measure("cumulative, 1 PSN each", 0, 60, [(p,) for p in range(60)])
    await measure("cumulative, 4 PSNs each", 1, 60, [(4 * k + 3,) for k in range(15)])
    # ACK k: cumulative to 4k-1, SACKs 4k+1..4k+3: 4 PSNs acknowledged, 3 SACKed,
    # the hole at 4k retransmitted
    await measure("SACK, 3 PSNs past a hole (1 retransmit each)", 2, 60,
                  [(4 * k - 1, 0b1110) for k in range(15)])
    assert len(tb.retx.records()) == 15
    # 200 ACKs back to back (60 new, then 140 repeats of the last: each an event for
    # the window), on QP 3 with NSCC off, then again with UET NSCC on (its reset
    # parameters, selected before QP 3 enters RTS again): each ACK is then also an
    # NsccEngine step, one per 32 cycles once the core's 16-event FIFO is full
    long = [(p,) for p in range(60)] + [(59,)] * 140
    await tb.setup(qps=(3,), t=20, sack_thr=1, ev_thr=0)
    await measure("200 ACKs: 60 of 1 new PSN, 140 repeats", 3, 60, long)
    words = nscc_register_words(nscc_reset_values(P["clk_freq_hz"], 64, 4096,
                                                  DEFAULT_BASE_RTT_NS))
    words["nscc_ctrl"] |= 1
    await tb.write("qp_ctrl", 0, 3)
    await tb.setup(qps=(3,), t=20, sack_thr=1, ev_thr=0, **words)
    await measure("the same 200, UET NSCC on", 3, 60, long)
    await tb.write("nscc_ctrl", words["nscc_ctrl"] & ~1)
    timeouts = []
    rng = seeds.rng(3)
    for t in range(5):
        got = []
        for trial in range(6):
            q = 3
            await tb.write("qp_rel_cfg", t | 7 << 5 | 25 << 8 | 1 << 16, q)
            await tb.write("qp_ctrl", 0, q)
            await tb.write("qp_ctrl", 3, q)
            await ClockCycles(dut.clk, rng.randint(1, 40))
            tb.sent.accepted = 0
            got.append(await _first_timeout(tb, q, t, 100 * trial))
            await tb.write("qp_ctrl", 0, q)
        timeouts.append(dict(t=t, nominal=UNIT << t, min=min(got), max=max(got)))
    with open(os.environ["REL_BENCH_OUT"], "w") as f:
        json.dump(dict(ack_rate=cases, timeouts=timeouts, unit=UNIT), f)


# ---------------------------------------------------------------------------




def test_reliability():
    run("rel_q4")


def test_reliability_125mhz():
    run("rel_125m", testcase="test_timeout_accuracy")


@pytest.mark.long
def test_reliability_lossless_soak():
    run("rel_q4", testcase="test_lossless",
        extra_env={"REL_LOSSLESS_PACKETS": "50000", "REL_LOSSLESS_SEED": "2"})

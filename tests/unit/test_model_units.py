"""PSN arithmetic, EV tables and the spraying policy, the NSCC window."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.model import ASSUMED_BAD, DENIED, GOOD, EvTable, explicit_evs, generated_evs
from sim.model.cc import Nscc, NsccParams
from sim.model.packet import PSN_MASK, data_wire_len, psn_add, psn_diff
from sim.model.qp import QpConfig

psn = st.integers(0, PSN_MASK)


@settings(max_examples=200, deadline=None)
@given(a=psn, n=st.integers(-(1 << 23), (1 << 23) - 1))
def test_psn_add_diff_inverse(a, n):
    assert psn_diff(psn_add(a, n), a) == n
    assert psn_diff(a, psn_add(a, n)) == (-n if n != -(1 << 23) else -(1 << 23))


def test_psn_wrap():
    assert psn_diff(0, PSN_MASK) == 1
    assert psn_diff(PSN_MASK, 0) == -1
    assert psn_add(PSN_MASK, 1) == 0


def test_wire_sizes_match_protocol_md():
    # 4096 payload: 74 B of headers + ICRC, 24 B of FCS/preamble/IFG
    assert data_wire_len(4096, False) == 4096 + 98
    assert data_wire_len(4096, True) == 4096 + 102
    assert data_wire_len(1, False) == 4 + 98  # padded to 4


def test_timeout_schedule():
    cfg = QpConfig(rto_exp=8, linear_cnt=7, exp_cnt=7)
    base = 1.024e3 * 256
    assert [cfg.timeout_ns(r) for r in range(10)] == pytest.approx(
        [base] * 8 + [2 * base, 4 * base])
    assert QpConfig(rto_exp=24).timeout_ns(30) == pytest.approx(1024 * 2**24)
    assert QpConfig(exp_cnt=25).retry_limit() is None


@settings(max_examples=50, deadline=None)
@given(init=st.integers(0, 0xFFFF), lo=st.integers(0, 0x8000), count=st.integers(1, 64),
       planes=st.integers(1, 8))
def test_generated_evs(init, lo, count, planes):
    evs = generated_evs(init=init, min_ev=lo, max_ev=0xFFFF, count=count, planes=planes)
    values = [v for v, _ in evs]
    assert len(set(values)) == count
    assert all(lo <= v <= 0xFFFF for v in values)
    assert [p for _, p in evs] == [i % planes for i in range(count)]


def test_generated_mask_limits_the_set():
    with pytest.raises(ValueError):
        generated_evs(init=0, min_ev=0xC000, mask=0x3, count=5)
    evs = generated_evs(init=0, min_ev=0xC000, mask=0x3, count=4)
    assert sorted(v for v, _ in evs) == [0xC000, 0xC001, 0xC002, 0xC003]


@settings(max_examples=50, deadline=None)
@given(n=st.integers(1, 16), rounds=st.integers(1, 20), bad=st.sets(st.integers(0, 15)))
def test_spraying_even_over_good(n, rounds, bad):
    table = EvTable(explicit_evs(range(n)), 1, min_active=0, bad_threshold=1)
    for i in sorted(bad):
        if i < n:
            table.loss(table.evs[i])
    good = [ev for ev in table.evs if ev.state == GOOD]
    picks = [table.pick(0) for _ in range(rounds * len(good))]
    if not good:
        assert picks == []
        assert table.pick(0) is None
        return
    for ev in good:
        assert picks.count(ev) == rounds
    assert all(p.state == GOOD for p in picks)


def test_pick_avoids_the_lost_ev():
    table = EvTable(explicit_evs(range(4)), 1)
    for _ in range(8):
        first = table.pick(0)
        assert table.pick(0, avoid=first) is not first
    single = EvTable(explicit_evs([5]), 1)
    only = single.pick(0)
    assert single.pick(0, avoid=only) is only  # nothing else to use


def test_planes_are_separate():
    table = EvTable(explicit_evs(range(6), planes=2), 2)
    assert {table.pick(0).plane for _ in range(6)} == {0}
    assert {table.pick(1).plane for _ in range(6)} == {1}


def test_transitions_and_reasons():
    events = []
    t = [0.0]
    table = EvTable(explicit_evs(range(4)), 1, min_active=2, bad_threshold=2,
                    clock=lambda: t[0], on_event=events.append)
    e0, e1, e2 = table.evs[:3]
    assert not table.loss(e0)  # one loss is not enough
    table.delivered(e0)  # a delivery resets the run
    assert not table.loss(e0)
    t[0] = 5.0
    assert table.loss(e0)
    assert e0.state == ASSUMED_BAD
    table.loss(e1)
    assert table.loss(e1)
    # floor: 2 GOOD left, ev_min_active = 2 -> e2 cannot go bad
    table.loss(e2)
    assert not table.loss(e2)
    assert e2.state == GOOD and table.floor_blocked == 1
    assert table.probe_response(e0)
    assert not table.probe_response(e2)  # only ASSUMED_BAD EVs come back by probe
    table.set_state(3, DENIED)
    assert table.pick(0) is not table.evs[3]
    with pytest.raises(ValueError):
        table.set_state(3, ASSUMED_BAD)
    assert [(e.ev, e.old, e.new, e.reason) for e in events] == [
        (0, GOOD, ASSUMED_BAD, "loss"), (1, GOOD, ASSUMED_BAD, "loss"),
        (0, ASSUMED_BAD, GOOD, "probe"), (3, GOOD, DENIED, "controller")]
    assert events[0].time_ns == 5.0 and events[0].drops == 3


def test_ev_table_rejects_bad_config():
    with pytest.raises(ValueError):
        EvTable([], 1)
    with pytest.raises(ValueError):
        EvTable([(1, 0), (1, 0)], 1)
    with pytest.raises(ValueError):
        EvTable([(1, 3)], 2)
    with pytest.raises(ValueError):
        EvTable([(0x10000, 0)], 1)


def make_cc(**kw):
    p = NsccParams(base_rtt_ns=4000.0, **kw).resolved(bdp_bytes=50000, mtu_wire=4194)
    return Nscc(p, 4194)


def test_cc_starts_at_max_and_stays_in_bounds():
    cc = make_cc()
    assert cc.cwnd == pytest.approx(75000)
    cc.on_ack(0.0, 4096, False, 4000.0)
    assert cc.cwnd == pytest.approx(75000)  # clamped at max_cwnd
    for i in range(100):
        cc.on_trim(float(i), 4194)
    assert cc.cwnd == pytest.approx(4194)  # min_cwnd = one packet


def test_cc_multiplicative_decrease_on_ecn_and_delay():
    cc = make_cc()
    w0 = cc.cwnd
    cc.on_ack(10000.0, 4096, True, 4000.0 + 9000.0)  # ECE and 9 us of queueing
    assert cc.cwnd < w0
    assert cc.cwnd >= w0 * (1 - cc.p.max_md_jump) - 1e-6
    w1 = cc.cwnd
    cc.on_ack(10500.0, 4096, True, 13000.0)  # within a base RTT: no second cut
    assert cc.cwnd == pytest.approx(w1)


def test_cc_ecn_with_low_delay_holds_and_no_ecn_grows():
    cc = make_cc()
    cc.cwnd = 30000.0
    cc.on_ack(0.0, 4096, True, 4100.0)
    assert cc.cwnd == pytest.approx(30000.0)
    cc.on_ack(1.0, 4096, False, 4100.0)
    assert cc.cwnd > 30000.0


def test_cc_quick_adapt_after_trim():
    cc = make_cc()
    cc.on_ack(0.0, 0, False, None)
    cc.on_trim(100.0, 4194)
    cc.on_ack(8000.0, 4096, False, None)  # window over, little acknowledged
    assert cc.cwnd == pytest.approx(max(4096 * 1.0, cc.p.min_cwnd), rel=0.01)
    assert cc.qa_count == 1


def test_cc_disabled_never_moves():
    cc = make_cc(enabled=False)
    w0 = cc.cwnd
    cc.on_trim(0.0, 4194)
    cc.on_timeout(0.0)
    cc.on_ack(1e6, 4096, True, 1e6)
    assert cc.cwnd == w0


def _ack(cum, base, bitmap):
    from sim.model.packet import ACK, AETH_ACK, Packet

    pkt = Packet(ACK, "b", "a", 0, 0, 0x10)
    pkt.syndrome, pkt.msn, pkt.psn, pkt.cum_psn = AETH_ACK, 0, cum, cum
    pkt.sack_base, pkt.sack_bitmap, pkt.sack_bits = base, bitmap, 64
    pkt.ece, pkt.ce_count = False, 0
    return pkt


@pytest.mark.parametrize("sack_threshold, lost", [(1, [4, 5]), (2, [])])
def test_old_ack_sacks_from_una_and_the_count_rule(sack_threshold, lost):
    """An old ACK's bitmap bits from una up are taken (docs/protocol.md); the
    count rule finds the holes with ``sack_threshold`` SACKed PSNs above them."""
    from tests.model_requester import requester

    qp = requester([0xC000 + e for e in range(8)], sack_threshold=sack_threshold)
    for w in range(8):
        qp.post_write(wr_id=w, remote_va=0, rkey=1, length=512)
    assert [qp.pull(0).psn for _ in range(8)] == list(range(8))
    qp.on_ack(_ack(3, 4, 0))  # una 4
    qp.on_ack(_ack(1, 2, 0b10011))  # old: PSNs 2, 3 (acknowledged) and 6
    assert qp.una_psn == 4 and qp.sacked == 1 << 2
    assert [p for _, p, _, why in qp.retx_log if why == "sack"] == lost


def test_timeout_blames_the_oldest_psn_only():
    """A timeout is loss evidence against the EV of the oldest PSN in flight (the
    one the timer waited on), not against the EVs of the PSNs sent after it;
    every PSN in flight is retransmitted."""
    from tests.model_requester import requester

    qp = requester([0xC000 + e for e in range(4)], ev_thr=1, sack_threshold=3)
    for w in range(4):
        qp.post_write(wr_id=w, remote_va=0, rkey=1, length=512)
    sent = [qp.pull(0) for _ in range(4)]
    assert [p.psn for p in sent] == list(range(4)) and len({p.ev for p in sent}) == 4
    qp.on_ack(_ack(-1 & 0xFFFFFF, 0, 0b1000))  # PSN 3 SACKed: no hole reaches 3
    assert not qp.retx_log
    qp.engine.now = qp.rto_deadline
    qp._rto_check()
    assert [(p, why) for _, p, _, why in qp.retx_log] == [(0, "timeout"), (1, "timeout"),
                                                        (2, "timeout")]
    events = [(e.ev, e.new, e.reason) for e in qp.evs.events]
    assert events == [(sent[0].ev, ASSUMED_BAD, "timeout")]
    assert [ev.drops for ev in qp.evs.evs] == [1 if ev.value == sent[0].ev else 0
                                             for ev in qp.evs.evs]


def test_sack_threshold_is_checked():
    with pytest.raises(ValueError, match="sack_threshold"):
        QpConfig(sack_threshold=-1).validate()

"""End-to-end invariants of the MRC model and the baselines on the fabric."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.model import (
    ASSUMED_BAD,
    DENIED,
    ERROR,
    GOOD,
    RETRY_EXC_ERR,
    WR_FLUSH_ERR,
    QpConfig,
    World,
    explicit_evs,
)
from sim.model.checks import AckAudit, check_delivery
from sim.model.packet import ACK, DATA, PSN_MASK
from sim.mrcsim import data_sent_on_bad_evs
from tests import seeds

EVS = explicit_evs(range(0xC000, 0xC008))
FAST = dict(rto_exp=4, linear_cnt=7, ack_delay_ns=1000.0, probe_interval_ns=5000.0,
            place_payload=True)


def make(transport="mrc", seed=1, cfg=None, evs=EVS, **fabric):
    fabric.setdefault("planes", 1)
    fabric.setdefault("paths_per_plane", 8)
    w = World(seed=seed, **fabric)
    w.add_host("a")
    w.add_host("b")
    cfg = cfg or QpConfig(**FAST)
    conn = w.connect("a", "b", transport=transport, cfg=cfg, evs=evs, backed=True,
                     mr_length=1 << 22)
    conn.requester.tx_log = []
    return w, conn


def post(conn, sizes, seed=0):
    rng = seeds.rng(seed)
    posted = []
    off = 0
    for i, n in enumerate(sizes):
        data = rng.randbytes(n)
        imm = (i * 7 + 1) if i % 2 == 0 else None
        conn.requester.post_write(100 + i, conn.mr.va + off, conn.rkey, n, imm=imm, data=data)
        posted.append((100 + i, off, data, imm))
        off += n
    return posted


sizes_st = st.lists(st.integers(0, 20000), min_size=1, max_size=6)
psn_st = st.one_of(st.integers(0, PSN_MASK), st.integers(PSN_MASK - 40, PSN_MASK))


@pytest.mark.parametrize("transport", ["mrc", "gbn", "spray"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**16), loss=st.sampled_from([0.0, 0.01, 0.1, 0.3]),
       ack_loss=st.sampled_from([0.0, 0.1, 0.3]), reorder=st.sampled_from([0.0, 0.05, 0.3]),
       dup=st.sampled_from([0.0, 0.05, 0.2]), sizes=sizes_st, start_psn=psn_st,
       mtu=st.sampled_from([256, 1024, 4096]))
def test_random_faults_deliver_exactly(transport, seed, loss, ack_loss, reorder, dup, sizes,
                                       start_psn, mtu):
    """Any mix of loss, ACK loss, reordering and duplication: the memory ends up
    holding exactly what was written, completions are right and in order, and
    no ACK ever covers a PSN that did not arrive."""
    cfg = QpConfig(**{**FAST, "exp_cnt": 25, "mtu": mtu, "start_psn": start_psn})
    w, conn = make(transport, seed=seed, cfg=cfg)
    fab = w.fabric
    for link in fab.links({"kind": "core", "to": "b"}):
        f = link.fault()
        f.loss, f.reorder_prob, f.reorder_ns = loss, reorder, 3000.0
        f.dup_prob, f.dup_ns = dup, 700.0
    for link in fab.links({"kind": "core", "to": "a"}):
        link.fault().loss = ack_loss
    audit = AckAudit(w)
    posted = post(conn, sizes, seed)
    assert w.run_until_idle(max_time_ns=5e9)
    assert conn.requester.state != ERROR
    assert check_delivery(conn, posted) == []
    assert audit.violations == []
    assert audit.acks_checked > 0


@pytest.mark.parametrize("transport", ["mrc", "gbn"])
@settings(max_examples=60, deadline=None)
@given(drops=st.sets(st.tuples(st.integers(0, 60), st.integers(0, 2)), max_size=40),
       ack_drops=st.sets(st.integers(0, 40), max_size=20), sizes=sizes_st,
       start_psn=psn_st)
def test_scripted_loss_pattern(transport, drops, ack_drops, sizes, start_psn):
    """Drop chosen (PSN, attempt) pairs and chosen ACKs: every pattern that lets
    a packet through by its third attempt ends with exact delivery."""
    cfg = QpConfig(**{**FAST, "exp_cnt": 25, "mtu": 1024, "start_psn": start_psn})
    w, conn = make(transport, cfg=cfg)
    attempts: dict[int, int] = {}
    acks = [0]

    def drop_data(pkt, now):
        if pkt.kind != DATA:
            return False
        off = (pkt.psn - start_psn) & PSN_MASK
        n = attempts.get(off, 0)
        attempts[off] = n + 1
        return (off, n) in drops

    def drop_ack(pkt, now):
        if pkt.kind != ACK:
            return False
        acks[0] += 1
        return acks[0] - 1 in ack_drops

    w.nics["a"].host.uplinks[0].fault().drop_fn = drop_data
    w.nics["b"].host.uplinks[0].fault().drop_fn = drop_ack
    audit = AckAudit(w)
    posted = post(conn, sizes)
    assert w.run_until_idle(max_time_ns=5e9)
    assert check_delivery(conn, posted) == []
    assert audit.violations == []


def run_signature(seed):
    w, conn = make("mrc", seed=seed)
    for link in w.fabric.links({"kind": "core", "to": "b"}):
        link.fault().loss = 0.05
        link.fault().reorder_prob = 0.1
        link.fault().reorder_ns = 2000.0
    post(conn, [50000, 30000, 7000])
    w.run_until_idle()
    r = conn.requester
    return (tuple(r.tx_log), tuple(r.send_cq), tuple(conn.responder.recv_cq),
            tuple(w.ev_events), w.engine.now)


def test_same_seed_same_result():
    a, b = run_signature(3), run_signature(3)
    assert a == b
    assert run_signature(4) != a  # the seed matters (the faults draw from it)


def test_retry_exhaustion_gives_error_completions():
    """Every path dead: timeouts at 1.024 us x 2^t, linear_cnt at the base,
    exp_cnt doubling, then ERROR with RETRY_EXC_ERR and flushed WRs."""
    cfg = QpConfig(rto_exp=2, linear_cnt=3, exp_cnt=2, ev_min_active=8)
    w, conn = make("mrc", cfg=cfg)
    w.fabric.schedule_down({"kind": "core"}, 0.0)
    post(conn, [3000, 5000, 100])
    assert w.run_until_idle(max_time_ns=1e9)
    req = conn.requester
    assert req.state == ERROR
    assert [c.status for c in req.send_cq] == [RETRY_EXC_ERR, WR_FLUSH_ERR, WR_FLUSH_ERR]
    assert [c.wr_id for c in req.send_cq] == [100, 101, 102]
    assert req.stats["timeouts"] == 3 + 2 + 1
    base = 1024.0 * 4
    first_send = req.tx_log[0][0]
    # fires at T, 2T, 3T, 4T (linear), 6T, 10T (doubling) -> error at the last
    retx_times = sorted(t for (t, _p, _e, r) in req.tx_log if r)
    # each timeout resends every outstanding packet back to back: take the first
    bursts = [t for i, t in enumerate(retx_times) if i == 0 or t - retx_times[i - 1] > 1000]
    assert len(retx_times) == 5 * 4  # 4 packets outstanding, 5 retries
    assert bursts == pytest.approx([first_send + k * base for k in (1, 2, 3, 4, 6)])
    assert req.send_cq[0].time_ns == pytest.approx(first_send + 10 * base)
    assert conn.responder.recv_cq == []


@pytest.mark.parametrize("transport", ["gbn", "spray"])
def test_baseline_retry_exhaustion(transport):
    cfg = QpConfig(rto_exp=2, linear_cnt=1, exp_cnt=1)
    w, conn = make(transport, cfg=cfg)
    w.fabric.schedule_down({"kind": "core"}, 0.0)
    post(conn, [3000, 10])
    assert w.run_until_idle(max_time_ns=1e9)
    assert [c.status for c in conn.requester.send_cq] == [RETRY_EXC_ERR, WR_FLUSH_ERR]


def test_blackhole_ev_goes_bad_then_probe_brings_it_back():
    """Path 0 (EV 0xC000) dies then returns: the EV goes ASSUMED_BAD for loss,
    no data is sent on it while bad (probes only), and a probe returns it to
    GOOD after the path is back. No other EV changes state."""
    w, conn = make("mrc")
    w.fabric.schedule_down({"kind": "core", "path": 0}, 20000.0, 60000.0)
    posted = post(conn, [800000, 800000, 800000])
    assert w.run_until_idle()
    assert check_delivery(conn, posted) == []
    ev = [(e.ev, e.old, e.new, e.reason) for e in w.ev_events]
    assert ev == [(0xC000, GOOD, ASSUMED_BAD, "loss"), (0xC000, ASSUMED_BAD, GOOD, "probe")]
    bad_at, good_at = w.ev_events[0].time_ns, w.ev_events[1].time_ns
    assert 20000 < bad_at < 20000 + 3 * 4000 + 2000 * 2  # a few RTTs + reo_wnd
    assert 60000 <= good_at <= 60000 + 5000 + 10000  # next probe after the path is up
    assert data_sent_on_bad_evs(w, [conn.requester]) == 0
    req = conn.requester
    assert req.stats["probes_tx"] >= 1
    on_ev0 = [t for (t, _p, e, _r) in req.tx_log if e == 0xC000]
    assert not [t for t in on_ev0 if bad_at < t < good_at]
    assert [t for t in on_ev0 if t > good_at]  # used again once GOOD


def test_tail_loss_marks_ev_bad_by_timeout():
    """A lone packet on a dead path: no SACK evidence, the timer finds it."""
    cfg = QpConfig(**{**FAST, "ev_bad_threshold": 1})
    w, conn = make("mrc", cfg=cfg)
    w.fabric.schedule_down({"kind": "core", "path": 0}, 0.0)
    posted = post(conn, [100])
    assert w.run_until_idle()
    assert check_delivery(conn, posted) == []
    assert [(e.ev, e.new, e.reason) for e in w.ev_events] == [(0xC000, ASSUMED_BAD, "timeout")]
    assert conn.requester.stats["timeouts"] == 1
    # retransmitted on a different EV
    retx = [e for (_t, _p, e, r) in conn.requester.tx_log if r]
    assert retx and retx[0] != 0xC000


def test_ev_min_active_floor_blocks_marking():
    cfg = QpConfig(**{**FAST, "ev_min_active": 8})
    w, conn = make("mrc", cfg=cfg)
    w.fabric.schedule_down({"kind": "core", "path": 3}, 10000.0)
    posted = post(conn, [300000])
    assert w.run_until_idle()
    assert check_delivery(conn, posted) == []
    assert w.ev_events == []
    assert conn.requester.evs.floor_blocked > 0


def test_denied_ev_is_never_used_or_probed():
    w, conn = make("mrc")
    conn.requester.evs.set_state(0xC005, DENIED)
    posted = post(conn, [200000])
    assert w.run_until_idle()
    assert check_delivery(conn, posted) == []
    assert all(e != 0xC005 for (_t, _p, e, _r) in conn.requester.tx_log)
    assert conn.requester.stats["probes_tx"] == 0
    assert [(e.new, e.reason) for e in w.ev_events] == [(DENIED, "controller")]


@pytest.mark.parametrize("trim_nack", [True, False])
def test_trimmed_packets(trim_nack):
    """Incast through a shallow trimming buffer: with TRIM_NACK the responder
    NAKs every trimmed packet and the requester resends it at once; trims are
    congestion, so no EV is ever blamed for them."""
    w = World(seed=2, planes=1, paths_per_plane=2, queue_bytes=24000, ecn_bytes=8000)
    w.add_host("r")
    cfg = QpConfig(**{**FAST, "trim_nack": trim_nack})
    conns, posted = [], []
    for i in range(4):
        w.add_host(f"s{i}")
        c = w.connect(f"s{i}", "r", cfg=cfg, evs=EVS[:2], backed=True, mr_length=1 << 20)
        conns.append(c)
        posted.append(post(c, [120000], seed=i))
    assert w.run_until_idle()
    trimmed = sum(c.responder.stats["rx_trimmed"] for c in conns)
    assert trimmed > 0
    naks = sum(c.responder.stats["naks_tx"] for c in conns)
    assert naks == (trimmed if trim_nack else 0)
    for c, p in zip(conns, posted, strict=True):
        assert check_delivery(c, p) == []
    why = {w_ for c in conns for (_t, _p, _e, w_) in c.requester.retx_log}
    assert ("trim" in why) == trim_nack
    if trim_nack:
        # nothing was lost, only trimmed: congestion must not mark any EV bad
        assert w.ev_events == []


def test_spraying_is_even_over_good_evs():
    w, conn = make("mrc", cfg=QpConfig(**{**FAST, "place_payload": False}))
    post(conn, [800 * 1024])
    w.run_until_idle()
    from collections import Counter

    per_ev = Counter(e for (_t, _p, e, _r) in conn.requester.tx_log)
    assert set(per_ev) == set(range(0xC000, 0xC008))
    assert max(per_ev.values()) - min(per_ev.values()) <= 1


def test_roce_baseline_pins_one_path_and_spray_rotates():
    for transport, n in (("gbn", 1), ("spray", 8)):
        w, conn = make(transport)
        post(conn, [100000])
        w.run_until_idle()
        assert len({e for (_t, _p, e, _r) in conn.requester.tx_log}) == n


def test_no_spurious_retransmits_beyond_the_sack_reach():
    """Large BDP (about 90 packets in flight) with a 64-bit SACK bitmap and 1 %
    loss: PSNs past the bitmap's reach are not declared lost, so the responder
    sees (almost) no duplicates."""
    cfg = QpConfig(**{**FAST, "rto_exp": 8, "place_payload": False, "reo_wnd_ns": 4000.0})
    w, conn = make("mrc", cfg=cfg, link_delay_ns=5000.0)
    for link in w.fabric.links({"kind": "core", "to": "b"}):
        link.fault().loss = 0.01
    post(conn, [4 << 20])
    assert w.run_until_idle()
    st = conn.requester.stats
    assert st["tx_retx"] > 0
    assert conn.responder.stats["rx_dup"] <= st["tx_retx"] // 10


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 1000),
       outages=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 150), st.integers(5, 80)),
                        min_size=1, max_size=4))
def test_ev_transitions_have_their_reasons(seed, outages):
    """Random path outages (no other loss): an EV goes ASSUMED_BAD only after its
    path has been down and with at least ev_bad_threshold drops; it comes back
    only by a probe, while its path is up; no data is sent on it meanwhile."""
    w, conn = make("mrc", seed=seed)
    down: dict[int, list[tuple[float, float]]] = {}
    for path, start_us, dur_us in outages:
        lo, hi = start_us * 1000.0, (start_us + dur_us) * 1000.0
        w.fabric.schedule_down({"kind": "core", "path": path}, lo, hi)
        down.setdefault(path, []).append((lo, hi))

    def is_down(path, t):
        return any(lo <= t < hi for lo, hi in down.get(path, ()))

    posted = post(conn, [600000] * 4)
    assert w.run_until_idle(max_time_ns=1e9)
    assert check_delivery(conn, posted) == []
    for e in w.ev_events:
        path = e.ev % 8
        if e.new == ASSUMED_BAD:
            assert e.reason in ("loss", "timeout")
            assert e.drops >= 2
            assert any(lo <= e.time_ns for lo, _ in down.get(path, ())), e
        else:
            assert (e.old, e.new, e.reason) == (ASSUMED_BAD, GOOD, "probe")
            # the response crossed the core link 2 x (500 ns + 7.84 ns) before
            # it arrived (probe frames are 98 B on the wire at 100 Gb/s)
            assert not is_down(path, e.time_ns - 1012.0)
    assert data_sent_on_bad_evs(w, [conn.requester]) == 0


def test_plane_failure_moves_traffic_to_the_other_plane():
    evs = explicit_evs(range(0xC000, 0xC008), planes=2)
    w, conn = make("mrc", evs=evs, planes=2, paths_per_plane=4,
                   cfg=QpConfig(**{**FAST, "ev_min_active": 2}))
    w.fabric.schedule_down({"kind": "core", "plane": 1}, 30000.0)
    posted = post(conn, [1 << 20, 1 << 20])
    assert w.run_until_idle()
    assert check_delivery(conn, posted) == []
    bad = {e.ev for e in w.ev_events if e.new == ASSUMED_BAD}
    assert bad == {ev for ev, plane in evs if plane == 1}
    late = {e for (t, _p, e, _r) in conn.requester.tx_log if t > max(
        ev.time_ns for ev in w.ev_events)}
    assert late and all(dict(evs)[e] == 0 for e in late)


def test_roce_stays_on_one_plane():
    evs = explicit_evs(range(0xC000, 0xC008), planes=2)
    w, conn = make("gbn", evs=evs, planes=2, paths_per_plane=4)
    posted = post(conn, [200000])
    assert w.run_until_idle()
    assert check_delivery(conn, posted) == []
    assert {e for (_t, _p, e, _r) in conn.requester.tx_log} == {0xC000}


@pytest.mark.long
@pytest.mark.parametrize("transport", ["mrc", "gbn", "spray"])
def test_soak_many_seeds(transport):
    """Soak: 40 seeds of 2 MiB with loss, ACK loss, reordering, duplication and
    a path outage, each checked for exact delivery and honest ACKs (the 40
    world seeds drawn from the run's seed)."""
    for seed in range(40):
        cfg = QpConfig(**{**FAST, "exp_cnt": 25, "start_psn": (PSN_MASK - 300 + seed * 7)
                          & PSN_MASK})
        w, conn = make(transport, seed=seeds.of(seed), cfg=cfg)
        for link in w.fabric.links({"kind": "core", "to": "b"}):
            f = link.fault()
            f.loss, f.reorder_prob, f.reorder_ns, f.dup_prob = 0.02, 0.05, 4000.0, 0.02
        for link in w.fabric.links({"kind": "core", "to": "a"}):
            link.fault().loss = 0.02
        w.fabric.schedule_down({"kind": "core", "path": seed % 8}, 30000.0, 90000.0)
        audit = AckAudit(w)
        posted = post(conn, [1 << 20, 700000, 300000, 48000], seed)
        assert w.run_until_idle(max_time_ns=5e9), seed
        assert check_delivery(conn, posted) == [], seed
        assert audit.violations == [], seed
        if transport == "mrc":
            assert data_sent_on_bad_evs(w, [conn.requester]) == 0, seed

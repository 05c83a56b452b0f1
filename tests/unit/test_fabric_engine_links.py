"""Event engine and fabric: ordering, link timing, ECN, trim/drop, faults, determinism."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hw.protocol import srv6_sport
from sim.fabric import SPINE_USID_BASE, Engine, Fabric, Link, topology
from sim.model.packet import DATA, Packet, data_wire_len


def test_data_kind_constant_matches_model():
    assert topology.DATA == DATA


@settings(max_examples=50, deadline=None)
@given(times=st.lists(st.floats(0, 1e6, allow_nan=False), max_size=50))
def test_engine_runs_in_time_order_fifo_on_ties(times):
    eng = Engine()
    seen = []
    for i, t in enumerate(times):
        eng.at(t, seen.append, (t, i))
    eng.run()
    assert seen == sorted(seen)  # by time, then by scheduling order
    assert eng.events == len(times)


def test_engine_rejects_the_past_and_stops():
    eng = Engine()
    eng.at(10.0, lambda _: eng.stop())
    eng.at(20.0, lambda _: pytest.fail("ran after stop"))
    eng.run()
    assert eng.now == 10.0
    with pytest.raises(ValueError):
        eng.at(5.0, print)


def pkt(size=4096):
    p = Packet.data_packet(None, None, 0, 0xC000, 1, 0, 0x07, 0, 0, size, size, None)
    return p


def link(**kw):
    args = dict(name="l", gbps=100.0, prop_ns=500.0, queue_bytes=20000, ecn_bytes=9000,
                trim=False, seed=1)
    args.update(kw)
    return Link(**args)


def test_link_serialisation_and_fifo():
    lk = link()
    ser = data_wire_len(4096, False) * 8 / 100.0
    assert lk.transit(pkt(), 0.0) == pytest.approx(ser + 500)
    assert lk.transit(pkt(), 0.0) == pytest.approx(2 * ser + 500)  # queued behind
    assert lk.transit(pkt(), 10 * ser) == pytest.approx(11 * ser + 500)  # idle again


def test_ecn_mark_above_threshold_and_trim_or_drop_on_overflow():
    lk = link(queue_bytes=13000, ecn_bytes=5000)
    marks = []
    for _ in range(4):
        p = pkt()
        lk.transit(p, 0.0)
        marks.append(p.ce)
    # queue seen: 0, 4194, 8388 bytes; the 4th would overflow 13000
    assert marks[:3] == [False, False, True]
    assert lk.drops_overflow == 1
    lt = link(queue_bytes=13000, ecn_bytes=5000, trim=True)
    ps = [pkt() for _ in range(4)]
    times = [lt.transit(p, 0.0) for p in ps]
    assert ps[3].trimmed and ps[3].wire_len < 100 and lt.trims == 1
    assert times[3] < times[2]  # trimmed headers jump the data queue


def test_down_link_drops_everything():
    lk = link()
    lk.up = False
    assert lk.transit(pkt(), 0.0) is None and lk.drops_down == 1


def test_random_loss_rate_and_per_seed_determinism():
    def run(seed):
        lk = link(seed=seed, queue_bytes=1 << 40)
        lk.fault().loss = 0.1
        return [lk.transit(pkt(64), i * 1000.0) is None for i in range(5000)]

    a = run(1)
    assert 400 < sum(a) < 600
    assert run(1) == a
    assert run(2) != a


def test_gilbert_elliott_losses_come_in_bursts():
    lk = link(queue_bytes=1 << 40)
    lk.fault().gilbert = (0.01, 0.2, 1.0)
    lost = [lk.transit(pkt(64), i * 1000.0) is None for i in range(20000)]
    runs = []
    n = 0
    for x in lost:
        if x:
            n += 1
        elif n:
            runs.append(n)
            n = 0
    assert sum(runs) / len(runs) > 3  # mean burst 1/p_bg = 5


def test_reorder_delays_some_packets():
    lk = link(queue_bytes=1 << 40)
    lk.fault().reorder_prob = 0.5
    lk.fault().reorder_ns = 10000.0
    arrivals = [lk.transit(pkt(64), i * 100.0) for i in range(200)]
    assert arrivals != sorted(arrivals)
    assert lk.reorders > 50


def make_fabric(**kw):
    eng = Engine()
    fab = Fabric(eng, **kw)

    class Sink:
        def __init__(self):
            self.got = []

        def receive(self, p):
            self.got.append((eng.now, p))

    hosts = []
    for name in ("a", "b"):
        h = fab.add_host(name)
        h.nic = Sink()
        hosts.append(h)
    return eng, fab, hosts


def test_explicit_routing_and_hash_routing():
    _, fab, (a, b) = make_fabric(paths_per_plane=8)
    assert [fab.path_of(a, b, 0, ev) for ev in range(0xC000, 0xC008)] == list(range(8))
    _, fab, (a, b) = make_fabric(paths_per_plane=8, routing="hash")
    paths = [fab.path_of(a, b, 0, ev) for ev in range(0xC000, 0xC100)]
    assert paths == [fab.path_of(a, b, 0, ev) for ev in range(0xC000, 0xC100)]
    assert set(paths) == set(range(8))
    with pytest.raises(ValueError):
        make_fabric(routing="magic")


def test_hash_routing_of_a_16_bit_ev_is_pinned():
    """A 16-bit EV hashes the 5 bytes (src, dst, plane, EV high, EV low):
    these paths are fixed, so a run keeps its paths."""
    _, fab, (a, b) = make_fabric(planes=2, paths_per_plane=8, routing="hash")
    evs = (0xC000, 0xC001, 0xC0DE, 0xFFFF, 0)
    assert [fab.path_of(a, b, 0, ev) for ev in evs] == [6, 0, 5, 7, 0]
    assert [fab.path_of(a, b, 1, ev) for ev in evs] == [1, 7, 2, 0, 7]
    assert [fab.path_of(b, a, 0, ev) for ev in evs] == [3, 5, 0, 2, 5]


def test_hash_routing_takes_wide_evs_as_their_frames_carry_them():
    """A STEV EV (32 bits) hashes whole: its flow-label bits spread EVs with
    one source port; an SRv6 EV (64 bits) hashes as its source port."""
    _, fab, (a, b) = make_fabric(paths_per_plane=8, routing="hash")
    paths = {fab.path_of(a, b, 0, label << 16 | 0xC000) for label in range(1, 17)}
    assert len(paths) > 4, paths
    for ev in (0x0E01_0B02_0000_0000, 0x0E07_0F01_0B02_0000):
        assert fab.path_of(a, b, 0, ev) == fab.path_of(a, b, 0, srv6_sport(ev))
    _, fab, (a, b) = make_fabric(paths_per_plane=8)
    assert fab.path_of(a, b, 0, 0x1234_C005) == 5  # explicit: the low bits
    assert fab.path_of(a, b, 0, 0x0E01_0B02_0000_0000) == srv6_sport(0x0E01_0B02_0000_0000) % 8


def test_srv6_routing_takes_the_first_usids_spine():
    """Spine k has uSID SPINE_USID_BASE + k: an EV led by it takes path k; an
    EV led by a uSID in the spines' block that names no spine has no route
    (``send`` drops it, counts it, calls the drop hooks); any other EV is
    hashed."""
    eng, fab, (a, b) = make_fabric(paths_per_plane=4, routing="srv6")
    _, hashed, _ = make_fabric(paths_per_plane=4, routing="hash")
    for k in range(4):
        assert fab.path_of(a, b, 0, (SPINE_USID_BASE + k) << 48 | 0x0B02 << 32) == k
    assert fab.path_of(a, b, 0, (SPINE_USID_BASE + 4) << 48 | 0x0B02 << 32) is None
    for ev in (0xC000, 0xC0DE, 0x1234_C000, 0x0B05_0B02_0000_0000):
        assert fab.path_of(a, b, 0, ev) == hashed.path_of(a, b, 0, ev)
    dropped = []
    fab.drop_hooks.append(lambda p, now: dropped.append(p))
    good = Packet.data_packet(a, b, 0, (SPINE_USID_BASE + 2) << 48, 1, 0, 0x07, 0, 0, 64, 64,
                              None)
    bad = Packet.data_packet(a, b, 0, (SPINE_USID_BASE + 9) << 48, 1, 0, 0x07, 0, 0, 64, 64,
                             None)
    fab.send(good)
    fab.send(bad)
    eng.run()
    assert [p for _, p in b.nic.got] == [good] and good.path == 2
    assert dropped == [bad] and fab.no_route == 1
    with pytest.raises(ValueError, match="at most 256 spines"):
        make_fabric(paths_per_plane=257, routing="srv6")


def test_packet_crosses_three_links_and_is_delivered():
    eng, fab, (a, b) = make_fabric(link_delay_ns=500.0, port_gbps=100.0, core_gbps=100.0)
    p = Packet.data_packet(a, b, 0, 0xC003, 1, 0, 0x07, 0, 0, 4096, 4096, None)
    fab.send(p)
    eng.run()
    ser = p.wire_len * 8 / 100.0
    assert len(b.nic.got) == 1
    assert b.nic.got[0][0] == pytest.approx(3 * (ser + 500))
    assert p.path == 3


def test_duplication_delivers_twice():
    eng, fab, (a, b) = make_fabric()
    for lk in fab.links({"kind": "core", "to": "b"}):
        lk.fault().dup_prob = 1.0
        lk.fault().dup_ns = 100.0
    fab.send(Packet.data_packet(a, b, 0, 1, 1, 0, 0x07, 0, 0, 64, 64, None))
    eng.run()
    assert len(b.nic.got) == 2
    assert b.nic.got[0][1] is not b.nic.got[1][1]


def test_link_down_up_and_flap_schedule():
    eng, fab, (a, b) = make_fabric(paths_per_plane=2)
    target = {"kind": "core", "path": 1, "to": "b"}
    windows = fab.schedule_flap(target, 1000.0, 5000.0, 1000.0, 500.0)
    assert windows == [(1000.0, 2000.0), (2500.0, 3500.0), (4000.0, 5000.0)]
    (lk,) = fab.links(target)
    states = []
    for t in (500.0, 1500.0, 2200.0, 3000.0, 3700.0, 4500.0, 6000.0):
        eng.at(t, lambda _: states.append(lk.up))
    eng.run()
    assert states == [True, False, True, False, True, False, True]


def test_fault_targets():
    _, fab, _ = make_fabric(planes=2, paths_per_plane=4)
    assert len(fab.links({"kind": "core"})) == 2 * 4 * 2
    assert len(fab.links({"kind": "core", "plane": 1, "to": "b"})) == 4
    assert len(fab.links({"kind": "uplink", "host": "a"})) == 2
    assert fab.links({"name": "core.p0.k2.to.a"})[0].name == "core.p0.k2.to.a"
    with pytest.raises(ValueError):
        fab.links({"kind": "core", "to": "nobody"})


def test_overlapping_outages_nest():
    eng, fab, _ = make_fabric(paths_per_plane=1)
    target = {"kind": "core", "path": 0, "to": "b"}
    fab.schedule_down(target, 0.0, 5000.0)
    fab.schedule_down(target, 1000.0, 17000.0)
    (lk,) = fab.links(target)
    states = []
    for t in (500.0, 6000.0, 16000.0, 18000.0):
        eng.at(t, lambda _: states.append(lk.up))
    eng.run()
    assert states == [False, False, False, True]

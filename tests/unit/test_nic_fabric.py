"""sim/system/fabric.py outside the simulator: EV extraction from frames and
path choice (explicit, hash and SRv6 routing), held to sim/fabric's; each
fault (down, loss, queue, ECN mark, trim, reorder) as ``Direction.forward``
decides it; the fault schedule and the capture."""


import ipaddress

import pytest

from host_driver import layers as L
from hw.protocol import srv6_sport, stev_fields
from sim.fabric import SPINE_USID_BASE, Engine, Fabric
from sim.system.fabric import (
    DELIVERED,
    DROPPED,
    TRIMMED,
    Direction,
    FaultEvent,
    Path,
    frame_ev,
    is_data_frame,
    mark_ce,
)
from sim.system.fabric import Fabric as SysFabric
from tests import seeds


def test_frame_ev_reads_the_udp_source_port():
    frame = bytes(L.write_packet(opcode=0x0A, dqpn=1, psn=5, va=0x1000, rkey=7, dma_len=100,
                                 payload=b"x" * 100, ev=0xC123))
    assert frame_ev(frame) == 0xC123
    ack = bytes(L.ack_packet(dqpn=1, cum_psn=3, bitmap=0, ev=0xD001))
    assert frame_ev(ack) == 0xD001
    assert frame_ev(frame[:30]) is None  # truncated
    assert frame_ev(b"\xff" * 12 + b"\x88\xcc" + bytes(60)) is None  # neither IPv4 nor IPv6
    assert frame_ev(b"\xff" * 12 + b"\x86\xdd" + bytes(60)) is None  # IPv6, not UDP
    v6 = bytes(L.ack_packet(dqpn=1, cum_psn=3, ev=0xD00F, **V6))
    assert frame_ev(v6) == V6["flow_label"] << 16 | 0xD00F  # the flow label's bits above
    v6 = bytes(L.ack_packet(dqpn=1, cum_psn=3, ev=0xD00F, **{**V6, "flow_label": 0}))
    assert frame_ev(v6) == 0xD00F


@pytest.mark.parametrize("routing", ["explicit", "hash"])
def test_path_choice_matches_sim_fabric(routing):
    fab = Fabric(Engine(), paths_per_plane=8, routing=routing)
    hosts = [fab.add_host("a"), fab.add_host("b")]
    for src in (0, 1):
        d = Direction("d", src, 1 - src, [Path() for _ in range(8)], seeds.rng(1), routing)
        for ev in list(range(0xC000, 0xC040)) + [0, 1, 0xFFFF]:
            assert d.path_of(ev) == fab.path_of(hosts[src], hosts[1 - src], 0, ev), (src, ev)
    assert d.path_of(None) == 0


# ---- per-frame decisions (Direction.forward), no simulator ---------------------------------


V6 = dict(src_ip="fd00::1", dst_ip="fd00::2", flow_label=0x12345)


def data_frame(ev=0xC003, n=1024, psn=5, opcode=0x07, **addr):
    return bytes(L.write_packet(opcode=opcode, dqpn=1, psn=psn, va=0x1000, rkey=7,
                                dma_len=4 * n, payload=bytes(range(256)) * (n // 256),
                                ev=ev, **addr))


def ack_frame(ev=0xD003):
    return bytes(L.ack_packet(dqpn=1, cum_psn=3, bitmap=0, ev=ev))


def direction(seed=1, **path_kw):
    return Direction("d", 0, 1, [Path(**path_kw) for _ in range(8)], seeds.rng(seed))


def test_hash_routing_of_a_16_bit_ev_is_pinned():
    """A frame with flow label 0 (IPv4, or IPv6 with the UDP EV format) hashes
    the 5 bytes (src, dst, 0, source port): these paths are fixed, so a run
    keeps its paths."""
    want = {0: [6, 0, 5, 7, 0], 1: [3, 5, 0, 2, 5]}
    evs = [0xC000, 0xC001, 0xC0DE, 0xFFFF, 0]
    for src, paths in want.items():
        d = Direction("d", src, 1 - src, [Path() for _ in range(8)], seeds.rng(1), "hash")
        assert [d.path_of(ev) for ev in evs] == paths
        for addr in ({}, {**V6, "flow_label": 0}):
            assert [d.forward(data_frame(ev=ev, **addr), 0.0).path for ev in evs] == paths
    d = Direction("d", 0, 1, [Path() for _ in range(5)], seeds.rng(1), "hash")
    assert [d.path_of(ev) for ev in evs] == [1, 2, 0, 1, 3]


def test_stev_frames_hash_their_flow_label_too():
    """Hash routing takes the (flow label, source port) pair: STEV EVs that
    share their source port and differ in their flow-label bits spread over
    the paths, and the capture's EV is the STEV EV."""
    d = Direction("d", 0, 1, [Path() for _ in range(8)], seeds.rng(1), "hash")
    paths = set()
    for ev in [label << 16 | 0xC000 for label in range(1, 17)]:
        sport, label = stev_fields(ev)
        v = d.forward(data_frame(ev=sport, **{**V6, "flow_label": label}), 0.0)
        assert v.ev == ev
        paths.add(v.path)
    assert len(paths) > 4, paths


# An SRv6 fabric: the NICs' addresses are locator:uSID::, each spine's uSID
# SPINE_USID_BASE + its path.
LOCATOR = 0xFD00_0000
NIC_USIDS = (0x0B01, 0x0B02)
SRV6_ADDRS = dict(src_ip=str(ipaddress.IPv6Address(LOCATOR << 96 | NIC_USIDS[0] << 80)),
                  dst_ip=str(ipaddress.IPv6Address(LOCATOR << 96 | NIC_USIDS[1] << 80)))


def srv6_ev(first_usid: int) -> int:
    """An EV through one fabric node, then to NIC 1."""
    return first_usid << 48 | NIC_USIDS[1] << 32


def srv6_pair(first_usid: int, **kw) -> tuple[bytes, bytes]:
    """(the frame to NIC 1, the carrier NIC 0 sends) of an SRv6 EV."""
    ev = srv6_ev(first_usid)
    to_peer = data_frame(ev=srv6_sport(ev), **SRV6_ADDRS, **kw)
    return to_peer, L.srv6_frame(to_peer, ev)


def srv6_direction() -> Direction:
    return Direction("d", 0, 1, [Path() for _ in range(8)], seeds.rng(1), "srv6")


def test_srv6_routing_takes_the_first_usids_spine_and_consumes_it():
    d = srv6_direction()
    for k in range(8):
        to_peer, carrier = srv6_pair(SPINE_USID_BASE + k, psn=k)
        assert L.check_frame(carrier) == (True, False)
        v = d.forward(carrier, 0.0)
        assert (v.fate, v.path, v.ev) == (DELIVERED, k, srv6_ev(SPINE_USID_BASE + k))
        assert v.frame == to_peer and L.check_frame(v.frame) == (True, True)
    assert [p.carried for p in d.paths] == [1] * 8 and d.no_route == 0


def test_srv6_routing_drops_a_usid_that_names_no_spine():
    d = srv6_direction()
    _, carrier = srv6_pair(SPINE_USID_BASE + 8)  # in the spines' block, no 9th path
    v = d.forward(carrier, 0.0)
    assert (v.fate, v.reason, v.path, v.frame, v.ev) == (
        DROPPED, "no_route", None, None, srv6_ev(SPINE_USID_BASE + 8))
    assert d.no_route == 1 and sum(p.carried + p.dropped for p in d.paths) == 0


def test_srv6_routing_hashes_frames_that_are_not_carriers():
    """IPv4 frames, plain IPv6 destinations (the peer's locator:uSID::, or
    none) and a first uSID outside the spines' block are hashed, unchanged."""
    d = srv6_direction()
    hashed = Direction("h", 0, 1, [Path() for _ in range(8)], seeds.rng(1), "hash")
    _, not_a_spine = srv6_pair(0x0B05)
    plain = [data_frame(ev=0xC0DE), data_frame(ev=0xC0DE, **SRV6_ADDRS),
             data_frame(ev=0xC001, **V6), ack_frame(0xC0DE), not_a_spine]
    for f in plain:
        v = d.forward(f, 0.0)
        assert (v.fate, v.frame, v.ev) == (DELIVERED, f, frame_ev(f))
        assert v.path == hashed.forward(f, 0.0).path
    assert [d.forward(f, 0.0).path for f in plain[:2]] == [5, 5]  # 0xC0DE's hash, pinned
    assert d.no_route == 0


def test_fabrics_take_the_golden_models_paths_for_every_ev_format():
    """A frame as the NIC sends it (UDP: the EV as source port; STEV: flow
    label and source port; SRv6: the carrier, source port ``srv6_sport``)
    goes on the path the golden model's fabric gives its EV, whatever the
    routing (None: no route)."""
    evs = {"udp": [0xC000 + i for i in range(16)],
           "stev": [(i * 0x1111) << 16 | 0xC000 + i for i in range(1, 16)],
           "srv6": [srv6_ev(SPINE_USID_BASE + k) for k in range(10)] + [srv6_ev(0x0B05)]}
    for routing in ("explicit", "hash", "srv6"):
        model = Fabric(Engine(), paths_per_plane=8, routing=routing)
        hosts = [model.add_host("a"), model.add_host("b")]
        d = Direction("d", 0, 1, [Path() for _ in range(8)], seeds.rng(1), routing)
        for fmt, values in evs.items():
            for ev in values:
                if fmt == "udp":
                    frame = data_frame(ev=ev, **SRV6_ADDRS)
                elif fmt == "stev":
                    sport, label = stev_fields(ev)
                    frame = data_frame(ev=sport, **{**SRV6_ADDRS, "flow_label": label})
                else:
                    frame = L.srv6_frame(data_frame(ev=srv6_sport(ev), **SRV6_ADDRS), ev)
                assert d.forward(frame, 0.0).path == model.path_of(hosts[0], hosts[1], 0, ev), (
                    routing, fmt, hex(ev))


def test_pure_delay_path_delivers_unchanged_after_the_delay():
    d = direction(delay_ns=400.0)
    frame = data_frame()
    v = d.forward(frame, 1000.0)
    assert (v.fate, v.path, v.ev, v.frame, v.arrival_ns, v.ce) == (
        DELIVERED, 3, 0xC003, frame, 1400.0, False)
    assert d.paths[3].carried == 1 and sum(p.carried for p in d.paths) == 1


def test_down_path_drops_and_other_paths_carry():
    d = direction()
    d.paths[3].up = False
    assert d.forward(data_frame(ev=0xC003), 0.0).fate == DROPPED
    assert d.forward(data_frame(ev=0xC003), 0.0).reason == "down"
    assert d.forward(data_frame(ev=0xC004), 0.0).fate == DELIVERED
    assert (d.paths[3].dropped, d.paths[3].carried, d.paths[4].carried) == (2, 0, 1)


def test_loss_rate_is_the_configured_probability():
    d = direction(loss=0.25)
    fates = [d.forward(data_frame(ev=0xC000 + i % 8), 0.0).fate for i in range(4000)]
    dropped = fates.count(DROPPED)
    assert 800 < dropped < 1200, dropped  # 1000 expected, > 6 sigma margin


def test_ecn_mark_sets_ce_fixes_checksum_and_keeps_icrc_valid():
    frame = data_frame()
    assert L.check_frame(frame) == (True, True)
    assert frame[15] & 3 == L.ECN_ECT0
    marked = mark_ce(frame)
    assert marked[15] & 3 == L.ECN_CE and marked[15] >> 2 == frame[15] >> 2
    assert L.check_frame(marked) == (True, True)
    assert marked[24:26] != frame[24:26]
    changed = [i for i in range(len(frame)) if marked[i] != frame[i]]
    assert 15 in changed and set(changed) <= {15, 24, 25}, changed
    # a Not-ECT frame is never marked
    not_ect = bytes(L.write_packet(opcode=0x0A, dqpn=1, psn=1, va=0, rkey=1, dma_len=8,
                                   payload=bytes(8), ecn=L.ECN_NOT_ECT))
    assert mark_ce(not_ect) is None


def test_ecn_probability_marks_only_data_frames():
    d = direction(ecn_prob=1.0)
    v = d.forward(data_frame(), 0.0)
    assert v.ce and v.fate == DELIVERED and v.frame[15] & 3 == L.ECN_CE
    assert L.check_frame(v.frame) == (True, True)
    a = d.forward(ack_frame(), 0.0)
    assert not a.ce and a.frame == ack_frame()
    assert d.paths[3].marked == 1


def test_ecn_above_queue_threshold_like_sim_fabric():
    # 8 Gb/s path: a 1098-byte frame takes 1098 ns; threshold 2000 bytes queued
    d = direction(gbps=8.0, ecn_bytes=2000, delay_ns=100.0)
    frames = [data_frame(psn=i) for i in range(4)]
    verdicts = [d.forward(f, 0.0) for f in frames]  # a burst: the queue builds up
    size = len(frames[0])
    assert [v.ce for v in verdicts] == [False, False, True, True]  # queued 0, 1098, 2196, ...
    assert [v.arrival_ns for v in verdicts] == [size * (k + 1) + 100.0 for k in range(4)]
    # after the queue drained, no mark
    assert not d.forward(data_frame(psn=9), 10 * size).ce


def test_trim_on_overflow_cuts_payload_sets_dscp_and_keeps_headers():
    d = direction(gbps=8.0, queue_bytes=3000, trim=True)
    frames = [data_frame(psn=i) for i in range(4)]
    verdicts = [d.forward(f, 0.0) for f in frames]
    assert [v.fate for v in verdicts] == [DELIVERED, DELIVERED, TRIMMED, TRIMMED]
    t = verdicts[2].frame
    assert t == L.trim(frames[2])
    assert len(t) == L.header_len(0x07) and t[15] >> 2 == L.TRIM_DSCP_DEFAULT
    assert L.check_frame(t + bytes(4))[0]  # IPv4 checksum valid (no ICRC on a trimmed frame)
    assert t[:14] == frames[2][:14] and t[42:54] == frames[2][42:54]  # Eth and BTH kept
    assert not is_data_frame(t)
    # the trimmed frame takes only its header's time on the wire
    assert verdicts[3].arrival_ns == verdicts[2].arrival_ns + len(t)  # 1 byte/ns at 8 Gb/s
    # without trimming an overflow drops; ACKs are never trimmed
    d = direction(gbps=8.0, queue_bytes=3000)
    assert [d.forward(f, 0.0).fate for f in frames] == [DELIVERED, DELIVERED, DROPPED, DROPPED]
    d = direction(gbps=8.0, queue_bytes=100, trim=True)
    assert d.forward(ack_frame(), 0.0).fate == DELIVERED  # empty queue: fits
    assert d.forward(ack_frame(), 0.0).fate == DROPPED


def test_ipv6_frames_are_routed_marked_and_trimmed_as_ipv4_ones():
    """The fabric's decisions over IPv6: the path by the EV (the flow label and
    the UDP source port after the 40-byte header), CE in the traffic class (no checksum to fix, the
    ICRC still valid), a trim to the IPv6 headers with the trim DSCP and the ECN
    kept; ACKs are neither marked nor trimmed."""
    frame = data_frame(ev=0xC005, **V6)
    assert is_data_frame(frame) and not is_data_frame(bytes(L.ack_packet(dqpn=1, cum_psn=3,
                                                                         **V6)))
    marked = mark_ce(frame)
    assert L.ip_ecn(marked) == L.ECN_CE and L.ip_dscp(marked) == L.ip_dscp(frame)
    assert [i for i in range(len(frame)) if marked[i] != frame[i]] == [15]
    assert L.check_frame(marked) == (True, True)  # the ICRC masks the traffic class
    d = direction(ecn_prob=1.0, delay_ns=50.0)
    v = d.forward(frame, 0.0)
    assert (v.fate, v.path, v.ev, v.ce, v.frame) == (DELIVERED, 5, 0x12345C005, True, marked)
    d = direction(gbps=8.0, queue_bytes=3000, trim=True)
    verdicts = [d.forward(data_frame(psn=i, **V6), 0.0) for i in range(4)]
    assert [v.fate for v in verdicts] == [DELIVERED, DELIVERED, TRIMMED, TRIMMED]
    t = verdicts[2].frame
    assert len(t) == L.header_len(0x07, ipv6=True) and L.ip_dscp(t) == L.TRIM_DSCP_DEFAULT
    assert L.ip_ecn(t) == L.ECN_ECT0 and not is_data_frame(t)


def test_trim_probability():
    d = direction(trim_prob=1.0)
    v = d.forward(data_frame(), 0.0)
    assert v.fate == TRIMMED and v.reason == "trim" and len(v.frame) == L.header_len(0x07)
    assert d.forward(ack_frame(), 0.0).fate == DELIVERED
    assert d.paths[3].trimmed == 1


def test_reorder_adds_the_extra_delay():
    d = direction(reorder_prob=1.0, reorder_ns=3000.0, delay_ns=400.0)
    v = d.forward(data_frame(), 0.0)
    assert v.reordered and v.arrival_ns == 3400.0


def test_same_seed_same_decisions():
    runs = []
    for _ in range(2):
        d = direction(seed=5, loss=0.1, ecn_prob=0.1, trim_prob=0.1, reorder_prob=0.1,
                      reorder_ns=10.0)
        runs.append([d.forward(data_frame(ev=0xC000 + i % 8), float(i)) for i in range(300)])
    assert runs[0] == runs[1]


def test_bad_configuration_raises_value_error():
    fab = SysFabric([None, None], [None, None])
    with pytest.raises(ValueError, match="probability"):
        fab.set_loss(1.5)
    assert fab.paths()[0].loss == 0.0  # a rejected setting changes nothing
    with pytest.raises(ValueError, match="need a path rate"):
        fab.set_ecn(threshold_bytes=1000)
    with pytest.raises(ValueError, match="path must be in 0..7"):
        fab.set_path_up(8, False)
    with pytest.raises(ValueError, match="direction"):
        fab.set_path_up(1, False, direction=2)
    with pytest.raises(ValueError, match="after down_ns"):
        fab.schedule_path(3, 1000.0, 500.0)
    with pytest.raises(ValueError, match="routing"):
        SysFabric([None, None], [None, None], routing="ecmp")
    with pytest.raises(ValueError, match="at most 256 spines"):
        SysFabric([None, None], [None, None], routing="srv6", num_paths=257)
    assert SysFabric([None, None], [None, None], routing="srv6").directions[1].routing == "srv6"


def test_fault_schedule_and_capture_records():
    fab = SysFabric([None, None], [None, None], capture=True, keep_log=True)
    fab.schedule_path(3, 1000.0, 5000.0, direction=0)
    assert fab.schedule_events == [FaultEvent(1000.0, 3, False, 0), FaultEvent(5000.0, 3, True, 0)]
    fab.apply(fab.schedule_events[0], 1000.0)
    assert not fab.directions[0].paths[3].up and fab.directions[1].paths[3].up
    frame = data_frame(ev=0xC003)
    for now, direction_index in ((1200.0, 0), (1300.0, 1)):
        v = fab.directions[direction_index].forward(frame, now)
        fab.record(direction_index, now, frame, v)
    fab.apply(fab.schedule_events[1], 5000.0)
    assert fab.directions[0].paths[3].up
    assert [(c.time_ns, c.direction, c.path, c.fate) for c in fab.capture] == [
        (1200.0, 0, 3, DROPPED), (1300.0, 1, 3, DELIVERED)]
    assert fab.capture[0].delivered is None and fab.capture[1].delivered == frame
    assert [t for t, _ in fab.fault_log] == [1000.0, 5000.0]
    assert fab.counters()["nic0->nic1"][3]["dropped"] == 1


def test_capture_keeps_the_carrier_sent_and_the_frame_delivered():
    fab = SysFabric([None, None], [None, None], capture=True, routing="srv6")
    to_peer, carrier = srv6_pair(SPINE_USID_BASE + 6)
    fab.record(0, 10.0, carrier, fab.directions[0].forward(carrier, 10.0))
    c = fab.capture[0]
    assert (c.path, c.ev, c.sent, c.delivered) == (6, srv6_ev(SPINE_USID_BASE + 6), carrier,
                                                   to_peer)

"""sim/system/switch.py outside the simulator: switching on the destination
MAC, the spine path from the EV (explicit, hash and SRv6 routing), the egress
port's queue (incast from
several NICs: queueing at the port's rate, CE marks above the threshold,
trimming on overflow), path and plane failures, and bad configuration."""

import ipaddress

import pytest

from host_driver import layers as L
from hw.protocol import srv6_sport, stev_fields
from sim.fabric import SPINE_USID_BASE, Engine, Fabric
from sim.model.packet import L2_WIRE_EXTRA
from sim.system.fabric import DELIVERED, DROPPED, TRIMMED
from sim.system.switch import MAC_FIFO_BYTES, SwitchFabric

MACS = [f"02:00:00:00:00:{i + 1:02x}" for i in range(4)]


def frame(src=1, dst=0, ev=0xD003, n=1024, psn=5):
    return bytes(L.write_packet(opcode=0x07, dqpn=1, psn=psn, va=0x1000, rkey=7,
                                dma_len=4 * n, payload=bytes(range(256)) * (n // 256), ev=ev,
                                src_mac=MACS[src], dst_mac=MACS[dst],
                                src_ip=f"10.0.0.{src + 1}", dst_ip=f"10.0.0.{dst + 1}"))


def switch(nics=4, planes=2, **kw):
    return SwitchFabric([[None] * planes for _ in range(nics)],
                        [[None] * planes for _ in range(nics)], MACS[:nics], **kw)


def test_switches_on_the_destination_mac_and_sprays_on_the_ev():
    fab = switch(num_paths=4, delay_ns=100.0)
    for dst in (0, 2, 3):
        for ev in range(0xD000, 0xD008):
            to, v = fab.forward(1, 1, frame(1, dst, ev), 0.0)
            assert (to, v.fate, v.path, v.arrival_ns) == (dst, DELIVERED, ev % 4, 100.0)
    assert [s.carried for s in fab.spines[1]] == [6, 6, 6, 6]
    assert [s.carried for s in fab.spines[0]] == [0] * 4
    assert fab.plane_frames[1] == [0, 24]
    bad = bytearray(frame())
    bad[:6] = bytes.fromhex("020000000009")  # no NIC has this MAC
    to, v = fab.forward(1, 0, bytes(bad), 0.0)
    assert (to, v.fate, v.reason, fab.no_route) == (None, DROPPED, "no_route", 1)


def golden_paths(routing, num_paths, planes=2):
    """The golden model's fabric with the switch's four NICs as hosts."""
    model = Fabric(Engine(), planes=planes, paths_per_plane=num_paths, routing=routing)
    return model, [model.add_host(f"nic{i}") for i in range(4)]


def test_hash_routing_takes_the_golden_models_paths():
    """Hash routing hashes (source NIC, destination NIC, plane, EV), the EV as
    the frame carries it: a 16-bit EV's paths are the golden model's (pinned
    there), and so are a STEV EV's, whose flow-label bits spread frames with
    one source port over the paths."""
    fab = switch(num_paths=4, routing="hash")
    model, hosts = golden_paths("hash", 4)
    for src, dst, plane in ((1, 0, 1), (2, 3, 0), (3, 1, 1)):
        for ev in range(0xD000, 0xD010):
            _, v = fab.forward(src, plane, frame(src, dst, ev), 0.0)
            assert v.path == model.path_of(hosts[src], hosts[dst], plane, ev)
    evs = range(0xD000, 0xD008)
    assert [fab.forward(2, 0, frame(2, 3, ev), 0.0)[1].path for ev in evs] == [
        model.path_of(hosts[2], hosts[3], 0, ev) for ev in evs] == [0, 2, 0, 2, 1, 3, 1, 3]
    paths = set()
    for ev in [label << 16 | 0xD000 for label in range(1, 17)]:
        sport, label = stev_fields(ev)
        _, v = fab.forward(1, 0, v6_frame(1, 0, sport, flow_label=label), 0.0)
        assert (v.ev, v.path) == (ev, model.path_of(hosts[1], hosts[0], 0, ev))
        paths.add(v.path)
    assert len(paths) > 2, paths


LOCATOR = 0xFD00_0000


def v6_addr(nic: int) -> str:
    """NIC ``nic``'s address on an SRv6 fabric: locator:uSID::, uSID 0x0B00 + nic."""
    return str(ipaddress.IPv6Address(LOCATOR << 96 | (0x0B00 + nic) << 80))


def v6_frame(src, dst, ev, flow_label=0, psn=5):
    return bytes(L.write_packet(opcode=0x07, dqpn=1, psn=psn, va=0x1000, rkey=7, dma_len=64,
                                payload=bytes(64), ev=ev, src_mac=MACS[src],
                                dst_mac=MACS[dst], src_ip=v6_addr(src), dst_ip=v6_addr(dst),
                                flow_label=flow_label))


def srv6_pair(src, dst, first_usid):
    """(the frame to NIC ``dst``, the carrier NIC ``src`` sends on the EV
    through ``first_usid`` to it)."""
    ev = first_usid << 48 | (0x0B00 + dst) << 32
    to_peer = v6_frame(src, dst, srv6_sport(ev))
    return to_peer, L.srv6_frame(to_peer, ev)


def test_srv6_routing_takes_the_first_usids_spine_and_consumes_it():
    """Spine k of each plane has uSID SPINE_USID_BASE + k: a carrier takes it
    and leaves it with that uSID consumed (the frame to the peer, ICRC good);
    a uSID in the spines' block that names no spine has no route (counted);
    any other frame is hashed as with hash routing."""
    fab = switch(num_paths=4, delay_ns=100.0, routing="srv6")
    for k in range(4):
        to_peer, carrier = srv6_pair(1, 2, SPINE_USID_BASE + k)
        to, v = fab.forward(1, 1, carrier, 0.0)
        assert (to, v.fate, v.path, v.frame) == (2, DELIVERED, k, to_peer)
        assert L.check_frame(v.frame) == (True, True)
    assert [s.carried for s in fab.spines[1]] == [1] * 4
    _, carrier = srv6_pair(1, 2, SPINE_USID_BASE + 4)
    to, v = fab.forward(1, 1, carrier, 0.0)
    assert (to, v.fate, v.reason, v.path, fab.no_route) == (None, DROPPED, "no_route", None, 1)
    assert fab.uplinks[1][1].carried == 4  # a frame with no route takes no uplink
    model, hosts = golden_paths("hash", 4)
    _, not_a_spine = srv6_pair(1, 2, 0x0B03)
    for f in (frame(1, 2, 0xD005), v6_frame(1, 2, 0xD005), not_a_spine):
        to, v = fab.forward(1, 0, f, 0.0)
        assert (to, v.fate, v.frame) == (2, DELIVERED, f)
        assert v.path == model.path_of(hosts[1], hosts[2], 0, v.ev)


def test_incast_queues_at_the_egress_port_marks_then_trims():
    """Three senders, each at the port's rate, into one port: the queue grows by
    two frames' worth per round, frames above ecn_bytes are marked, frames that
    would overflow queue_bytes are trimmed, other ports see none of it."""
    fab = switch(delay_ns=0.0)
    size = len(frame())
    wire = size + L2_WIRE_EXTRA
    fab.set_port(gbps=8.0, queue_bytes=8 * wire, ecn_bytes=2 * wire, trim=True, nic=0)
    ser = (size + L2_WIRE_EXTRA) * 8 / 8.0  # ns per frame at 8 Gb/s, with FCS, preamble, gap
    fates = []
    for r in range(8):
        for src in (1, 2, 3):
            to, v = fab.forward(src, 0, frame(src, 0, 0xD000 + r), r * ser)
            fates.append((v.fate, v.ce))
    port = fab.ports[0][0]
    assert fates[0] == (DELIVERED, False)
    assert (DELIVERED, True) in fates and fates[-1][0] == TRIMMED
    assert port.marked == sum(ce for _, ce in fates)
    assert port.trimmed == sum(f == TRIMMED for f, _ in fates) > 0
    assert port.max_queue_bytes <= 8 * wire
    fab.set_port(gbps=8.0, nic=3)
    to, v = fab.forward(1, 0, frame(1, 3), 8 * ser)  # another port: no queue
    assert (v.fate, v.ce, v.arrival_ns) == (DELIVERED, False, 8 * ser + ser)
    # acknowledgements (not data) are never marked or trimmed: dropped on overflow
    ack = bytes(L.ack_packet(dqpn=1, cum_psn=3, bitmap=0, ev=0xC001, src_mac=MACS[1],
                             dst_mac=MACS[0], src_ip="10.0.0.2", dst_ip="10.0.0.1"))
    fab.set_port(gbps=8.0, queue_bytes=wire, nic=0, plane=1)
    fab.forward(2, 1, frame(2, 0), 0.0)
    _, v = fab.forward(1, 1, ack, 0.0)
    assert (v.fate, v.reason) == (DROPPED, "overflow")


def test_uplink_serialises_a_nics_frames_on_a_plane():
    """A NIC's port runs at its rate both ways: frames the NIC puts on a plane
    back to back leave its uplink one frame time apart, then take the path's
    delay; its other plane's uplink is apart."""
    fab = switch(delay_ns=100.0)
    fab.set_port(gbps=8.0, nic=1)
    f = frame(1, 0)
    ser = (len(f) + L2_WIRE_EXTRA) * 8 / 8.0
    hops = [fab.ingress(1, 0, f, 0.0) for _ in range(3)] + [fab.ingress(1, 1, f, 0.0)]
    assert [h.at_port for h in hops] == [ser + 100, 2 * ser + 100, 3 * ser + 100, ser + 100]
    assert [h.seq for h in hops] == [1, 2, 3, 4]
    assert fab.uplinks[1][0].carried == 3 and fab.uplinks[1][0].max_queue_bytes == 2 * (
        len(f) + L2_WIRE_EXTRA)
    # NIC 0's port has no rate: through its port at once
    dst, v = fab.egress(hops[0])
    assert (dst, v.fate, v.arrival_ns) == (0, DELIVERED, ser + 100)


def test_a_paced_mac_is_the_uplink():
    """With the MACs as wires (beat_ns), a sink that can be paced (simhw's
    mac_tx) is set to its port's rate and wire overhead by set_port (without,
    it is not); a frame that comes with its departure from such a MAC
    reaches the spine at that time, not through the uplink's queue (which
    would count its wire time twice)."""
    paced = []

    class Sink:
        def pace(self, gbps, overhead, fifo_bytes):
            paced.append((gbps, overhead, fifo_bytes))

    sinks = [[Sink(), None] for _ in range(2)]
    SwitchFabric(sinks, [[None, None] for _ in range(2)], MACS[:2]).set_port(gbps=8.0)
    assert paced == []
    fab = SwitchFabric(sinks, [[None, None] for _ in range(2)], MACS[:2], delay_ns=100.0,
                       beat_ns=8.0)
    fab.set_port(gbps=8.0, nic=1)
    assert paced == [(8.0, L2_WIRE_EXTRA, MAC_FIFO_BYTES)]  # plane 0's sink, NIC 1
    f = frame(1, 0)
    hops = [fab.ingress(1, 0, f, 0.0, departure=d) for d in (500.0, 1700.0)]
    assert [h.at_port for h in hops] == [600.0, 1800.0]
    assert fab.uplinks[1][0].carried == 2 and fab.uplinks[1][0].max_queue_bytes == 0


def test_a_path_or_a_plane_down_loses_its_frames_only():
    fab = switch(num_paths=4)
    fab.set_path_up(2, False, plane=0)
    assert fab.forward(1, 0, frame(ev=0xD002), 0.0)[1].reason == "down"
    assert fab.forward(1, 1, frame(ev=0xD002), 0.0)[1].fate == DELIVERED
    assert fab.forward(1, 0, frame(ev=0xD001), 0.0)[1].fate == DELIVERED
    fab.set_plane_up(1, False)
    assert fab.forward(1, 1, frame(ev=0xD001), 0.0)[1].reason == "plane_down"
    fab.set_plane_up(1, True)
    assert fab.forward(1, 1, frame(ev=0xD001), 0.0)[1].fate == DELIVERED


def test_a_failure_takes_the_frames_that_reach_the_switch_after_it():
    """A frame's fate is the switch's and its path's state as its last bit
    leaves the uplink (``at_switch``), as the golden model's core links
    decide it, not as the NIC hands it over: a frame still in a paced MAC's
    FIFO or on the uplink when the plane fails is lost; one already through
    the switch is not. The frames lost this way still took their uplink."""
    fab = switch(num_paths=4, delay_ns=100.0)
    clock = [0.0]
    fab._clock = lambda: clock[0]
    through = fab.ingress(1, 1, frame(ev=0xD001), 0.0, departure=400.0)
    queued = fab.ingress(1, 1, frame(ev=0xD001), 0.0, departure=900.0)
    on_path = fab.ingress(1, 0, frame(ev=0xD002), 0.0, departure=900.0)
    assert (queued.at_switch, fab.uplinks[1][1].carried) == (900.0, 2)
    clock[0] = 500.0  # after the first frame reached the switch, before the second
    fab.set_plane_up(1, False)
    fab.set_path_up(2, False, plane=0)
    assert fab.egress(through)[1].fate == DELIVERED
    assert fab.egress(queued)[1].reason == "plane_down"
    assert fab.egress(on_path)[1].reason == "down"
    assert fab.spines[1][1].dropped == fab.spines[1][1].carried == 1
    clock[0] = 1000.0  # back up: a frame handed over while down, through the switch after
    while_down = fab.ingress(1, 1, frame(ev=0xD001), 800.0, departure=1200.0)
    fab.set_plane_up(1, True)
    assert fab.egress(while_down)[1].fate == DELIVERED


def test_bad_configuration_raises_value_error():
    with pytest.raises(ValueError, match="at least two NICs"):
        SwitchFabric([[None]], [[None]], MACS[:1])
    with pytest.raises(ValueError, match="must differ"):
        SwitchFabric([[None]] * 2, [[None]] * 2, [MACS[0], MACS[0]])
    with pytest.raises(ValueError, match="is not a MAC address"):
        SwitchFabric([[None]] * 2, [[None]] * 2, [MACS[0], "02:00"])
    with pytest.raises(ValueError, match="one sink and one source per plane"):
        SwitchFabric([[None], [None, None]], [[None]] * 2, MACS[:2])
    fab = switch()
    with pytest.raises(ValueError, match="gbps must be > 0"):
        fab.set_port(gbps=0)
    with pytest.raises(ValueError, match="plane must be in 0..1"):
        fab.set_port(gbps=8.0, plane=2)
    with pytest.raises(ValueError, match="nic must be in 0..3"):
        fab.set_port(gbps=8.0, nic=4)
    with pytest.raises(ValueError, match="path must be in 0..7"):
        fab.set_path_up(8, False)
    with pytest.raises(ValueError, match="routing must be one of"):
        switch(routing="ecmp")

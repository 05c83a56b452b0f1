"""sim/system/trace.py: frames named alike on both fabrics, a capture's fates
replayed frame by frame."""

from __future__ import annotations

from types import SimpleNamespace

from host_driver import layers as L
from sim.model.packet import ACK, DATA, PROBE_REQ, Packet
from sim.system.demo import data_frame_info
from sim.system.fabric import DELIVERED, DROPPED, TRIMMED
from sim.system.trace import FateTrace, frame_name, packet_name


def _data(psn, dqpn=3):
    return bytes(L.write_packet(opcode=0x06, dqpn=dqpn, psn=psn, va=0, rkey=1, dma_len=64,
                                payload=bytes(64)))


def _ack(cum, dqpn=5):
    return bytes(L.ack_packet(dqpn=dqpn, cum_psn=cum))


def _packet(kind, dqpn, psn):
    pkt = Packet(kind, "a", "b", 0, 0xC000, dqpn)
    pkt.psn = psn
    return pkt


def test_names():
    assert frame_name(_data(0xFFFFFE)) == ("data", 3, 0xFFFFFE)
    assert frame_name(_ack(77)) == ("ack", 5, 77)
    probe = bytes(L.probe_packet(response=False, dqpn=1, probe_id=2, ev=0xC001, timestamp=3))
    assert frame_name(probe) is None
    assert frame_name(b"\x00" * 60) is None
    v6 = dict(src_ip="fd00::1", dst_ip="fd00::2")
    v6_data = bytes(L.write_packet(opcode=0x07, dqpn=8, psn=12, va=0, rkey=1, dma_len=64,
                                   payload=bytes(32), **v6))
    assert frame_name(v6_data) == ("data", 8, 12)
    assert frame_name(L.trim(v6_data)) == ("data", 8, 12)
    assert frame_name(bytes(L.ack_packet(dqpn=6, cum_psn=4, **v6))) == ("ack", 6, 4)
    assert data_frame_info(v6_data) == (0x07, 12, 32)
    assert data_frame_info(L.trim(v6_data)) == (0x07, 12, 0)
    assert packet_name(_packet(DATA, 3, 9)) == ("data", 3, 9)
    assert packet_name(_packet(ACK, 5, 9)) == ("ack", 5, 9)
    assert packet_name(_packet(PROBE_REQ, 5, 0)) is None


def test_replay_applies_each_fate_to_the_same_transmission():
    def captured(direction, frame, fate):
        return SimpleNamespace(direction=direction, sent=frame, fate=fate)

    # PSN 1 dropped on its first transmission, delivered on its second; PSN 2 trimmed;
    # an ACK dropped the other way
    trace = FateTrace.from_capture([
        captured(0, _data(1), DROPPED), captured(0, _data(2), TRIMMED),
        captured(1, _ack(0), DROPPED), captured(0, _data(1), DELIVERED),
    ])
    assert trace.count(0, "data", DROPPED) == 1 and trace.sent(0, "data")[("data", 3, 1)] == 2
    paths = [SimpleNamespace(drop_fn=None) for _ in range(2)]
    control = SimpleNamespace(directions=[SimpleNamespace(paths=paths[:1]),
                                          SimpleNamespace(paths=paths[1:])])
    replay = trace.replay(control)
    decide0, decide1 = paths[0].drop_fn, paths[1].drop_fn
    first, trimmed, again = _packet(DATA, 3, 1), _packet(DATA, 3, 2), _packet(DATA, 3, 1)
    assert decide0(first, 0.0) is True
    assert decide0(trimmed, 0.0) is False and trimmed.trimmed
    assert decide1(_packet(ACK, 3, 0), 0.0) is False  # not the ACK the RTL sent (DestQP)
    assert decide1(_packet(ACK, 5, 0), 0.0) is True
    assert decide0(again, 0.0) is False and not again.trimmed
    assert decide0(_packet(DATA, 3, 1), 0.0) is False  # a third copy: the RTL sent two
    assert replay.extra == [[(("data", 3, 1), 2)], [(("ack", 3, 0), 0)]]
    assert replay.applied[0] == {("data", DROPPED): 1, ("data", TRIMMED): 1,
                                 ("data", DELIVERED): 1}
    assert replay.sent(0, "data") != trace.sent(0, "data")  # the extra copy shows

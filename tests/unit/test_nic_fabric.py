"""tests/system/fabric.py outside the simulator: EV extraction from frames and
path choice, held to sim/fabric's."""

import random

import pytest

from host_driver import layers as L
from sim.fabric import Engine, Fabric
from tests.system.fabric import Direction, Path, frame_ev


def test_frame_ev_reads_the_udp_source_port():
    frame = bytes(L.write_packet(opcode=0x0A, dqpn=1, psn=5, va=0x1000, rkey=7, dma_len=100,
                                 payload=b"x" * 100, ev=0xC123))
    assert frame_ev(frame) == 0xC123
    ack = bytes(L.ack_packet(dqpn=1, cum_psn=3, bitmap=0, ev=0xD001))
    assert frame_ev(ack) == 0xD001
    assert frame_ev(frame[:30]) is None  # truncated
    assert frame_ev(b"\xff" * 12 + b"\x86\xdd" + bytes(60)) is None  # not IPv4


@pytest.mark.parametrize("routing", ["explicit", "hash"])
def test_path_choice_matches_sim_fabric(routing):
    fab = Fabric(Engine(), paths_per_plane=8, routing=routing)
    hosts = [fab.add_host("a"), fab.add_host("b")]
    for src in (0, 1):
        d = Direction("d", src, 1 - src, [Path() for _ in range(8)], random.Random(1), routing)
        for ev in list(range(0xC000, 0xC040)) + [0, 1, 0xFFFF]:
            assert d.path_of(ev) == fab.path_of(hosts[src], hosts[1 - src], 0, ev), (src, ev)
    assert d.path_of(None) == 0

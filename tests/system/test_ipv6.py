"""RoCEv2 over IPv6 between two RTL NICs built with ``ipv6`` (sim/system/top.py
``NIC_PARAMS``): QPs bound over IPv6 beside QPs bound over IPv4 on the same
NICs, and an IPv6 path that fails and comes back through IPv6 probes.

Every frame is checked on the wire (the fabric's capture): its family is its
QP's, and the ICRC is good as the host layers and scapy.contrib.roce compute
it (IPv6's masked fields included). Each case writes its capture to a pcap in its run
directory, and ``test_ipv6`` runs tshark with our dissector over them
(tests/dissector_check.py: every frame MRC, no expert error but IPv6's zero
UDP checksum, every field as scapy reads it; skipped without tshark).

On tests/system/test_two_nic.py's build (sim_build/system_two_nic_sim, the
same top and options), in a simulator run of its own.
"""

from __future__ import annotations

import cocotb
import scapy.contrib.roce as scapy_roce
from scapy.layers.inet import IP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import PcapReader, wrpcap

from host_driver import layers as L
from host_driver.driver import Completion, EvState
from sim.cocotb_runner import SIM_BUILD
from sim.system.harness import IPS, IPS6, SystemTB
from sim.system.simhw import run_two_nic
from sim.system.transfers import (
    check_memory,
    complete_all,
    log_case,
    packets_of,
    transfer,
    wait_ev_state,
)
from tests import seeds
from tests.dissector_check import TSHARK, check_frames


def save_capture(tb, name):
    """The fabric's capture, as sent, into ``name``.pcap in the run directory."""
    wrpcap(f"{name}.pcap", [Ether(f.sent) for f in tb.fabric.capture])


def frames_by_qpn(tb):
    """{(direction, BTH DestQP): [frames]} of the fabric's capture."""
    out = {}
    for f in tb.fabric.capture:
        out.setdefault((f.direction, Ether(f.sent)[L.BTH].dqpn), []).append(f.sent)
    return out


BTH_FIELDS = ("opcode", "padcount", "pkey", "fecn", "becn", "dqpn", "ackreq", "psn")  # both's


def scapy_roce_rebuilds(raw: bytes) -> bool:
    """scapy.contrib.roce, given the frame's headers, BTH fields and the rest,
    computes its ICRC: the rebuilt frame is the frame."""
    off = L.bth_offset(raw)
    ours = Ether(raw)[L.BTH]
    rebuilt = bytes(Ether(raw[:off]) / scapy_roce.BTH(**{n: getattr(ours, n) for n in BTH_FIELDS})
                    / Raw(raw[off + L.HDR_BTH : -4]))
    return rebuilt == raw


def check_family(frames, v6, src, dst):
    """Each frame goes over IPv6 (``v6``) or IPv4 from ``src`` to ``dst``, with
    a good ICRC, as ``L.check_frame`` and scapy.contrib.roce compute it."""
    assert frames
    for raw in frames:
        pkt = Ether(raw)
        ip = pkt[IPv6] if v6 else pkt[IP]
        assert (IPv6 in pkt) == v6 and (ip.src, ip.dst) == (src, dst), pkt.summary()
        assert L.check_frame(raw) == (True, True), pkt.summary()
        assert scapy_roce_rebuilds(raw), pkt.summary()


@cocotb.test()
async def test_ipv6_and_ipv4_qps_side_by_side(dut):
    """Connection 0 over IPv6, connection 1 over IPv4, on the same two NICs:
    WRITEs both ways on both, byte exact, every WQE SUCCESS, nothing
    retransmitted; the data and the ACKs of each connection go over its
    family, between the NICs' addresses of that family."""
    tb = SystemTB(dut, seed=seeds.of(61))
    tb.fabric.capture_enabled = True
    await tb.init()
    await tb.connect(qps=2, sq_log2=4, ipv6=[True, False])
    sizes = [8 * 1024] * 4
    runs = {}
    for src in (0, 1):
        for k in (0, 1):
            conn = k if src == 0 else tb.ends[0].conns[k].peer
            runs[src, conn] = await transfer(tb, src, sizes, conn=conn)
    for (src, conn), (posted, payload, early) in runs.items():
        cqes = await complete_all(tb.ends[src], posted, early, conn=conn)
        assert [(c.wr_id, c.status) for c in cqes] == [
            (w, Completion.SUCCESS) for w, _, _ in posted]
        check_memory(tb, 1 - src, payload, conn=tb.ends[src].conns[conn].peer)
    frames = frames_by_qpn(tb)
    for k, v6 in ((0, True), (1, False)):
        a, b = tb.ends[0].conns[k], tb.ends[1].conns[tb.ends[0].conns[k].peer]
        addrs = IPS6 if v6 else IPS
        # direction 0: NIC 0's data to b's QP and its ACKs to b's sends
        check_family(frames[0, b.qp.qpn], v6, addrs[0], addrs[1])
        check_family(frames[1, a.qp.qpn], v6, addrs[1], addrs[0])
    for i in (0, 1):
        c = await tb.counters(i)
        assert c["rel.retx_timeout"] == c["rel.retx_sack"] == c["rel.retx_nak"] == 0, c
        assert c["rx.placed"] == 2 * packets_of(sizes), c
    save_capture(tb, "side_by_side")
    log_case(dut, "ipv6 and ipv4", 0, frames={f"{d}/{q}": len(v) for (d, q), v in
                                              frames.items()})


@cocotb.test()
async def test_ipv6_path_down_then_up(dut):
    """An IPv6 connection: path 3 (EV 3) of NIC 0 -> NIC 1 goes down, its
    losses make EV 3 ASSUMED_BAD and the transfer completes byte exact on the
    other paths; once the path is up, an IPv6 probe and its IPv6 answer bring
    EV 3 back to GOOD. Every probe and answer went over IPv6."""
    tb = SystemTB(dut, seed=seeds.of(62))
    tb.fabric.capture_enabled = True
    await tb.init()
    await tb.connect(sq_log2=4, timeout=9, probe_period=4000, ipv6=True)
    a = tb.ends[0]
    tb.fabric.set_path_up(3, False, direction=0)
    posted, payload, early = await transfer(tb, 0, [32 * 1024] * 4)
    await complete_all(a, posted, early)
    check_memory(tb, 1, payload)
    assert (await a.dev.ev_states(a.qp))[3] == EvState.ASSUMED_BAD
    tb.fabric.set_path_up(3, True, direction=0)
    assert await wait_ev_state(a, 3, EvState.GOOD), "probe did not bring EV 3 back"
    events = await a.dev.read_ev_events()
    assert [(e.ev_index, e.old, e.new) for e in events if e.ev_index == 3] == [
        (3, EvState.GOOD, EvState.ASSUMED_BAD), (3, EvState.ASSUMED_BAD, EvState.GOOD)], events
    probes = [f.sent for f in tb.fabric.capture
              if Ether(f.sent)[L.BTH].opcode in L.PROBE_OPCODES]
    requests = [raw for raw in probes if Ether(raw)[L.BTH].opcode == L.OP_PROBE_REQ]
    assert requests and len(probes) > len(requests), "no probe answered"
    for raw in probes:
        pkt = Ether(raw)
        assert IPv6 in pkt and L.check_frame(raw) == (True, True), pkt.summary()
    check_family([f.sent for f in tb.fabric.capture if f.direction == 0], True,
                 IPS6[0], IPS6[1])
    save_capture(tb, "path_down_then_up")
    log_case(dut, "ipv6 path down then up", 0, probes=len(probes))


IPV6_TESTS = ["test_ipv6_and_ipv4_qps_side_by_side", "test_ipv6_path_down_then_up"]


def run(testcases, tag):
    run_two_nic("tests.system.test_ipv6", testcases, tag)


def test_ipv6(tmp_path):
    run(IPV6_TESTS, "ipv6")
    if TSHARK is None:
        return  # the dissector's check needs tshark (tests/dissector_check.py)
    frames = []
    for name in ("side_by_side", "path_down_then_up"):
        with PcapReader(str(SIM_BUILD / "system_two_nic_sim" / "ipv6" / f"{name}.pcap")) as r:
            frames += [bytes(p) for p in r]
    assert any(L.is_ipv6(f) for f in frames) and not all(L.is_ipv6(f) for f in frames)
    check_frames(frames, tmp_path / "rtl.pcap")

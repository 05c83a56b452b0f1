"""MRC's EV formats between two RTL NICs built with ``ipv6`` and 64-bit EV
entries (sim/system/top.py ``NIC_PARAMS``), over IPv6:

- STEV: each QP's EVs differ in their flow label only (one source port), on
  a fabric that hashes the EV as the frame carries it (flow label and source
  port): the paths spread on the flow label. NIC 0's EVs are EXPLICIT, NIC
  1's AUTO (derived by its EV generator in the flow label);
- SRv6: each EV is a uSID list (a spine's uSID, then the peer NIC's own), on
  a fabric that routes on it (``routing="srv6"``: the spine its first uSID
  names, which consumes it). NIC 0's EVs are AUTO (its EV generator takes
  the spines' uSIDs from the template's first on), NIC 1's GENERATED (the
  spines' uSIDs from the parameters). SRv6's EXPLICIT EVs are the TX
  engine's (tests/hw/test_tx_engine.py ``test_ev_formats``). One
  path fails mid-transfer: its EV goes ASSUMED_BAD, the transfer completes
  byte exact on the others, and once the path is back an SRv6 probe brings
  the EV back to GOOD.

Every data frame and probe is checked on the wire: its EV where its format
puts it, the ICRC good where the receiver checks it (for SRv6, over the
peer's address the fabric delivers). The UDP format over IPv6 is
tests/system/test_ipv6.py's. ``test_ev_formats`` runs tshark with our
dissector (the SRv6 locator set) over the captures.

On tests/system/test_two_nic.py's build (sim_build/system_two_nic_sim), in a
simulator run of its own.
"""

from __future__ import annotations

import ipaddress

import cocotb
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.utils import PcapReader, wrpcap

from host_driver import layers as L
from host_driver.driver import Completion, EvProfile, EvState
from hw.protocol import srv6_carrier, srv6_sport, srv6_usids, stev_fields
from sim.cocotb_runner import SIM_BUILD
from sim.fabric.routing import SPINE_USID_BASE
from sim.system.harness import IPS6, SystemTB
from sim.system.pairs import SRV6_LOCATOR, srv6_evs
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

EVS = 8
SIZES = [16 * 1024] * 4


def data_frames(tb, direction):
    """The WRITE frames the fabric captured in ``direction``."""
    return [f for f in tb.fabric.capture if f.direction == direction
            and Ether(f.sent)[L.BTH].opcode in L.WRITE_OPCODES]


def save_capture(tb, name, delivered=False):
    """The fabric's capture (as sent, and with ``delivered`` as delivered too)
    into ``name``.pcap in the run directory."""
    frames = [f.sent for f in tb.fabric.capture]
    if delivered:
        frames += [f.delivered for f in tb.fabric.capture if f.delivered is not None]
    wrpcap(f"{name}.pcap", [Ether(raw) for raw in frames])


async def transfer_both_ways(tb):
    """WRITEs of SIZES from each NIC to the other: every WQE SUCCESS, the
    peer's memory byte exact."""
    runs = {src: await transfer(tb, src, SIZES) for src in (0, 1)}
    for src, (posted, payload, early) in runs.items():
        cqes = await complete_all(tb.ends[src], posted, early)
        assert [(c.wr_id, c.status) for c in cqes] == [
            (w, Completion.SUCCESS) for w, _, _ in posted]
        check_memory(tb, 1 - src, payload)


@cocotb.test()
async def test_stev_spreads_on_the_flow_label(dut):
    """STEV EVs that share a source port and differ in the flow label: every
    data frame carries one of its QP's EVs (flow label << 16 | source port),
    each EV is used, a hashing fabric spreads them over several paths, and
    the ICRC is good (the flow label is masked); the ACKs echo the data's
    flow labels (so they spread too); nothing is retransmitted."""
    tb = SystemTB(dut, seed=seeds.of(71), routing="hash")
    tb.fabric.capture_enabled = True
    await tb.init()
    explicit = [(0x5A00 + 0x11 * k) << 16 | 0xC000 for k in range(EVS)]
    await tb.connect(ipv6=True, evs=[EvProfile.explicit(explicit, ev_format="stev"),
                                     EvProfile.auto(ev_format="stev", template=0xC000)])
    evs = [explicit, list(tb.ends[1].qp.evs.values)]
    assert len(set(evs[1])) == EVS and all(ev & 0xFFFF == 0xC000 and ev >> 30 == 0b11
                                           for ev in evs[1]), [hex(ev) for ev in evs[1]]
    await transfer_both_ways(tb)
    for direction in (0, 1):
        frames = data_frames(tb, direction)
        carried = set()
        for f in frames:
            ev = L.flow_label(f.sent) << 16 | Ether(f.sent)[L.UDP].sport
            assert stev_fields(ev) == (0xC000, ev >> 16) and ev in evs[direction], hex(ev)
            assert L.check_frame(f.sent) == (True, True), Ether(f.sent).summary()
            carried.add(ev)
        assert carried == set(evs[direction]), "an EV was not sprayed on"
        assert len({f.path for f in frames}) > 1, "the flow label did not spread the paths"
        # the receiver's ACKs echo the EV of the data they answer, flow label too
        acks = [f for f in tb.fabric.capture if f.direction == 1 - direction
                and Ether(f.sent)[L.BTH].opcode == L.OP_ACKNOWLEDGE]
        labels = {L.flow_label(f.sent) for f in acks}
        assert labels <= {ev >> 16 for ev in evs[direction]} and len(labels) > 1, labels
    for i in (0, 1):
        c = await tb.counters(i)
        assert c["rel.retx_timeout"] == c["rel.retx_sack"] == c["rel.retx_nak"] == 0, c
        assert c["rx.placed"] == packets_of(SIZES), c
    save_capture(tb, "stev")
    log_case(dut, "stev", 0, paths=len({f.path for f in data_frames(tb, 0)}))


def check_srv6_frame(f, dst_nic, src_nic):
    """A frame NIC ``src_nic`` sent on an SRv6 EV to NIC ``dst_nic``: its
    destination the carrier of its EV (a spine's uSID, then the peer's), its
    source port the EV's, the path the spine its first uSID names; delivered
    with that uSID consumed, to the peer's address, its ICRC good there."""
    pkt = Ether(f.sent)
    usids = srv6_usids(f.ev)
    peer = int(ipaddress.IPv6Address(IPS6[dst_nic]))
    assert L.ipv6_dst(f.sent) == srv6_carrier(peer, f.ev), pkt.summary()
    assert pkt[IPv6].src == IPS6[src_nic] and pkt[L.UDP].sport == srv6_sport(f.ev)
    assert f.path == usids[0] - SPINE_USID_BASE, (f.path, [hex(u) for u in usids])
    if f.delivered is not None:
        assert L.ipv6_dst(f.delivered) == peer, Ether(f.delivered).summary()
        assert L.check_frame(f.delivered) == (True, True), Ether(f.delivered).summary()


@cocotb.test()
async def test_srv6_routes_on_the_usids_around_a_failed_path(dut):
    """SRv6 EVs on a fabric that routes on their uSIDs, NIC 0's AUTO (QP q's
    EV i through spine (q + i) mod 8) and NIC 1's GENERATED. Path 3 of NIC 0 ->
    NIC 1 goes down before a transfer: its losses, found by SACK, make the EV
    through spine 3 ASSUMED_BAD, the transfer completes byte exact on the
    other EVs, and no
    data frame is delivered on path 3; once the path is up, an SRv6 probe
    on that EV (carried through spine 3) and its answer bring it back to
    GOOD. Every data frame and probe of either NIC is a carrier to its
    peer, on the path its first uSID names. A carrier that reaches NIC 1
    with its uSIDs unconsumed (a data frame as NIC 0 sent it), or whose
    address is the peer's with a uSID left after the peer's own, is dropped
    and counted, writing nothing: its ICRC covers the peer's own address, so
    the parser drops it first (`parser_bad_icrc`)."""
    tb = SystemTB(dut, seed=seeds.of(72), routing="srv6")
    tb.fabric.capture_enabled = True
    await tb.init()
    evs = [srv6_evs(1, EVS), srv6_evs(0, EVS)]
    auto = EvProfile.auto(ev_format="srv6", template=evs[0][0])
    generated = EvProfile.generated(min_ev=SPINE_USID_BASE, max_ev=SPINE_USID_BASE + EVS - 1,
                                    count=EVS, ev_format="srv6", template=evs[1][0] & (
                                        (1 << 48) - 1))
    await tb.connect(ipv6=True, timeout=9, probe_period=4000, sack_threshold=1,
                     evs=[auto, generated])
    a = tb.ends[0]
    evs[0] = [evs[0][(a.qp.qpn + i) % EVS] for i in range(EVS)]
    assert list(a.qp.evs.values) == evs[0], [hex(ev) for ev in a.qp.evs.values]
    assert list(tb.ends[1].qp.evs.values) == evs[1] == list(generated.values)
    bad = evs[0].index(srv6_evs(1, EVS)[3])  # the EV through spine 3
    tb.fabric.set_path_up(3, False, direction=0)
    await transfer_both_ways(tb)
    assert (await a.dev.ev_states(a.qp))[bad] == EvState.ASSUMED_BAD
    assert not [f for f in data_frames(tb, 0) if f.path == 3 and f.delivered is not None]
    tb.fabric.set_path_up(3, True, direction=0)
    assert await wait_ev_state(a, bad, EvState.GOOD), "no probe brought spine 3's EV back"
    for direction in (0, 1):
        frames = data_frames(tb, direction)
        assert {f.ev for f in frames} <= set(evs[direction])
        for f in frames:
            check_srv6_frame(f, 1 - direction, direction)
    probes = [f for f in tb.fabric.capture if f.direction == 0
              and Ether(f.sent)[L.BTH].opcode == L.OP_PROBE_REQ]
    assert any(f.ev == evs[0][bad] and f.delivered is not None for f in probes), \
        "no probe on spine 3's EV went through spine 3"
    for f in probes:
        check_srv6_frame(f, 1, 0)
    assert tb.fabric.directions[0].no_route == 0
    before = await tb.counters(1)
    sent = data_frames(tb, 0)[-1].sent
    tb.fabric.inject(1, sent)
    tb.fabric.inject(1, L.with_ipv6_dst(sent, L.ipv6_dst(sent) | 0x0E05 << 16))
    await tb.cycles(2000)
    after = await tb.counters(1)
    assert after["rx.parser_bad_icrc"] - before["rx.parser_bad_icrc"] == 2, {
        k: after[k] - before[k] for k in after if after[k] != before.get(k)}
    assert after["rx.placed"] == before["rx.placed"]
    save_capture(tb, "srv6", delivered=True)
    log_case(dut, "srv6", 0, probes=len(probes),
             dropped=sum(f.delivered is None for f in data_frames(tb, 0)))


EV_FORMAT_TESTS = ["test_stev_spreads_on_the_flow_label",
                   "test_srv6_routes_on_the_usids_around_a_failed_path"]


def test_ev_formats(tmp_path):
    run_two_nic("tests.system.test_ev_formats", EV_FORMAT_TESTS, "ev_formats")
    if TSHARK is None:
        return  # the dissector's check needs tshark (tests/dissector_check.py)
    frames = []
    for name in ("stev", "srv6"):
        with PcapReader(str(SIM_BUILD / "system_two_nic_sim" / "ev_formats" / f"{name}.pcap")) as r:
            frames += [bytes(p) for p in r]
    check_frames(frames, tmp_path / "rtl.pcap", srv6_locators=[SRV6_LOCATOR])

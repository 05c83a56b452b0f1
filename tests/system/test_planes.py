"""Planes on two RTL NICs of ``NIC_PARAMS["num_planes"]`` (4) planes each, the
fabric joining plane p to plane p: spraying by each EV's plane, the MRC API's
``phy_port_mask``, a NIC's link and a plane's switch failing mid-transfer
and coming back, and ACKs leaving on a live plane when their data's plane's
link is down. The planes register
block's counters and events are held to the fabric's own counts.

On tests/system/test_two_nic.py's build (sim_build/system_two_nic_sim, the
same top and options), in a simulator run of its own.
"""

from __future__ import annotations

import cocotb
import pytest
from cocotb.triggers import RisingEdge
from cocotb.utils import get_sim_time

from host_driver.driver import Completion, EvProfile, EvState, PlaneEvent
from hw.tx.engine import TxEngine
from sim.system.harness import CLK_NS, SystemTB
from sim.system.simhw import run_two_nic
from sim.system.top import NIC_PARAMS
from sim.system.transfers import check_memory, complete_all, log_case, packets_of, transfer
from tests import seeds

PLANES = NIC_PARAMS["num_planes"]


def ev_planes(tb, src):
    """{EV value: plane} of NIC ``src``'s connections, as its driver bound them."""
    return {v: conn.qp.ev_planes[i] for conn in tb.ends[src].conns
            for i, v in enumerate(conn.qp.evs.values)}


def check_frames_on_bound_planes(tb):
    """Every frame each NIC sent left on the plane of its EV: a data frame's EV
    is its own, an ACK echoes the EV of the data it answers, and leaves on the
    plane that data came in on, which is that EV's."""
    bound = {**ev_planes(tb, 0), **ev_planes(tb, 1)}
    for i in (0, 1):
        for p, evs in enumerate(tb.fabric.plane_evs[i]):
            wrong = {f"0x{ev:x}": n for ev, n in evs.items() if bound.get(ev) != p}
            assert not wrong, f"NIC {i} sent frames on plane {p} of EVs bound elsewhere: {wrong}"


async def check_plane_counters(tb, drops=None):
    """Each NIC's planes block against the fabric: frames sent per plane as the
    fabric took them, frames received per plane as the peer sent them (the
    fabric drops nothing in these tests), and ``link_drops`` per plane (0
    unless ``drops`` says, {nic: [per plane]})."""
    await tb.cycles(200)  # the counter bank's lag
    got = [await end.dev.plane_counters() for end in tb.ends]
    for i in (0, 1):
        sent = [c["tx_frames"] for c in got[i]]
        received = [c["rx_frames"] for c in got[i]]
        assert sent == tb.fabric.plane_frames[i], (i, sent, tb.fabric.plane_frames)
        assert received == tb.fabric.plane_frames[1 - i], (i, received, tb.fabric.plane_frames)
        want = (drops or {}).get(i, [0] * PLANES)
        assert [c["link_drops"] for c in got[i]] == want, (i, got[i])
    return got


@cocotb.test()
async def test_planes_spray_by_ev_binding(dut):
    """The driver binds a QP's EV i to plane i mod 4: data leaves on its EV's
    plane and every ACK on the plane its data came in on; every plane carries
    data both ways, spread evenly over each plane's EVs (the spreading bound
    within each plane, and across planes in proportion to their EVs); both
    memories byte exact, nothing retransmitted; the planes blocks count what
    the fabric saw."""
    tb = SystemTB(dut, seed=seeds.of(17))
    assert tb.num_planes == PLANES == 4
    await tb.init()
    assert [end.dev.num_planes for end in tb.ends] == [PLANES] * 2
    await tb.connect(sq_log2=4)
    sizes = [16 * 1024] * 8
    runs = [await transfer(tb, src, sizes) for src in (0, 1)]
    for src in (0, 1):
        posted, payload, early = runs[src]
        cqes = await complete_all(tb.ends[src], posted, early)
        assert [c.status for c in cqes] == [Completion.SUCCESS] * len(sizes)
        check_memory(tb, 1 - src, payload)
    assert [end.conns[0].qp.ev_planes for end in tb.ends] == [list(range(PLANES)) * 2] * 2
    check_frames_on_bound_planes(tb)
    for i in (0, 1):
        own = ev_planes(tb, i)
        per_plane = []
        for p in range(PLANES):
            data = [n for ev, n in tb.fabric.plane_evs[i][p].items() if ev in own]
            assert len(data) == 2, f"NIC {i} plane {p}: data on {len(data)} EVs, not 2"
            assert max(data) - min(data) <= 1, f"NIC {i} plane {p}: uneven spraying {data}"
            per_plane.append(sum(data))
        assert sum(per_plane) == packets_of(sizes), per_plane
        # each plane holds 2 of the 8 EVs: its share of the packets, within the
        # per-EV bound of one packet per EV
        assert max(per_plane) - min(per_plane) <= 2, f"NIC {i}: planes uneven {per_plane}"
        c = await tb.counters(i)
        assert c["rel.retx_timeout"] == c["rel.retx_sack"] == c["rel.retx_nak"] == 0, c
    await check_plane_counters(tb)
    assert [await end.dev.read_plane_events() for end in tb.ends] == [[], []]
    log_case(dut, "planes", 0, frames=tb.fabric.plane_frames)


@cocotb.test()
async def test_plane_mask_binds_evs(dut):
    """``phy_port_mask`` 0b10 binds NIC 0's EVs to plane 1 alone: its data and
    NIC 1's ACKs use plane 1 only, byte exact; a mask naming a plane the NIC
    lacks is refused with what to fix, before the QP is touched."""
    tb = SystemTB(dut, seed=seeds.of(18))
    await tb.init()
    with pytest.raises(ValueError,
                       match=rf"names plane\(s\) this NIC does not have: it has {PLANES}"):
        tb.ends[0].dev.planes_of(1 << PLANES)
    masked = EvProfile.explicit(range(0xC000, 0xC008), phy_port_mask=0b10)
    await tb.connect(sq_log2=4, evs=[masked, EvProfile.explicit(range(0xD000, 0xD008))])
    posted, payload, early = await transfer(tb, 0, [8 * 1024] * 4)
    await complete_all(tb.ends[0], posted, early)
    check_memory(tb, 1, payload)
    assert tb.ends[0].conns[0].qp.ev_planes == [1] * 8
    frames = tb.fabric.plane_frames
    for i in (0, 1):
        assert frames[i][1] > 0 and sum(frames[i]) == frames[i][1], frames
    check_frames_on_bound_planes(tb)
    await check_plane_counters(tb)


async def probes_restore(tb, nic, timeout_cycles=400_000):
    """Probe NIC ``nic``'s ASSUMED_BAD EVs until every EV of its QP is GOOD
    again; {EV index: ns} of each return. Probes off afterwards."""
    dev, qp = tb.ends[nic].dev, tb.ends[nic].qp
    await dev.set_probe_period(4 * dev.min_probe_period() + 2000)
    good_at = {}
    for _ in range(timeout_cycles // 200):
        for e in await dev.read_ev_events():
            assert e.new == EvState.GOOD, e
            good_at[e.ev_index] = get_sim_time(unit="ns")
        if set(await dev.ev_states(qp)) == {EvState.GOOD}:
            break
        await tb.cycles(200)
    assert set(await dev.ev_states(qp)) == {EvState.GOOD}, await dev.ev_states(qp)
    await dev.set_probe_period(0)
    return good_at


async def transfer_uses_plane(tb, plane, sizes):
    """A transfer NIC 0 -> NIC 1, byte exact, that sends on ``plane``."""
    a = tb.ends[0]
    before = tb.fabric.plane_frames[0][plane]
    posted, payload, early = await transfer(tb, 0, sizes)
    cqes = await complete_all(a, posted, early)
    assert [c.status for c in cqes] == [Completion.SUCCESS] * len(sizes)
    check_memory(tb, 1, payload)
    sent = tb.fabric.plane_frames[0][plane] - before
    assert sent >= packets_of(sizes) // (2 * PLANES), (plane, sent, tb.fabric.plane_frames)


@cocotb.test()
async def test_link_down_mid_transfer_and_back(dut):
    """512 KiB NIC 0 -> NIC 1 over the 4 planes; mid-transfer NIC 0's plane 1
    link goes down (``link_up``): the host gets the plane event (and
    ``irq``), TX leaves the plane at once (only the frames it had already
    picked for it are dropped, ``plane_drops``, counted per plane), and the
    transfer completes byte exact on the other planes. The link comes back:
    the host gets that event, and a second transfer uses plane 1 again (any
    EV the drops made ASSUMED_BAD probed back first)."""
    tb = SystemTB(dut, seed=seeds.of(19))
    await tb.init()
    await tb.connect(sq_log2=4, timeout=7, sack_threshold=3)
    a = tb.ends[0]
    drops = []

    async def count_drops():
        while True:
            await RisingEdge(dut.n0_plane_drops)
            drops.append(get_sim_time(unit="ns"))

    cocotb.start_soon(count_drops())
    sizes = [16 * 1024] * 32
    task = cocotb.start_soon(transfer(tb, 0, sizes))
    while tb.fabric.plane_frames[0][1] < 24:
        await tb.cycles(16)
    down_ns = get_sim_time(unit="ns")
    all_up = (1 << PLANES) - 1
    dut.n0_link_up.value = all_up & ~0b10
    await tb.cycles(4)
    assert dut.n0_irq.value == 1, "no interrupt for the plane event"
    assert await a.dev.read_plane_events() == [PlaneEvent(1, False)]
    sent_on_1 = tb.fabric.plane_frames[0][1]
    posted, payload, early = await task
    cqes = await complete_all(a, posted, early)
    assert [c.status for c in cqes] == [Completion.SUCCESS] * len(sizes)
    check_memory(tb, 1, payload)
    # the frames TX had picked before the link went down, and no more
    slack_ns = (TxEngine.max_picked_ahead + 1) * ((1024 + 74) // 8 + 1) * CLK_NS
    assert 0 < len(drops) <= TxEngine.max_picked_ahead + 1, drops
    assert max(drops) <= down_ns + slack_ns, (down_ns, drops)
    assert tb.fabric.plane_frames[0][1] == sent_on_1, "a frame reached the dead plane"
    counters = await a.dev.plane_counters()
    assert [c["up"] for c in counters] == [1, 0, 1, 1]
    assert [c["link_drops"] for c in counters] == [0, len(drops), 0, 0], counters

    up_ns = get_sim_time(unit="ns")
    dut.n0_link_up.value = all_up
    await tb.cycles(4)
    assert await a.dev.read_plane_events() == [PlaneEvent(1, True)]
    good_at = await probes_restore(tb, 0)
    await transfer_uses_plane(tb, 1, [16 * 1024] * 8)
    log_case(dut, "link down and back", down_ns, drops=len(drops),
             last_drop_ns=round(max(drops) - down_ns),
             probed_back_us={i: round((t - up_ns) / 1e3, 1) for i, t in sorted(good_at.items())})


@cocotb.test()
async def test_plane_fails_in_the_fabric_and_returns(dut):
    """512 KiB NIC 0 -> NIC 1 over the 4 planes; mid-transfer plane 1's
    switch fails (every frame on it lost both ways, the NICs' links up): NIC
    0's EVs on plane 1 (1 and 5) go ASSUMED_BAD, each reported with its time
    from the failure, the transfer completes byte exact, and once TX has
    seen the events no data frame goes to plane 1. The switch comes back:
    probes bring EVs 1 and 5 back to GOOD, and a second transfer uses plane
    1 again, byte exact."""
    tb = SystemTB(dut, seed=seeds.of(21))
    await tb.init()
    await tb.connect(sq_log2=4, timeout=7, sack_threshold=3)
    a = tb.ends[0]
    sizes = [16 * 1024] * 32
    task = cocotb.start_soon(transfer(tb, 0, sizes))
    while tb.fabric.plane_frames[0][1] < 24:
        await tb.cycles(16)
    down_ns = get_sim_time(unit="ns")
    tb.fabric.set_plane_up(1, False)
    dead = [i for i in range(8) if i % PLANES == 1]
    bad_at = {}
    while len(bad_at) < len(dead):
        for e in await a.dev.read_ev_events():
            assert (e.old, e.new) == (EvState.GOOD, EvState.ASSUMED_BAD), e
            bad_at[e.ev_index] = get_sim_time(unit="ns")
        await tb.cycles(200)
    posted, payload, early = await task
    cqes = await complete_all(a, posted, early)
    assert [c.status for c in cqes] == [Completion.SUCCESS] * len(sizes)
    check_memory(tb, 1, payload)
    assert sorted(bad_at) == dead, bad_at
    states = await a.dev.ev_states(a.qp)
    assert [i for i in range(8) if states[i] == EvState.ASSUMED_BAD] == dead, states
    # frames TX had picked before the last event may still meet the dead plane
    slack_ns = TxEngine.max_picked_ahead * ((1024 + 74) // 8 + 1) * CLK_NS
    lost = tb.fabric.plane_lost[0][1]
    late = [t for t in lost if t > max(bad_at.values()) + slack_ns]
    assert lost and late == [], f"frames sent to the dead plane after its EVs went bad: {late}"

    up_ns = get_sim_time(unit="ns")
    tb.fabric.set_plane_up(1, True)
    good_at = await probes_restore(tb, 0)
    assert sorted(good_at) == dead, good_at
    await transfer_uses_plane(tb, 1, [16 * 1024] * 8)
    log_case(dut, "plane fails and returns", down_ns, lost=len(lost),
             assumed_bad_us={i: round((t - down_ns) / 1e3, 1) for i, t in sorted(bad_at.items())},
             good_again_us={i: round((t - up_ns) / 1e3, 1) for i, t in sorted(good_at.items())})


@cocotb.test()
async def test_acks_leave_on_a_live_plane(dut):
    """NIC 1's plane 2 link is down (its transmit side: frames still reach it
    there): NIC 0's data keeps coming on all 4 planes, and the ACKs for what
    arrives on plane 2 leave on the lowest live plane instead of being
    dropped. Nothing is dropped or retransmitted, NIC 0's EVs all stay GOOD,
    NIC 1 sends nothing on plane 2, and its host gets the plane event."""
    tb = SystemTB(dut, seed=seeds.of(20))
    await tb.init()
    dut.n1_link_up.value = ((1 << PLANES) - 1) & ~0b100
    await tb.connect(sq_log2=4)
    assert await tb.ends[1].dev.read_plane_events() == [PlaneEvent(2, False)]
    sizes = [16 * 1024] * 8
    posted, payload, early = await transfer(tb, 0, sizes)
    cqes = await complete_all(tb.ends[0], posted, early)
    assert [c.status for c in cqes] == [Completion.SUCCESS] * len(sizes)
    check_memory(tb, 1, payload)
    frames = tb.fabric.plane_frames
    assert all(n > 0 for n in frames[0]), frames
    assert frames[1][2] == 0 and frames[1][0] > 0, frames
    c = await tb.counters(0)
    assert c["rel.retx_timeout"] == c["rel.retx_sack"] == c["rel.retx_nak"] == 0, c
    assert set(await tb.ends[0].dev.ev_states(tb.ends[0].qp)) == {EvState.GOOD}
    await check_plane_counters(tb)
    log_case(dut, "acks on a live plane", 0, frames=frames)


PLANE_TESTS = ["test_planes_spray_by_ev_binding", "test_plane_mask_binds_evs",
               "test_link_down_mid_transfer_and_back",
               "test_plane_fails_in_the_fabric_and_returns", "test_acks_leave_on_a_live_plane"]


def run(testcases, tag):
    run_two_nic("tests.system.test_planes", testcases, tag)


def test_planes():
    run(PLANE_TESTS, "planes")

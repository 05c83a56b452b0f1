"""The control API's queries and teardown, written once against the host driver
and run on both backends: two model NICs (tests/unit/test_driver_model.py) and
two RTL NICs (tests/system/test_two_nic.py), as sim/system/requester_cases.py.

Each case takes two connection ends ``a`` (the requester) and ``b`` (its
peer), objects with ``dev``, ``qp``, ``mr``, ``recv_buf`` and ``send_buf``:

``device_query``  ``Device.query``: the capabilities and limits, against the
                  build parameters the driver read at discovery
``qp_query``      ``QueuePair.query`` of a connected pair, before and after a
                  transfer: the state, PSNs, settings and EVs the NIC holds
                  (``settings``: what the connection was made with), and
                  ``MemoryRegion.query`` of the peer's region
``nic_derived_evs`` the EVs the NICs derived themselves (their ``ev_gen``
                  blocks) for a connection made with ``ev_profiles()``: end
                  ``a`` GENERATED, end ``b`` AUTO; each against the golden
                  model's rule, in TX's and reliability's tables, AUTO's
                  ``ev_min_active`` default, and a run the NIC refuses
``teardown``      a QP made, brought to RTS with a requester MPR apart from
                  its responder MPR (both read back), then destroyed with its
                  CQs: the QPN, the send queue's memory and the CQs are free
                  again; destroying a CQ still in use, or a QP twice, raises
"""

from __future__ import annotations

from host_driver.driver import DriverError, EvProfile, QpState, WrOpcode
from hw.nic.csr import NIC_VERSION
from hw.nic.ev_load import auto_params
from hw.protocol import PSN_MASK, EvState
from sim.model.ev import generated_evs

__all__ = ["GENERATED", "device_query", "ev_profiles", "nic_derived_evs", "qp_query",
           "teardown"]

# end a's GENERATED profile: 6 EVs in 0x400..0xBFF of a 12-bit field
GENERATED = dict(width=12, init=0x123, min_ev=0x400, max_ev=0xBFF, mask=0xFFF, count=6)


def ev_profiles() -> list[EvProfile]:
    """The two ends' profiles for ``nic_derived_evs``: GENERATED, AUTO."""
    return [EvProfile.generated(**GENERATED), EvProfile.auto()]


async def nic_derived_evs(a, b):
    per_qp = a.dev.params["evs_per_qp"]
    wants = ([v for v, _ in generated_evs(**GENERATED)],
             [v for v, _ in generated_evs(**auto_params(b.qp.qpn, per_qp))])
    for end, want, min_active in ((a, wants[0], 1), (b, wants[1], max(1, per_qp // 4))):
        dev, q = end.dev, end.qp.qpn
        assert list(end.qp.evs.values) == want, (end.qp.evs, want)
        attr = await end.qp.query()
        assert attr.evs[:len(want)] == tuple((v, EvState.GOOD) for v in want), attr.evs
        assert all(state == EvState.DENIED for _, state in attr.evs[len(want):]), attr.evs
        assert attr.ev_min_active == min_active
        tx_table = []
        for i in range(per_qp):
            await dev.tx.write_fields("ev_select", ev_index=i, qpn=q)
            entry = await dev.tx.read_fields("ev_entry")
            tx_table.append((entry["value"], entry["state"]))
        assert tx_table == [(v, EvState.GOOD) for v in want] + [
            (0, EvState.DENIED)] * (per_qp - len(want)), tx_table
    try:
        await a.dev.generate_evs(a.dev.params["num_qps"], EvProfile.auto())
    except DriverError as e:
        assert "'bad_qp': 1" in str(e), e
    else:
        raise AssertionError("the EV generator took a QP out of range")


async def device_query(dev):
    attr = await dev.query()
    p = dev.params
    assert attr.caps == {"TRIM_NACK", "SVC_TIME"}, attr.caps
    assert (attr.max_qp_hint, attr.ev_max_count, attr.max_mr, attr.max_mtu) == (
        p["num_qps"], p["evs_per_qp"], p["num_mrs"], p["max_mtu"])
    assert attr.max_mpr == p["mpr_max"] // 128 and attr.max_wimm == p["max_wimm"] >= 1
    assert attr.ev_max_profiles == 1 and attr.version == (NIC_VERSION >> 16, NIC_VERSION & 0xFFFF)
    return attr


async def qp_query(a, b, settings: dict, *, length=5000, timeout_cycles=2_000_000):
    """``settings``: the connection's ``mtu``, ``mpr``, ``timeout``,
    ``sack_threshold``, and the EV values of each end (``evs_a``)."""
    before = await a.qp.query()
    peer = await b.qp.query()
    assert before.state == peer.state == QpState.RTS
    assert before.dest_qpn == b.qp.qpn and peer.dest_qpn == a.qp.qpn
    assert (before.mtu, before.req_mpr, before.resp_mpr, before.timeout,
            before.sack_threshold) == (settings["mtu"], settings["mpr"], settings["mpr"],
                                       settings["timeout"], settings["sack_threshold"])
    assert before.max_wimm == a.qp.max_wimm and before.trim_nack
    values = settings["evs_a"]
    assert before.evs[:len(values)] == tuple((v, EvState.GOOD) for v in values)
    assert all(state == EvState.DENIED for _, state in before.evs[len(values):])
    assert before.una_psn == before.sq_psn
    packets = -(-length // settings["mtu"])
    await a.qp.post_send(WrOpcode.WRITE, local_addr=a.send_buf, length=length,
                         remote_addr=b.recv_buf, rkey=b.mr.rkey)
    assert len(await a.qp.send_cq.wait(1, timeout_cycles=timeout_cycles)) == 1
    after = await a.qp.query()
    assert after.sq_psn == after.una_psn == (before.sq_psn + packets) & PSN_MASK, (before, after)
    mr = await b.mr.query()
    assert (mr.addr, mr.length, mr.rkey) == (b.mr.addr, b.mr.length, b.mr.rkey)
    assert mr.access == b.mr.access
    return before, after


async def teardown(dev, peer_mac: str, peer_ip: str):
    """``peer_mac``, ``peer_ip``: an address on the fabric (the model NIC binds a QP
    to a NIC it can reach)."""
    qps_before = set(dev.qps)
    pd = dev.alloc_pd()
    send_cq, recv_cq = dev.create_cq(4), dev.create_cq(4)
    qp = await dev.create_qp(pd, send_cq, recv_cq, sq_log2=4)
    await qp.to_init()
    await qp.to_rtr(dest_qpn=1, peer_mac=peer_mac, peer_ip=peer_ip, mpr=2)
    await qp.to_rts(evs=EvProfile.explicit([0xE000]), mpr=1)
    attr = await qp.query()
    assert (attr.state, attr.req_mpr, attr.resp_mpr) == (QpState.RTS, 1, 2), attr
    try:
        send_cq.destroy()
    except DriverError:
        pass
    else:
        raise AssertionError("a CQ in use was destroyed")
    qpn, sq_addr = qp.qpn, qp.sq_addr
    await qp.destroy()
    assert (await qp.query()).state == QpState.RESET and set(dev.qps) == qps_before
    try:
        await qp.destroy()
    except DriverError:
        pass
    else:
        raise AssertionError("a QP was destroyed twice")
    send_cq.destroy()
    recv_cq.destroy()
    pd.dealloc()
    # the QPN and the memory are free: the next QP takes both
    pd = dev.alloc_pd()
    again = await dev.create_qp(pd, dev.create_cq(4), dev.create_cq(4), sq_log2=4)
    assert (again.qpn, again.sq_addr) == (qpn, sq_addr)
    await again.destroy()
    again.send_cq.destroy()
    again.recv_cq.destroy()
    pd.dealloc()

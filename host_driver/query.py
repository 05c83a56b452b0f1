"""What MRC's query calls return, read from the NIC's own registers.

``query_device(dev)`` (``Device.query``): the capabilities and limits a
controller asks for before it makes QPs (mrc.h's device attributes), from the
device-info block and TX's ``caps``. ``query_qp(qp)`` (``QueuePair.query``):
a QP's state and attributes as the NIC holds them (reliability's state and
PSNs, TX's and RX's per-QP settings, the EV table), not the driver's copy.
docs/api.md maps each of MRC's calls and fields to these.
"""

from __future__ import annotations

from dataclasses import dataclass

from hw.nic.csr import caps_names
from hw.protocol import ev_formats

__all__ = ["DeviceAttr", "QpAttr", "query_device", "query_qp"]

MPR_UNIT = 128  # PSNs


@dataclass(frozen=True)
class DeviceAttr:
    """A NIC's capabilities and limits.

    ``caps``: the capabilities it implements, of TRIM_NACK, DYNAMIC_MPR and
    SVC_TIME. ``max_qp_hint``: QPs. ``ev_max_count``: EVs per QP.
    ``ev_max_profiles``: EV profiles per QP (one, in a format of
    ``ev_formats``: the EV formats its EV entries hold, by name).
    ``max_mpr``: the largest MPR, in units of 128 PSNs (requester and
    responder alike; the PSNs a requester has in flight are also at most
    ``window``, those reliability tracks). ``max_wimm``: the largest
    ``max_wimm`` (the in-flight table's entries per QP). ``max_mr``: memory
    regions. ``max_mtu``, ``sack_bits``, ``window``: as their names say.
    ``version``: the gateware's (major, minor)."""

    caps: frozenset[str]
    max_qp_hint: int
    ev_max_count: int
    ev_max_profiles: int
    max_mpr: int
    max_wimm: int
    max_mr: int
    max_mtu: int
    sack_bits: int
    window: int
    version: tuple[int, int]
    ev_formats: tuple[str, ...] = ("udp",)


@dataclass(frozen=True)
class QpAttr:
    """One QP as the NIC holds it.

    ``state``: reliability's (a ``QpState``; ERROR after retry exhaustion or a
    fatal NAK, whatever the driver last wrote). ``sq_psn``: the next PSN TX
    sends; ``una_psn``: the oldest it has not had acknowledged; ``rq_psn``:
    the PSN the responder was started at (RX reports the value written).
    ``dest_qpn``, ``mtu``, ``req_mpr`` (TX's) and ``resp_mpr`` (RX's), in
    units of 128 PSNs; ``timeout``, ``linear_cnt``, ``exp_cnt``,
    ``ev_min_active``, ``sack_threshold``: reliability's settings;
    ``max_wimm``: TX's bound; ``trim_nack``: the responder answers a trimmed
    packet with NAK TRIMMED; ``evs``: (value, state) of each EV entry."""

    qpn: int
    state: int
    sq_psn: int
    una_psn: int
    rq_psn: int
    dest_qpn: int
    mtu: int
    req_mpr: int
    resp_mpr: int
    timeout: int
    linear_cnt: int
    exp_cnt: int
    ev_min_active: int
    sack_threshold: int
    max_wimm: int
    trim_nack: bool
    evs: tuple[tuple[int, int], ...]


async def query_device(dev) -> DeviceAttr:
    p = dev.params
    return DeviceAttr(
        caps=caps_names(p["caps"]), max_qp_hint=p["num_qps"], ev_max_count=p["evs_per_qp"],
        ev_max_profiles=1, max_mpr=p["mpr_max"] // MPR_UNIT, max_wimm=p["max_wimm"],
        max_mr=p["num_mrs"], max_mtu=p["max_mtu"], sack_bits=p["sack_bits"],
        window=p["window"], version=(p["nic_version"] >> 16, p["nic_version"] & 0xFFFF),
        ev_formats=tuple(f.name.lower() for f in ev_formats(p.get("ev_width", 16))))


async def query_qp(qp) -> QpAttr:
    dev, q = qp.device, qp.qpn
    rel_cfg = await dev.rel.read_fields("qp_rel_cfg", q)
    rx_ctrl = await dev.rx.read_fields("QP_CTRL", q)
    per_qp = dev.params["evs_per_qp"]
    evs = []
    for i in range(per_qp):
        entry = await dev.rel.read_fields("ev", q * per_qp + i)
        evs.append((await dev.read_ev_value(q, i), entry["state"]))
    return QpAttr(
        qpn=q, state=(await dev.rel.read_fields("qp_ctrl", q))["state"],
        sq_psn=await dev.tx.read("qp_next_psn", q), una_psn=await dev.tx.read("qp_una_psn", q),
        rq_psn=await dev.rx.read("QP_EPSN", q), dest_qpn=await dev.tx.read("qp_dest_qpn", q),
        mtu=await dev.tx.read("qp_mtu", q), req_mpr=await dev.tx.read("qp_mpr", q),
        resp_mpr=rx_ctrl["mpr"], timeout=rel_cfg["t"], linear_cnt=rel_cfg["linear_cnt"],
        exp_cnt=rel_cfg["exp_cnt"], ev_min_active=rel_cfg["ev_min_active"],
        sack_threshold=rel_cfg["sack_threshold"], max_wimm=await dev.tx.read("qp_max_wimm", q),
        trim_nack=bool(rx_ctrl["trim_nack"]), evs=tuple(evs))

"""Two model NICs (sim/nicmodel/) on one model fabric, driven by the host
driver: the golden-model counterpart of sim/system/harness.py's ``SystemTB``,
with the same attributes and methods, so a scenario written against the
driver API runs unchanged on either backend.

``ModelSystem(params=None, seed=1, delay_ns=400.0, num_paths=8, gbps=None)``

``ends[i]``     ``Endpoint``: ``dev`` (a ``Device`` on a ``ModelTransport``),
                ``nic`` (the ``ModelNic``), ``qp``, ``mr``, ``recv_buf``,
                ``send_buf`` after ``connect``, ``qps`` and ``conns`` (as
                ``SystemTB``'s) after ``connect_qps``
``fabric``      ``ModelFabricControl``: the controls of sim/system/fabric.py's
                ``Fabric`` (loss, down/up now or scheduled, reordering, rate and
                queue, ECN, trimming; per-path counters; ``keep_log``);
                direction d carries every frame NIC d sends (data and ACKs)
``init()``      discovery and addresses (async)
``connect(...)``  QP 0 of each NIC to RTS, bound to the other (``SystemTB.connect``);
                ``connect_qps(n, ...)`` brings ``n`` QP pairs up
``now_ns``, ``now_cycles``  model time

``params`` are NicCore's (sim/system/top.py ``NIC_PARAMS`` by default),
``gbps`` the line rate of every link (default: data_width x clk_freq_hz, the
NIC's datapath rate at its reported clock). Everything is deterministic for
a seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from types import SimpleNamespace

from host_driver.driver import Device, MemoryRegion, QueuePair
from host_driver.layers import TRIM_DSCP_DEFAULT
from host_driver.model_transport import ModelTransport
from sim.model.packet import DATA
from sim.nicmodel import ModelFabric, ModelNic
from sim.system import top as _rtl_top
from sim.system.fabric import FaultEvent, PathSelection
from sim.system.pairs import (  # the RTL harness's (sim/system/harness.py)
    EVS,
    IPS,
    IPS6,
    MACS,
    RAM_SIZE,
    families,
    ip_of,
)
from sim.system.top import NIC_PARAMS

__all__ = ["BUILD_IDS", "Endpoint", "ModelFabricControl", "ModelSystem", "MACS", "IPS", "EVS"]

# The build IDs the RTL system top gives its two NICs (one shared ID, or one each)
BUILD_IDS = getattr(_rtl_top, "BUILD_IDS", None) or (_rtl_top.BUILD_ID,) * 2
UNLIMITED = 1 << 62  # bytes: a queue that never overflows or marks


@dataclass
class Endpoint:
    """One NIC and the objects the driver made on it."""

    dev: Device
    nic: ModelNic
    qp: QueuePair | None = None
    mr: MemoryRegion | None = None
    recv_buf: int = 0
    send_buf: int = 0
    qps: list | None = None

    @property
    def conns(self) -> list[SimpleNamespace]:
        """Each QP as sim/system/harness.py's ``Connection`` gives it (QP j's peer is
        QP j of the other NIC; one MR and one send buffer for all), so that code
        written for ``SystemTB`` runs here too."""
        return [SimpleNamespace(qp=qp, mr=self.mr, recv_buf=self.recv_buf,
                                send_buf=self.send_buf, peer=j)
                for j, qp in enumerate(self.qps or [])]


class PathControl:
    """One path of one direction: the model fabric's core link toward the
    receiver, with sim/system/fabric.py ``Path``'s controls and counters.

    Scripted drops (``drop_fn``), loss, random trimming and random CE marking
    are decided here, in that order, from the link's own RNG (sim.fabric
    seeds one per link from the seed and its name); down, the queue
    (``set_rate``), overflow trimming and threshold marking are the link's
    (``sim.fabric.Link.transit``).
    """

    def __init__(self, link, default_gbps: float):
        self.link = link
        self.default_gbps = default_gbps
        self.loss = 0.0
        self.trim_prob = 0.0
        self.ecn_prob = 0.0
        self.random_trims = 0
        self.random_marks = 0
        self.drop_fn = None  # scripted loss: drop_fn(model packet, now_ns) -> True to drop
        link.fault().drop_fn = self._decide

    def _decide(self, pkt, now) -> bool:
        rng = self.link.rng
        if self.drop_fn is not None and self.drop_fn(pkt, now):
            return True
        if self.loss and rng.random() < self.loss:
            return True
        if pkt.kind == DATA and not pkt.trimmed:
            if self.trim_prob and rng.random() < self.trim_prob:
                pkt.trim()
                self.random_trims += 1
            elif not pkt.ce and self.ecn_prob and rng.random() < self.ecn_prob:
                pkt.ce = True
                self.random_marks += 1
        return False

    @property
    def carried(self) -> int:
        return self.link.tx_packets + self.link.trims  # a link does not count overflow trims

    @property
    def dropped(self) -> int:
        link = self.link
        return link.drops_down + link.drops_loss + link.drops_overflow

    @property
    def trimmed(self) -> int:
        return self.link.trims + self.random_trims

    @property
    def marked(self) -> int:
        return self.link.ecn_marks + self.random_marks

    @property
    def up(self) -> bool:
        return self.link.up

    @up.setter
    def up(self, value: bool):
        self.link.up = bool(value)
        self.link.down_count = 0 if value else 1

    @property
    def delay_ns(self) -> float:
        return self.link.prop_ns

    @delay_ns.setter
    def delay_ns(self, value: float):
        if value < 0:
            raise ValueError(f"delay_ns must be >= 0, not {value!r}")
        self.link.prop_ns = value

    @property
    def reorder_prob(self) -> float:
        return self.link.faults.reorder_prob

    @property
    def reorder_ns(self) -> float:
        return self.link.faults.reorder_ns

    def counters(self) -> dict:
        link = self.link
        return {"carried": self.carried, "dropped": self.dropped, "trimmed": self.trimmed,
                "ecn_marked": self.marked, "reordered": link.reorders,
                "max_queue_bytes": round(link.max_queue_bytes)}


@dataclass
class DirectionControl:
    name: str
    src_id: int
    dst_id: int
    paths: list[PathControl]
    log: list


def _probability(name, value):
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"path {name} is a probability in [0, 1], not {value!r}")


class ModelFabricControl(PathSelection):
    """sim/system/fabric.py ``Fabric``'s controls on the model fabric, so one
    scenario drives either: ``set_loss``, ``set_path_up``, ``set_reorder``,
    ``set_rate``, ``set_ecn``, ``set_trim`` (each with an optional direction),
    ``schedule_path`` / ``schedule`` (``FaultEvent``s at model times,
    ``fault_log``), ``paths``, ``counters()``, ``keep_log`` and
    ``directions[d].log`` of ``[ns, ev, path, dropped]``, ``inject(to_nic,
    pkt, delay_ns=0)`` (an attacker's ``Packet``, its claimed addresses in
    ``pkt.forged``, handed to NIC ``to_nic`` past every path; ``injected``
    lists them). Not available: ``capture`` (the model's frames are objects,
    not bytes)."""

    def __init__(self, fabric: ModelFabric, nics: list[ModelNic], gbps: float):
        self.model = fabric
        self.nics = nics
        paths = fabric.paths
        self.directions = []
        for i in range(2):
            dst = nics[1 - i].host
            links = [paths.core[(0, k, dst.hid)] for k in range(paths.paths_per_plane)]
            self.directions.append(DirectionControl(
                f"nic{i}->nic{1 - i}", i, 1 - i, [PathControl(link, gbps) for link in links],
                []))
        self.keep_log = False
        self.schedule_events: list[FaultEvent] = []
        self.fault_log: list[tuple[float, FaultEvent]] = []
        self._in_flight: dict[int, list] = {}
        self.injected: list[tuple[int, object]] = []
        paths.taps.append(self._tap)
        paths.delivery_hooks.append(self._delivered)


    def set_loss(self, loss: float, direction: int | None = None):
        _probability("loss", loss)
        for p in self.paths(direction):
            p.loss = loss

    def set_path_up(self, path: int, up: bool, direction: int | None = None):
        for d in self._dirs(direction):
            d.paths[self._path_index(path)].up = up

    def set_reorder(self, prob: float, extra_ns: float, direction: int | None = None):
        _probability("reorder_prob", prob)
        if extra_ns < 0:
            raise ValueError(f"path delays must be >= 0 ns, not {extra_ns!r}")
        for p in self.paths(direction):
            faults = p.link.fault()
            faults.reorder_prob, faults.reorder_ns = prob, extra_ns

    def set_rate(self, gbps: float | None, *, queue_bytes: int | None = None,
                 direction: int | None = None):
        """Every path's rate and output queue (None: the line rate, no limit)."""
        if gbps is not None and gbps <= 0:
            raise ValueError(f"path rate gbps must be > 0 (or None), not {gbps!r}")
        for p in self.paths(direction):
            link = p.link
            link.gbps = gbps or p.default_gbps
            link.ns_per_byte = 8.0 / link.gbps
            link.queue_bytes = UNLIMITED if queue_bytes is None else queue_bytes

    def set_ecn(self, *, threshold_bytes: int | None = None, prob: float = 0.0,
                direction: int | None = None):
        """CE-mark data frames above a queue threshold and/or at random."""
        _probability("ecn_prob", prob)
        for p in self.paths(direction):
            p.link.ecn_bytes = UNLIMITED if threshold_bytes is None else threshold_bytes
            p.ecn_prob = prob

    def set_trim(self, *, on_overflow: bool = True, prob: float = 0.0,
                 dscp: int = TRIM_DSCP_DEFAULT, direction: int | None = None):
        """Trim data frames that overflow a queue and/or at random. A trimmed
        model packet is flagged, not re-marked: ``dscp`` must be RX's
        TRIM_DSCP (0x3F after reset) for the RTL to see the same thing."""
        _probability("trim_prob", prob)
        if dscp != TRIM_DSCP_DEFAULT:
            raise ValueError(f"the model fabric trims with DSCP 0x{TRIM_DSCP_DEFAULT:x} only, "
                             f"not {dscp!r}")
        for p in self.paths(direction):
            p.link.trim = on_overflow
            p.trim_prob = prob

    def schedule(self, event: FaultEvent) -> None:
        """Apply ``event`` at its model time (at once if it is past)."""
        self._path_index(event.path)
        self._dirs(event.direction)
        if event.at_ns < 0:
            raise ValueError(f"fault time must be >= 0 ns, not {event.at_ns!r}")
        self.schedule_events.append(event)
        engine = self.model.engine
        engine.at(max(event.at_ns, engine.now), self._apply, event)

    def schedule_path(self, path: int, down_ns: float, up_ns: float | None = None,
                      direction: int | None = None) -> None:
        if up_ns is not None and up_ns <= down_ns:
            raise ValueError(f"up_ns ({up_ns}) must be after down_ns ({down_ns})")
        self.schedule(FaultEvent(down_ns, path, False, direction))
        if up_ns is not None:
            self.schedule(FaultEvent(up_ns, path, True, direction))

    def _apply(self, event: FaultEvent):
        self.set_path_up(event.path, event.up, event.direction)
        self.fault_log.append((self.model.now, event))

    def counters(self) -> dict:
        return {d.name: [p.counters() for p in d.paths] for d in self.directions}

    def inject(self, to_nic: int, pkt, delay_ns: float = 0.0) -> None:
        if to_nic not in (0, 1):
            raise ValueError(f"to_nic is 0 or 1, not {to_nic!r}")
        self.injected.append((to_nic, pkt))
        self.model.engine.after(delay_ns, self.nics[to_nic].core.receive, pkt)

    def _tap(self, pkt, now):
        if not self.keep_log:
            return
        src = 0 if pkt.src is self.nics[0].host else 1
        path = self.model.paths.path_of(pkt.src, pkt.dst, pkt.plane, pkt.ev)
        entry = [now, pkt.ev, path, True]  # dropped until delivered
        self.directions[src].log.append(entry)
        self._in_flight[id(pkt)] = entry

    def _delivered(self, pkt, now):
        entry = self._in_flight.pop(id(pkt), None)
        if entry is not None:
            entry[3] = False


class ModelSystem:
    def __init__(self, params: dict | None = None, *, seed: int = 1, delay_ns: float = 400.0,
                 num_paths: int = 8, gbps: float | None = None, csr_access_cycles: int = 4,
                 routing: str = "explicit"):
        params = dict(NIC_PARAMS if params is None else params)
        if gbps is None:
            gbps = params.get("data_width", 64) * params.get("clk_freq_hz", 125_000_000) / 1e9
        self.model = ModelFabric(num_paths=num_paths, delay_ns=delay_ns, gbps=gbps, seed=seed,
                                 routing=routing)
        self.rng = random.Random(seed)
        self.ends: list[Endpoint] = []
        for build_id in BUILD_IDS:
            nic = ModelNic(params, self.model, build_id=build_id, mem_size=RAM_SIZE,
                           csr_access_cycles=csr_access_cycles)
            self.ends.append(Endpoint(Device(ModelTransport(nic)), nic))
        self.fabric = ModelFabricControl(self.model, [e.nic for e in self.ends], gbps)

    @property
    def now_ns(self) -> float:
        return self.model.now

    @property
    def now_cycles(self) -> float:
        """Model time in NIC clock cycles (``1 / clk_freq_hz`` each)."""
        return self.model.now / self.ends[0].nic.clk_period_ns

    async def reset(self):
        """The model NICs come out of reset when they are made."""

    async def init(self):
        await self.reset()
        for i, end in enumerate(self.ends):
            await end.dev.init()
            await end.dev.set_address(MACS[i], IPS[i],
                                      ip6=IPS6[i] if end.dev.params["ipv6"] else None)

    async def connect(self, *, buf_size: int = 1 << 20, sq_log2: int = 4, mtu: int = 1024,
                      timeout: int = 10, mpr: int = 2, evs=None, ack_n: int = 4,
                      ack_t: int = 256, probe_period: int = 0, recv_cq_log2: int = 8, **rts):
        """QP 0 of each NIC to RTS, bound to the other; a receive MR and a send
        buffer of ``buf_size`` bytes on each (as ``SystemTB.connect``; ``rts``
        passes further keywords to ``QueuePair.to_rts``)."""
        pairs = await self.connect_qps(1, buf_size=buf_size, sq_log2=sq_log2, mtu=mtu,
                                       timeout=timeout, mpr=mpr, evs=evs, ack_n=ack_n,
                                       ack_t=ack_t, probe_period=probe_period,
                                       recv_cq_log2=recv_cq_log2, **rts)
        for end, qp in zip(self.ends, pairs[0], strict=True):
            end.qp = qp

    async def connect_qps(self, count: int, *, buf_size: int = 1 << 20, sq_log2: int = 4,
                          mtu: int = 1024, timeout: int = 10, mpr: int = 2, evs=None,
                          ack_n: int = 4, ack_t: int = 256, probe_period: int = 0,
                          recv_cq_log2: int = 8, ipv6: bool | list[bool] = False,
                          **rts) -> list[tuple[QueuePair, QueuePair]]:
        """``count`` QPs on each NIC to RTS, QP j of NIC 0 bound to QP j of NIC 1
        (PSNs as ``SystemTB.connect``: NIC 1 starts near the wrap). One receive
        MR and one send buffer per NIC, shared by the QPs. ``ipv6``: the QPs
        bound over IPv6, one flag for all or one per QP j."""
        if not 1 <= count <= self.ends[0].dev.params["num_qps"]:
            raise ValueError(f"count must be in 1..{self.ends[0].dev.params['num_qps']} "
                             f"(num_qps), not {count!r}")
        evs = evs or EVS
        v6s = families(ipv6, count)
        for end in self.ends:
            dev = end.dev
            pd = dev.alloc_pd()
            end.qps = []
            for _ in range(count):
                send_cq = dev.create_cq(sq_log2)
                recv_cq = dev.create_cq(recv_cq_log2)
                end.qps.append(await dev.create_qp(pd, send_cq, recv_cq, sq_log2=sq_log2))
            end.recv_buf = dev.mem.alloc(buf_size, align=4096)
            end.send_buf = dev.mem.alloc(buf_size, align=4096)
            dev.mem.write(end.recv_buf, bytes(buf_size))
            end.mr = await pd.reg_mr(end.recv_buf, buf_size)
            for qp in end.qps:
                await qp.to_init()
            await dev.set_probe_period(probe_period)
        psns = [0x10, 0xFFFFF0]  # nic1 starts near the PSN wrap
        for j in range(count):
            for i, end in enumerate(self.ends):
                peer = self.ends[1 - i]
                await end.qps[j].to_rtr(dest_qpn=peer.qps[j].qpn, peer_mac=MACS[1 - i],
                                        peer_ip=ip_of(1 - i, v6s[j]), rq_psn=psns[1 - i],
                                        mpr=mpr,
                                        ack_n=ack_n, ack_t=ack_t, mtu=mtu)
        for j in range(count):
            for i, end in enumerate(self.ends):
                await end.qps[j].to_rts(evs=evs[i], sq_psn=psns[i], mtu=mtu, timeout=timeout,
                                        **rts)
        return list(zip(self.ends[0].qps, self.ends[1].qps, strict=True))

    def random_bytes(self, n: int) -> bytes:
        return self.rng.randbytes(n)

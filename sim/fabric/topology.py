"""Multipath fabric: hosts with one port per plane, a set of paths per plane.

Topology (one plane shown; a NIC has ``planes`` of them)::

    host A uplink[p] --> core link (p, path k, toward B) --> B downlink[p] --> host B

Each plane has ``paths_per_plane`` paths (think: spine switches of a two-tier
Clos). A packet's path inside its plane is chosen from its EV by the rules
of sim/fabric/routing.py (``routing``): ``explicit`` (the EV as the frame
carries it, mod ``paths_per_plane``), ``hash`` (an ECMP-like CRC-32 of (src,
dst, plane, that EV)) or ``srv6`` (an EV whose first uSID is a spine's takes
that spine; one whose first uSID is in the spines' block but names no spine
of the fabric has no route: ``send`` drops the packet, counts it in
``no_route`` and calls the drop hooks; any other EV is hashed). Every core
link toward a host is shared by all hosts sending to it, and the host's
downlink is shared too, so incast congests there.

Links are output-queued: a packet's departure is computed when it arrives
(``busy_until`` is the end of the work already queued), which is exact for a
FIFO as long as arrivals are processed in time order, which the event engine
guarantees. The queue occupancy seen by an arriving packet decides ECN
marking (above ``ecn_bytes``) and overflow (above ``queue_bytes``): a data
packet is trimmed to its headers (UET style) if the link trims, else dropped.
Trimmed headers go in a strict-priority queue (they are not delayed by the
data queue).
"""

from __future__ import annotations

import random
import zlib

from .routing import carried_ev, check_routing, ev_first_usid, is_spine_usid, select_path

# Packet kind of a data frame; must equal sim.model.packet.DATA (a test checks).
DATA = 0

PATH_ANY = "*"


class LinkFaults:
    """Loss and reordering injected on one link. All draws come from the link's RNG."""

    __slots__ = ("loss", "gilbert", "bursts", "reorder_prob", "reorder_ns", "bad_state",
                 "dup_prob", "dup_ns", "drop_fn")

    def __init__(self) -> None:
        self.loss = 0.0
        self.gilbert = None  # (p_good_to_bad, p_bad_to_good, loss_in_bad)
        self.bursts: list[tuple[float, float, float]] = []  # (start_ns, end_ns, loss)
        self.reorder_prob = 0.0
        self.reorder_ns = 0.0
        self.bad_state = False
        self.dup_prob = 0.0  # probability that the far end receives the packet twice
        self.dup_ns = 0.0  # the copy arrives this much later
        self.drop_fn = None  # scripted loss: drop_fn(pkt, now) -> True to drop

    def drops(self, rng: random.Random, now: float, pkt=None) -> bool:
        if self.drop_fn is not None and self.drop_fn(pkt, now):
            return True
        if self.loss and rng.random() < self.loss:
            return True
        if self.gilbert is not None:
            p_gb, p_bg, loss_bad = self.gilbert
            if self.bad_state:
                if rng.random() < p_bg:
                    self.bad_state = False
            elif rng.random() < p_gb:
                self.bad_state = True
            if self.bad_state and rng.random() < loss_bad:
                return True
        for start, end, rate in self.bursts:
            if start <= now < end and rng.random() < rate:
                return True
        return False


class Link:
    """One direction of a link: serialisation, propagation, an output queue.

    ``transit(pkt, now)`` returns the time the packet reaches the far end, or
    None when it is lost (link down, injected loss, overflow without trim).
    """

    __slots__ = (
        "name", "gbps", "ns_per_byte", "prop_ns", "queue_bytes", "ecn_bytes", "trim",
        "up", "busy_until", "faults", "rng", "tx_packets", "tx_bytes", "drops_down",
        "drops_loss", "drops_overflow", "trims", "ecn_marks", "max_queue_bytes", "reorders",
        "duplicates", "down_count",
    )

    def __init__(self, name: str, gbps: float, prop_ns: float, queue_bytes: int,
                 ecn_bytes: int, trim: bool, seed: int) -> None:
        self.name = name
        self.gbps = gbps
        self.ns_per_byte = 8.0 / gbps
        self.prop_ns = prop_ns
        self.queue_bytes = queue_bytes
        self.ecn_bytes = ecn_bytes
        self.trim = trim
        self.up = True
        self.down_count = 0  # outstanding down events (outages may overlap)
        self.busy_until = 0.0
        self.faults: LinkFaults | None = None
        # Per-link RNG seeded from the run seed and the link's name: adding a
        # fault on one link does not change the draws on any other.
        self.rng = random.Random((seed << 32) ^ zlib.crc32(name.encode()))
        self.tx_packets = 0
        self.tx_bytes = 0
        self.drops_down = 0
        self.drops_loss = 0
        self.drops_overflow = 0
        self.trims = 0
        self.ecn_marks = 0
        self.max_queue_bytes = 0.0
        self.reorders = 0
        self.duplicates = 0

    def fault(self) -> LinkFaults:
        if self.faults is None:
            self.faults = LinkFaults()
        return self.faults

    def queue_at(self, now: float) -> float:
        """Bytes waiting in the output queue at time ``now``."""
        return max(0.0, self.busy_until - now) / self.ns_per_byte

    def transit(self, pkt, now: float):
        if not self.up:
            self.drops_down += 1
            return None
        faults = self.faults
        if faults is not None and faults.drops(self.rng, now, pkt):
            self.drops_loss += 1
            return None
        busy = self.busy_until
        if busy < now:
            busy = now
        queued = (busy - now) / self.ns_per_byte
        size = pkt.wire_len
        if queued + size > self.queue_bytes:
            if self.trim and pkt.kind == DATA and not pkt.trimmed:
                pkt.trim()
                self.trims += 1
                ser = pkt.wire_len * self.ns_per_byte
                self.busy_until = busy + ser
                return now + ser + self.prop_ns
            self.drops_overflow += 1
            return None
        if queued > self.ecn_bytes and pkt.kind == DATA:
            pkt.ce = True
            self.ecn_marks += 1
        if queued > self.max_queue_bytes:
            self.max_queue_bytes = queued
        departure = busy + size * self.ns_per_byte
        self.busy_until = departure
        self.tx_packets += 1
        self.tx_bytes += size
        arrival = departure + self.prop_ns
        if faults is not None and faults.reorder_prob and self.rng.random() < faults.reorder_prob:
            arrival += faults.reorder_ns
            self.reorders += 1
        return arrival

    def counters(self) -> dict:
        return {
            "tx_packets": self.tx_packets, "tx_bytes": self.tx_bytes,
            "drops_down": self.drops_down, "drops_loss": self.drops_loss,
            "drops_overflow": self.drops_overflow, "trims": self.trims,
            "ecn_marks": self.ecn_marks, "max_queue_bytes": round(self.max_queue_bytes),
            "reorders": self.reorders, "duplicates": self.duplicates,
        }


class Host:
    """An endpoint: one uplink and one downlink per plane; ``nic`` receives packets."""

    def __init__(self, fabric: Fabric, name: str, hid: int) -> None:
        self.fabric = fabric
        self.name = name
        self.hid = hid
        self.uplinks: list[Link] = []
        self.downlinks: list[Link] = []
        self.nic = None


class Fabric:
    """The multipath fabric between hosts. Deterministic for a given seed."""

    def __init__(self, engine, *, planes: int = 1, paths_per_plane: int = 8,
                 port_gbps: float = 100.0, core_gbps: float = 100.0,
                 link_delay_ns: float = 500.0, queue_bytes: int = 1 << 20,
                 ecn_bytes: int = 128 * 1024, trim: bool = True,
                 routing: str = "explicit", seed: int = 1) -> None:
        check_routing(routing, paths_per_plane)
        self.engine = engine
        self.planes = planes
        self.paths_per_plane = paths_per_plane
        self.port_gbps = port_gbps
        self.core_gbps = core_gbps
        self.link_delay_ns = link_delay_ns
        self.queue_bytes = queue_bytes
        self.ecn_bytes = ecn_bytes
        self.trim = trim
        self.routing = routing
        self.seed = seed
        self.hosts: dict[str, Host] = {}
        # core[(plane, path, dst_hid)] = link toward host dst
        self.core: dict[tuple[int, int, int], Link] = {}
        self.taps: list = []  # callables(pkt, now) on every packet put on the wire
        self.delivery_hooks: list = []  # callables(pkt, now) on every packet delivered
        self.drop_hooks: list = []  # callables(pkt, now) on every packet dropped (link, route)
        self._route_cache: dict = {}
        self.packets_sent = 0  # frames of every kind put on a host uplink
        self.no_route = 0  # packets dropped for an SRv6 uSID that names no spine

    # -- construction -----------------------------------------------------
    def _link(self, name: str, gbps: float) -> Link:
        return Link(name, gbps, self.link_delay_ns, self.queue_bytes, self.ecn_bytes,
                    self.trim, self.seed)

    def add_host(self, name: str) -> Host:
        if name in self.hosts:
            raise ValueError(f"host {name!r} exists")
        host = Host(self, name, len(self.hosts))
        for plane in range(self.planes):
            host.uplinks.append(self._link(f"{name}.up{plane}", self.port_gbps))
            host.downlinks.append(self._link(f"{name}.down{plane}", self.port_gbps))
            for path in range(self.paths_per_plane):
                self.core[(plane, path, host.hid)] = self._link(
                    f"core.p{plane}.k{path}.to.{name}", self.core_gbps)
        self.hosts[name] = host
        return host

    # -- routing ----------------------------------------------------------
    def path_of(self, src: Host, dst: Host, plane: int, ev: int) -> int | None:
        """The path inside ``plane`` a packet with EV ``ev`` takes (None: no
        route, an SRv6 uSID naming no spine)."""
        key = (src.hid, dst.hid, plane, ev)
        if key not in self._route_cache:
            source_routed = self.routing == "srv6" and is_spine_usid(ev_first_usid(ev))
            routed = ev if source_routed else carried_ev(ev)
            self._route_cache[key] = select_path(self.routing, routed, self.paths_per_plane,
                                                 src.hid, dst.hid, plane)
        return self._route_cache[key]

    def links(self, target: dict) -> list[Link]:
        """Links selected by a fault target.

        ``{"kind": "core", "plane": p|"*", "path": k|"*", "to": host|"*"}``, or
        ``{"kind": "uplink"|"downlink", "host": name|"*", "plane": p|"*"}``, or
        ``{"name": link name}``.
        """
        out: list[Link] = []
        if "name" in target:
            for link in self.all_links():
                if link.name == target["name"]:
                    out.append(link)
            if not out:
                raise ValueError(f"no link named {target['name']!r}")
            return out
        kind = target.get("kind", "core")
        plane = target.get("plane", PATH_ANY)
        if kind == "core":
            path = target.get("path", PATH_ANY)
            to = target.get("to", PATH_ANY)
            for (p, k, hid), link in self.core.items():
                host = self._host_by_id(hid)
                if plane not in (PATH_ANY, p) or path not in (PATH_ANY, k):
                    continue
                if to not in (PATH_ANY, host.name):
                    continue
                out.append(link)
        elif kind in ("uplink", "downlink"):
            for host in self.hosts.values():
                if target.get("host", PATH_ANY) not in (PATH_ANY, host.name):
                    continue
                ports = host.uplinks if kind == "uplink" else host.downlinks
                for p, link in enumerate(ports):
                    if plane in (PATH_ANY, p):
                        out.append(link)
        else:
            raise ValueError(f"unknown link kind {kind!r}")
        if not out:
            raise ValueError(f"fault target {target} selects no link")
        return out

    def _host_by_id(self, hid: int) -> Host:
        for host in self.hosts.values():
            if host.hid == hid:
                return host
        raise KeyError(hid)

    def all_links(self) -> list[Link]:
        out = []
        for host in self.hosts.values():
            out += host.uplinks + host.downlinks
        out += list(self.core.values())
        return out

    # -- faults -------------------------------------------------------------
    def schedule_down(self, target: dict, at_ns: float, up_ns: float | None = None) -> None:
        for link in self.links(target):
            self.engine.at(at_ns, _set_up, (link, False))
            if up_ns is not None:
                self.engine.at(up_ns, _set_up, (link, True))

    def schedule_flap(self, target: dict, start_ns: float, stop_ns: float,
                      down_ns: float, up_ns: float) -> list[tuple[float, float]]:
        """Down for ``down_ns``, up for ``up_ns``, repeatedly, from start to stop."""
        windows = []
        t = start_ns
        while t < stop_ns:
            end = min(t + down_ns, stop_ns)
            windows.append((t, end))
            self.schedule_down(target, t, end)
            t = end + up_ns
        return windows

    # -- forwarding -----------------------------------------------------------
    def send(self, pkt) -> None:
        """Put a packet on its source host's uplink for its plane."""
        now = self.engine.now
        self.packets_sent += 1
        for tap in self.taps:
            tap(pkt, now)
        src = pkt.src
        dst = pkt.dst
        plane = pkt.plane
        path = self.path_of(src, dst, plane, pkt.ev)
        if path is None:
            self.no_route += 1
            for hook in self.drop_hooks:
                hook(pkt, now)
            return
        pkt.path = plane * self.paths_per_plane + path
        pkt.route = (src.uplinks[plane], self.core[(plane, path, dst.hid)], dst.downlinks[plane])
        pkt.hop = 0
        self._hop(pkt)

    def _hop(self, pkt) -> None:
        route = pkt.route
        hop = pkt.hop
        link = route[hop]
        t = link.transit(pkt, self.engine.now)
        if t is None:
            for hook in self.drop_hooks:
                hook(pkt, self.engine.now)
            return
        hop += 1
        pkt.hop = hop
        if hop < len(route):
            nxt = self._hop
        elif self.delivery_hooks:
            nxt = self._deliver
        else:
            nxt = pkt.dst.nic.receive
        self.engine.push(t, nxt, pkt)
        faults = link.faults
        if faults is not None and faults.dup_prob and link.rng.random() < faults.dup_prob:
            link.duplicates += 1
            self.engine.at(t + faults.dup_ns, nxt, pkt.copy())

    def _deliver(self, pkt) -> None:
        for hook in self.delivery_hooks:
            hook(pkt, self.engine.now)
        pkt.dst.nic.receive(pkt)

    def counters(self) -> dict:
        return {link.name: link.counters() for link in self.all_links()}


def _set_up(arg) -> None:
    """Down/up events nest: overlapping outages keep a link down until the last ends."""
    link, up = arg
    if up:
        link.down_count = max(0, link.down_count - 1)
    else:
        link.down_count += 1
    link.up = link.down_count == 0

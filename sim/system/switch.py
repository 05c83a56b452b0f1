"""A cocotb fabric for any number of NICs: one switch per plane.

Topology (one plane; every NIC has one port on each plane's switch)::

    NIC i mac_tx[p] --> uplink (i, p) --> spine path k of plane p
        --> egress port (p, dst) --> NIC dst mac_rx[p]

- A NIC's port on a plane runs at the port's line rate both ways
  (``set_port``; unset: no serialisation), a frame taking its bytes and
  Ethernet's FCS, preamble and gap (``L2_WIRE_EXTRA``, as the golden model's
  links count ``wire_len``). By default the NIC's MAC takes its beats at
  the data path's rate and the uplink serialises the frames it puts on the
  plane, in order and without limit; a data path that outruns its ports
  (by Ethernet's overhead, 2 % at 1 KiB) then builds a standing queue there
  behind its window, and a frame reaches the receiving NIC's mac_rx from
  the moment its last bit leaves the port, a frame's beats later. With
  ``beat_ns`` (the time of one beat of the NICs' 8-byte streams: "the MACs
  as wires", ``SystemTB(wire_macs=True)``) the MAC is the wire: a sink that
  can be paced (``pace``, simhw.py's) takes the NIC's beats only as fast
  as the wire sends them, out of a FIFO of ``MAC_FIFO_BYTES``, and gives
  each frame's departure, so the data path is held back as a real MAC
  holds it; and a frame's last beat reaches mac_rx as its last bit leaves
  the port (the MAC passes the beats on as they come off the wire).
- A frame is switched on its destination MAC address (the first six bytes:
  the same for IPv4 and IPv6) to the NIC that has it (``macs``); a frame for
  an unknown MAC is dropped and counted (``no_route``).
- Its spine path inside the plane comes from its EV by ``routing``, the
  rules of sim/fabric/routing.py as sim/system/fabric.py applies them to a
  frame (``route_frame``; the hash over (source NIC, destination NIC,
  plane, EV)): ``explicit`` (the default: EV mod ``num_paths``, the low EV
  bits selecting the spine), ``hash``, or ``srv6`` (spine k of every plane
  has the uSID ``SPINE_USID_BASE + k``: a uSID carrier takes the spine its
  first uSID names, which consumes it; a carrier whose first uSID names no
  spine is dropped and counted in ``no_route``; any other frame is
  hashed). A path has a delay, a loss rate, reordering and an up/down
  state (``Path``), and no queue.
- The egress port toward the destination is where incast congests: an
  output queue at the port's rate: a data frame that would overflow
  ``queue_bytes`` is trimmed if the port trims (UET style,
  ``host_driver.layers.trim``), any other frame dropped; a data frame that
  finds more than ``ecn_bytes`` queued is marked CE (ECN-capable frames
  only). Frames go through a port in the order they reach it (``_pump``: a
  frame that reaches its port by now + the shortest spine delay is
  final), so the queue is an exact FIFO whatever the senders' uplinks and
  paths do.
- A plane's switch can fail as a whole (``set_plane_up``: every frame on the
  plane is lost, the NICs' links stay up).
- A frame meets a failure (a plane's switch or a spine path down) as it
  reaches the switch, its last bit off the uplink (``Hop.at_switch``), as
  the golden model's core links decide it: a frame still in a paced MAC's
  FIFO or on its uplink when the switch fails is lost, one already past it
  is not, and a lost frame has still taken its uplink. ``egress`` decides,
  by when the pump runs it every frame has reached its switch.

``SwitchFabric(sinks, sources, macs, *, num_paths=8, delay_ns=400, seed=1, beat_ns=None,
routing="explicit")``:
``sinks[i][p]`` and ``sources[i][p]`` are NIC i's mac_tx and mac_rx of plane
p (sim/system/simhw.py's, or anything with ``recv()`` and ``send_at(data,
arrival_ns)``). ``start()`` in a cocotb test. Counters: ``ports[p][dst]``,
``uplinks[i][p]`` and ``spines[p][k]`` (``Path`` objects: carried, dropped,
trimmed, marked, max_queue_bytes), ``plane_frames[i][p]``, ``no_route``,
``delivered`` (per NIC: a list of (arrival ns, source NIC, plane, the bytes)
of every frame handed to it, with ``keep_log``). ``ingress`` and ``egress``
are the per-frame decisions in pure Python; ``forward`` both at once, for
tests without a simulator.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass

from host_driver.driver import mac_to_int
from sim.fabric.routing import check_routing
from sim.model.packet import L2_WIRE_EXTRA
from sim.system.fabric import (
    DELIVERED,
    DROPPED,
    Path,
    Verdict,
    frame_ev,
    is_data_frame,
    route_frame,
)

__all__ = ["SwitchFabric", "Hop", "MAC_FIFO_BYTES"]

# A paced MAC's transmit FIFO: two frames of a 1 KiB MTU, so that the NIC's
# one data path keeps every plane's wire busy while it alternates between
# them; a larger frame goes through it as the wire takes it.
MAC_FIFO_BYTES = 2048
BEAT_BYTES = 8  # the MAC streams' width (sim/system/simhw.py)


@dataclass
class Hop:
    """A frame past its NIC's uplink and spine path, on its way to a port."""

    at_port: float  # when it reaches its destination's port, ns
    seq: int  # ingress order (ties)
    src: int
    plane: int
    dst: int
    path: int
    ev: int | None
    frame: bytes
    at_switch: float = 0.0  # when its last bit leaves the uplink into the switch, ns
    lost: bool = False  # drawn lost on its spine path (``Path.loss``)


class SwitchFabric:
    """NICs joined by one switch per plane (see the module docstring)."""

    def __init__(self, sinks, sources, macs, *, num_paths: int = 8, delay_ns: float = 400.0,
                 seed: int = 1, keep_log: bool = False, beat_ns: float | None = None,
                 routing: str = "explicit"):
        if not len(sinks) == len(sources) == len(macs) >= 2:
            raise ValueError(f"need a sink list, a source list and a MAC per NIC, at least "
                             f"two NICs; got {len(sinks)}, {len(sources)}, {len(macs)}")
        self.num_nics = len(sinks)
        self.num_planes = len(sinks[0])
        if {len(s) for s in (*sinks, *sources)} != {self.num_planes}:
            raise ValueError("every NIC needs one sink and one source per plane")
        if num_paths < 1:
            raise ValueError(f"num_paths must be >= 1, not {num_paths!r}")
        check_routing(routing, num_paths)
        self.routing = routing
        self.sinks, self.sources = sinks, sources
        self.nic_of_mac = {mac_to_int(m).to_bytes(6, "big"): i for i, m in enumerate(macs)}
        if len(self.nic_of_mac) != self.num_nics:
            raise ValueError(f"the NICs' MAC addresses must differ: {list(macs)}")
        self.spines = [[Path(delay_ns=delay_ns) for _ in range(num_paths)]
                       for _ in range(self.num_planes)]
        self.ports = [[Path(delay_ns=0.0, wire_extra=L2_WIRE_EXTRA)
                       for _ in range(self.num_nics)] for _ in range(self.num_planes)]
        self.uplinks = [[Path(delay_ns=0.0, wire_extra=L2_WIRE_EXTRA)
                         for _ in range(self.num_planes)] for _ in range(self.num_nics)]
        self._pending: list[tuple[float, int, Hop]] = []  # hops on their way, a heap
        self._seq = 0
        self.rng = [random.Random(seed * 64 + p) for p in range(self.num_planes)]
        # (ns, up) of each change of a plane's switch, and of a spine path, in order:
        # a frame meets the state of the moment it reaches the switch
        self._plane_changes = [[] for _ in range(self.num_planes)]
        self._path_changes = [[[] for _ in range(num_paths)] for _ in range(self.num_planes)]
        self._latest_ns = 0.0  # the latest time ingress was given, without a simulator
        self._clock = lambda: self._latest_ns
        self.plane_frames = [[0] * self.num_planes for _ in range(self.num_nics)]
        self.no_route = 0
        self.keep_log = keep_log
        self.delivered = [[] for _ in range(self.num_nics)]
        self.beat_ns = beat_ns

    # ---- configuration -------------------------------------------------------------
    def _plane_index(self, plane: int) -> int:
        if not 0 <= plane < self.num_planes:
            raise ValueError(f"plane must be in 0..{self.num_planes - 1}, not {plane!r}")
        return plane

    def set_port(self, *, gbps: float, queue_bytes: int | None = None,
                 ecn_bytes: int | None = None, trim: bool = False,
                 nic: int | None = None, plane: int | None = None) -> None:
        """Every NIC's port (or NIC ``nic``'s, on ``plane``) at ``gbps`` both ways,
        the switch's side (egress toward the NIC) with an output queue of
        ``queue_bytes`` (None: unlimited), CE marking above ``ecn_bytes`` (None:
        none) and trimming on overflow."""
        if nic is not None and not 0 <= nic < self.num_nics:
            raise ValueError(f"nic must be in 0..{self.num_nics - 1}, not {nic!r}")
        planes = range(self.num_planes) if plane is None else [self._plane_index(plane)]
        nics = range(self.num_nics) if nic is None else [nic]
        values = dict(gbps=gbps, queue_bytes=queue_bytes, ecn_bytes=ecn_bytes, trim=trim)
        Path(**values).check()
        for p in planes:
            for i in nics:
                for name, value in values.items():
                    setattr(self.ports[p][i], name, value)
                self.uplinks[i][p].gbps = gbps
                sink = self.sinks[i][p]
                if self.beat_ns is not None and hasattr(sink, "pace"):
                    sink.pace(gbps, L2_WIRE_EXTRA, MAC_FIFO_BYTES)

    def set_path_up(self, path: int, up: bool, plane: int | None = None) -> None:
        """Spine path ``path`` of ``plane`` (None: of every plane) down or up."""
        if not 0 <= path < len(self.spines[0]):
            raise ValueError(f"path must be in 0..{len(self.spines[0]) - 1}, not {path!r}")
        for p in range(self.num_planes) if plane is None else [self._plane_index(plane)]:
            self.spines[p][path].up = bool(up)
            self._path_changes[p][path].append((self._clock(), bool(up)))

    def set_plane_up(self, plane: int, up: bool) -> None:
        """Plane ``plane``'s switch down (every frame that reaches it from now on
        lost) or back up."""
        p = self._plane_index(plane)
        self._plane_changes[p].append((self._clock(), bool(up)))

    @staticmethod
    def _up_at(changes: list[tuple[float, bool]], t: float) -> bool:
        """The state at ``t`` (ns) after ``changes``: the last change at or before it."""
        for at, up in reversed(changes):
            if at <= t:
                return up
        return True

    # ---- forwarding ----------------------------------------------------------------
    def ingress(self, src: int, plane: int, frame: bytes, now: float,
                departure: float | None = None):
        """NIC ``src``'s ``frame``, put on its ``plane`` port at ``now`` (ns): serialised
        on the port's uplink (or off the wire at ``departure``, from a paced
        MAC), switched, sent over its spine path. Returns the ``Hop`` that
        reaches the destination's port (``egress`` decides whether it got
        through the switch, carrying the frame as its spine forwards it), or
        (None, the verdict) for a frame with no route: for no NIC, or an
        SRv6 carrier whose first uSID names no spine. Counts it."""
        self.plane_frames[src][plane] += 1
        self._latest_ns = max(self._latest_ns, now)
        dst = self.nic_of_mac.get(bytes(frame[:6]))
        if dst is None:
            self.no_route += 1
            ev = frame_ev(frame, srv6=self.routing == "srv6")
            return None, Verdict(None, ev, DROPPED, "no_route", None, None)
        k, ev, frame = route_frame(frame, self.routing, len(self.spines[plane]), src, dst,
                                   plane)
        if k is None:
            self.no_route += 1
            return None, Verdict(None, ev, DROPPED, "no_route", None, None)
        spine = self.spines[plane][k]
        uplink = self.uplinks[src][plane]
        if departure is None:
            *_, sent = uplink.enqueue(frame, now, False)  # no limit: the NIC's own MAC
        else:
            sent = departure
        uplink.carried += 1
        lost = bool(spine.loss) and self.rng[plane].random() < spine.loss
        at_port = sent + spine.delay_ns
        if spine.reorder_prob and self.rng[plane].random() < spine.reorder_prob:
            at_port += spine.reorder_ns
            spine.reordered += 1
        self._seq += 1
        return Hop(at_port, self._seq, src, plane, dst, k, ev, frame, sent, lost)

    def egress(self, hop: Hop) -> tuple[int, Verdict]:
        """``hop`` through its switch, lost if the plane's switch or its spine path
        was down as it got there (``at_switch``) or it was drawn lost, then
        through its destination's port on its plane (the queue, marks and
        trims); exact for a FIFO when hops come in the order they reach the
        port (``at_port``, then ``seq``). Counts it."""
        spine = self.spines[hop.plane][hop.path]
        reason = ("plane_down" if not self._up_at(self._plane_changes[hop.plane], hop.at_switch)
                  else "down" if not self._up_at(self._path_changes[hop.plane][hop.path],
                                                 hop.at_switch)
                  else "loss" if hop.lost else None)
        if reason is not None:
            spine.dropped += 1
            return hop.dst, Verdict(hop.path, hop.ev, DROPPED, reason, None, None)
        spine.carried += 1
        port = self.ports[hop.plane][hop.dst]
        fate, reason, ce, out, depart = port.enqueue(hop.frame, hop.at_port,
                                                     is_data_frame(hop.frame))
        if fate == DROPPED:
            port.dropped += 1
            return hop.dst, Verdict(hop.path, hop.ev, DROPPED, reason, None, None)
        port.carried += 1
        port.trimmed += fate != DELIVERED
        port.marked += ce
        return hop.dst, Verdict(hop.path, hop.ev, fate, reason, out, depart, ce)

    def forward(self, src: int, plane: int, frame: bytes, now: float) -> tuple[int | None,
                                                                              Verdict]:
        """``ingress`` and ``egress`` at once, for frames offered in the order they
        reach the ports (tests without a simulator): (destination, verdict)."""
        got = self.ingress(src, plane, frame, now)
        return self.egress(got) if isinstance(got, Hop) else got

    def start(self) -> None:
        import cocotb
        from cocotb.triggers import Event
        from cocotb.utils import get_sim_time

        self._more = Event()
        self._clock = lambda: get_sim_time(unit="ns")
        for i in range(self.num_nics):
            for p in range(self.num_planes):
                cocotb.start_soon(self._run(i, p))
        cocotb.start_soon(self._pump())

    async def _run(self, src: int, plane: int):
        from cocotb.utils import get_sim_time

        sink = self.sinks[src][plane]
        while True:
            frame = await sink.recv()
            got = self.ingress(src, plane, bytes(frame.tdata), get_sim_time(unit="ns"),
                               getattr(frame, "departure_ns", None))
            if isinstance(got, Hop):
                heapq.heappush(self._pending, (got.at_port, got.seq, got))
                self._more.set()

    async def _pump(self):
        """Takes the hops through the ports in the order they reach them: a hop
        that reaches its port by ``now`` + the shortest spine delay goes now,
        since a frame that leaves a NIC from ``now`` on arrives after it."""
        from cocotb.triggers import First, Timer
        from cocotb.utils import get_sim_time

        while True:
            if not self._pending:
                self._more.clear()
                await self._more.wait()
                continue
            soonest = min(s.delay_ns for plane in self.spines for s in plane)
            wait = self._pending[0][0] - soonest - get_sim_time(unit="ns")
            if wait > 0:
                self._more.clear()
                await First(Timer(math.ceil(wait), unit="ns"), self._more.wait())
                continue
            hop = heapq.heappop(self._pending)[2]
            dst, verdict = self.egress(hop)
            if verdict.fate == DROPPED:
                continue
            if self.keep_log:
                self.delivered[dst].append((verdict.arrival_ns, hop.src, hop.plane,
                                            verdict.frame))
            at = verdict.arrival_ns
            if self.beat_ns is not None:  # the last beat as the last bit arrives
                beats = math.ceil(len(verdict.frame) / BEAT_BYTES)
                at = max(get_sim_time(unit="ns"), at - (beats - 1) * self.beat_ns)
            self.sources[dst][hop.plane].send_at(verdict.frame, at)

    def counters(self) -> dict:
        """Per plane, each egress port's and each spine path's counters."""
        return {f"plane{p}": {"ports": [port.counters() for port in self.ports[p]],
                              "spines": [s.counters() for s in self.spines[p]]}
                for p in range(self.num_planes)}

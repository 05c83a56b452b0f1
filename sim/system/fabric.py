"""A cocotb multipath fabric between two NICs' MAC ports.

Each direction takes the frames one NIC puts on ``mac_tx`` (an
``AxiStreamSink``), picks a path from the frame's EV and hands the frame to
the other NIC's ``mac_rx`` (an ``AxiStreamSource``) after the path's delay.
The semantics follow sim/fabric (``Link.transit``):

- the EV a frame carries (``frame_ev``) is its IPv6 flow label << 16 | its
  UDP source port: the source port for IPv4 or a flow label of 0 (the UDP
  EV format), the whole EV for the STEV format;
- path selection: sim/fabric/routing.py's rules, as ``sim.fabric.Fabric.path_of``
  applies them (plane 0; ``ev_path``, ``route_frame``):
  - ``routing="explicit"``: path = EV mod paths (the EV's low bits select
    the spine);
  - ``routing="hash"``: CRC-32 of (src, dst, plane 0, EV) mod paths
    (``hash_path``): a frame with flow label 0 hashes the 5 bytes (src,
    dst, 0, source port), one with a flow label the (flow label, source
    port) pair;
  - ``routing="srv6"``: path ``k``'s spine has the uSID
    ``SPINE_USID_BASE + k``. An IPv6 frame whose destination's first uSID
    (after the ``SRV6_LOCATOR_BITS`` of locator) is in the spines' block is
    a uSID carrier: its EV is the carrier's uSID list (``carrier_ev``, as
    the NIC holds it), it takes the path its first uSID names, and that
    spine consumes the uSID (``srv6_shift``): the frame delivered has the
    shifted destination and the ICRC it was sent with, good once the last
    fabric uSID is consumed. A carrier whose first uSID names no path is
    dropped (reason ``no_route``, counted in ``Direction.no_route``). Any
    other frame (IPv4, a plain IPv6 destination, ACKs) is hashed;
- per path, in this order: down (drops every frame), loss (probability);
  then, when the path has a rate (``gbps``), an output queue: a frame that
  would overflow ``queue_bytes`` is trimmed if it is a data frame and the
  path trims, else dropped; a data frame that finds more than ``ecn_bytes``
  queued is marked CE; then ``ecn_prob`` and ``trim_prob`` mark or trim data
  frames at random (scripted congestion on a fabric that has none);
  arrival = departure + ``delay_ns``, plus ``reorder_ns`` with probability
  ``reorder_prob``. Without ``gbps`` a path is a pure delay (no queue);
- frames are IPv4 or IPv6 (``host_driver.wire`` finds the UDP header and
  the BTH after either);
- ECN marking sets the IP ECN field (IPv4 TOS, IPv6 traffic class) to CE
  (``11b``) on ECN-capable frames only and, for IPv4, recomputes the header
  checksum; the RoCE ICRC stays valid because it masks those bits
  (``hw.headers.ICRC_MASKED_BYTES`` for IPv4);
- trimming is UET-style (docs/protocol.md): ``host_driver.layers.trim``
  cuts payload, pad and ICRC, rewrites the lengths (and IPv4's checksum) and
  sets the DSCP to ``trim_dscp`` (0x3F, the NIC's default);
- frames that are not IPv4 or IPv6 UDP go on path 0.

Interface:

``Fabric(sinks, sources, num_paths=8, delay_ns=400, seed=1, routing="explicit",
keep_log=False, capture=False)``, ``start()`` (in a cocotb test);
``set_loss``, ``set_reorder``, ``set_path_up`` (now), ``set_ecn``,
``set_trim``, ``set_rate`` (queue model), all with an optional direction;
``inject(to_nic, frame, delay_ns=0)``: an attacker's frame, handed to NIC
``to_nic``'s mac_rx past every path (``injected`` lists them);
``schedule_path(path, down_ns, up_ns=None, direction=None)`` and
``schedule(FaultEvent)``: path down/up at simulated times (``fault_log``
records when each was applied); ``capture``: every frame of both directions
as a ``CapturedFrame`` (send time, direction, path (None: no route), EV,
fate ``delivered|dropped|trimmed``, reason, CE mark, the bytes sent and the
bytes delivered, arrival time); ``counters()``: per direction and path;
``directions[d].no_route``: frames dropped for a uSID naming no path.

A source with ``send_at(data, arrival_ns)`` (sim/system/simhw.py's, which
streams the frame from that simulated time on) is handed each frame with its
arrival time at once; any other source gets it from a task that waits until
the arrival time and then calls ``send``.

``Direction.forward(frame, now_ns)`` is the whole per-frame decision in pure
Python (no simulator): tests call it directly. All random draws come from
one ``random.Random`` per direction, so a run is reproducible.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass, field, replace

from host_driver import layers as L
from hw.protocol import SRV6_LOCATOR_BITS, SRV6_USID_BITS, SRV6_USIDS
from sim.fabric.routing import check_routing, ev_first_usid, is_spine_usid, select_path

__all__ = ["Path", "Direction", "Fabric", "FaultEvent", "CapturedFrame", "Verdict",
           "carrier_ev", "ev_path", "frame_ev", "route_frame", "is_data_frame", "mark_ce",
           "DELIVERED", "DROPPED", "TRIMMED"]

DELIVERED, DROPPED, TRIMMED = "delivered", "dropped", "trimmed"
_DATA_OPCODES = frozenset(L.WRITE_OPCODES)
_USID_LIST_BITS = SRV6_USIDS * SRV6_USID_BITS
_USID_LIST_LOW = 128 - SRV6_LOCATOR_BITS - _USID_LIST_BITS  # its position in the address


def carrier_ev(frame: bytes) -> int | None:
    """The uSID list (as the NIC's SRv6 EV holds it) of an IPv6 frame whose
    destination is a uSID carrier on an SRv6 fabric (its first uSID in the
    spines' block), else None."""
    if L.udp_offset(frame) is None or not L.is_ipv6(frame):
        return None
    usids = (L.ipv6_dst(frame) >> _USID_LIST_LOW) & ((1 << _USID_LIST_BITS) - 1)
    return usids if is_spine_usid(ev_first_usid(usids)) else None


def frame_ev(frame: bytes, srv6: bool = False) -> int | None:
    """The EV of an Ethernet / IPv4 or IPv6 / UDP frame (None for any other):
    with ``srv6`` (an SRv6 fabric) a carrier's uSID list (``carrier_ev``);
    else its flow label << 16 | its UDP source port (IPv4: the source port)."""
    off = L.udp_offset(frame)
    if off is None:
        return None
    usids = carrier_ev(frame) if srv6 else None
    if usids is not None:
        return usids
    return L.flow_label(frame) << 16 | int.from_bytes(frame[off:off + 2], "big")


def ev_path(ev: int | None, routing: str, num_paths: int, src: int, dst: int,
            plane: int = 0) -> int | None:
    """The path of a frame whose EV (``frame_ev``) is ``ev``, from NIC ``src``
    to NIC ``dst`` on ``plane`` (None: no route; a frame without one: path 0)."""
    return 0 if ev is None else select_path(routing, ev, num_paths, src, dst, plane)


def route_frame(frame: bytes, routing: str, num_paths: int, src: int, dst: int,
                plane: int = 0) -> tuple[int | None, int | None, bytes]:
    """(path (None: no route), EV, the frame as its path carries it: an SRv6
    carrier's with its first uSID consumed) of ``frame`` under ``routing``."""
    ev = frame_ev(frame, srv6=routing == "srv6")
    path = ev_path(ev, routing, num_paths, src, dst, plane)
    if path is not None and routing == "srv6" and carrier_ev(frame) is not None:
        frame = L.srv6_shifted(frame)
    return path, ev, frame


def is_data_frame(frame: bytes) -> bool:
    """An RDMA WRITE data frame (not yet trimmed): the only kind switches trim or mark."""
    bth = L.bth_offset(frame)
    if bth is None or frame[bth] not in _DATA_OPCODES:
        return False
    return (L.ip_dscp(frame) != L.TRIM_DSCP_DEFAULT
            or len(frame) > L.header_len(frame[bth], ipv6=L.is_ipv6(frame)))


def mark_ce(frame: bytes) -> bytes | None:
    """The frame with its IP ECN = CE (IPv4: its checksum fixed), or None if the
    frame is not ECN-capable (Not-ECT frames are never marked, RFC 3168)."""
    if L.ip_ecn(frame) == L.ECN_NOT_ECT:
        return None
    return L.with_ecn(frame, L.ECN_CE)


@dataclass
class Path:
    """One path of one direction: its parameters and counters."""

    delay_ns: float = 400.0
    loss: float = 0.0
    reorder_prob: float = 0.0
    reorder_ns: float = 0.0
    up: bool = True
    gbps: float | None = None  # serialisation rate; None: no queue, a pure delay
    queue_bytes: int | None = None  # output queue limit (needs gbps)
    ecn_bytes: int | None = None  # CE-mark data frames finding more than this queued
    ecn_prob: float = 0.0  # ... and data frames at random with this probability
    trim: bool = False  # trim data frames that overflow instead of dropping them
    trim_prob: float = 0.0  # trim data frames at random with this probability
    trim_dscp: int = L.TRIM_DSCP_DEFAULT
    wire_extra: int = 0  # bytes a frame takes on the link beyond its own (queue and rate)
    busy_until: float = 0.0
    carried: int = 0
    dropped: int = 0
    trimmed: int = 0
    marked: int = 0
    reordered: int = 0
    max_queue_bytes: float = 0.0

    def check(self) -> None:
        for name in ("loss", "reorder_prob", "ecn_prob", "trim_prob"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"path {name} is a probability in [0, 1], not {value!r}")
        if self.delay_ns < 0 or self.reorder_ns < 0:
            raise ValueError(f"path delays must be >= 0 ns, not {self.delay_ns}, "
                             f"{self.reorder_ns}")
        if self.gbps is not None and self.gbps <= 0:
            raise ValueError(f"path rate gbps must be > 0 (or None for no queue), not "
                             f"{self.gbps!r}")
        if (self.queue_bytes is not None or self.ecn_bytes is not None) and self.gbps is None:
            raise ValueError("queue_bytes and ecn_bytes need a path rate (gbps): without one "
                             "the path has no queue")
        if not 0 <= self.trim_dscp < 64:
            raise ValueError(f"trim_dscp is 6 bits, not {self.trim_dscp!r}")

    def queue_at(self, now: float) -> float:
        """Bytes waiting in the path's output queue at ``now`` (0 without a rate)."""
        if self.gbps is None:
            return 0.0
        return max(0.0, self.busy_until - now) * self.gbps / 8.0

    def enqueue(self, frame: bytes, now: float, data: bool):
        """The output queue's verdict on ``frame`` arriving at ``now`` (``data``:
        a data frame, which alone is trimmed or marked): (fate, reason, CE
        marked, the bytes that leave (None when dropped), departure time).
        Without a rate the frame leaves at once, untouched. Counts nothing but
        the queue's high-water mark; the caller counts the fate."""
        if self.gbps is None:
            return DELIVERED, "", False, frame, now
        busy = max(self.busy_until, now)
        queued = (busy - now) * self.gbps / 8.0
        fate, reason, ce, out = DELIVERED, "", False, frame
        if self.queue_bytes is not None and queued + len(out) + self.wire_extra > self.queue_bytes:
            if not (self.trim and data):
                return DROPPED, "overflow", False, None, now
            out = L.trim(out, self.trim_dscp)
            fate, reason = TRIMMED, "trim_overflow"
        elif self.ecn_bytes is not None and queued > self.ecn_bytes and data:
            marked = mark_ce(out)
            if marked is not None:
                out, ce = marked, True
        self.max_queue_bytes = max(self.max_queue_bytes, queued)
        self.busy_until = busy + (len(out) + self.wire_extra) * 8.0 / self.gbps
        return fate, reason, ce, out, self.busy_until

    def counters(self) -> dict:
        return {"carried": self.carried, "dropped": self.dropped, "trimmed": self.trimmed,
                "ecn_marked": self.marked, "reordered": self.reordered,
                "max_queue_bytes": round(self.max_queue_bytes)}


@dataclass(frozen=True)
class Verdict:
    """What a direction does with one frame (``Direction.forward``)."""

    path: int | None  # None: no route
    ev: int | None
    fate: str  # DELIVERED, DROPPED or TRIMMED
    reason: str  # "", "down", "loss", "overflow", "trim", "trim_overflow", "no_route"
    frame: bytes | None  # the bytes delivered (None when dropped)
    arrival_ns: float | None
    ce: bool = False  # marked CE by this fabric
    reordered: bool = False


@dataclass(frozen=True)
class CapturedFrame:
    """One frame a NIC sent, as the fabric saw it."""

    time_ns: float  # when the NIC put it on mac_tx (last beat)
    direction: int  # 0: nic0 -> nic1, 1: nic1 -> nic0
    path: int | None  # None: no route
    ev: int | None
    fate: str
    reason: str
    ce: bool
    sent: bytes  # as the NIC sent it
    delivered: bytes | None  # as the peer received it (CE / trimmed), None if dropped
    arrival_ns: float | None


@dataclass(frozen=True)
class FaultEvent:
    """A scheduled change: path ``path`` of ``direction`` (None: both) goes
    down (``up=False``) or up at simulated time ``at_ns``."""

    at_ns: float
    path: int
    up: bool
    direction: int | None = None

    def describe(self) -> str:
        where = "both directions" if self.direction is None else f"direction {self.direction}"
        return f"path {self.path} ({where}) {'up' if self.up else 'down'}"


@dataclass
class Direction:
    """One direction (src NIC -> dst NIC) of the fabric."""

    name: str
    src_id: int
    dst_id: int
    paths: list[Path]
    rng: random.Random
    routing: str = "explicit"
    log: list[tuple[float, int, int, bool]] = field(default_factory=list)  # (ns, ev, path, dropped)
    no_route: int = 0  # frames dropped for an SRv6 uSID that names no path

    def path_of(self, ev: int | None) -> int | None:
        """The path of a frame whose EV (``frame_ev``) is ``ev`` (None: no route)."""
        return ev_path(ev, self.routing, len(self.paths), self.src_id, self.dst_id)

    def forward(self, frame: bytes, now: float) -> Verdict:
        """Decide one frame's fate at simulated time ``now`` (ns) and count it."""
        index, ev, frame = route_frame(frame, self.routing, len(self.paths), self.src_id,
                                       self.dst_id)
        if index is None:
            self.no_route += 1
            return Verdict(None, ev, DROPPED, "no_route", None, None)
        path = self.paths[index]
        if not path.up:
            path.dropped += 1
            return Verdict(index, ev, DROPPED, "down", None, None)
        if path.loss and self.rng.random() < path.loss:
            path.dropped += 1
            return Verdict(index, ev, DROPPED, "loss", None, None)
        data = is_data_frame(frame)
        fate, reason, ce, out, depart = path.enqueue(frame, now, data)
        if fate == DROPPED:
            path.dropped += 1
            return Verdict(index, ev, DROPPED, reason, None, None)
        if data and fate == DELIVERED:
            if path.trim_prob and self.rng.random() < path.trim_prob:
                out = L.trim(out, path.trim_dscp)
                fate, reason, ce = TRIMMED, "trim", False
            elif not ce and path.ecn_prob and self.rng.random() < path.ecn_prob:
                marked = mark_ce(out)
                if marked is not None:
                    out, ce = marked, True
        arrival = depart + path.delay_ns
        reordered = bool(path.reorder_prob and self.rng.random() < path.reorder_prob)
        if reordered:
            arrival += path.reorder_ns
            path.reordered += 1
        path.carried += 1
        path.trimmed += fate == TRIMMED
        path.marked += ce
        return Verdict(index, ev, fate, reason, out, arrival, ce, reordered)


class PathSelection:
    """Direction and path arguments of a fabric's controls, checked the same
    way for the cocotb fabric and the model harness's (``self.directions``:
    two objects with a ``paths`` list)."""

    @property
    def num_paths(self) -> int:
        return len(self.directions[0].paths)

    def _dirs(self, direction: int | None) -> list:
        if direction is None:
            return self.directions
        if direction not in (0, 1):
            raise ValueError(f"direction is 0 (nic0 -> nic1), 1 (nic1 -> nic0) or None "
                             f"(both), not {direction!r}")
        return [self.directions[direction]]

    def _path_index(self, path: int) -> int:
        if not 0 <= path < self.num_paths:
            raise ValueError(f"path must be in 0..{self.num_paths - 1}, not {path!r}")
        return path

    def paths(self, direction: int | None = None):
        """The paths of one direction, or of both."""
        return [p for d in self._dirs(direction) for p in d.paths]


class Fabric(PathSelection):
    """Joins ``sinks[i]`` (NIC i's mac_tx) to ``sources[1 - i]`` (the other NIC's mac_rx).

    With planes, ``sinks[i]`` and ``sources[i]`` are lists, one stream per
    plane: a frame NIC i sends on plane p reaches the other NIC on plane p.
    The paths are those of the EVs, whatever the plane: a plane's EVs are
    the paths through it. ``plane_frames[i][p]`` counts the frames NIC i sent
    on plane p, ``plane_evs[i][p]`` them by EV (a Counter); ``set_plane_up``
    takes a plane's switch down (``plane_lost`` times its losses)."""

    def __init__(self, sinks, sources, *, num_paths: int = 8, delay_ns: float = 400.0,
                 seed: int = 1, routing: str = "explicit", keep_log: bool = False,
                 capture: bool = False):
        if num_paths < 1:
            raise ValueError(f"num_paths must be >= 1, not {num_paths!r}")
        check_routing(routing, num_paths)
        self.sinks = [s if isinstance(s, list) else [s] for s in sinks]
        self.sources = [s if isinstance(s, list) else [s] for s in sources]
        if {len(s) for s in self.sinks + self.sources} != {len(self.sinks[0])}:
            raise ValueError("every NIC needs one sink and one source per plane")
        self.num_planes = len(self.sinks[0])
        self.plane_frames = [[0] * self.num_planes for _ in self.sinks]
        # a plane's switch: while down, every frame on the plane is lost
        # (``plane_lost[i][p]``: the times of NIC i's frames lost so, in ns)
        self.plane_up = [True] * self.num_planes
        self.plane_lost = [[[] for _ in range(self.num_planes)] for _ in self.sinks]
        self.plane_evs = [[Counter() for _ in range(self.num_planes)] for _ in self.sinks]
        self.keep_log = keep_log
        self.capture_enabled = capture
        self.capture: list[CapturedFrame] = []
        self.directions = [
            Direction(f"nic{i}->nic{1 - i}", i, 1 - i,
                      [Path(delay_ns=delay_ns) for _ in range(num_paths)],
                      random.Random(seed * 2 + i), routing)
            for i in range(2)
        ]
        self.schedule_events: list[FaultEvent] = []
        self.fault_log: list[tuple[float, FaultEvent]] = []  # (applied at ns, event)
        self.injected: list[tuple[int, bytes]] = []  # (to NIC, frame) of inject()
        self._tasks = []
        self._started = False

    # ---- configuration -------------------------------------------------------------

    def _set(self, direction, **values):
        paths = self.paths(direction)
        for p in paths:
            replace(p, **values).check()  # all or nothing
        for p in paths:
            for name, value in values.items():
                setattr(p, name, value)

    def set_loss(self, loss: float, direction: int | None = None):
        self._set(direction, loss=loss)

    def set_path_up(self, path: int, up: bool, direction: int | None = None):
        for d in self._dirs(direction):
            d.paths[self._path_index(path)].up = up

    def set_plane_up(self, plane: int, up: bool):
        """Take plane ``plane``'s switch down (every frame on it lost, both
        ways, the NICs' links still up) or back up."""
        if not 0 <= plane < self.num_planes:
            raise ValueError(f"plane must be in 0..{self.num_planes - 1}, not {plane!r}")
        self.plane_up[plane] = bool(up)

    def set_reorder(self, prob: float, extra_ns: float, direction: int | None = None):
        self._set(direction, reorder_prob=prob, reorder_ns=extra_ns)

    def set_rate(self, gbps: float | None, *, queue_bytes: int | None = None,
                 direction: int | None = None):
        """Give every path a serialisation rate and an output queue of ``queue_bytes``."""
        self._set(direction, gbps=gbps, queue_bytes=queue_bytes)

    def set_ecn(self, *, threshold_bytes: int | None = None, prob: float = 0.0,
                direction: int | None = None):
        """CE-mark data frames above a queue threshold (needs ``set_rate``) and/or at random."""
        self._set(direction, ecn_bytes=threshold_bytes, ecn_prob=prob)

    def set_trim(self, *, on_overflow: bool = True, prob: float = 0.0,
                 dscp: int = L.TRIM_DSCP_DEFAULT, direction: int | None = None):
        """Trim data frames that overflow a queue and/or at random, DSCP ``dscp``."""
        self._set(direction, trim=on_overflow, trim_prob=prob, trim_dscp=dscp)

    # ---- scheduled faults ----------------------------------------------------------
    def schedule(self, event: FaultEvent) -> None:
        """Apply ``event`` at its simulated time (at once if it is past)."""
        self._path_index(event.path)
        self._dirs(event.direction)
        if event.at_ns < 0:
            raise ValueError(f"fault time must be >= 0 ns, not {event.at_ns!r}")
        self.schedule_events.append(event)
        if self._started:
            self._tasks.append(_start_soon(self._apply_at(event)))

    def schedule_path(self, path: int, down_ns: float, up_ns: float | None = None,
                      direction: int | None = None) -> None:
        """Path ``path`` down at ``down_ns`` and, with ``up_ns``, up again then."""
        if up_ns is not None and up_ns <= down_ns:
            raise ValueError(f"up_ns ({up_ns}) must be after down_ns ({down_ns})")
        self.schedule(FaultEvent(down_ns, path, False, direction))
        if up_ns is not None:
            self.schedule(FaultEvent(up_ns, path, True, direction))

    def apply(self, event: FaultEvent, now: float) -> None:
        self.set_path_up(event.path, event.up, event.direction)
        self.fault_log.append((now, event))

    async def _apply_at(self, event: FaultEvent):
        from cocotb.triggers import Timer
        from cocotb.utils import get_sim_time

        wait = event.at_ns - get_sim_time(unit="ns")
        if wait > 0:
            await Timer(math.ceil(wait), unit="ns")
        self.apply(event, get_sim_time(unit="ns"))

    # ---- running -------------------------------------------------------------------
    def start(self):
        self._started = True
        for i, d in enumerate(self.directions):
            for p in range(self.num_planes):
                self._tasks.append(_start_soon(
                    self._run(i, d, self.sinks[i][p], self.sources[1 - i][p], p)))
        for event in self.schedule_events:
            self._tasks.append(_start_soon(self._apply_at(event)))

    def record(self, direction: int, now: float, sent: bytes, verdict: Verdict) -> None:
        d = self.directions[direction]
        if self.keep_log:
            d.log.append((now, verdict.ev, verdict.path, verdict.fate == DROPPED))
        if self.capture_enabled:
            self.capture.append(CapturedFrame(now, direction, verdict.path, verdict.ev,
                                              verdict.fate, verdict.reason, verdict.ce, sent,
                                              verdict.frame, verdict.arrival_ns))

    async def _run(self, index: int, d: Direction, sink, source, plane: int):
        from cocotb.utils import get_sim_time

        while True:
            frame = await sink.recv()
            self.plane_frames[index][plane] += 1
            data = bytes(frame.tdata)
            now = get_sim_time(unit="ns")
            if not self.plane_up[plane]:
                self.plane_lost[index][plane].append(now)
                continue
            verdict = d.forward(data, now)
            self.plane_evs[index][plane][verdict.ev] += 1
            self.record(index, now, data, verdict)
            if verdict.fate == DROPPED:
                continue
            if hasattr(source, "send_at"):  # the simulator delivers it at its time
                source.send_at(verdict.frame, verdict.arrival_ns)
            else:
                _start_soon(self._deliver(source, verdict.frame, verdict.arrival_ns - now))

    def inject(self, to_nic: int, frame: bytes, delay_ns: float = 0.0, plane: int = 0) -> None:
        """An attacker on the fabric: ``frame`` (bytes as they arrive, FCS
        excluded) is handed to NIC ``to_nic``'s mac_rx (of ``plane``) after ``delay_ns``,
        whatever the paths' state (the attacker sits next to the NIC), and
        listed in ``injected``. Needs ``start()``."""
        if to_nic not in (0, 1):
            raise ValueError(f"to_nic is 0 or 1, not {to_nic!r}")
        if not self._started:
            raise RuntimeError("inject() needs a started fabric (start())")
        from cocotb.utils import get_sim_time

        self.injected.append((to_nic, bytes(frame)))
        source = self.sources[to_nic][plane]
        if hasattr(source, "send_at"):  # the simulator delivers it at its time
            source.send_at(bytes(frame), get_sim_time(unit="ns") + delay_ns)
        else:
            _start_soon(self._deliver(source, bytes(frame), delay_ns))

    @staticmethod
    async def _deliver(source, data: bytes, delay_ns: float):
        from cocotb.triggers import Timer
        from cocotbext.axi import AxiStreamFrame

        if delay_ns > 0:
            await Timer(math.ceil(delay_ns), unit="ns")
        await source.send(AxiStreamFrame(data, tuser=0))

    def counters(self) -> dict:
        """{direction name: [per-path counters]}."""
        return {d.name: [p.counters() for p in d.paths] for d in self.directions}


def _start_soon(coro):
    import cocotb

    return cocotb.start_soon(coro)

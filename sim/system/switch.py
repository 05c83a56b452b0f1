"""A cocotb fabric for any number of NICs: one switch per plane.

Topology (one plane; every NIC has one port on each plane's switch)::

    NIC i mac_tx[p] --> spine path k of plane p --> egress port (p, dst) --> NIC dst mac_rx[p]

- A frame is switched on its destination MAC address (the first six bytes:
  the same for IPv4 and IPv6) to the NIC that has it (``macs``); a frame for
  an unknown MAC is dropped and counted (``no_route``).
- Its spine path inside the plane is its EV (UDP source port) mod
  ``num_paths``, the low EV bits selecting the spine, as explicit routing
  in sim/system/fabric.py; a path has a delay, a loss rate, reordering and an
  up/down state (``Path``), and no queue.
- The egress port toward the destination is where incast congests: an
  output queue at the port's line rate (``set_port``), a frame taking its
  bytes and Ethernet's FCS, preamble and gap (``L2_WIRE_EXTRA``, as the
  golden model's links count ``wire_len``): a data frame that
  would overflow ``queue_bytes`` is trimmed if the port trims (UET style,
  ``host_driver.layers.trim``), any other frame dropped; a data frame that
  finds more than ``ecn_bytes`` queued is marked CE (ECN-capable frames only).
  The queue is evaluated when a frame reaches it (its send time plus its
  path's delay): exact for a FIFO as long as frames reach a port in the
  order they are sent, as they do while the paths' delays are equal and
  nothing is reordered (the default); otherwise an approximation.
- A plane's switch can fail as a whole (``set_plane_up``: every frame on the
  plane is lost, the NICs' links stay up).

``SwitchFabric(sinks, sources, macs, *, num_paths=8, delay_ns=400, seed=1)``:
``sinks[i][p]`` and ``sources[i][p]`` are NIC i's mac_tx and mac_rx of plane
p (sim/system/simhw.py's, or anything with ``recv()`` and ``send_at(data,
arrival_ns)``). ``start()`` in a cocotb test. Counters: ``ports[p][dst]``
and ``spines[p][k]`` (``Path`` objects: carried, dropped, trimmed, marked,
max_queue_bytes), ``plane_frames[i][p]``, ``no_route``, ``delivered``
(per NIC: a list of (arrival ns, source NIC, plane, the bytes) of every
frame handed to it, with ``keep_log``). ``forward(src, plane, frame, now)`` is the whole per-frame
decision in pure Python, for tests without a simulator.
"""

from __future__ import annotations

import random

from sim.model.packet import L2_WIRE_EXTRA
from sim.system.fabric import DELIVERED, DROPPED, Path, Verdict, frame_ev, is_data_frame

__all__ = ["SwitchFabric"]


def mac_bytes(mac: str) -> bytes:
    """``"02:00:00:00:00:01"`` as six bytes; a ValueError for anything else."""
    parts = mac.split(":")
    if len(parts) != 6 or not all(len(x) == 2 for x in parts):
        raise ValueError(f"a MAC address is six hex bytes with colons, not {mac!r}")
    return bytes(int(x, 16) for x in parts)


class SwitchFabric:
    """NICs joined by one switch per plane (see the module docstring)."""

    def __init__(self, sinks, sources, macs, *, num_paths: int = 8, delay_ns: float = 400.0,
                 seed: int = 1, keep_log: bool = False):
        if not len(sinks) == len(sources) == len(macs) >= 2:
            raise ValueError(f"need a sink list, a source list and a MAC per NIC, at least "
                             f"two NICs; got {len(sinks)}, {len(sources)}, {len(macs)}")
        self.num_nics = len(sinks)
        self.num_planes = len(sinks[0])
        if {len(s) for s in (*sinks, *sources)} != {self.num_planes}:
            raise ValueError("every NIC needs one sink and one source per plane")
        if num_paths < 1:
            raise ValueError(f"num_paths must be >= 1, not {num_paths!r}")
        self.sinks, self.sources = sinks, sources
        self.nic_of_mac = {mac_bytes(m): i for i, m in enumerate(macs)}
        if len(self.nic_of_mac) != self.num_nics:
            raise ValueError(f"the NICs' MAC addresses must differ: {list(macs)}")
        self.spines = [[Path(delay_ns=delay_ns) for _ in range(num_paths)]
                       for _ in range(self.num_planes)]
        self.ports = [[Path(delay_ns=0.0, wire_extra=L2_WIRE_EXTRA)
                       for _ in range(self.num_nics)] for _ in range(self.num_planes)]
        self.rng = [random.Random(seed * 64 + p) for p in range(self.num_planes)]
        self.plane_up = [True] * self.num_planes
        self.plane_frames = [[0] * self.num_planes for _ in range(self.num_nics)]
        self.no_route = 0
        self.keep_log = keep_log
        self.delivered = [[] for _ in range(self.num_nics)]
        self._started = False

    # ---- configuration -------------------------------------------------------------
    def _plane_index(self, plane: int) -> int:
        if not 0 <= plane < self.num_planes:
            raise ValueError(f"plane must be in 0..{self.num_planes - 1}, not {plane!r}")
        return plane

    def set_port(self, *, gbps: float, queue_bytes: int | None = None,
                 ecn_bytes: int | None = None, trim: bool = False,
                 nic: int | None = None, plane: int | None = None) -> None:
        """Every egress port (or NIC ``nic``'s, on ``plane``) at ``gbps`` with an
        output queue of ``queue_bytes`` (None: unlimited), CE marking above
        ``ecn_bytes`` (None: none) and trimming on overflow."""
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

    def set_path_up(self, path: int, up: bool, plane: int | None = None) -> None:
        """Spine path ``path`` of ``plane`` (None: of every plane) down or up."""
        if not 0 <= path < len(self.spines[0]):
            raise ValueError(f"path must be in 0..{len(self.spines[0]) - 1}, not {path!r}")
        for p in range(self.num_planes) if plane is None else [self._plane_index(plane)]:
            self.spines[p][path].up = bool(up)

    def set_plane_up(self, plane: int, up: bool) -> None:
        """Plane ``plane``'s switch down (every frame on it lost) or back up."""
        self.plane_up[self._plane_index(plane)] = bool(up)

    # ---- forwarding ----------------------------------------------------------------
    def forward(self, src: int, plane: int, frame: bytes, now: float) -> tuple[int | None,
                                                                              Verdict]:
        """Where NIC ``src``'s ``frame``, sent on ``plane`` at ``now`` (ns), goes:
        (destination NIC or None, verdict). Counts it."""
        self.plane_frames[src][plane] += 1
        ev = frame_ev(frame)
        k = 0 if ev is None else ev % len(self.spines[plane])
        dst = self.nic_of_mac.get(bytes(frame[:6]))
        if dst is None:
            self.no_route += 1
            return None, Verdict(k, ev, DROPPED, "no_route", None, None)
        spine = self.spines[plane][k]
        if not self.plane_up[plane]:
            spine.dropped += 1
            return dst, Verdict(k, ev, DROPPED, "plane_down", None, None)
        if not spine.up or (spine.loss and self.rng[plane].random() < spine.loss):
            spine.dropped += 1
            return dst, Verdict(k, ev, DROPPED, "down" if not spine.up else "loss", None, None)
        at_port = now + spine.delay_ns
        if spine.reorder_prob and self.rng[plane].random() < spine.reorder_prob:
            at_port += spine.reorder_ns
            spine.reordered += 1
        spine.carried += 1
        port = self.ports[plane][dst]
        fate, reason, ce, out, depart = port.enqueue(frame, at_port, is_data_frame(frame))
        if fate == DROPPED:
            port.dropped += 1
            return dst, Verdict(k, ev, DROPPED, reason, None, None)
        port.carried += 1
        port.trimmed += fate != DELIVERED
        port.marked += ce
        return dst, Verdict(k, ev, fate, reason, out, depart, ce)

    def start(self) -> None:
        import cocotb

        self._started = True
        for i in range(self.num_nics):
            for p in range(self.num_planes):
                cocotb.start_soon(self._run(i, p))

    async def _run(self, src: int, plane: int):
        from cocotb.utils import get_sim_time

        sink = self.sinks[src][plane]
        while True:
            frame = bytes((await sink.recv()).tdata)
            dst, verdict = self.forward(src, plane, frame, get_sim_time(unit="ns"))
            if verdict.fate == DROPPED:
                continue
            if self.keep_log:
                self.delivered[dst].append((verdict.arrival_ns, src, plane, verdict.frame))
            self.sources[dst][plane].send_at(verdict.frame, verdict.arrival_ns)

    def counters(self) -> dict:
        """Per plane, each egress port's and each spine path's counters."""
        return {f"plane{p}": {"ports": [port.counters() for port in self.ports[p]],
                              "spines": [s.counters() for s in self.spines[p]]}
                for p in range(self.num_planes)}

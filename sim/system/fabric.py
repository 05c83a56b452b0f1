"""A cocotb multipath fabric between two NICs' MAC ports.

Each direction takes the frames one NIC puts on ``mac_tx`` (an
``AxiStreamSink``), picks a path from the frame's EV (its UDP source port)
and hands the frame to the other NIC's ``mac_rx`` (an ``AxiStreamSource``)
after the path's delay. The semantics follow sim/fabric:

- path selection: ``routing="explicit"``: path = EV mod paths (the EV's low
  bits select the spine); ``routing="hash"``: the same CRC-32 of
  (src, dst, plane 0, EV) as ``sim.fabric.Fabric.path_of``;
- per path: a delay (ns), a loss probability, a reorder probability with an
  extra delay, and down/up (a down path drops every frame);
- frames that are not IPv4/UDP go on path 0.

All random draws come from one ``random.Random(seed)`` per direction, so a run
is reproducible. Counters per path: frames carried and dropped.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, field

import cocotb
from cocotb.triggers import Timer
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiStreamFrame

__all__ = ["Path", "Direction", "Fabric", "frame_ev"]


def frame_ev(frame: bytes) -> int | None:
    """The UDP source port (EV) of an Ethernet/IPv4/UDP frame, else None."""
    if len(frame) < 42 or frame[12:14] != b"\x08\x00" or frame[23] != 17:
        return None
    ihl = (frame[14] & 0x0F) * 4
    return int.from_bytes(frame[14 + ihl:16 + ihl], "big")


@dataclass
class Path:
    delay_ns: float = 400.0
    loss: float = 0.0
    reorder_prob: float = 0.0
    reorder_ns: float = 0.0
    up: bool = True
    carried: int = 0
    dropped: int = 0


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

    def path_of(self, ev: int | None) -> int:
        if ev is None:
            return 0
        if self.routing == "explicit":
            return ev % len(self.paths)
        blob = bytes((self.src_id & 0xFF, self.dst_id & 0xFF, 0, ev >> 8, ev & 0xFF))
        return zlib.crc32(blob) % len(self.paths)


class Fabric:
    """Joins ``sinks[i]`` (NIC i's mac_tx) to ``sources[1 - i]`` (the other NIC's mac_rx)."""

    def __init__(self, sinks, sources, *, num_paths: int = 8, delay_ns: float = 400.0,
                 seed: int = 1, routing: str = "explicit", keep_log: bool = False):
        if routing not in ("explicit", "hash"):
            raise ValueError(f"routing must be 'explicit' or 'hash', not {routing!r}")
        self.sinks, self.sources = sinks, sources
        self.keep_log = keep_log
        self.directions = [
            Direction(f"nic{i}->nic{1 - i}", i, 1 - i,
                      [Path(delay_ns=delay_ns) for _ in range(num_paths)],
                      random.Random(seed * 2 + i), routing)
            for i in range(2)
        ]
        self._tasks = []

    def start(self):
        for i, d in enumerate(self.directions):
            self._tasks.append(cocotb.start_soon(self._run(d, self.sinks[i], self.sources[1 - i])))

    def paths(self, direction: int | None = None):
        """The paths of one direction, or of both."""
        dirs = self.directions if direction is None else [self.directions[direction]]
        return [p for d in dirs for p in d.paths]

    def set_loss(self, loss: float, direction: int | None = None):
        for p in self.paths(direction):
            p.loss = loss

    def set_path_up(self, path: int, up: bool, direction: int | None = None):
        dirs = self.directions if direction is None else [self.directions[direction]]
        for d in dirs:
            d.paths[path].up = up

    def set_reorder(self, prob: float, extra_ns: float, direction: int | None = None):
        for p in self.paths(direction):
            p.reorder_prob, p.reorder_ns = prob, extra_ns

    async def _run(self, d: Direction, sink, source):
        while True:
            frame = await sink.recv()
            data = bytes(frame.tdata)
            now = get_sim_time(unit="ns")
            ev = frame_ev(data)
            index = d.path_of(ev)
            path = d.paths[index]
            dropped = not path.up or (path.loss and d.rng.random() < path.loss)
            if self.keep_log:
                d.log.append((now, ev, index, bool(dropped)))
            if dropped:
                path.dropped += 1
                continue
            path.carried += 1
            delay = path.delay_ns
            if path.reorder_prob and d.rng.random() < path.reorder_prob:
                delay += path.reorder_ns
            cocotb.start_soon(self._deliver(source, data, delay))

    @staticmethod
    async def _deliver(source, data: bytes, delay_ns: float):
        await Timer(delay_ns, unit="ns")
        await source.send(AxiStreamFrame(data, tuser=0))

"""Incast: several NICs WRITE into one at once, with UET NSCC and ECN, on RTL
NICs (tests/system/test_incast.py, a switch per plane: sim/system/switch.py)
or on model NICs (``run_model``: the golden model's transport on its
fabric), through the same driver code (``run_incast``).

The scenario: NIC 0 receives; NICs 1 .. ``senders`` each have one QP bound to
a QP of NIC 0, NSCC selected by name on every NIC (``set_congestion``) at
``base_rtt_ns`` (by default the fabric's, ``fabric_base_rtt_ns``), and each
WRITEs ``bytes_per_sender`` in messages of
``message_bytes``, keeping its send queue full. Every ``sample_cycles`` the
driver reads each sender's window (TX's ``qp_cwnd``: NSCC's bytes //
mtu_wire) and takes its completions. The bottleneck is NIC 0's port on
each plane: an output queue at the plane's line rate that CE-marks data
frames above ``port_ecn_bytes`` queued and trims those that would overflow
``port_queue_bytes``.

Rates: a NIC's data path (``data_width`` bits a cycle) carries all its
planes' traffic (PlaneMerge joins them into the one RX pipeline), so each
plane's port runs at the data path's rate / planes, both ways, as an 800G
NIC has 8 ports of 100G: the receiver's ports together are the bottleneck,
not its data path. Times are NIC clock cycles on both backends: the RTL runs
its clock at 8 ns of simulated time while its registers describe a NIC
clocked at ``clk_freq_hz`` (sim/system/top.py); the model runs at the clock
its registers describe. The model NICs have the planes too (``ModelFabric(
planes=...)``): each EV's packets leave on its plane's port, serialised at
the port's rate, cross a spine path that is a pure delay, and queue at the
receiver's port on that plane, as the RTL's frames do in SwitchFabric.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from host_driver.driver import NSCC, Completion, EvState, WrOpcode
from hw.reliability.cc_defaults import DATA_WIRE_OVERHEAD
from sim.system.pairs import connect_pair

# NSCC's base RTT with one plane: the system top's NIC (a 60 us round trip of its nominal
# clock, 940 cycles) is above the scenario's unloaded round trip
ONE_PLANE_BASE_RTT_NS = 60_000.0
# A spine path is a pure delay (as SwitchFabric's): its links far faster than any port
SPINE_GBPS = 1e6

__all__ = ["IncastConfig", "IncastRun", "run_incast", "run_rtl", "run_model", "mean_window",
           "summed_window", "best_goodput", "figures", "fabric_base_rtt_ns",
           "ONE_PLANE_BASE_RTT_NS"]


@dataclass(frozen=True)
class IncastConfig:
    senders: int = 3
    bytes_per_sender: int = 192 * 1024
    message_bytes: int = 16 * 1024
    mtu: int = 1024
    # NSCC's base RTT, in the NIC's nominal ns (None: ``fabric_base_rtt_ns``)
    base_rtt_ns: float | None = None
    port_ecn_bytes: int = 4096  # per plane's port toward the receiver
    port_queue_bytes: int = 32 * 1024
    delay_cycles: int = 50  # each spine path's one-way delay
    sample_cycles: int = 256
    evs: int = 8  # per connection, spread over the planes
    timeout: int = 10  # the retransmit timeout, 1.024 us x 2^timeout (QueuePair.to_rts)
    sack_threshold: int = 0  # SACK loss detection (0: none, the timer alone)
    seed: int = 1
    timeout_cycles: int = 2_000_000
    # a plane's switch fails (every frame on it lost) this many cycles after the first
    # post; the senders' EV events are then read at every sample
    fail_plane: int | None = None
    fail_at_cycle: int = 0
    # RTL only: the NICs' MACs as wires (SwitchFabric's ``beat_ns``: paced at the
    # ports' rate, frames into RX as they come off the wire)
    wire_macs: bool = False

    def check(self) -> None:
        if not 1 <= self.senders <= 7:
            raise ValueError(f"senders must be in 1..7, not {self.senders!r}")
        if self.bytes_per_sender % self.message_bytes or self.message_bytes <= 0:
            raise ValueError(f"bytes_per_sender ({self.bytes_per_sender}) must be a whole "
                             f"number of messages of message_bytes ({self.message_bytes})")
        if not 0 < self.port_ecn_bytes < self.port_queue_bytes:
            raise ValueError(f"need 0 < port_ecn_bytes < port_queue_bytes, not "
                             f"{self.port_ecn_bytes}, {self.port_queue_bytes}")


@dataclass
class IncastRun:
    """What ``run_incast`` saw, per sender s (0-based: NIC s + 1): its window
    samples ``(cycle, packets)``, the cycle its last WQE completed, all from the
    cycle the first WQE was posted."""

    windows: list[list[tuple[float, int]]] = field(default_factory=list)
    finish: list[float] = field(default_factory=list)
    start_window: int = 0  # packets: NSCC's first window (max_cwnd // mtu_wire)
    start: float = 0.0  # the clock's cycle at the first post
    failed_at: float | None = None  # the cycle the plane failed
    # per sender (with fail_plane): (cycle, EV index, new state) of its EV events
    ev_events: list[list[tuple[float, int, int]]] = field(default_factory=list)
    num_evs: int = 0  # per sender's QP

    def to_bad(self, sender: int, planes: int, plane: int) -> list[float]:
        """Cycles from the failure to each of ``plane``'s EVs (EV i is on plane i
        mod ``planes``) of ``sender`` (0-based) going ASSUMED_BAD, in EV order;
        inf for one that never did."""
        first = {}
        for t, ev, new in self.ev_events[sender]:
            if new == EvState.ASSUMED_BAD and t >= self.failed_at:
                first.setdefault(ev, t - self.failed_at)
        return [first.get(ev, math.inf) for ev in range(self.num_evs) if ev % planes == plane]


def mean_window(samples: list[tuple[float, int]], since: float, until: float) -> float:
    """The time-weighted mean of a window trace over [since, until)."""
    total = weight = 0.0
    for (t0, w), (t1, _) in zip(samples, samples[1:] + [(until, 0)], strict=True):
        lo, hi = max(t0, since), min(t1, until)
        if hi > lo:
            total += w * (hi - lo)
            weight += hi - lo
    if not weight:
        raise ValueError(f"no window sample in [{since}, {until})")
    return total / weight


def fabric_base_rtt_ns(params: dict, planes: int, mtu: int) -> float:
    """NSCC's base RTT for the scenario's fabric, in the NIC's nominal ns:
    ONE_PLANE_BASE_RTT_NS, above the unloaded round trip with one plane, and
    for each plane beyond the first, the longer store-and-forward of a full
    frame at the sender's and at the receiver's port (each runs at 1 / planes
    of the data path's rate)."""
    frame_ns = (mtu + DATA_WIRE_OVERHEAD) * 8 / (params["data_width"] * params["clk_freq_hz"]
                                                 / 1e9)
    return ONE_PLANE_BASE_RTT_NS + 2 * (planes - 1) * frame_ns


def summed_window(run: IncastRun, since: float = 0.0, until: float | None = None) -> float:
    """The senders' windows summed, time-averaged over [since, until) (default:
    until the first sender is done, while all of them send)."""
    until = min(run.finish) if until is None else until
    return sum(mean_window(w, since, until) for w in run.windows)


def best_goodput(params: dict, mtu: int) -> float:
    """Payload bytes per cycle that a NIC's data path (all its planes' ports
    together) carries at most: full data frames, each with its headers and
    Ethernet's FCS, preamble and gap (``DATA_WIRE_OVERHEAD``)."""
    return params["data_width"] / 8 * mtu / (mtu + DATA_WIRE_OVERHEAD)


def figures(run: IncastRun, cfg: IncastConfig, params: dict) -> dict:
    """A run's figures: cycles to the last completion, goodput over that span
    (from the first post) as a fraction of ``best_goodput``, the summed window;
    with ``fail_plane``, the cycles from the failure to each of the plane's EVs
    of sender 1 going ASSUMED_BAD."""
    last = max(run.finish)
    rate = cfg.senders * cfg.bytes_per_sender / last
    out = {"last_completion": last, "goodput": rate,
           "goodput_ratio": rate / best_goodput(params, cfg.mtu),
           "summed_window": summed_window(run),
           "min_windows": [min(x for _, x in w) for w in run.windows]}
    if cfg.fail_plane is not None:  # sender 1's EVs of the failed plane (None: never)
        out["to_bad"] = [None if math.isinf(t) else t for t in
                         run.to_bad(0, params.get("num_planes", 1), cfg.fail_plane)]
    return out


async def run_incast(ends, cfg: IncastConfig, now_cycles, fail=None) -> IncastRun:
    """The scenario on ``ends`` (``ends[i].dev``, ``ends[i].conns``; NIC 0 the
    receiver); ``now_cycles()`` the NIC clock; ``fail(plane)`` takes a plane's
    switch down (needed with ``cfg.fail_plane``). Asserts that every WQE
    completes SUCCESS and that every byte lands where it was written."""
    cfg.check()
    if len(ends) < cfg.senders + 1:
        raise ValueError(f"{cfg.senders} senders and a receiver need {cfg.senders + 1} NICs, "
                         f"not {len(ends)}")
    senders = range(1, cfg.senders + 1)
    for end in ends[:cfg.senders + 1]:
        dev = end.dev
        base_rtt_ns = cfg.base_rtt_ns or fabric_base_rtt_ns(dev.params, dev.num_planes,
                                                              cfg.mtu)
        words = await dev.set_congestion(NSCC, base_rtt_ns=base_rtt_ns, mtu=cfg.mtu)
    # a sender's first window: NSCC's max_cwnd, in packets (the words it was given)
    rel = ends[1].dev.rel
    start_window = (rel.unpack("nscc_max_cwnd", words["nscc_max_cwnd"])["max_cwnd"]
                    // rel.unpack("nscc_mtu", words["nscc_mtu"])["mtu_wire"])
    pairs = [await connect_pair(ends, s, 0, buf_size=cfg.bytes_per_sender, mtu=cfg.mtu,
                                evs=cfg.evs, timeout=cfg.timeout,
                                sack_threshold=cfg.sack_threshold) for s in senders]
    rng = random.Random(cfg.seed)
    payloads = [rng.randbytes(cfg.bytes_per_sender) for _ in senders]
    for s, (mine, _), data in zip(senders, pairs, payloads, strict=True):
        ends[s].dev.mem.write(mine.send_buf, data)
    messages = cfg.bytes_per_sender // cfg.message_bytes
    posted, done = [0] * cfg.senders, [0] * cfg.senders
    run = IncastRun([[] for _ in senders], [0.0] * cfg.senders, start_window,
                    ev_events=[[] for _ in senders], num_evs=cfg.evs)
    if cfg.fail_plane is not None and fail is None:
        raise ValueError("fail_plane needs a fail(plane) function from the backend")
    start = run.start = now_cycles()
    while min(done) < messages:
        now = now_cycles() - start
        if now > cfg.timeout_cycles:
            raise AssertionError(f"incast: not done after {cfg.timeout_cycles} cycles: "
                                 f"{done} of {messages} messages completed per sender")
        if cfg.fail_plane is not None and run.failed_at is None and now >= cfg.fail_at_cycle:
            fail(cfg.fail_plane)
            run.failed_at = now_cycles() - start
        for j, s in enumerate(senders):
            if cfg.fail_plane is not None:
                run.ev_events[j] += [(now_cycles() - start, e.ev_index, e.new)
                                     for e in await ends[s].dev.read_ev_events()]
            if done[j] == messages:
                continue
            mine, theirs = pairs[j]
            qp = mine.qp
            for cqe in await qp.send_cq.poll():
                assert cqe.status == Completion.SUCCESS, f"sender {s}: {cqe}"
                done[j] += 1
            if done[j] == messages:
                run.finish[j] = now_cycles() - start
                continue
            while posted[j] < messages and qp.outstanding < qp.sq_size:
                offset = posted[j] * cfg.message_bytes
                await qp.post_send(WrOpcode.WRITE, local_addr=mine.send_buf + offset,
                                   length=cfg.message_bytes,
                                   remote_addr=theirs.recv_buf + offset, rkey=theirs.mr.rkey)
                posted[j] += 1
            run.windows[j].append((now_cycles() - start,
                                   await ends[s].dev.tx.read("qp_cwnd", qp.qpn)))
        await ends[0].dev.transport.idle(cfg.sample_cycles)
    for j, ((_, theirs), data) in enumerate(zip(pairs, payloads, strict=True)):
        got = ends[0].dev.mem.read(theirs.recv_buf, len(data))
        if got != data:
            first = next(i for i in range(len(data)) if got[i] != data[i])
            raise AssertionError(f"incast: sender {j + 1}'s data differs at byte {first}")
    return run


async def run_rtl(dut, cfg: IncastConfig, params: dict, keep_log: bool = False):
    """The scenario on the RTL NICs of ``dut`` (a ``two_nic_sim`` of NicCores
    built with ``params``, any number of them, in a cocotb test): a
    ``SystemTB`` whose switch per plane runs each port at the data path's rate
    / planes with ``cfg``'s queue, marking and trimming. Returns (the
    SystemTB, the run)."""
    from cocotb.utils import get_sim_time

    from sim.system.harness import CLK_NS, SystemTB

    tb = SystemTB(dut, delay_ns=cfg.delay_cycles * CLK_NS, keep_log=keep_log, seed=cfg.seed,
                  switch=True, wire_macs=cfg.wire_macs)
    tb.fabric.set_port(gbps=params["data_width"] / CLK_NS / tb.num_planes,
                       queue_bytes=cfg.port_queue_bytes, ecn_bytes=cfg.port_ecn_bytes,
                       trim=True)
    await tb.init()
    run = await run_incast(tb.ends, cfg, lambda: get_sim_time(unit="ns") / CLK_NS,
                           fail=lambda plane: tb.fabric.set_plane_up(plane, False))
    return tb, run


def run_model(cfg: IncastConfig, params: dict, planes: int,
              keep: dict | None = None) -> tuple[IncastRun, dict]:
    """The scenario on model NICs (NicCore ``params``) on a model fabric of
    ``planes`` planes, each port at the data path's rate / planes (see the
    module docstring). Returns the run and the receiver's ports' counters,
    summed over the planes but ``max_queue_bytes``, the largest port's
    (sim.fabric ``Link.counters``); ``keep`` (a dict) gets the ``ends`` (each
    with its ``dev``) and the ``fabric``, for a test to look further."""
    import asyncio

    from host_driver.driver import Device
    from host_driver.model_transport import ModelTransport
    from sim.nicmodel import ModelFabric, ModelNic
    from sim.system.model_harness import BUILD_IDS
    from sim.system.pairs import IPS, MACS, RAM_SIZE

    cfg.check()
    period_ns = 1e9 / params["clk_freq_hz"]
    gbps = params["data_width"] / period_ns / planes
    fabric = ModelFabric(num_paths=8, delay_ns=cfg.delay_cycles * period_ns, gbps=gbps,
                         seed=cfg.seed, planes=planes, core_gbps=SPINE_GBPS)
    ends = []
    for _ in range(cfg.senders + 1):
        nic = ModelNic(params, fabric, build_id=BUILD_IDS[0], mem_size=RAM_SIZE)
        ends.append(_ModelEnd(Device(ModelTransport(nic))))
    downs = fabric.paths.hosts["nic0"].downlinks
    for down in downs:
        down.queue_bytes, down.ecn_bytes = cfg.port_queue_bytes, cfg.port_ecn_bytes
        down.trim = True

    def fail(plane):
        """Plane ``plane``'s switch: every path of the plane down, both ways."""
        for link in fabric.paths.links({"kind": "core", "plane": plane}):
            link.up = False

    async def scenario():
        for i, end in enumerate(ends):
            await end.dev.init()
            await end.dev.set_address(MACS[i], IPS[i])
        return await run_incast(ends, cfg, lambda: fabric.now / period_ns, fail)

    run = asyncio.run(scenario())
    if keep is not None:
        keep.update(ends=ends, fabric=fabric)
    counters = [down.counters() for down in downs]
    total = {k: sum(c[k] for c in counters) for k in counters[0]}
    total["max_queue_bytes"] = max(c["max_queue_bytes"] for c in counters)
    return run, total


@dataclass
class _ModelEnd:
    dev: object
    conns: list = field(default_factory=list)

"""``make sim``'s main demo: two RTL NICs over a faulty 8-path fabric.

Two NicCores (``sim.system.top``, 64-bit datapath at 125 MHz: the line rate
of each MAC port is 64 bit x 125 MHz = 8 Gb/s) run under Verilator, joined
by the cocotb multipath fabric (``sim.system.fabric``), and are configured and
driven only through the host driver (``host_driver.driver`` on a
``CocotbTransport``, ``sim.system.harness.SystemTB``).

Workload (``ring_workload``), training style: a ring of the two NICs. In each
of ``rounds`` rounds every NIC writes its shard (``shard_bytes``, as
``messages`` RDMA WRITE_WITH_IMM of equal size, immediate ``round << 8 |
message``) into the next NIC's receive buffer, slot ``round``, both
directions at once. A NIC's shard of round r > 0 is its own fresh data XOR
the shard it received in round r - 1, so it cannot send before it has
consumed the peer's immediates from its receive CQ (a reduce step). Every
received slot is checked byte for byte against what the peer sent, after
each round and again at the end; any difference fails the run.

Faults (``DemoConfig``): path ``fail_path`` of direction ``fail_direction``
(nic0 -> nic1: nic0's data and nic0's ACKs) is blackholed at
``fail_at_frac`` of the ideal run time and comes back at ``up_at_frac``;
random loss, ECN CE marks and UET trims on every path of both directions.

Outputs (``run(outdir)``): ``report.md``, ``report.json``, ``traffic.pcap``
(every frame of both directions, Ethernet link type, timestamps = simulated
send time; the bytes as delivered, so CE marks and trims are visible; dropped
frames as sent), ``traffic_fates.csv`` (per pcap record: fate, reason, path,
EV), ``waves.fst`` (or ``waves.vcd``), and plots: ``goodput.png``,
``paths.png``, ``ev_states.png``.

The cocotb test (``system_demo``) runs the workload and pickles the raw
record (``demo_raw.pkl``); everything after that (``analyse``,
``write_report``, ``write_pcap``, ``plot``) is pure Python and works on any
raw record of the same shape (a test builds a synthetic one).

    python -m sim.system.demo --out build/sim/system
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import pickle
import random
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import cocotb

ROOT = Path(__file__).resolve().parents[2]
RUN_NAME = "system_demo"
ENV_OUT = "SYSTEM_DEMO_OUT"
ENV_CFG = "SYSTEM_DEMO_CFG"
RAW = "demo_raw.pkl"
CLK_NS = 8  # sim.system.harness.CLK_NS: 125 MHz
DATA_WIDTH = 64
LINE_RATE_GBPS = DATA_WIDTH / CLK_NS  # 64 bit x 125 MHz = 8 Gb/s
EV_STATE_NAMES = {0: "GOOD", 1: "ASSUMED_BAD", 2: "DENIED"}
EV_STATE_CHAR = {0: "G", 1: "B", 2: "D"}

__all__ = ["DemoConfig", "ring_workload", "run", "analyse", "write_report", "write_pcap",
           "plot", "data_frame_info", "LINE_RATE_GBPS"]


@dataclass
class DemoConfig:
    """The demo scenario. ``check()`` raises ValueError naming what to fix."""

    rounds: int = 5
    shard_bytes: int = 128 * 1024
    messages: int = 4  # WRITE_WITH_IMM per shard
    paths: int = 8
    delay_ns: float = 400.0
    mtu: int = 1024
    seed: int = 2026
    loss: float = 0.0005  # every path, both directions
    ecn_prob: float = 0.01  # CE marks on data frames, every path
    trim_prob: float = 0.002  # UET trims of data frames, every path
    fail: bool = True  # the blackhole window below; False: no path fails
    fail_path: int = 3
    fail_direction: int = 0
    fail_at_frac: float = 0.3  # of the ideal run time
    up_at_frac: float = 0.6
    timeout: int = 9  # retransmit timer 1.024 us x 2^t at the NIC's 15.625 MHz timer unit
    sack_threshold: int = 3  # SACKed PSNs past a hole that declare it lost (0: timer only)
    probe_period: int = 4000  # cycles between probes of an ASSUMED_BAD EV
    sample_cycles: int = 250  # EV event polling
    progress_us: float = 250.0
    capture: bool = True

    def check(self) -> DemoConfig:
        if self.rounds < 1 or self.messages < 1:
            raise ValueError(f"rounds and messages must be >= 1, not {self.rounds}, "
                             f"{self.messages}")
        if self.shard_bytes % self.messages or self.shard_bytes // self.messages < 1:
            raise ValueError(f"shard_bytes ({self.shard_bytes}) must be a multiple of "
                             f"messages ({self.messages})")
        if self.rounds * self.shard_bytes > 3 << 20:
            raise ValueError(f"rounds x shard_bytes = {self.rounds * self.shard_bytes} B: the "
                             f"harness' 8 MiB host memory per NIC holds at most 3 MiB of "
                             f"receive and 3 MiB of send buffer")
        if not 0 <= self.fail_path < self.paths or self.fail_direction not in (0, 1):
            raise ValueError(f"fail_path must be in 0..{self.paths - 1} and fail_direction 0 "
                             f"or 1, not {self.fail_path}, {self.fail_direction}")
        if not 0 < self.fail_at_frac < self.up_at_frac:
            raise ValueError(f"need 0 < fail_at_frac < up_at_frac, not {self.fail_at_frac}, "
                             f"{self.up_at_frac}")
        if self.mtu not in (256, 512, 1024):
            raise ValueError(f"mtu must be 256, 512 or 1024 (the system top's max_mtu), not "
                             f"{self.mtu}")
        return self

    @property
    def message_bytes(self) -> int:
        return self.shard_bytes // self.messages

    def wire_bytes_per_shard(self) -> int:
        """Bytes on the MAC stream for one shard (8-byte beats, no idle cycles)."""
        from host_driver import layers as L

        total = 0
        for _ in range(self.messages):
            n, left = 0, self.message_bytes
            while True:
                chunk = min(self.mtu, left)
                left -= chunk
                last = left == 0
                hdr = L.header_len(L.OP_WRITE_LAST_IMM if last else L.OP_WRITE_MIDDLE)
                frame = hdr + chunk + (-chunk % 4) + 4
                total += -(-frame // 8) * 8
                n += 1
                if last:
                    break
        return total

    def ideal_ns(self) -> float:
        """Time to send every round at line rate, per direction (both run at once)."""
        return self.rounds * self.wire_bytes_per_shard() * 8 / LINE_RATE_GBPS

    def payload_efficiency(self) -> float:
        return self.shard_bytes / self.wire_bytes_per_shard()


# ---- cocotb side ---------------------------------------------------------------------------


def _xor(a: bytes, b: bytes) -> bytes:
    return (int.from_bytes(a, "little") ^ int.from_bytes(b, "little")).to_bytes(len(a), "little")


@dataclass
class Recorder:
    """What the workload and the monitors saw, in simulated ns."""

    start_ns: float = 0.0
    end_ns: float = 0.0
    rounds: list = field(default_factory=list)  # (nic, round, ns its peer's shard was in)
    rounds_posted: list = field(default_factory=list)  # (nic, round, ns posted)
    send_cqes: list = field(default_factory=list)  # (nic, ns, wr_id, status, byte_len)
    recv_cqes: list = field(default_factory=list)  # (nic, ns, msn, byte_len, imm, status)
    ev_events: list = field(default_factory=list)  # (ns, nic, qpn, ev_index, ev, old, new, drops)
    progress: list = field(default_factory=list)  # (ns, [recv bytes], [round], [ev states])
    received: list = field(default_factory=lambda: [0, 0])
    round_done: list = field(default_factory=lambda: [0, 0])
    ev_state: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    done: bool = False


async def ring_workload(ends, cfg: DemoConfig, rec: Recorder, now_ns, log=print,
                        poll_cycles: int = 100, limit_ns: float | None = None):
    """The ring of WRITE_WITH_IMM rounds over ``ends`` (two endpoints with
    ``dev``, ``qp``, ``mr``, ``recv_buf``, ``send_buf``, as ``SystemTB.connect``
    and ``ModelSystem.connect`` make them), driven only through the host
    driver; ``now_ns()`` gives the simulated time. One polling loop serves
    both NICs (so it runs the same on cocotb and on a synchronous model
    transport): each ``poll_cycles`` it takes the send and receive
    completions, sends a NIC's next round as soon as the peer's current one is
    in, pops EV events every ``sample_cycles`` and prints progress every
    ``progress_us``. Fills ``rec``; returns {(dst, round): bytes expected in
    dst's slot}."""
    from host_driver.driver import Completion, WrOpcode

    rng = random.Random(cfg.seed)
    own = [[rng.randbytes(cfg.shard_bytes) for _ in range(cfg.rounds)] for _ in range(2)]
    expected: dict[tuple[int, int], bytes] = {}
    m, size = cfg.messages, cfg.message_bytes
    per_qp = ends[0].dev.params["evs_per_qp"]
    rec.ev_state = [[0] * per_qp for _ in ends]
    sent = [0, 0]  # rounds posted by NIC i
    got = [0, 0]  # messages of the current round received by NIC i
    inbound = [0, 0]  # the round NIC i is receiving
    received: list[bytes | None] = [None, None]
    limit = limit_ns if limit_ns is not None else 40 * cfg.ideal_ns() + 10_000_000
    t_start = now_ns()

    async def post_round(i):
        me, peer = ends[i], ends[1 - i]
        r = sent[i]
        shard = own[i][r] if received[i] is None else _xor(own[i][r], received[i])
        expected[(1 - i, r)] = shard
        base = r * cfg.shard_bytes
        me.dev.mem.write(me.send_buf + base, shard)
        for k in range(m):
            while me.qp.outstanding >= me.qp.sq_size:
                await take_send_cqes(i, wait=True)
            await me.qp.post_send(WrOpcode.WRITE_WITH_IMM, local_addr=me.send_buf + base
                                  + k * size, length=size,
                                  remote_addr=peer.recv_buf + base + k * size,
                                  rkey=peer.mr.rkey, imm=(r << 8) | k)
        rec.rounds_posted.append((i, r, now_ns()))
        sent[i] += 1

    async def take_send_cqes(i, wait=False):
        qp = ends[i].qp
        cqes = await (qp.send_cq.wait(1, timeout_cycles=4_000_000) if wait
                      else qp.send_cq.poll())
        for c in cqes:
            rec.send_cqes.append((i, now_ns(), c.wr_id, c.status, c.byte_len))
            if c.status != Completion.SUCCESS:
                rec.errors.append(f"nic{i}: send completion wr_id {c.wr_id} status {c.status}")

    async def take_recv_cqes(i):
        me = ends[i]
        for c in await me.qp.recv_cq.poll():
            r = inbound[i]
            rec.recv_cqes.append((i, now_ns(), c.wr_id, c.byte_len, c.imm, c.status))
            if (c.imm, c.byte_len, c.status) != ((r << 8) | got[i], size, 0):
                rec.errors.append(f"nic{i} round {r}: receive completion {c} is not message "
                                  f"{got[i]} (imm {(r << 8) | got[i]:#x}, {size} B)")
            rec.received[i] += c.byte_len
            got[i] += 1
            if got[i] < m:
                continue
            base = r * cfg.shard_bytes
            slot = me.dev.mem.read(me.recv_buf + base, cfg.shard_bytes)
            peer_shard = expected.get((i, r), b"")
            if slot != peer_shard:
                first = next((j for j in range(len(slot)) if slot[j:j + 1] != peer_shard[j:j + 1]),
                             0)
                rec.errors.append(f"nic{i} round {r}: receive buffer differs from the peer's "
                                  f"shard from byte {first} of {cfg.shard_bytes}")
            received[i] = slot
            rec.rounds.append((i, r, now_ns()))
            rec.round_done[i] = r + 1
            inbound[i], got[i] = r + 1, 0
            log(f"[{now_ns() / 1000:9.1f} us] nic{i} round {r + 1}/{cfg.rounds}: shard of "
                f"nic{1 - i} in and checked, {rec.received[i] / 2**20:.2f} MiB received; "
                f"EVs nic0 {_ev_str(rec, 0)} nic1 {_ev_str(rec, 1)}")
            if sent[i] < cfg.rounds:
                await post_round(i)

    async def take_ev_events():
        for i, end in enumerate(ends):
            for e in await end.dev.read_ev_events():
                values = end.qp.evs.values
                value = values[e.ev_index] if e.ev_index < len(values) else None
                rec.ev_events.append((now_ns(), i, e.qpn, e.ev_index, value, e.old, e.new,
                                      e.drops))
                if e.qpn == end.qp.qpn and e.ev_index < per_qp:
                    rec.ev_state[i][e.ev_index] = e.new

    for i in (0, 1):
        await post_round(i)
    next_ev = next_progress = now_ns()
    while min(rec.round_done) < cfg.rounds or any(e.qp.outstanding for e in ends):
        for i in (0, 1):
            await take_send_cqes(i)
            await take_recv_cqes(i)
        t = now_ns()
        if t >= next_ev:
            await take_ev_events()
            next_ev = t + cfg.sample_cycles * CLK_NS
        if t >= next_progress:
            rec.progress.append((t, list(rec.received), list(rec.round_done),
                                 [list(x) for x in rec.ev_state]))
            log(f"[{t / 1000:9.1f} us] received nic0 {rec.received[0] / 2**20:.2f} MiB, "
                f"nic1 {rec.received[1] / 2**20:.2f} MiB; rounds {rec.round_done[0]}/"
                f"{cfg.rounds}, {rec.round_done[1]}/{cfg.rounds}; EVs nic0 {_ev_str(rec, 0)} "
                f"nic1 {_ev_str(rec, 1)}")
            next_progress = t + cfg.progress_us * 1000
        if t - t_start > limit:
            rec.errors.append(f"the workload did not finish in {limit / 1000:.0f} us: rounds "
                              f"{rec.round_done}, outstanding "
                              f"{[e.qp.outstanding for e in ends]}")
            break
        await ends[0].dev.transport.idle(poll_cycles)
    await take_ev_events()
    return expected


def _ev_str(rec: Recorder, i: int) -> str:
    if not rec.ev_state:
        return "-"
    return "".join(EV_STATE_CHAR.get(s, "?") for s in rec.ev_state[i])


async def run_scenario(system, cfg: DemoConfig, now_ns, log=print, *,
                       timeout: int | None = None) -> dict:
    """Configure ``system``'s fabric (a ``SystemTB`` or a ``ModelSystem``: the
    same fabric controls), bring both NICs up through the driver, run the ring
    and check every receive slot; returns the raw record. ``timeout``
    overrides ``cfg.timeout`` (the model's timer unit differs, see
    sim/system_bench.py)."""
    wall0 = time.monotonic()
    fab = system.fabric
    if hasattr(fab, "capture_enabled"):
        fab.capture_enabled = cfg.capture
    fab.set_loss(cfg.loss)
    if cfg.ecn_prob:
        fab.set_ecn(prob=cfg.ecn_prob)
    if cfg.trim_prob:
        fab.set_trim(on_overflow=False, prob=cfg.trim_prob)
    await system.init()
    await system.connect(buf_size=cfg.rounds * cfg.shard_bytes, sq_log2=4, mtu=cfg.mtu,
                         timeout=cfg.timeout if timeout is None else timeout,
                         probe_period=cfg.probe_period)
    for end in system.ends:  # as to_rts wrote it, with SACK loss detection on
        await end.dev.rel.write_fields("qp_rel_cfg", end.qp.qpn,
                                       t=cfg.timeout if timeout is None else timeout,
                                       linear_cnt=7, exp_cnt=7, ev_min_active=1,
                                       sack_threshold=cfg.sack_threshold)
    rec = Recorder()
    rec.start_ns = now_ns()
    ideal = cfg.ideal_ns()
    fault = "no path failure"
    if cfg.fail:
        fab.schedule_path(cfg.fail_path, rec.start_ns + cfg.fail_at_frac * ideal,
                          rec.start_ns + cfg.up_at_frac * ideal, direction=cfg.fail_direction)
        fault = (f"path {cfg.fail_path} (direction {cfg.fail_direction}) down at "
                 f"{(rec.start_ns + cfg.fail_at_frac * ideal) / 1000:.1f} us, up at "
                 f"{(rec.start_ns + cfg.up_at_frac * ideal) / 1000:.1f} us")
    log(f"[{rec.start_ns / 1000:9.1f} us] ring of {cfg.rounds} rounds x "
        f"{cfg.shard_bytes // 1024} KiB per NIC, both directions; {fault}")
    wall_work = time.monotonic()
    try:
        expected = await ring_workload(system.ends, cfg, rec, now_ns, log)
    except Exception as exc:  # keep what was recorded for the report
        rec.errors.append(f"workload stopped: {exc!r}")
        expected = {}
    rec.end_ns = now_ns()
    wall_work = time.monotonic() - wall_work
    rec.done = True
    # final byte-exact check of every slot
    for i, end in enumerate(system.ends):
        if len(expected) < 2 * cfg.rounds:
            break
        want = b"".join(expected[(i, r)] for r in range(cfg.rounds))
        got = end.dev.mem.read(end.recv_buf, len(want))
        if got != want:
            first = next(j for j in range(len(want)) if got[j] != want[j])
            rec.errors.append(f"nic{i}: receive memory differs from byte {first} of "
                              f"{len(want)} at the end")
    return {
        "config": asdict(cfg),
        "clk_ns": CLK_NS,
        "line_rate_gbps": LINE_RATE_GBPS,
        "nic_params": dict(system.ends[0].dev.params),
        "evs": [list(end.qp.evs.values) for end in system.ends],
        "recorder": asdict(rec),
        "faults": [(t, e.path, e.direction, e.up) for t, e in fab.fault_log],
        "counters": [await end.dev.counters() for end in system.ends],
        "ev_states_final": [await end.dev.ev_states(end.qp) for end in system.ends],
        "fabric": fab.counters(),
        "capture": [(c.time_ns, c.direction, c.path, c.ev, c.fate, c.reason, c.ce,
                     c.delivered if c.delivered is not None else c.sent, c.arrival_ns)
                    for c in getattr(fab, "capture", [])],
        "sim_end_ns": now_ns(),
        "wall_workload_s": wall_work,
        "wall_test_s": time.monotonic() - wall0,
        "verified": not rec.errors and len(expected) == 2 * cfg.rounds,
    }


@cocotb.test()
async def system_demo(dut):
    """The ring workload on two RTL NICs over the faulty fabric; pickles the raw record."""
    from cocotb.utils import get_sim_time

    from sim.system.harness import SystemTB

    outdir = Path(os.environ[ENV_OUT])
    cfg = DemoConfig(**json.loads(os.environ[ENV_CFG])).check()
    tb = SystemTB(dut, seed=cfg.seed, delay_ns=cfg.delay_ns, num_paths=cfg.paths)
    raw = await run_scenario(tb, cfg, lambda: get_sim_time(unit="ns"),
                             lambda msg: print(msg, flush=True))
    with open(outdir / RAW, "wb") as f:
        pickle.dump(raw, f)
    assert raw["verified"], "\n".join(raw["recorder"]["errors"]) or "not verified"


# ---- analysis (pure Python) -----------------------------------------------------------------


def data_frame_info(frame: bytes):
    """(opcode, psn, payload bytes) of an RDMA WRITE frame (trimmed: 0 payload), else None."""
    from host_driver import layers as L

    if len(frame) < 54 or frame[12:14] != b"\x08\x00" or frame[23] != 17:
        return None
    if int.from_bytes(frame[36:38], "big") != L.ROCE_UDP_PORT or frame[42] not in L.WRITE_OPCODES:
        return None
    opcode = frame[42]
    psn = int.from_bytes(frame[51:54], "big")
    hdr = L.header_len(opcode)
    if len(frame) <= hdr:
        return opcode, psn, 0
    pad = (frame[43] >> 4) & 3
    return opcode, psn, max(0, len(frame) - hdr - 4 - pad)


def _series(raw: dict, bin_ns: float):
    import numpy as np

    t0 = raw["recorder"]["start_ns"]
    t1 = max(raw["recorder"]["end_ns"], t0 + bin_ns)
    nbins = int((t1 - t0) // bin_ns) + 1
    paths = raw["config"]["paths"]
    goodput = np.zeros((2, nbins))  # first deliveries of each PSN, Gb/s
    pkts = np.zeros((2, paths, nbins))  # data frames sent per path (any fate)
    seen = [set(), set()]
    for (t, d, path, _ev, fate, _reason, _ce, frame, arrival) in raw["capture"]:
        info = data_frame_info(frame)
        if info is None:
            continue
        b = int((t - t0) // bin_ns)
        if 0 <= b < nbins:
            pkts[d, path, b] += 1
        if fate != "delivered" or info[1] in seen[d]:
            continue
        seen[d].add(info[1])
        b = int((arrival - t0) // bin_ns)
        if 0 <= b < nbins:
            goodput[d, b] += info[2] * 8 / bin_ns
    return {"t0": t0, "bin_ns": bin_ns, "goodput": goodput, "pkts": pkts}


def analyse(raw: dict) -> dict:
    """The summary of a raw record: goodput, retransmissions, EV events, recovery."""
    import numpy as np

    cfg = DemoConfig(**raw["config"])
    rec = raw["recorder"]
    t0, t1 = rec["start_ns"], rec["end_ns"]
    elapsed = max(t1 - t0, 1.0)
    line = raw["line_rate_gbps"]
    payload = cfg.rounds * cfg.shard_bytes
    bin_ns = max(2000.0, round(elapsed / 150 / 1000) * 1000)
    s = _series(raw, bin_ns)
    sends = {i: [t for (n, t, *_r) in rec["send_cqes"] if n == i] for i in (0, 1)}
    directions = []
    for i in (0, 1):
        done = [t for (n, _r, t) in rec["rounds"] if n == 1 - i]
        last = max(done + sends[i]) if (done or sends[i]) else t1
        t = max(last - t0, 1.0)
        directions.append({
            "name": f"nic{i} -> nic{1 - i}", "payload_bytes": payload,
            "completion_ns": t, "goodput_gbps": payload * 8 / t,
            "of_line_rate": payload * 8 / t / line,
            "of_achievable": payload * 8 / t / line / cfg.payload_efficiency(),
        })
    retx = []
    for i, c in enumerate(raw["counters"]):
        retx.append({"nic": i, **{k: c.get(f"rel.{k}", 0) for k in (
            "retx_sack", "retx_nak", "retx_timeout", "timeouts")},
            **{k: c.get(k, 0) for k in ("tx.retx_ignored", "tx.retx_no_ev", "rx.duplicate",
                                        "rx.placed")}})
    faults = [{"time_ns": t, "path": p, "direction": d, "up": up}
              for (t, p, d, up) in raw["faults"]]
    events = [{"time_ns": t, "nic": n, "qpn": q, "ev_index": idx, "ev": ev,
               "old": EV_STATE_NAMES.get(o, o), "new": EV_STATE_NAMES.get(nw, nw), "drops": dr}
              for (t, n, q, idx, ev, o, nw, dr) in rec["ev_events"]]
    recovery = _recovery(raw, cfg, s, faults, events)
    fab = raw["fabric"]
    fabric_rows = []
    for name, paths in fab.items():
        for p, c in enumerate(paths):
            fabric_rows.append({"direction": name, "path": p, **c})
    sim_cycles = raw["sim_end_ns"] / raw["clk_ns"]
    return {
        "config": asdict(cfg),
        "verified": raw["verified"],
        "errors": rec["errors"],
        "line_rate_gbps": line,
        "payload_efficiency": cfg.payload_efficiency(),
        "ideal_ns": cfg.ideal_ns(),
        "elapsed_ns": elapsed,
        "directions": directions,
        "goodput_of_line_rate": sum(d["payload_bytes"] for d in directions) * 8
        / max(d["completion_ns"] for d in directions) / (2 * line),
        "retransmissions": retx,
        "faults": faults,
        "ev_events": events,
        "ev_states_final": [[EV_STATE_NAMES.get(x, x) for x in st]
                            for st in raw["ev_states_final"]],
        "recovery": recovery,
        "fabric": fabric_rows,
        "frames_captured": len(raw["capture"]),
        "sim_cycles": sim_cycles,
        "wall_workload_s": raw["wall_workload_s"],
        "cycles_per_s": (elapsed / raw["clk_ns"]) / max(raw["wall_workload_s"], 1e-9),
        "rounds": rec["rounds"],
        "_series": s,
        "_np": np,
    }


def _recovery(raw, cfg, s, faults, events) -> dict:
    down = next((f for f in faults if not f["up"]), None)
    up = next((f for f in faults if f["up"]), None)
    out = {"failure_ns": down and down["time_ns"], "return_ns": up and up["time_ns"],
           "assumed_bad_after_ns": None, "last_data_on_dead_path_after_ns": None,
           "goodput_recovered_after_ns": None, "good_after_return_ns": None,
           "poll_resolution_ns": cfg.sample_cycles * raw["clk_ns"]}
    if down is None:
        return out
    d, path, t_f = down["direction"], down["path"], down["time_ns"]
    sender = d if d is not None else 0
    bad = [e for e in events if e["nic"] == sender and e["new"] == "ASSUMED_BAD"
           and e["time_ns"] >= t_f and e["ev"] is not None and e["ev"] % cfg.paths == path]
    if bad:
        out["assumed_bad_after_ns"] = bad[0]["time_ns"] - t_f
    t_up = up["time_ns"] if up else float("inf")
    last = None
    for (t, dd, p, _ev, _fate, _r, _ce, frame, _a) in raw["capture"]:
        if dd == sender and p == path and t_f <= t < t_up and data_frame_info(frame):
            last = t
    if last is not None:
        out["last_data_on_dead_path_after_ns"] = last - t_f
    # goodput: the first dip after the failure (3-bin mean below half the mean
    # of the 10 bins before it), then the first bin from which the 3-bin mean
    # is back at 90 %; no dip: nothing to recover from
    g = s["goodput"][sender]
    fb = int((t_f - s["t0"]) // s["bin_ns"])
    pre = g[max(0, fb - 10):fb]
    out["goodput_dipped"] = False
    if len(pre) and pre.mean() > 0:
        window_end = len(g) - 2
        if up is not None:
            window_end = min(window_end, int((t_up - s["t0"]) // s["bin_ns"]) + 1)
        dip = next((b for b in range(fb, window_end) if g[b:b + 3].mean() < 0.5 * pre.mean()),
                   None)
        if dip is not None:
            out["goodput_dipped"] = True
            for b in range(dip, len(g) - 2):
                if g[b:b + 3].mean() >= 0.9 * pre.mean():
                    out["goodput_recovered_after_ns"] = max(
                        0.0, b * s["bin_ns"] + s["t0"] - t_f)
                    break
    if up is not None:
        good = [e for e in events if e["nic"] == sender and e["old"] == "ASSUMED_BAD"
                and e["new"] == "GOOD" and e["time_ns"] >= t_up and e["ev"] is not None
                and e["ev"] % cfg.paths == path]
        if good:
            out["good_after_return_ns"] = good[0]["time_ns"] - t_up
    return out


def _us(ns) -> str:
    return "-" if ns is None else f"{ns / 1000:.1f} us"


def report_markdown(summary: dict) -> str:
    cfg = summary["config"]
    r = summary["recovery"]
    lines = [
        "Two RTL NicCores (`sim/system/top.py`, 64-bit datapath at 125 MHz: line rate "
        f"64 bit x 125 MHz = **{summary['line_rate_gbps']:g} Gb/s** per port) under Verilator, "
        f"joined by the cocotb fabric (`sim/system/fabric.py`: {cfg['paths']} paths, "
        f"{cfg['delay_ns']:g} ns each), configured and driven only through the host driver.",
        "",
        f"Workload: a ring of {cfg['rounds']} rounds; in each, both NICs write their "
        f"{cfg['shard_bytes'] // 1024} KiB shard to the other as {cfg['messages']} "
        f"WRITE_WITH_IMM of {cfg['shard_bytes'] // cfg['messages'] // 1024} KiB (MTU "
        f"{cfg['mtu']}); the receiver consumes the immediates from its receive CQ before it "
        "sends its next shard (its own data XOR the shard it received). NICs: SACK loss "
        f"detection at {cfg['sack_threshold']} SACKed PSNs past a hole, retransmit timer "
        f"t = {cfg['timeout']} ({16 * CLK_NS * 2 ** cfg['timeout'] / 1000:.1f} us: the "
        "system top's timer unit is 16 cycles), a probe of each ASSUMED_BAD EV every "
        f"{cfg['probe_period']} cycles.",
        "",
        f"Faults: path {cfg['fail_path']} of direction {cfg['fail_direction']} "
        f"(nic{cfg['fail_direction']} -> nic{1 - cfg['fail_direction']}) blackholed from "
        f"{_us(r['failure_ns'])} to {_us(r['return_ns'])}; on every path of both directions "
        f"{cfg['loss']:.2%} random loss, {cfg['ecn_prob']:.1%} of data frames CE-marked, "
        f"{cfg['trim_prob']:.2%} trimmed.",
        "",
        "**Receiver memory: " + ("byte exact on both NICs, every round.**" if summary["verified"]
                                 else "WRONG.** " + "; ".join(summary["errors"])),
        "",
        "| direction | payload | completion | goodput | of line rate | of achievable |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for d in summary["directions"]:
        lines.append(f"| {d['name']} | {d['payload_bytes'] / 2**20:.2f} MiB | "
                     f"{_us(d['completion_ns'])} | {d['goodput_gbps']:.2f} Gb/s | "
                     f"{d['of_line_rate']:.3f} | {d['of_achievable']:.3f} |")
    lines += [
        "",
        f"Achievable = line rate x {summary['payload_efficiency']:.4f}, the payload share of "
        "the MAC stream's 8-byte beats for these messages (headers and ICRC). The ideal "
        f"time of the whole run, both directions at line rate, is "
        f"{_us(summary['ideal_ns'])}; it took {_us(summary['elapsed_ns'])}.",
        "",
        "Retransmissions (the NICs' counters, read through the driver):",
        "",
        "| NIC | SACK | NAK (trim) | timeout | timer firings | duplicates received |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for x in summary["retransmissions"]:
        lines.append(f"| nic{x['nic']} | {x['retx_sack']} | {x['retx_nak']} | "
                     f"{x['retx_timeout']} | {x['timeouts']} | {x['rx.duplicate']} |")
    lines += ["", "Fault schedule and EV events (EV events polled every "
              f"{_us(r['poll_resolution_ns'])}; times are the poll's):", "",
              "| time | what |", "|---:|---|"]
    rows = [(f["time_ns"], f"fabric: path {f['path']} direction {f['direction']} "
             f"{'UP' if f['up'] else 'DOWN'}") for f in summary["faults"]]
    rows += [(e["time_ns"], f"nic{e['nic']} QP {e['qpn']} EV {e['ev_index']} "
              f"({e['ev']:#06x}): {e['old']} -> {e['new']} (drops {e['drops']})"
              if e["ev"] is not None else f"nic{e['nic']} EV {e['ev_index']}: {e['old']} -> "
              f"{e['new']}") for e in summary["ev_events"]]
    for t, what in sorted(rows, key=lambda x: x[0]):
        lines.append(f"| {_us(t)} | {what} |")
    lines += [
        "",
        "Recovery:",
        "",
        f"- path failure -> EV ASSUMED_BAD: **{_us(r['assumed_bad_after_ns'])}**",
        f"- path failure -> last data frame sent on the dead path: "
        f"{_us(r['last_data_on_dead_path_after_ns'])}",
        "- path failure -> goodput back at 90 % of its level before, after its first dip "
        f"below 50 % (means over 3 bins of {summary['_series']['bin_ns'] / 1000:g} us): "
        + (f"**{_us(r['goodput_recovered_after_ns'])}**" if r.get("goodput_dipped")
           else "no dip while the path was down"),
        f"- path return -> EV GOOD again (probe): **{_us(r['good_after_return_ns'])}**",
        "",
        f"Final EV states: nic0 {summary['ev_states_final'][0]}, nic1 "
        f"{summary['ev_states_final'][1]}.",
        "",
        "Fabric (frames per path; dropped includes the blackhole):",
        "",
        "| direction | path | carried | dropped | trimmed | CE marked |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in summary["fabric"]:
        lines.append(f"| {row['direction']} | {row['path']} | {row['carried']} | "
                     f"{row['dropped']} | {row['trimmed']} | {row['ecn_marked']} |")
    lines += [
        "",
        f"Simulation: {summary['sim_cycles']:.0f} cycles of 8 ns; the workload ran at "
        f"{summary['cycles_per_s']:.0f} simulated cycles per second of wall time "
        "(Verilator + cocotb + the Python fabric and driver).",
        "",
        "Files: `traffic.pcap` (every frame of both directions at its simulated send time; "
        "CE marks and trims as delivered; Wireshark dissects UDP 4791 as RoCE), "
        "`traffic_fates.csv` (fate of each pcap record), `goodput.png`, `paths.png`, "
        "`ev_states.png`, the waveform.",
        "",
    ]
    return "\n".join(lines)


def write_report(summary: dict, out: Path) -> None:
    out = Path(out)
    (out / "report.md").write_text(report_markdown(summary))
    public = {k: v for k, v in summary.items() if not k.startswith("_")}
    (out / "report.json").write_text(json.dumps(public, indent=1, default=str))


def write_pcap(capture, path: Path) -> int:
    """Every captured frame, time-ordered, Ethernet link type, timestamps = simulated
    send time; ``<path stem>_fates.csv`` lists each record's fate. Returns the count."""
    from scapy.utils import RawPcapWriter

    path = Path(path)
    rows = sorted(capture, key=lambda c: c[0])
    with RawPcapWriter(str(path), linktype=1, nano=True, sync=False) as writer:
        writer.write_header(None)
        for (t, *_rest, frame, _arrival) in rows:
            sec, ns = divmod(int(round(t)), 1_000_000_000)
            writer.write_packet(frame, sec=sec, usec=ns)
    with open(path.with_name(path.stem + "_fates.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["record", "time_ns", "direction", "path", "ev", "fate", "reason", "ce",
                    "arrival_ns"])
        for n, (t, d, p, ev, fate, reason, ce, _frame, arrival) in enumerate(rows, 1):
            w.writerow([n, f"{t:.0f}", f"nic{d}->nic{1 - d}", p,
                        "" if ev is None else f"{ev:#06x}", fate, reason, int(ce),
                        "" if arrival is None else f"{arrival:.0f}"])
    return len(rows)


def plot(summary: dict, out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    out = Path(out)
    s = summary["_series"]
    r = summary["recovery"]
    t = (s["t0"] + np.arange(s["goodput"].shape[1]) * s["bin_ns"]) / 1000
    files = []

    def shade(ax):
        if r["failure_ns"] is not None:
            end = r["return_ns"] if r["return_ns"] is not None else t[-1] * 1000
            ax.axvspan(r["failure_ns"] / 1000, end / 1000, color="r", alpha=0.12,
                       label=f"path {summary['config']['fail_path']} down")

    fig, ax = plt.subplots(figsize=(9, 4))
    for d in (0, 1):
        ax.plot(t, s["goodput"][d], lw=0.9, label=summary["directions"][d]["name"])
    ax.axhline(summary["line_rate_gbps"], color="k", ls=":", lw=0.8, label="line rate")
    ax.axhline(summary["line_rate_gbps"] * summary["payload_efficiency"], color="g", ls=":",
               lw=0.8, label="achievable")
    shade(ax)
    ax.set_xlabel("simulated time (us)")
    ax.set_ylabel(f"goodput (Gb/s, {s['bin_ns'] / 1000:g} us bins)")
    ax.set_title("Two RTL NICs: goodput per direction")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(out / "goodput.png", dpi=90)
    plt.close(fig)
    files.append("goodput.png")

    # frames per path as a heat map, in bins of about 1/60 of the run
    k = max(1, s["pkts"].shape[2] // 60)
    nb = s["pkts"].shape[2] // k
    width_us = k * s["bin_ns"] / 1000
    fig, axes = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True)
    for d, ax in enumerate(axes):
        grid = s["pkts"][d, :, :nb * k].reshape(s["pkts"].shape[1], nb, k).sum(axis=2)
        im = ax.imshow(grid, aspect="auto", origin="lower", cmap="viridis", interpolation="none",
                       extent=(s["t0"] / 1000, s["t0"] / 1000 + nb * width_us, -0.5,
                               grid.shape[0] - 0.5))
        fig.colorbar(im, ax=ax, label=f"frames / {width_us:g} us")
        if r["failure_ns"] is not None:
            for when in (r["failure_ns"], r["return_ns"]):
                if when is not None:
                    ax.axvline(when / 1000, color="r", ls="--", lw=1)
        ax.set_ylabel("path")
        ax.set_title(f"{summary['directions'][d]['name']}: data frames sent per path "
                     "(red dashed: path down / up)", fontsize=9)
    axes[1].set_xlabel("simulated time (us)")
    fig.tight_layout()
    fig.savefig(out / "paths.png", dpi=90)
    plt.close(fig)
    files.append("paths.png")

    fig, axes = plt.subplots(2, 1, figsize=(9, 4.5), sharex=True)
    nevs = max(len(x) for x in summary["ev_states_final"])
    t_end = summary["elapsed_ns"] + s["t0"]
    colors = {"GOOD": "tab:green", "ASSUMED_BAD": "tab:red", "DENIED": "tab:gray"}
    for nic, ax in enumerate(axes):
        for idx in range(nevs):
            changes = sorted((e["time_ns"], e["new"]) for e in summary["ev_events"]
                             if e["nic"] == nic and e["ev_index"] == idx)
            start, state = s["t0"], "GOOD"
            for when, new in changes + [(t_end, None)]:
                ax.broken_barh([(start / 1000, max(when - start, 1) / 1000)], (idx - 0.4, 0.8),
                               color=colors.get(state, "k"))
                start, state = when, new
        for when in (r["failure_ns"], r["return_ns"]):
            if when is not None:
                ax.axvline(when / 1000, color="k", ls="--", lw=1)
        ax.set_yticks(range(nevs))
        ax.set_ylabel(f"nic{nic} EV")
    axes[0].set_title("EV states (green GOOD, red ASSUMED_BAD) as the driver reads them; "
                      "dashed: path down / up", fontsize=9)
    axes[1].set_xlabel("simulated time (us)")
    fig.tight_layout()
    fig.savefig(out / "ev_states.png", dpi=90)
    plt.close(fig)
    files.append("ev_states.png")
    return files


def print_summary(summary: dict) -> None:
    r = summary["recovery"]
    print("\n--- two RTL NICs: summary ---")
    print("line rate: 64 bit x 125 MHz = 8 Gb/s per port (the system top's MAC stream)")
    for d in summary["directions"]:
        print(f"{d['name']}: {d['payload_bytes'] / 2**20:.2f} MiB in {_us(d['completion_ns'])}:"
              f" {d['goodput_gbps']:.2f} Gb/s = {d['of_line_rate']:.3f} of line rate "
              f"({d['of_achievable']:.3f} of achievable after headers)")
    for x in summary["retransmissions"]:
        print(f"nic{x['nic']} retransmissions: SACK {x['retx_sack']}, NAK (trim) "
              f"{x['retx_nak']}, timeout {x['retx_timeout']} ({x['timeouts']} timer firings)")
    for f in summary["faults"]:
        print(f"{_us(f['time_ns'])}: fabric path {f['path']} direction {f['direction']} "
              f"{'UP' if f['up'] else 'DOWN'}")
    for e in summary["ev_events"]:
        print(f"{_us(e['time_ns'])}: nic{e['nic']} EV {e['ev_index']} {e['old']} -> {e['new']}")
    recovered = (_us(r["goodput_recovered_after_ns"]) if r.get("goodput_dipped")
                 else "no dip")
    print(f"recovery: failure -> ASSUMED_BAD {_us(r['assumed_bad_after_ns'])}; "
          f"-> goodput recovered {recovered}; "
          f"return -> GOOD (probe) {_us(r['good_after_return_ns'])}")
    print("receiver memory: " + ("byte exact" if summary["verified"] else "WRONG"))
    print(f"simulation: {summary['cycles_per_s']:.0f} cycles/s of wall time")


# ---- driver: build, run, report --------------------------------------------------------------


def elaborate():
    """The two-NIC top for run_cocotb (only its ports public: the demo reaches
    the NICs through them)."""
    from sim.system.top import TwoNicTop

    return TwoNicTop()


# Trace only the system top's own signals (the NICs' ports), not the NICs'
# insides: a short waveform of the whole run, not gigabytes.
TRACE_ARGS = ["--trace-depth", "1"]


def simulate(outdir: Path, cfg: DemoConfig, *, waves: bool | str = "fst",
             name: str = RUN_NAME, tag: str = "demo") -> dict:
    """Build (if needed) and run the cocotb test in ``sim_build/<name>/<tag>``;
    returns the raw record."""
    from sim.cocotb_runner import SIM_BUILD, run_cocotb

    outdir = Path(outdir).resolve()
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / RAW).unlink(missing_ok=True)
    test_dir = SIM_BUILD / name / tag
    t0 = time.monotonic()
    results = run_cocotb(name=name, elaborate=elaborate, toplevel="two_nic",
                         test_module="sim.system.demo", testcase="system_demo",
                         extra_env={ENV_OUT: str(outdir), ENV_CFG: json.dumps(asdict(cfg))},
                         waves=waves, test_dir=test_dir,
                         extra_build_args=TRACE_ARGS if waves else None)
    wall = time.monotonic() - t0
    if not (outdir / RAW).exists():
        raise RuntimeError(f"the system demo did not finish; see {test_dir} and {results}")
    with open(outdir / RAW, "rb") as f:
        raw = pickle.load(f)
    raw["wall_build_and_run_s"] = wall
    raw["test_dir"] = str(test_dir)
    return raw


def run(outdir: Path, cfg: DemoConfig | None = None, *, waves: bool | str = "fst") -> dict:
    """The whole demo into ``outdir``; returns the summary (JSON-able part).
    Raises RuntimeError if the receivers' memory is not byte exact."""
    cfg = (cfg or DemoConfig()).check()
    outdir = Path(outdir).resolve()
    outdir.mkdir(parents=True, exist_ok=True)
    raw = simulate(outdir, cfg, waves=waves)
    summary = analyse(raw)
    write_report(summary, outdir)
    frames = write_pcap(raw["capture"], outdir / "traffic.pcap")
    plots = plot(summary, outdir)
    wave = None
    for kind in ("fst", "vcd"):
        found = sorted(Path(raw["test_dir"]).glob(f"*.{kind}"), key=lambda p: p.stat().st_mtime)
        if found and waves:
            wave = outdir / f"waves.{kind}"
            shutil.move(str(found[-1]), wave)
            break
    print_summary(summary)
    public = {k: v for k, v in summary.items() if not k.startswith("_")}
    public.update(outdir=str(outdir), pcap=str(outdir / "traffic.pcap"), pcap_frames=frames,
                  plots=plots, waveform=str(wave) if wave else None,
                  wall_build_and_run_s=raw["wall_build_and_run_s"])
    (outdir / "report.json").write_text(json.dumps(public, indent=1, default=str))
    if not summary["verified"]:
        raise RuntimeError("the receivers' memory is not byte exact: "
                           + "; ".join(summary["errors"]))
    return public


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "sim" / "system")
    parser.add_argument("--rounds", type=int, default=DemoConfig.rounds)
    parser.add_argument("--shard-kib", type=int, default=DemoConfig.shard_bytes // 1024)
    parser.add_argument("--no-waves", action="store_true")
    args = parser.parse_args(argv)
    cfg = DemoConfig(rounds=args.rounds, shard_bytes=args.shard_kib * 1024)
    run(args.out, cfg, waves=False if args.no_waves else "fst")


if __name__ == "__main__":
    main()

"""``make sim``'s main demo: two RTL NICs over a faulty 8-path fabric.

Two NicCores (``sim.system.top``, 64-bit datapath at 125 MHz: the line rate
of each MAC port is 64 bit x 125 MHz = 8 Gb/s) run under Verilator, joined
by the cocotb multipath fabric (``sim.system.fabric``), and are configured and
driven only through the host driver (``host_driver.driver`` on a
``CocotbTransport``, ``sim.system.harness.SystemTB``).

Workload (``ring_workload``, sim/system/workload.py), training style: a
ring of the two NICs. In each of ``rounds`` rounds every NIC writes its shard (``shard_bytes``, as
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

``make sim`` runs the scenario file ``sim/system/scenarios/demo.toml`` (the
same settings, the window as a ``[[faults.down]]``); any scenario file
(sim/system/scenario.py, docs/scenarios.md) is a ``DemoConfig`` too, with
the workload (``ring`` or ``stream``), the QP count, rates per direction and
path, and further path down/up events and flaps: the workloads and the fault
schedule are sim/system/workload.py's, for the RTL and the golden model.

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
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import cocotb

from hw.protocol import EvState
from sim.system.workload import (
    DIRECTION_NAMES,
    Recorder,
    apply_rates,
    connect,
    describe_faults,
    describe_workload,
    final_check,
    ring_workload,
    schedule_faults,
    senders,
)

ROOT = Path(__file__).resolve().parents[2]
RUN_NAME = "system_demo"
ENV_OUT = "SYSTEM_DEMO_OUT"
ENV_CFG = "SYSTEM_DEMO_CFG"
RAW = "demo_raw.pkl"
CLK_NS = 8  # sim.system.harness.CLK_NS: 125 MHz
DATA_WIDTH = 64
LINE_RATE_GBPS = DATA_WIDTH / CLK_NS  # 64 bit x 125 MHz = 8 Gb/s
EV_STATE_NAMES = {int(s): s.name for s in EvState}
# Bytes a NIC sends (and receives) in all: each has its own send and receive
# buffer in the harness' 32 MiB host memory per NIC (sim.system.harness.RAM_SIZE).
MAX_DATA_BYTES = 12 << 20

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
    # sim/system/scenario.py: a scenario file sets these too (sim/system/workload.py)
    name: str = "demo"
    description: str = ""
    workload: str = "ring"  # or "stream": nic0 -> nic1 only
    qps: int = 1  # per NIC; message k of a shard on QP k mod qps
    # connection 0 of NIC 0 and its peer bound over IPv6, the others over IPv4,
    # on NICs built with IPv6 (sim/system/workload.py connect)
    ipv6: bool = True
    reorder_prob: float = 0.0  # every path, both directions
    reorder_ns: float = 0.0
    rates: list = field(default_factory=list)  # per direction and path: loss, ce, trim, ...
    events: list = field(default_factory=list)  # path down/up (flaps) besides ``fail``

    def check(self) -> DemoConfig:
        if self.rounds < 1 or self.messages < 1:
            raise ValueError(f"rounds and messages must be >= 1, not {self.rounds}, "
                             f"{self.messages}")
        if self.shard_bytes % self.messages or self.shard_bytes // self.messages < 1:
            raise ValueError(f"shard_bytes ({self.shard_bytes}) must be a multiple of "
                             f"messages ({self.messages})")
        if self.workload not in ("ring", "stream"):
            raise ValueError(f"workload must be 'ring' or 'stream', not {self.workload!r}")
        if self.qps < 1 or self.messages % self.qps:
            raise ValueError(f"messages ({self.messages}) must be a multiple of qps "
                             f"({self.qps}), and qps >= 1")
        if self.rounds * self.shard_bytes > MAX_DATA_BYTES:
            raise ValueError(f"rounds x shard_bytes = {self.rounds * self.shard_bytes} B: the "
                             f"harness' 32 MiB host memory per NIC holds at most 12 MiB of "
                             f"receive and 12 MiB of send buffer")
        if self.fail and (not 0 <= self.fail_path < self.paths
                          or self.fail_direction not in (0, 1)):
            raise ValueError(f"fail_path must be in 0..{self.paths - 1} and fail_direction 0 "
                             f"or 1, not {self.fail_path}, {self.fail_direction}")
        if self.fail and not 0 < self.fail_at_frac < self.up_at_frac:
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
        for k in range(self.messages):  # (over NIC 0's QP k mod qps: its family)
            n, left = 0, self.message_bytes
            while True:
                chunk = min(self.mtu, left)
                left -= chunk
                last = left == 0
                hdr = L.header_len(L.OP_WRITE_LAST_IMM if last else L.OP_WRITE_MIDDLE,
                                   ipv6=self.ipv6 and k % self.qps == 0)
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


async def run_scenario(system, cfg: DemoConfig, now_ns, log=print, *,
                       timeout: int | None = None) -> dict:
    """Configure ``system``'s fabric (a ``SystemTB`` or a ``ModelSystem``: the
    same fabric controls), bring both NICs up through the driver, run the
    workload (sim/system/workload.py) and check every receive slot; returns
    the raw record. ``timeout`` overrides ``cfg.timeout`` (the model's timer
    unit differs, see sim/bench/system.py)."""
    wall0 = time.monotonic()
    fab = system.fabric
    if hasattr(fab, "capture_enabled"):
        fab.capture_enabled = cfg.capture
    apply_rates(fab, cfg)
    await system.init()
    conns = await connect(system, cfg, cfg.timeout if timeout is None else timeout)
    rec = Recorder()
    rec.start_ns = now_ns()
    schedule_faults(fab, cfg, rec.start_ns)
    log(f"[{rec.start_ns / 1000:9.1f} us] {describe_workload(cfg)} Faults: "
        f"{describe_faults(cfg)}")
    wall_work, cpu_work = time.monotonic(), time.process_time()
    try:
        expected = await ring_workload(system, conns, cfg, rec, now_ns, log)
    except Exception as exc:  # keep what was recorded for the report
        rec.errors.append(f"workload stopped: {exc!r}")
        expected = {}
    rec.end_ns = now_ns()
    wall_work = time.monotonic() - wall_work
    cpu_work = time.process_time() - cpu_work
    rec.done = True
    all_sent = final_check(system, conns, cfg, expected, rec)
    return {
        "config": asdict(cfg),
        "clk_ns": CLK_NS,
        "line_rate_gbps": LINE_RATE_GBPS,
        "nic_params": dict(system.ends[0].dev.params),
        "evs": [list(end.qp.evs.values) for end in system.ends],
        "first_qpns": [end.qp.qpn for end in system.ends],  # the QPs of the EV states
        # (EV value, plane) of every connection's EVs, as each NIC's driver bound them
        "ev_planes": [sorted({(v, p) for c in end.conns
                              for v, p in zip(c.qp.evs.values, c.qp.ev_planes, strict=False)})
                      for end in system.ends],
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
        "cpu_workload_s": cpu_work,  # the simulator process's CPU time (model and Python)
        "wall_test_s": time.monotonic() - wall0,
        "verified": not rec.errors and all_sent,
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

    udp = L.udp_offset(frame)
    if udp is None or len(frame) < udp + L.HDR_UDP + L.HDR_BTH:
        return None
    bth = udp + L.HDR_UDP
    if int.from_bytes(frame[udp + 2:udp + 4], "big") != L.ROCE_UDP_PORT \
            or frame[bth] not in L.WRITE_OPCODES:
        return None
    opcode = frame[bth]
    psn = int.from_bytes(frame[bth + 9:bth + 12], "big")
    hdr = L.header_len(opcode, ipv6=L.is_ipv6(frame))
    if len(frame) <= hdr:
        return opcode, psn, 0
    pad = (frame[bth + 1] >> 4) & 3
    return opcode, psn, max(0, len(frame) - hdr - 4 - pad)


def _series(raw: dict, bin_ns: float):
    import numpy as np

    t0 = raw["recorder"]["start_ns"]
    t1 = max(raw["recorder"]["end_ns"], t0 + bin_ns)
    nbins = int((t1 - t0) // bin_ns) + 1
    paths = raw["config"]["paths"]
    # each sender's EVs' planes (a record without them: one plane)
    plane_of = [dict(pairs) for pairs in raw.get("ev_planes") or ([], [])]
    planes = 1 + max((p for m in plane_of for p in m.values()), default=0)
    goodput = np.zeros((2, nbins))  # first deliveries of each PSN, Gb/s
    plane_goodput = np.zeros((2, planes, nbins))  # the same by the EV's plane
    pkts = np.zeros((2, paths, nbins))  # data frames sent per path (any fate)
    seen = [set(), set()]
    for (t, d, path, ev, fate, _reason, _ce, frame, arrival) in raw["capture"]:
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
            plane_goodput[d, plane_of[d].get(ev, 0), b] += info[2] * 8 / bin_ns
    return {"t0": t0, "bin_ns": bin_ns, "goodput": goodput, "pkts": pkts,
            "plane_goodput": plane_goodput}


def analyse(raw: dict) -> dict:
    """The summary of a raw record: goodput, retransmissions, EV events, recovery."""
    import numpy as np

    cfg = DemoConfig(**raw["config"])
    rec = raw["recorder"]
    t0, t1 = rec["start_ns"], rec["end_ns"]
    elapsed = max(t1 - t0, 1.0)
    line = raw["line_rate_gbps"]
    active = senders(cfg)
    bin_ns = max(2000.0, round(elapsed / 150 / 1000) * 1000)
    s = _series(raw, bin_ns)
    sends = {i: [t for (n, t, *_r) in rec["send_cqes"] if n == i] for i in (0, 1)}
    directions = []
    for i in (0, 1):
        payload = cfg.rounds * cfg.shard_bytes if i in active else 0
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
        "backend": raw.get("backend", "rtl"),
        "verified": raw["verified"],
        "errors": rec["errors"],
        "line_rate_gbps": line,
        "payload_efficiency": cfg.payload_efficiency(),
        "ideal_ns": cfg.ideal_ns(),
        "elapsed_ns": elapsed,
        "directions": directions,
        "goodput_of_line_rate": sum(d["payload_bytes"] for d in directions) * 8
        / max(d["completion_ns"] for d in directions) / (len(active) * line),
        "retransmissions": retx,
        "faults": faults,
        "ev_events": events,
        "first_qpns": raw.get("first_qpns"),
        "evs": raw.get("evs"),
        "ev_planes": raw.get("ev_planes"),
        "ev_states_final": [[EV_STATE_NAMES.get(x, x) for x in st]
                            for st in raw["ev_states_final"]],
        "recovery": recovery,
        "fabric": fabric_rows,
        "frames_captured": len(raw["capture"]),
        "sim_cycles": sim_cycles,
        "wall_workload_s": raw["wall_workload_s"],
        "cycles_per_s": (elapsed / raw["clk_ns"]) / max(raw["wall_workload_s"], 1e-9),
        # per second of the simulator's CPU time: what a quiet machine gives as wall time
        "cycles_per_cpu_s": (elapsed / raw["clk_ns"]) / max(raw.get("cpu_workload_s") or 1e-9,
                                                             1e-9),
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
    bad = [e for e in events if e["nic"] == sender and e["new"] == EvState.ASSUMED_BAD.name
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
        good = [e for e in events if e["nic"] == sender and e["old"] == EvState.ASSUMED_BAD.name
                and e["new"] == EvState.GOOD.name and e["time_ns"] >= t_up and e["ev"] is not None
                and e["ev"] % cfg.paths == path]
        if good:
            out["good_after_return_ns"] = good[0]["time_ns"] - t_up
    return out


def _us(ns) -> str:
    return "-" if ns is None else f"{ns / 1000:.1f} us"


def report_markdown(summary: dict) -> str:
    cfg = summary["config"]
    r = summary["recovery"]
    model = summary.get("backend") == "model"
    lines = [
        "Two RTL NicCores (`sim/system/top.py`, 64-bit datapath at 125 MHz: line rate "
        f"64 bit x 125 MHz = **{summary['line_rate_gbps']:g} Gb/s** per port) under Verilator, "
        f"joined by the cocotb fabric (`sim/system/fabric.py`: {cfg['paths']} paths, "
        f"{cfg['delay_ns']:g} ns each), configured and driven only through the host driver."
        if not model else
        "The golden model: two ModelNics (`sim/nicmodel/`, links at "
        f"**{summary['line_rate_gbps']:g} Gb/s**, the RTL's line rate) on the model fabric "
        f"(`sim/system/model_harness.py`: {cfg['paths']} paths, {cfg['delay_ns']:g} ns each), "
        "configured and driven by the same host driver and workload as the RTL (on a "
        "ModelTransport; the retransmit timer's t lowered by 3 for the model's 1.024 us unit, "
        "see sim/bench/system.py).",
        "",
        f"Scenario `{cfg['name']}`" + (f": {cfg['description']}" if cfg["description"]
                                        else "."),
        "",
        f"Workload: {describe_workload(DemoConfig(**cfg))} NICs: SACK loss detection at "
        f"{cfg['sack_threshold']} SACKed PSNs past a hole, retransmit timer "
        f"t = {cfg['timeout']} ({16 * CLK_NS * 2 ** cfg['timeout'] / 1000:.1f} us: the "
        "system top's timer unit is 16 cycles), a probe of each ASSUMED_BAD EV every "
        f"{cfg['probe_period']} cycles.",
        "",
        f"Faults: {describe_faults(DemoConfig(**cfg))} Path events as applied: "
        + ("; ".join(f"{_us(f['time_ns'])} path {f['path']} {'UP' if f['up'] else 'DOWN'}"
                     for f in summary["faults"][:12]) or "none") + ".",
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
    rows = [(f["time_ns"], f"fabric: path {f['path']} {DIRECTION_NAMES[f['direction']]} "
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
        f"Final EV states (of each NIC's first QP): nic0 {summary['ev_states_final'][0]}, nic1 "
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
        + ("(the event-driven model)." if model else
           "(Verilator + cocotb + the Python fabric and driver)."),
        "",
        "Files: `traffic.pcap` (every frame of both directions at its simulated send time; "
        "CE marks and trims as delivered; Wireshark dissects UDP 4791 as RoCE"
        + ("; the model's frames are built from its packets by `host_driver.layers`" if model
           else "") + "), `traffic_fates.csv` (fate of each pcap record), `goodput.png`, "
        + ("`planes.png` (goodput by the plane of the data's EV), "
           if summary["_series"]["plane_goodput"].shape[1] > 1 else "")
        + "`paths.png`, `ev_states.png`" + ("." if model else ", the waveform."),
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

    first_down = next((f for f in summary["faults"] if not f["up"]), None)

    def shade(ax):
        if r["failure_ns"] is not None:
            end = r["return_ns"] if r["return_ns"] is not None else t[-1] * 1000
            ax.axvspan(r["failure_ns"] / 1000, end / 1000, color="r", alpha=0.12,
                       label=f"path {first_down['path']} down")

    fig, ax = plt.subplots(figsize=(9, 4))
    for d in (0, 1):
        ax.plot(t, s["goodput"][d], lw=0.9, label=summary["directions"][d]["name"])
    ax.axhline(summary["line_rate_gbps"], color="k", ls=":", lw=0.8, label="line rate")
    ax.axhline(summary["line_rate_gbps"] * summary["payload_efficiency"], color="g", ls=":",
               lw=0.8, label="achievable")
    shade(ax)
    ax.set_xlabel("simulated time (us)")
    ax.set_ylabel(f"goodput (Gb/s, {s['bin_ns'] / 1000:g} us bins)")
    ax.set_title(("The golden model" if summary.get("backend") == "model" else "Two RTL NICs")
                 + ": goodput per direction")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(out / "goodput.png", dpi=90)
    plt.close(fig)
    files.append("goodput.png")

    planes = s["plane_goodput"].shape[1]
    if planes > 1:
        fig, axes = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True, sharey=True)
        for d, ax in enumerate(axes):
            for p in range(planes):
                ax.plot(t, s["plane_goodput"][d, p], lw=0.9, label=f"plane {p}")
            shade(ax)
            ax.set_ylabel("goodput (Gb/s)")
            ax.set_title(f"{summary['directions'][d]['name']}: goodput by the plane of the "
                         "data's EV", fontsize=9)
            ax.legend(fontsize=7, loc="lower right", ncol=planes)
        axes[1].set_xlabel("simulated time (us)")
        fig.tight_layout()
        fig.savefig(out / "planes.png", dpi=90)
        plt.close(fig)
        files.append("planes.png")

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
    colors = {EvState.GOOD.name: "tab:green", EvState.ASSUMED_BAD.name: "tab:red",
              EvState.DENIED.name: "tab:gray"}
    qpns = summary.get("first_qpns")  # with several QPs per NIC: the first one's EVs
    for nic, ax in enumerate(axes):
        for idx in range(nevs):
            changes = sorted((e["time_ns"], e["new"]) for e in summary["ev_events"]
                             if e["nic"] == nic and e["ev_index"] == idx
                             and (qpns is None or e["qpn"] == qpns[nic]))
            start, state = s["t0"], EvState.GOOD.name
            for when, new in changes + [(t_end, None)]:
                ax.broken_barh([(start / 1000, max(when - start, 1) / 1000)], (idx - 0.4, 0.8),
                               color=colors.get(state, "k"))
                start, state = when, new
        for when in (r["failure_ns"], r["return_ns"]):
            if when is not None:
                ax.axvline(when / 1000, color="k", ls="--", lw=1)
        ax.set_yticks(range(nevs))
        planes = dict(summary["ev_planes"][nic]) if summary.get("ev_planes") else {}
        values = summary["evs"][nic] if summary.get("evs") else []
        if len({planes.get(v, 0) for v in values}) > 1:  # with planes: each EV's
            ax.set_yticklabels([f"{i} p{planes.get(v, 0)}" for i, v in enumerate(values)]
                               + [str(i) for i in range(len(values), nevs)], fontsize=7)
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
        print(f"{_us(f['time_ns'])}: fabric path {f['path']} {DIRECTION_NAMES[f['direction']]} "
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


# The simulator builds: "sim" (the default) has the host memories and MAC
# streams in the simulator (sim.system.simhw); "cocotb" is the two-NIC top
# alone, with cocotbext-axi's Python models on its ports (for sim/bench/speed.py).
HARNESSES = ("sim", "cocotb")


def top(harness: str = "sim"):
    """(elaborate, toplevel) of ``harness``'s two-NIC top for run_cocotb (only
    its ports public: the demo reaches the NICs through them)."""
    if harness == "sim":
        from sim.system.simhw import SIM_TOPLEVEL, SimTwoNicTop

        return SimTwoNicTop, SIM_TOPLEVEL
    if harness == "cocotb":
        from sim.system.top import TwoNicTop

        return TwoNicTop, "two_nic"
    raise ValueError(f"harness must be one of {HARNESSES}, not {harness!r}")


# Trace only the system top's own signals (the NICs' ports), not the NICs'
# insides: a short waveform of the whole run, not gigabytes.
TRACE_ARGS = ["--trace-depth", "1"]


def simulate(outdir: Path, cfg: DemoConfig, *, waves: bool | str = "fst",
             name: str = RUN_NAME, tag: str = "demo", harness: str = "sim") -> dict:
    """Build (if needed) and run the cocotb test in ``sim_build/<name>/<tag>``
    on ``harness``'s top; returns the raw record."""
    from sim.cocotb_runner import SIM_BUILD, run_cocotb

    elaborate, toplevel = top(harness)
    outdir = Path(outdir).resolve()
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / RAW).unlink(missing_ok=True)
    test_dir = SIM_BUILD / name / tag
    t0 = time.monotonic()
    results = run_cocotb(name=name, elaborate=elaborate, toplevel=toplevel,
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

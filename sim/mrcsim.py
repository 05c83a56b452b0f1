"""Protocol-level simulator: scenario file -> report, plots, pcap.

    python -m sim.mrcsim [scenario] [--out build/sim] [--quick]

A scenario (JSON under sim/scenarios/, or a path) names a fabric, QP and
congestion-control parameters, flows, faults and the transports to compare.
Every transport runs on the same fabric with the same seed. Outputs under
``<out>/<scenario name>/``: report.md, report.json, PNG plots and
``sample.pcap``. ``run_scenario()`` returns the report as a dict.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

from .model import QpConfig, World, explicit_evs, generated_evs
from .model.cc import NsccParams
from .model.ev import ASSUMED_BAD, GOOD
from .model.packet import (
    ACK,
    AETH_ACK,
    DATA,
    IMM_OPCODES,
    PROBE_REQ,
    PROBE_RESP,
    ack_wire_len,
    data_wire_len,
)
from .model.qp import RTS, SUCCESS

SCENARIO_DIR = Path(__file__).parent / "scenarios"
TRANSPORT_NAMES = {"mrc": "MRC", "gbn": "RoCEv2 go-back-N", "spray": "oblivious spray"}


# ---------------------------------------------------------------------------
# Scenario loading


def load_scenario(path_or_name) -> dict:
    """A scenario dict from a path or a name under sim/scenarios/ (JSON or TOML)."""
    p = Path(path_or_name)
    if not p.exists():
        for ext in (".json", ".toml"):
            cand = SCENARIO_DIR / f"{path_or_name}{ext}"
            if cand.exists():
                p = cand
                break
        else:
            raise FileNotFoundError(f"no scenario {path_or_name!r} (looked in {SCENARIO_DIR})")
    if p.suffix == ".toml":
        import tomllib

        with open(p, "rb") as f:
            scn = tomllib.load(f)
    else:
        with open(p) as f:
            scn = json.load(f)
    scn.setdefault("name", p.stem)
    return scn


def list_scenarios() -> list[str]:
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.json")) + sorted(
        p.stem for p in SCENARIO_DIR.glob("*.toml"))


def _ev_list(scn: dict, planes: int) -> list[tuple[int, int]]:
    spec = scn.get("evs", {"mode": "generated", "init": 0xC000, "min": 0xC000,
                           "max": 0xFFFF, "count": 8 * planes})
    if spec["mode"] == "explicit":
        return explicit_evs(spec["values"], planes)
    if spec["mode"] == "generated":
        return generated_evs(width=spec.get("width", 16), init=spec.get("init", 0),
                             min_ev=spec.get("min", 0), max_ev=spec.get("max"),
                             mask=spec.get("mask"), count=spec.get("count", 8),
                             planes=planes)
    raise ValueError(f"EV mode {spec['mode']!r}: explicit or generated")


class Setup:
    """Everything derived from a scenario before running a transport."""

    def __init__(self, scn: dict, quick: bool) -> None:
        self.scn = scn
        fab = dict(scn.get("fabric", {}))
        self.fabric_kw = fab
        self.planes = fab.get("planes", 1)
        self.paths = fab.get("paths_per_plane", 8)
        self.port_gbps = fab.get("port_gbps", 100.0)
        self.core_gbps = fab.get("core_gbps", 100.0)
        self.link_delay = fab.get("link_delay_ns", 500.0)
        self.qp_kw = dict(scn.get("qp", {}))
        self.cfg = QpConfig(**self.qp_kw)
        self.evs = _ev_list(scn, self.planes)
        scale = scn.get("quick_scale", 0.25) if quick else 1.0
        self.flows = []
        for f in scn["flows"]:
            f = dict(f)
            f["messages"] = max(2, int(round(f["messages"] * scale)))
            self.flows.append(f)
        self.hosts = sorted({f["src"] for f in self.flows} | {f["dst"] for f in self.flows})
        mtu = self.cfg.mtu
        # exact payload efficiency of the offered messages on the wire
        payload = wire = 0
        for f in self.flows:
            size = f["size"]
            imm = f.get("imm", True)
            npk = max(1, -(-size // mtu))
            w = sum(data_wire_len(min(mtu, size - s * mtu), s == npk - 1 and imm, self.cfg.ipv6)
                    for s in range(npk))
            payload += size * f["messages"]
            wire += w * f["messages"]
        self.payload_bytes = payload
        self.wire_bytes = wire
        self.efficiency = payload / wire
        srcs = {f["src"] for f in self.flows}
        dsts = {f["dst"] for f in self.flows}
        src_cap = len(srcs) * self.planes * self.port_gbps
        dst_cap = len(dsts) * self.planes * self.port_gbps
        core_cap = len(dsts) * self.planes * self.paths * self.core_gbps
        self.bottleneck_gbps = min(src_cap, dst_cap, core_cap)
        self.achievable_gbps = self.bottleneck_gbps * self.efficiency
        self.ideal_ns = wire * 8 / self.bottleneck_gbps
        mtu_wire = data_wire_len(mtu, False, self.cfg.ipv6)
        ack_w = ack_wire_len(self.cfg.sack_bits, self.cfg.ipv6)
        per_hop = self.link_delay + mtu_wire * 8 / self.port_gbps
        self.base_rtt_ns = 3 * per_hop + 3 * (self.link_delay + ack_w * 8 / self.port_gbps)
        self.bdp_bytes = self.base_rtt_ns * self.port_gbps * self.planes / 8
        cc_kw = dict(scn.get("cc", {}))
        cc_kw.setdefault("base_rtt_ns", self.base_rtt_ns)
        self.cc = NsccParams(**cc_kw).resolved(self.bdp_bytes, mtu_wire)
        self.rto_ns = self.cfg.timeout_ns(0)
        self.bin_ns = scn.get("bin_ns", 10000.0)
        self.max_time_ns = scn.get("max_time_ns", 200e6)

    def at(self, spec: dict, key: str) -> float:
        """A fault time given in ns (``key_ns``) or as a fraction of the ideal transfer."""
        if f"{key}_ns" in spec:
            return float(spec[f"{key}_ns"])
        if f"{key}_frac" in spec:
            return float(spec[f"{key}_frac"]) * self.ideal_ns
        raise ValueError(f"fault needs {key}_ns or {key}_frac: {spec}")


def _resolve_target(setup: Setup, target: dict) -> dict:
    target = dict(target)
    if target.get("path") == "first_ev":
        # the path the first flow's first EV maps to: where RoCE's QP is pinned
        target["path"] = setup.evs[0][0] % setup.paths
        target.setdefault("plane", setup.evs[0][1])
    return target


def _apply_faults(world: World, setup: Setup, faults: list[dict]) -> list[dict]:
    """Install faults; returns the failure windows (for the recovery metrics)."""
    failures = []
    fabric = world.fabric
    for fault in faults:
        kind = fault["type"]
        target = _resolve_target(setup, fault.get("target", {"kind": "core"}))
        links = fabric.links(target)
        if kind == "loss":
            for link in links:
                link.fault().loss = float(fault["rate"])
        elif kind == "gilbert":
            for link in links:
                link.fault().gilbert = (fault["p_gb"], fault["p_bg"], fault.get("loss_bad", 1.0))
        elif kind == "burst":
            start = setup.at(fault, "start")
            end = start + fault["duration_ns"]
            for link in links:
                link.fault().bursts.append((start, end, fault.get("rate", 1.0)))
        elif kind == "reorder":
            for link in links:
                link.fault().reorder_prob = float(fault["prob"])
                link.fault().reorder_ns = float(fault["extra_ns"])
        elif kind == "duplicate":
            for link in links:
                link.fault().dup_prob = float(fault["prob"])
                link.fault().dup_ns = float(fault.get("extra_ns", 0.0))
        elif kind == "down":
            at = setup.at(fault, "at")
            up = setup.at(fault, "up") if ("up_ns" in fault or "up_frac" in fault) else None
            fabric.schedule_down(target, at, up)
            failures.append({"kind": "down", "target": target, "start_ns": at, "end_ns": up,
                             "links": [lk.name for lk in links]})
        elif kind == "flap":
            start = setup.at(fault, "start")
            stop = setup.at(fault, "stop")
            windows = fabric.schedule_flap(target, start, stop, fault["down_ns"], fault["up_ns"])
            failures.append({"kind": "flap", "target": target, "start_ns": start,
                             "end_ns": stop, "windows": windows,
                             "links": [lk.name for lk in links]})
        else:
            raise ValueError(f"unknown fault type {kind!r}")
    return failures


# ---------------------------------------------------------------------------
# One transport, one run


class _Flow:
    def __init__(self, conn, spec: dict, index: int) -> None:
        self.conn = conn
        self.size = spec["size"]
        self.imm = spec.get("imm", True)
        self.total = spec["messages"]
        self.depth = spec.get("depth", 4)
        self.posted = 0
        self.done = 0
        self.errors = 0
        self.mct: list[float] = []
        self.post_time: dict[int, float] = {}
        self.index = index

    def post_next(self, now: float) -> None:
        req = self.conn.requester
        while self.posted < self.total and self.posted - self.done < self.depth:
            wr_id = self.posted
            va = self.conn.mr.va + (wr_id * self.size) % (1 << 36)
            imm = (self.index << 24 | wr_id) & 0xFFFFFFFF if self.imm else None
            self.post_time[wr_id] = now
            self.posted += 1
            req.post_write(wr_id, va, self.conn.rkey, self.size, imm=imm)


def run_transport(setup: Setup, transport: str, *, faults: bool = True, progress=None,
                  capture: int = 0) -> dict:
    """One transport on the scenario's fabric: the metrics of a report row."""
    world, flows, failures, finished, wall, sample = _simulate(
        setup, transport, faults=faults, progress=progress, capture=capture)
    return _collect(setup, transport, world, flows, failures, finished, wall,
                    world.fabric.packets_sent, sample)


def scoreboard_run(path_or_name, transport: str = "mrc", quick: bool = False) -> dict:
    """Run a scenario for one transport and return what a scoreboard compares,
    as plain JSON-able data (see docs/model.md):

    ``{"scenario", "seed", "transport", "finished", "sim_time_ns", "ev_events": [...],
    "qps": [{"src", "dst", "requester_qpn", "responder_qpn", "start_psn",
    "send_cq": [...], "recv_cq": [...], "retransmitted": [[time_ns, psn, ev, why], ...],
    "stats": {...}, "final_state"}]}``; completions are ``Completion._asdict()``.
    """
    scn = load_scenario(path_or_name)
    setup = Setup(scn, quick)
    world, flows, _failures, finished, _wall, _sample = _simulate(setup, transport)
    qps = []
    for f in flows:
        req, resp = f.conn.requester, f.conn.responder
        qps.append({
            "src": f.conn.src, "dst": f.conn.dst, "requester_qpn": req.qpn,
            "responder_qpn": resp.qpn, "start_psn": req.sq_psn,
            "send_cq": [c._asdict() for c in req.send_cq],
            "recv_cq": [c._asdict() for c in resp.recv_cq],
            "retransmitted": [list(r) for r in req.retx_log],
            "stats": {"requester": dict(req.stats), "responder": dict(resp.stats)},
            "final_state": req.state,
        })
    return {"scenario": scn["name"], "seed": scn.get("seed", 1), "transport": transport,
            "finished": finished, "sim_time_ns": world.engine.now,
            "ev_events": [e._asdict() for e in world.ev_events], "qps": qps}


def _simulate(setup: Setup, transport: str, *, faults: bool = True, progress=None,
              capture: int = 0):
    scn = setup.scn
    world = World(seed=scn.get("seed", 1), **setup.fabric_kw)
    for h in setup.hosts:
        world.add_host(h)
    flows: list[_Flow] = []
    by_qp = {}
    use_cc = scn.get("cc_enabled", True)
    cc = setup.cc if use_cc else None
    for i, spec in enumerate(setup.flows):
        evs = setup.evs[i % len(setup.evs):] + setup.evs[:i % len(setup.evs)]
        conn = world.connect(spec["src"], spec["dst"], transport=transport, cfg=setup.cfg,
                             evs=evs, cc=cc)
        req = conn.requester
        req.tx_log = []
        req.cwnd_log = []
        conn.responder.rx_log = []
        flow = _Flow(conn, spec, i)
        flows.append(flow)
        by_qp[req.qpn] = flow

    def on_completion(qp, comp, wr):
        flow = by_qp.get(qp.qpn)
        if flow is None or wr is None:
            return
        flow.done += 1
        if comp.status == SUCCESS:
            flow.mct.append(comp.time_ns - flow.post_time[comp.wr_id])
        else:
            flow.errors += 1
        if qp.state == RTS:
            flow.post_next(world.engine.now)

    for nic in world.nics.values():
        nic.completion_hooks.insert(0, on_completion)
    failures = _apply_faults(world, setup, scn.get("faults", [])) if faults else []
    sample: list = []
    if capture:
        windows = [(0.0, math.inf)]
        if failures:
            windows.append((failures[0]["start_ns"] - 20000, math.inf))
        counts = [0] * len(windows)

        rare = [0]

        def tap(pkt, now):
            # probes, NAKs, trimmed and retransmitted packets are the interesting
            # ones: keep up to 100 of them wherever they happen
            if (pkt.kind in (PROBE_REQ, PROBE_RESP) or pkt.retx or pkt.trimmed
                    or (pkt.kind == ACK and pkt.syndrome != AETH_ACK)):
                if rare[0] < 100:
                    rare[0] += 1
                    sample.append(_snapshot(pkt, now, world))
                return
            for w, (lo, hi) in enumerate(windows):
                if lo <= now < hi and counts[w] < capture // len(windows):
                    counts[w] += 1
                    sample.append(_snapshot(pkt, now, world))
                    break
            if rare[0] >= 100 and all(c >= capture // len(windows) for c in counts):
                # sample complete: stop paying for it (rebinding the list keeps
                # the fabric's loop over the old one intact)
                world.fabric.taps = [t for t in world.fabric.taps if t is not tap]

        world.fabric.taps.append(tap)
    for flow in flows:
        flow.post_next(0.0)
    # CPU time of this process: the machine may be shared, and the figure is
    # "simulated packets per second on one core"
    wall = time.process_time()
    finished = world.run_until_idle(max_time_ns=setup.max_time_ns, progress=progress)
    wall = time.process_time() - wall
    return world, flows, failures, finished, wall, sample


def _snapshot(pkt, now, world) -> dict:
    d = {"t": now, "kind": pkt.kind, "ev": pkt.ev, "dqpn": pkt.dqpn, "psn": pkt.psn,
         "src": pkt.src.hid, "dst": pkt.dst.hid}
    if pkt.kind == DATA:
        d.update(opcode=pkt.opcode, va=pkt.va, rkey=pkt.rkey, dma_len=pkt.dma_len,
                 payload_len=pkt.payload_len, imm=pkt.imm, ackreq=pkt.ackreq, retx=pkt.retx)
    elif pkt.kind == ACK:
        d.update(syndrome=pkt.syndrome, msn=pkt.msn, cum_psn=pkt.cum_psn,
                 sack_base=pkt.sack_base, bitmap=pkt.sack_bitmap, sack_bits=pkt.sack_bits,
                 ece=int(pkt.ece), ce_count=pkt.ce_count, svc_time=pkt.svc_time)
    else:
        d.update(probe_id=pkt.probe_id, timestamp=pkt.timestamp)
    return d


def _bins(events, bin_ns: float, nbins: int):
    import numpy as np

    out = np.zeros(nbins)
    if events:
        arr = np.asarray(events, dtype=float)
        idx = np.minimum((arr[:, 0] // bin_ns).astype(int), nbins - 1)
        np.add.at(out, idx, arr[:, 1])
    return out


def _collect(setup, transport, world, flows, failures, finished, wall, fabric_pkts, sample):
    import numpy as np

    now = world.engine.now
    reqs = [f.conn.requester for f in flows]
    resps = [f.conn.responder for f in flows]
    stats = {}
    for qp in reqs + resps:
        for k, v in qp.stats.items():
            stats[k] = stats.get(k, 0) + v
    delivered = sum(r.stats["rx_bytes"] for r in resps)
    completed_bytes = sum(f.size * len(f.mct) for f in flows)
    errors = sum(f.errors for f in flows)
    all_ok = finished and errors == 0 and all(f.done == f.total for f in flows)
    last_completion = max((c.time_ns for q in reqs for c in q.send_cq), default=now)
    transfer_ns = last_completion if all_ok else now
    goodput = completed_bytes * 8 / transfer_ns if transfer_ns else 0.0
    mcts = sorted(m for f in flows for m in f.mct)
    bin_ns = setup.bin_ns
    nbins = max(1, int(math.ceil(now / bin_ns)))
    npaths = setup.planes * setup.paths
    per_path = np.zeros((npaths, nbins))
    for r in resps:
        if r.rx_log:
            arr = np.asarray(r.rx_log, dtype=float)
            idx = np.minimum((arr[:, 0] // bin_ns).astype(int), nbins - 1)
            np.add.at(per_path, (arr[:, 1].astype(int), idx), arr[:, 2])
    per_path_gbps = per_path * 8 / bin_ns
    total_gbps = per_path_gbps.sum(axis=0)
    retx_events = [(t, 1) for q in reqs for (t, _, _, r) in (q.tx_log or []) if r]
    retx_bins = _bins(retx_events, bin_ns, nbins)
    res = {
        "transport": transport,
        "finished": bool(all_ok),
        "qp_errors": errors,
        "sim_time_ns": now,
        "transfer_ns": transfer_ns,
        "payload_bytes_offered": setup.payload_bytes,
        "payload_bytes_delivered": delivered,
        "payload_bytes_completed": completed_bytes,
        "goodput_gbps": goodput,
        "goodput_fraction": goodput / setup.achievable_gbps,
        "mct_mean_ns": float(np.mean(mcts)) if mcts else None,
        "mct_p50_ns": float(mcts[len(mcts) // 2]) if mcts else None,
        "mct_p99_ns": float(mcts[min(len(mcts) - 1, int(len(mcts) * 0.99))]) if mcts else None,
        "mct_max_ns": float(mcts[-1]) if mcts else None,
        "packets_sent": stats["tx_data"],
        "packets_retransmitted": stats["tx_retx"],
        "retransmit_fraction": stats["tx_retx"] / max(1, stats["tx_data"]),
        "timeouts": stats["timeouts"],
        "counters": stats,
        "ev_events": [e._asdict() for e in world.ev_events],
        "wall_s": wall,
        "fabric_packets": fabric_pkts,
        "engine_events": world.engine.events,
        "packets_per_s": fabric_pkts / wall if wall > 0 else None,
        "data_packets_per_s": stats["tx_data"] / wall if wall > 0 else None,
        "cwnd_final": [q.cc.cwnd for q in reqs],
        "cc": {"md": sum(q.cc.md_count for q in reqs), "qa": sum(q.cc.qa_count for q in reqs),
               "trims": sum(q.cc.trim_count for q in reqs)},
        "links": {k: v for k, v in world.fabric.counters().items()
                  if v["drops_down"] or v["drops_loss"] or v["drops_overflow"] or v["trims"]
                  or v["ecn_marks"]},
    }
    res["data_on_assumed_bad_ev"] = data_sent_on_bad_evs(world, reqs)
    res.update(_failure_metrics(setup, world, reqs, failures, total_gbps, bin_ns))
    res["_series"] = {
        "bin_ns": bin_ns, "per_path_gbps": per_path_gbps, "total_gbps": total_gbps,
        "retx": retx_bins, "cwnd": [(t, c) for (t, c) in (reqs[0].cwnd_log or [])],
        "failures": failures,
    }
    res["_sample"] = sample
    return res


def data_sent_on_bad_evs(world, reqs) -> int:
    """Data packets a requester put on an EV while that EV was ASSUMED_BAD (or DENIED).

    Needs ``qp.tx_log``. MRC's contract is that this is zero: once an EV is
    marked ASSUMED_BAD only probes go on it until a probe brings it back."""
    count = 0
    for q in reqs:
        intervals: dict[int, list] = {}
        for e in world.ev_events:
            if e.qpn != q.qpn:
                continue
            lst = intervals.setdefault(e.ev, [])
            if e.new != GOOD:
                lst.append([e.time_ns, math.inf])
            elif lst and lst[-1][1] == math.inf:
                lst[-1][1] = e.time_ns
        if not intervals:
            continue
        for (t, _psn, ev, _r) in q.tx_log or []:
            for lo, hi in intervals.get(ev, ()):
                # a packet sent at the very instant of the transition was
                # chosen before it (same event), so the interval is open at lo
                if lo < t < hi:
                    count += 1
                    break
    return count


def _failure_metrics(setup, world, reqs, failures, total_gbps, bin_ns) -> dict:
    """Time from the failure to the last data packet on a dead EV; goodput recovery."""
    if not failures:
        return {}
    fail = failures[0]
    t_f = fail["start_ns"]
    dead_links = set(fail["links"])
    out = {"failure_ns": t_f}
    fabric = world.fabric
    last_on_dead = None
    dead_evs = set()
    for q in reqs:
        src = q.nic.host
        for ev in q.evs.evs:
            path = fabric.path_of(src, q.peer, ev.plane, ev.value)
            link = fabric.core[(ev.plane, path, q.peer.hid)]
            if link.name in dead_links:
                dead_evs.add((q.qpn, ev.value))
        for (t, _psn, ev, _r) in q.tx_log or []:
            if t >= t_f and (q.qpn, ev) in dead_evs:
                end = fail.get("end_ns")
                if fail["kind"] == "down" and (end is None or t < end):
                    last_on_dead = t if last_on_dead is None else max(last_on_dead, t)
                elif fail["kind"] == "flap" and any(lo <= t < hi for lo, hi in fail["windows"]):
                    last_on_dead = t if last_on_dead is None else max(last_on_dead, t)
    out["dead_evs"] = sorted(f"{qpn:#x}:{ev:#06x}" for qpn, ev in dead_evs)
    if fail["kind"] == "flap":
        # per down window: time from going down to the last data packet on it
        worst = None
        for lo, hi in fail["windows"]:
            last = None
            for q in reqs:
                for (t, _psn, ev, _r) in q.tx_log or []:
                    if lo <= t < hi and (q.qpn, ev) in dead_evs:
                        last = t if last is None else max(last, t)
            if last is not None:
                worst = max(worst or 0.0, last - lo)
        out["last_data_on_dead_ev_ns"] = worst
    else:
        out["last_data_on_dead_ev_ns"] = (last_on_dead - t_f) if last_on_dead is not None else 0.0
    bad_times = [e.time_ns for e in world.ev_events
                 if e.new == ASSUMED_BAD and e.time_ns >= t_f]
    out["first_assumed_bad_ns"] = (min(bad_times) - t_f) if bad_times else None
    # goodput recovery: the first bin after the failure from which the moving
    # average over 3 bins is back to 90 % of the mean before the failure
    fb = int(t_f // bin_ns)
    pre = total_gbps[max(0, fb - 10):fb]
    out["recovery_ns"] = None
    if len(pre) and pre.mean() > 0:
        ref = 0.9 * pre.mean()
        for b in range(fb, len(total_gbps) - 2):
            if total_gbps[b:b + 3].mean() >= ref:
                out["recovery_ns"] = max(0.0, (b + 1) * bin_ns - t_f)
                break
        dip = total_gbps[fb:fb + 5]
        out["goodput_dipped"] = bool(len(dip) and dip.min() < ref)
    return out


# ---------------------------------------------------------------------------
# Scenario run, report, plots, pcap


def run_scenario(path_or_name, outdir="build/sim", progress: bool = True,
                 quick: bool = False, transports=None) -> dict:
    scn = load_scenario(path_or_name)
    setup = Setup(scn, quick)
    transports = transports or scn.get("transports", ["mrc", "gbn", "spray"])
    out = Path(outdir) / scn["name"]
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(transports), desc=scn["name"], unit="run", leave=False,
                   file=sys.stderr)
    has_failure = any(f["type"] in ("down", "flap") for f in scn.get("faults", []))
    for tr in transports:
        prog = None
        if bar is not None:
            def prog(t, tr=tr):
                bar.set_postfix_str(f"{tr} t={t / 1000:.0f}us", refresh=True)
        results[tr] = run_transport(setup, tr, progress=prog,
                                    capture=scn.get("pcap_packets", 300) if tr == "mrc" else 0)
        if has_failure:
            ref = run_transport(setup, tr, faults=False)
            results[tr]["reference_transfer_ns"] = ref["transfer_ns"] if ref["finished"] else None
            if results[tr]["finished"] and ref["finished"]:
                results[tr]["failure_delay_ns"] = results[tr]["transfer_ns"] - ref["transfer_ns"]
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    report = _report(setup, results, quick)
    _plots(setup, results, out)
    pcap = _pcap(results.get("mrc", {}).get("_sample", []), out / "sample.pcap", setup)
    report["outputs"] = sorted(p.name for p in out.iterdir())
    report["pcap_packets"] = pcap
    with open(out / "report.json", "w") as f:
        json.dump(report, f, indent=1, default=_json_default)
    with open(out / "report.md", "w") as f:
        f.write(markdown_report(report))
    report["outdir"] = str(out)
    return report


def _json_default(o):
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    raise TypeError(type(o))


def _report(setup: Setup, results: dict, quick: bool) -> dict:
    scn = setup.scn
    rep = {
        "scenario": scn["name"],
        "description": scn.get("description", ""),
        "quick": quick,
        "seed": scn.get("seed", 1),
        "fabric": {"planes": setup.planes, "paths_per_plane": setup.paths,
                   "port_gbps": setup.port_gbps, "core_gbps": setup.core_gbps,
                   "link_delay_ns": setup.link_delay, **setup.fabric_kw},
        "qp": setup.cfg.__dict__,
        "cc": setup.cc.__dict__,
        "base_rtt_ns": setup.base_rtt_ns,
        "rto_ns": setup.rto_ns,
        "bottleneck_gbps": setup.bottleneck_gbps,
        "payload_efficiency": setup.efficiency,
        "achievable_gbps": setup.achievable_gbps,
        "offered_payload_bytes": setup.payload_bytes,
        "results": {k: {kk: vv for kk, vv in v.items() if not kk.startswith("_")}
                    for k, v in results.items()},
    }
    return rep


def _fmt_us(ns):
    return "-" if ns is None else f"{ns / 1000:.1f}"


def markdown_report(rep: dict) -> str:
    lines = [f"# Scenario `{rep['scenario']}`", "", rep.get("description", ""), ""]
    lines.append(
        f"Seed {rep['seed']}; {rep['fabric']['planes']} plane(s) x "
        f"{rep['fabric']['paths_per_plane']} paths; bottleneck {rep['bottleneck_gbps']:g} Gb/s, "
        f"payload efficiency {rep['payload_efficiency']:.4f} -> achievable "
        f"{rep['achievable_gbps']:.2f} Gb/s; base RTT {rep['base_rtt_ns'] / 1000:.2f} us; "
        f"RTO {rep['rto_ns'] / 1000:.1f} us{' (quick run)' if rep['quick'] else ''}.")
    lines += ["", "| transport | done | goodput Gb/s | of achievable | MCT mean us | MCT p99 us "
              "| pkts sent | retransmitted | timeouts | last data on dead EV us "
              "| recovery us | delay vs no-failure us |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for tr, r in rep["results"].items():
        lines.append(
            f"| {TRANSPORT_NAMES.get(tr, tr)} | {'yes' if r['finished'] else 'NO'} "
            f"| {r['goodput_gbps']:.2f} | {r['goodput_fraction']:.3f} "
            f"| {_fmt_us(r['mct_mean_ns'])} | {_fmt_us(r['mct_p99_ns'])} "
            f"| {r['packets_sent']} | {r['packets_retransmitted']} | {r['timeouts']} "
            f"| {_fmt_us(r.get('last_data_on_dead_ev_ns'))} | {_fmt_us(r.get('recovery_ns'))} "
            f"| {_fmt_us(r.get('failure_delay_ns'))} |")
    lines.append("")
    for tr, r in rep["results"].items():
        evs = r["ev_events"]
        if evs:
            head = f"**{TRANSPORT_NAMES.get(tr, tr)} EV transitions** ({len(evs)}): "
            lines.append(head + "; ".join(
                f"{e['time_ns'] / 1000:.1f} us QP {e['qpn']:#x} EV {e['ev']:#06x} "
                f"{e['old']}->{e['new']} ({e['reason']}, drops {e['drops']})" for e in evs[:12])
                + (" ..." if len(evs) > 12 else ""))
            lines.append("")
    lines.append("Model speed: " + ", ".join(
        f"{tr} {r['packets_per_s'] / 1000:.0f}k packets/s ({r['fabric_packets']} packets, "
        f"{r['wall_s']:.2f} s)" for tr, r in rep["results"].items() if r.get("packets_per_s")))
    lines.append("")
    return "\n".join(lines)


def _plots(setup: Setup, results: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    def axes_time(ax, s):
        return np.arange(len(s["total_gbps"])) * s["bin_ns"] / 1000

    fig, ax = plt.subplots(figsize=(8, 4))
    for tr, r in results.items():
        s = r["_series"]
        ax.plot(axes_time(ax, s), s["total_gbps"], label=TRANSPORT_NAMES.get(tr, tr))
    ax.axhline(setup.achievable_gbps, color="k", ls=":", lw=0.8, label="achievable")
    _mark_failures(ax, results)
    ax.set_xlabel("time (us)")
    ax.set_ylabel("goodput (Gb/s)")
    ax.set_title(f"{setup.scn['name']}: total goodput")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "goodput_total.png", dpi=90)
    plt.close(fig)

    for tr, r in results.items():
        s = r["_series"]
        fig, ax = plt.subplots(figsize=(8, 4))
        t = axes_time(ax, s)
        # a 5-bin moving average: one bin holds only a few packets per path
        kernel = np.ones(5) / 5
        for p in range(s["per_path_gbps"].shape[0]):
            if s["per_path_gbps"][p].any():
                ax.plot(t, np.convolve(s["per_path_gbps"][p], kernel, mode="same"), lw=0.8,
                        label=f"path {p}")
        _mark_failures(ax, {tr: r})
        ax.set_xlabel("time (us)")
        ax.set_ylabel(f"goodput (Gb/s, mean over {5 * s['bin_ns'] / 1000:g} us)")
        ax.set_title(f"{setup.scn['name']}: goodput per path, {TRANSPORT_NAMES.get(tr, tr)}")
        ax.legend(fontsize=7, ncol=4)
        fig.tight_layout()
        fig.savefig(out / f"goodput_paths_{tr}.png", dpi=90)
        plt.close(fig)

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for tr, r in results.items():
        s = r["_series"]
        if s["cwnd"]:
            arr = np.asarray(s["cwnd"])
            ax1.plot(arr[:, 0] / 1000, arr[:, 1] / 1024, lw=0.8, label=TRANSPORT_NAMES.get(tr, tr))
        ax2.plot(axes_time(ax2, s), np.cumsum(s["retx"]), label=TRANSPORT_NAMES.get(tr, tr))
    ax1.set_ylabel("cwnd, first QP (KiB)")
    ax1.legend(fontsize=8)
    ax2.set_ylabel("retransmitted packets (cumulative)")
    ax2.set_xlabel("time (us)")
    _mark_failures(ax2, results)
    fig.tight_layout()
    fig.savefig(out / "cwnd_retransmissions.png", dpi=90)
    plt.close(fig)

    fails = next((r["_series"]["failures"] for r in results.values() if r["_series"]["failures"]),
                 None)
    if fails:
        t_f = fails[0]["start_ns"] / 1000
        fig, ax = plt.subplots(figsize=(8, 4))
        for tr, r in results.items():
            s = r["_series"]
            t = axes_time(ax, s)
            line, = ax.plot(t, s["total_gbps"], label=TRANSPORT_NAMES.get(tr, tr))
            if r.get("first_assumed_bad_ns") is not None:
                ax.axvline(t_f + r["first_assumed_bad_ns"] / 1000, color=line.get_color(),
                           ls="--", lw=0.8)
            if r.get("last_data_on_dead_ev_ns"):
                ax.axvline(t_f + r["last_data_on_dead_ev_ns"] / 1000, color=line.get_color(),
                           ls=":", lw=0.8)
        ax.axvline(t_f, color="r", lw=1.2, label="failure")
        ax.set_xlim(max(0, t_f - 100), t_f + 400)
        ax.set_xlabel("time (us); dashed: EV ASSUMED_BAD, dotted: last data on dead EV")
        ax.set_ylabel("goodput (Gb/s)")
        ax.set_title(f"{setup.scn['name']}: recovery around the failure")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "recovery.png", dpi=90)
        plt.close(fig)


def _mark_failures(ax, results) -> None:
    for r in results.values():
        for f in r["_series"]["failures"]:
            ax.axvline(f["start_ns"] / 1000, color="r", lw=0.8, ls="--")
        break


def model_frame(d: dict, addr: dict, payload: bytes | None = None):
    """The frame (scapy, built by host_driver.layers) of a model packet's
    snapshot ``d`` (``_snapshot``) between the hosts of ``addr``; a data
    frame carries ``payload``, or zeros of its length."""
    from host_driver import layers as L

    if d["kind"] == DATA:
        return L.write_packet(opcode=d["opcode"], dqpn=d["dqpn"], psn=d["psn"], va=d["va"],
                              rkey=d["rkey"], dma_len=d["dma_len"],
                              payload=bytes(d["payload_len"]) if payload is None else payload,
                              imm=d["imm"] if d["opcode"] in IMM_OPCODES else None,
                              ev=d["ev"], ackreq=int(d["ackreq"]), **addr)
    if d["kind"] == ACK:
        return L.ack_packet(dqpn=d["dqpn"], cum_psn=d["cum_psn"], sack_base=d["sack_base"],
                            bitmap=d["bitmap"], sack_bits=d["sack_bits"],
                            syndrome=d["syndrome"], msn=d["msn"], psn=d["psn"], ece=d["ece"],
                            ce_count=d["ce_count"], svc_time=d["svc_time"], ev=d["ev"],
                            **addr)
    return L.probe_packet(response=d["kind"] != PROBE_REQ, dqpn=d["dqpn"],
                          probe_id=d["probe_id"], ev=d["ev"], timestamp=d["timestamp"],
                          **addr)


def _pcap(sample: list, path: Path, setup: Setup) -> int:
    """Write the traffic sample as real frames built by host_driver.layers."""
    if not sample:
        return 0
    from scapy.utils import PcapWriter

    macs = lambda hid: f"02:00:00:00:{hid >> 8:02x}:{hid & 0xFF:02x}"  # noqa: E731
    ips = lambda hid: f"10.0.{hid >> 8}.{(hid & 0xFF) + 1}"  # noqa: E731
    writer = PcapWriter(str(path), linktype=1, sync=False)
    n = 0
    for d in sorted(sample, key=lambda d: d["t"]):
        addr = dict(src_mac=macs(d["src"]), dst_mac=macs(d["dst"]), src_ip=ips(d["src"]),
                    dst_ip=ips(d["dst"]))
        pkt = model_frame(d, addr)
        pkt.time = d["t"] * 1e-9
        writer.write(pkt)
        n += 1
    writer.close()
    return n


def demo(outdir, scenario: str = "blackhole") -> dict:
    """``make sim`` step: the blackhole scenario, MRC next to go-back-N and spraying."""
    rep = run_scenario(scenario, outdir, progress=sys.stderr.isatty())
    print(markdown_report(rep))
    print(f"outputs in {rep['outdir']}: {', '.join(rep['outputs'])}")
    return rep


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sim.mrcsim", description=__doc__.split("\n")[0])
    ap.add_argument("scenario", nargs="?", default="blackhole",
                    help=f"scenario name or path; names: {', '.join(list_scenarios())}")
    ap.add_argument("--out", default="build/sim")
    ap.add_argument("--quick", action="store_true", help="scaled-down transfer")
    ap.add_argument("--transports", default=None, help="comma list of mrc,gbn,spray")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    rep = run_scenario(args.scenario, args.out, progress=not args.no_progress and
                       sys.stderr.isatty(), quick=args.quick,
                       transports=args.transports.split(",") if args.transports else None)
    print(markdown_report(rep))
    print(f"outputs in {rep['outdir']}: {', '.join(rep['outputs'])}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("MPLBACKEND", "Agg")
    sys.exit(main())

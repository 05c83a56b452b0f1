"""``make bench`` section ``planes``: goodput over 1, 2, 4 and 8 planes, and a
3-to-1 incast over 2, on the RTL and on the golden model, through the same
driver code (sim/system/incast.py).

``run() -> str`` (markdown). Each row runs ``run_incast`` on NicCores of the
system tests' parameters (sim/system/top.py ``NIC_PARAMS``) with
``num_planes`` planes, UET NSCC on every NIC, joined by a switch per plane
(sim/system/switch.py) whose ports run at the data path's rate / planes
(the planes share one data path, docs/architecture.md), and the same
scenario on model NICs with the same planes and ports (``run_model``):

- planes 1, 2, 4, 8: one sender (two NICs) writes ``ONE_WAY_BYTES``: goodput
  from the first post to the last completion as a fraction of the data
  path's best after headers (``best_goodput``), the sender's frames per
  plane;
- incast: three senders into one receiver over two planes (four NICs,
  tests/system/test_incast.py's build), ``INCAST_BYTES`` each: goodput, the
  senders' summed window, the receiver's ports' marks and largest queue;
- plane failure, at 2 and 4 planes: plane 1's switch fails mid-transfer
  (``FAILURE``), at each of ``FAIL_AT_CYCLES`` in turn: the time to the last
  of its EVs going ASSUMED_BAD, its mean over those failure times, and
  goodput. One failure time is one sample of a time that depends on where
  in the spraying order and the ACK coalescing the failure falls (the
  model's alone ranges over 25 % across a few hundred cycles), so the RTL
  and the model are compared on the mean over the same failure times.

The RTL NICs' MACs are wires (``IncastConfig.wire_macs``): each paced at its
port's rate. Each RTL build is one Verilator build of its own (two to three
minutes each).

    python -m sim.bench --only planes
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, replace
from pathlib import Path

from hw.reliability.cc_defaults import DATA_WIRE_OVERHEAD
from sim.system.incast import (
    ONE_PLANE_BASE_RTT_NS,
    IncastConfig,
    fabric_base_rtt_ns,
    figures,
    run_model,
)
from sim.system.top import NIC_PARAMS

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "build" / "bench" / "planes"
PLANE_COUNTS = (1, 2, 4, 8)
ONE_WAY_BYTES = 1 << 20
INCAST_BYTES = 512 * 1024
TARGET = 0.10  # the RTL within 10 % of the model
FAIL_PLANE_COUNTS = (2, 4)
FAILURE = IncastConfig(senders=1, bytes_per_sender=ONE_WAY_BYTES, fail_at_cycle=30_000,
                       sample_cycles=64, timeout=7, sack_threshold=3)
FAIL_AT_CYCLES = (30_000, 30_500, 31_000, 31_500)


def rtl(params: dict, nics: int, cfg: IncastConfig, name: str, tag: str = "bench") -> dict:
    """The scenario on ``nics`` RTL NicCores of ``params`` (build ``name``, run
    directory ``tag``), their MACs as wires (``wire_macs``: each paced at its
    port's rate, as a MAC is, so that frames wait in the NIC, not in a queue
    after TX has counted them sent)."""
    from sim.cocotb_runner import SIM_BUILD, run_cocotb
    from sim.system.simhw import SIM_TOPLEVEL, SimTwoNicTop

    cfg = replace(cfg, wire_macs=True)
    OUT.mkdir(parents=True, exist_ok=True)
    out = OUT / f"{name}_{tag}.json"
    out.unlink(missing_ok=True)
    spec = json.dumps({"cfg": asdict(cfg), "params": params})
    run_cocotb(name=name, elaborate=lambda: SimTwoNicTop(params, num_nics=nics),
               toplevel=SIM_TOPLEVEL, test_module="sim.bench.incast_tb",
               extra_env={"MRC_INCAST_CFG": spec, "MRC_INCAST_OUT": str(out)},
               test_dir=SIM_BUILD / name / tag)
    if not out.exists():
        raise RuntimeError(f"the RTL run {name} wrote no figures: see its log under "
                           f"{SIM_BUILD / name / tag}")
    return json.loads(out.read_text())


def model(params: dict, cfg: IncastConfig, planes: int) -> dict:
    run, link = run_model(cfg, params, planes)
    out = figures(run, cfg, params)
    out.update(marked=link["ecn_marks"], trimmed=link["trims"],
               max_queue=link["max_queue_bytes"])
    return out


def _worst(times: list) -> float:
    """The slowest of the EVs' times (inf if one never went ASSUMED_BAD)."""
    return max(float("inf") if t is None else t for t in times)


def _goodputs(values: list) -> str:
    return "[" + ", ".join(f"{v:.3f}" for v in values) + "]"


def _ratio(a: float, b: float) -> str:
    r = a / b
    return f"{r:.3f}" + ("" if abs(r - 1) <= TARGET else " **outside 10 %**")


def _row(planes, senders, r, m) -> str:
    return (f"| {planes} | {senders} | {r['goodput_ratio']:.3f} | {m['goodput_ratio']:.3f} | "
            f"{_ratio(r['goodput_ratio'], m['goodput_ratio'])} | "
            f"{r['summed_window']:.2f} / {m['summed_window']:.2f} | "
            f"{_ratio(r['summed_window'], m['summed_window'])} | "
            f"{r['sender_plane_frames']} | {max(r['max_queue'])} / {m['max_queue']} | "
            f"{r['marked']} / {m['marked']} |")


def run() -> str:
    t0 = time.monotonic()
    rows = []
    for planes in PLANE_COUNTS:
        params = dict(NIC_PARAMS, num_planes=planes)
        cfg = IncastConfig(senders=1, bytes_per_sender=ONE_WAY_BYTES)
        print(f"[bench] planes: {planes} plane(s), one sender ...", flush=True)
        r = rtl(params, 2, cfg, f"bench_two_nic_p{planes}")
        rows.append(_row(planes, 1, r, model(params, cfg, planes)))
    params = dict(NIC_PARAMS, num_planes=2)
    cfg = replace(IncastConfig(), bytes_per_sender=INCAST_BYTES)
    print("[bench] planes: incast 3-to-1 over 2 planes ...", flush=True)
    r, m = rtl(params, 4, cfg, "system_four_nic_p2"), model(params, cfg, 2)
    rows.append(_row(2, 3, r, m))
    fail_rows = []
    for planes in FAIL_PLANE_COUNTS:
        params = dict(NIC_PARAMS, num_planes=planes)
        runs = []
        for at in FAIL_AT_CYCLES:
            cfg = replace(FAILURE, fail_plane=1, fail_at_cycle=at)
            print(f"[bench] planes: {planes} planes, plane 1 fails at cycle {at:,} ...",
                  flush=True)
            runs.append((rtl(params, 2, cfg, f"bench_two_nic_p{planes}", f"fail{at}"),
                         model(params, cfg, planes)))
        rts = [_worst(r["to_bad"]) for r, _ in runs]
        mts = [_worst(m["to_bad"]) for _, m in runs]
        rgs = [r["goodput_ratio"] for r, _ in runs]
        mgs = [m["goodput_ratio"] for _, m in runs]
        rg, mg = sum(rgs) / len(rgs), sum(mgs) / len(mgs)
        rt, mt = sum(rts) / len(rts), sum(mts) / len(mts)
        fail_rows.append(
            f"| {planes} | {len(runs[0][0]['to_bad'])} | {[round(t) for t in rts]} | "
            f"{[round(t) for t in mts]} | {rt:.0f} / {mt:.0f} = {_ratio(rt, mt)} | "
            f"{_goodputs(rgs)} | {_goodputs(mgs)} | {rg:.3f} / {mg:.3f} = {_ratio(rg, mg)} |")
    base = IncastConfig()
    rtts = [f"{fabric_base_rtt_ns(NIC_PARAMS, p, base.mtu) / 1000:.0f}" for p in PLANE_COUNTS]
    return "\n".join([
        "## Planes and incast (`python -m sim.bench --only planes`)",
        "",
        f"sim/system/incast.py's scenario on RTL NicCores (sim/system/top.py's parameters, "
        f"`num_planes` planes) joined by a switch per plane (sim/system/switch.py), and on "
        f"model NICs with the same planes (the model NIC's TX as NicCore's: one data path "
        f"choosing each packet's EV in turn over every plane, the packet queued at its "
        f"plane's port), through the same driver code. Each NIC port runs at the data "
        f"path's rate / planes ({NIC_PARAMS['data_width']} bits a cycle in all) both "
        f"ways; a spine path is {base.delay_cycles} cycles of delay; the receiver's port "
        f"CE-marks above {base.port_ecn_bytes} B and trims above {base.port_queue_bytes} "
        f"B. UET NSCC on every NIC, its base RTT the fabric's (`fabric_base_rtt_ns`: "
        f"{ONE_PLANE_BASE_RTT_NS / 1000:.0f} us of the NIC's nominal clock with one plane, "
        f"plus a full frame's longer store and forward at the sender's and the "
        f"receiver's port per plane beyond the first: "
        f"{', '.join(rtts)} "
        f"us at {', '.join(map(str, PLANE_COUNTS))} planes). Goodput: payload from the "
        f"first post to the last completion as a fraction of the data path's best after "
        f"headers (MTU {base.mtu}: {base.mtu} of every {base.mtu + DATA_WIRE_OVERHEAD} "
        f"wire bytes). One sender writes {ONE_WAY_BYTES // 1024} KiB; in the incast three "
        f"write {INCAST_BYTES // 1024} KiB each. RTL / model.",
        "",
        "| planes | senders | goodput RTL | goodput model | RTL / model | summed window "
        "(packets) RTL / model | RTL / model | sender 1's frames per plane (RTL) | largest "
        "queue per port (B) RTL / model | CE marks RTL / model |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "The planes do not add bandwidth: they share the NIC's one data path, so the sum "
        "of their line rates is the data path's, and goodput over any number of planes "
        "is a fraction of that sum. A plane's port takes planes times as long to store "
        "and forward a frame, which the base RTT, and with it NSCC's first window (1.5 x "
        "the BDP), must include.",
        "",
        f"**A plane's switch fails** (every frame on it lost, both ways, the links up) "
        f"{', '.join(f'{c:,}' for c in FAIL_AT_CYCLES)} cycles after the first post of a "
        f"one-sender run of {FAILURE.bytes_per_sender // 1024} KiB, one run each "
        f"(retransmit timeout 1.024 us x 2^{FAILURE.timeout}, SACK loss detection at "
        f"{FAILURE.sack_threshold} PSNs, EV events read every {FAILURE.sample_cycles} "
        f"cycles, so each time is late by up to that): cycles from the failure to the last "
        f"of the plane's EVs going ASSUMED_BAD (the sender then leaves the plane), per "
        f"failure time and their mean, RTL and model, and goodput over the whole run, "
        f"per failure time and their mean. Where the failure falls in the spraying "
        f"order and the ACK coalescing "
        f"moves each time by a fifth or more, in the model as in the RTL; the mean over "
        f"the same failure times is what the two are compared on. A frame meets the "
        f"failure as it reaches the switch, its last bit off the sender's port, in the "
        f"RTL's fabric as on the model's core links: a frame still in a MAC's FIFO or "
        f"on its port when the switch fails is lost too. The RTL NICs' MACs are "
        f"wires here (`wire_macs`: each paced at its port's rate, as a MAC is), so a "
        f"frame waits in the NIC, not in a queue behind TX that its sent time and RTT "
        f"sample do not see; unpaced, the data path outruns the ports by Ethernet's "
        f"overhead, a standing queue of the window's frames builds at the uplinks, and "
        f"at 4 planes after the failure it outlasts the 2^{FAILURE.timeout} retransmit "
        f"timeout, which then fires again and again. TX's window holds "
        f"the PSNs not SACKed, so the failed plane's holes, which pin the cumulative PSN, "
        f"do not stop the sender, and the PSNs it sends past them bring the SACK "
        f"evidence that marks the plane's EVs; a timeout blames only the EV of the "
        f"oldest PSN in flight, so one that fires while live EVs have PSNs on their way "
        f"marks none of those (docs/reliability.md).",
        "",
        "| planes | EVs on the failed plane | last to ASSUMED_BAD per failure time, RTL "
        "(cycles) | model | mean RTL / model | goodput per failure time, RTL | model | "
        "goodput RTL / model |",
        "|---|---|---|---|---|---|---|---|",
        *fail_rows,
        "",
        f"Section run time {time.monotonic() - t0:.0f} s.",
        "",
    ])

"""Random two-NIC scenarios for the seeded soak (tests/system/test_soak.py,
``make test-long``), and the checks a scenario run must pass on either
backend (the two RTL NICs or the golden model).

``draw(rng, index)`` draws one scenario table, in the format of the files in
sim/system/scenarios/ (docs/scenarios.md), from a ``random.Random``: the
workload (ring or stream, 1 to 4 QPs per NIC, 1 to 3 rounds, 1 to 3
messages per QP and shard, of 1 byte to 16 KiB each, at most ``MAX_BYTES``
per direction; MTU 256, 512 or 1024), the
fabric (2 to 8 paths, 200 to 1000 ns), the NIC's timer, SACK threshold and
probe period, and the faults: loss, CE marks and trims on every path, at
times reordering, an extra loss on one direction or some paths, and up to
two path failures (a window, a flap or down for good, at most one for good,
each between 5 % and 85 % of the ideal run time, so that every fault event
falls within the run). ``parse`` (sim/system/scenario.py) checks it as it
checks a file.

``check_run(raw, cfg)`` asserts what a run of ``cfg`` must show, and
returns ``demo.analyse(raw)``: every shard byte exact (``verified``, no
error), each direction's payload the workload's, the path events at the
scenario's times (to the ns), and, where the run captured frames, the fabric's counts
per direction equal to the captured frames' fates.
"""

from __future__ import annotations

import random

__all__ = ["draw", "check_run", "describe", "MAX_BYTES"]

MAX_BYTES = 160 * 1024  # per direction and scenario: a few seconds of simulation


def draw(rng: random.Random, index: int = 0) -> dict:
    """A random scenario table (see the module docstring)."""
    qps = rng.randint(1, 4)
    messages = qps * rng.randint(1, 3)
    rounds = rng.randint(1, 3)
    # bytes per message: a packet or less, a few packets, or many; at most
    # MAX_BYTES per direction in all
    size = rng.choice((rng.randint(1, 600), rng.randint(600, 5000), rng.randint(5000, 16384)))
    size = max(1, min(size, MAX_BYTES // (rounds * messages)))
    paths = rng.randint(2, 8)
    faults = {"loss": rng.choice((0.0, 0.001, 0.005, 0.01, 0.02)),
              "ce": rng.choice((0.0, 0.01, 0.05)),
              "trim": rng.choice((0.0, 0.005, 0.01))}
    if rng.random() < 0.3:
        faults.update(reorder_prob=rng.choice((0.01, 0.05)),
                      reorder_ns=float(rng.randint(1000, 5000)))
    if rng.random() < 0.3:
        rate = {"direction": rng.choice(("nic0->nic1", "nic1->nic0")),
                "loss": rng.choice((0.02, 0.05, 0.1))}
        if rng.random() < 0.5:
            rate["paths"] = sorted(rng.sample(range(paths), rng.randint(1, paths - 1)))
        faults["rates"] = [rate]
    down, for_good = [], False
    for _ in range(rng.choice((0, 1, 1, 2))):
        entry = {"path": rng.randrange(paths),
                 "direction": rng.choice(("both", "nic0->nic1", "nic1->nic0"))}
        at = round(rng.uniform(0.05, 0.6), 3)
        kind = rng.choice(("window", "flap", "for good"))
        if kind == "for good" and not for_good:
            for_good = True
            entry["at"] = at
        else:
            entry.update(at=at, up=round(rng.uniform(at + 0.05, 0.85), 3))
            if kind == "flap":
                entry.update(flap_down_us=float(rng.randint(2, 20)),
                             flap_up_us=float(rng.randint(2, 20)))
        down.append(entry)
    if down:
        faults["down"] = down
    return {
        "description": f"soak scenario {index}",
        "seed": rng.getrandbits(32),
        "qps": qps,
        "mtu": rng.choice((256, 512, 1024)),
        "workload": {"kind": rng.choice(("ring", "stream")), "rounds": rounds,
                     "shard_kib": messages * size / 1024, "messages": messages},
        "fabric": {"paths": paths, "delay_ns": float(rng.randint(200, 1000))},
        "nic": {"timeout": rng.randint(7, 10), "sack_threshold": rng.choice((0, 3)),
                "probe_period": rng.choice((2000, 4000, 8000))},
        "faults": faults,
    }


def describe(table: dict) -> str:
    """One line: what the scenario does."""
    w, f = table["workload"], table["faults"]
    size = round(w["shard_kib"] * 1024) // w["messages"]
    parts = [f"{w['kind']} {w['rounds']} rounds x {w['messages']} x {size} B",
             f"{table['qps']} QPs", f"MTU {table['mtu']}", f"{table['fabric']['paths']} paths",
             f"loss {f['loss']}", f"ce {f['ce']}", f"trim {f['trim']}"]
    if f.get("reorder_prob"):
        parts.append(f"reorder {f['reorder_prob']}")
    for r in f.get("rates", []):
        on = f" paths {r['paths']}" if "paths" in r else ""
        parts.append(f"loss {r['loss']} {r['direction']}{on}")
    for d in f.get("down", []):
        kind = "flap" if "flap_down_us" in d else "down" if "up" in d else "down for good"
        parts.append(f"path {d['path']} {d['direction']} {kind} at {d['at']}"
                     + (f"..{d['up']}" if "up" in d else ""))
    return ", ".join(parts)


def check_run(raw: dict, cfg) -> dict:
    """Assert what a run of ``cfg`` must show (see the module docstring);
    returns its summary."""
    from sim.system import demo
    from sim.system.workload import fault_events

    s = demo.analyse(raw)
    side = raw.get("backend", "rtl")
    assert s["verified"] and not s["errors"], (side, s["errors"])
    shards = cfg.rounds * cfg.shard_bytes
    want = [shards, shards if cfg.workload == "ring" else 0]
    assert [d["payload_bytes"] for d in s["directions"]] == want, (side, s["directions"])
    # the path events: the scenario's, in time order; each at its time, or within the
    # next ns on the RTL (the cocotb fabric waits whole ns: sim/system/fabric.py)
    start = s["_series"]["t0"]
    got = [(f["time_ns"] - start, f["path"], f["up"]) for f in s["faults"]]
    want = sorted(((t, p, up) for t, p, up, _d in fault_events(cfg)), key=lambda e: e[0])
    assert [g[1:] for g in got] == [w[1:] for w in want], (side, got, want)
    assert all(-1e-6 < g[0] - w[0] < 1 for g, w in zip(got, want, strict=True)), (side, got, want)
    for d, name in enumerate(("nic0->nic1", "nic1->nic0") if raw["capture"] else ()):
        rows = [r for r in s["fabric"] if r["direction"] == name]
        fates = [c[4] for c in raw["capture"] if c[1] == d]
        assert sum(r["carried"] for r in rows) == sum(f != "dropped" for f in fates), side
        assert sum(r["dropped"] for r in rows) == fates.count("dropped"), side
        assert sum(r["trimmed"] for r in rows) == fates.count("trimmed"), side
    return s

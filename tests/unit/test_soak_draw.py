"""sim/system/soak.py's scenario draws (the seeded soak of tests/system/test_soak.py):
every draw is a scenario that ``parse`` accepts, and the draws cover what the
soak is meant to vary."""

from sim.system.scenario import parse
from sim.system.soak import MAX_BYTES, describe, draw
from tests import seeds


def test_draws_parse_and_cover_the_space():
    seen = set()
    for k in range(300):
        table = draw(seeds.rng(f"soak {k}"), k)
        cfg = parse(table, f"soak{k}")
        assert cfg.rounds * cfg.shard_bytes <= MAX_BYTES and describe(table)
        faults = table["faults"]
        seen |= {("kind", cfg.workload), ("qps", cfg.qps), ("mtu", cfg.mtu),
                 ("paths", cfg.paths)}
        seen |= {("down", "flap" if "flap_down_us" in d else "window" if "up" in d else "good")
                 for d in faults.get("down", [])}
        seen |= {("loss", cfg.loss > 0), ("reorder", cfg.reorder_prob > 0),
                 ("rates", bool(cfg.rates)), ("one packet", cfg.shard_bytes // cfg.messages
                                              <= cfg.mtu)}
    want = {("kind", "ring"), ("kind", "stream"), ("down", "flap"), ("down", "window"),
            ("down", "good"), ("loss", True), ("loss", False), ("reorder", True),
            ("rates", True), ("one packet", True), ("one packet", False)}
    want |= {("qps", q) for q in range(1, 5)} | {("mtu", m) for m in (256, 512, 1024)}
    want |= {("paths", p) for p in range(2, 9)}
    assert want <= seen, want - seen


def test_fewer_paths_than_the_demo_failure_path():
    """A scenario of 2 paths loads: the demo's own failure window (path 3), off
    in a scenario, is not checked against the scenario's paths."""
    cfg = parse({"description": "two paths", "fabric": {"paths": 2}}, "two_paths")
    assert cfg.paths == 2 and not cfg.fail

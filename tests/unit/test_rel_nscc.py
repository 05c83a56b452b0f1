"""NsccUnit (hw/reliability/nscc.py) in Amaranth's simulator, against the golden
model's NSCC (sim/model/cc.py, ``Nscc``) run with the parameters the unit's
configuration stands for (``nscc_params``):

- step by step, from random states: every decision (decrease, quick adapt, the
  clocks, the bytes) is the model's, and the window within ``step_bound``;
- whole trajectories, each side on its own state: the same decisions, and
  windows within 0.1 % of ``max_cwnd`` of each other at every step;

and ``NsccEngine`` (hw/reliability/nscc_engine.py) on four QPs' interleaved
events, against one model per QP."""

import math

import pytest
from amaranth.sim import Simulator

from hw.reliability.nscc import (
    CWND_FRAC,
    DELAY_FRAC,
    NsccKind,
    NsccUnit,
    reciprocal_table,
    step_bound,
)
from hw.reliability.nscc_engine import NsccEngine, packet_divider
from sim.model.cc import Nscc
from sim.nscc_harness import (
    MTU_WIRE,
    T16,
    UNIT_NS,
    config,
    model_of,
    model_step,
    run_unit,
    scenario,
    trajectory,
)
from tests import seeds


class _Unsettled(Nscc):
    """The model's window after the quadrant's action, before quick adapt and the
    clamp: what the unit's quick adapt compares with."""

    def _quick_adapt(self, now):
        pass

    def _clamp(self):
        pass


def random_step(rng, cfg):
    raw = 1 << CWND_FRAC
    lo, hi = cfg["min_cwnd"] * raw, cfg["max_cwnd"] * raw
    now = T16 * 4 + rng.randrange(T16)
    period = cfg["qa_period"]
    s = {
        "cwnd": rng.choice([lo, hi, rng.randrange(lo, hi + 1)]),
        "avg_delay": rng.choice([0, rng.randrange(cfg["target"] * 3 << DELAY_FRAC)]),
        "last_md": (now - rng.choice([0, cfg["base_rtt"] - 1, cfg["base_rtt"],
                                      rng.randrange(3 * cfg["base_rtt"] + 1)])) % T16,
        "qa_start": (now - rng.choice([period - 1, period, rng.randrange(2 * period)])) % T16,
        "qa_bytes": rng.choice([0, rng.randrange(hi // raw), rng.randrange(1 << 24)]),
        "qa_trigger": rng.randrange(2),
    }
    kind = rng.choices(list(NsccKind), weights=[80, 8, 6, 6])[0]
    delay = rng.choice([-rng.randrange(1, 50), 0, cfg["target"] - 1, cfg["target"],
                        rng.randrange(4 * cfg["target"] + 2),
                        cfg["qa_delay"] >> DELAY_FRAC,
                        rng.randrange(T16 - cfg["base_rtt"])])  # up to the largest sample
    ev = {"kind": kind, "now": now,
          "nbytes": rng.choice([0, MTU_WIRE, rng.randrange(1, 1 << 17), rng.randrange(1 << 20)])
          if kind == NsccKind.ACK else rng.randrange(64, MTU_WIRE + 1),
          "ece": rng.randrange(2), "rtt_valid": int(rng.random() < 0.7),
          "rtt": min(T16 - 1, max(0, cfg["base_rtt"] + delay))}
    if kind == NsccKind.ACK and s["qa_trigger"] and rng.random() < 0.5:
        # quick adapt at the edge of its gate
        s["qa_start"] = (now - period) % T16
        s["qa_bytes"] = max(0, int(cfg["qa_gate"] * s["cwnd"] / (1 << 16) / raw)
                            - ev["nbytes"] + rng.randrange(-2, 3))
    return s, ev


@pytest.mark.parametrize("salt", [0, 1, 2, 3, "disabled"])
def test_nscc_steps_match_the_model(salt):
    rng = seeds.rng(f"nscc-steps-{salt}")
    enabled = salt != "disabled"
    cfg, params = config(rng, enabled=enabled)
    steps = [random_step(rng, cfg) for _ in range(300)]
    got = run_unit(cfg, steps)
    seen = set()
    for (s, ev), (new, md, qa) in zip(steps, got, strict=True):
        n = model_of(params, s, ev["now"])
        before = n.cwnd
        counts = (n.md_count, n.qa_count)
        model_step(n, ev, params)
        what = f"state {s}, event {ev}, config {cfg}: unit {new}, model {n.cwnd} B"
        assert md == n.md_count - counts[0], what
        model_qa = n.qa_count - counts[1]
        if qa != model_qa:
            # only at the gate's edge: the windows before it within the bound
            pre = model_of(params, s, ev["now"], cls=_Unsettled)
            model_step(pre, ev, params)
            gate = params.qa_gate * pre.cwnd
            bound = step_bound(10, abs(pre.cwnd - before), ev["nbytes"], pre.cwnd,
                               params.gamma / cfg["target"] if md else 0.0)
            assert abs(pre.qa_bytes - gate) <= params.qa_gate * bound + 1, what
            continue
        seen.add((ev["kind"], md, qa))
        change = abs(n.cwnd - before)
        unit_cwnd = new["cwnd"] / (1 << CWND_FRAC)
        if ev["kind"] == NsccKind.TIMEOUT:  # a halving floors its last bit
            assert abs(unit_cwnd - n.cwnd) <= 2.0 ** -CWND_FRAC, what
        elif change == 0 or ev["kind"] in (NsccKind.TRIM, NsccKind.START):
            assert unit_cwnd == n.cwnd, what  # no rounding on these
        else:
            bound = step_bound(10, change, ev["nbytes"], max(n.cwnd, before),
                               params.gamma / cfg["target"] if md else 0.0)
            assert abs(unit_cwnd - n.cwnd) <= bound, what
        avg = n.avg_delay / UNIT_NS * (1 << DELAY_FRAC)
        assert avg - 1 < new["avg_delay"] <= avg + 1e-6, what
        assert new["last_md"] == round(n.last_md / UNIT_NS) % T16, what
        assert new["qa_start"] == round(n.qa_start / UNIT_NS) % T16, what
        assert new["qa_bytes"] == min(n.qa_bytes, (1 << 24) - 1), what
        dly = (max(0, ev["rtt"] - cfg["base_rtt"]) << DELAY_FRAC if ev["rtt_valid"]
               else s["avg_delay"])
        if dly != cfg["qa_delay"]:  # at the trigger's edge the model's float may round
            assert new["qa_trigger"] == n.qa_trigger, what
    # the draws reach every kind, a decrease and a quick adapt
    assert {k for k, _, _ in seen} == set(NsccKind)
    assert ((NsccKind.ACK, 1, 0) in seen and any(qa for _, _, qa in seen)) == enabled


@pytest.mark.parametrize("salt", range(3))
def test_nscc_trajectory_matches_the_model(salt):
    t = trajectory(seeds.rng(f"nscc-trajectory-{salt}"))
    assert t["same"], f"the decisions part at event {t['first_apart']}"
    assert t["worst"] <= 1e-3 * t["max_cwnd"], t
    print(f"{t['events']} steps, {t['unit_md']} decreases, {t['unit_qa']} quick adapts: the "
          f"windows at most {t['worst']:.2f} B apart ({t['worst'] / t['max_cwnd']:.2e} of "
          "max_cwnd)")
    assert t["unit_md"] and t["unit_qa"]  # the scenario decreases and adapts


def test_reciprocal_table_is_within_its_bound():
    bits = 10
    table = reciprocal_table(bits)
    worst = 0.0
    for i, r in enumerate(table):
        for x in ((1 << bits) + i, (1 << bits) + i + 1):  # the interval's ends
            worst = max(worst, abs(r * x / (1 << (2 * bits + 1)) - 1))
    assert worst <= 2.0 ** -bits


def test_nscc_config_says_what_to_fix():
    with pytest.raises(ValueError, match="ewma must be 2"):
        config(ewma=0.1)
    with pytest.raises(ValueError, match="max_md_jump must be in 0..1"):
        config(max_md_jump=1.5)
    with pytest.raises(ValueError, match="target_delay_ns must be at least one unit"):
        config(target_delay_ns=10.0)
    with pytest.raises(ValueError, match="recip_bits must be 6..14"):
        NsccUnit(recip_bits=16)
    cfg, params = config()
    assert math.isclose(params.eta, 0.5, rel_tol=2 ** -16)
    assert cfg["qa_period"] == cfg["base_rtt"] + cfg["target"]


def test_packet_divider_is_floor_division():
    rng = seeds.rng("nscc-divider")
    for mtu in (64, 1024 + 102, MTU_WIRE, 9000 + 102, (1 << 14) - 1):
        mul, shift = packet_divider(mtu)
        top = (1 << 24) - 1
        values = [0, 1, top, top - 1] + [rng.randrange(1 << 24) for _ in range(2000)]
        values += [k * mtu + d for k in range(1, top // mtu, max(1, top // mtu // 500))
                   for d in (-1, 0, 1)]
        assert all((b * mul) >> shift == b // mtu for b in values), mtu
    with pytest.raises(ValueError, match="mtu_wire must be"):
        packet_divider(20)


def test_nscc_engine_keeps_each_qps_window():
    """Four QPs' interleaved events through ``NsccEngine``: each window after each
    step is the model's (as in the trajectory test), its packets are the bytes //
    mtu within 1..window, the decisions are the model's, and a step's window comes
    ``LATENCY`` cycles after the step is taken."""
    num_qps, window = 4, 64
    cfg, params = config()
    mul, shift = packet_divider(MTU_WIRE)
    rng = seeds.rng("nscc-engine")
    events = []
    for q in range(num_qps):
        events += [dict(ev, qpn=q) for ev in scenario(rng, cfg, steps=250, stretch=50)]
    events.sort(key=lambda ev: ev["now"])  # stable: each QP's START first
    dut = NsccEngine(num_qps, window)
    got, latencies = [], []
    strobes = {"md": 0, "qa": 0}

    async def bench(ctx):
        ctx.set(dut.config, cfg)
        ctx.set(dut.pkt_mul, mul)
        ctx.set(dut.pkt_shift, shift)
        for ev in events:
            for _ in range(rng.choice([0, 0, 1, 3])):  # idle cycles between steps
                await ctx.tick()
            ctx.set(dut.step.payload, {k: ev[k] % T16 if k == "now" else ev[k]
                                       for k in ("qpn", "kind", "now", "nbytes", "ece",
                                                 "rtt_valid", "rtt")})
            ctx.set(dut.step.valid, 1)
            while not ctx.get(dut.step.ready):
                await ctx.tick()
            await ctx.tick()
            ctx.set(dut.step.valid, 0)
            cycles = 1
            while not ctx.get(dut.window.valid):
                for name in strobes:
                    strobes[name] += ctx.get(getattr(dut, name))
                await ctx.tick()
                cycles += 1
            latencies.append(cycles)
            for _ in range(rng.choice([0, 0, 2])):  # the window held, not taken
                await ctx.tick()
            got.append(ctx.get(dut.window.payload))
            ctx.set(dut.window.ready, 1)
            await ctx.tick()
            ctx.set(dut.window.ready, 0)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    models = {q: Nscc(params, MTU_WIRE) for q in range(num_qps)}
    md = qa = 0
    worst = 0.0
    for ev, out in zip(events, got, strict=True):
        n = models[ev["qpn"]]
        counts = (n.md_count, n.qa_count)
        model_step(n, ev, params)
        md, qa = md + n.md_count - counts[0], qa + n.qa_count - counts[1]
        assert out["qpn"] == ev["qpn"]
        worst = max(worst, abs(out["bytes"] - n.cwnd))
        assert out["packets"] == min(window, max(1, out["bytes"] // MTU_WIRE)), out
    assert worst <= 0.001 * params.max_cwnd + 1, worst
    assert (strobes["md"], strobes["qa"]) == (md, qa) and md and qa
    assert set(latencies) == {NsccEngine.LATENCY}

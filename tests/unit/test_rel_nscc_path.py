"""``NsccPath`` (hw/reliability/nscc_path.py): the core's congestion events through
``NsccEngine`` against one golden-model ``Nscc`` per QP, the core's own window while
NSCC is off, and the register values' errors."""

import pytest
from amaranth.sim import Simulator

from hw.reliability.nscc import ACKED_BITS, NsccKind
from hw.reliability.nscc_engine import packet_divider
from hw.reliability.nscc_path import NsccPath, nscc_register_values, nscc_reset_values
from hw.reliability.registers import NSCC_REGISTERS
from sim.model.cc import Nscc
from sim.nscc_harness import MTU_WIRE, T16, config, model_step
from tests import seeds

NUM_QPS, WINDOW = 4, 256  # 256: an ACK of the whole window saturates its bytes (2^20 - 1)


def regs_of(cfg, enabled=1):
    """``NsccRegs``' values for an ``NsccConfig`` ``cfg``, packets of ``MTU_WIRE``."""
    mul, shift = packet_divider(MTU_WIRE)
    flat = {**cfg, "enabled": enabled, "mtu_wire": MTU_WIRE, "pkt_mul": mul, "pkt_shift": shift}
    return {name: {f: flat[f] for f, *_ in fields} for name, (_, fields) in NSCC_REGISTERS.items()}


def events_of(rng, cfg, count):
    """The core's events for ``NUM_QPS`` QPs: each QP's START, then ACKs (with ECN
    above 0.8 x target, trims, no RTT sample at times), timeouts and later STARTs,
    ``now`` in 16-cycle units rising."""
    events, now, queue = [], 0, [0.0] * NUM_QPS
    for q in range(NUM_QPS):
        events.append(dict(qpn=q, kind=NsccKind.START, trim=0, newly=0, ece=0, rtt_valid=0,
                           rtt=0, now=now))
    for _ in range(count):
        now += rng.randrange(0, 4)
        q = rng.randrange(NUM_QPS)
        queue[q] = max(0.0, queue[q] + rng.uniform(-0.4, 0.5) * cfg["target"])
        r = rng.random()
        kind = (NsccKind.TIMEOUT if r < 0.02 else NsccKind.START if r < 0.03 else NsccKind.ACK)
        ack = kind == NsccKind.ACK
        events.append(dict(
            qpn=q, kind=kind, trim=int(ack and rng.random() < 0.05),
            newly=rng.choice([0, 1, 1, 2, 4, WINDOW]) if ack else 0,
            ece=int(ack and queue[q] > 0.8 * cfg["target"]),
            rtt_valid=int(ack and rng.random() < 0.9), rtt=cfg["base_rtt"] + int(queue[q]),
            now=now))
    return events


def model_steps(ev):
    """The engine steps an event stands for (a trim's TRIM step first)."""
    common = {"now": ev["now"], "ece": ev["ece"], "rtt_valid": ev["rtt_valid"], "rtt": ev["rtt"]}
    steps = []
    if ev["trim"]:
        steps.append({**common, "kind": NsccKind.TRIM, "nbytes": MTU_WIRE})
    nbytes = min(ev["newly"] * MTU_WIRE, (1 << ACKED_BITS) - 1)
    steps.append({**common, "kind": ev["kind"], "nbytes": nbytes})
    return steps


def run(events, regs, core_windows=(), rng=None):
    """``events`` on the ``event`` stream and ``core_windows`` (qpn, cwnd) on
    ``core_cwnd`` at once, with random gaps and a random ``ready`` on the output:
    every ``cwnd_update`` taken, as (qpn, cwnd)."""
    dut = NsccPath(NUM_QPS, WINDOW)
    got = []
    done = {"events": False, "core": False}

    async def drive_events(ctx):
        ctx.set(dut.regs, regs)
        await ctx.tick().repeat(2)
        for ev in events:
            for _ in range(rng.choice([0, 0, 1, 5])):
                await ctx.tick()
            ctx.set(dut.event.payload, {**ev, "now": ev["now"] % T16})
            ctx.set(dut.event.valid, 1)
            await ctx.tick().until(dut.event.ready)
            ctx.set(dut.event.valid, 0)
        done["events"] = True

    async def drive_core(ctx):
        await ctx.tick().repeat(2)
        for qpn, cwnd in core_windows:
            ctx.set(dut.core_cwnd.payload, {"qpn": qpn, "cwnd": cwnd})
            ctx.set(dut.core_cwnd.valid, 1)
            await ctx.tick().until(dut.core_cwnd.ready)
            ctx.set(dut.core_cwnd.valid, 0)
        done["core"] = True

    async def sink(ctx):
        idle = 0
        while idle < 200 or not all(done.values()):
            ready = rng.random() < 0.7
            ctx.set(dut.cwnd_update.ready, ready)
            _, _, valid, out = await ctx.tick().sample(dut.cwnd_update.valid,
                                                       dut.cwnd_update.payload)
            if ready and valid:
                got.append((out.qpn, out.cwnd))
                idle = 0
            else:
                idle += 1

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(drive_events)
    sim.add_testbench(drive_core)
    sim.add_testbench(sink, background=True)
    sim.run_until(1e-8 * 400_000)
    assert all(done.values()), "the streams did not drain"
    return got


def test_nscc_windows_are_the_models_per_qp():
    """NSCC on: one window per engine step (two for a trimmed ACK), in the events'
    order, each the model's bytes // MTU within 1..window (the engine's bytes within
    its bound of the model's: a window near a packet boundary may land on either
    side); the core's own windows are dropped."""
    rng = seeds.rng("nscc-path")
    cfg, params = config()
    events = events_of(rng, cfg, 300)
    assert any(ev["newly"] * MTU_WIRE >= 1 << ACKED_BITS for ev in events)  # saturated
    got = run(events, regs_of(cfg), core_windows=[(1, 7), (2, 9)], rng=rng)
    models = {q: Nscc(params, MTU_WIRE) for q in range(NUM_QPS)}
    expect = []
    for ev in events:
        for step in model_steps(ev):
            n = models[ev["qpn"]]
            model_step(n, step, params)
            slack = 0.001 * params.max_cwnd + 1
            low = min(WINDOW, max(1, int((n.cwnd - slack) // MTU_WIRE)))
            high = min(WINDOW, max(1, int((n.cwnd + slack) // MTU_WIRE)))
            expect.append((ev["qpn"], low, high))
    assert len(got) == len(expect), (len(got), len(expect))
    for i, ((qpn, cwnd), (eq, low, high)) in enumerate(zip(got, expect, strict=True)):
        assert qpn == eq and low <= cwnd <= high, (i, qpn, cwnd, eq, low, high)
    # the windows moved: NSCC both cut and grew them
    assert len({c for _, c in got}) > 3


def test_nscc_off_passes_the_core_window_and_drops_events():
    rng = seeds.rng("nscc-path-off")
    cfg, _ = config()
    core = [(rng.randrange(NUM_QPS), rng.randrange(1, WINDOW + 1)) for _ in range(50)]
    got = run(events_of(rng, cfg, 40), regs_of(cfg, enabled=0), core_windows=core, rng=rng)
    assert got == core


def test_register_values():
    """The reset is NSCC's defaults (disabled); values the registers cannot hold
    and unknown parameters are refused by name."""
    reset = nscc_reset_values(125_000_000, 64, 4096, 5000.0)
    assert reset["nscc_ctrl"]["enabled"] == 0
    assert reset["nscc_mtu"]["mtu_wire"] == MTU_WIRE
    assert reset["nscc_max_cwnd"]["max_cwnd"] == 7500  # 1.5 x 5 us x 8 Gb/s / 8
    on = nscc_register_values(clk_freq_hz=125_000_000, mtu_wire=MTU_WIRE, rate_bps=100e9,
                              base_rtt_ns=5000.0, gamma=0.5)
    assert on["nscc_ctrl"]["enabled"] == 1 and on["nscc_gamma"]["gamma"] == 1 << 15
    with pytest.raises(ValueError, match="unknown NSCC parameters.*'gama'"):
        nscc_register_values(clk_freq_hz=125_000_000, mtu_wire=MTU_WIRE, rate_bps=8e9,
                             base_rtt_ns=5000.0, gama=0.5)
    with pytest.raises(ValueError, match="max_cwnd"):
        nscc_register_values(clk_freq_hz=125_000_000, mtu_wire=MTU_WIRE, rate_bps=8e12,
                             base_rtt_ns=40000.0)

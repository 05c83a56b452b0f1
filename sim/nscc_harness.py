"""The gateware's NSCC (hw/reliability/nscc.py) against the golden model's
(sim/model/cc.py, ``Nscc``): the pieces that tests/unit/test_rel_nscc.py and the
NSCC benchmark (sim/bench/nscc.py) share.

- ``config(rng=None, **kw)``: an ``NsccConfig`` and the ``NsccParams`` it stands for
  (NSCC's defaults at a 5 us base RTT, 128-ns time units, varied by ``rng``);
- ``model_of(params, state, now)``: a model ``Nscc`` holding a unit's state;
- ``model_step(n, event, params)``: one event on a model;
- ``run_unit(cfg, steps, feed_back=False)``: events through ``NsccUnit`` in
  Amaranth's simulator;
- ``scenario(rng, cfg, steps, stretch)``: one QP's events over a queue that
  builds and drains, with trims, timeouts and stalls;
- ``trajectory(rng, steps)``: a scenario on the unit and on the model, each on
  its own state: the decisions of both and how far apart the windows came.

Events are dicts of ``NsccUnit``'s step inputs (``kind``, ``now`` in units, beyond
2**16 so that the model's clocks do not wrap, ``nbytes``, ``ece``, ``rtt_valid``,
``rtt``)."""

from __future__ import annotations

from amaranth.sim import Simulator

from hw.reliability.cc_defaults import DATA_WIRE_OVERHEAD
from hw.reliability.nscc import (
    CWND_FRAC,
    DELAY_FRAC,
    NsccKind,
    NsccUnit,
    nscc_config,
    nscc_params,
)
from sim.model.cc import Nscc, NsccParams

__all__ = ["MTU_WIRE", "STATE_FIELDS", "T16", "UNIT_NS", "config", "model_of", "model_step",
           "run_unit", "scenario", "trajectory"]

UNIT_NS = 128.0  # 16 cycles at 125 MHz: the reliability core's RTT unit
MTU_WIRE = 4096 + DATA_WIRE_OVERHEAD  # a full data packet's wire bytes at MTU 4096
T16 = 1 << 16
STATE_FIELDS = ("cwnd", "avg_delay", "last_md", "qa_start", "qa_bytes", "qa_trigger")


def config(rng=None, **kw):
    """A configuration: NSCC's defaults at a 5 us base RTT, varied by ``rng``."""
    p = NsccParams(base_rtt_ns=5000.0, **kw)
    if rng is not None:
        p.eta = rng.choice([0.0, 0.125, 0.5, 1.0, 1.75])
        p.fi = rng.choice([0.25, 1.0, 2.0])
        p.gamma = rng.choice([0.5, 0.8, 1.0])
        p.max_md_jump = rng.choice([0.25, 0.5, 1.0])
        p.qa_gate = rng.choice([0.25, 0.5, 1.0])
        p.qa_threshold = rng.choice([1.0, 4.0])
        p.ewma = rng.choice([0.5, 0.125, 2.0 ** -7])
        p.base_rtt_ns = rng.choice([1000.0, 5000.0, 40000.0])
    p = p.resolved(bdp_bytes=p.base_rtt_ns * 12.5, mtu_wire=MTU_WIRE)
    cfg = nscc_config(p, UNIT_NS, MTU_WIRE)
    return cfg, NsccParams(**nscc_params(cfg, UNIT_NS, MTU_WIRE))


def model_of(params, s, now, cls=Nscc):
    """A model (``cls``, an ``Nscc``) holding unit state ``s`` at time ``now``."""
    def at(t):  # a 16-bit time, as the model's ns before ``now``
        return (now - (now - t) % T16) * UNIT_NS
    n = cls(params, MTU_WIRE)
    n.cwnd = s["cwnd"] / (1 << CWND_FRAC)
    n.avg_delay = s["avg_delay"] / (1 << DELAY_FRAC) * UNIT_NS
    n.last_md, n.qa_start = at(s["last_md"]), at(s["qa_start"])
    n.qa_bytes, n.qa_trigger = s["qa_bytes"], bool(s["qa_trigger"])
    return n


def model_step(n, ev, params):
    """Run event ``ev`` on model ``n``."""
    now = ev["now"] * UNIT_NS
    if ev["kind"] == NsccKind.ACK:
        n.on_ack(now, ev["nbytes"], bool(ev["ece"]),
                 ev["rtt"] * UNIT_NS if ev["rtt_valid"] else None)
    elif ev["kind"] == NsccKind.TRIM:
        n.on_trim(now, ev["nbytes"])
    elif ev["kind"] == NsccKind.TIMEOUT:
        n.on_timeout(now)
    else:
        fresh = Nscc(params, MTU_WIRE)
        fresh.qa_start = now
        fresh.last_md = now - params.base_rtt_ns  # a decrease may come at once
        for name in Nscc.__slots__:
            setattr(n, name, getattr(fresh, name))


def run_unit(cfg, steps, feed_back=False):
    """Each (state, event) of ``steps`` through a ``NsccUnit``: its (new state, md,
    qa). With ``feed_back``, each step starts from the state the one before left
    (the first from its own)."""
    dut = NsccUnit()
    out = []

    async def bench(ctx):
        ctx.set(dut.config, cfg)
        state = None
        for s, ev in steps:
            ctx.set(dut.state, state if feed_back and state is not None else s)
            for name in ("kind", "nbytes", "ece", "rtt_valid", "rtt"):
                ctx.set(getattr(dut, name), ev[name])
            ctx.set(dut.now, ev["now"] % T16)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            await ctx.tick().repeat(NsccUnit.LATENCY - 1)
            assert ctx.get(dut.done)
            state = {k: ctx.get(getattr(dut.new, k)) for k in STATE_FIELDS}
            out.append((state, ctx.get(dut.md), ctx.get(dut.qa)))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return out


def _event(kind, now, nbytes=0, ece=0, rtt_valid=0, rtt=0):
    return {"kind": kind, "now": now, "nbytes": nbytes, "ece": ece, "rtt_valid": rtt_valid,
            "rtt": rtt}


def scenario(rng, cfg, steps=1500, stretch=150):
    """One QP's ACKs over a queue that builds and drains (ECN above 0.8 x target),
    with an occasional trim and timeout; every third stretch of ``stretch`` ACKs is
    a stall behind a queue that does not mark ECN (a standing 5 x target, which
    arms quick adapt, and few bytes per quick adapt period, so that it fires)."""
    now = 0
    events = [_event(NsccKind.START, 0)]
    queue = 0.0
    for i in range(steps):
        slow = i // stretch % 3 == 2
        now += rng.randrange(8, 20) if slow else rng.randrange(1, 6)
        queue = (5.0 * cfg["target"] if slow
                 else max(0.0, queue + rng.uniform(-0.4, 0.5) * cfg["target"]))
        delay = int(queue)
        r = rng.random()
        if r < 0.02:
            events.append(_event(NsccKind.TRIM, now, MTU_WIRE))
        elif r < 0.025:
            events.append(_event(NsccKind.TIMEOUT, now))
        else:
            events.append(_event(
                NsccKind.ACK, now, MTU_WIRE * rng.choice([0, 1] if slow else [0, 1, 1, 2, 4]),
                ece=int(not slow and delay > cfg["target"] * 0.8),
                rtt_valid=int(rng.random() < 0.9), rtt=cfg["base_rtt"] + delay))
    return events


def trajectory(rng, steps=1500) -> dict:
    """``scenario(rng, ...)`` of ``steps`` events with the default configuration, on
    ``NsccUnit`` (fed its own state back) and on the model: the events, the
    decreases and quick adapts of each, whether every step decided alike
    (``same``), and the largest distance of the windows (``worst``, bytes) against
    ``max_cwnd``."""
    cfg, params = config()
    events = scenario(rng, cfg, steps)
    blank = dict.fromkeys(STATE_FIELDS, 0)
    got = run_unit(cfg, [(blank, ev) for ev in events], feed_back=True)
    n = Nscc(params, MTU_WIRE)
    out = {"events": len(events), "unit_md": 0, "unit_qa": 0, "model_md": 0, "model_qa": 0,
           "same": True, "worst": 0.0, "max_cwnd": params.max_cwnd, "first_apart": None}
    for i, (ev, (new, md, qa)) in enumerate(zip(events, got, strict=True)):
        counts = (n.md_count, n.qa_count)
        model_step(n, ev, params)
        step = (n.md_count - counts[0], n.qa_count - counts[1])
        out["unit_md"] += md
        out["unit_qa"] += qa
        out["model_md"] += step[0]
        out["model_qa"] += step[1]
        if (md, qa) != step and out["same"]:
            out["same"], out["first_apart"] = False, (i, ev)
        out["worst"] = max(out["worst"], abs(new["cwnd"] / (1 << CWND_FRAC) - n.cwnd))
    return out

"""CwndUnit (hw/reliability/cwnd.py) in Amaranth's simulator: random window steps,
driven with the reliability core's timing (start, update 3 cycles later, the clamped
window 2 after that), against a Python model of docs/reliability.md's congestion
window written here from the document."""


from amaranth.sim import Simulator

from hw.reliability.core import GlobalParams
from hw.reliability.cwnd import CwndUnit
from tests import seeds

W = 16
ACC_MAX = (1 << 24) - 1


def clamp(window, p):
    low = p["cwnd_min"] or 1
    high = min(p["cwnd_max"], W)
    return low if window < low else high if window > high else window


def model_step(p, q):
    """One window step: (high, new accumulator, decrease starts, decrease ends, new
    window) for parameters ``p`` and the QP's values ``q``."""
    rtt = q["rtt"] % (1 << 16)
    # the sample less the ACK's service time against the target
    high = rtt >= p["target_rtt"] + q["svc"] if q["rtt_valid"] else bool(q["delay_high"])
    ai = p["cwnd_ai"] if high else p["cwnd_ai_fast"]
    base = max(q["cwnd"] - p["cwnd_trim_dec"], 0) if q["nak_cut"] else q["cwnd"]
    past = (q["una"] - q["md_recover"]) % (1 << 24)
    recovered = 0 < past < (1 << 23)  # una is past md_recover
    window, acc, start, end = base, q["cwnd_acc"], False, False
    if q["ece"]:
        if high and (not q["md_active"] or recovered):
            window = base - max(1, base >> p["cwnd_md_shift"])
            start = True
    else:
        end = bool(q["md_active"]) and recovered
        if q["newly"]:
            total = q["cwnd_acc"] + q["newly"] * ai
            if total >= base * 256:
                window, acc = base + 1, total - base * 256
            else:
                acc = min(total, ACC_MAX)
    return high, acc, start, end, clamp(window, p)


def random_case(rng):
    p = {"cwnd_min": rng.randrange(0, 5), "cwnd_max": rng.choice([4, 12, 16, 40]),
         "cwnd_init": rng.randrange(0, 40), "cwnd_ai": rng.choice([0, 1, 256, 4000, 0xFFFF]),
         "cwnd_ai_fast": rng.choice([1, 1024, 30000]), "cwnd_md_shift": rng.randrange(16),
         "cwnd_trim_dec": rng.randrange(0, 6), "target_rtt": rng.randrange(0, 40),
         "ev_loss_threshold": 0}
    cwnd = rng.randrange(0, W + 4)
    near = cwnd * 256 + rng.randrange(-3000, 3000)
    q = {"cwnd": cwnd,
         "cwnd_acc": rng.choice([0, rng.randrange(1 << 20), max(0, near),
                                 ACC_MAX - rng.randrange(1 << 21, 1 << 22)]),
         "md_active": rng.randrange(2),
         "md_recover": rng.randrange(1 << 24),
         "una": rng.randrange(1 << 24), "delay_high": rng.randrange(2),
         "newly": rng.randrange(0, W + 1), "rtt_valid": rng.randrange(2),
         "rtt": rng.randrange(0, 60), "nak_cut": rng.randrange(2), "ece": rng.randrange(2),
         "svc": rng.choice([0, 0, rng.randrange(0, 30), rng.randrange(50, 1 << 16)])}
    if rng.random() < 0.3:  # una just past, at or just behind md_recover
        q["una"] = (q["md_recover"] + rng.randrange(-2, 3)) % (1 << 24)
    return p, q


def test_cwnd_steps_match_model():
    dut = CwndUnit(window=W, layout=GlobalParams)
    rng = seeds.rng(5)
    cases = [random_case(rng) for _ in range(400)]
    results = []

    async def bench(ctx):
        now_ts = 0x1234
        for p, q in cases:
            ctx.set(dut.params, p)
            for name in ("cwnd", "cwnd_acc", "md_active", "md_recover", "una", "delay_high",
                         "newly", "rtt_valid", "nak_cut", "ece", "svc"):
                ctx.set(getattr(dut, name), q[name])
            now_ts = (now_ts + rng.randrange(1 << 16)) % (1 << 16)
            ctx.set(dut.now_ts, now_ts)
            ctx.set(dut.rtt_ts, (now_ts - q["rtt"]) % (1 << 16))
            await ctx.tick().repeat(2)  # the RTT is measured 2 cycles before start
            ctx.set(dut.start, 1)
            high = ctx.get(dut.high)
            assert ctx.get(dut.rtt) == q["rtt"]  # the sample before svc is taken off
            await ctx.tick()
            ctx.set(dut.start, 0)
            ctx.set(dut.now_ts, rng.randrange(1 << 16))  # read 2 cycles before start only
            await ctx.tick().repeat(2)
            ctx.set(dut.update, 1)
            step = (high, ctx.get(dut.new_acc), ctx.get(dut.md_start), ctx.get(dut.md_end))
            await ctx.tick()
            ctx.set(dut.update, 0)
            await ctx.tick()
            results.append((*step, ctx.get(dut.new_cwnd)))
            # an RTS entry: cwnd_init, clamped, 2 cycles after init
            ctx.set(dut.init, 1)
            await ctx.tick()
            ctx.set(dut.init, 0)
            await ctx.tick()
            assert ctx.get(dut.new_cwnd) == clamp(p["cwnd_init"], p)
            assert ctx.get(dut.cwnd_floor) == (p["cwnd_min"] or 1)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    want = [model_step(p, q) for p, q in cases]
    got = [(bool(h), a, bool(s), bool(e), c) for h, a, s, e, c in results]
    assert got == want
    # the cases reach a decrease and an increase
    kinds = {(s, c > clamp(q["cwnd"], p))
             for (_h, _a, s, _e, c), (p, q) in zip(want, cases, strict=True)}
    assert (True, False) in kinds and (False, True) in kinds

"""SackAlign (hw/reliability/sack_align.py) in Amaranth's simulator: random ACKs
(cumulative PSN behind, at or ahead of una, SACK bases below, in and past the window,
PSNs across the 24-bit wrap), driven with the reliability core's timing, against the
definition: bit i of the result is the bitmap's bit for PSN una + i, and the NAK's
PSN is in flight when it is less than ``infl`` PSNs past the new una."""


import pytest
from amaranth.sim import Simulator

from hw.reliability.sack_align import SackAlign
from tests import seeds

M = 1 << 24


def model(window, sack_bits, una_new, base, bitmap, nak_psn, infl):
    sacked = 0
    for i in range(window):
        j = (una_new + i - base) % M  # the bitmap's bit for PSN una + i
        if j < sack_bits and bitmap >> j & 1:
            sacked |= 1 << i
    d = (nak_psn - una_new) % M
    return sacked, int(d < infl), d % window


@pytest.mark.parametrize("window, sack_bits", [(2, 32), (16, 32), (64, 64), (32, 128)])
def test_sack_align_matches_definition(window, sack_bits):
    dut = SackAlign(window=window, sack_bits=sack_bits)
    rng = seeds.rng(window * 1000 + sack_bits)
    cases = []
    for _ in range(300):
        una = rng.choice([rng.randrange(M), M - rng.randrange(1, 40), rng.randrange(40)])
        delta = rng.randrange(-6, window + 4)  # cum_psn + 1 - una
        cum_next = (una + delta) % M
        behind = delta < 0
        una_new = una if behind else cum_next
        base = (una_new + rng.choice([rng.randrange(-sack_bits - 4, window + 4),
                                      rng.randrange(M)])) % M
        bitmap = rng.getrandbits(sack_bits)
        infl = rng.randrange(window + 1)
        nak_psn = (una_new + rng.randrange(-4, window + 4)) % M
        cases.append((una, cum_next, behind, una_new, base, bitmap, nak_psn, infl))
    got = []

    async def bench(ctx):
        for una, cum_next, behind, una_new, base, bitmap, nak_psn, infl in cases:
            for name, value in (("cum_next", cum_next), ("behind", behind),
                                ("sack_base", base), ("bitmap", bitmap), ("nak_psn", nak_psn),
                                ("una", una), ("infl", rng.randrange(window + 1))):
                ctx.set(getattr(dut, name), value)
            await ctx.tick().repeat(2)  # the una before the ACK, 2 cycles before capture
            ctx.set(dut.una, una_new)
            ctx.set(dut.infl, infl)
            ctx.set(dut.capture, 1)
            await ctx.tick()
            ctx.set(dut.capture, 0)
            ctx.set(dut.una, rng.randrange(M))  # the outputs hold after capture
            got.append((ctx.get(dut.sacked), ctx.get(dut.nak_in), ctx.get(dut.nak_off)))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    want = [model(window, sack_bits, un, b, bm, n, i) for _u, _c, _b, un, b, bm, n, i in cases]
    assert got == want
    # enough bitmaps that overlap and NAKs in flight (a 2-PSN window has few of them:
    # about 30 in 300, 14 the fewest over 5,000 seeds)
    assert sum(1 for s, _, _ in want if s) > 50
    assert sum(n for _, n, _ in want) > min(50, 5 * window)

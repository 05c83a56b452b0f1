"""hw/tx/seq_states.py ``WindowCheck``: ``over`` is inflight >= min(MPR x 128,
depth, max_span) or unsacked (in flight, not SACKed: at most inflight) >=
cwnd, with max_span the depth or less (not a power of two), for
PSNs in flight on both sides of the depth and limits above, at and below it
(0 included); ``full`` is ``over_r`` but for a retransmit;
``clear_r`` is ``clear`` of the cycle before."""


import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from hw.protocol import PSN_BITS
from hw.tx.qp_settings import MPR_UNIT
from hw.tx.seq_states import WindowCheck
from tests import seeds


@pytest.mark.parametrize("depth_bits,max_span", [(4, None), (8, None), (8, 100), (4, 16)])
def test_window_check(depth_bits, max_span):
    depth, nq = 1 << depth_bits, 3
    span = depth if max_span is None else max_span
    m = Module()
    retx = Signal()
    mpr = Signal(16)
    cwnd = Signal(32)
    w = WindowCheck(m, nq, depth_bits, retx, mpr * MPR_UNIT, cwnd, max_span)
    rng = seeds.rng(depth_bits)

    def pick(limit):
        return rng.choice([0, 1, limit - 1, limit, limit + 1, rng.randrange(4 * limit)])

    async def bench(ctx):
        prev_clear = 0
        for _ in range(2000):
            inflight = rng.choice([pick(depth), pick(span)])
            mpr_v = rng.choice([0, 1, rng.randrange(4), depth // MPR_UNIT, rng.randrange(1 << 16)])
            cwnd_v = pick(depth)
            unsacked = rng.choice([inflight, max(0, inflight - 1), rng.randrange(inflight + 1)])
            ctx.set(w.inflight_r, inflight % (1 << PSN_BITS))
            ctx.set(w.unsacked_r, unsacked % (1 << PSN_BITS))
            ctx.set(mpr, mpr_v)
            ctx.set(cwnd, cwnd_v)
            over_r, retx_v, clear = rng.getrandbits(1), rng.getrandbits(1), rng.getrandbits(nq)
            ctx.set(w.over_r, over_r)
            ctx.set(retx, retx_v)
            ctx.set(w.clear, clear)
            over = inflight >= min(mpr_v * MPR_UNIT, depth, span) or unsacked >= cwnd_v
            assert ctx.get(w.over) == over, (inflight, unsacked, mpr_v, cwnd_v)
            assert ctx.get(w.full) == (over_r & ~retx_v & 1)
            assert ctx.get(w.clear_r) == prev_clear
            await ctx.tick()
            prev_clear = clear

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()

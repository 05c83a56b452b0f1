"""``hw.bits.lowest_set``, as expressions and as named signals (given a module),
against Python over every input of small widths, in Amaranth's simulator."""

import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from hw.bits import lowest_set


@pytest.mark.parametrize("width", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("named", [False, True])
def test_lowest_set_every_input(width, named):
    m = Module()
    value = Signal(width)
    dummy = Signal()
    m.d.sync += dummy.eq(~dummy)  # a clock domain for the simulator
    any_set, index = lowest_set(value, m=m if named else None, name="t")
    any_sig, index_sig = Signal(), Signal(len(index))
    m.d.comb += [any_sig.eq(any_set), index_sig.eq(index)]

    async def bench(ctx):
        for v in range(1 << width):
            ctx.set(value, v)
            assert ctx.get(any_sig) == (v != 0), v
            if v:
                assert ctx.get(index_sig) == (v & -v).bit_length() - 1, v

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()

"""``EvGenerator`` (hw/nic/ev_gen.py) against the golden model's GENERATED profile
(``sim.model.ev.generated_evs``), in Amaranth's simulator: the same EVs in the
same order for profiles hypothesis draws, the refusals, a profile with too few
distinct EVs, and a sink that stalls."""

import pytest
from amaranth.sim import Simulator
from hypothesis import given, settings
from hypothesis import strategies as st

from hw.nic.ev_gen import EvGenerator
from sim.model.ev import generated_evs
from tests import seeds

pytestmark = pytest.mark.usefixtures("invariant_checks")

MAX_COUNT = 16


def run(runs, *, stall=0.0, max_count=MAX_COUNT):
    """Each of ``runs`` (parameter dicts) through one generator, in turn: a list
    of (values emitted, error, found) per run."""
    dut = EvGenerator(max_count)
    rng = seeds.rng(7)
    out = []

    async def bench(ctx):
        for params in runs:
            values = []
            for k, v in params.items():
                ctx.set(getattr(dut.start.payload, k), v)
            ctx.set(dut.start.valid, 1)
            await ctx.tick().until(dut.start.ready)
            ctx.set(dut.start.valid, 0)
            await ctx.tick()
            for _ in range(1 << 22):
                ready = rng.random() >= stall
                ctx.set(dut.ev.ready, ready)
                if ready and ctx.get(dut.ev.valid):
                    assert ctx.get(dut.ev.payload.index) == len(values)
                    values.append(ctx.get(dut.ev.payload.value))
                await ctx.tick()
                if not ctx.get(dut.busy):
                    break
            out.append((values, ctx.get(dut.error), ctx.get(dut.found)))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return out


def model(width, init, min_ev, max_ev, mask, count):
    try:
        return [v for v, _ in generated_evs(width=width, init=init, min_ev=min_ev,
                                            max_ev=max_ev, mask=mask, count=count)], 0
    except ValueError:
        return None, 1


@st.composite
def profiles(draw):
    width = draw(st.integers(1, 8))
    top = (1 << width) - 1
    lo = draw(st.integers(0, top))
    hi = draw(st.integers(lo, top))
    return dict(width=width, init=draw(st.integers(0, 0xFFFF)), min=lo, max=hi,
                mask=draw(st.sampled_from((top, draw(st.integers(0, 0xFFFF))))),
                count=draw(st.integers(1, MAX_COUNT)))


@settings(max_examples=40, deadline=None)
@given(st.lists(profiles(), min_size=1, max_size=3))
def test_matches_the_golden_model(runs):
    for params, (values, error, found) in zip(runs, run(runs), strict=True):
        want, want_error = model(params["width"], params["init"], params["min"], params["max"],
                                 params["mask"], params["count"])
        assert error == want_error, (params, values)
        if want is not None:
            assert values == want and found == params["count"], params
        else:  # too few distinct EVs: the ones there are, then the error
            assert len(set(values)) == len(values) == found < params["count"], params


def test_sixteen_bit_profiles_and_a_stalling_sink():
    """The API's kind of profile: 16-bit EVs, a window of the space, and the
    whole space (AUTO: GENERATED over all of it)."""
    runs = [dict(width=16, init=0xC000, min=0xC000, max=0xFFFF, mask=0xFFFF, count=16),
            dict(width=16, init=7, min=0, max=0xFFFF, mask=0xFFFF, count=16),
            dict(width=16, init=0x1234, min=0x1000, max=0x10FF, mask=0x00F0, count=16)]
    for params, (values, error, found) in zip(runs, run(runs, stall=0.4), strict=True):
        want, _ = model(16, params["init"], params["min"], params["max"], params["mask"],
                        params["count"])
        assert (values, error, found) == (want, 0, 16), params


def test_refusals():
    """Out-of-range parameters: refused at once, nothing emitted."""
    good = dict(width=4, init=0, min=0, max=15, mask=15, count=4)
    bad = [dict(good, width=0), dict(good, min=9, max=8), dict(good, max=16),
           dict(good, count=0), dict(good, count=MAX_COUNT + 1)]
    results = run([*bad, good])
    assert [r[1:] for r in results[:-1]] == [(1, 0)] * len(bad)
    assert all(r[0] == [] for r in results[:-1])
    assert results[-1] == ([0, 1, 2, 3], 0, 4)


def test_too_few_distinct():
    """A 2-value span asked for 3 EVs: both found, then the error."""
    (values, error, found), = run([dict(width=3, init=0, min=4, max=5, mask=7, count=3)])
    assert (sorted(values), error, found) == ([4, 5], 1, 2)
    assert model(3, 0, 4, 5, 7, 3) == (None, 1)


def test_bad_max_count():
    for bad in (0, -1, 1.5, (1 << 16) + 1):
        with pytest.raises(ValueError, match="max_count must be in 1..65536"):
            EvGenerator(bad)

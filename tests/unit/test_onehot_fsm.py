"""hw.pipeline.OneHotFSM: ``next`` refuses, at elaboration, two transitions of
one state that can fire in the same cycle and accepts exclusive ones (If/Elif/
Else branches, Switch cases, nested); a checked machine runs cycle for cycle
as the same machine written with ``m.FSM``; ``block_invariants`` makes the
simulator fail a machine whose vector leaves one-hot; the implicit state;
``OneOf`` (exclusive ``when`` blocks, the promise checked in simulation) and
``track`` (``entering``/``leaving``/``copy`` of a state); no unchecked spelling
(``state``/``goto``) is left."""


import pytest
from amaranth.hdl import Fragment, Module, Signal
from amaranth.sim import Simulator

from hw.formal import block_invariants
from hw.pipeline import OneHotFSM, TransitionConflict
from tests import seeds

STATES = ("A", "B", "C", "D")


def _machine(body, implicit=None):
    """A module with a OneHotFSM over STATES and inputs ``x`` (2 bits) and
    ``y``; ``body(m, fsm, x, y)`` writes its states."""
    m = Module()
    m._MustUse__silence = True  # the conflict tests raise before it is elaborated
    x, y = Signal(2, name="x"), Signal(name="y")
    fsm = OneHotFSM(m, STATES, "A", implicit=implicit)
    body(m, fsm, x, y)
    return m, fsm, x, y


def _elaborate(body):
    m, *_ = _machine(body)
    Fragment.get(m, None)


def test_sibling_ifs_conflict():
    def body(m, fsm, x, y):
        with fsm.State("A"):
            with m.If(x[0]):
                fsm.next = "B"
            with m.If(x[1]):  # a second If, not an Elif: both can fire
                fsm.next = "C"

    with pytest.raises(TransitionConflict, match=r"state A goes to B .* and to C"):
        _elaborate(body)


def test_enclosing_transition_conflicts():
    def body(m, fsm, x, y):
        with fsm.State("A"):
            fsm.next = "B"  # m.FSM would let the inner one win; OneHotFSM would set both
            with m.If(y):
                fsm.next = "C"

    with pytest.raises(TransitionConflict):
        _elaborate(body)


def test_stay_inside_a_transition_conflicts():
    def body(m, fsm, x, y):
        with fsm.State("A"):
            with m.If(x[0]):
                fsm.next = "B"
                with m.If(y):
                    fsm.next = "A"  # a stay that would not happen

    with pytest.raises(TransitionConflict):
        _elaborate(body)


def test_two_blocks_of_one_state_conflict():
    def body(m, fsm, x, y):
        with fsm.State("A"):
            with m.If(x[0]):
                fsm.next = "B"
        with fsm.State("A"):
            with m.If(x[1]):
                fsm.next = "C"

    with pytest.raises(TransitionConflict):
        _elaborate(body)


def test_switch_cases_and_nested_chains_are_exclusive():
    def body(m, fsm, x, y):
        with fsm.State("A"):
            with m.If(y):
                with m.Switch(x):
                    with m.Case(0):
                        fsm.next = "B"
                    with m.Case(1, 2):
                        fsm.next = "C"
                    with m.Default():
                        fsm.next = "D"
            with m.Else():
                fsm.next = "A"
        with fsm.State("B"):
            fsm.next = "C"
        with fsm.State("C"):
            with m.If(x[0]):
                fsm.next = "D"
            with m.Elif(x[1]):
                fsm.next = "A"
        with fsm.State("D"):
            with m.If(y):
                fsm.next = "A"
            # the same target twice leaves one bit set: not a conflict
            with m.If(x == 3):
                fsm.next = "A"

    _elaborate(body)


def test_next_outside_a_state_and_unknown_state():
    def outside(m, fsm, x, y):
        fsm.next = "B"

    with pytest.raises(SyntaxError, match="outside a State block"):
        _elaborate(outside)

    def unknown(m, fsm, x, y):
        with fsm.State("A"):
            fsm.next = "E"

    with pytest.raises(ValueError, match="no state 'E'"):
        _elaborate(unknown)


def _both(m, x, y, goto, state):
    """The same machine's states, for OneHotFSM (goto = fsm.next) and m.FSM."""
    with state("A"):
        with m.If(x == 1):
            goto("B")
        with m.Elif(x == 2):
            goto("C")
    with state("B"):
        with m.Switch(x):
            with m.Case(0):
                goto("A")
            with m.Case(3):
                goto("D")
    with state("C"):
        with m.If(y):
            goto("D")
        with m.Else():
            goto("B")
    with state("D"):
        with m.If(y & x[0]):
            goto("A")


@pytest.mark.parametrize("implicit", [None, "A"])
@pytest.mark.parametrize("sop", [False, True])
def test_matches_m_fsm_cycle_for_cycle(implicit, sop):
    m = Module()
    x, y = Signal(2), Signal()
    with block_invariants():
        fsm = OneHotFSM(m, STATES, "A", implicit=implicit, sum_of_products=sop)

        def goto(name):
            fsm.next = name

        _both(m, x, y, goto, fsm.State)
    ref = Module()
    with ref.FSM(init="A") as ref_fsm:
        def ref_goto(name):
            ref.next = name

        _both(ref, x, y, ref_goto, ref.State)
    top = Module()
    top.submodules.dut, top.submodules.ref = m, ref
    rng = seeds.rng(28)
    seen = set()

    async def bench(ctx):
        for _ in range(2000):
            ctx.set(x, rng.randrange(4))
            ctx.set(y, rng.randrange(2))
            for name in STATES:
                got, want = ctx.get(fsm.ongoing(name)), ctx.get(ref_fsm.ongoing(name))
                assert got == want, name
                if want:
                    seen.add(name)
            await ctx.tick()

    with block_invariants():
        sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen == set(STATES)
    if implicit:
        assert "A" not in fsm.st.shape().members  # no flip-flop for the implicit state


def _one_of_body(m, fsm, x, y):
    # x[0] and x[1] promised exclusive: sibling ``when`` blocks, no priority
    with fsm.State("A"):
        with fsm.OneOf() as when:
            with when(x[0]):
                fsm.next = "B"
            with when(x[1]):
                fsm.next = "C"
    with fsm.State("B"):
        fsm.next = "A"
    with fsm.State("C"):
        fsm.next = "A"


def _broken_one_of(m, fsm, x, y):
    # _one_of_body with its OneOf's own assertion left out: when its promise is
    # broken (x == 3 fires both transitions) the vector's assertion sees it
    with block_invariants(False):
        _one_of_body(m, fsm, x, y)


@pytest.mark.parametrize("double", [False, True])
@pytest.mark.parametrize("body, message", [
    (_broken_one_of, "not one-hot"),
    # a OneOf's broken promise: its own assertion (before the vector's)
    (_one_of_body, "two conditions of one OneOf hold"),
])
def test_one_hot_assertion_fails_when_two_bits_set(double, body, message):
    with block_invariants():
        m, fsm, x, y = _machine(body)
        sim = Simulator(m)
    sim.add_clock(1e-8)

    async def bench(ctx):
        for k in range(20):
            ctx.set(x, 3 if double and k == 10 else k % 3)
            await ctx.tick()

    sim.add_testbench(bench)
    if double:
        with pytest.raises(AssertionError, match=message):
            sim.run()
    else:
        sim.run()


def test_no_assertion_outside_the_context():
    with block_invariants(False):  # as a netlist is built: no Assert
        m, fsm, x, y = _machine(_broken_one_of)
        sim = Simulator(m)
    sim.add_clock(1e-8)

    async def bench(ctx):
        ctx.set(x, 3)
        await ctx.tick().repeat(3)
        assert ctx.get(fsm.st.B) and ctx.get(fsm.st.C)  # the bug, unseen

    sim.add_testbench(bench)
    sim.run()


def test_one_of_whens_are_exclusive_a_plain_if_beside_them_is_not():
    _elaborate(_one_of_body)

    def plain_beside(m, fsm, x, y):
        with fsm.State("A"):
            with fsm.OneOf() as when:
                with when(x[0]):
                    fsm.next = "B"
                with m.If(x[1]):  # not a when: may fire with the when above
                    fsm.next = "C"

    with pytest.raises(TransitionConflict):
        _elaborate(plain_beside)

    def two_one_ofs(m, fsm, x, y):
        with fsm.State("A"):
            with fsm.OneOf() as when:
                with when(x[0]):
                    fsm.next = "B"
            with fsm.OneOf() as when:  # another promise: not exclusive with the first
                with when(x[1]):
                    fsm.next = "C"

    with pytest.raises(TransitionConflict):
        _elaborate(two_one_ofs)

    def outside(m, fsm, x, y):
        with fsm.OneOf():
            pass

    with pytest.raises(SyntaxError, match="OneOf outside a State block"):
        _elaborate(outside)


def test_track_entering_leaving_and_copies():
    m = Module()
    x, y = Signal(2), Signal()
    fsm = OneHotFSM(m, STATES, "A", track=("A", "C"))

    def goto(name):
        fsm.next = name

    _both(m, x, y, goto, fsm.State)
    copies = {n: fsm.copy(n, "t") for n in ("A", "C")}
    assert copies["A"].name == "st_A_t" and copies["A"].init == 1 and copies["C"].init == 0
    with pytest.raises(ValueError, match="not tracked"):
        fsm.entering("B")
    other = Module()
    other._MustUse__silence = True  # refused before it is elaborated
    with pytest.raises(ValueError, match="track 'E'"):
        OneHotFSM(other, STATES, "A", name="other", track=("E",))
    rng = seeds.rng(7)
    seen = set()

    async def bench(ctx):
        was = {n: ctx.get(fsm.ongoing(n)) for n in ("A", "C")}
        for _ in range(1000):
            ctx.set(x, rng.randrange(4))
            ctx.set(y, rng.randrange(2))
            flags = {n: (ctx.get(fsm.entering(n)), ctx.get(fsm.leaving(n))) for n in was}
            for n in was:
                assert ctx.get(copies[n]) == was[n], n  # the copy follows the state
            await ctx.tick()
            for n in was:
                now = ctx.get(fsm.ongoing(n))
                # entering/leaving were 1 exactly in the cycle whose transition
                # changed the state's bit
                assert flags[n] == (int(now and not was[n]), int(was[n] and not now)), n
                if now != was[n]:
                    seen.add((n, now))
                was[n] = now

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen == {("A", 0), ("A", 1), ("C", 0), ("C", 1)}


def test_only_the_checked_spelling():
    # every transition goes through ``next`` (checked): no unchecked spelling
    assert not hasattr(OneHotFSM, "state") and not hasattr(OneHotFSM, "goto")

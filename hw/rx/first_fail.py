"""Drop reasons by priority: one strobe per check, the first that fails."""

from amaranth.hdl import Cat, Signal

__all__ = ["first_failing"]


def first_failing(m, tests, prefix="first"):
    """``tests``: ``(name, failing)`` pairs in priority order. Returns ``{name:
    Signal}``, each 1 when its check fails and no earlier one does (at most one
    is set: the drop reason to count). Each strobe is built flat, as its test
    AND NOT every earlier test (two LUT levels for about ten tests), not as an
    If/Elif chain, which synthesis builds as a row of LUTs, each outcome's
    feeding the next one's. Combinational: the caller registers the tests."""
    first = {}
    for k, (name, test) in enumerate(tests):
        first[name] = Signal(name=f"{prefix}_{name}")
        m.d.comb += first[name].eq(test & ~Cat(*(t for _, t in tests[:k])).any())
    return first

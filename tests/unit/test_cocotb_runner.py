"""sim/cocotb_runner.py: a component whose simulator build is reused is never
converted, and ``_reused`` keeps Amaranth from warning ``UnusedElaboratable``
for it and for the elaboratables its constructor made."""

import gc
import warnings

import pytest
from amaranth.hdl import Elaboratable, Module, UnusedElaboratable

from sim.cocotb_runner import _reused


class _Leaf(Elaboratable):
    def elaborate(self, platform):
        return Module()


class _Top(Elaboratable):
    def __init__(self):
        self.leaf = _Leaf()
        self.inner = _Mid()
        self.count = 3  # not an elaboratable: left alone

    def elaborate(self, platform):
        return Module()


class _Mid(Elaboratable):
    def __init__(self):
        self.leaf = _Leaf()
        self.back = None

    def elaborate(self, platform):
        return Module()


def _unused_warnings(mark: bool) -> list:
    # Amaranth keeps the warning silent until something is elaborated in the
    # process (a bench or a fresh build does that before a reused build)
    silent = UnusedElaboratable._MustUse__silence
    UnusedElaboratable._MustUse__silence = False
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UnusedElaboratable)
            top = _Top()
            top.inner.back = top  # a cycle, as a component and its parts may make
            if mark:
                _reused(top)
            del top
            gc.collect()
    finally:
        UnusedElaboratable._MustUse__silence = silent
    # this test's components only: the collection may also free another
    # test's unused ones (in the same worker process)
    return [w for w in caught if issubclass(w.category, UnusedElaboratable)
            and __name__ in str(w.message)]


@pytest.mark.parametrize("mark, warned", [(False, 4), (True, 0)])
def test_reused_component_does_not_warn(mark, warned):
    assert len(_unused_warnings(mark)) == warned

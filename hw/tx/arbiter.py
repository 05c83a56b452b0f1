"""Round-robin choice among request bits, used for QPs and for EVs."""

from amaranth.hdl import Const, Module, Mux, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..bits import lowest_set

__all__ = ["round_robin", "RoundRobin"]


def round_robin(m, vec, last):
    """(any, index) of the first set bit of ``vec`` after position ``last``,
    wrapping around: the bits above ``last`` win, else the lowest bit."""
    n = len(vec)
    requests = Signal(n)
    above = Signal(n)
    m.d.comb += [requests.eq(vec), above.eq((Const((1 << n) - 1, n) << (last + 1))[:n])]
    hi_any, hi_index = lowest_set(requests & above, m=m, name="rr_hi")
    lo_any, lo_index = lowest_set(requests, m=m, name="rr_lo")
    return lo_any, Mux(hi_any, hi_index, lo_index)


class RoundRobin(wiring.Component):
    """Work-conserving round-robin arbiter.

    ``requests`` (n bits) in, ``grant`` / ``valid`` out, combinational.
    ``next`` strobes that ``grant`` was taken: the grant after it starts
    searching above it. Latency 0 cycles; one grant per cycle.
    """

    def __init__(self, n: int):
        self.n = n
        width = max(1, (n - 1).bit_length())
        super().__init__(
            {
                "requests": In(n),
                "next": In(1),
                "grant": Out(unsigned(width)),
                "valid": Out(1),
            }
        )

    def elaborate(self, platform):
        m = Module()
        last = Signal.like(self.grant, init=self.n - 1)
        valid, grant = round_robin(m, self.requests, last)
        m.d.comb += [self.valid.eq(valid), self.grant.eq(grant)]
        with m.If(self.next & valid):
            m.d.sync += last.eq(grant)
        return m

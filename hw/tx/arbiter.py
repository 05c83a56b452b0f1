"""Round-robin choice among request bits, used for QPs and for EVs."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["lowest_set", "round_robin", "RoundRobin"]


def lowest_set(m, vec):
    """(any, index) of the lowest set bit of ``vec``: an isolate-lowest-bit
    (one carry chain) and an OR tree per index bit, not a priority chain.
    The one-hot vector is a named signal: slicing the expression itself bit
    by bit would copy it once per bit (n^2 cells)."""
    n = len(vec)
    width = max(1, (n - 1).bit_length())
    onehot = Signal(n)
    m.d.comb += onehot.eq(vec & (~vec + 1)[:n])
    index = Cat(
        *[
            Cat(*[onehot[i] for i in range(n) if (i >> b) & 1] or [Const(0, 1)]).any()
            for b in range(width)
        ]
    )
    return onehot.any(), index


def round_robin(m, vec, last):
    """(any, index) of the first set bit of ``vec`` after position ``last``,
    wrapping around: the bits above ``last`` win, else the lowest bit."""
    n = len(vec)
    requests = Signal(n)
    above = Signal(n)
    m.d.comb += [requests.eq(vec), above.eq((Const((1 << n) - 1, n) << (last + 1))[:n])]
    hi_any, hi_index = lowest_set(m, requests & above)
    lo_any, lo_index = lowest_set(m, requests)
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

"""Registered helpers of the PSN window's advance and completion: the first
hole of a bitmap word, and the CQ slot of the next completion."""

from amaranth.hdl import Array, Cat, Const, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from hw.bits import lowest_set

from .dma import CQE_BYTES

__all__ = ["CqSlot", "FirstHole"]


class FirstHole(wiring.Component):
    """The index of the lowest set bit of ``holes`` (the clear bits of the
    bitmap word being advanced over), in two registered steps: the lowest set
    bit of each group of about sqrt(``width``) bits, then of the groups.

    Interface
    ---------
    ``holes`` In(width): the bits (a power of two of them).
    ``first`` Out(log2(width)): the index of the lowest set bit of ``holes``
              two cycles before (meaningful when one was set).

    Latency: 2 cycles. Throughput: one word per cycle (a pipeline).
    """

    def __init__(self, width=64):
        self.width = width
        super().__init__({"holes": In(width), "first": Out(exact_log2(width))})

    def elaborate(self, platform):
        m = Module()
        lw = exact_log2(self.width)
        gb = (lw + 1) // 2  # log2 of the bits per group
        groups = self.width >> gb
        # (the last group's "any" is not needed: the index of the lowest set
        # bit does not depend on the top bit)
        grp_any = Signal(groups - 1)
        grp_idx = [Signal(gb, name=f"hole_idx{g}") for g in range(groups)]
        for g in range(groups):
            g_any, g_idx = lowest_set(self.holes[g << gb : (g + 1) << gb], 1 << gb)
            m.d.sync += grp_idx[g].eq(g_idx)
            if g < groups - 1:
                m.d.sync += grp_any[g].eq(g_any)
        first_grp = lowest_set(Cat(grp_any, Const(1, 1)), groups)[1]
        m.d.sync += self.first.eq(Cat(Array(grp_idx)[first_grp], first_grp))
        return m


class CqSlot(wiring.Component):
    """Where a QP's next receive completion goes, registered from its CQ
    producer index and configuration.

    Interface
    ---------
    ``cq_prod``  In(16): CQEs written to the ring so far (mod 2^16).
    ``cq_cons``  In(16), ``cq_log2`` In(5), ``cq_base`` In(addr_width): the
                 host's consumer index, ring size (2^cq_log2 entries, all 16
                 index bits from 16 on) and base address.
    ``full``     Out(1): the ring has no free slot (``cq_prod - cq_cons``,
                 mod 2^16, is at least the ring's size).
    ``addr``     Out(addr_width): ``cq_base + (cq_prod mod size) x 32``,
                 wrapping within ``addr_width`` bits.
    ``phase``    Out(1): 1 on the first pass over the ring, flipping on every
                 wrap.

    Latency: ``phase`` 1 cycle; ``full`` and ``addr`` 1 cycle after
    ``cq_prod``, ``cq_cons`` and ``cq_base`` and 2 after ``cq_log2`` (the
    ring's mask is registered first). Throughput: one per cycle.
    """

    def __init__(self, addr_width=64):
        self.addr_width = addr_width
        super().__init__({
            "cq_prod": In(16),
            "cq_cons": In(16),
            "cq_log2": In(5),
            "cq_base": In(addr_width),
            "full": Out(1),
            "addr": Out(addr_width),
            "phase": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        mask = Signal(16)  # CQ ring entries - 1, in 16 bits
        m.d.sync += [
            mask.eq(~(Const(0xFFFF, 16) << self.cq_log2)[:16]),
            self.full.eq(((self.cq_prod - self.cq_cons)[:16] & ~mask).any()),
            self.addr.eq(self.cq_base
                         + Cat(Const(0, exact_log2(CQE_BYTES)), self.cq_prod & mask)),
            self.phase.eq(~(self.cq_prod >> self.cq_log2)[0]),
        ]
        return m

"""A bank of event counters in one block RAM."""

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.bits import index_select, one_hot_select
from hw.formal import invariant
from hw.pipeline import unchecked_read_port

__all__ = ["CounterBank"]


class CounterBank(wiring.Component):
    """``n`` counters of ``width`` bits in one memory (a DP16KD on the ECP5 up
    to 512 counters of up to 36 bits), counted by one-cycle strobes.

    Parameters: ``n``; ``width`` (32); ``saturate``: one bool for all
    counters or one per counter (True: the counter stops at ``2**width - 1``;
    False: it wraps to 0); ``init``: the counters' values after configuration
    and after each reset of the domain (0 each by default).

    Interface
    ---------
    ``strobe``   In(n): bit i high in a cycle counts one event of counter i.
                 Any subset of the counters, in every cycle.
    ``rd_addr``  In(range(n)): the counter to read.
    ``rd_data``  Out(width): that counter, the cycle after ``rd_addr``
                 (the memory's read port and a LUT: a choice with the word
                 the scanner writes to that address in the cycle of
                 ``rd_addr``, if it does); with ``read_register=True``, that
                 value registered, 2 cycles after ``rd_addr`` (a flip-flop
                 output for a deep read multiplexer behind it).

    Semantic: every strobe counts exactly once. An event strobed in cycle t
    is in ``rd_data`` for every ``rd_addr`` given in cycle t + ``LAG`` or
    later (``LAG = period + 4``); a read earlier may or may not include it.
    Exactly: counter i is visited in the cycles t = i (mod ``period``),
    counted from the first cycle after reset, and a read addressed in cycle
    r returns its initial value plus the events strobed since reset before
    its last visit at or before r - 3 (its initial value if none), so the
    values read of one counter never go down (a wrapping counter aside).
    Reset: the first pass of the scanner after a reset writes each counter
    its initial value plus its pending count (the word read is ignored);
    until that write a read returns the initial value.

    How: each counter has a ``pending`` accumulator of flip-flops that adds
    its strobes. A scanner visits the addresses 0 .. ``period - 1`` in turn,
    one per cycle (``period = max(n, 4)``): in a visited counter's cycle its
    pending count is taken (and restarts at that cycle's strobe) and the
    memory word is read; the cycle after, the word is registered; then the
    sum (saturated or wrapped) is registered; the cycle after, it is written
    (a read-modify-write of 4 cycles). A counter's next visit is ``period``
    >= 4 cycles later, after its write: no forwarding is needed.

    Pending bound: a counter's accumulator is taken every ``period`` cycles
    and restarts at 0 or 1 (the strobe of the visit's cycle); each of the
    ``period - 1`` cycles before the next visit adds at most 1. So it holds
    at most ``period`` when taken, and ``period.bit_length()`` bits
    (``ceil(log2(period + 1))``) never overflow. It is one of the bank's
    invariants (``hw.formal.invariant``): the unit tests' simulator checks it
    each cycle.

    Latency: ``LAG`` cycles from a strobe to a read that includes it; a read
    answers the cycle after its address. Throughput: strobes of all counters
    every cycle, a read every cycle.
    """

    def __init__(self, n, *, width=32, saturate=False, init=None, read_register=False):
        if n < 1:
            raise ValueError(f"CounterBank needs n >= 1 counters, not {n}")
        if isinstance(saturate, bool):
            saturate = (saturate,) * n
        self.saturate = tuple(bool(s) for s in saturate)
        if len(self.saturate) != n:
            raise ValueError(f"saturate has {len(self.saturate)} entries for n={n} counters")
        self.init = tuple(init) if init is not None else (0,) * n
        if len(self.init) != n or any(not 0 <= v < 1 << width for v in self.init):
            raise ValueError(f"init must be n={n} values in [0, 2**{width})")
        self.n, self.width = n, width
        self.period = max(n, 4)
        self.pending_bits = self.period.bit_length()
        self.LAG = self.lag(n)
        self.read_register = read_register
        super().__init__({
            "strobe": In(n),
            "rd_addr": In(range(n)),
            "rd_data": Out(width),
        })

    @staticmethod
    def lag(n):
        """``LAG`` of a bank of ``n`` counters."""
        return max(n, 4) + 4

    def elaborate(self, platform):
        m = Module()
        n, period, width = self.n, self.period, self.width

        # Two read ports (the scanner's and rd_addr's) without yosys's
        # read-during-write bypass (hw.pipeline.unchecked_read_port): the
        # scanner never reads the word being written, and the read of
        # rd_addr takes the word written in its cycle from ``bypass``.
        mem = Memory(shape=width, depth=period, init=list(self.init),
                     attrs={"no_rw_check": 1})
        m.submodules.mem = mem
        wp = mem.write_port()
        rmw_rp = unchecked_read_port(m, mem)
        csr_rp = unchecked_read_port(m, mem)

        # The scanner: an address counter for the memory and a one-hot ring of
        # the same position for the accumulators (no decode of the address).
        ptr = Signal(range(period))
        visit = Signal(period, init=1)
        m.d.sync += [ptr.eq(Mux(ptr == period - 1, 0, ptr + 1)),
                     visit.eq(visit.rotate_left(1))]
        # The first pass after reset writes each counter's initial value plus
        # its pending count, ignoring the word read: a reset clears the bank.
        clear0 = Signal(init=1)
        with m.If(ptr == period - 1):
            m.d.sync += clear0.eq(0)

        pending = [Signal(self.pending_bits, name=f"pending{i}") for i in range(n)]
        for i, p in enumerate(pending):
            m.d.sync += p.eq(Mux(visit[i], 0, p) + self.strobe[i])
            invariant(m, p <= period, f"CounterBank: pending{i} above {period}")

        # Stage 0 (the visit): the memory word is read, the pending count taken
        # (an AND-OR with the ring: a select on the address would be a deeper
        # multiplexer tree behind the address's fan-out).
        sat_flags = [Const(s, 1) for s in self.saturate] + [Const(0, 1)] * (period - n)
        taken1 = Signal(self.pending_bits)
        addr1, sat1, valid1 = Signal(range(period)), Signal(), Signal()
        clear1 = Signal(init=1)
        m.d.comb += rmw_rp.addr.eq(ptr)
        m.d.sync += [taken1.eq(one_hot_select(visit, pending)),
                     addr1.eq(ptr), sat1.eq(index_select(sat_flags, ptr)), valid1.eq(1),
                     clear1.eq(clear0)]
        # Stage 1: the word arrives (or, in the first pass, the initial value)
        # and is registered.
        word2, taken2 = Signal(width), Signal(self.pending_bits)
        addr2, sat2, valid2 = Signal(range(period)), Signal(), Signal()
        clear2 = Signal(init=1)
        inits = [Const(v, width) for v in self.init] + [Const(0, width)] * (period - n)
        m.d.sync += [word2.eq(Mux(clear1, index_select(inits, addr1), rmw_rp.data)),
                     taken2.eq(taken1), addr2.eq(addr1), sat2.eq(sat1), valid2.eq(valid1),
                     clear2.eq(clear1)]
        # Stage 2: the sum, one bit wider (its top bit the carry out of the
        # word), saturated or wrapped.
        total = Signal(width + 1)
        m.d.comb += total.eq(word2 + taken2)
        new3, addr3, valid3 = Signal(width), Signal(range(period)), Signal()
        clear3 = Signal(init=1)
        m.d.sync += [new3.eq(Mux(sat2 & total[width], Const(-1, width), total[:width])),
                     addr3.eq(addr2), valid3.eq(valid2), clear3.eq(clear2)]
        # Stage 3: the write.
        m.d.comb += [wp.addr.eq(addr3), wp.data.eq(new3), wp.en.eq(valid3)]

        # The read of rd_addr: the memory's word, or the word written in the
        # same cycle at that address (which the memory's port does not give),
        # or, for a counter the first pass has not written yet (``stale``),
        # its initial value.
        collide, stale = Signal(), Signal()
        bypass = Signal(width)
        m.d.comb += csr_rp.addr.eq(self.rd_addr)
        m.d.sync += [collide.eq(valid3 & (self.rd_addr == addr3)), bypass.eq(new3),
                     stale.eq(clear3 & (~valid3 | (self.rd_addr > addr3)))]
        if any(self.init):
            init_rd = Signal(width)
            m.d.sync += init_rd.eq(index_select(inits, self.rd_addr))
        else:
            init_rd = Const(0, width)
        word = Mux(stale, init_rd, Mux(collide, bypass, csr_rp.data))
        m.d[("sync" if self.read_register else "comb")] += self.rd_data.eq(word)
        return m

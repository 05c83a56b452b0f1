"""Formal properties of the retransmit timers of hw/reliability/timer.py (``sim.formal``).

``TimerHarness`` wraps a ``RetransmitTimers`` whose ``arm`` stream and
``expired.ready`` the solver drives freely: any QP armed or disarmed in any
cycle, with any generation and any deadline. One QP, ``watch``, is chosen by
the solver and held; the harness keeps a shadow of its entry as the writes
left it. The sink may stall a report at most ``MAX_STALL`` cycles (the
reliability core takes ``expired`` within a cycle or two; an unbounded stall
would stop the scan, as the block's docstring says). Asserted:

- the stream rule on ``expired`` (valid held until ready, payload stable);
- liveness, "an armed timer fires or is disarmed": once the watched entry is
  armed and its deadline has passed, ``expired`` reports it with its
  generation within ``num_qps + 1`` cycles in which the scan is not stopped
  (cycles with a report waiting on a stalled sink do not count), unless the
  entry is rewritten (disarmed or re-armed) first;
- safety, "never a report of a timer that had not expired": every new report
  of the watched QP carries the generation of an entry that was armed, and
  whose deadline had passed, when the scan read it (two cycles before the
  report: one to read, one to compare).

The memory and the read port's register have no reset: the first read
(step 0) returns whatever the memory held, so a report at step 1 may be of an
entry armed before the reset. The safety assertion starts at step 2, and the
reliability core owns the consequence (it ignores a report whose generation
is not its current one).

Reduction: 3 QPs, 2-bit generations and 8-bit deadlines. The scan's order
and its stop do not depend on the widths; the comparison is the same
serial-number test (``now - deadline`` below half the range) at any width,
and 8 bits give 128 cycles of headroom, more than the bound's depth. 3 QPs
give the scan a wrap and an entry on each side of the watched one. Bounded at
16 cycles: the entry armed and passed from step 1, its ``num_qps + 1`` scan
cycles and a stalled report of another entry before each of them (at most
``MAX_STALL`` cycles each, as one report per scan cycle can be raised) fit
in it; the covers reach a report exactly at the bound, another entry's
report held while the watched one waits, and a disarm of a passed entry,
within 12 cycles. Each further step costs the solver more than all before it.
"""

from amaranth.hdl import Assert, Assume, Cover, Elaboratable, Module, Mux, Signal

from hw.formal import Proof, harness, valid_until_ready

from .timer import RetransmitTimers

__all__ = ["PROOFS", "TimerHarness"]

NUM_QPS = 3
GEN_BITS = 2
DEADLINE_BITS = 8
MAX_STALL = 2
BOUND = NUM_QPS + 1  # scan cycles from "passed" to the report


class TimerHarness(Elaboratable):
    """See the module docstring. Free inputs: ``inputs``."""

    def __init__(self, bound: int = BOUND):
        self.bound = bound
        self.dut = RetransmitTimers(NUM_QPS, gen_bits=GEN_BITS, deadline_bits=DEADLINE_BITS)
        self.watch = Signal(range(NUM_QPS))
        dut = self.dut
        self.inputs = [dut.arm.valid, dut.arm.payload, dut.expired.ready, self.watch]

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        arm, exp = dut.arm, dut.expired

        step = Signal(range(3))  # saturates at 2
        with m.If(step != 2):
            m.d.sync += step.eq(step + 1)
        watch_q = Signal.like(self.watch)
        m.d.sync += watch_q.eq(self.watch)
        m.d.comb += [
            Assume((step == 0) | (self.watch == watch_q)),
            Assume(self.watch < NUM_QPS),
            Assume(~arm.valid | (arm.payload.qpn < NUM_QPS)),
        ]

        stall = Signal(range(MAX_STALL + 1))
        busy = exp.valid & ~exp.ready
        m.d.sync += stall.eq(Mux(busy, stall + 1, 0))
        m.d.comb += Assume(~exp.valid | (stall < MAX_STALL) | exp.ready)
        valid_until_ready(m, exp.valid, exp.ready, exp.payload, dut_drives=True, name="expired")

        # The watched entry as the writes left it, and its value one and two cycles back.
        armed, gen, deadline = Signal(), Signal(GEN_BITS), Signal(DEADLINE_BITS)
        rewrite = arm.valid & (arm.payload.qpn == self.watch)
        with m.If(rewrite):
            m.d.sync += [armed.eq(arm.payload.armed), gen.eq(arm.payload.gen),
                         deadline.eq(arm.payload.deadline)]
        late = Signal(DEADLINE_BITS)
        m.d.comb += late.eq(dut.now - deadline)
        passed = armed & ~late[-1]

        # Liveness: scan cycles since the entry passed, with no report of it.
        reported = exp.valid & (exp.payload.qpn == self.watch) & (exp.payload.gen == gen)
        overdue = Signal(range(self.bound + 2))
        with m.If(rewrite | reported | ~passed):
            m.d.sync += overdue.eq(0)
        with m.Elif(~busy & (overdue <= self.bound)):
            m.d.sync += overdue.eq(overdue + 1)
        m.d.comb += Assert(overdue <= self.bound,
                           "an armed, passed timer went unreported for too many scan cycles")

        # Safety: a new report matches the entry the scan read two cycles before.
        hist = [(Signal(name=f"armed_{i}"), Signal(GEN_BITS, name=f"gen_{i}"),
                 Signal(DEADLINE_BITS, name=f"deadline_{i}")) for i in (1, 2)]
        m.d.sync += [hist[0][0].eq(armed), hist[0][1].eq(gen), hist[0][2].eq(deadline),
                     hist[1][0].eq(hist[0][0]), hist[1][1].eq(hist[0][1]),
                     hist[1][2].eq(hist[0][2])]
        was_busy = Signal()
        m.d.sync += was_busy.eq(busy)
        fresh = exp.valid & ~was_busy & (exp.payload.qpn == self.watch)
        old_armed, old_gen, old_deadline = hist[1]
        late_then = Signal(DEADLINE_BITS)
        m.d.comb += late_then.eq(dut.now - 1 - old_deadline)
        m.d.comb += Assert(~(fresh & (step == 2))
                           | (old_armed & (exp.payload.gen == old_gen) & ~late_then[-1]),
                           "a report of an entry that was not armed and expired")

        m.d.comb += [
            Cover(reported & (overdue == self.bound)),
            # another entry's report held by the sink while the watched one waits
            Cover(busy & ~reported & (stall == MAX_STALL - 1) & (overdue > 1)),
            Cover(rewrite & ~arm.payload.armed & passed & (overdue > 1)),
        ]
        return m


PROOFS = [
    Proof("retransmit_timer", harness(TimerHarness), mode="bmc", depth=16, cover_depth=12,
          long=True,
          reduction="3 QPs, 2-bit generations, 8-bit deadlines (the scan and its stop do "
                    "not depend on the widths; the same serial-number comparison, with 128 "
                    "cycles of headroom); the sink stalls a report at most 2 cycles; bounded "
                    "at 16 cycles, which hold the longest history the liveness bound allows"),
]

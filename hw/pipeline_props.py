"""Formal properties of the stream stages of hw/pipeline.py (``sim.formal`` runs them).

``StreamStageHarness(dut, width, capacity, bubble_free)`` wraps one stage
(``StreamRegister``, with and without ``hold``) between a source and a sink
that the solver drives freely, under the stream rule. The source sends a
sequence number (its transfer count, repeated over the payload's width, so
every bit group of a wide stage carries it). Proven by k-induction:

- the stage keeps the stream rule on its output (``hw.formal.valid_until_ready``);
- what leaves is what came in, in order, none lost or repeated: the output's
  payload is the sink's transfer count;
- it holds at most ``capacity`` transfers, takes input exactly while it
  holds fewer than ``capacity`` (``i.ready``), and offers its oldest
  exactly while it holds any (``o.valid``): so with ``o.ready`` high it
  drains one transfer a cycle, and never deadlocks;
- a bubble-free stage (``StreamRegister``) passes a transfer every cycle
  while both sides are ready.

Reduction: payloads of 40 bits (two of ``SKID_GROUP_BITS``'s 36-bit groups
and a partial one of ``hold``'s 72) carrying a 4-bit count ten times: the
stages never look at the data, so any width with the same groups behaves
alike, and a count modulo 16 exceeds the capacity (2) many times over.
"""

from amaranth.hdl import Assert, Assume, Cover, Elaboratable, Module, Mux, Signal

from hw.formal import Proof, harness, transfer_count, valid_until_ready
from hw.pipeline import StreamRegister

__all__ = ["PROOFS", "StreamStageHarness"]

COUNT_BITS = 4
REPEAT = 10  # 40 payload bits
STALL = 4  # the longest stall of the sink in the k-induction proofs


class StreamStageHarness(Elaboratable):
    """See the module docstring. Free inputs: ``i_valid``, ``o_ready``."""

    def __init__(self, make_dut, *, capacity: int, bubble_free: bool, check_data: bool,
                 fair_sink: bool):
        self.make_dut, self.capacity, self.bubble_free = make_dut, capacity, bubble_free
        self.check_data, self.fair_sink = check_data, fair_sink
        self.i_valid = Signal()
        self.o_ready = Signal()
        self.inputs = [self.i_valid, self.o_ready]

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.make_dut(COUNT_BITS * REPEAT)
        sent = transfer_count(m, dut.i.valid, dut.i.ready, COUNT_BITS, "sent")
        taken = transfer_count(m, dut.o.valid, dut.o.ready, COUNT_BITS, "taken")
        m.d.comb += [dut.i.valid.eq(self.i_valid), dut.i.payload.eq(sent.replicate(REPEAT)),
                     dut.o.ready.eq(self.o_ready)]
        valid_until_ready(m, dut.i.valid, dut.i.ready, dut.i.payload, dut_drives=False,
                          name="source")
        valid_until_ready(m, dut.o.valid, dut.o.ready, dut.o.payload, dut_drives=True,
                          name="stage")
        held = Signal(COUNT_BITS)
        m.d.comb += held.eq(sent - taken)
        # k-induction: the sink stalls at most STALL cycles at a time (see the
        # module docstring for why longer stalls add no state)
        stall = Signal(range(STALL + 1))
        m.d.sync += stall.eq(Mux(self.o_ready, 0, stall + 1))
        if self.fair_sink:
            m.d.comb += Assume(stall < STALL)
        m.d.comb += [
            Assert(held <= self.capacity, "the stage holds more than its capacity"),
            Assert((held == 0) | dut.o.valid, "the stage holds a transfer it does not offer"),
            Assert((held != 0) | ~dut.o.valid, "the stage offers a transfer it does not hold"),
            Assert((held >= self.capacity) | dut.i.ready,
                   "the stage refuses input while it has room"),
            Assert((held < self.capacity) | ~dut.i.ready, "the stage takes input while full"),
        ]
        if self.check_data:
            m.d.comb += Assert(~dut.o.valid | (dut.o.payload == taken.replicate(REPEAT)),
                               "a transfer left out of order, lost or repeated")
        stalled = Signal()
        m.d.sync += stalled.eq(dut.o.valid & ~dut.o.ready)
        streak = Signal(2)
        both = dut.i.valid & dut.i.ready & dut.o.valid & dut.o.ready
        m.d.sync += streak.eq(((streak + 1) * both)[:2] | (both & (streak == 3)).replicate(2))
        m.d.comb += [
            Cover(stalled & dut.o.valid & ~dut.o.ready & dut.i.valid),
            Cover(held == self.capacity),
            Cover(taken == 2 ** COUNT_BITS - 1),
        ]
        if self.bubble_free:
            m.d.comb += Cover(streak == 3)
        return m


def _stage(hold, check_data):
    return harness(StreamStageHarness, lambda width: StreamRegister(width, hold=hold),
                   capacity=1 if hold else 2, bubble_free=not hold, check_data=check_data,
                   fair_sink=not check_data)


_DATA = ("40-bit payload of a 4-bit sequence number; bounded at 40 cycles, past the "
         "diameter of the stage's reachable states (every flag state within 3 cycles, "
         "every count within 2 x 16 + 2; the covers show both)")
_FAIR = (f"40-bit payload; the sink stalls at most {STALL} cycles at a time (a stalled "
         "stage changes state only by filling its spare, once)")
PROOFS = [
    Proof("stream_register", _stage(False, False), depth=12, cover_depth=24,
          reduction=_FAIR),
    Proof("stream_register_data", _stage(False, True), mode="bmc", depth=40, cover_depth=24,
          reduction=_DATA),
    Proof("stream_register_hold", _stage(True, False), depth=12, cover_depth=40,
          reduction=_FAIR),
    Proof("stream_register_hold_data", _stage(True, True), mode="bmc", depth=40,
          cover_depth=40, reduction=_DATA),
]

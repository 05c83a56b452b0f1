"""Formal properties of the frame arbiter of hw/arbiter.py (``sim.formal`` runs them).

``StreamArbiterHarness(num_inputs)`` wraps an ``AXIStreamArbiter`` between
``num_inputs`` sources and a sink that the solver drives freely (every
field of every input, and ``m_axis.tready``), the sources under the
AXI4-Stream rule (``tvalid`` held until ``tready``, the beat unchanged while
it waits). Asserted:

- the stream rule on ``m_axis``;
- a beat leaves ``m_axis`` exactly when one input's beat is taken, and it is
  that input's beat (no beat lost, made up or mixed from two inputs);
- frames never interleave: once a frame's first beat left from input ``i``,
  every beat up to its ``tlast`` comes from ``i``;
- fairness (the docstring's bound): while input ``i`` offers a frame's first
  beat, frames of the other inputs start at most ``num_inputs - 1`` times
  before a beat of ``i`` is taken;
- no deadlock: with ``m_axis.tready`` high, a beat leaves at most 1 cycle
  after a frame's first beat is offered (the grant's cycle) and in the same
  cycle while the source of the frame in progress offers its next beat.

Reduction: 3 inputs, 8-bit data (``tkeep`` 1 bit), 1-bit ``tuser``: the
arbiter passes the fields through an AND-OR select without looking at them
(only ``tvalid`` and ``tlast``), so a wider beat only repeats the select; 3
inputs give the round robin a neighbour to skip in both directions, and the
bound of ``num_inputs - 1`` frames is reached (the covers show it). Bounded
at 24 cycles: the longest of the harness's histories, a wait of 2 frames
(a grant cycle, then a 1-beat frame from each other input), is reached by
step 3, and every cover (each input served after waiting 2 frames, a stalled
beat, a 2-beat frame) by step 3 of an 8-cycle search; 24 cycles is 8 times
the longest, and the arbiter's own state (grant, busy) has a diameter of 2.
"""

from amaranth.hdl import Assert, Cat, Cover, Elaboratable, Module, Mux, Signal

from hw.arbiter import AXIStreamArbiter
from hw.formal import Proof, harness, valid_until_ready

__all__ = ["PROOFS", "StreamArbiterHarness"]

DATA_BITS = 8


def _beat(port):
    return Cat(port.tdata, port.tkeep, port.tlast, port.tuser)


class StreamArbiterHarness(Elaboratable):
    """See the module docstring. Free inputs: ``inputs``."""

    def __init__(self, num_inputs: int):
        self.n = num_inputs
        self.dut = AXIStreamArbiter(data_width=DATA_BITS, num_inputs=num_inputs, user_width=1)
        self.sources = [getattr(self.dut, f"s_axis{i}") for i in range(num_inputs)]
        self.inputs = [getattr(s, f) for s in self.sources
                       for f in ("tdata", "tkeep", "tlast", "tuser", "tvalid")]
        self.inputs.append(self.dut.m_axis.tready)

    def elaborate(self, platform):
        m = Module()
        n, dut, src = self.n, self.dut, self.sources
        m.submodules.dut = dut
        out = dut.m_axis
        for i, s in enumerate(src):
            valid_until_ready(m, s.tvalid, s.tready, _beat(s), dut_drives=False, name=f"s{i}")
        valid_until_ready(m, out.tvalid, out.tready, _beat(out), dut_drives=True, name="m")

        take = out.tvalid & out.tready
        taken = [s.tvalid & s.tready for s in src]
        # A beat out is exactly one input's beat taken, and that beat.
        m.d.comb += Assert(take == Cat(*taken).any(), "a beat left without an input's, or not")
        for i in range(n):
            for j in range(i + 1, n):
                m.d.comb += Assert(~(src[i].tready & src[j].tready),
                                   f"inputs {i} and {j} ready together")
            m.d.comb += Assert(~taken[i] | (_beat(out) == _beat(src[i])),
                               f"the beat out is not input {i}'s")

        # The frame in progress: its source, set by its first beat.
        in_frame = Signal()
        owner = Signal(range(n))
        first = take & ~in_frame
        with m.If(take):
            m.d.sync += in_frame.eq(~out.tlast)
        for i in range(n):
            with m.If(first & taken[i]):
                m.d.sync += owner.eq(i)
            m.d.comb += Assert(~(in_frame & taken[i]) | (owner == i),
                               f"a beat of input {i} interleaved in another's frame")

        # Fairness: frames the others start while input i offers a first beat.
        counts = []
        for i in range(n):
            count = Signal(range(n + 1), name=f"waited{i}")
            others = Cat(*(taken[j] for j in range(n) if j != i)).any()
            waiting = src[i].tvalid & ~taken[i] & ~(in_frame & (owner == i))
            with m.If(~waiting):
                m.d.sync += count.eq(0)
            with m.Elif(first & others):
                m.d.sync += count.eq(count + 1)
            m.d.comb += Assert(count <= n - 1, f"input {i} waited more than {n - 1} frames")
            counts.append(count)

        # No deadlock: cycles with the sink ready and a beat due that none left.
        due = Mux(in_frame, Cat(*(s.tvalid for s in src)).bit_select(owner, 1),
                  Cat(*(s.tvalid for s in src)).any())
        stuck = Signal(2)
        m.d.sync += stuck.eq(Mux(out.tready & due & ~take, stuck + 1, 0))
        m.d.comb += [
            Assert(stuck <= 1, "a beat was due with the sink ready and none left for 2 cycles"),
            Assert(~in_frame | (stuck == 0), "a frame's next beat waited with the sink ready"),
        ]

        stalled = Signal()
        m.d.sync += stalled.eq(out.tvalid & ~out.tready)
        for i in range(n):
            m.d.comb += Cover(first & taken[i] & (counts[i] == n - 1))
        m.d.comb += [
            Cover(in_frame & take & out.tlast),
            Cover(stalled & out.tvalid & ~out.tready),
            Cover(stuck == 1),
        ]
        return m


PROOFS = [
    Proof("stream_arbiter", harness(StreamArbiterHarness, 3), mode="bmc", depth=24, cover_depth=8,
          reduction="3 inputs, 8-bit data, 1-bit tuser (the fields pass an AND-OR select "
                    "unread); bounded at 24 cycles, 8 times the 3 in which the covers reach "
                    "the longest history (an input served after waiting 2 frames)"),
]

"""Frame-level round-robin arbiter for AXI4-Stream (ACKs vs data onto the MAC)."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.bits import one_hot_select
from hw.stream import AXIStreamSignature

__all__ = ["AXIStreamArbiter"]


class AXIStreamArbiter(wiring.Component):
    """Merges ``num_inputs`` AXI4-Stream frame sources into one, whole frames at a time.

    Interface
    ---------
    ``s_axis0`` .. ``s_axis{n-1}``  In(AXIStreamSignature(data_width, user_width)).
    ``m_axis``                      Out(AXIStreamSignature(data_width, user_width)).

    Between frames the grant goes to the first input with ``tvalid`` after
    the one granted last (round robin), so with every input busy the frames
    alternate and no input waits more than ``num_inputs - 1`` frames. A grant
    holds until the beat with ``tlast`` is taken; frames are never
    interleaved.

    The grant is a one-hot register: it is chosen while no beat is offered
    (and when a frame's last beat is taken), never in the cycle a beat is
    passed on, so ``m_axis`` is an AND-OR of the inputs with flip-flop
    selects, with no path from one input's ``tvalid`` to another's data, and
    a beat once offered on ``m_axis`` stays until taken (AXI4-Stream).

    Latency: 1 cycle from an idle arbiter's input ``tvalid`` to ``m_axis``
    (the grant); then 0 (inputs are passed through combinationally;
    ``tready`` of the granted input is ``m_axis.tready``). Throughput: 1 beat
    per cycle, and no idle cycle between frames while the next frame's first
    beat is waiting when the last beat of the one before is taken.
    """

    def __init__(self, data_width=64, num_inputs=2, user_width=1):
        if num_inputs < 2:
            raise ValueError(f"num_inputs must be at least 2, not {num_inputs!r}")
        self.num_inputs = num_inputs
        sig = AXIStreamSignature(data_width, user_width)
        members = {f"s_axis{i}": In(sig) for i in range(num_inputs)}
        members["m_axis"] = Out(sig)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        n = self.num_inputs
        inputs = [getattr(self, f"s_axis{i}") for i in range(n)]
        out = self.m_axis

        # One-hot grant; all zero at reset, when input 0 comes first.
        grant = Signal(n)
        busy = Signal()  # a frame's first beat has been taken, its last not yet
        valid = Cat(s.tvalid for s in inputs)
        # Round robin: the first valid input after the one granted now (or
        # input n-1 when none is), wrapping round to that one itself last.
        last = Signal(n)
        m.d.comb += last.eq(Mux(grant.any(), grant, 1 << (n - 1)))
        pick = Signal(n)
        for k in reversed(range(1, n + 1)):
            for cur in range(n):
                cand = (cur + k) % n
                with m.If(last[cur] & valid[cand]):
                    m.d.comb += pick.eq(1 << cand)

        for name in ("tdata", "tkeep", "tlast", "tuser", "tvalid"):
            m.d.comb += getattr(out, name).eq(
                one_hot_select(grant, [getattr(s, name) for s in inputs]))
        for i, s in enumerate(inputs):
            m.d.comb += s.tready.eq(grant[i] & out.tready)

        take = out.tvalid & out.tready
        with m.If(take):
            m.d.sync += busy.eq(~out.tlast)
        # Choose again when nothing is offered (idle, or the granted input has
        # nothing yet) or when the last beat of a frame goes.
        with m.If((~busy & ~out.tvalid) | (take & out.tlast)):
            with m.If(valid.any()):
                m.d.sync += grant.eq(pick)
        return m

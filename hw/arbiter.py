"""Frame-level round-robin arbiter for AXI4-Stream (ACKs vs data onto the MAC)."""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

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

    Latency: 0 cycles (the selected input is passed through combinationally;
    ``tready`` of an input depends on ``m_axis.tready``). Throughput: 1 beat
    per cycle, no idle cycle between frames.
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

        busy = Signal()  # inside a frame
        owner = Signal(range(n))  # the input granted last / now
        pick = Signal(range(n))
        # Round robin: the first valid input after `owner`, wrapping.
        for k in reversed(range(1, n + 1)):
            for cur in range(n):
                cand = (cur + k) % n
                with m.If((owner == cur) & inputs[cand].tvalid):
                    m.d.comb += pick.eq(cand)
        sel = Signal(range(n))
        m.d.comb += sel.eq(owner)
        with m.If(~busy):
            m.d.comb += sel.eq(pick)

        for i, s in enumerate(inputs):
            with m.If(sel == i):
                m.d.comb += [
                    out.tdata.eq(s.tdata),
                    out.tkeep.eq(s.tkeep),
                    out.tlast.eq(s.tlast),
                    out.tuser.eq(s.tuser),
                    out.tvalid.eq(s.tvalid),
                    s.tready.eq(out.tready),
                ]
        with m.If(out.tvalid & out.tready):
            m.d.sync += [owner.eq(sel), busy.eq(~out.tlast)]
        return m

"""The SRv6 uSID carrier written into a frame after its ICRC: ``CarrierWriter``."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..headers import IPV6, OFF_IPV6, OFF_IPV6_DST
from ..stream import Beat

__all__ = ["CarrierWriter"]


class CarrierWriter(wiring.Component):
    """Writes the IPv6 destination address of an SRv6 frame on its way out.

    TX builds an SRv6 frame to its peer's address and computes its ICRC over
    it: the address the peer sees once the fabric has consumed every uSID
    (``hw.protocol.srv6_carrier``). This block then puts the carrier there
    (bytes ``OFF_IPV6_DST`` .. +15), so the ICRC stays the peer's.

    Ports: ``i`` (stream of ``Beat``, packed frames), ``o`` (the same frames);
    ``srv6`` and ``address`` (the 128-bit carrier, the first byte on the wire
    in bits 127..120) are the current frame's, held by the caller from its
    first beat to its last. ``srv6`` low passes the frame unchanged.

    Latency 0 (combinational: ``o`` is ``i`` with the address's lanes
    muxed); throughput one beat per cycle.
    """

    def __init__(self, data_width: int = 64):
        self.data_width = data_width
        super().__init__({
            "i": In(stream.Signature(Beat(data_width))),
            "o": Out(stream.Signature(Beat(data_width))),
            "srv6": In(1),
            "address": In(128),
        })

    def elaborate(self, platform):
        m = Module()
        nbytes = self.data_width // 8
        end = OFF_IPV6_DST + 16
        beats = -(-end // nbytes)  # the beats that hold an address byte, and the ones before
        # ``at`` one-hot: bit b in beat b of a frame (b < beats), 0 after
        at = Signal(beats, init=1)
        taken = self.i.valid & self.o.ready
        with m.If(taken):
            m.d.sync += at.eq(Mux(self.i.payload.last, 1, at << 1))
        wire = IPV6.pack({"dst": self.address})  # the address's bytes in lane order
        start = IPV6.offset_of("dst")
        assert OFF_IPV6 + start == OFF_IPV6_DST
        data = self.i.payload.data
        out = []
        for j in range(nbytes):
            byte = data[8 * j : 8 * j + 8]
            hits = [(b, b * nbytes + j) for b in range(beats)
                    if OFF_IPV6_DST <= b * nbytes + j < end]
            for b, pos in hits:  # frame byte ``pos`` is lane j of beat b
                src = wire[8 * (start + pos - OFF_IPV6_DST) :][:8]
                byte = Mux(self.srv6 & at[b], src, byte)
            out.append(byte)
        m.d.comb += [
            self.o.payload.eq(self.i.payload),
            self.o.payload.data.eq(Cat(*out)),
            self.o.valid.eq(self.i.valid),
            self.i.ready.eq(self.o.ready),
        ]
        return m

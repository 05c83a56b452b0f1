"""Register slices: pipeline stages for valid/ready interfaces, for timing.

``StreamRegister(shape)``
    One stage of ``amaranth.lib.stream`` (``i`` in, ``o`` out). Every output
    (``o.valid``, ``o.payload``, ``i.ready``) comes from a flip-flop, so no
    combinational path crosses the stage in either direction: the logic in
    front of it and behind it time separately. A two-entry skid buffer: the
    output register, and a second register that catches the beat accepted in
    the cycle the sink stalls.

    Latency: 1 cycle. Throughput: 1 transfer per cycle, with or without
    back-pressure (no bubble when ``o.ready`` toggles). Cost: 2 x width + 2
    flip-flops and a 2:1 mux per bit.

``AXIStreamRegister(data_width, user_width)``
    The same stage for ``AXIStreamSignature`` (tdata/tkeep/tlast/tuser).

``AXI4RegisterSlice(addr_width, data_width, id_width)``
    A ``StreamRegister`` on each of the five AXI4 channels (AW, W, B, AR, R)
    between ``s_axi`` (towards the master) and ``m_axi`` (towards the
    slave). Latency 1 cycle per channel; bursts, IDs and ordering pass
    unchanged.

``AXIRegisterSlice(signature)``
    The same for any AXI-style signature whose members are named by channel
    (``aw*``, ``w*``, ``b*``, ``ar*``, ``r*``), e.g. ``AXI4LiteSignature``.
"""

from amaranth.hdl import Cat, Module, Shape, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hw.axi import AXI4Signature
from hw.stream import AXIStreamSignature

__all__ = ["AXI4RegisterSlice", "AXIRegisterSlice", "AXIStreamRegister", "StreamRegister",
           "skid"]


def skid(m: Module, i_valid, i_ready, i_data, o_valid, o_ready, o_data, name: str):
    """Builds the skid buffer of ``StreamRegister`` in ``m`` between flat
    signals: ``i_ready``, ``o_valid`` and ``o_data`` are driven here
    (``i_ready`` and ``o_valid`` combinationally from flip-flops, ``o_data``
    from a flip-flop)."""
    width = len(i_data)
    out_valid = Signal(name=f"{name}_valid")
    out_data = Signal(width, name=f"{name}_data")
    spare_valid = Signal(name=f"{name}_spare_valid")
    spare_data = Signal(width, name=f"{name}_spare_data")
    m.d.comb += [o_valid.eq(out_valid), o_data.eq(out_data), i_ready.eq(~spare_valid)]
    with m.If(o_ready | ~out_valid):
        # The output register takes the spare beat first, else the input.
        with m.If(spare_valid):
            m.d.sync += [out_data.eq(spare_data), out_valid.eq(1), spare_valid.eq(0)]
        with m.Else():
            m.d.sync += [out_data.eq(i_data), out_valid.eq(i_valid)]
    with m.Elif(i_valid & ~spare_valid):
        # The sink stalls: the beat accepted this cycle waits in the spare.
        m.d.sync += [spare_data.eq(i_data), spare_valid.eq(1)]


class StreamRegister(wiring.Component):
    """See the module docstring."""

    def __init__(self, shape):
        self.shape = shape
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape))})

    def elaborate(self, platform):
        m = Module()
        width = Shape.cast(self.shape).width
        i_flat, o_flat = Signal(width), Signal(width)
        m.d.comb += [i_flat.eq(Value.cast(self.i.payload)), Value.cast(self.o.payload).eq(o_flat)]
        skid(m, self.i.valid, self.i.ready, i_flat, self.o.valid, self.o.ready, o_flat, "stage")
        return m


class AXIStreamRegister(wiring.Component):
    """See the module docstring."""

    def __init__(self, data_width=64, user_width=1):
        sig = AXIStreamSignature(data_width, user_width)
        super().__init__({"s_axis": In(sig), "m_axis": Out(sig)})

    def elaborate(self, platform):
        m = Module()
        s, o = self.s_axis, self.m_axis
        i_flat = Cat(s.tdata, s.tkeep, s.tlast, s.tuser)
        o_flat = Signal(len(i_flat))
        m.d.comb += Cat(o.tdata, o.tkeep, o.tlast, o.tuser).eq(o_flat)
        skid(m, s.tvalid, s.tready, i_flat, o.tvalid, o.tready, o_flat, "axis")
        return m


class AXIRegisterSlice(wiring.Component):
    """See the module docstring."""

    def __init__(self, signature):
        self._sig = signature
        super().__init__({"s_axi": In(signature), "m_axi": Out(signature)})

    def elaborate(self, platform):
        m = Module()
        s, mm = self.s_axi, self.m_axi
        members = {name for name, _ in self._sig.members.items()}
        for ch, forward in (("aw", True), ("w", True), ("ar", True), ("b", False), ("r", False)):
            fields = sorted(n for n in members
                            if n.startswith(ch) and n not in (f"{ch}valid", f"{ch}ready"))
            src, dst = (s, mm) if forward else (mm, s)
            i_flat = Cat(*(getattr(src, f) for f in fields))
            o_flat = Signal(len(i_flat), name=f"{ch}_out")
            m.d.comb += Cat(*(getattr(dst, f) for f in fields)).eq(o_flat)
            skid(m, getattr(src, f"{ch}valid"), getattr(src, f"{ch}ready"), i_flat,
                 getattr(dst, f"{ch}valid"), getattr(dst, f"{ch}ready"), o_flat, ch)
        return m


class AXI4RegisterSlice(AXIRegisterSlice):
    """See the module docstring."""

    def __init__(self, addr_width=64, data_width=64, id_width=4):
        super().__init__(AXI4Signature(addr_width, data_width, id_width))

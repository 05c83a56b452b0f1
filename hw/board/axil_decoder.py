"""AXI4-Lite address decoder: one master onto several windowed slaves
(hw/board/soc.py's address map).
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..axi import AXI_RESP_DECERR, AXI4LiteSignature
from ..bits import one_hot_select
from ..pipeline import OneHotFSM
from .util import is_pow2


class AXI4LiteDecoder(wiring.Component):
    """One AXI4-Lite master onto several slaves, each a window of the address space.

    ``windows`` is a list of ``(name, base, size)``: ``size`` a power of two,
    ``base`` a multiple of it, no overlaps. Slave ``name`` is the port
    ``name`` (Out(AXI4LiteSignature(log2(size), 32))) and sees the address
    relative to its base.

    One transaction at a time: the decoder takes a write (AW and W together,
    so it waits for both; a write goes first when a read is offered too) or
    a read (AR), picks the window from the address, offers the access to
    that slave, holds the slave's response (B, or R with its data) and then
    offers it to the master; it accepts nothing else meanwhile. An address in
    no window is answered by the decoder itself: DECERR, read data 0. What it
    drives to the slaves comes from its registers, and to the master from
    its registers and the master's own valids, so no combinational path
    crosses it from the master's handshake logic to a slave's or back.

    Latency: one cycle from AW+W (or AR) taken to the slave seeing it, one
    cycle from the slave's B (or R) to the master seeing it. Throughput: one
    transaction per slave latency plus 3 cycles.
    """

    def __init__(self, windows, addr_width: int = 32):
        spans = []
        for name, base, size in windows:
            if not is_pow2(size) or base % size:
                raise ValueError(f"window {name}: size must be a power of two and base a "
                                 f"multiple of it, not base 0x{base:x} size 0x{size:x}")
            if base + size > 1 << addr_width:
                raise ValueError(f"window {name} ends beyond the {addr_width}-bit address space")
            for other, obase, osize in spans:
                if base < obase + osize and obase < base + size:
                    raise ValueError(f"window {name} overlaps window {other}")
            spans.append((name, base, size))
        if not spans:
            raise ValueError("the decoder needs at least one window")
        self.windows = spans
        self.addr_width = addr_width
        members = {"s_axil": In(AXI4LiteSignature(addr_width, 32))}
        for name, _, size in spans:
            members[name] = Out(AXI4LiteSignature(max(1, exact_log2(size)), 32))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        s = self.s_axil
        ports = [getattr(self, name) for name, _, _ in self.windows]
        addr = Signal(self.addr_width)
        wdata = Signal(32)
        wstrb = Signal(4)
        prot = Signal(3)
        # One-hot window of the access, registered when it is taken; none set:
        # no window. The slave's channels are offered while pending, and
        # only to the selected slave.
        sel = Signal(len(self.windows))
        aw_pending, w_pending, ar_pending = Signal(), Signal(), Signal()
        bresp = Signal(2)
        rresp = Signal(2)
        rdata = Signal(32)

        def decode(address):
            return Cat(*(address[exact_log2(size):] == base >> exact_log2(size)
                         for _, base, size in self.windows))

        for i, port in enumerate(ports):
            bits = len(port.awaddr)
            m.d.comb += [
                port.awaddr.eq(addr[:bits]),
                port.araddr.eq(addr[:bits]),
                port.wdata.eq(wdata),
                port.wstrb.eq(wstrb),
                port.awprot.eq(prot),
                port.arprot.eq(prot),
                port.awvalid.eq(sel[i] & aw_pending),
                port.wvalid.eq(sel[i] & w_pending),
                port.arvalid.eq(sel[i] & ar_pending),
                # One access at a time: only the selected slave can answer.
                port.bready.eq(sel[i]),
                port.rready.eq(sel[i]),
            ]
        # One flip-flop per state. The access's registers load in every IDLE
        # cycle (the state's flip-flop is their enable) and hold from the
        # cycle the access is taken: no handshake decode in front of their
        # enables, a wide fan-out. Likewise the response registers load in
        # every WRITE (READ) cycle, the last time in the cycle the slave's
        # B (R) is seen.
        fsm = OneHotFSM(m, ("IDLE", "WRITE", "WRITE_RESP", "READ", "READ_RESP"), init="IDLE",
                        name="decoder_state")
        with fsm.State("IDLE"):
            take_write = s.awvalid & s.wvalid
            take_read = s.arvalid & ~s.awvalid
            address = Mux(s.awvalid, s.awaddr, s.araddr)
            m.d.sync += [sel.eq(decode(address)), addr.eq(address),
                         wdata.eq(s.wdata), wstrb.eq(s.wstrb),
                         prot.eq(Mux(s.awvalid, s.awprot, s.arprot)),
                         aw_pending.eq(take_write), w_pending.eq(take_write),
                         ar_pending.eq(take_read)]
            with m.If(take_write):
                m.d.comb += [s.awready.eq(1), s.wready.eq(1)]
                fsm.next = "WRITE"
            with m.Elif(take_read):
                m.d.comb += s.arready.eq(1)
                fsm.next = "READ"
        with fsm.State("WRITE"):
            for i, port in enumerate(ports):
                with m.If(sel[i] & port.awready):
                    m.d.sync += aw_pending.eq(0)
                with m.If(sel[i] & port.wready):
                    m.d.sync += w_pending.eq(0)
            m.d.sync += bresp.eq(Mux(sel.any(), one_hot_select(sel, [p.bresp for p in ports]),
                                     AXI_RESP_DECERR))
            # No window: the decoder answers at once.
            with m.If((sel & Cat(p.bvalid for p in ports)).any() | ~sel.any()):
                fsm.next = "WRITE_RESP"
        with fsm.State("WRITE_RESP"):
            m.d.comb += [s.bvalid.eq(1), s.bresp.eq(bresp)]
            with m.If(s.bready):
                fsm.next = "IDLE"
        with fsm.State("READ"):
            for i, port in enumerate(ports):
                with m.If(sel[i] & port.arready):
                    m.d.sync += ar_pending.eq(0)
            # one_hot_select: data 0 when no window is selected
            m.d.sync += [
                rresp.eq(Mux(sel.any(), one_hot_select(sel, [p.rresp for p in ports]),
                             AXI_RESP_DECERR)),
                rdata.eq(one_hot_select(sel, [p.rdata for p in ports])),
            ]
            with m.If((sel & Cat(p.rvalid for p in ports)).any() | ~sel.any()):
                fsm.next = "READ_RESP"
        with fsm.State("READ_RESP"):
            m.d.comb += [s.rvalid.eq(1), s.rresp.eq(rresp), s.rdata.eq(rdata)]
            with m.If(s.rready):
                fsm.next = "IDLE"
        return m

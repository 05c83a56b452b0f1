"""AXI4 N:1 arbiter: several DMA masters (TX, RX, reliability) share one AXI4 port.

``AXI4Arbiter(num_masters, addr_width, data_width, id_width)``

Interface
---------
``s{i}_axi``  In(AXI4Signature(addr_width, data_width, id_width)) for each
              master i: slave ports, one per DMA engine.
``m_axi``     Out(AXI4Signature(addr_width, data_width, id_width + index_bits)):
              toward host memory. The granted master's index goes into the
              top bits of AWID/ARID, and B and R responses are routed back by
              those bits, so masters can keep several bursts in flight and R
              beats of different masters may interleave.

Write path: AW is granted round-robin among the masters with ``awvalid``; the
grant's index enters a FIFO (``w_fifo_depth`` >= 4 entries, kept twice: each
copy's head selects half of the W beat's bits; an AW is taken while the FIFO
had two entries free in the previous cycle, a flip-flop), and W beats are taken from
the master at the head of that FIFO until ``wlast``, since AXI4 W beats
carry no ID and must follow AW order. Read path: AR is granted round-robin.

The AW and AR grants are registers (``RoundRobin``): the request of the
master granted now passes through an AND-OR with flip-flop selects, so no
master's valid reaches another's address.

Latency: 1 cycle on AW and AR when the master was not the one granted last
(0 when it was); none on B and R (muxes); W beats of a burst pass from the
second cycle after its AW is taken (the order FIFO's registered head), then
with none (muxes). Throughput: one AW or AR per
cycle; W and R one beat per cycle. A master with a request pending waits
for at most ``num_masters - 1`` other grants.
"""

from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from .axi import AXI4Signature
from .bits import one_hot_select

__all__ = ["AXI4Arbiter", "RoundRobin"]

_AW = ("awaddr", "awlen", "awsize", "awburst", "awlock", "awcache", "awprot")
_AR = ("araddr", "arlen", "arsize", "arburst", "arlock", "arcache", "arprot")
_W = ("wdata", "wstrb", "wlast")


class RoundRobin(wiring.Component):
    """Round-robin grant among ``count`` requesters, from a register.

    ``grant`` (an index) and ``onehot`` name the requester granted now;
    ``valid`` is that requester's request; ``advance`` says the grant was
    used this cycle. The grant is chosen again, for the first requester
    after the one granted now (itself last), in a cycle where the granted
    requester has no request or its request is taken (``advance``); it is
    never changed while its request waits, because AXI forbids changing a
    presented AW/AR before it is accepted.

    Latency: 1 cycle from a request of an idle arbiter to ``valid`` (0 for
    the requester granted last). Throughput: one grant per cycle; a
    requester granted alone keeps the grant, so it can be served every cycle.
    Everything downstream sees flip-flop selects: no path from one
    requester's request to another's data.
    """

    def __init__(self, count: int):
        self.count = count
        super().__init__(
            {
                "requests": In(count),
                "advance": In(1),
                "grant": Out(range(max(count, 2))),
                "onehot": Out(count),
                "valid": Out(1),
            }
        )

    def elaborate(self, platform):
        m = Module()
        n = self.count
        onehot = Signal(n, init=1 << (n - 1))
        # Scan the positions after the one granted; the nearest requester wins
        # (assigned last).
        scan = Signal(n)
        for offset in reversed(range(1, n + 1)):
            for start in range(n):
                index = (start + offset) % n
                with m.If(onehot[start] & self.requests[index]):
                    m.d.comb += scan.eq(1 << index)
        index = Signal.like(self.grant, init=n - 1)
        m.d.comb += [
            self.onehot.eq(onehot),
            self.grant.eq(index),
            self.valid.eq((onehot & self.requests).any()),
        ]
        with m.If((~self.valid | self.advance) & self.requests.any()):
            m.d.sync += onehot.eq(scan)
            for i in range(n):
                with m.If(scan[i]):
                    m.d.sync += index.eq(i)
        return m


class AXI4Arbiter(wiring.Component):
    def __init__(self, num_masters: int, addr_width: int = 64, data_width: int = 64,
                 id_width: int = 4, w_fifo_depth: int = 4):
        if num_masters < 1:
            raise ValueError(f"num_masters must be at least 1, not {num_masters}")
        # at 2, SyncFIFOBuffered refuses a write in the cycle after one, and an AW
        # taken then would lose its W order entry (the proof runs at 4)
        if w_fifo_depth < 4:
            raise ValueError(f"w_fifo_depth must be at least 4, not {w_fifo_depth}")
        self.num_masters = num_masters
        self.index_bits = max(1, (num_masters - 1).bit_length())
        self.id_width = id_width
        self.w_fifo_depth = w_fifo_depth
        members = {
            f"s{i}_axi": In(AXI4Signature(addr_width, data_width, id_width))
            for i in range(num_masters)
        }
        members["m_axi"] = Out(AXI4Signature(addr_width, data_width, id_width + self.index_bits))
        super().__init__(members)

    def slave(self, i):
        return getattr(self, f"s{i}_axi")

    def elaborate(self, platform):
        m = Module()
        n, mst = self.num_masters, self.m_axi
        slaves = [self.slave(i) for i in range(n)]

        # ---- AW: round-robin grant, index to the W FIFO ------------------------
        m.submodules.aw_rr = aw_rr = RoundRobin(n)
        # The order FIFO holds each burst's master one-hot, and its head comes
        # from a register (SyncFIFOBuffered): the W selects and the ready
        # path back into the masters start at flip-flops, not at a LUT-RAM
        # read and an index compare.
        m.submodules.w_order = w_order = SyncFIFOBuffered(width=n, depth=self.w_fifo_depth)
        # A second copy of the order, kept inverted: its head selects the upper
        # half of the W beat's fields, so each head flip-flop drives half of
        # the W select's LUTs (a W beat is 64 + 8 + 1 bits wide on the board,
        # spread towards three masters). Stored differently, the two are not
        # merged by synthesis.
        m.submodules.w_order_inv = w_order_inv = SyncFIFOBuffered(width=n,
                                                                   depth=self.w_fifo_depth)
        m.d.comb += aw_rr.requests.eq(Cat(s.awvalid for s in slaves))
        _select(m, aw_rr.onehot, slaves, mst, _AW + ("awid",), self.index_bits)
        # Room in the order FIFO, as a flip-flop: at least two entries free in
        # the previous cycle leave at least one now (one AW per cycle), so
        # the AW handshake does not start at the FIFO's level through its
        # w_rdy compare (docs/timing.md#axi-arbiter). The FIFO still fills
        # up: from depth - 2 entries an AW in this cycle leaves room set for
        # the next one.
        aw_room = Signal(init=1)
        m.d.sync += aw_room.eq(w_order.level < self.w_fifo_depth - 1)
        m.d.comb += mst.awvalid.eq(aw_rr.valid & aw_room)
        for i, s in enumerate(slaves):
            m.d.comb += s.awready.eq(aw_rr.onehot[i] & mst.awready & aw_room)
        aw_fire = mst.awvalid & mst.awready
        m.d.comb += [
            aw_rr.advance.eq(aw_fire),
            w_order.w_en.eq(aw_fire),
            w_order.w_data.eq(aw_rr.onehot),
            w_order_inv.w_en.eq(aw_fire),
            w_order_inv.w_data.eq(~aw_rr.onehot),
        ]

        # ---- W: from the master at the head of the AW order --------------------
        # W's data fields select on the FIFO's head register alone (its value
        # while the FIFO is empty does not matter: WVALID is low): no LUT of
        # r_rdy in front of the wide W data select. Only WVALID and WREADY
        # wait on r_rdy.
        w_head = Signal(n)
        m.d.comb += w_head.eq(w_order.r_data & Cat(*[w_order.r_rdy] * n))
        w_fields = Cat(getattr(mst, f) for f in _W)
        half = len(w_fields) // 2
        for select, part in ((w_order.r_data, slice(0, half)),
                             (~w_order_inv.r_data, slice(half, None))):
            m.d.comb += w_fields[part].eq(one_hot_select(
                select, [Cat(getattr(s, f) for f in _W)[part] for s in slaves]))
        m.d.comb += mst.wvalid.eq(one_hot_select(w_head, [s.wvalid for s in slaves]))
        for i, s in enumerate(slaves):
            m.d.comb += s.wready.eq(w_head[i] & mst.wready)
        m.d.comb += [w_order.r_en.eq(mst.wvalid & mst.wready & mst.wlast),
                     w_order_inv.r_en.eq(w_order.r_en)]

        # ---- B: routed by the ID's index bits -------------------------------------
        b_index = mst.bid[self.id_width :]
        for i, s in enumerate(slaves):
            m.d.comb += [s.bid.eq(mst.bid[: self.id_width]), s.bresp.eq(mst.bresp)]
            with m.If(b_index == i):
                m.d.comb += [s.bvalid.eq(mst.bvalid), mst.bready.eq(s.bready)]

        # ---- AR: round-robin grant ------------------------------------------------
        m.submodules.ar_rr = ar_rr = RoundRobin(n)
        m.d.comb += ar_rr.requests.eq(Cat(s.arvalid for s in slaves))
        _select(m, ar_rr.onehot, slaves, mst, _AR + ("arid",), self.index_bits)
        m.d.comb += mst.arvalid.eq(ar_rr.valid)
        for i, s in enumerate(slaves):
            m.d.comb += s.arready.eq(ar_rr.onehot[i] & mst.arready)
        m.d.comb += ar_rr.advance.eq(mst.arvalid & mst.arready)

        # ---- R: routed by the ID's index bits -------------------------------------
        r_index = mst.rid[self.id_width :]
        for i, s in enumerate(slaves):
            m.d.comb += [
                s.rid.eq(mst.rid[: self.id_width]),
                s.rdata.eq(mst.rdata),
                s.rresp.eq(mst.rresp),
                s.rlast.eq(mst.rlast),
            ]
            with m.If(r_index == i):
                m.d.comb += [s.rvalid.eq(mst.rvalid), mst.rready.eq(s.rready)]
        return m



def _select(m, onehot, slaves, mst, fields, index_bits):
    """``mst``'s request fields = the granted slave's (``one_hot_select``); the
    ID gets the slave's index in its top bits."""
    for f in fields:
        values = [getattr(s, f) for s in slaves]
        if f in ("awid", "arid"):
            values = [Cat(v, Const(i, index_bits)) for i, v in enumerate(values)]
        m.d.comb += getattr(mst, f).eq(one_hot_select(onehot, values))

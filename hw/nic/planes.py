"""The NIC's planes: ``num_planes`` MAC ports, one per plane of the fabric.

``PlaneSplit`` sends each TX frame to the MAC of the plane its path chose;
``PlaneMerge`` joins the planes' RX frames into the one RX pipeline, each
tagged with the plane it came on.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.arbiter import AXIStreamArbiter
from hw.bits import bit_at, lowest_set, onehot
from hw.protocol import MAX_PLANES, PLANE_BITS
from hw.stream import AXIStreamSignature, check_data_width

__all__ = ["PlaneSplit", "PlaneMerge", "up_plane"]


def _check(block, data_width, num_planes):
    """Refuse parameters the blocks do not support, saying what to fix."""
    try:
        check_data_width(data_width)
        if not isinstance(num_planes, int) or not 2 <= num_planes <= MAX_PLANES:
            raise ValueError(f"num_planes must be in 2..{MAX_PLANES}, not {num_planes!r} "
                             "(a NIC with one plane needs neither block)")
    except ValueError:
        block._MustUse__silence = True  # never elaborated: no "never used" warning
        raise


class PlaneSplit(wiring.Component):
    """Routes each frame of one AXI4-Stream to the output of its plane, whole frames at a time.

    Interface
    ---------
    ``s_axis``                      In(AXIStreamSignature(data_width, PLANE_BITS)):
                                    ``tuser`` of a frame's first beat is its plane;
                                    later beats' ``tuser`` is ignored.
    ``m_axis0`` .. ``m_axis{n-1}``  Out(AXIStreamSignature(data_width, 1)), ``tuser`` 0.
    ``link_up``                     In(num_planes): bit p high while plane p's link is up
                                    (in this block's clock domain).
    ``dropped``                     Out(1): one cycle per discarded frame, as its first
                                    beat is taken.

    A frame's route is decided in the cycle its first beat is first offered
    and holds until its beat with ``tlast`` is taken. It goes to output
    ``plane``, or is consumed and discarded (``tready`` high, no output
    offered) if ``plane >= num_planes`` or ``link_up[plane]`` is low at that
    cycle: a MAC with its link down discards, and the NIC must never stall on
    a dead port. A link that drops mid-frame (or while a routed first beat
    waits) does not cut the frame; its MAC discards what it cannot send.

    A MAC whose link is up but whose ``tready`` stays low stalls the split,
    and with it every plane, at that plane's next frame: ``link_up`` is how a
    dead port is taken out of the way.

    Each output's ``tvalid`` is ``s_axis.tvalid`` and the route (registered,
    or the first beat's ``tuser`` and ``link_up``), never another output's
    ``tready``; ``s_axis.tready`` is the routed output's ``tready``, or 1 for
    a discarded frame. A beat offered on an output stays until taken.

    Latency: 0 (combinational pass-through). Throughput: 1 beat per cycle,
    with no idle cycle between frames.
    """

    def __init__(self, data_width=64, num_planes=2):
        _check(self, data_width, num_planes)
        self.num_planes = num_planes
        members = {
            "s_axis": In(AXIStreamSignature(data_width, PLANE_BITS)),
            "link_up": In(num_planes),
            "dropped": Out(1),
        }
        for p in range(num_planes):
            members[f"m_axis{p}"] = Out(AXIStreamSignature(data_width, 1))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        n = self.num_planes
        src = self.s_axis
        outputs = [getattr(self, f"m_axis{p}") for p in range(n)]

        # held: the frame's route is decided (its first beat was offered, its
        # last beat is not yet taken). route: that decision, one-hot; all zero
        # means discard.
        held = Signal()
        route = Signal(n)
        # A plane number >= n matches no output, which discards the frame.
        first_route = Signal(n)
        m.d.comb += first_route.eq(onehot(src.tuser, n) & self.link_up)
        sel = Signal(n)
        m.d.comb += sel.eq(Mux(held, route, first_route))
        discard = ~sel.any()

        for p, out in enumerate(outputs):
            m.d.comb += [
                out.tdata.eq(src.tdata),
                out.tkeep.eq(src.tkeep),
                out.tlast.eq(src.tlast),
                out.tuser.eq(0),
                out.tvalid.eq(src.tvalid & sel[p]),
            ]
        m.d.comb += src.tready.eq(discard | (Cat(out.tready for out in outputs) & sel).any())
        # A discarded first beat is taken the cycle it is offered (tready is 1).
        m.d.comb += self.dropped.eq(src.tvalid & ~held & discard)

        with m.If(src.tvalid):
            m.d.sync += held.eq(~(src.tready & src.tlast))
            with m.If(~held):
                m.d.sync += route.eq(first_route)
        return m


class PlaneMerge(wiring.Component):
    """Merges the planes' RX frames into one AXI4-Stream, whole frames, round robin.

    Interface
    ---------
    ``s_axis0`` .. ``s_axis{n-1}``  In(AXIStreamSignature(data_width, 1)): plane p's
                                    MAC; ``tuser`` on the last beat marks a bad frame.
    ``m_axis``                      Out(AXIStreamSignature(data_width, 1 + PLANE_BITS)):
                                    ``tuser[0]`` is the input's ``tuser``, ``tuser[1:]``
                                    the plane the frame came on, on every beat.

    It is ``AXIStreamArbiter`` with the plane appended to ``tuser``: between
    frames the grant goes round robin to the next input with a frame, so
    with every plane busy the planes alternate, and a frame waits at most
    ``num_planes - 1`` frames of the other planes.

    Rules for the MACs feeding it (the merge cannot hold back a MAC's
    receiver, so these are what keeps it from overflowing):

    * the core's beat rate (``data_width`` x clock) must be at least the sum
      of the planes' line rates;
    * each plane's MAC must buffer at least ``num_planes - 1`` frames of its
      largest size beyond the frame that waits, for what it receives while
      the other planes are served.

    Latency: 1 cycle from an idle merge's input ``tvalid`` to ``m_axis`` (the
    grant), then 0. Throughput: 1 beat per cycle, no idle cycle between
    frames while the next frame is waiting.
    """

    def __init__(self, data_width=64, num_planes=2):
        _check(self, data_width, num_planes)
        self.num_planes = num_planes
        members = {f"s_axis{p}": In(AXIStreamSignature(data_width, 1))
                   for p in range(num_planes)}
        members["m_axis"] = Out(AXIStreamSignature(data_width, 1 + PLANE_BITS))
        self._data_width = data_width
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        n = self.num_planes
        width = PLANE_BITS
        m.submodules.arbiter = arb = AXIStreamArbiter(
            self._data_width, n, user_width=1 + width)
        for p in range(n):
            mac, port = getattr(self, f"s_axis{p}"), getattr(arb, f"s_axis{p}")
            m.d.comb += [
                port.tdata.eq(mac.tdata),
                port.tkeep.eq(mac.tkeep),
                port.tlast.eq(mac.tlast),
                port.tuser.eq(Cat(mac.tuser, Const(p, width))),
                port.tvalid.eq(mac.tvalid),
                mac.tready.eq(port.tready),
            ]
        wiring.connect(m, wiring.flipped(self.m_axis), arb.m_axis)
        return m


def up_plane(plane, link_up):
    """``plane`` if its bit of ``link_up`` is set, else the lowest plane whose
    link is up (``plane`` if none is): the plane for a frame that may leave on
    any plane but prefers ``plane`` (an ACK: its data's arrival plane)."""
    any_up, first = lowest_set(link_up)
    return Mux(bit_at(link_up, plane) | ~any_up, plane, first)

"""The reliability core's probe rounds: one probe request per ASSUMED_BAD EV of every
QP in RTS, per round. See ``ProbeSweep``."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.bits import lowest_index, onehot

from .probe import ProbeRequest

__all__ = ["ProbeSweep"]


class ProbeSweep(wiring.Component):
    """A probe round's sweep over the QPs, for the core's state machine, which takes
    one QP at a time (its SWEEP and SWEEP_EMIT states).

    ``tick`` (registered first: the round starts a cycle later) starts a round when
    none is pending: the round number (``round``) moves, so that all of the round's
    probes carry it, ``pending`` rises with the QP to sweep (``qpn``) at 0, and
    ``sweeping`` rises. Each ``taken`` (the core takes the sweep event of QP
    ``qpn``) moves to the next QP; the last QP's clears ``pending``. For the QP
    taken, ``load`` (SWEEP) loads the EVs to probe (``evs``: its ASSUMED_BAD EVs,
    none unless the QP is in RTS), then ``emit`` (SWEEP_EMIT, one cycle per EV and
    a last one) pushes a request for the lowest EV left per cycle with ``room``
    (``push``, a flip-flop decided the cycle before from the EVs left and ``room``)
    until ``done`` (none left: the core leaves SWEEP_EMIT). ``sweeping`` falls when
    the last QP's requests are queued (unless a round starts in that cycle).
    Precondition: ticks come further apart than a sweep takes. A tick while the
    last QP's requests are being queued starts the next round at once, and those
    requests then carry the new round's number (the engine's probe period, in the
    thousands of cycles, is far longer than a sweep).

    Interface: ``tick``, ``taken``, ``load``, ``emit``: In(1); ``evs``: In(evs);
    ``room``: In(1), the probe request FIFO has room (as the core's other FIFOs, 3
    free entries, so that the registered ``push`` finds one); ``qp``: In, the QP
    loaded; ``pending``, ``qpn``, ``round`` (24), ``sweeping``, ``done``: Out;
    ``push``, ``req`` (``ProbeRequest``: the QP, the EV, ``probe_id`` = round << 8
    | EV): Out, the probe request FIFO's write.

    Latency: a round starts 2 cycles after ``tick``; a QP's first request is pushed
    the cycle after ``load``. Throughput: one request per cycle.
    """

    def __init__(self, *, num_qps, evs):
        self.num_qps, self.num_evs = num_qps, evs
        super().__init__({
            "tick": In(1), "taken": In(1), "load": In(1), "emit": In(1),
            "evs": In(evs), "room": In(1), "qp": In(range(num_qps)),
            "pending": Out(1), "qpn": Out(range(num_qps)), "round": Out(24),
            "sweeping": Out(1), "done": Out(1),
            "push": Out(1), "req": Out(ProbeRequest(num_qps, evs)),
        })

    def elaborate(self, platform):
        m = Module()
        nq, E = self.num_qps, self.num_evs
        # the tick registered first: it comes from the engine's period counter (a
        # compare), and the round starts a cycle later
        tick_q = Signal()
        m.d.sync += tick_q.eq(self.tick)
        # a round's number moves as it starts, so that all of its probes carry it
        with m.If(tick_q & ~self.pending):
            m.d.sync += [self.pending.eq(1), self.qpn.eq(0), self.sweeping.eq(1),
                         self.round.eq(self.round + 1)]
        with m.If(self.taken):
            m.d.sync += [self.qpn.eq(self.qpn + 1), self.pending.eq(self.qpn != nq - 1)]

        # the EVs left to probe for the QP loaded, the lowest first
        pmask = Signal(E)
        probe_ev = lowest_index(m, pmask, E, "probe_ev")
        pmask_next = Signal(E)
        m.d.sync += self.push.eq(0)
        m.d.comb += [
            pmask_next.eq(pmask & ~Mux(self.push, onehot(probe_ev, E), 0)),
            self.req.qpn.eq(self.qp), self.req.ev_index.eq(probe_ev),
            self.req.probe_id.eq(Cat(Const(0, 8) | probe_ev, self.round)),
            self.done.eq(pmask == 0),
        ]
        with m.If(self.load):
            m.d.sync += [pmask.eq(self.evs), self.push.eq((self.evs != 0) & self.room)]
        with m.If(self.emit):
            m.d.sync += [pmask.eq(pmask_next), self.push.eq((pmask_next != 0) & self.room)]
            # the last QP's probes queued: the round is sent (unless the next one
            # starts in this cycle)
            with m.If((pmask == 0) & ~self.pending & ~tick_q):
                m.d.sync += self.sweeping.eq(0)
        return m

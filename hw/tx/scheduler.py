"""The TX sequencer's choices: which QP sends next (``QpScheduler``) and on
which EV (``EvChoice``)."""

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .arbiter import RoundRobin, round_robin

__all__ = ["QpScheduler", "EvChoice"]


class QpScheduler(wiring.Component):
    """Round robin over the QPs that can send.

    Interface: per QP (one bit per QP, QP 0's lowest) ``enable``,
    ``wqe_active`` (a WQE is part sent), ``wqe_ready`` (the QP's next WQE is
    in the prefetch buffer, ``WqePrefetch``), and the park flags
    ``win_blocked``, ``ev_blocked``, ``op_halt``, ``wimm_park`` (parked for
    its max_wimm) with WimmBound's ``at_bound``; out ``valid``/``grant``, the
    QP to serve, and ``next``, in: the grant was taken (the search starts
    above it next). ``wimm_wait``: the QPs parked for their max_wimm that are
    still at their bound.

    A QP is a candidate while it is enabled, has work (``wqe_active`` or
    ``wqe_ready``) and is not parked (window, EV, opcode halt, max_wimm).

    Latency: ``wimm_wait`` follows ``wimm_park`` and ``at_bound`` one cycle
    later (a QP picked again in that cycle parks again); the other flags
    reach ``valid``/``grant`` in the same cycle. Throughput: one grant per
    cycle.
    """

    def __init__(self, num_qps: int):
        self.num_qps = num_qps
        super().__init__({
            "enable": In(num_qps),
            "wqe_active": In(num_qps),
            "wqe_ready": In(num_qps),
            "win_blocked": In(num_qps),
            "ev_blocked": In(num_qps),
            "op_halt": In(num_qps),
            "wimm_park": In(num_qps),
            "at_bound": In(num_qps),
            "wimm_wait": Out(num_qps),
            "valid": Out(1),
            "grant": Out(max(1, (num_qps - 1).bit_length())),
            "next": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        nq = self.num_qps
        wimm_wait = Signal(nq)
        m.d.sync += wimm_wait.eq(self.wimm_park & self.at_bound)
        m.d.comb += self.wimm_wait.eq(wimm_wait)
        m.submodules.rr = rr = RoundRobin(nq)
        m.d.comb += [
            rr.requests.eq(self.enable & (self.wqe_active | self.wqe_ready) & ~self.win_blocked
                           & ~self.ev_blocked & ~self.op_halt & ~wimm_wait),
            rr.next.eq(self.next),
            self.valid.eq(rr.valid),
            self.grant.eq(rr.grant),
        ]
        return m


class EvChoice(wiring.Component):
    """The EV of the next packet: the next GOOD EV after the QP's cursor; a
    retransmission's avoids ``avoid`` (the EV it last used) unless that is
    the only GOOD one.

    Interface: ``good`` (the QP's GOOD bitmap), ``cursor`` (the EV its last
    packet used), ``retx``, ``avoid`` in; ``found`` (some EV is GOOD) and
    ``index`` (meaningful with ``found``) out. Latency 0 (combinational);
    one choice per cycle.
    """

    def __init__(self, evs_per_qp: int):
        self.evs_per_qp = evs_per_qp
        eb = max(1, (evs_per_qp - 1).bit_length())
        super().__init__({
            "good": In(evs_per_qp),
            "cursor": In(eb),
            "retx": In(1),
            "avoid": In(eb),
            "found": Out(1),
            "index": Out(eb),
        })

    def elaborate(self, platform):
        m = Module()
        ne, good = self.evs_per_qp, self.good
        avoid = Mux(self.retx, Const(1, ne) << self.avoid, 0)[:ne]
        usable = Mux((good & ~avoid).any(), good & ~avoid, good)
        found, index = round_robin(m, usable, self.cursor)
        m.d.comb += [self.found.eq(found), self.index.eq(index)]
        return m

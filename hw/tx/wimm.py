"""WimmBound: per QP, the WRITE_WITH_IMM messages started and not yet completed,
held against the QP's ``max_wimm`` (docs/tx.md, "The max_wimm bound")."""

from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .layouts import WimmDone

__all__ = ["WimmBound", "WimmBusSignature", "wimm_widths"]


def wimm_widths(inflight_depth):
    """(bits of a QP's bound, bits of its count). A bound is at most the in-flight
    table's size (a message takes at least one PSN in flight); the count has one
    bit more, for the completions still on their way from reliability."""
    db = inflight_depth.bit_length() - 1
    return db + 1, db + 2


def WimmBusSignature(num_qps, inflight_depth):
    """The sequencer's side of ``WimmBound`` (Out from the sequencer).

    ``start``/``start_qp``: the first packet of a WITH_IMMEDIATE WQE was
    committed (one pulse per WQE, never for a retransmission); ``clear``: per
    QP, the count goes to 0 (qp_ctrl reset or flush, and the sequencer's
    INIT); ``limit_we``/``limit_q``/``limit_data``: a write of a QP's
    ``qp_max_wimm``; ``rd_q``: the QP whose count ``rd_count`` gives the
    cycle after; ``at_bound`` (In): per QP, count >= max_wimm != 0."""
    qb = max(1, (num_qps - 1).bit_length())
    _, cw = wimm_widths(inflight_depth)
    return wiring.Signature({
        "start": Out(1),
        "start_qp": Out(qb),
        "clear": Out(num_qps),
        "limit_we": Out(1),
        "limit_q": Out(qb),
        "limit_data": Out(16),
        "rd_q": Out(qb),
        "rd_count": In(cw),
        "at_bound": In(num_qps),
    })


class WimmBound(wiring.Component):
    """Per QP: how many WRITE_WITH_IMM messages TX started and reliability has
    not completed, and whether that reaches the QP's ``max_wimm``.

    Interface: ``bus`` (In(WimmBusSignature)), the sequencer's; ``done``
    In(stream(WimmDone)), always ready: a WITH_IMMEDIATE WQE of ``qpn``
    completed SUCCESS (reliability's completion writer; a QPN at or above
    ``num_qps`` is ignored).

    The count of a QP goes up at ``start``, down at ``done`` (not below 0,
    not above its width's maximum) and to 0 at ``clear``. A bound of 0 (the
    reset value) is no bound; a written bound above ``inflight_depth`` is
    kept as ``inflight_depth``. ``at_bound[q]`` is count >= bound.

    Latency: inputs are registered (one-hot per QP), the counts update the
    cycle after, and ``at_bound`` is registered from them: a start or done
    shows in ``at_bound`` 3 cycles later, a bound write 2 cycles later.
    ``rd_count`` is registered from ``rd_q``. Every per-QP enable is a
    flip-flop; the deepest logic is a count's +-1 and its compare.
    Throughput: a start and a done every cycle.
    """

    def __init__(self, num_qps=16, inflight_depth=256):
        self.num_qps = num_qps
        self.inflight_depth = inflight_depth
        super().__init__({
            "bus": In(WimmBusSignature(num_qps, inflight_depth)),
            "done": In(stream.Signature(WimmDone)),
        })

    def elaborate(self, platform):
        m = Module()
        nq, depth = self.num_qps, self.inflight_depth
        lw, cw = wimm_widths(depth)
        qb = max(1, (nq - 1).bit_length())
        bus, done = self.bus, self.done
        m.d.comb += done.ready.eq(1)

        inc = Signal(nq)
        dec = Signal(nq)
        clr = Signal(nq)
        lim_we = Signal(nq)
        lim_data = Signal(lw)
        data = bus.limit_data
        over = (data[lw:] != 0) | (data[lw - 1] & (data[: lw - 1] != 0))
        done_ok = done.valid & (done.payload.qpn < nq)
        m.d.sync += [
            inc.eq(Cat(*[bus.start & (bus.start_qp == i) for i in range(nq)])),
            dec.eq(Cat(*[done_ok & (done.payload.qpn[:qb] == i) for i in range(nq)])),
            clr.eq(bus.clear),
            lim_we.eq(Cat(*[bus.limit_we & (bus.limit_q == i) for i in range(nq)])),
            lim_data.eq(Mux(over, depth, data[:lw])),
        ]
        counts = [Signal(cw, name=f"count{i}") for i in range(nq)]
        limits = [Signal(lw, name=f"limit{i}") for i in range(nq)]
        at_bound = Signal(nq)
        top = (1 << cw) - 1
        for i, (count, limit) in enumerate(zip(counts, limits, strict=True)):
            with m.If(clr[i]):
                m.d.sync += count.eq(0)
            with m.Elif(inc[i] & ~dec[i] & (count != top)):
                m.d.sync += count.eq(count + 1)
            with m.Elif(dec[i] & ~inc[i] & (count != 0)):
                m.d.sync += count.eq(count - 1)
            with m.If(lim_we[i]):
                m.d.sync += limit.eq(lim_data)
            m.d.sync += at_bound[i].eq((limit != 0) & ~(count < limit))
        rd_count = Signal(cw)
        m.d.sync += rd_count.eq(Array(counts)[bus.rd_q])
        m.d.comb += [bus.at_bound.eq(at_bound), bus.rd_count.eq(rd_count)]
        return m

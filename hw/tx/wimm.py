"""WimmBound: per QP, the WRITE_WITH_IMM messages started and not yet completed,
held against the QP's ``max_wimm`` (docs/tx.md, "The max_wimm bound")."""

from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .layouts import WimmDone
from .psn_table import RAM_QPS

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
    committed (one pulse per WQE, never for a retransmission; at least two
    cycles apart); ``clear``: per QP, the count goes to 0 (qp_ctrl reset or
    flush, and the sequencer's INIT), given again as ``clear_stb`` with
    ``clear_q``; ``limit_we``/``limit_q``/``limit_data``: a write of a QP's
    ``qp_max_wimm`` (INIT's with a clear of the same QP); ``rd_q``: the QP
    whose count ``rd_count`` gives the cycle after; ``at_bound`` (In): per
    QP, count >= max_wimm != 0. Clears and bound writes come at least three
    cycles apart, but INIT's."""
    qb = max(1, (num_qps - 1).bit_length())
    _, cw = wimm_widths(inflight_depth)
    return wiring.Signature({
        "start": Out(1),
        "start_qp": Out(qb),
        "clear": Out(num_qps),
        "clear_stb": Out(1),
        "clear_q": Out(qb),
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

    Up to ``RAM_QPS`` QPs the counts and bounds are flip-flops (``clear``
    one-hot); above it, RAM rows (``clear_stb``/``clear_q``), with
    ``at_bound`` still one flip-flop per QP.

    Flip-flops. Latency: inputs are registered (one-hot per QP), the counts
    update the cycle after, and ``at_bound`` is registered from them: a
    start or done shows in ``at_bound`` 3 cycles later, a bound write 2
    cycles later. ``rd_count`` is registered from ``rd_q``. Every per-QP
    enable is a flip-flop; the deepest logic is a count's +-1 and its
    compare. Throughput: a start and a done every cycle.

    RAM rows. One change of one row per cycle: a clear or bound write
    first, then a start, then a done; the others wait in a register of
    their own (a start at most a cycle, a done at most two: ``done`` pulses
    come at least three cycles apart, the completion writer's at least
    nine; INIT's clears, one a cycle, come while nothing completes). The
    row is read in the change's cycle (a transparent port: it has the
    change of the cycle before), written the next, and ``at_bound`` is
    registered with the write: a start or done shows in ``at_bound`` 2
    cycles later (3 or 4 after waiting), a bound write 2 cycles later.
    ``rd_count`` is the row at ``rd_q`` of the cycle before.
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
        m.d.comb += self.done.ready.eq(1)
        if self.num_qps > RAM_QPS:
            self._ram_rows(m)
            return m
        nq, depth = self.num_qps, self.inflight_depth
        lw, cw = wimm_widths(depth)
        qb = max(1, (nq - 1).bit_length())
        bus, done = self.bus, self.done

        inc = Signal(nq)
        dec = Signal(nq)
        clr = Signal(nq)
        lim_we = Signal(nq)
        lim_data = Signal(lw)
        done_ok = done.valid & (done.payload.qpn < nq)
        m.d.sync += [
            inc.eq(Cat(*[bus.start & (bus.start_qp == i) for i in range(nq)])),
            dec.eq(Cat(*[done_ok & (done.payload.qpn[:qb] == i) for i in range(nq)])),
            clr.eq(bus.clear),
            lim_we.eq(Cat(*[bus.limit_we & (bus.limit_q == i) for i in range(nq)])),
            lim_data.eq(self._bound(bus.limit_data)),
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

    def _bound(self, value):
        """A written ``qp_max_wimm``, kept as at most ``inflight_depth``."""
        lw, _ = wimm_widths(self.inflight_depth)
        over = (value[lw:] != 0) | (value[lw - 1] & (value[: lw - 1] != 0))
        return Mux(over, self.inflight_depth, value[:lw])

    def _ram_rows(self, m):
        """The counts and bounds in RAM rows, one row changed per cycle."""
        nq = self.num_qps
        lw, cw = wimm_widths(self.inflight_depth)
        qb = max(1, (nq - 1).bit_length())
        bus, done = self.bus, self.done
        row_layout = data.StructLayout({"count": cw, "limit": lw})
        m.submodules.rows = rows = Memory(shape=row_layout, depth=nq, init=[])
        w = rows.write_port()
        r = rows.read_port(transparent_for=(w,))
        rd = rows.read_port(transparent_for=(w,))
        m.d.comb += [rd.addr.eq(bus.rd_q), bus.rd_count.eq(rd.data.count)]

        # the changes waiting: a start, a done
        s_wait, d_wait = Signal(), Signal()
        s_q, d_q = Signal(qb), Signal(qb)
        with m.If(bus.start & ~s_wait):
            m.d.sync += s_q.eq(bus.start_qp)
        with m.If(done.valid & ~d_wait):
            m.d.sync += d_q.eq(done.payload.qpn[:qb])
        csr = bus.clear_stb | bus.limit_we
        start = bus.start | s_wait
        done_ok = (done.valid & (done.payload.qpn < nq)) | d_wait
        m.d.sync += [s_wait.eq(start & csr), d_wait.eq(done_ok & (csr | start))]

        # the change of this cycle, registered with the row's read
        c_valid, c_clear, c_limit, c_inc, c_dec = Signal(), Signal(), Signal(), Signal(), Signal()
        c_q = Signal(qb)
        c_bound = Signal(lw)
        q = Mux(csr, Mux(bus.clear_stb, bus.clear_q, bus.limit_q),
                Mux(start, Mux(s_wait, s_q, bus.start_qp),
                    Mux(d_wait, d_q, done.payload.qpn[:qb])))
        m.d.comb += r.addr.eq(q)
        m.d.sync += [
            c_valid.eq(csr | start | done_ok),
            c_clear.eq(bus.clear_stb),
            c_limit.eq(bus.limit_we),
            c_inc.eq(~csr & start),
            c_dec.eq(~csr & ~start & done_ok),
            c_q.eq(q),
            c_bound.eq(self._bound(bus.limit_data)),
        ]
        row = r.data
        count = Signal(cw)
        limit = Signal(lw)
        top = (1 << cw) - 1
        m.d.comb += [
            count.eq(Mux(c_clear, 0,
                         Mux(c_inc & (row.count != top), row.count + 1,
                             Mux(c_dec & (row.count != 0), row.count - 1, row.count)))),
            limit.eq(Mux(c_limit, c_bound, row.limit)),
            w.addr.eq(c_q),
            w.data.count.eq(count),
            w.data.limit.eq(limit),
            w.en.eq(c_valid),
        ]
        at_bound = Signal(nq)
        with m.If(c_valid):
            m.d.sync += at_bound.bit_select(c_q, 1).eq((limit != 0) & ~(count < limit))
        m.d.comb += bus.at_bound.eq(at_bound)

"""RingRows: each QP's send-ring indices and EV cursor in RAM rows, for the
TX sequencer above ``RAM_QPS`` QPs (hw/tx/qp_flags.py holds them in
flip-flops up to it)."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

__all__ = ["RingRows"]


class RingRows(wiring.Component):
    """Per QP: the ring's producer and consumer indices (``pi``, ``ci``, 16
    bits each) in two RAMs, a flag "the ring holds a WQE" (``pi != ci``) in a
    flip-flop, and the last EV (the EV cursor) in a third RAM.

    Interface:

    - ``take``/``take_q``: the sequencer's TAKE consumed QP ``take_q``'s WQE
      at ``ci`` (``ci`` moves on by one). At least two cycles apart.
    - ``w_q`` with ``w_init`` (INIT's zeroing of the row: both indices 0,
      the cursor ``evs_per_qp - 1``), ``w_doorbell`` (``pi`` := ``w_pi``) or
      ``w_reset`` (``ci`` := ``pi``: the ring is empty from the doorbell on):
      the decode's registered per-QP writes, at most one per cycle, at least
      three cycles apart but INIT's (which come with no take).
    - ``ne``: per QP, ``pi != ci`` (QP 0 lowest).
    - ``cur_q_next`` -> ``cur_ci``, ``cur_cursor``: the row of the QP given
      the cycle before (the sequencer's ``cur_q_next``, the value ``cur_q``
      takes, so these are ``cur_q``'s from the cycle it is set).
    - ``cursor_we``/``cursor_q``/``cursor_data``: EMIT's write of the EV
      cursor (never in INIT).
    - ``ring_q`` -> ``ring_ci`` (and, with ``ring_pi``, ``ring_pi``): ``ci``
      (``pi``) of the QP given the cycle before (the WQE prefetch's).
    - ``csr_q`` -> ``csr_pi``, ``csr_ci``: the CSR reads', likewise.

    Every read port is synchronous and transparent, so a row read in a cycle
    has that cycle's writes, and the rows can be block RAM.

    Updates go through one two-stage pipeline: a write or a take is chosen
    and its rows read (stage 0), then the new indices written and ``ne``
    set from them (stage 1, the cycle after). A decode write goes first; a
    take that meets one waits a cycle in a register. Latency: a write's
    indices and ``ne`` land at the end of the cycle after its strobe (so a
    CSR read whose address comes that cycle or later sees them: the
    decode's strobes come two cycles after ``w_stb``, a read's ``r_stb``
    three or more); a take's the cycle after it, or the one after that when
    it waits (so the prefetch, which picks the QP the cycle after the take
    at the earliest and reads its ``ci`` two cycles later, reads the moved
    index); a cursor write (EMIT's, INIT's) at the end of its own cycle.
    Throughput: one update per cycle.
    """

    def __init__(self, num_qps: int, evs_per_qp: int, *, ring_pi: bool = False):
        self.num_qps, self.evs_per_qp = num_qps, evs_per_qp
        self.has_ring_pi = ring_pi
        qb = max(1, (num_qps - 1).bit_length())
        eb = max(1, (evs_per_qp - 1).bit_length())
        super().__init__({
            "take": In(1),
            "take_q": In(qb),
            "w_q": In(qb),
            "w_init": In(1),
            "w_doorbell": In(1),
            "w_reset": In(1),
            "w_pi": In(16),
            "ne": Out(num_qps),
            "cur_q_next": In(qb),
            "cur_ci": Out(16),
            "cur_cursor": Out(eb),
            "cursor_we": In(1),
            "cursor_q": In(qb),
            "cursor_data": In(eb),
            "ring_q": In(qb),
            "ring_ci": Out(16),
            **({"ring_pi": Out(16)} if ring_pi else {}),
            "csr_q": In(qb),
            "csr_pi": Out(16),
            "csr_ci": Out(16),
        })

    def elaborate(self, platform):
        m = Module()
        nq = self.num_qps
        qb = len(self.take_q)
        m.submodules.pi_mem = pi_mem = Memory(shape=16, depth=nq, init=[])
        m.submodules.ci_mem = ci_mem = Memory(shape=16, depth=nq, init=[])
        pi_w, ci_w = pi_mem.write_port(), ci_mem.write_port()

        def read(mem, port_w, addr):
            port = mem.read_port(transparent_for=(port_w,))
            m.d.comb += port.addr.eq(addr)
            return port.data

        m.d.comb += [
            self.cur_ci.eq(read(ci_mem, ci_w, self.cur_q_next)),
            self.ring_ci.eq(read(ci_mem, ci_w, self.ring_q)),
            *([self.ring_pi.eq(read(pi_mem, pi_w, self.ring_q))] if self.has_ring_pi else []),
            self.csr_pi.eq(read(pi_mem, pi_w, self.csr_q)),
            self.csr_ci.eq(read(ci_mem, ci_w, self.csr_q)),
        ]

        # stage 0: the update of this cycle, its rows read
        w_stb = self.w_init | self.w_doorbell | self.w_reset
        take_wait = Signal()
        wait_q = Signal(qb)
        take_any = self.take | take_wait
        take_at = Mux(take_wait, wait_q, self.take_q)
        with m.If(self.take):
            m.d.sync += wait_q.eq(self.take_q)
        m.d.sync += take_wait.eq(take_any & w_stb)
        u_q = Mux(w_stb, self.w_q, take_at)
        u_pi, u_ci = read(pi_mem, pi_w, u_q), read(ci_mem, ci_w, u_q)

        # stage 1: the new indices written, ne set from them
        s_valid, s_take, s_init, s_doorbell, s_reset = (
            Signal(name=n) for n in ("s_valid", "s_take", "s_init", "s_doorbell", "s_reset"))
        s_q = Signal(qb)
        s_pi = Signal(16)
        m.d.sync += [
            s_valid.eq(w_stb | take_any),
            s_take.eq(~w_stb & take_any),
            s_init.eq(self.w_init),
            s_doorbell.eq(self.w_doorbell),
            s_reset.eq(self.w_reset),
            s_q.eq(u_q),
            s_pi.eq(self.w_pi),
        ]
        new_pi = Mux(s_init, 0, Mux(s_doorbell, s_pi, u_pi))
        new_ci = Mux(s_init, 0, Mux(s_take, u_ci + 1, Mux(s_reset, u_pi, u_ci)))
        m.d.comb += [
            pi_w.addr.eq(s_q), pi_w.data.eq(new_pi), pi_w.en.eq(s_init | s_doorbell),
            ci_w.addr.eq(s_q), ci_w.data.eq(new_ci), ci_w.en.eq(s_init | s_take | s_reset),
        ]
        ne = Signal(nq)
        with m.If(s_valid):
            m.d.sync += ne.bit_select(s_q, 1).eq(new_pi != new_ci)
        m.d.comb += self.ne.eq(ne)

        # the EV cursors: EMIT's writes, INIT's
        m.submodules.cursor_mem = cursor_mem = Memory(shape=len(self.cur_cursor), depth=nq,
                                                      init=[])
        cur_w = cursor_mem.write_port()
        m.d.comb += [
            cur_w.addr.eq(Mux(self.w_init, self.w_q, self.cursor_q)),
            cur_w.data.eq(Mux(self.w_init, self.evs_per_qp - 1, self.cursor_data)),
            cur_w.en.eq(self.w_init | self.cursor_we),
            self.cur_cursor.eq(read(cursor_mem, cur_w, self.cur_q_next)),
        ]
        return m

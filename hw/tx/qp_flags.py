"""The Sequencer's per-QP state (hw/tx/sequencer.py): enables and park flags
in flip-flops, producer/consumer indices and EV cursors in flip-flops or RAM
rows (``RingRows``): ``QpFlags``."""

from amaranth.hdl import Array, Cat, Signal

from .psn_table import RAM_QPS
from .regs import CTRL_ENABLE_BIT, CTRL_RESET_BIT
from .ring_rows import RingRows

__all__ = ["QpFlags"]


class QpFlags:
    """What the scheduler looks at every cycle, per QP: ``enable``,
    ``wqe_active`` (a WQE is part sent), the park flags ``win_blocked``
    (window full), ``ev_blocked`` (no GOOD EV), ``op_halt`` (a WQE with an
    unknown opcode: no new work until the QP's qp_ctrl is written; its PSNs
    in flight are still retransmitted) and ``wimm_park`` (a WITH_IMMEDIATE
    WQE not begun, parked in SEGMENT for its max_wimm, waiting while
    ``WimmBound`` says the QP is at its bound: QpScheduler's ``wimm_wait``);
    ``pi``/``ci``, the ring's producer and consumer indices (``Array``s of
    16-bit registers); ``ev_cursor``, each QP's last EV. Above ``RAM_QPS``
    QPs the indices and cursors are RAM rows instead (``rows``, a
    ``RingRows``, with a flip-flop per QP for ``pi != ci``); the methods
    ``read_cur``, ``take``, ``set_cursor``, ``prefetch_inputs`` and
    ``csr_values`` give each user its view in either build.

    Not a component: the Sequencer's FSM writes these registers from its
    states, and ``apply_writes`` (built after the FSM's states) adds the
    unparks and the CSR writes, which override the FSM's writes of the same
    cycle."""

    def __init__(self, num_qps: int, evs_per_qp: int, *, read_ahead: int = 1):
        nq, ne = num_qps, evs_per_qp
        eb = max(1, (ne - 1).bit_length())
        self.enable = Signal(nq, name="enable")
        self.wqe_active = Signal(nq, name="wqe_active")
        self.win_blocked = Signal(nq, name="win_blocked")
        self.ev_blocked = Signal(nq, name="ev_blocked")
        self.op_halt = Signal(nq, name="op_halt")
        self.wimm_park = Signal(nq, name="wimm_park")
        self.ring_rows = nq > RAM_QPS
        if self.ring_rows:
            self.rows = RingRows(nq, ne, ring_pi=read_ahead > 1)
        else:
            self.pi = Array(Signal(16, name=f"pi{i}") for i in range(nq))
            self.ci = Array(Signal(16, name=f"ci{i}") for i in range(nq))
            self.ev_cursor = Array(Signal(eb, init=ne - 1, name=f"ev_cursor{i}")
                                   for i in range(nq))

    def read_cur(self, m, cur_q, cur_q_next, cur_ci, cur_cursor):
        """``cur_ci`` and ``cur_cursor`` driven with ``cur_q``'s index and EV
        cursor: its registers' mux, or the rows read at ``cur_q_next`` (the
        value ``cur_q`` takes), so they are ``cur_q``'s from the cycle it is
        set."""
        if self.ring_rows:
            m.submodules.ring_rows = rows = self.rows
            m.d.comb += [rows.cur_q_next.eq(cur_q_next), cur_ci.eq(rows.cur_ci),
                         cur_cursor.eq(rows.cur_cursor)]
        else:
            m.d.comb += [
                cur_ci.eq(self.ci[cur_q]),
                cur_cursor.eq(self.ev_cursor[cur_q]),
            ]

    def take(self, m, q, cur_ci):
        """TAKE consumed QP ``q``'s WQE at ``cur_ci``: its ``ci`` moves on by
        one (the rows' at the end of the next cycle, or the one after)."""
        if self.ring_rows:
            m.d.comb += [self.rows.take.eq(1), self.rows.take_q.eq(q)]
        else:
            m.d.sync += self.ci[q].eq(cur_ci + 1)

    def set_cursor(self, m, q, ev_index):
        """EMIT sets QP ``q``'s EV cursor."""
        if self.ring_rows:
            m.d.comb += [self.rows.cursor_we.eq(1), self.rows.cursor_q.eq(q),
                         self.rows.cursor_data.eq(ev_index)]
        else:
            m.d.sync += self.ev_cursor[q].eq(ev_index)

    def prefetch_inputs(self, pf):
        """``WqePrefetch``'s ring inputs: every QP's indices, or the rows' "ring
        not empty" flags and their ``ci`` (and, reading several WQEs ahead,
        ``pi``) read at the prefetch's ``ring_q``."""
        if self.ring_rows:
            rows = self.rows
            pi = [pf.ring_pi.eq(rows.ring_pi)] if rows.has_ring_pi else []
            return [pf.ring_ne.eq(rows.ne), pf.ring_ci.eq(rows.ring_ci),
                    rows.ring_q.eq(pf.ring_q), *pi]
        return [pf.pi.eq(Cat(*self.pi)), pf.ci.eq(Cat(*self.ci))]

    def csr_values(self, m, csr_q):
        """(``pi``, ``ci``) for ``TxCsrDecode``: every QP's, or the rows' at
        ``csr_q`` of the cycle before."""
        if self.ring_rows:
            m.d.comb += self.rows.csr_q.eq(csr_q)
            return self.rows.csr_pi, self.rows.csr_ci
        return Cat(*self.pi), Cat(*self.ci)

    def scheduler_inputs(self):
        """``QpScheduler``'s inputs that these registers drive, by port name."""
        return dict(enable=self.enable, wqe_active=self.wqe_active, win_blocked=self.win_blocked,
                    ev_blocked=self.ev_blocked, op_halt=self.op_halt, wimm_park=self.wimm_park)

    def apply_writes(self, m, qw, ack_apply, wb_clear, ev):
        """The unparks and CSR writes, built after the FSM's states so that they
        override its writes of the same cycle: ``ack_apply`` (PsnTable, per QP)
        and a qp_unpark write clear ``win_blocked`` and drive ``wb_clear`` (the
        window check's unparks this cycle); ``ev.became_good`` clears the QP's
        ``ev_blocked``, ``ev.link_rose`` every QP's; ``qw``
        (``TxCsrDecode.qp_w``): qp_ctrl sets ``enable`` and clears
        ``ev_blocked`` and ``op_halt``, qp_ctrl.reset empties the ring
        from the doorbell on and drops the part-sent WQE, reset and flush clear
        ``wimm_park``. The doorbell is applied by ``apply_doorbell``."""
        win_blocked, ev_blocked = self.win_blocked, self.ev_blocked
        for i in range(len(win_blocked)):
            with m.If(ack_apply[i]):
                m.d.sync += win_blocked[i].eq(0)
                m.d.comb += wb_clear[i].eq(1)
        with m.If(ev.link_rose):  # a plane is back: every stalled QP looks again
            m.d.sync += ev_blocked.eq(0)
        with m.Elif(ev.became_good):
            m.d.sync += ev_blocked.bit_select(ev.became_good_qp, 1).eq(0)

        with m.If(qw.unpark):
            m.d.sync += win_blocked.bit_select(qw.q, 1).eq(0)
            m.d.comb += wb_clear.bit_select(qw.q, 1).eq(1)
        with m.If(qw.ctrl):
            m.d.sync += [
                self.enable.bit_select(qw.q, 1).eq(qw.data[CTRL_ENABLE_BIT]),
                ev_blocked.bit_select(qw.q, 1).eq(0),
                self.op_halt.bit_select(qw.q, 1).eq(0),
            ]
        # qp_ctrl.reset (the QP's RESET, written with enable 0): the ring is empty from
        # the doorbell on (consumer = producer) and the part-sent WQE is dropped, so the
        # QP restarts where the host's next WQE goes.
        for i in range(len(win_blocked)):
            with m.If(qw.reset[i]):
                if not self.ring_rows:
                    m.d.sync += self.ci[i].eq(self.pi[i])
                m.d.sync += [self.wqe_active[i].eq(0), win_blocked[i].eq(0)]
            with m.If(qw.reset[i] | qw.flush[i]):
                m.d.sync += self.wimm_park[i].eq(0)

    def apply_doorbell(self, m, qw):
        """A doorbell write moves the QP's producer index. The rows take the
        decode's writes here too: INIT's zeroing, the doorbell, a reset's
        ``ci := pi``."""
        if self.ring_rows:
            rows = self.rows
            m.d.comb += [rows.w_q.eq(qw.q), rows.w_init.eq(qw.init),
                         rows.w_doorbell.eq(qw.doorbell),
                         rows.w_reset.eq(qw.ctrl & qw.data[CTRL_RESET_BIT]),
                         rows.w_pi.eq(qw.data[:16])]
            return
        with m.If(qw.doorbell):
            m.d.sync += self.pi[qw.q].eq(qw.data[:16])

"""Every QP's next and oldest unacknowledged PSN, and the acks that move the
latter: the TX sequencer's ``PsnTable``."""

from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..bits import onehot
from ..protocol import PSN_BITS
from .layouts import AckUpdate
from .qp_settings import registered_address

__all__ = ["PsnTable", "RAM_QPS"]

# Up to this many QPs TX's per-QP tables that have a RAM build (this one and
# hw/tx/wimm.py's WimmBound) are flip-flops; above it, RAM rows (block RAM at
# hundreds of QPs). Here the flip-flop build makes an ack_update's compares
# for every QP at once, from each QP's own PSN registers (two subtractions
# and a compare per QP), and so the window's and a retransmit's subtractions
# (next_psn - una_psn, the PSN - una_psn), with the mux of cur_q behind them.
RAM_QPS = 4


class PsnTable(wiring.Component):
    """Per QP: ``next_psn`` (the PSN of its next new packet) and ``una_psn``
    (its oldest unacknowledged one), ``una_psn`` plus the PSNs above it that
    reliability holds SACKed (the window's base: ``unsacked`` is measured
    from it), and what the sequencer's FSM and the CSR reads read of them.

    Interface:
    - ``ack`` (stream of ``AckUpdate`` from reliability): moves a QP's
      ``una_psn`` to ``una_psn`` of the ack, if that lies in [una_psn,
      next_psn] (across the PSN wrap); otherwise, or for a QP out of range,
      the ack is dropped; an ack applied also sets the QP's SACKed count
      (``sacked``). ``ack_apply`` (per QP) is high the cycle one moves.
    - A qp_next_psn CSR write, given twice: ``write`` (one-hot by QP, read
      by the flip-flop table) and ``write_stb`` with ``write_q`` (read by the
      RAM table, whose ``write_stb`` also carries INIT's zeroing of row
      ``write_q``), with ``write_data``. It sets all three PSNs of the QP
      (nothing in flight), overrides an ack or an advance of the QP in the
      same cycle, and drops an ack of the QP that it meets on its way (see
      Latency).
    - ``advance`` with ``advance_psn`` and ``advance_q``: the FSM sent the
      new PSN ``advance_psn`` of QP ``advance_q`` (its back half's QP, which
      may be ``cur_q``): its ``next_psn`` is that plus 1. Advances come at
      most every other cycle (one per packet, 3 cycles or more apart).
    - ``cur_q``, ``retx_psn`` in, and ``cur_q_next``, the value ``cur_q``
      takes at the next clock edge (the RAM table's read address);
      ``cur_next`` (next_psn of ``cur_q``), ``inflight`` (its next_psn -
      una_psn), ``unsacked`` (that less its SACKed count) and ``psn_offset``
      (``retx_psn`` - its una_psn) out, each as the flip-flops or RAM rows
      hold it at the start of the cycle. Reliability counts SACKed PSNs only
      below the last PSN it has seen sent, never above TX's ``next_psn``, so
      ``unsacked`` is never negative.
    - ``cur_wait`` (with ``cur_wait``): an advance of ``cur_q`` given
      before this cycle is not in this cycle's figures (RAM: it met a CSR
      write and lands at the end of this cycle; never with flip-flops).
    - ``ack_busy``: an ack taken in an earlier cycle is not yet in the rows
      a read of this cycle returns (RAM only; the flip-flops apply an ack
      the cycle after it is taken, before any later read). The sequencer
      takes no retransmit request while it is high, so a request taken
      after an ack was taken is judged against it.
    - ``csr_q`` in (the QP a CSR read addresses); ``csr_next``, ``csr_una``
      and ``csr_inflight`` out: that QP's next_psn, una_psn and their
      difference, for ``csr_q`` of the cycle before.

    Two builds of the same rules. Up to ``RAM_QPS`` QPs the PSNs are
    flip-flops: an ack is registered with its differences against the QP's
    una_psn and applied the next cycle. Above it they are RAM rows
    (``_ram_table``): every read port is synchronous, so the table holds
    thousands of QPs in block RAM.

    Flip-flops: the compare starts at flip-flops, the result is that of
    applying the ack in the cycle it was taken, one cycle later. No ack is
    taken in the cycle one is applied (``ack.ready`` is a flip-flop, low the
    cycle after a transfer), so the una_psn read at the taking is never one
    about to change: the compare needs no second copy for an ack of the
    same QP in the cycle before, and its one carry chain is one LUT from the
    una_psn enables. The differences are registered every cycle for every
    QP from its own registers and compared per QP, and
    ``inflight``/``psn_offset`` are computed per QP with ``cur_q``'s mux
    behind them: no QP mux lies in front of a carry chain
    (docs/timing.md#tx-sequencer).

    RAM: the read ports are transparent, so a row read in a cycle has that
    cycle's write; the FSM's port reads at ``cur_q_next``, so its data is
    ``cur_q``'s row from the cycle ``cur_q`` is set. A CSR write has the
    write ports in its cycle; an advance or an ack's apply that meets one
    (of another QP) waits a cycle.

    Latency: a write lands at the end of its cycle. Flip-flops: an ack moves
    una_psn 2 cycles after it is offered (taken, then applied); a write
    drops an ack of its QP taken in its cycle; an advance lands at the end
    of its cycle. RAM: an ack moves una_psn 3 cycles after it is offered
    (taken with its rows read, its differences registered, applied), later
    while CSR writes of other QPs have the port; a write of its QP from its
    taking to its apply drops it; an advance lands at the end of its cycle,
    or of the next if it meets a write. Throughput: one ack per 2 cycles
    (flip-flops) or 3 (RAM); acks come at most one per ACK packet, many
    cycles apart.
    """

    def __init__(self, num_qps: int, *, cur_wait: bool = False):
        self.num_qps = num_qps
        self.has_cur_wait = cur_wait
        qb = max(1, (num_qps - 1).bit_length())
        super().__init__({
            "ack": In(stream.Signature(AckUpdate)),
            "ack_apply": Out(num_qps),
            "write": In(num_qps),
            "write_stb": In(1),
            "write_q": In(qb),
            "write_data": In(PSN_BITS),
            "advance": In(1),
            "advance_psn": In(PSN_BITS),
            "advance_q": In(qb),
            "cur_q": In(qb),
            "cur_q_next": In(qb),
            "retx_psn": In(PSN_BITS),
            "ack_busy": Out(1),
            "cur_next": Out(PSN_BITS),
            "inflight": Out(PSN_BITS),
            "unsacked": Out(PSN_BITS),
            "psn_offset": Out(PSN_BITS),
            **({"cur_wait": Out(1)} if cur_wait else {}),
            "csr_q": In(qb),
            "csr_next": Out(PSN_BITS),
            "csr_una": Out(PSN_BITS),
            "csr_inflight": Out(PSN_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        if self.num_qps > RAM_QPS:
            self._ram_table(m)
            return m
        if self.has_cur_wait:
            m.d.comb += self.cur_wait.eq(0)  # an advance is in the registers at its edge
        nq = self.num_qps
        cur_q, retx_psn = self.cur_q, self.retx_psn
        next_psn = Array(Signal(PSN_BITS, name=f"next_psn{i}") for i in range(nq))
        una_psn = Array(Signal(PSN_BITS, name=f"una_psn{i}") for i in range(nq))
        # una_psn + the SACKed count: set with una_psn, by a write and by an ack
        base_psn = Array(Signal(PSN_BITS, name=f"base_psn{i}") for i in range(nq))

        # Array reads go through plain signals first: arithmetic on two
        # ArrayProxy values would expand to num_qps^2 terms.
        # CSR reads: the QP's PSNs at csr_q of the cycle before (its register)
        csr_q = registered_address(m, self.csr_q, "csr_psn_q")
        s_next, s_una = Signal(PSN_BITS), Signal(PSN_BITS)
        csr_inflight = Signal(PSN_BITS)
        m.d.comb += [s_next.eq(next_psn[self.csr_q]), s_una.eq(una_psn[self.csr_q])]
        m.d.sync += csr_inflight.eq(s_next - s_una)
        m.d.comb += [self.csr_next.eq(next_psn[csr_q]), self.csr_una.eq(una_psn[csr_q]),
                     self.csr_inflight.eq(csr_inflight)]

        # The differences per QP, cur_q's mux behind them (the first shared
        # with the ack's compare)
        m.d.comb += self.cur_next.eq(next_psn[cur_q])
        qp_inflight = [Signal(PSN_BITS, name=f"inflight{i}") for i in range(nq)]
        qp_offset = [Signal(PSN_BITS, name=f"psn_off{i}") for i in range(nq)]
        qp_unsacked = [Signal(PSN_BITS, name=f"unsacked{i}") for i in range(nq)]
        for i in range(nq):
            m.d.comb += [
                qp_inflight[i].eq(next_psn[i] - una_psn[i]),
                qp_unsacked[i].eq(next_psn[i] - base_psn[i]),
                qp_offset[i].eq(retx_psn - una_psn[i]),
            ]
        m.d.comb += [
            self.inflight.eq(Array(qp_inflight)[cur_q]),
            self.unsacked.eq(Array(qp_unsacked)[cur_q]),
            self.psn_offset.eq(Array(qp_offset)[cur_q]),
        ]

        ack = self.ack.payload
        ack_ready = Signal(init=1)
        ack_taken = self.ack.valid & ack_ready
        m.d.comb += self.ack.ready.eq(ack_ready)
        m.d.sync += ack_ready.eq(~ack_taken)
        ak_qp = Signal(nq)  # the registered ack's QP, one-hot; 0: none to apply
        ak_una = Signal(PSN_BITS)
        ak_base = Signal(PSN_BITS)
        ak_apply = Signal(nq)  # per QP: its una_psn moves to ak_una, its base to ak_base
        m.d.sync += [
            ak_qp.eq(Cat(*[ack_taken & (ack.qpn == i) & ~self.write[i] for i in range(nq)])),
            ak_una.eq(ack.una_psn),
            ak_base.eq(ack.una_psn + ack.sacked),
        ]
        # The compare is written as "not less than", one carry chain (yosys
        # builds a <= b as a < b or an equality tree). The QP is one-hot, so
        # each QP's enable is one LUT behind.
        aks = []
        for i in range(nq):
            adv = Signal(PSN_BITS, name=f"ak_adv{i}")
            out = Signal(PSN_BITS, name=f"ak_out{i}")
            m.d.sync += [
                adv.eq(ack.una_psn - una_psn[i]),
                out.eq(qp_inflight[i]),  # next_psn - una_psn, also the window's
            ]
            aks.append(ak_qp[i] & ~(out < adv))
        m.d.comb += [ak_apply.eq(Cat(*aks)), self.ack_apply.eq(ak_apply)]

        # Each PSN register is one enable and a 2-way choice.
        for i in range(nq):
            with m.If(self.write[i]):
                m.d.sync += [
                    next_psn[i].eq(self.write_data),
                    una_psn[i].eq(self.write_data),
                    base_psn[i].eq(self.write_data),
                ]
            with m.Else():
                with m.If(self.advance & (self.advance_q == i)):
                    m.d.sync += next_psn[i].eq(self.advance_psn + 1)
                with m.If(ak_apply[i]):
                    m.d.sync += [una_psn[i].eq(ak_una), base_psn[i].eq(ak_base)]
        return m

    def _ram_table(self, m):
        """The PSNs in two RAMs, next_psn and (una_psn, base), each written
        through one port and read through three synchronous ones, the FSM's
        (at ``cur_q_next``), the acks' and the CSR reads'."""
        nq = self.num_qps
        qb = max(1, (nq - 1).bit_length())
        m.submodules.next_mem = next_mem = Memory(shape=PSN_BITS, depth=nq, init=[])
        m.submodules.una_mem = una_mem = Memory(shape=_UnaRow, depth=nq, init=[])
        next_w, una_w = next_mem.write_port(), una_mem.write_port()

        def reads(addr):
            """One read port on each RAM at ``addr``, transparent for its writes."""
            rn = next_mem.read_port(transparent_for=(next_w,))
            ru = una_mem.read_port(transparent_for=(una_w,))
            m.d.comb += [rn.addr.eq(addr), ru.addr.eq(addr)]
            return rn.data, ru.data

        # the FSM: the rows of cur_q as they are at the start of the cycle
        cur_next, cur_row = reads(self.cur_q_next)
        m.d.comb += [
            self.cur_next.eq(cur_next),
            self.inflight.eq(cur_next - cur_row.una),
            self.unsacked.eq(cur_next - cur_row.base),
            self.psn_offset.eq(self.retx_psn - cur_row.una),
        ]
        # CSR reads
        csr_next, csr_row = reads(self.csr_q)
        m.d.comb += [self.csr_next.eq(csr_next), self.csr_una.eq(csr_row.una),
                     self.csr_inflight.eq(csr_next - csr_row.una)]

        # An ack: taken with its rows read (t0), its differences registered
        # (t1), applied (t2, or later while CSR writes of other QPs have the
        # port). ``ack.ready`` stays low until the apply, so the next ack's
        # rows are read after this one's write. A write of the QP strobed
        # from t0 to the apply drops it: its rows were read before the write
        # landed, or the write overrides it.
        ack = self.ack.payload
        ack_ready = Signal(init=1)
        ack_taken = self.ack.valid & ack_ready
        a0, a1 = Signal(), Signal()  # an ack in its second cycle, waiting to apply
        ack_next, ack_row = reads(ack.qpn[:qb])
        a_q = Signal(qb)
        a_una = Signal(PSN_BITS)
        a_base = Signal(PSN_BITS)
        a_adv = Signal(PSN_BITS)
        a_out = Signal(PSN_BITS)
        write_a = self.write_stb & (self.write_q == a_q)
        a1_waits = a1 & self.write_stb & ~write_a
        m.d.comb += self.ack.ready.eq(ack_ready)
        m.d.sync += [
            ack_ready.eq(~ack_taken & ~a0 & ~a1_waits),
            a0.eq(ack_taken & (ack.qpn < nq)
                  & ~(self.write_stb & (self.write_q == ack.qpn[:qb]))),
            a1.eq((a0 & ~write_a) | a1_waits),
        ]
        with m.If(ack_taken):
            m.d.sync += [a_q.eq(ack.qpn[:qb]), a_una.eq(ack.una_psn),
                         a_base.eq(ack.una_psn + ack.sacked)]
        with m.If(a0):
            m.d.sync += [a_adv.eq(a_una - ack_row.una), a_out.eq(ack_next - ack_row.una)]
        apply = Signal()
        m.d.comb += [
            self.ack_busy.eq(a0 | a1),
            apply.eq(a1 & ~self.write_stb & ~(a_out < a_adv)),
            self.ack_apply.eq(onehot(a_q, nq) & apply.replicate(nq)),
        ]

        # The write ports: a CSR write lands in its cycle, as with flip-flops;
        # an advance it meets waits a cycle (dropped if of the same QP, which
        # the write overrides), as does an ack's apply (above). Advances come
        # at least two cycles apart, CSR writes (but INIT's) three.
        adv_wait = Signal()
        adv_q = Signal(qb)
        adv_psn = Signal(PSN_BITS)
        with m.If(self.advance):
            m.d.sync += [adv_q.eq(self.advance_q), adv_psn.eq(self.advance_psn + 1)]
        adv = self.advance | adv_wait
        adv_at = Mux(adv_wait, adv_q, self.advance_q)
        m.d.sync += adv_wait.eq(adv & self.write_stb & (self.write_q != adv_at))
        if self.has_cur_wait:
            m.d.comb += self.cur_wait.eq(adv_wait & (adv_q == self.cur_q))
        with m.If(self.write_stb):
            m.d.comb += [next_w.addr.eq(self.write_q), next_w.data.eq(self.write_data),
                         una_w.addr.eq(self.write_q), una_w.data.una.eq(self.write_data),
                         una_w.data.base.eq(self.write_data), next_w.en.eq(1), una_w.en.eq(1)]
        with m.Else():
            m.d.comb += [
                next_w.addr.eq(adv_at),
                next_w.data.eq(Mux(adv_wait, adv_psn, self.advance_psn + 1)),
                next_w.en.eq(adv),
                una_w.addr.eq(a_q), una_w.data.una.eq(a_una), una_w.data.base.eq(a_base),
                una_w.en.eq(apply),
            ]


# una_psn and the window's base (una_psn + the SACKed count): one RAM row
_UnaRow = data.StructLayout({"una": PSN_BITS, "base": PSN_BITS})

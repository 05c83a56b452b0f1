"""Every QP's next and oldest unacknowledged PSN, and the acks that move the
latter: the TX sequencer's ``PsnTable``."""

from amaranth.hdl import Array, Cat, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..protocol import PSN_BITS
from .layouts import AckUpdate

__all__ = ["PsnTable", "ACK_PER_QP_QPS"]

# Up to this many QPs an ack_update's compares are made for every QP at once,
# from each QP's own PSN registers (two subtractions and a compare per QP);
# above it, once, behind a mux of the ack's QP. The same bound makes the
# window's and a retransmit's subtractions (next_psn - una_psn, the PSN -
# una_psn) per QP, with the mux of cur_q behind them.
ACK_PER_QP_QPS = 4


class PsnTable(wiring.Component):
    """Per QP: ``next_psn`` (the PSN of its next new packet) and ``una_psn``
    (its oldest unacknowledged one), ``una_psn`` plus the PSNs above it that
    reliability holds SACKed (the window's base: ``unsacked`` is measured
    from it), and what the sequencer's FSM reads of them.

    Interface:
    - ``ack`` (stream of ``AckUpdate`` from reliability): moves a QP's
      ``una_psn`` to ``una_psn`` of the ack, if that lies in [una_psn,
      next_psn] (across the PSN wrap); otherwise, or for a QP out of range,
      the ack is dropped; an ack applied also sets the QP's SACKed count
      (``sacked``). ``ack_apply`` (per QP) is high the cycle one moves.
    - ``write`` (one-hot by QP) with ``write_data``: a qp_next_psn CSR write,
      which sets both PSNs (nothing in flight) and overrides an ack or an
      advance of the QP in the same cycle, and drops an ack of the QP taken
      in that cycle.
    - ``advance`` with ``advance_psn``: the FSM sent the new PSN
      ``advance_psn`` of QP ``cur_q``: its ``next_psn`` is that plus 1.
    - ``cur_q``, ``retx_psn`` in; ``cur_next`` (next_psn of ``cur_q``),
      ``inflight`` (its next_psn - una_psn), ``unsacked`` (that less its
      SACKed count) and ``psn_offset`` (``retx_psn`` - its una_psn) out,
      combinational. Reliability counts SACKed PSNs only below the last PSN
      it has seen sent, never above TX's ``next_psn``, so ``unsacked`` is
      never negative.
    - ``next_psn``, ``una_psn``: every QP's, ``PSN_BITS`` per QP, QP 0's lowest
      (for CSR reads).

    An ack is registered with its differences against the QP's una_psn and
    applied the next cycle, so the compare starts at flip-flops: the result
    is that of applying it in the cycle it was taken, one cycle later. No
    ack is taken in the cycle one is applied (``ack.ready`` is a flip-flop,
    low the cycle after a transfer), so the una_psn read at the taking is
    never one about to change: the compare needs no second copy for an ack
    of the same QP in the cycle before, and its one carry chain is one LUT
    from the una_psn enables. Up to ``ACK_PER_QP_QPS`` QPs the differences
    are registered every cycle for every QP from its own registers and
    compared per QP, and ``inflight``/``psn_offset`` are computed per QP
    with ``cur_q``'s mux behind them: no QP mux lies in front of a carry
    chain (docs/timing.md#tx-sequencer); above it, a mux of the QP and then
    one subtraction.

    Latency: an ack moves una_psn 2 cycles after it is offered (taken, then
    applied); a write or advance lands at the end of its cycle. Throughput:
    one ack per 2 cycles (acks come at most one per ACK packet, many cycles
    apart).
    """

    def __init__(self, num_qps: int):
        self.num_qps = num_qps
        qb = max(1, (num_qps - 1).bit_length())
        super().__init__({
            "ack": In(stream.Signature(AckUpdate)),
            "ack_apply": Out(num_qps),
            "write": In(num_qps),
            "write_data": In(PSN_BITS),
            "advance": In(1),
            "advance_psn": In(PSN_BITS),
            "cur_q": In(qb),
            "retx_psn": In(PSN_BITS),
            "cur_next": Out(PSN_BITS),
            "inflight": Out(PSN_BITS),
            "unsacked": Out(PSN_BITS),
            "psn_offset": Out(PSN_BITS),
            "next_psn": Out(PSN_BITS * num_qps),
            "una_psn": Out(PSN_BITS * num_qps),
        })

    def elaborate(self, platform):
        m = Module()
        nq = self.num_qps
        qb = max(1, (nq - 1).bit_length())
        cur_q, retx_psn = self.cur_q, self.retx_psn
        next_psn = Array(Signal(PSN_BITS, name=f"next_psn{i}") for i in range(nq))
        una_psn = Array(Signal(PSN_BITS, name=f"una_psn{i}") for i in range(nq))
        # una_psn + the SACKed count: set with una_psn, by a write and by an ack
        base_psn = Array(Signal(PSN_BITS, name=f"base_psn{i}") for i in range(nq))
        m.d.comb += [self.next_psn.eq(Cat(*next_psn)), self.una_psn.eq(Cat(*una_psn))]

        # Array reads go through plain signals first: arithmetic on two
        # ArrayProxy values would expand to num_qps^2 terms.
        cur_next = Signal(PSN_BITS)
        cur_una = Signal(PSN_BITS)
        m.d.comb += [
            cur_next.eq(next_psn[cur_q]),
            cur_una.eq(una_psn[cur_q]),
            self.cur_next.eq(cur_next),
        ]
        per_qp_psns = nq <= ACK_PER_QP_QPS
        qp_inflight = [Signal(PSN_BITS, name=f"inflight{i}") for i in range(nq)]
        if per_qp_psns:
            # the first shared with the ack's compare
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
        else:
            cur_base = Signal(PSN_BITS)
            m.d.comb += [
                cur_base.eq(base_psn[cur_q]),
                self.inflight.eq((cur_next - cur_una)[:PSN_BITS]),
                self.unsacked.eq((cur_next - cur_base)[:PSN_BITS]),
                self.psn_offset.eq((retx_psn - cur_una)[:PSN_BITS]),
            ]

        ack = self.ack.payload
        ack_q = ack.qpn[:qb]
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
        if per_qp_psns:
            aks = []
            for i in range(nq):
                adv = Signal(PSN_BITS, name=f"ak_adv{i}")
                out = Signal(PSN_BITS, name=f"ak_out{i}")
                m.d.sync += [
                    adv.eq(ack.una_psn - una_psn[i]),
                    out.eq(qp_inflight[i]),  # next_psn - una_psn, also the window's
                ]
                aks.append(ak_qp[i] & ~(out < adv))
            m.d.comb += ak_apply.eq(Cat(*aks))
        else:
            ack_next = Signal(PSN_BITS)
            ack_una = Signal(PSN_BITS)
            m.d.comb += [ack_next.eq(next_psn[ack_q]), ack_una.eq(una_psn[ack_q])]
            ak_adv = Signal(PSN_BITS)
            ak_out = Signal(PSN_BITS)
            m.d.comb += ak_apply.eq(ak_qp & (~(ak_out < ak_adv)).replicate(nq))
            m.d.sync += [
                ak_adv.eq(ack.una_psn - ack_una),
                ak_out.eq(ack_next - ack_una),
            ]
        m.d.comb += self.ack_apply.eq(ak_apply)

        # Each PSN register is one enable and a 2-way choice.
        for i in range(nq):
            with m.If(self.write[i]):
                m.d.sync += [
                    next_psn[i].eq(self.write_data),
                    una_psn[i].eq(self.write_data),
                    base_psn[i].eq(self.write_data),
                ]
            with m.Else():
                with m.If(self.advance & (cur_q == i)):
                    m.d.sync += next_psn[i].eq(self.advance_psn + 1)
                with m.If(ak_apply[i]):
                    m.d.sync += [una_psn[i].eq(ak_una), base_psn[i].eq(ak_base)]
        return m

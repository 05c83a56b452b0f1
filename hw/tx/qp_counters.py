"""Per-QP packet counters of the TX sequencer (qp_tx_packets,
qp_retx_packets): ``QpCounters``."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .qp_settings import BRAM_QPS, registered_address, row_address, row_port

__all__ = ["QpCounters"]


class QpCounters(wiring.Component):
    """Per QP, the data packets sent (retransmissions included, bits 31..0
    of a row) and the retransmissions (bits 63..32), in one RAM row.

    Interface: ``q`` (the sequencer FSM's QP) and ``retx`` (its packet is a
    retransmission); ``emit`` (the packet is sent: the row of ``q`` is
    written); ``init`` with ``init_q`` (the sequencer's INIT: row ``init_q``
    is written 0) and ``ready`` (INIT is done); ``csr_q`` -> ``csr_data``:
    the row of the QP given the cycle before, for CSR reads (a transparent
    read: it sees the counters an ``emit`` in that cycle wrote).

    The row after this packet is registered ahead of ``emit`` (the row at
    ``q`` is only written then) and is zero until ``ready``. The row read is
    registered first, so that the read's row select, a net to every bit of
    the row, is not in front of the adders: with ``q`` given 3 cycles before
    ``emit`` (the sequencer's hand-off to SEGMENT), the row is read the
    cycle after, registered the next, and the next row is valid at ``emit``.
    Each read port reads the address of the cycle before (``row_port``:
    block RAM above ``BRAM_QPS`` QPs). ``emit`` writes the row of ``q`` of
    the cycle before (a register of its own), so that ``q`` may move on to
    the next packet's QP in the cycle of ``emit``.

    Latency: ``q`` and ``retx`` must hold from 3 cycles before ``emit`` to
    the cycle before it; a count is in ``csr_data`` the cycle after its
    ``emit``. Throughput: one ``emit`` per 3 cycles (one per packet).
    """

    def __init__(self, num_qps: int):
        self.num_qps = num_qps
        qb = max(1, (num_qps - 1).bit_length())
        super().__init__({
            "q": In(qb),
            "retx": In(1),
            "emit": In(1),
            "init": In(1),
            "init_q": In(range(num_qps + 1)),
            "ready": In(1),
            "csr_q": In(qb),
            "csr_data": Out(64),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.counters = cnt_mem = Memory(shape=64, depth=self.num_qps, init=[])
        cnt_w = cnt_mem.write_port()
        ram = dict(block_ram=self.num_qps > BRAM_QPS)
        cnt_r = row_port(cnt_mem, write=cnt_w, **ram)
        cnt_csr = row_port(cnt_mem, write=cnt_w, **ram)
        cnt_row = Signal(64)
        cnt_next = Signal(64)
        m.d.sync += [
            cnt_row.eq(cnt_r.data),
            cnt_next.eq(
                Mux(self.ready,
                    Cat((cnt_row[:32] + 1)[:32], (cnt_row[32:] + self.retx)[:32]), 0)
            ),
        ]
        m.d.comb += [
            cnt_r.addr.eq(row_address(m, self.q, "cnt_q", **ram)),
            cnt_csr.addr.eq(row_address(m, self.csr_q, "cnt_csr_q", **ram)),
            self.csr_data.eq(cnt_csr.data),
            cnt_w.data.eq(cnt_next),
            # INIT writes every row, EMIT the row of q
            cnt_w.addr.eq(Mux(self.init, self.init_q, registered_address(m, self.q, "cnt_w_q"))),
            cnt_w.en.eq(self.init | self.emit),
        ]
        return m

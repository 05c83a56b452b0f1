"""The reliability core's per-PSN entries. See ``SentPsns``."""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

__all__ = ["SentPsns"]


class SentPsns(wiring.Component):
    """Per (QP, PSN modulo the window): the EV the PSN last went out on and whether
    that was a retransmission (``ev``, ``retx``: rewritten by retransmissions), and,
    written once, whether it ends its WQE and its send time in RTT units (``last``,
    ``ts``).

    Writes are registered: ``record`` (a new PSN: all four fields) or ``rewrite`` (a
    retransmission: ``ev`` and ``retx``) in a cycle, with the write's QP, slot and
    data of that cycle, reach the memories the cycle after, from flip-flops (the
    write enables, the address and the data), so that a decision in front of them
    puts no logic before the memories' write enables. ``ev_written`` is the
    registered ``ev`` write enable (1 in the cycle of the memory write).

    Reads: the entry at ``read_qp``, ``read_slot`` is on ``ev``, ``retx``, ``last``,
    ``ts`` the cycle after; ``hold`` keeps it there (the read port's enable low). A
    read sees a write made at least 2 cycles after its ``record`` / ``rewrite``.

    Interface: ``record``, ``rewrite``, ``write_qp``, ``write_slot``, ``write_ev``,
    ``write_retx``, ``write_last``, ``write_ts``: In; ``read_qp``, ``read_slot``,
    ``hold``: In; ``ev``, ``retx``, ``last``, ``ts``, ``ev_written``: Out.
    Latency: write 1 cycle, read 1 cycle. Throughput: one write and one read per
    cycle.
    """

    def __init__(self, *, num_qps, window, evs):
        self.num_qps, self.window = num_qps, window
        self.wbits = (window - 1).bit_length()
        self.ebits = (evs - 1).bit_length()
        slot = max(self.wbits, 1)
        super().__init__({
            "record": In(1), "rewrite": In(1),
            "write_qp": In(range(num_qps)), "write_slot": In(slot),
            "write_ev": In(self.ebits), "write_retx": In(1), "write_last": In(1),
            "write_ts": In(16),
            "read_qp": In(range(num_qps)), "read_slot": In(slot), "hold": In(1),
            "ev": Out(self.ebits), "retx": Out(1), "last": Out(1), "ts": Out(16),
            "ev_written": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        nq, W, wbits, ebits = self.num_qps, self.window, self.wbits, self.ebits

        def psn_addr(qp, slot):
            return Cat(slot[:wbits], qp) if wbits else qp

        m.submodules.psn_ev_mem = psn_ev_mem = Memory(shape=ebits + 1, depth=nq * W, init=[])
        m.submodules.psn_info_mem = psn_info_mem = Memory(shape=17, depth=nq * W, init=[])
        psn_ev_rd, psn_ev_wr = psn_ev_mem.read_port(), psn_ev_mem.write_port()
        psn_info_rd, psn_info_wr = psn_info_mem.read_port(), psn_info_mem.write_port()
        psn_raddr = Signal(range(nq * W))
        psn_waddr = Signal(range(nq * W))
        m.d.comb += [
            psn_raddr.eq(psn_addr(self.read_qp, self.read_slot)),
            psn_ev_rd.addr.eq(psn_raddr), psn_info_rd.addr.eq(psn_raddr),
            psn_ev_rd.en.eq(~self.hold), psn_info_rd.en.eq(~self.hold),
            psn_ev_wr.addr.eq(psn_waddr), psn_info_wr.addr.eq(psn_waddr),
            self.ev.eq(psn_ev_rd.data[:ebits]), self.retx.eq(psn_ev_rd.data[ebits]),
            self.last.eq(psn_info_rd.data[0]), self.ts.eq(psn_info_rd.data[1:17]),
        ]

        psn_ev_we = Signal()
        psn_info_we = Signal()
        psn_ev_wdata = Signal.like(psn_ev_wr.data)
        psn_info_wdata = Signal.like(psn_info_wr.data)
        m.d.sync += [
            psn_ev_we.eq(0), psn_info_we.eq(0),
            psn_waddr.eq(psn_addr(self.write_qp, self.write_slot)),
            psn_ev_wdata.eq(Cat(self.write_ev, self.write_retx)),
            psn_info_wdata.eq(Cat(self.write_last, self.write_ts)),
        ]
        with m.If(self.record):
            m.d.sync += [psn_ev_we.eq(1), psn_info_we.eq(1)]
        with m.If(self.rewrite):
            m.d.sync += psn_ev_we.eq(1)
        m.d.comb += [
            psn_ev_wr.data.eq(psn_ev_wdata), psn_info_wr.data.eq(psn_info_wdata),
            psn_ev_wr.en.eq(psn_ev_we), psn_info_wr.en.eq(psn_info_we),
            self.ev_written.eq(psn_ev_we),
        ]
        return m

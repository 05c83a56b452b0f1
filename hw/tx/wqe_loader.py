"""The WQE the TX sequencer is sending (``cur``): loaded from the QP's saved
row or from a fetched WQE's beats (``WqeLoader``)."""

import operator
from functools import reduce

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .layouts import WQE_BYTES, WQE_LAYOUT, PrefetchedWqe, WqeOpcode

__all__ = ["WqeState", "WqeLoader"]


def WqeState(addr_width=64):
    """The part-sent WQE of a QP (and the WQE being retransmitted from): the
    local address is an ``addr_width``-bit DMA address, the remote one the
    peer's 64-bit VA."""
    return data.StructLayout(
        {
            "laddr": unsigned(addr_width),
            "raddr": unsigned(64),
            "length": unsigned(32),
            "rkey": unsigned(32),
            "imm": unsigned(32),
            "with_imm": unsigned(1),
            "wqe_index": unsigned(16),
            "pkt_index": unsigned(24),
        }
    )


class WqeLoader(wiring.Component):
    """``cur``, the WQE the sequencer is sending, and ``op_bad``, whether a
    fetched WQE's opcode is one TX does not execute.

    Interface: the sequencer FSM's state flip-flops (``in_idle``,
    ``in_load``, ``in_retx_check``, ``in_retx_compare``, ``in_fetch_data``,
    ``in_parse``, ``in_take``) and ``retx`` (a retransmission); ``row``, the
    QP's saved WQE row (the WQE RAM read at the FSM's QP); ``wqe``, the QP's
    prefetched WQE (``WqePrefetch.rd_wqe``, a ``PrefetchedWqe``); a
    re-fetched WQE burst's ``beat``, ``beat_valid`` and ``beat_index`` (the
    beat's number in the burst); ``parse_wqe_index``/``parse_pkt_index``,
    which PARSE and TAKE write into ``cur``.

    ``cur`` is loaded from ``row`` in CHECK (the cycle after LOAD), from
    ``wqe`` in TAKE (a new WQE), or, field by field, from the burst's beats
    (a retransmission's), and PARSE or TAKE sets its ``wqe_index`` and
    ``pkt_index``. Each field the sequencer uses lies within one beat (they
    are at most 8 bytes, aligned): it goes to ``cur`` the cycle after its
    beat, from a register of its bits in the beat, so that the burst's valid
    (another block's logic) is not in front of ``cur``'s clock enables; the
    last beat lands in PARSE. ``with_imm`` is the opcode's WRITE_WITH_IMM.

    The row is loaded under four flags, each for about a quarter of
    ``cur``'s bits, all set in CHECK: one flip-flop as the select and clock
    enable of all of ``cur``'s few hundred bits is a net routed over much of
    the chip. So that synthesis does not merge them into one flip-flop, each
    but the first is also set in the cycle after one other state (IDLE,
    RETX_CHECK, RETX_COMPARE), where a load of the row is harmless: ``cur`` is
    not read in IDLE (the write-back of a parked QP's row is in the IDLE
    after SEGMENT, before any load at its end), LOAD, CHECK or the
    retransmit checks, and is loaded again before it is (in CHECK, or from
    the beats and in PARSE, or in TAKE). A field the burst gives loads under one
    flip-flop, set for the row load or the field's beat, and the row's flag
    selects the row: a clock enable and one data select.

    ``taken`` is the value TAKE loads into ``cur`` (``wqe`` with
    ``parse_wqe_index`` and ``parse_pkt_index``), combinationally: the
    sequencer's back half copies it when TAKE hands the packet over.

    ``op_bad`` is registered from ``wqe``'s opcode in TAKE, 0 from IDLE on,
    so that OFFSET, the earliest reader, sees this packet's WQE only; a
    retransmission's re-fetch never sets it (its WQE was taken once).
    ``wqe_known`` (``wqe``'s opcode is one TX executes) and
    ``wqe_with_imm`` are ``wqe``'s, combinationally: TAKE goes on to
    SEGMENT with them.

    Latency: a field is in ``cur`` 2 cycles after its beat is on ``beat``,
    the row the cycle after CHECK's, ``wqe`` the cycle after TAKE's;
    ``op_bad`` the cycle after TAKE. Throughput: one beat per cycle.
    """

    def __init__(self, *, data_width=64, addr_width=64):
        self.data_width = data_width
        self.wqe_state = WqeState(addr_width)
        wqe_beats = WQE_BYTES // (data_width // 8)
        super().__init__({
            "in_idle": In(1),
            "in_load": In(1),
            "in_retx_check": In(1),
            "in_retx_compare": In(1),
            "in_fetch_data": In(1),
            "in_parse": In(1),
            "in_take": In(1),
            "retx": In(1),
            "row": In(self.wqe_state),
            "wqe": In(PrefetchedWqe()),
            "beat": In(data_width),
            "beat_valid": In(1),
            "beat_index": In(range(max(wqe_beats, 2))),
            "parse_wqe_index": In(16),
            "parse_pkt_index": In(24),
            "cur": Out(self.wqe_state),
            "taken": Out(self.wqe_state),
            "op_bad": Out(1),
            "wqe_known": Out(1),
            "wqe_with_imm": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        nbytes = self.data_width // 8
        cur = Signal(self.wqe_state)
        m.d.comb += self.cur.eq(cur)
        after = {None: 0, "IDLE": self.in_idle, "RETX_CHECK": self.in_retx_check,
                 "RETX_COMPARE": self.in_retx_compare}
        # cur's fields from a re-fetched burst (beat index, registered value) and
        # from the prefetched WQE
        beat_of, beat_value, wqe_value = {}, {}, {}
        for name, off, size in WQE_LAYOUT:
            target = "with_imm" if name == "opcode" else name
            if target not in self.wqe_state.members:
                continue
            lsb = 8 * (off % nbytes)
            field = Signal(8 * size, name=f"beat_{name}")
            m.d.sync += field.eq(self.beat[lsb : lsb + 8 * size])
            beat_of[target] = off // nbytes
            from_wqe = self.wqe[name]
            if name == "opcode":
                beat_value[target] = field == WqeOpcode.WRITE_WITH_IMM
                wqe_value[target] = from_wqe == WqeOpcode.WRITE_WITH_IMM
                wqe_opcode = from_wqe
            else:
                beat_value[target], wqe_value[target] = field, from_wqe
        known = reduce(operator.or_, [wqe_opcode == k for k in WqeOpcode.KNOWN])
        m.d.comb += [self.wqe_known.eq(known), self.wqe_with_imm.eq(wqe_value["with_imm"])]
        op_bad = Signal()
        with m.If(self.in_idle):
            m.d.sync += op_bad.eq(0)
        with m.If(self.in_take):
            m.d.sync += op_bad.eq(~known)
        m.d.comb += self.op_bad.eq(op_bad)
        for also, fields in ((None, ("raddr",)),
                             ("IDLE", ("laddr", "with_imm", "wqe_index")),
                             ("RETX_CHECK", ("length", "rkey")),
                             ("RETX_COMPARE", ("imm", "pkt_index"))):
            row_next = self.in_load | after[also]
            load_row = Signal(name=f"load_row_{fields[0]}")
            m.d.sync += load_row.eq(row_next)
            for name in fields:
                if name not in beat_of:
                    with m.If(load_row):
                        m.d.sync += cur[name].eq(self.row[name])
                    continue
                # the field's enable, one flip-flop: the row's flag or its beat's
                load = Signal(name=f"load_{name}")
                m.d.sync += load.eq(row_next | (self.in_fetch_data & self.beat_valid
                                                & (self.beat_index == beat_of[name])))
                with m.If(load | self.in_take):
                    m.d.sync += cur[name].eq(Mux(self.in_take, wqe_value[name],
                                                 Mux(load_row, self.row[name], beat_value[name])))
        m.d.comb += [self.taken[name].eq(value) for name, value in wqe_value.items()]
        m.d.comb += [self.taken.wqe_index.eq(self.parse_wqe_index),
                     self.taken.pkt_index.eq(self.parse_pkt_index)]
        with m.If(self.in_parse | self.in_take):
            m.d.sync += [
                cur.wqe_index.eq(self.parse_wqe_index),
                cur.pkt_index.eq(self.parse_pkt_index),
            ]
        return m

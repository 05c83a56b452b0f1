"""A packet's header and payload descriptors, from the WQE being sent and
the segment the TX sequencer cut: ``PacketDescriptors``."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..headers import Opcode
from ..protocol import PSN_BITS
from .layouts import PacketDesc, PayloadDesc
from .qp_settings import cfg_lanes, settings_lane
from .wqe_loader import WqeState

__all__ = ["PacketDescriptors", "header_lanes"]


def header_lanes(ipv6=False, ev_width=16):
    """The settings lanes ``PacketDescriptors`` reads, each as (name, the
    low bits of it read): what the TX sequencer's back half copies of its
    QP's row (a width of None: the whole lane)."""
    lanes = [("dqpn", None), ("dst_mac_lo", None), ("dst_mac_hi", None), ("dst_ip", None),
             ("dscp", None)]
    if ipv6:
        lanes += [("dst_ip6_1", None), ("dst_ip6_2", None), ("dst_ip6_3", None),
                  ("ip6", 3 if ev_width > 16 else 1)]
    return lanes


class PacketDescriptors(wiring.Component):
    """The fields of one packet's ``PacketDesc`` (``hdr``) and
    ``PayloadDesc`` (``pay``).

    Interface: ``wqe`` (the WQE being sent, ``WqeState``), ``offset`` (the
    packet's byte offset in it), ``first``/``last`` (its first and last
    packet), ``length``, ``psn``, ``retx`` (a retransmission: ACK requested),
    ``settings`` (the QP's settings row, ``cfg_lanes(ipv6)`` order, of which
    it reads ``header_lanes(ipv6, ev_width)``) and
    ``ev_value`` (the EV entry's ``ev_width`` bits) in; ``hdr`` and ``pay``
    out. With ``ipv6``, ``hdr.dst_ip`` is the row's 128-bit address and
    ``hdr.v6`` its ``qp_ip6`` flag; with ``ev_width`` above 16, ``hdr.ev_format``
    is ``qp_ip6``'s EV format.

    The opcode is WRITE_FIRST, _MIDDLE, _LAST or _ONLY (the last two _IMM
    for a WITH_IMMEDIATE WQE, which also sets SE on its last packet); ACK
    is requested on a message's last packet and on every retransmission.
    The remote and local addresses (``raddr``/``laddr`` + ``offset``) are
    registered every cycle, so that the wide adds are not in front of the
    descriptor FIFOs' block-RAM inputs: the sequencer holds ``wqe`` and
    ``offset`` from SEGMENT to EMIT.

    Latency: ``hdr.va`` and ``pay.laddr`` 1 cycle after ``wqe``/``offset``,
    every other field 0 (combinational). Throughput: one packet per cycle.
    """

    def __init__(self, addr_width=64, ipv6=False, ev_width=16):
        self.addr_width = addr_width
        self.ipv6, self.ev_width = ipv6, ev_width
        super().__init__({
            "wqe": In(WqeState(addr_width)),
            "offset": In(32),
            "first": In(1),
            "last": In(1),
            "length": In(13),
            "psn": In(PSN_BITS),
            "retx": In(1),
            "settings": In(32 * len(cfg_lanes(ipv6))),
            "ev_value": In(ev_width),
            "hdr": Out(PacketDesc(ipv6, ev_width)),
            "pay": Out(PayloadDesc(addr_width)),
        })

    def elaborate(self, platform):
        m = Module()
        cur, cfg = self.wqe, self.settings
        seg_first, seg_last = self.first, self.last
        pkt_va = Signal(64)
        pkt_laddr = Signal(self.addr_width)
        m.d.sync += [pkt_va.eq(cur.raddr + self.offset), pkt_laddr.eq(cur.laddr + self.offset)]
        imm_last = cur.with_imm & seg_last
        opcode = Signal(8)
        with m.If(seg_first & seg_last):
            m.d.comb += opcode.eq(Mux(cur.with_imm, Opcode.WRITE_ONLY_IMM, Opcode.WRITE_ONLY))
        with m.Elif(seg_first):
            m.d.comb += opcode.eq(Opcode.WRITE_FIRST)
        with m.Elif(seg_last):
            m.d.comb += opcode.eq(Mux(cur.with_imm, Opcode.WRITE_LAST_IMM, Opcode.WRITE_LAST))
        with m.Else():
            m.d.comb += opcode.eq(Opcode.WRITE_MIDDLE)
        h = self.hdr
        m.d.comb += [
            h.opcode.eq(opcode),
            h.se.eq(imm_last),
            h.ackreq.eq(seg_last | self.retx),
            h.dqpn.eq(settings_lane(cfg, "dqpn")),
            h.psn.eq(self.psn),
            h.va.eq(pkt_va),
            h.rkey.eq(cur.rkey),
            h.dma_len.eq(cur.length),
            h.imm.eq(cur.imm),
            h.length.eq(self.length),
            h.ev.eq(self.ev_value),
            h.dst_mac.eq(Cat(settings_lane(cfg, "dst_mac_lo"), settings_lane(cfg, "dst_mac_hi"))),
            h.dst_ip.eq(settings_lane(cfg, "dst_ip")),
            h.dscp.eq(settings_lane(cfg, "dscp")),
            self.pay.laddr.eq(pkt_laddr),
            self.pay.length.eq(self.length),
        ]
        if self.ipv6:
            m.d.comb += [
                h.dst_ip.eq(Cat(settings_lane(cfg, "dst_ip"), settings_lane(cfg, "dst_ip6_1"),
                                settings_lane(cfg, "dst_ip6_2"), settings_lane(cfg, "dst_ip6_3"))),
                h.v6.eq(settings_lane(cfg, "ip6")[0]),
            ]
        if self.ev_width > 16:
            m.d.comb += h.ev_format.eq(settings_lane(cfg, "ip6")[1:3])
        return m

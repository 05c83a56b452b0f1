"""Header bytes of an RDMA WRITE packet from its descriptor."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..headers import (
    BTH,
    ETH,
    ETHERTYPE_IPV4,
    ETHERTYPE_IPV6,
    IMMDT,
    IP_PROTO_UDP,
    IPV4,
    IPV6,
    RETH,
    ROCE_UDP_PORT,
    UDP,
    Opcode,
    ev_fields,
)
from ..protocol import ECN_ECT0, IP_FLAGS_DF, IP_TTL, PKEY_DEFAULT, EvFormat
from .layouts import FrameHeader, PacketDesc

__all__ = ["HeaderBuilder"]



def ipv4_checksum(words):
    """RFC 791 checksum of 16-bit words (the checksum word left out)."""
    total = sum(words[1:], words[0])
    folded = total[:16] + total[16:]
    folded = folded[:16] + folded[16:]
    return ~folded[:16]


class HeaderBuilder(wiring.Component):
    """Eth / IPv4 or IPv6 / UDP / BTH / RETH [/ ImmDt] bytes for one packet.

    ``desc`` in (``PacketDesc``), ``hdr`` out (``FrameHeader``: 74 header
    bytes in lane order, of which the first 70 are used without ImmDt, and
    the payload length and pad count). ``src_mac``/``src_ip`` are the NIC's
    own addresses. With ``ipv6`` (a build parameter), a descriptor with
    ``v6`` set gets an IPv6 header (``src_ip6`` the NIC's IPv6 address,
    ``dst_ip`` the peer's; traffic class DSCP and ECT(0), flow label 0 but for STEV, hop
    limit 64), 20 bytes longer (``header_lengths``), and ``hdr.v6`` set; the
    others get the IPv4 header as without ``ipv6``. With ``ev_width`` above
    16 the descriptor's ``ev_format`` places its EV (``hw.headers.ev_fields``):
    STEV's high bits in the flow label, SRv6's source port; the destination
    address here is the peer's even for SRv6, whose carrier TX writes after
    the ICRC (``CarrierWriter``): the ICRC covers the address the peer sees.
    The IPv4 checksum (eight 16-bit terms) is computed here, so the framer
    only moves bytes. The descriptor is taken when its header
    is loaded into the output register, which must be empty then (the
    framer takes a header as soon as it is free: its ``hdr.ready`` is a
    flip-flop); the lengths and the checksum come from it through
    free-running pipeline registers (a tree of two-input adds, then the
    folds), so no path is deeper than one adder pair.
    Latency 5 cycles from a valid descriptor to a valid header; one header
    per 5 cycles (a packet's frame is at least 10 beats at 64 bits, 3 at
    512), refilling while the framer streams the previous packet.
    """

    def __init__(self, ipv6: bool = False, ev_width: int = 16):
        self.ipv6, self.ev_width = ipv6, ev_width
        super().__init__(
            {
                "desc": In(stream.Signature(PacketDesc(ipv6, ev_width))),
                "hdr": Out(stream.Signature(FrameHeader(ipv6))),
                "src_mac": In(48),
                "src_ip": In(32),
                **({"src_ip6": In(128)} if ipv6 else {}),
            }
        )

    def elaborate(self, platform):
        m = Module()
        d = self.desc.payload
        imm = (d.opcode == Opcode.WRITE_LAST_IMM) | (d.opcode == Opcode.WRITE_ONLY_IMM)
        pad = (-d.length)[:2]
        # The descriptor stays on ``desc`` (stable while valid) until the
        # header is loaded; the lengths and the IPv4 checksum are computed
        # from it by free-running pipeline registers over CSUM_STAGES cycles.
        # Lengths: (length + pad) + const = (length + 3 + const) & ~3, as
        # every const is a multiple of 4.
        udp_len = Signal(16)
        ip_len = Signal(16)
        # Both sums of each length are made and the opcode picks one after
        # the adders, so its decode is not in front of the carry chains.
        udp_const = UDP.size + BTH.size + 4 + RETH.size + 3
        udp_sum = Mux(imm, d.length + (udp_const + IMMDT.size), d.length + udp_const)
        ip_sum = Mux(imm, d.length + (IPV4.size + udp_const + IMMDT.size),
                     d.length + (IPV4.size + udp_const))
        m.d.sync += [
            udp_len.eq(Cat(Const(0, 2), udp_sum[2:])),
            ip_len.eq(Cat(Const(0, 2), ip_sum[2:])),
        ]
        tos = Cat(Const(ECN_ECT0, 2), d.dscp)
        # the nine 16-bit checksum terms, added in a tree
        s0, s1, s2 = Signal(17), Signal(17), Signal(17)
        t0, t1 = Signal(18), Signal(18)
        total = Signal(20)
        folded = Signal(17)
        const_terms = (IP_FLAGS_DF << 13) + ((IP_TTL << 8) | IP_PROTO_UDP)  # ident is 0
        m.d.sync += [
            s0.eq(d.dst_ip[16:32] + d.dst_ip[:16]),
            s1.eq(Cat(tos, Const(0x45, 8)) + self.src_ip[16:]),
            s2.eq(self.src_ip[:16] + const_terms),
            t0.eq(s0 + s1),
            t1.eq(s2 + ip_len),
            total.eq(t0 + t1),
            folded.eq(total[:16] + total[16:]),
        ]
        checksum = Signal(16)
        m.d.comb += checksum.eq(~(folded[:16] + folded[16:])[:16])
        CSUM_STAGES = 4  # cycles from a stable descriptor to ``folded``
        wait = Signal(range(CSUM_STAGES))
        # ``ripe``: ``folded`` is the descriptor's (``wait`` has counted
        # CSUM_STAGES cycles).
        ripe = Signal()
        # ``take`` = ``ripe & ~hdr.valid`` (the descriptor is taken), computed
        # from the next values of both a cycle early and registered: it is
        # ``desc.ready``, which reaches the descriptor FIFO's wide output
        # register's clock enable and its block-RAM read enable, so it is a
        # flip-flop, not a LUT of two.
        take = Signal()

        eth = ETH.pack({"dst": d.dst_mac, "src": self.src_mac, "ethertype": ETHERTYPE_IPV4})
        ip = IPV4.pack(
            {
                "version": 4,
                "ihl": 5,
                "dscp": d.dscp,
                "ecn": ECN_ECT0,
                "total_len": ip_len,
                "ident": 0,
                "flags": IP_FLAGS_DF,
                "frag_off": 0,
                "ttl": IP_TTL,
                "proto": IP_PROTO_UDP,
                "checksum": checksum,
                "src": self.src_ip,
                "dst": d.dst_ip[:32],
            }
        )
        # an IPv4 frame's EV is UDP's whatever the QP's format
        fmt = Mux(d.v6, d.ev_format, EvFormat.UDP) if self.ev_width > 16 else None
        sport, flow_label, _ = ev_fields(d.ev, fmt, self.ev_width)
        udp = UDP.pack({"sport": sport, "dport": ROCE_UDP_PORT, "length": udp_len, "checksum": 0})
        bth = BTH.pack(
            {
                "opcode": d.opcode,
                "se": d.se,
                "padcount": pad,
                "pkey": PKEY_DEFAULT,
                "dqpn": d.dqpn,
                "ackreq": d.ackreq,
                "psn": d.psn,
            }
        )
        reth = RETH.pack({"va": d.va, "rkey": d.rkey, "dma_len": d.dma_len})
        immdt = IMMDT.pack({"imm": d.imm})
        header = Cat(eth, ip, udp, bth, reth, immdt)
        if self.ipv6:
            # the UDP length is the IPv6 payload length; no IP checksum
            eth6 = ETH.pack({"dst": d.dst_mac, "src": self.src_mac,
                             "ethertype": ETHERTYPE_IPV6})
            ip6 = IPV6.pack({"version": 6, "dscp": d.dscp, "ecn": ECN_ECT0,
                             "flow_label": flow_label, "payload_len": udp_len,
                             "next_header": IP_PROTO_UDP,
                             "hop_limit": IP_TTL, "src": self.src_ip6, "dst": d.dst_ip})
            header = Mux(d.v6, Cat(eth6, ip6, udp, bth, reth, immdt), header)

        with m.If(self.hdr.ready):
            m.d.sync += self.hdr.valid.eq(0)
        with m.If(self.desc.valid & ~ripe):
            m.d.sync += [wait.eq(wait + 1), ripe.eq(wait == CSUM_STAGES - 1)]
        # The header register follows the descriptor while it is empty (its
        # clock enable is ``~hdr.valid``, a flip-flop), and keeps the header
        # of the cycle the descriptor is taken.
        with m.If(~self.hdr.valid):
            m.d.sync += [
                self.hdr.payload.bytes.eq(header),
                self.hdr.payload.imm.eq(imm),
                self.hdr.payload.length.eq(d.length),
                self.hdr.payload.pad.eq(pad),
            ]
            if self.ipv6:
                m.d.sync += self.hdr.payload.v6.eq(d.v6)
        # ``ripe`` is set only while ``desc.valid``, which holds until taken
        m.d.comb += self.desc.ready.eq(take)
        with m.If(take):
            m.d.sync += [wait.eq(0), ripe.eq(0), self.hdr.valid.eq(1)]
        ripe_next = ~take & (ripe | (self.desc.valid & (wait == CSUM_STAGES - 1)))
        hdr_valid_next = take | (self.hdr.valid & ~self.hdr.ready)
        m.d.sync += take.eq(ripe_next & ~hdr_valid_next)
        return m

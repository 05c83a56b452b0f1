"""Header bytes of an RDMA WRITE packet from its descriptor."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
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

__all__ = ["CSUM_STAGES", "DESC_DEPTH", "HeaderBuilder"]



def ipv4_checksum(words):
    """RFC 791 checksum of 16-bit words (the checksum word left out)."""
    total = sum(words[1:], words[0])
    folded = total[:16] + total[16:]
    folded = folded[:16] + folded[16:]
    return ~folded[:16]


# descriptors the header builder holds, taken and header not yet loaded: 3
# over the 7 cycles from a take to the load keep a header at least every 3
# cycles (a 64-byte WRITE's frame at 512 bits); TxEngine.max_picked_ahead
# counts them
DESC_DEPTH = 3
CSUM_STAGES = 5  # registers from a taken descriptor to its checksum
# a descriptor's results, as the second FIFO holds them
Sums = data.StructLayout({"checksum": 16, "ip_len": 16, "udp_len": 16})


def with_imm(opcode):
    """``opcode`` is a WRITE with ImmDt (``Opcode.WITH_IMM``)."""
    return Cat(*[opcode == op for op in Opcode.WITH_IMM]).any()


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
    only moves bytes.

    A descriptor is taken in any cycle ``desc.ready`` is high (a flip-flop:
    fewer than ``DESC_DEPTH`` are held after the cycle before) into a
    descriptor FIFO (LUT RAM), and its lengths and IPv4 checksum are
    computed by a free-running pipeline (CSUM_STAGES registers: a tree of
    two-input adds, then the folds, so no path is deeper than one adder
    pair) whose results enter a second FIFO in step. The header register
    follows the oldest descriptor and its results while it is empty (its
    clock enable is ``~hdr.valid``, a flip-flop) and is marked valid once
    those results are there (the framer takes a header as soon as it is
    free: its ``hdr.ready`` is a flip-flop). Latency 7 cycles from a taken
    descriptor to its valid header. Throughput: a header per 2 cycles at
    most (the register is loaded the cycle after the framer takes the one
    before), and DESC_DEPTH per 7 cycles (3 headers in 7 cycles, 2 or 3
    apart), where a packet's frame is at least 3 beats (at 512 bits; 10 at
    64).
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
        layout = PacketDesc(self.ipv6, self.ev_width)
        d = self.desc.payload
        take_in = self.desc.valid & self.desc.ready

        # ---- the lengths and the IPv4 checksum of the descriptor taken, over
        # CSUM_STAGES free-running registers; ``valid`` marks a taken one's.
        # Lengths: (length + pad) + const = (length + 3 + const) & ~3, as every
        # const is a multiple of 4; both sums of each are made and the opcode
        # picks one after the adders, so its decode is not in front of the
        # carry chains.
        imm_in = with_imm(d.opcode)
        udp_const = UDP.size + BTH.size + 4 + RETH.size + 3
        udp_sum = Mux(imm_in, d.length + (udp_const + IMMDT.size), d.length + udp_const)
        ip_sum = Mux(imm_in, d.length + (IPV4.size + udp_const + IMMDT.size),
                     d.length + (IPV4.size + udp_const))
        valid = [Signal(name=f"csum_valid{k}") for k in range(CSUM_STAGES)]
        udp_len = [Signal(16, name=f"udp_len{k}") for k in range(CSUM_STAGES)]
        ip_len = [Signal(16, name=f"ip_len{k}") for k in range(CSUM_STAGES)]
        m.d.sync += [
            valid[0].eq(take_in),
            udp_len[0].eq(Cat(Const(0, 2), udp_sum[2:])),
            ip_len[0].eq(Cat(Const(0, 2), ip_sum[2:])),
        ]
        for k in range(1, CSUM_STAGES):
            m.d.sync += [valid[k].eq(valid[k - 1]), udp_len[k].eq(udp_len[k - 1]),
                         ip_len[k].eq(ip_len[k - 1])]
        tos = Cat(Const(ECN_ECT0, 2), d.dscp)
        s0, s1, s2 = Signal(17), Signal(17), Signal(17)
        t0, t1 = Signal(18), Signal(18)
        total = Signal(20)
        folded = Signal(17)
        checksum = Signal(16)
        const_terms = (IP_FLAGS_DF << 13) + ((IP_TTL << 8) | IP_PROTO_UDP)  # ident is 0
        m.d.sync += [
            s0.eq(d.dst_ip[16:32] + d.dst_ip[:16]),
            s1.eq(Cat(tos, Const(0x45, 8)) + self.src_ip[16:]),
            s2.eq(self.src_ip[:16] + const_terms),
            t0.eq(s0 + s1),
            t1.eq(s2 + ip_len[0]),
            total.eq(t0 + t1),
            folded.eq(total[:16] + total[16:]),
            checksum.eq(~(folded[:16] + folded[16:])[:16]),
        ]

        # ---- the descriptors taken, and their results, oldest first
        m.submodules.descs = descs = SyncFIFO(width=len(Value.cast(d)), depth=DESC_DEPTH)
        m.submodules.sums = sums = SyncFIFO(width=Sums.size, depth=DESC_DEPTH)
        last = CSUM_STAGES - 1
        sums_in = Signal(Sums)
        m.d.comb += [
            descs.w_en.eq(take_in),
            descs.w_data.eq(d.as_value()),
            # never full: a result's descriptor is in ``descs`` until both are read
            sums.w_en.eq(valid[last]),
            sums_in.checksum.eq(checksum),
            sums_in.ip_len.eq(ip_len[last]),
            sums_in.udp_len.eq(udp_len[last]),
            sums.w_data.eq(sums_in),
        ]
        h = layout(descs.r_data)
        h_sums = Sums(sums.r_data)
        # the header register is loaded (its descriptor read) in a cycle it is
        # empty and the oldest descriptor's results are there
        load = Signal()
        m.d.comb += [
            load.eq(~self.hdr.valid & sums.r_rdy),
            descs.r_en.eq(load),
            sums.r_en.eq(load),
        ]
        # desc.ready: fewer than DESC_DEPTH held after this cycle
        m.d.sync += self.desc.ready.eq(descs.level + take_in - load < DESC_DEPTH)

        imm = with_imm(h.opcode)
        pad = (-h.length)[:2]
        eth = ETH.pack({"dst": h.dst_mac, "src": self.src_mac, "ethertype": ETHERTYPE_IPV4})
        ip = IPV4.pack(
            {
                "version": 4,
                "ihl": 5,
                "dscp": h.dscp,
                "ecn": ECN_ECT0,
                "total_len": h_sums.ip_len,
                "ident": 0,
                "flags": IP_FLAGS_DF,
                "frag_off": 0,
                "ttl": IP_TTL,
                "proto": IP_PROTO_UDP,
                "checksum": h_sums.checksum,
                "src": self.src_ip,
                "dst": h.dst_ip[:32],
            }
        )
        # an IPv4 frame's EV is UDP's whatever the QP's format
        fmt = Mux(h.v6, h.ev_format, EvFormat.UDP) if self.ev_width > 16 else None
        sport, flow_label, _ = ev_fields(h.ev, fmt, self.ev_width)
        udp = UDP.pack({"sport": sport, "dport": ROCE_UDP_PORT, "length": h_sums.udp_len,
                        "checksum": 0})
        bth = BTH.pack(
            {
                "opcode": h.opcode,
                "se": h.se,
                "padcount": pad,
                "pkey": PKEY_DEFAULT,
                "dqpn": h.dqpn,
                "ackreq": h.ackreq,
                "psn": h.psn,
            }
        )
        reth = RETH.pack({"va": h.va, "rkey": h.rkey, "dma_len": h.dma_len})
        immdt = IMMDT.pack({"imm": h.imm})
        header = Cat(eth, ip, udp, bth, reth, immdt)
        if self.ipv6:
            # the UDP length is the IPv6 payload length; no IP checksum
            eth6 = ETH.pack({"dst": h.dst_mac, "src": self.src_mac,
                             "ethertype": ETHERTYPE_IPV6})
            ip6 = IPV6.pack({"version": 6, "dscp": h.dscp, "ecn": ECN_ECT0,
                             "flow_label": flow_label, "payload_len": h_sums.udp_len,
                             "next_header": IP_PROTO_UDP,
                             "hop_limit": IP_TTL, "src": self.src_ip6, "dst": h.dst_ip})
            header = Mux(h.v6, Cat(eth6, ip6, udp, bth, reth, immdt), header)

        # The header register follows the oldest descriptor while it is empty
        # (its clock enable is ``~hdr.valid``, a flip-flop), and keeps the
        # header of the cycle it is loaded.
        with m.If(~self.hdr.valid):
            m.d.sync += [
                self.hdr.payload.bytes.eq(header),
                self.hdr.payload.imm.eq(imm),
                self.hdr.payload.length.eq(h.length),
                self.hdr.payload.pad.eq(pad),
            ]
            if self.ipv6:
                m.d.sync += self.hdr.payload.v6.eq(h.v6)
        with m.If(self.hdr.ready):
            m.d.sync += self.hdr.valid.eq(0)
        with m.If(load):
            m.d.sync += self.hdr.valid.eq(1)
        return m

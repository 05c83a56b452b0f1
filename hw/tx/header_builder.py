"""Header bytes of an RDMA WRITE packet from its descriptor."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..headers import BTH, ETH, ETHERTYPE_IPV4, IMMDT, IP_PROTO_UDP, IPV4, RETH, ROCE_UDP_PORT, UDP
from .layouts import FrameHeader, PacketDesc

__all__ = ["HeaderBuilder", "ECN_ECT0", "IP_TTL", "IP_FLAGS_DF"]

ECN_ECT0 = 0b10
IP_TTL = 64
IP_FLAGS_DF = 0b010
PKEY_DEFAULT = 0xFFFF


def ipv4_checksum(words):
    """RFC 791 checksum of 16-bit words (the checksum word left out)."""
    total = sum(words[1:], words[0])
    folded = total[:16] + total[16:]
    folded = folded[:16] + folded[16:]
    return ~folded[:16]


class HeaderBuilder(wiring.Component):
    """Eth / IPv4 / UDP / BTH / RETH [/ ImmDt] bytes for one packet.

    ``desc`` in (``PacketDesc``), ``hdr`` out (``FrameHeader``: 74 header
    bytes in lane order, of which the first 70 are used without ImmDt, and
    the payload length and pad count). ``src_mac``/``src_ip`` are the NIC's
    own addresses. The IPv4 checksum (eight 16-bit terms) is computed here,
    so the framer only moves bytes. Latency 1 cycle, one header per cycle:
    a one-entry pipeline register that refills while the framer streams the
    previous packet.
    """

    def __init__(self):
        super().__init__(
            {
                "desc": In(stream.Signature(PacketDesc())),
                "hdr": Out(stream.Signature(FrameHeader())),
                "src_mac": In(48),
                "src_ip": In(32),
            }
        )

    def elaborate(self, platform):
        m = Module()
        d = self.desc.payload
        imm = (d.opcode == 0x09) | (d.opcode == 0x0B)
        pad = (-d.length)[:2]
        ext = Mux(imm, RETH.size + IMMDT.size, RETH.size)
        udp_len = Signal(16)
        ip_len = Signal(16)
        m.d.comb += [
            udp_len.eq(UDP.size + BTH.size + ext + d.length + pad + 4),
            ip_len.eq(IPV4.size + udp_len),
        ]
        tos = Cat(Const(ECN_ECT0, 2), d.dscp)
        ip_words = [
            Cat(tos, Const(0x45, 8)),
            ip_len,
            Const(0, 16),
            Const(IP_FLAGS_DF << 13, 16),
            Const((IP_TTL << 8) | IP_PROTO_UDP, 16),
            self.src_ip[16:],
            self.src_ip[:16],
            d.dst_ip[16:],
            d.dst_ip[:16],
        ]
        checksum = Signal(16)
        m.d.comb += checksum.eq(ipv4_checksum(ip_words))

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
                "dst": d.dst_ip,
            }
        )
        udp = UDP.pack({"sport": d.ev, "dport": ROCE_UDP_PORT, "length": udp_len, "checksum": 0})
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

        with m.If(self.hdr.ready | ~self.hdr.valid):
            m.d.comb += self.desc.ready.eq(1)
            m.d.sync += self.hdr.valid.eq(self.desc.valid)
            with m.If(self.desc.valid):
                m.d.sync += [
                    self.hdr.payload.bytes.eq(Cat(eth, ip, udp, bth, reth, immdt)),
                    self.hdr.payload.imm.eq(imm),
                    self.hdr.payload.length.eq(d.length),
                    self.hdr.payload.pad.eq(pad),
                ]
        return m

"""The receive engine: parser, validation, PSN window, placement, completions, ACKs."""

from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from hw.axi import AXI4Signature, check_dma_addr_width
from hw.csr import CSRBusSignature
from hw.pipeline import StreamRegister
from hw.protocol import plane_bits as plane_bits_for
from hw.stream import AXIStreamSignature, Beat, check_data_width

from .ackgen import RxAckBuilder
from .cqe import RxCqeFormatter
from .dma import DmaDone, RxDmaWriter
from .parser import COUNTER_NAMES as PARSER_COUNTERS
from .parser import ParsedHeader, RxParser
from .peer_filter import PEER_FILTER_COUNTERS, RxPeerFilter
from .regs import MAX_MRS, RxRegisters
from .validate import VALIDATOR_COUNTERS, RxValidator
from .window import MAX_PENDING, WINDOW_COUNTERS, RxPsnWindow

__all__ = ["RxEngine", "RxPipeline", "check_rx_params", "narrow_header"]

AXI_ID_WIDTH = 4


def narrow_header(m, wide, narrow):
    """Join stream ``wide`` (out) to ``narrow`` (in) whose ``ParsedHeader``
    has no fields but ``wide``'s, maybe narrower: each taken by name,
    truncated (the 128-bit addresses of an IPv6 build to IPv4's 32)."""
    m.d.comb += [narrow.valid.eq(wide.valid), wide.ready.eq(narrow.ready)]
    for name, _ in narrow.payload.shape():
        m.d.comb += narrow.payload[name].eq(wide.payload[name])


def check_rx_params(*, data_width, num_qps, num_mrs, sack_bits, mpr_max, csr_addr_width,
                    addr_width=64):
    """Raise a ValueError that says what to fix for an unsupported configuration."""
    check_data_width(data_width)
    check_dma_addr_width(addr_width)
    if not isinstance(num_qps, int) or num_qps < 2 or num_qps & (num_qps - 1):
        raise ValueError(f"num_qps must be a power of two >= 2, not {num_qps!r}")
    if not isinstance(num_mrs, int) or not 1 <= num_mrs <= MAX_MRS:
        raise ValueError(f"num_mrs must be 1..{MAX_MRS}, not {num_mrs!r}")
    if sack_bits not in (32, 64, 128, 256):
        raise ValueError(f"sack_bits must be 32, 64, 128 or 256, not {sack_bits!r}")
    if not isinstance(mpr_max, int) or mpr_max % 128 or not 128 <= mpr_max <= 32640:
        raise ValueError(
            f"mpr_max must be a multiple of 128 PSNs in 128..32640 (MPR x 128), not {mpr_max!r}"
        )
    if not isinstance(csr_addr_width, int) or not 13 <= csr_addr_width <= 32:
        raise ValueError(f"csr_addr_width must be 13..32, not {csr_addr_width!r}")


class RxPipeline(wiring.Component):
    """Everything of the receive engine after the parser.

    Takes the parser's ``hdr`` and ``payload`` streams (see ``RxParser``), so
    it can be tested on records built from scapy packets without the parser.
    Parameters and ports as ``RxEngine``, with ``hdr``/``payload`` in place of ``s_axis``,
    plus ``parser_events`` (In: the parser's counter strobes, ``RxParser.events``)
    and ``trim_dscp`` (Out) for the parser.

    Blocks, in order: ``RxValidator`` (QP/peer/MR checks; peer frames go on
    through ``RxPeerFilter`` to ``peer_ack``) -> ``RxPsnWindow``
    (window, bitmap, completions, coalescing) -> ``RxDmaWriter`` (payload and
    CQE writes; B responses come back to the window) and ``RxAckBuilder``
    (ACK/NAK/probe-response frames). ``RxRegisters`` holds the tables.

    Latency: a header record reaches the window engine 4 cycles after it is
    taken and its first W beat follows about 7 cycles later (its AW in the
    same cycle); a counter includes an event within
    ``hw.rx.regs.COUNTER_LAG`` cycles (its block-RAM bank). Throughput: one
    payload beat per cycle into ``m_axi`` while ``wready`` allows; per packet
    the validator needs 4 cycles and the window engine about 10, so packets
    with payloads of a few beats are limited by those (docs/rx.md).
    """

    CSR_READ_LATENCY = RxRegisters.CSR_READ_LATENCY

    def __init__(self, *, data_width=64, num_qps=16, num_mrs=16, sack_bits=64, mpr_max=1024,
                 csr_addr_width=16, inflight=8, max_pending=MAX_PENDING, addr_width=64,
                 plane_bits=0, ns_per_cycle=8, ipv6=False):
        check_rx_params(data_width=data_width, num_qps=num_qps, num_mrs=num_mrs,
                        sack_bits=sack_bits, mpr_max=mpr_max, csr_addr_width=csr_addr_width,
                        addr_width=addr_width)
        self.data_width, self.num_qps, self.num_mrs = data_width, num_qps, num_mrs
        self.sack_bits, self.mpr_max, self.csr_addr_width = sack_bits, mpr_max, csr_addr_width
        self.inflight, self.max_pending = inflight, max_pending
        self.addr_width, self.plane_bits = addr_width, plane_bits
        self.ns_per_cycle = ns_per_cycle
        self.ipv6 = bool(ipv6)
        # Built here so that an impossible register map fails at construction.
        self.regs = RxRegisters(num_qps=num_qps, num_mrs=num_mrs, sack_bits=sack_bits,
                                mpr_max=mpr_max, csr_addr_width=csr_addr_width,
                                addr_width=addr_width, ipv6=self.ipv6)
        super().__init__(
            {
                "hdr": In(stream.Signature(ParsedHeader(sack_bits, plane_bits, self.ipv6))),
                "payload": In(stream.Signature(Beat(data_width))),
                "csr": In(CSRBusSignature(csr_addr_width)),
                "m_axi": Out(AXI4Signature(addr_width, data_width, AXI_ID_WIDTH)),
                "m_axis_ack": Out(AXIStreamSignature(data_width, max(1, plane_bits))),
                "peer_ack": Out(stream.Signature(ParsedHeader(sack_bits))),
                "parser_events": In(len(PARSER_COUNTERS)),
                "trim_dscp": Out(6, init=0x3F),
            }
        )

    @property
    def register_map(self):
        return self.regs.map

    def elaborate(self, platform):
        m = Module()
        m.submodules.regs = regs = self.regs
        aw = self.addr_width
        ipv6 = self.ipv6
        m.submodules.validator = val = RxValidator(
            num_qps=self.num_qps, num_mrs=self.num_mrs, sack_bits=self.sack_bits, addr_width=aw,
            plane_bits=self.plane_bits, ipv6=ipv6)
        m.submodules.window = win = RxPsnWindow(
            num_qps=self.num_qps, sack_bits=self.sack_bits, mpr_max=self.mpr_max,
            inflight=self.inflight, max_pending=self.max_pending, addr_width=aw,
            plane_bits=self.plane_bits, ns_per_cycle=self.ns_per_cycle, ipv6=ipv6)
        m.submodules.dma = dma = RxDmaWriter(
            self.data_width, tag_width=win.tag_bits, id_width=AXI_ID_WIDTH,
            max_outstanding=max(16, 2 * self.inflight), addr_width=aw)
        m.submodules.ackgen = ackgen = RxAckBuilder(self.data_width, self.sack_bits,
                                                    self.plane_bits, ipv6)
        m.submodules.cqefmt = cqefmt = RxCqeFormatter(win.tag_bits, aw)
        m.submodules.peer_filter = pf = RxPeerFilter(
            num_qps=self.num_qps, sack_bits=self.sack_bits, addr_width=aw, ipv6=ipv6)

        connect(m, flipped(self.hdr), val.hdr)
        connect(m, val.peer_ack, pf.i)
        if ipv6:
            # reliability reads no address: the peer's records leave with
            # IPv4's layout, the addresses' low 32 bits (`narrow_header`)
            narrow_header(m, pf.o, self.peer_ack)
            m.d.comb += [pf.own_ip6.eq(regs.own_ip6), val.own_ip6.eq(regs.own_ip6),
                         ackgen.own_ip6.eq(regs.own_ip6)]
        else:
            connect(m, flipped(self.peer_ack), pf.o)
        connect(m, val.req, win.req)
        connect(m, regs.init, win.init)
        m.d.comb += win.init_busy.eq(regs.init_busy)
        connect(m, flipped(self.payload), dma.data)
        # B verdicts reach the window through a register stage (1 cycle), so
        # the window's IDLE decision does not reach into the writer's queue;
        # the window's done.ready is a flip-flop (it acknowledges a verdict
        # the cycle after IDLE took it), so none of that decision reaches
        # the stage's flags either.
        m.submodules.done_reg = done_reg = StreamRegister(DmaDone(win.tag_bits))
        connect(m, dma.done, done_reg.i)
        connect(m, done_reg.o, win.done)
        connect(m, win.ack, ackgen.job)
        connect(m, flipped(self.m_axis_ack), ackgen.m_axis)
        connect(m, win.cqe, cqefmt.cqe)
        connect(m, flipped(self.m_axi), dma.m_axi)
        m.d.comb += [
            regs.lookup_a.addr.eq(val.cfg_addr),
            val.cfg.eq(regs.lookup_a.cfg),
            regs.lookup_b.addr.eq(win.cfg_addr),
            win.cfg.eq(regs.lookup_b.cfg),
            regs.lookup_c.addr.eq(pf.cfg_addr),
            pf.cfg.eq(regs.lookup_c.cfg),
            pf.own_ip.eq(regs.own_ip),
            pf.own_mac.eq(regs.own_mac),
            val.own_ip.eq(regs.own_ip),
            ackgen.own_ip.eq(regs.own_ip),
            ackgen.own_mac.eq(regs.own_mac),
            regs.parser_events.eq(self.parser_events),
            self.trim_dscp.eq(regs.trim_dscp),
        ]
        connect(m, flipped(self.csr), regs.csr)
        connect(m, val.mr_lookup, regs.mr_lookup)
        # Counter strobes are registered: a counter moves one cycle after its
        # event, and the event logic does not reach into the counters' adders.
        for name in VALIDATOR_COUNTERS:
            m.d.sync += getattr(regs.events, name).eq(getattr(val.counters, name))
        for name in WINDOW_COUNTERS:
            m.d.sync += getattr(regs.events, name).eq(getattr(win.counters, name))
        for name in PEER_FILTER_COUNTERS:
            m.d.sync += getattr(regs.events, name).eq(getattr(pf.counters, name))

        # Write commands: completions first (they are rare and short), then
        # placement. Completions are only issued after the B responses of
        # every packet of their message, so they never overtake its data.
        with m.If(cqefmt.cmd.valid):
            m.d.comb += [
                dma.cmd.valid.eq(1),
                dma.cmd.payload.eq(cqefmt.cmd.payload),
                cqefmt.cmd.ready.eq(dma.cmd.ready),
            ]
        with m.Else():
            m.d.comb += [
                dma.cmd.valid.eq(win.place.valid),
                dma.cmd.payload.eq(win.place.payload),
                win.place.ready.eq(dma.cmd.ready),
            ]
        return m


class RxEngine(wiring.Component):
    """MRC receive engine: MAC frames in; payload, CQEs and ACK frames out.

    Parameters
    ----------
    data_width : 64..512, the MAC stream and AXI4 data width.
    num_qps : QPs (a power of two); QPN i is table entry i.
    num_mrs : memory regions in the MR table (1..4095, ``MAX_MRS``).
    sack_bits : SACK bitmap width (32, 64, 128 or 256).
    mpr_max : the largest responder window in PSNs (a multiple of 128, the
        MPR unit); the bitmap ring per QP is the next power of two >=
        ``mpr_max + sack_bits`` bits. Default 1024 (MPR 8).
    csr_addr_width : CSR bus address bits; the register map must fit.
    addr_width : bits of the host DMA addresses, 32..64 (default 64): MR
        bases, CQ bases, payload and CQE write addresses. A WRITE that does
        not lie below 2^addr_width fails the bounds check (``RxValidator``).
    num_planes : MAC ports (planes), 1..8: above 1, each frame's plane comes in
        on ``s_axis.tuser`` and each ACK, NAK and probe answer leaves tagged
        with one (below); 1 (the default) builds no plane logic.
    ns_per_cycle : the ns of a cycle of the clock (``ns_per_cycle(clk_freq_hz)``
        of hw/reliability/engine.py; default 8, 125 MHz): an ACK's service
        time counts cycles of it, in 64 ns units (docs/protocol.md).
    ipv6 : RoCEv2 over IPv6 too (default False: IPv4 only). Frames of both
        families are taken; each QP's peer has a family (``QP_PEER_V6``) and a
        128-bit address, the NIC its own IPv6 address (``OWN_IP6``), and ACKs
        go back over the peer's family (docs/rx.md).

    Interface
    ---------
    ``s_axis``      In(AXIStreamSignature(data_width, 1 + plane bits)): frames
                    from the MAC; ``tuser[0]`` on the last beat: a bad frame;
                    with ``num_planes`` (1..8) above 1, ``tuser[1:]``
                    (``PLANE_BITS``) the plane it arrived on, on its last beat.
    ``csr``         In(CSRBusSignature(csr_addr_width)): ``register_map``. A
                    read answers ``CSR_READ_LATENCY`` (3) cycles after
                    ``r_stb`` (``RxRegisters``: the address registered, then
                    the read mux in two registered steps).
    ``m_axi``       Out(AXI4Signature(addr_width, data_width, 4)): payload
                    and CQE writes; reads tied off.
    ``m_axis_ack``  Out(AXIStreamSignature(data_width, max(1, plane bits))):
                    ACK, NAK and probe response frames, for the TX arbiter;
                    ``tuser`` the plane it leaves on: that of the last frame
                    from the peer on its QP (a probe's answer: the probe's).
    ``peer_ack``    Out(stream.Signature(ParsedHeader(sack_bits))): received
                    ACK/NAK and probe-response headers, for the reliability
                    block.

    Latency: a packet's payload write starts about 10 cycles after its header
    record leaves the parser. Throughput: 1 payload beat per cycle while the
    AXI slave keeps up, with a few idle cycles per packet (docs/rx.md).
    """

    CSR_READ_LATENCY = RxRegisters.CSR_READ_LATENCY

    def __init__(self, *, data_width=64, num_qps=16, num_mrs=16, sack_bits=64, mpr_max=1024,
                 csr_addr_width=16, max_payload=4096, addr_width=64, num_planes=1,
                 ns_per_cycle=8, ipv6=False):
        check_rx_params(data_width=data_width, num_qps=num_qps, num_mrs=num_mrs,
                        sack_bits=sack_bits, mpr_max=mpr_max, csr_addr_width=csr_addr_width,
                        addr_width=addr_width)
        pb = plane_bits_for(num_planes)
        self.pipeline = RxPipeline(data_width=data_width, num_qps=num_qps, num_mrs=num_mrs,
                                   sack_bits=sack_bits, mpr_max=mpr_max,
                                   csr_addr_width=csr_addr_width, addr_width=addr_width,
                                   plane_bits=pb, ns_per_cycle=ns_per_cycle, ipv6=ipv6)
        self.data_width, self.sack_bits, self.max_payload = data_width, sack_bits, max_payload
        self.ipv6 = self.pipeline.ipv6
        self.num_planes, self.plane_bits = num_planes, pb
        super().__init__(
            {
                "s_axis": In(AXIStreamSignature(data_width, user_width=1 + pb)),
                "csr": In(CSRBusSignature(csr_addr_width)),
                "m_axi": Out(AXI4Signature(addr_width, data_width, AXI_ID_WIDTH)),
                "m_axis_ack": Out(AXIStreamSignature(data_width, max(1, pb))),
                "peer_ack": Out(stream.Signature(ParsedHeader(sack_bits))),
            }
        )

    @property
    def register_map(self):
        return self.pipeline.register_map

    def elaborate(self, platform):
        m = Module()
        m.submodules.parser = parser = RxParser(
            data_width=self.data_width, sack_bits=self.sack_bits, max_payload=self.max_payload,
            plane_bits=self.plane_bits, ipv6=self.ipv6)
        m.submodules.pipeline = pipe = self.pipeline
        connect(m, flipped(self.s_axis), parser.s_axis)
        connect(m, parser.hdr, pipe.hdr)
        connect(m, parser.payload, pipe.payload)
        connect(m, flipped(self.csr), pipe.csr)
        connect(m, flipped(self.m_axi), pipe.m_axi)
        connect(m, flipped(self.m_axis_ack), pipe.m_axis_ack)
        connect(m, flipped(self.peer_ack), pipe.peer_ack)
        m.d.comb += parser.trim_dscp.eq(pipe.trim_dscp)
        m.d.comb += pipe.parser_events.eq(parser.events)
        return m

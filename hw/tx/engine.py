"""TxEngine: the TX path of the MRC NIC, from doorbells to MAC frames."""

from amaranth.hdl import Cat, Module, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from ..axi import AXI4Signature, check_dma_addr_width
from ..csr import CSRBusSignature
from ..headers import ev_fields
from ..pipeline import BlockRamFIFO, StreamRegister, forward_register
from ..protocol import MAX_PLANES, PLANE_BITS, EvFormat, check_ev_width
from ..stream import AXIStreamSignature, Beat, check_data_width
from .carrier import CarrierWriter
from .dma import PayloadReader, ReadArbiter, ReadRequest, Realigner
from .ev import EvTable
from .framer import Framer
from .header_builder import DESC_DEPTH as HB_DESC_DEPTH
from .header_builder import HeaderBuilder
from .icrc import IcrcInserter
from .layouts import (
    AckUpdate,
    EvUpdate,
    PacketDesc,
    PayloadDesc,
    RetxRequest,
    SentRecord,
    WimmDone,
)
from .regs import QP_BASE, QP_STRIDE, tx_register_map
from .sequencer import Sequencer
from .wimm import WimmBound
from .wqe_prefetch import read_ahead

__all__ = ["TxEngine", "StreamFifo"]

DESC_FIFO_DEPTH = 3
SENT_FIFO_DEPTH = 4
PAY_DESC_FIFO_DEPTH = 4
# bits of a StreamFifo's output register per copy of its clock enable
OUT_GROUP = 72


class StreamFifo(wiring.Component):
    """A FIFO between two streams of ``shape`` records, in block RAM
    (hw/pipeline.py ``BlockRamFIFO``: on the board, wide shallow FIFOs cost
    block RAMs, of which there are spare, instead of LUTs, of which there
    are none), its output through a ``forward_register``: the block RAM's
    4 ns clock-to-output reaches one flip-flop per bit, not the consumer's
    logic, which may sit in another block. Latency 3 cycles (write, the
    block RAM read, the output register), one record per cycle; it holds
    ``depth`` + 1 records.

    ``out_stages=2`` puts a second ``forward_register`` stage after the
    first: the register loaded from the block RAM then drives only the
    next register (one sink per bit), so the placer can keep it by the
    block RAM, and the second drives the consumer. Latency 4 cycles, still
    one record per cycle under continuous flow (no bubble); it holds
    ``depth`` + 2 records. ``o.ready`` reaches the block RAM's read enable
    through the same one LUT as with one stage (``r_en`` is ``o.ready`` or
    the second stage empty, a flip-flop)."""

    def __init__(self, shape, depth, *, out_stages=1):
        if out_stages not in (1, 2):
            raise ValueError(f"out_stages must be 1 or 2, not {out_stages!r}")
        self.shape, self.depth, self.out_stages = shape, depth, out_stages
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape))})

    def elaborate(self, platform):
        m = Module()
        width = len(Value.cast(self.i.payload))
        m.submodules.fifo = f = BlockRamFIFO(width=width, depth=self.depth)
        m.d.comb += [
            f.w_data.eq(self.i.payload),
            f.w_en.eq(self.i.valid),
            self.i.ready.eq(f.w_rdy),
        ]
        # The output register (a ``forward_register``: it loads on ``o.ready``
        # or when empty) has no reset and one clock enable: on the board,
        # hw/board/outreg.py moves it into the block RAMs' output registers
        # (clock-to-output under 1 ns instead of 4.1-4.4), which it does for a
        # register without a reset and with one enable per block RAM, and the
        # enable net then reaches a few OCE pins, not one flip-flop per bit.
        # (Enable groups on 36-bit columns did not serve: synthesis leaves out
        # the RAM bits that carry constants or unused fields, so columns and
        # groups need not line up; docs/timing.md#tx-engine.)
        #
        # The FIFO's read enable (the block RAMs' output-register clock enable)
        # is one LUT of two of its flip-flops and ``o.ready``: the output
        # register takes ``r_data`` on ``o.ready`` or when empty, and the
        # empty case reaches the FIFO as ``r_free``, the next value of
        # ``~out_valid`` (registered there), not as a term of ``r_en``.
        #
        # With ``out_stages=2`` the register above becomes the first stage
        # (``mid``, one enable as above), which loads when empty or when the
        # output stage loads (``o.ready`` or the output empty); the output
        # stage, away from the block RAMs, loads ``mid`` under a clock enable
        # built once per group of at most OUT_GROUP bits, each from its own
        # copy of the full flags: one LUT of ``o.ready`` and a flip-flop per
        # ~72 enables, not one LUT net to every bit (docs/timing.md#tx-engine).
        # Each copy's next value is a function of itself, so synthesis keeps
        # them apart. ``r_en`` is ``o.ready`` or the output stage empty (group
        # 0's copy), ``r_free`` the next value of ``~mid_full`` (group 0's
        # copy).
        out_data = Signal(width, reset_less=self.out_stages == 1)
        out_valid = Signal()
        m.d.comb += [self.o.valid.eq(out_valid), Value.cast(self.o.payload).eq(out_data)]
        groups = -(-width // OUT_GROUP)
        size = -(-width // groups)
        if self.out_stages == 1:
            # (one enable for the whole register: see ``mid`` below)
            out_valid_next = f.r_rdy | (out_valid & ~self.o.ready)
            m.d.sync += out_valid.eq(out_valid_next)
            with m.If(self.o.ready | ~out_valid):
                m.d.sync += out_data.eq(f.r_data)
            m.d.comb += [f.r_free.eq(~out_valid_next), f.r_en.eq(self.o.ready)]
            return m

        mid_valid = Signal()
        mid_data = Signal(width, reset_less=True)
        out_load = self.o.ready | ~out_valid
        with m.If(out_load):
            m.d.sync += out_valid.eq(mid_valid)
        with m.If(out_load | ~mid_valid):
            m.d.sync += mid_valid.eq(f.r_rdy)
        for g, lo in enumerate(range(0, width, size)):
            full = Signal(name=f"out_full_{g}", attrs={"keep": 1})
            mid_full = Signal(name=f"mid_full_{g}", attrs={"keep": 1})
            out_load_g = self.o.ready | ~full
            mid_load_g = out_load_g | ~mid_full
            mid_full_next = f.r_rdy | (mid_full & ~mid_load_g)
            m.d.sync += [full.eq(mid_full | (full & ~self.o.ready)), mid_full.eq(mid_full_next)]
            with m.If(out_load_g):
                m.d.sync += out_data[lo:lo + size].eq(mid_data[lo:lo + size])
            if g == 0:
                m.d.comb += [f.r_free.eq(~mid_full_next), f.r_en.eq(out_load_g)]
                mid_load = mid_load_g
        # ``mid`` loads as a whole under group 0's enable (every group's is
        # the same value): synthesis leaves out the block RAM's bits that
        # carry constants or unused fields, so the RAM columns need not line
        # up with the groups, and the output-register pass takes a column
        # only if all its bits share one enable. On the board the enable
        # then reaches the block RAMs' OCE pins, a few sinks.
        with m.If(mid_load):
            m.d.sync += mid_data.eq(f.r_data)
        return m


class TxEngine(wiring.Component):
    """The MRC TX engine (issue 4; docs/tx.md).

    Parameters: ``data_width`` (64..512, bits of the MAC stream and AXI4
    data), ``num_qps``, ``evs_per_qp`` (1..256), ``max_mtu`` (256..4096, a
    power of two), ``csr_addr_width``, ``inflight_depth`` (PSNs each QP may
    have in flight: the in-flight table's entries per QP, a power of two),
    ``addr_width`` (32..64, bits of the host DMA addresses: ``m_axi``'s,
    the SQ bases', WQE ``laddr``s; see ``Sequencer``), ``max_span`` (None:
    ``inflight_depth``; else at most that: the PSNs from una_psn a QP may
    have sent, SACKed or not, which NicCore sets to reliability's window,
    the PSNs it tracks), ``ipv6`` (frames over IPv6 for the QPs whose
    ``qp_ip6`` is set: the NIC's ``src_ip6``, the QP's 128-bit peer address
    in ``qp_dst_ip6_3..1`` and ``qp_dst_ip``; docs/tx.md), ``ev_width`` (16,
    32 or 64: the bits of an EV entry, above 16 with ``ipv6``; each QP's EV
    format in ``qp_ip6.ev_format``, an SRv6 frame's carrier written by
    ``CarrierWriter`` between the ICRC and ``out_reg``, no cycle more;
    docs/tx.md, "EV formats"), ``wqe_read_ahead`` (1, 2 or 4: WQEs read
    ahead per QP, above 1 only up to 64 QPs; None: 4 at 256 bits and up with
    up to 64 QPs, else 1; ``WqePrefetch``).

    Ports:
    - ``csr``: the TX register block (``regs.tx_register_map``, type 0x0002).
      A read answers ``CSR_READ_LATENCY`` (3) cycles after ``r_stb``: the
      read mux is taken in two registered steps (a bridge in front takes
      ``read_latency=3``).
    - ``m_axi``: AXI4 master (``addr_width``-bit addresses), reads only (WQEs
      with ARID 0, payload ARID 1).
    - ``m_axis``: Ethernet frames without FCS, ICRC included. With
      ``num_planes`` (1..8) above 1, ``tuser`` (``PLANE_BITS``) is the frame's
      plane, its EV's, on every beat (the plane split in NicCore routes on
      it); with one plane ``tuser`` is 1 bit, 0.
    - ``link_up`` (with planes): NicCore's, In(num_planes): an EV whose
      plane's link is down is not sprayed on (``EvTable``).
    - ``retx``: retransmit requests (QPN, PSN, reason); always taken, and
      dropped (counted) when the PSN is not in flight.
    - ``ack_update``: oldest unacknowledged PSN per QP; opens the window.
    - ``ev_update``: EV state changes from reliability.
    - ``wimm_done``: a WRITE_WITH_IMM WQE of the QP completed SUCCESS (from
      reliability's completion writer; always taken): ``WimmBound``
      (hw/tx/wimm.py) counts it off the QP's outstanding ones, which
      ``qp_max_wimm`` bounds.
    - ``sent``: one record per data packet when it is committed (at most
      ``max_picked_ahead`` packets before its first beat is on the wire).
      It has backpressure through a 4-entry FIFO: a consumer that does not
      need it ties ``ready`` high; if ``ready`` stays low, TX stops once
      the FIFO is full rather than lose a record reliability needs.

    Throughput: 1 beat/cycle on ``m_axis`` in steady state for payloads of
    a few hundred bytes and up (header build, payload reads and the ICRC
    overlap the previous frame), and one 64-byte WRITE per 18 cycles at 64
    bits, the wire's limit (each QP's next WQE is read ahead while its
    packets before it are sent); one packet per 3 cycles of control over
    three QPs or more, 7 on one; reading 4 WQEs ahead per QP
    (``wqe_read_ahead``, the default at 256 bits and up) also on one QP for
    64-byte WRITEs (``Sequencer``).
    Latency from a doorbell to the first beat: about 30 cycles plus two
    memory round trips (WQE, then payload): the doorbell's decode and the
    WQE's read ahead (about 9 cycles besides the memory's), the sequencer's
    7, and the header and payload paths' registers below.
    For timing (125 MHz on an ECP5), every FIFO's block-RAM read data is
    registered (``StreamFifo``, 1 cycle; the header-descriptor FIFO's twice,
    ``out_stages=2``, 2 cycles, so its first register sits by the block RAM),
    the WQE beats are registered
    before the sequencer (``wqe_data_reg``, 1 cycle), the realigner's output
    is registered before the payload FIFO's block RAM (``realign_reg``, a
    skid stage, 1 cycle), the header builder pipelines its checksum (7
    cycles from a descriptor to its header), the ICRC inserter registers
    the framer's output in its skid buffer and has five more stages (6
    cycles: the last beat's ICRC network is taken in two registered steps)
    and ``m_axis`` comes from a register slice (``out_reg``, 1 cycle: every
    output and ``tready``'s load are flip-flops); none costs throughput.
    """

    # descriptor FIFO (DESC_FIFO_DEPTH, +1 for its second output stage),
    # header builder DESC_DEPTH and its header register, framer 2 (a loaded
    # header and one in the ICRC stages), sequencer 1
    max_picked_ahead = DESC_FIFO_DEPTH + HB_DESC_DEPTH + 5
    CSR_READ_LATENCY = 3

    def __init__(
        self,
        data_width: int = 64,
        num_qps: int = 16,
        evs_per_qp: int = 16,
        max_mtu: int = 4096,
        csr_addr_width: int = 16,
        inflight_depth: int = 256,
        addr_width: int = 64,
        num_planes: int = 1,
        max_span: int | None = None,
        ipv6: bool = False,
        ev_width: int = 16,
        wqe_read_ahead: int | None = None,
    ):
        try:
            check_ev_width(ev_width, ipv6)
            wqe_read_ahead = read_ahead(wqe_read_ahead, data_width, num_qps)
            check_data_width(data_width)
            check_dma_addr_width(addr_width)
            if not isinstance(num_qps, int) or num_qps < 1:
                raise ValueError(f"num_qps must be a positive integer, not {num_qps!r}")
            if not isinstance(evs_per_qp, int) or not 1 <= evs_per_qp <= 256:
                raise ValueError(f"evs_per_qp must be in 1..256, not {evs_per_qp!r}")
            if max_mtu not in (256, 512, 1024, 2048, 4096):
                raise ValueError(f"max_mtu must be a power of two in 256..4096, not {max_mtu!r}")
            if (
                not isinstance(inflight_depth, int)
                or inflight_depth & (inflight_depth - 1)
                or not 16 <= inflight_depth <= 32768
            ):
                raise ValueError(
                    f"inflight_depth must be a power of two in 16..32768, not {inflight_depth!r}"
                )
            if max_span is not None and (not isinstance(max_span, int)
                                         or not 1 <= max_span <= inflight_depth):
                raise ValueError(f"max_span must be in 1..inflight_depth ({inflight_depth}), "
                                 f"not {max_span!r}")
            if not isinstance(num_planes, int) or not 1 <= num_planes <= MAX_PLANES:
                raise ValueError(f"num_planes must be in 1..{MAX_PLANES}, not {num_planes!r}")
            need = QP_BASE + num_qps * QP_STRIDE
            if need > 1 << csr_addr_width:
                raise ValueError(
                    f"{num_qps} QPs need 0x{need:x} bytes of CSR space; csr_addr_width "
                    f"{csr_addr_width} gives 0x{1 << csr_addr_width:x}"
                )
        except ValueError:
            self._MustUse__silence = True  # never elaborated: no "never used" warning
            raise
        self.data_width = data_width
        self.num_qps = num_qps
        self.evs_per_qp = evs_per_qp
        self.max_mtu = max_mtu
        self.csr_addr_width = csr_addr_width
        self.inflight_depth = inflight_depth
        self.addr_width = addr_width
        self.num_planes = num_planes
        self.max_span = max_span
        self.ipv6 = bool(ipv6)
        self.ev_width = ev_width
        self.wqe_read_ahead = wqe_read_ahead
        self.srv6 = ev_width >= 64
        self.register_map = tx_register_map(num_qps, evs_per_qp, self.ipv6, ev_width)
        super().__init__(
            {
                "csr": In(CSRBusSignature(csr_addr_width)),
                "m_axi": Out(AXI4Signature(addr_width=addr_width, data_width=data_width,
                                           id_width=4)),
                "m_axis": Out(AXIStreamSignature(
                    data_width, user_width=PLANE_BITS if num_planes > 1 else 1)),
                "retx": In(stream.Signature(RetxRequest)),
                "ack_update": In(stream.Signature(AckUpdate)),
                "ev_update": In(stream.Signature(EvUpdate)),
                "wimm_done": In(stream.Signature(WimmDone)),
                "sent": Out(stream.Signature(SentRecord)),
                **({"link_up": In(num_planes, init=(1 << num_planes) - 1)}
                   if num_planes > 1 else {}),
            }
        )

    def elaborate(self, platform):
        m = Module()
        w = self.data_width
        m.submodules.sequencer = seq = Sequencer(
            data_width=w,
            num_qps=self.num_qps,
            evs_per_qp=self.evs_per_qp,
            max_mtu=self.max_mtu,
            csr_addr_width=self.csr_addr_width,
            inflight_depth=self.inflight_depth,
            addr_width=self.addr_width,
            max_span=self.max_span,
            ipv6=self.ipv6,
            ev_width=self.ev_width,
            wqe_read_ahead=self.wqe_read_ahead,
        )
        m.submodules.ev_table = evt = EvTable(self.num_qps, self.evs_per_qp, self.num_planes,
                                              self.ev_width)
        if self.num_planes > 1:
            m.d.comb += evt.link_up.eq(self.link_up)
        m.submodules.wimm = wimm = WimmBound(self.num_qps, self.inflight_depth)
        wiring.connect(m, seq.wimm, wimm.bus)
        wiring.connect(m, wiring.flipped(self.wimm_done), wimm.done)
        m.submodules.read_arbiter = arb = ReadArbiter(w, addr_width=self.addr_width)
        m.submodules.payload_reader = reader = PayloadReader(
            w, max_outstanding=PAY_DESC_FIFO_DEPTH, addr_width=self.addr_width)
        m.submodules.realigner = realign = Realigner(w)
        # the realigner's shift and mask logic reaches a flip-flop, not the
        # block RAM's data inputs (far from it, and with their own setup)
        m.submodules.realign_reg = realign_reg = StreamRegister(Beat(w))
        # The FIFO's output register is the only stage before the framer: its
        # clock enable (and the FIFO's read) takes the framer's
        # ``payload.ready``, one LUT of flip-flops (the framer's state and the
        # ICRC inserter's ``i.ready``). A skid stage after it, to register that
        # ready, cost a cycle and two registers per bit and no shorter path:
        # the framer's ready into the data enable was 3 LUT levels with it
        # (the skid's output register), 2 without.
        m.submodules.payload_fifo = pay_fifo = StreamFifo(Beat(w), max(16, self.max_mtu * 8 // w))
        m.submodules.hdr_desc_fifo = hdr_fifo = StreamFifo(PacketDesc(self.ipv6, self.ev_width),
                                                           DESC_FIFO_DEPTH, out_stages=2)
        m.submodules.pay_desc_fifo = pd_fifo = StreamFifo(PayloadDesc(self.addr_width),
                                                          PAY_DESC_FIFO_DEPTH)
        m.submodules.sent_fifo = sent_fifo = StreamFifo(SentRecord, SENT_FIFO_DEPTH)
        m.submodules.header_builder = hb = HeaderBuilder(self.ipv6, self.ev_width)
        m.submodules.framer = framer = Framer(w, self.ipv6)
        m.submodules.icrc = icrc = IcrcInserter(w, self.ipv6)
        m.submodules.out_reg = out_reg = StreamRegister(Beat(w))

        wiring.connect(m, wiring.flipped(self.csr), seq.csr)
        wiring.connect(m, wiring.flipped(self.retx), seq.retx)
        wiring.connect(m, wiring.flipped(self.ack_update), seq.ack_update)
        wiring.connect(m, wiring.flipped(self.ev_update), evt.update)
        wiring.connect(m, seq.ev, evt.bus)
        wiring.connect(m, seq.sent, sent_fifo.i)
        wiring.connect(m, sent_fifo.o, wiring.flipped(self.sent))

        # WQE requests reach the arbiter through a register (1 cycle per fetch):
        # BurstShare's choice and the prefetch's state are not in front of the
        # arbiter's AR choice, its address mux and the register slice after it.
        m.submodules.wqe_req_reg = wqe_req_reg = StreamRegister(ReadRequest(self.addr_width))
        wiring.connect(m, seq.wqe_req, wqe_req_reg.i)
        wiring.connect(m, wqe_req_reg.o, arb.wqe_req)
        # WQE beats reach the sequencer through a register (1 cycle per fetch):
        # the arbiter's RID decode (rvalid and rid == 0) was a LUT level and a
        # long route in front of the sequencer's LUTs into the clock enables of
        # its WQE fields (docs/timing.md#tx-engine).
        # Here ``wqe_data.valid`` is a flip-flop; the arbiter's ready for RID 0
        # is one LUT of it and the sequencer's ready (a state flip-flop).
        wqe_flat = Signal(len(arb.wqe_data.payload.as_value()))
        forward_register(m, arb.wqe_data.valid, arb.wqe_data.ready,
                         arb.wqe_data.payload.as_value(), seq.wqe_data.valid,
                         seq.wqe_data.ready, wqe_flat, "wqe_data_reg")
        m.d.comb += seq.wqe_data.payload.as_value().eq(wqe_flat)
        wiring.connect(m, arb.m_axi, wiring.flipped(self.m_axi))

        wiring.connect(m, seq.pay_desc, pd_fifo.i)
        wiring.connect(m, pd_fifo.o, reader.desc)
        wiring.connect(m, reader.req, arb.pay_req)
        wiring.connect(m, reader.info, realign.info)
        wiring.connect(m, arb.pay_data, realign.i)
        wiring.connect(m, realign.o, realign_reg.i)
        wiring.connect(m, realign_reg.o, pay_fifo.i)

        tags = []  # (FIFO, its entry for a descriptor taken): see _frame_tags
        if self.num_planes > 1:
            tags.append(self._plane_tags(m, seq))
        if self.srv6:
            m.submodules.carrier = carrier = CarrierWriter(w)
            tags.append(self._carrier_tags(m, seq, carrier, icrc))
        self._frame_tags(m, seq, hdr_fifo, tags)
        if self.num_planes == 1:
            m.d.comb += self.m_axis.tuser.eq(0)
        wiring.connect(m, hdr_fifo.o, hb.desc)
        m.d.comb += [hb.src_mac.eq(seq.src_mac), hb.src_ip.eq(seq.src_ip)]
        if self.ipv6:
            m.d.comb += hb.src_ip6.eq(seq.src_ip6)
        wiring.connect(m, hb.hdr, framer.hdr)
        wiring.connect(m, pay_fifo.o, framer.payload)
        wiring.connect(m, framer.o, icrc.i)
        if self.srv6:
            wiring.connect(m, icrc.o, carrier.i)
            wiring.connect(m, carrier.o, out_reg.i)
        else:
            wiring.connect(m, icrc.o, out_reg.i)
        axis = self.m_axis
        m.d.comb += [
            axis.tdata.eq(out_reg.o.payload.data),
            axis.tkeep.eq(out_reg.o.payload.keep),
            axis.tlast.eq(out_reg.o.payload.last),
            axis.tvalid.eq(out_reg.o.valid),
            out_reg.o.ready.eq(axis.tready),
        ]
        return m

    def _frame_tags(self, m, seq, hdr_fifo, tags):
        """Per-frame tags: each FIFO of ``tags`` takes its entry for every
        descriptor the sequencer emits, and its reader pops it as the frame's
        last beat passes; frames pass in descriptor order. A FIFO holds
        ``max_picked_ahead`` + 2 entries, more than can be between the two
        (descriptors picked ahead of the wire), and stops the sequencer if full."""
        if not tags:
            wiring.connect(m, seq.hdr_desc, hdr_fifo.i)
            return
        room = Value.cast(1)
        for fifo, _ in tags:
            room = room & fifo.w_rdy
        for fifo, entry in tags:
            m.d.comb += [fifo.w_data.eq(entry),
                         fifo.w_en.eq(seq.hdr_desc.valid & seq.hdr_desc.ready)]
        m.d.comb += [
            hdr_fifo.i.payload.eq(seq.hdr_desc.payload),
            hdr_fifo.i.valid.eq(seq.hdr_desc.valid & room),
            seq.hdr_desc.ready.eq(hdr_fifo.i.ready & room),
        ]

    def _plane_tags(self, m, seq):
        """``m_axis.tuser`` = each frame's plane, on every beat (``_frame_tags``)."""
        m.submodules.plane_fifo = planes = SyncFIFO(
            width=PLANE_BITS, depth=self.max_picked_ahead + 2)
        axis = self.m_axis
        m.d.comb += [
            axis.tuser.eq(planes.r_data),
            planes.r_en.eq(axis.tvalid & axis.tready & axis.tlast),
        ]
        return planes, seq.hdr_plane

    def _carrier_tags(self, m, seq, carrier, icrc):
        """Each SRv6 frame's carrier (``hw.headers.ev_fields``), for the
        ``CarrierWriter`` between the ICRC and ``out_reg`` (``_frame_tags``)."""
        d = seq.hdr_desc.payload
        _, _, address = ev_fields(d.ev, d.ev_format, self.ev_width, d.dst_ip)
        srv6 = d.v6 & (d.ev_format == EvFormat.SRV6)
        m.submodules.carrier_fifo = fifo = SyncFIFO(width=1 + 128,
                                                    depth=self.max_picked_ahead + 2)
        m.d.comb += [
            carrier.srv6.eq(fifo.r_data[0]),
            carrier.address.eq(fifo.r_data[1:]),
            fifo.r_en.eq(icrc.o.valid & icrc.o.ready & icrc.o.payload.last),
        ]
        return fifo, Cat(srv6, address)

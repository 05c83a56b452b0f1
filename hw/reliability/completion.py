"""Send completions: read the WQE's wr_id from the SQ ring, write the CQE to the send CQ ring."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.axi import AXI_BURST_INCR, AXI_RESP_OKAY, AXI4Signature
from hw.pipeline import OneHotFSM, load_in_groups, state_copy

from .layouts import WimmDone, WqeFlags, WqeOpcode

__all__ = ["CompletionRequest", "CompletionWriter", "DmaConfig", "WQE_BYTES", "CQE_BYTES"]

WQE_BYTES = 64
CQE_BYTES = 32
WQE_USED_BYTES = 0x28  # opcode .. length: what a CQE needs
WqeFlags_SIGNALED_BIT = WqeFlags.SIGNALED.bit_length() - 1


def CompletionRequest(num_qps):
    # clear = 1: the QP was reset, its CQ producer index goes back to 0 (no CQE)
    return data.StructLayout(
        {"qpn": range(num_qps), "wqe_index": 16, "status": 8, "clear": 1}
    )


DmaConfig = data.StructLayout(
    {"sq_base": 64, "cq_base": 64, "sq_log2": 5, "_r0": 3, "cq_log2": 5, "_r1": 19}
)


class CompletionWriter(wiring.Component):
    """One send CQE per request, in request order, but none for a SUCCESS of a WQE
    that is not signaled (its flags byte 0x01, bit 0 clear), as verbs does.

    Interface
    ---------
    ``req``       In(stream(CompletionRequest)): complete WQE ``wqe_index`` of ``qpn`` with
                  ``status`` (``CqeStatus``: 0 SUCCESS, 1 RETRY_EXCEEDED, 2 LOC_QP_OP_ERR,
                  5 FLUSHED), or reset its ring.
    ``cfg_addr``, ``cfg_data``: a synchronous read port on the per-QP ring configuration
                  (``DmaConfig``), data the cycle after the address; only the low
                  ``addr_width`` bits of its bases are used.
    ``m_axi``     Out(AXI4Signature(addr_width, data_width, 4)): reads bytes 0x00..0x27 of
                  the WQE at SQ base + (wqe_index mod 2^sq_log2) x 64, then writes the
                  32-byte CQE at CQ base + (pi mod 2^cq_log2) x 32, pi being the QP's CQE
                  count; both sums wrap within ``addr_width`` bits. IDs are 0.
    ``cqe_done``  Out(1): one-cycle pulse per CQE written (B received).
    ``dma_error`` Out(1): pulse when R or B answers other than OKAY (the CQE is still counted).
    ``wimm_done``  Out(stream(WimmDone)), no backpressure (``ready`` is not looked at): one
                  cycle's ``valid`` per SUCCESS request whose WQE's opcode byte (the first R
                  beat) is WRITE_WITH_IMM, signaled or not, 2 cycles after that beat; the
                  QP's count of outstanding WRITE_WITH_IMMs against ``max_wimm`` (TX's
                  ``WimmBound``) goes down by one.

    CQE (32 bytes, little-endian): 0x00 wr_id, 0x08 byte_len (WQE length on SUCCESS, 0
    otherwise), 0x0C imm, 0x10 qpn, 0x14 status, 0x15 WQE opcode, 0x16 0, 0x17 flags
    (bit 7 = phase: 1 on the first pass of the ring, toggling on each pass), 0x18 u16
    the WQE's ring index (so the host knows the unsignaled WQEs before it are done),
    0x1A..0x1F 0. An unsignaled SUCCESS writes nothing and takes no ring entry: the
    request ends after the WQE read (its flags byte, from the first R beat, registered).

    Latency: 4 cycles from ``req`` to AR, then the memory's read latency, one cycle to
    AW and ``32 / (data_width / 8)`` W beats (1 at 256 bits and above), then B.
    Throughput: one CQE per about 13 + read latency + write latency cycles at 64 bits.
    The AXI addresses come from registers (the WQE's computed in ADDR, the CQE's from
    registers updated every cycle), not from an adder in front of the ports; W data
    and ``wlast`` come from registers (each beat's word loaded the cycle before).
    """

    def __init__(self, num_qps: int, data_width: int = 64, addr_width: int = 64):
        self.num_qps = num_qps
        self.data_width = data_width
        self.addr_width = addr_width
        self.lanes = data_width // 8
        super().__init__(
            {
                "req": In(stream.Signature(CompletionRequest(num_qps))),
                "cfg_addr": Out(range(num_qps)),
                "cfg_data": In(DmaConfig),
                "m_axi": Out(AXI4Signature(addr_width, data_width, 4)),
                "cqe_done": Out(1),
                "dma_error": Out(1),
                "wimm_done": Out(stream.Signature(WimmDone)),
            }
        )

    def elaborate(self, platform):
        m = Module()
        axi = self.m_axi
        lanes, dw = self.lanes, self.data_width
        size_log2 = (lanes - 1).bit_length()
        rbeats = -(-WQE_USED_BYTES // lanes)
        wbeats = max(1, CQE_BYTES // lanes)
        wsize_log2 = (min(lanes, CQE_BYTES) - 1).bit_length()

        m.submodules.pi_mem = pi_mem = Memory(shape=16, depth=self.num_qps, init=[])
        pi_rd = pi_mem.read_port()
        pi_wr = pi_mem.write_port()

        req = Signal(CompletionRequest(self.num_qps))
        cfg = Signal(DmaConfig)
        pi = Signal(16)
        wqe = Signal(rbeats * dw)
        cqe = Signal(8 * CQE_BYTES)
        error = Signal()

        m.d.comb += [
            self.cfg_addr.eq(req.qpn),
            pi_rd.addr.eq(req.qpn),
            pi_wr.addr.eq(req.qpn),
            axi.arburst.eq(AXI_BURST_INCR),
            axi.awburst.eq(AXI_BURST_INCR),
            axi.arsize.eq(size_log2),
            axi.awsize.eq(wsize_log2),
            axi.arlen.eq(rbeats - 1),
            axi.awlen.eq(wbeats - 1),
            axi.arcache.eq(0b0011),
            axi.awcache.eq(0b0011),
        ]

        cq_mask = Signal(16)
        m.d.comb += cq_mask.eq((Const(1, 17) << cfg.cq_log2) - 1)
        # registered every cycle, like the addresses: the CQE's phase and status test
        # (pi, cfg and req set by LATCH, the CQE loaded from AW on)
        phase = Signal()
        success = Signal()
        m.d.sync += [phase.eq(~(pi >> cfg.cq_log2)[0]), success.eq(req.status == 0)]
        # the addresses, registered: the WQE's from the SQ offset registered in LATCH (in
        # ADDR), the CQE's every cycle from pi and cfg (set in LATCH, read in AW, 3 or
        # more cycles later)
        sq_off = Signal(22)
        aw = self.addr_width
        ar_addr = Signal(aw)
        cq_off = Signal(21)
        cq_addr = Signal(aw)
        m.d.sync += [cq_off.eq((pi & cq_mask) << 5), cq_addr.eq(cfg.cq_base[:aw] + cq_off)]

        # CQE fields from the WQE bytes
        def wqe_field(offset, nbytes):
            return wqe[8 * offset : 8 * (offset + nbytes)]

        m.d.comb += cqe.eq(
            Cat(
                wqe_field(0x08, 8),  # wr_id
                Mux(success, wqe_field(0x20, 4), 0),  # byte_len
                wqe_field(0x04, 4),  # imm
                Cat(req.qpn, Const(0, 32))[:32],  # qpn
                req.status,
                wqe_field(0x00, 1),  # opcode
                Const(0, 8),
                Const(0, 7),
                phase,
                req.wqe_index,
            )
        )
        # no CQE for an unsignaled SUCCESS: registered from the first R beat (the WQE's
        # flags byte; success is set from ADDR on), so AW's valid is a flip-flop's AND
        skip = Signal()
        # the WQE is a WRITE_WITH_IMM that completed SUCCESS: registered from the
        # first R beat (the opcode byte), a pulse on wimm_done the cycle after (req
        # holds its QPN until the next IDLE)
        imm_beat = Signal()
        m.d.sync += [imm_beat.eq(0), self.wimm_done.valid.eq(imm_beat),
                     self.wimm_done.payload.qpn.eq(req.qpn)]

        # One flip-flop per state: "in state X" drives the clock enables of cfg (copies
        # of the flip-flop), pi, ar_addr and wword and the handshakes (req.ready is the
        # IDLE flop) with no decode in front.
        fsm = OneHotFSM(m, ("CLEAR", "IDLE", "FETCH", "LATCH", "ADDR", "AR", "R", "AW", "W",
                            "B"), "CLEAR")
        clear_q = Signal(range(self.num_qps))
        # R: rsel is one-hot on the beat expected (0 outside R), so beat k's enable is
        # rvalid & rsel[k], two flip-flops. W: wdata comes from a register (wword), the
        # CQE's first word loaded in AW, the next one (wsel, one-hot on the beat on the
        # bus) at each W transfer; wlast is wsel's top bit. wword's load, AW or a W
        # transfer, is its one clock enable: the transfer (a decode of wready) has
        # no word mux behind it.
        rsel = Signal(rbeats)
        wsel = Signal(wbeats)
        wword = Signal(dw)
        if dw <= 8 * CQE_BYTES:
            cqe_words = [cqe[k * dw : (k + 1) * dw] for k in range(wbeats)]
        else:
            cqe_words = [Cat(*[cqe] * (dw // (8 * CQE_BYTES)))]
        next_word = Const(0, dw)
        for k in range(wbeats - 1):
            next_word = next_word | Mux(wsel[k], cqe_words[k + 1], 0)
        with fsm.State("CLEAR"):  # after reset: every CQ producer index to 0
            m.d.comb += [pi_wr.addr.eq(clear_q), pi_wr.data.eq(0), pi_wr.en.eq(1)]
            m.d.sync += clear_q.eq(clear_q + 1)
            with m.If(clear_q == self.num_qps - 1):
                fsm.next = "IDLE"
        with fsm.State("IDLE"):
            m.d.comb += self.req.ready.eq(1)
            with m.If(self.req.valid):
                m.d.sync += req.eq(self.req.payload)
                fsm.next = "FETCH"
        with fsm.State("FETCH"):
            fsm.next = "LATCH"  # addresses (from req) settle; data next cycle
        # LATCH lasts the one cycle after FETCH: cfg's load in it is split into groups of
        # at most 64 bits, each under its own copy of LATCH's flip-flop (one net to all
        # 160 enables)
        load_in_groups(m, [(cfg, self.cfg_data)],
                       lambda k: state_copy(m, fsm.st.FETCH, 1, f"st_LATCH_{k}"))
        with fsm.State("LATCH"):
            sq_mask_in = (Const(1, 17) << self.cfg_data.sq_log2) - 1
            m.d.sync += [pi.eq(pi_rd.data), error.eq(0),
                         sq_off.eq((req.wqe_index & sq_mask_in) << 6)]
            with m.If(req.clear):
                m.d.comb += [pi_wr.data.eq(0), pi_wr.en.eq(1)]
                fsm.next = "IDLE"
            with m.Else():
                fsm.next = "ADDR"
        with fsm.State("ADDR"):
            m.d.sync += ar_addr.eq(cfg.sq_base[:aw] + sq_off)
            fsm.next = "AR"
        with fsm.State("AR"):
            m.d.comb += [axi.arvalid.eq(1), axi.araddr.eq(ar_addr)]
            with m.If(axi.arready):
                m.d.sync += rsel.eq(1)
                fsm.next = "R"
        with m.If(axi.rvalid):
            for k in range(rbeats):
                with m.If(rsel[k]):
                    m.d.sync += wqe[k * dw : (k + 1) * dw].eq(axi.rdata)
        with fsm.State("R"):
            m.d.comb += axi.rready.eq(1)
            with m.If(axi.rvalid):
                with m.If(rsel[0]):
                    m.d.sync += [
                        skip.eq(success & ~axi.rdata[8 + WqeFlags_SIGNALED_BIT]),
                        imm_beat.eq(success & (axi.rdata[:8] == WqeOpcode.WRITE_WITH_IMM)),
                    ]
                m.d.sync += rsel.eq(rsel << 1)
                with m.If(axi.rresp != AXI_RESP_OKAY):
                    m.d.sync += error.eq(1)
                with m.If(axi.rlast):
                    m.d.sync += rsel.eq(0)
                    fsm.next = "AW"
        with fsm.State("AW"):
            m.d.comb += [axi.awvalid.eq(~skip), axi.awaddr.eq(cq_addr)]
            m.d.sync += wsel.eq(1)
            with m.If(skip):
                fsm.next = "IDLE"
            with m.Elif(axi.awready):
                fsm.next = "W"
        with fsm.State("W"):
            m.d.comb += [axi.wvalid.eq(1), axi.wlast.eq(wsel[-1]), axi.wdata.eq(wword)]
            if dw <= 8 * CQE_BYTES:
                m.d.comb += axi.wstrb.eq((1 << lanes) - 1)
            else:
                m.d.comb += axi.wstrb.eq(
                    Const((1 << CQE_BYTES) - 1, lanes) << (cq_addr[5 : size_log2] * CQE_BYTES))
            with m.If(axi.wready):
                m.d.sync += wsel.eq(wsel << 1)
                with m.If(wsel[-1]):
                    fsm.next = "B"
        # the WQE and the CQE's other inputs are stable from R on
        with m.If(fsm.st.AW | (fsm.st.W & axi.wready)):
            m.d.sync += wword.eq(Mux(fsm.st.AW, cqe_words[0], next_word))
        with fsm.State("B"):
            m.d.comb += axi.bready.eq(1)
            with m.If(axi.bvalid):
                m.d.comb += [
                    pi_wr.data.eq(pi + 1),
                    pi_wr.en.eq(1),
                    self.cqe_done.eq(1),
                    self.dma_error.eq(error | (axi.bresp != AXI_RESP_OKAY)),
                ]
                fsm.next = "IDLE"
        return m

"""AXI4 write master for the receive path: payload placement and CQE writes.

``RxDmaWriter`` takes write commands, in order, and the byte stream each one
writes; it turns them into AXI4 INCR bursts with byte strobes and reports,
per command, when every burst of it has its B response.
"""

from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from hw.axi import AXI_BURST_INCR, AXI_RESP_OKAY, AXI4Signature, check_dma_addr_width
from hw.bits import lane_operand
from hw.stream import Beat, check_data_width

__all__ = ["CQE_BYTES", "DmaDone", "PendingWrite", "RxDmaResponses", "RxDmaWriter", "WriteCmd",
           "b_responses"]

CQE_BYTES = 32


class WriteCmd(data.StructLayout):
    """One write: ``len`` bytes at ``addr`` (an ``addr_width``-bit DMA address).

    ``discard``: write nothing, only drain ``len > 0`` bytes of ``data``.
    ``inline``: the bytes come from ``inline_data`` (a 32-byte CQE, byte 0 in
    bits 7..0), not from ``data``. ``notify``: report on ``done`` with ``tag``.
    """

    def __init__(self, tag_width, addr_width=64):
        super().__init__(
            {
                "addr": unsigned(addr_width),
                "len": unsigned(16),
                "discard": unsigned(1),
                "inline": unsigned(1),
                "notify": unsigned(1),
                "tag": unsigned(tag_width),
                "inline_data": unsigned(8 * CQE_BYTES),
            }
        )


class DmaDone(data.StructLayout):
    def __init__(self, tag_width):
        super().__init__({"tag": unsigned(tag_width), "ok": unsigned(1)})


class RxDmaWriter(wiring.Component):
    """AXI4 write master: commands plus a lane-0 aligned byte stream in, bursts out.

    Interface
    ---------
    ``cmd``   In(stream.Signature(WriteCmd)): writes, executed in order.
    ``data``  In(stream.Signature(Beat(data_width))): the bytes of the
              non-inline commands with ``len > 0``, byte 0 in lane 0, every
              beat full but the one with ``last``. A command consumes beats up
              to and including ``last``, whatever its ``len``: if the stream
              ends early the rest of the write has its strobes off; if it runs
              long the extra beats are drained. The stream can never make the
              writer touch a byte outside ``[addr, addr + len)``.
    ``done``  Out(stream.Signature(DmaDone)): one per ``notify`` command, in
              command order, once every burst of it has its B response;
              ``ok`` = 0 if any was not OKAY. A zero-length ``notify`` write
              reports ``ok`` = 1 without touching the bus. ``done`` is buffered
              ``max_outstanding`` deep and must be drained: the writer stalls B
              while it is full.
    ``m_axi`` Out(AXI4Signature(addr_width, data_width, id_width)): writes
              only; reads are tied off. One ID (0), so B responses come in
              order.

    Bursts: INCR, full-width beats, never longer than ``min(4096, 256 x bytes
    per beat)`` bytes and never across a boundary of that size, so never
    across a 4 KiB page. Strobes cover exactly the bytes written. Addresses
    are ``addr_width`` bits (32..64); a write running past 2^addr_width
    wraps to address 0 (the RX validator passes none).

    Latency: a taken command is copied into registers, and the cycle after
    it is decoded from them (its beat counts, end and first boundary), so
    nothing computed from the offered command reaches a counter. AW and W
    each load their registers from the copy: AW in that decode cycle, W in
    the same cycle if it is free, else in the cycle after its current
    command's last beat (or the end of its drain). The copy is held until
    both have loaded; the next command is taken once they have and the
    command's last AW has been taken. So a command's AW bursts go out while
    the command before it still sends W beats, and an interconnect that
    passes W in AW order has the burst at hand when its beats come. On an
    idle writer the first W beat is offered 3 cycles and the first AW 3
    cycles after a command is taken: W beats leave through an output
    register (WDATA, WSTRB, WLAST and WVALID are flip-flops), and the first
    burst's AWLEN is computed from registers in the cycle before its AW;
    each later burst's in the cycle after the previous AW. W beats may come
    before their AW, as AXI allows. The AW handshake moves flags only: the
    next burst's address and bytes are stepped, and the offered one's
    address loaded into an output register, in the cycle its AWLEN is
    computed. A writing command enters the B queue in the cycle its last AW
    is first offered (from registers, not on its handshake); a zero-length
    ``notify`` command 2 cycles after it is taken; each queue entry is
    loaded into registers in a cycle of its own before its B responses are
    counted, and ``done`` follows the last of them by 2 cycles (a register,
    then its queue). Throughput: 1 W beat per cycle while ``data`` and
    ``wready`` allow; one idle W cycle between two commands when the second
    is taken while W still writes the first (so its AW ran ahead); up to
    ``max_outstanding`` commands wait for their B responses while later
    ones are written.
    """

    def __init__(self, data_width=64, tag_width=4, id_width=4, max_outstanding=16,
                 addr_width=64):
        check_data_width(data_width)
        check_dma_addr_width(addr_width)
        if max_outstanding < 2 or max_outstanding & (max_outstanding - 1):
            raise ValueError(f"max_outstanding must be a power of two >= 2, not {max_outstanding}")
        self.data_width = data_width
        self.tag_width = tag_width
        self.addr_width = addr_width
        self.max_outstanding = max_outstanding
        self.bpb = data_width // 8
        self.boundary = min(4096, 256 * self.bpb)
        self.max_bursts = (65535 + self.bpb) // self.boundary + 2
        super().__init__(
            {
                "cmd": In(stream.Signature(WriteCmd(tag_width, addr_width))),
                "data": In(stream.Signature(Beat(data_width))),
                "done": Out(stream.Signature(DmaDone(tag_width))),
                "m_axi": Out(AXI4Signature(addr_width, data_width, id_width)),
            }
        )

    def elaborate(self, platform):
        m = Module()
        axi = self.m_axi
        lb = exact_log2(self.bpb)

        # Reads are not used.
        m.d.comb += [axi.arvalid.eq(0), axi.rready.eq(1)]
        m.d.comb += [
            axi.awid.eq(0),
            axi.awsize.eq(lb),
            axi.awburst.eq(AXI_BURST_INCR),
            axi.awcache.eq(0b0011),
            axi.awprot.eq(0b010),
        ]

        # B bookkeeping: one entry per AXI-writing or notifying command
        # (RxDmaResponses's queues, and its logic built here by b_responses).
        m.submodules.pending = pending = SyncFIFOBuffered(
            width=PendingWrite(self.tag_width, self.max_bursts).size,
            depth=self.max_outstanding)
        m.submodules.done_q = done_q = SyncFIFOBuffered(
            width=self.tag_width + 1, depth=self.max_outstanding)
        entry = SimpleNamespace(  # the queue's write side, as RxDmaResponses.entry
            valid=pending.w_en, ready=pending.w_rdy,
            payload=data.View(PendingWrite(self.tag_width, self.max_bursts), pending.w_data))

        r = self._registers()
        self._command(m, r, entry)
        self._bursts(m, r, entry)
        self._beats(m, r)
        b_responses(m, pending, done_q, axi.bvalid, axi.bresp, axi.bready, self.done,
                    self.max_bursts)
        return m

    def _registers(self):
        """The command stage's registers (AW generation and W generation run
        side by side), and the flags decoded from them."""
        axi = self.m_axi
        dw, bpb, lb = self.data_width, self.bpb, exact_log2(self.bpb)
        bnd = self.boundary
        r = SimpleNamespace()
        r.cmd = Signal(WriteCmd(self.tag_width, self.addr_width))
        r.aw_addr = Signal(self.addr_width)  # next burst start (byte address)
        r.aw_left = Signal(17)  # bytes not yet covered by an AW
        r.aw_busy = Signal()
        r.bursts = Signal(range(self.max_bursts + 1))

        r.w_busy = Signal()
        r.drain = Signal()  # consuming input only
        r.beat_addr = Signal(self.addr_width)  # address of the W beat being emitted (aligned)
        r.out_left = Signal(range(65536 // bpb + 3))  # W beats still to emit
        # The W beat's last-lane mask and WLAST from flip-flops kept with
        # out_left and beat_addr: out_left == 1, and the beat ends a boundary.
        r.out_last = Signal()
        r.bnd_last = Signal()
        r.in_left = Signal(range(65536 // bpb + 3))  # input beats still expected
        r.in_one = Signal()  # in_left == 1, as a register (no compare behind WREADY)
        r.in_ended = Signal()
        r.starved = Signal()  # in_ended & (in_left != 0), as a register
        r.first_beat = Signal()
        r.shift = Signal(lb)
        r.end_lane = Signal(lb)  # lane of the last byte written
        r.prev = Signal(dw)
        r.inline_buf = Signal(8 * CQE_BYTES)
        r.inline_left = Signal(range(CQE_BYTES // min(bpb, CQE_BYTES) + 2))

        # AW runs from registers: a command's burst length, and whether the
        # burst is its last, are computed the cycle before the burst is offered.
        lbnd = exact_log2(bnd)
        r.aw_prep = Signal()  # this cycle computes the next burst
        r.aw_valid = Signal()
        r.aw_last = Signal()  # the burst offered is the command's last
        r.aw_len = Signal(8)  # its AWLEN
        r.cmd_end = Signal(lbnd)  # low bits of the address of the command's last byte
        r.zero_notify = Signal()  # a zero-length notify command to report next cycle
        r.room = Signal(range(bnd + 1))  # bytes from the command's address to the boundary
        r.cmd_fits = Signal()  # the command ends before the first boundary
        r.aw_first = Signal()  # the next burst is the command's first
        # (in_left != 0) & ~in_ended, as two registers split by the command's
        # ``inline``: the W handshake is then a function of flip-flops, WREADY
        # and the stream's valid only (``inline`` is not in front of the W
        # beat's clock enable, nor of the input select in front of the
        # realigning mux).
        r.in_stream = Signal()  # the input is due from ``data``
        r.in_inline = Signal()  # the input is due from the inline CQE bytes
        r.need_in = r.in_stream | r.in_inline

        # The cycle after a command is taken, AW's registers load from its
        # registered copy (``decode``); W's load from it in a ``w_load`` cycle:
        # the same one if W is free or ends its command then, else the cycle
        # after W's last beat or drain (``w_pend`` until then). The copy is
        # held until both have read it; a command is taken while the one
        # before it still has W beats to go, so its AW bursts run ahead.
        r.decode = Signal()
        r.w_load = Signal()
        r.w_pend = Signal()
        r.w_inline = Signal()  # W's command is inline (the copy's flag moves on)
        r.idle = ~r.aw_busy & ~r.zero_notify & ~r.decode & ~r.w_pend
        r.w_idle = ~r.w_busy & ~r.drain & ~r.w_load
        r.w_done = Signal()  # W's command ends this cycle: its last beat, or the drain's

        # W output register: the realigned beat, its strobes and WLAST are
        # computed from the writer's registers and the payload stream, and
        # reach the bus (an AXI4RegisterSlice in NicCore) from flip-flops.
        # w_free: the register can take a beat this cycle.
        r.wq_valid = Signal()
        r.wq_data = Signal(dw)
        r.wq_strb = Signal(bpb)
        r.wq_last = Signal()
        r.w_free = ~r.wq_valid | axi.wready

        # the input beat: from the payload stream or the inline CQE bytes
        r.in_valid = Signal()
        r.in_last = Signal()
        return r

    def _command(self, m, r, entry):
        """The input select, the inline bytes' shift, taking a command into
        its registered copy, its decode the cycle after, and the B queue's
        entry of a zero-length ``notify`` command."""
        bpb, lb = self.bpb, exact_log2(self.bpb)
        dw, bnd = self.data_width, self.boundary
        lbnd = exact_log2(self.boundary)
        # Input mux: the payload stream or the inline CQE bytes.
        with m.If(r.w_inline):
            m.d.comb += [
                r.in_valid.eq(1),
                r.in_last.eq(r.inline_left == 1),
            ]
        with m.Else():
            m.d.comb += [
                r.in_valid.eq(self.data.valid),
                r.in_last.eq(self.data.payload.last),
                # Ready without the stream's valid in it (it matters only with
                # valid): a W beat can go and takes input from the stream, or
                # the drain runs. Fewer LUTs from in_stream to the payload
                # register's enable in the parser
                # (docs/timing.md#rx-dma-writer).
                self.data.ready.eq((r.w_busy & r.w_free & r.in_stream) | r.drain),
            ]
        # The inline bytes move on a beat whenever a W beat can go or the
        # drain runs: for an inline command (its input always valid) that is
        # when one is taken, or after its last beat, when they are read no
        # more; other commands never read them. So this 257-bit enable has no
        # handshake in it but WREADY.
        with m.If(r.drain | (r.w_busy & r.w_free)):
            if 8 * CQE_BYTES > dw:
                m.d.sync += r.inline_buf.eq(r.inline_buf >> dw)
            m.d.sync += r.inline_left.eq(r.inline_left - 1)

        # Accept a command. While the writer is idle its command registers
        # follow the offered command, taken or not (nothing reads them while
        # idle), so their enable is the idle decode of flip-flops and not the
        # handshake with the queue's level; only `decode` waits for it. They
        # are copies: every sum over the command's address and length is
        # taken in the decode and W load cycles from these registers, so the
        # command's source (the engine's completion/placement mux) reaches no
        # adder (docs/timing.md#rx-dma-writer).
        #
        # Only the command's own copy loads under ``idle`` (a LUT of four
        # flags), and its 256 inline bits under ``~w_pend``, a flip-flop: they
        # follow the offered command until a taken one waits for W, whose load
        # cycle reads them into inline_buf before they change again. The
        # working registers (addresses, counts, flags) load from the copy
        # under ``decode`` (AW's) and ``w_load`` (W's), flip-flops: ``idle``
        # is too slow an enable for ~400 bits (docs/timing.md#rx-dma-writer).
        c = self.cmd.payload
        with m.If(~r.w_pend):
            m.d.sync += r.cmd.inline_data.eq(c.inline_data)
        with m.If(r.idle):
            m.d.sync += [r.cmd[f].eq(c[f]) for f, _ in r.cmd.shape() if f != "inline_data"]
        take = r.idle & self.cmd.valid & entry.ready
        with m.If(take):
            m.d.comb += self.cmd.ready.eq(1)
            m.d.sync += r.decode.eq(1)
        # W loads the taken command as soon as it is free, or the cycle
        # after the one it runs ends.
        with m.If((take | r.w_pend) & (r.w_idle | r.w_done)):
            m.d.sync += [r.w_load.eq(1), r.w_pend.eq(0)]
        with m.Elif(take):
            m.d.sync += r.w_pend.eq(1)

        # Decode: from the registered copy.
        d_len = r.cmd.len
        d_shift = r.cmd.addr[:lb]
        d_in_beats = (d_len + (bpb - 1)) >> lb
        d_in_left = Mux(r.cmd.inline, (CQE_BYTES + bpb - 1) // bpb, d_in_beats)
        d_out_beats = (d_len + d_shift + (bpb - 1)) >> lb
        # d_out_beats == 1 without the full-width adder in front of out_last
        d_one_beat = ((d_len != 0) & (d_len[lb + 1 :] == 0)
                      & (d_len[: lb + 1] + d_shift <= bpb))
        d_end_full = Signal(lbnd + 17)
        m.d.comb += d_end_full.eq(r.cmd.addr[:lbnd] + d_len - 1)
        d_end = d_end_full[:lbnd]
        with m.If(r.decode):
            m.d.sync += [
                r.decode.eq(0),
                r.aw_addr.eq(r.cmd.addr),
                r.aw_left.eq(r.cmd.len),
                r.bursts.eq(0),
                r.aw_first.eq(1),
                r.cmd_end.eq(d_end),
                r.cmd_fits.eq(d_end_full[lbnd:] == 0),
                r.room.eq(bnd - r.cmd.addr[:lbnd]),
            ]
            with m.If(~r.cmd.discard):
                m.d.sync += [
                    r.aw_busy.eq(d_len != 0),
                    r.aw_prep.eq(d_len != 0),
                    # Nothing to write: report through the B queue to keep order.
                    r.zero_notify.eq((d_len == 0) & r.cmd.notify),
                ]
        with m.If(r.w_load):
            m.d.sync += [
                r.w_load.eq(0),
                r.beat_addr.eq(Cat(Const(0, lb), r.cmd.addr[lb:])),
                r.in_ended.eq(0),
                r.starved.eq(0),
                r.first_beat.eq(1),
                r.shift.eq(d_shift),
                r.prev.eq(0),
                r.inline_left.eq((CQE_BYTES + bpb - 1) // bpb),
                # the inline bytes from the command's copy, under ``w_load`` (a
                # flip-flop) rather than under ``idle`` (a LUT of four;
                # docs/timing.md#rx-dma-writer)
                r.inline_buf.eq(r.cmd.inline_data),
                r.out_left.eq(d_out_beats),
                r.out_last.eq(d_one_beat),
                r.bnd_last.eq(r.cmd.addr[lb:lbnd] == (bnd // bpb) - 1),
                r.in_left.eq(d_in_left),
                r.in_one.eq(d_in_left == 1),
                r.end_lane.eq(d_end[:lb]),
                r.in_stream.eq(~r.cmd.inline & (d_len != 0)),
                r.in_inline.eq(r.cmd.inline),
                r.w_inline.eq(r.cmd.inline),
            ]
            with m.If(r.cmd.discard):
                m.d.sync += r.drain.eq(d_len != 0)
            with m.Else():
                m.d.sync += r.w_busy.eq(d_len != 0)
        with m.If(r.zero_notify):
            # The command was taken with room in the queue, and nothing else
            # writes to it before the next command.
            m.d.sync += r.zero_notify.eq(0)
            m.d.comb += [
                entry.valid.eq(1),
                entry.payload.tag.eq(r.cmd.tag),
                entry.payload.notify.eq(1),
                entry.payload.none.eq(1),
            ]

    def _bursts(self, m, r, entry):
        """AW: a command's bursts, each computed the cycle before it is
        offered, and the command's B queue entry."""
        axi = self.m_axi
        lb, bnd, lbnd = exact_log2(self.bpb), self.boundary, exact_log2(self.boundary)
        # AW: bursts split at the burst boundary; each is computed in an
        # aw_prep cycle from registers and offered in the next. The prep
        # cycle also steps the AW state on to the next burst (its start at
        # the boundary, the bytes left, the room, the burst count) and loads
        # the offered burst's address into an output register, so the
        # handshake (AWREADY is the RX AXI slice's flip-flop, placed by the
        # arbiter) reaches three flags' next values only: aw_valid, aw_busy
        # and aw_prep. Nothing of the address, the count or the B queue
        # hangs behind it (docs/timing.md#rx-dma-writer).
        last = Signal()
        aw_out = Signal(self.addr_width - lb)  # the offered burst's start, beat-aligned
        # The B queue's entry for a writing command: written from registers
        # the cycle after its last burst is computed (the cycle its AW is
        # first offered), not on the AW handshake. B responses are counted
        # only against the queue's head, and none can come before the AW.
        pend_go = Signal()
        pend_last = Signal(ceil_log2(self.max_bursts + 1))  # the command's bursts - 1
        m.d.comb += last.eq(Mux(r.aw_first, r.cmd_fits, r.aw_left <= bnd))
        m.d.sync += pend_go.eq(0)
        with m.If(r.aw_prep):
            m.d.sync += [
                r.aw_prep.eq(0),
                r.aw_valid.eq(1),
                r.aw_last.eq(last),
                aw_out.eq(r.aw_addr[lb:]),
                # Beats - 1: to the command's last byte, or to the boundary.
                r.aw_len.eq(Mux(last, r.cmd_end[lb:] - r.aw_addr[lb:lbnd], ~r.aw_addr[lb:lbnd])),
                pend_go.eq(last),
                pend_last.eq(r.bursts),
                r.bursts.eq(r.bursts + 1),
                # The next burst (read only if this one is not the last)
                # starts at the boundary.
                r.aw_addr.eq(Cat(Const(0, lbnd), r.aw_addr[lbnd:] + 1)),
                r.aw_left.eq(r.aw_left - r.room),
                r.room.eq(bnd),
                r.aw_first.eq(0),
            ]
        m.d.comb += [
            axi.awaddr.eq(Cat(Const(0, lb), aw_out)),
            axi.awlen.eq(r.aw_len),
            axi.awvalid.eq(r.aw_valid),
        ]
        with m.If(r.aw_valid & axi.awready):
            m.d.sync += r.aw_valid.eq(0)
            with m.If(r.aw_last):
                m.d.sync += r.aw_busy.eq(0)
            with m.Else():
                m.d.sync += r.aw_prep.eq(1)
        with m.If(pend_go):
            m.d.comb += [
                entry.valid.eq(1),
                entry.payload.tag.eq(r.cmd.tag),
                entry.payload.notify.eq(r.cmd.notify),
                entry.payload.last.eq(pend_last),
            ]

    def _beats(self, m, r):
        """W: the input realigned to the target address into the W output
        register, the beat and input counters, and the drain."""
        axi = self.m_axi
        dw, bpb, lb = self.data_width, self.bpb, exact_log2(self.bpb)
        bnd, lbnd = self.boundary, exact_log2(self.boundary)
        # W: realign lane-0 input to the target address: each output beat is
        # the current input beat shifted up by `shift` lanes over the top
        # lanes of the previous one.
        cur = lane_operand(  # each output lane selects from it
            m, Mux(r.in_inline, r.inline_buf[: min(dw, 8 * CQE_BYTES)], 0)
            | Mux(r.in_stream, self.data.payload.data, 0), dw, "cur")
        window = Cat(r.prev, cur)
        strb = Signal(bpb)
        lanes = Signal(bpb)
        m.d.comb += lanes.eq(Const((1 << bpb) - 1, bpb))
        lo_mask = Mux(r.first_beat, lanes << r.shift, lanes)
        hi_mask = Mux(r.out_last, lanes >> (~r.end_lane)[:lb], lanes)
        # Beats whose input never came (stream ended early) write nothing.
        m.d.comb += strb.eq(Mux(r.starved, 0, (lo_mask & hi_mask)[:bpb]))
        # Output lane j is window lane j + bpb - shift: a bpb:1 mux per bit
        # on the shift register, not a shifter on an offset computed from it.
        realigned = Cat(
            Cat(window[dw + 8 * (j - k) : dw + 8 * (j - k + 1)] for k in range(bpb))
            .word_select(r.shift, 8)
            for j in range(bpb))
        w_go = r.w_busy & r.w_free & (~r.in_stream | self.data.valid)
        # The output register follows the realigned beat whenever it is free
        # (its enable is WREADY and its own valid flag, no writer state).
        with m.If(r.w_free):
            m.d.sync += [
                r.wq_valid.eq(w_go),
                r.wq_data.eq(realigned),
                r.wq_strb.eq(strb),
                r.wq_last.eq(r.out_last | r.bnd_last),
            ]
        m.d.comb += [
            axi.wdata.eq(r.wq_data),
            axi.wstrb.eq(r.wq_strb),
            axi.wlast.eq(r.wq_last),
            axi.wvalid.eq(r.wq_valid),
        ]
        with m.If(w_go):
            m.d.sync += [
                r.beat_addr.eq(r.beat_addr + bpb),
                r.out_left.eq(r.out_left - 1),
                r.out_last.eq(r.out_left == 2),
                r.bnd_last.eq(r.beat_addr[lb:lbnd] == (bnd // bpb) - 2),
                r.first_beat.eq(0),
                r.prev.eq(cur),
            ]
            with m.If(r.need_in):
                m.d.sync += [r.in_left.eq(r.in_left - 1), r.in_one.eq(r.in_left == 2)]
                with m.If(r.in_last):
                    # in_left stops here: the beats still expected are starved.
                    m.d.sync += [r.in_ended.eq(1), r.starved.eq(~r.in_one)]
            # Without need_in (both flags are already clear then): one term
            # fewer between WREADY and these flags.
            with m.If(r.in_last | r.in_one):
                m.d.sync += [r.in_stream.eq(0), r.in_inline.eq(0)]
            with m.If(r.out_last):
                m.d.sync += r.w_busy.eq(0)
                # Input longer than the command says: drain the rest.
                drain_on = ~r.w_inline & ~r.in_ended & ~(r.need_in & r.in_last)
                m.d.comb += r.w_done.eq(~drain_on)
                with m.If(drain_on):
                    m.d.sync += r.drain.eq(1)

        # Drain: consume input up to its last beat.
        with m.If(r.drain):
            with m.If(r.in_valid & r.in_last):
                m.d.comb += r.w_done.eq(1)
                m.d.sync += r.drain.eq(0)


class PendingWrite(data.StructLayout):
    """A B queue entry: a writing or notifying command's ``tag``, ``notify``,
    ``none`` (no burst: report at once) and ``last`` (its bursts - 1)."""

    def __init__(self, tag_width, max_bursts):
        super().__init__(
            {
                "tag": unsigned(tag_width),
                "notify": unsigned(1),
                "none": unsigned(1),
                "last": unsigned(ceil_log2(max_bursts + 1)),
            }
        )


class RxDmaResponses(wiring.Component):
    """The RX DMA writer's B bookkeeping: its commands' B responses counted
    and reported, in command order.

    Interface
    ---------
    ``entry``  In(stream.Signature(PendingWrite)): one per writing or
               notifying command, in order (``valid`` is the queue's write
               enable and ``ready`` its room: the writer takes a command only
               with room, and writes its entry later without looking).
    ``bvalid``, ``bresp`` In, ``bready`` Out: the AXI4 B channel (one ID, so
               the responses come in order).
    ``done``   Out(stream.Signature(DmaDone)): one per ``notify`` entry once
               its ``last`` + 1 responses came (``ok`` = 0 if one was not
               OKAY), at once for a ``none`` entry (``ok`` = 1); buffered
               ``depth`` deep, and B stalls while that buffer is full.

    Latency: an entry reaches the head registers 2 cycles after it is
    written (the queue, then the head copy); a report enters its own queue
    the cycle after it is decided (from flip-flops) and leaves it on
    ``done`` a cycle later. Throughput: one B response per cycle within an
    entry; 2 cycles per entry at least (the head is copied out of the queue
    in a cycle of its own, so the B handshake does not reach the queue's
    pointers).
    """

    def __init__(self, tag_width, max_bursts, depth):
        self.tag_width, self.max_bursts, self.depth = tag_width, max_bursts, depth
        super().__init__(
            {
                "entry": In(stream.Signature(PendingWrite(tag_width, max_bursts))),
                "bvalid": In(1),
                "bresp": In(2),
                "bready": Out(1),
                "done": Out(stream.Signature(DmaDone(tag_width))),
            }
        )

    def elaborate(self, platform):
        m = Module()
        m.submodules.pending = pending = SyncFIFOBuffered(
            width=len(self.entry.payload.as_value()), depth=self.depth)
        m.submodules.done_q = done_q = SyncFIFOBuffered(width=self.tag_width + 1,
                                                         depth=self.depth)
        m.d.comb += [pending.w_en.eq(self.entry.valid), pending.w_data.eq(self.entry.payload),
                     self.entry.ready.eq(pending.w_rdy)]
        b_responses(m, pending, done_q, self.bvalid, self.bresp, self.bready, self.done,
                    self.max_bursts)
        return m


def b_responses(m, pending, done_q, bvalid, bresp, bready, done, max_bursts):
    """Builds ``RxDmaResponses``'s logic in ``m`` (see its docstring) between
    its two queues (``SyncFIFOBuffered``: ``pending`` of ``PendingWrite``
    entries, ``done_q`` of ``DmaDone`` reports) and flat B and ``done``
    signals; ``RxDmaWriter`` builds it in its own module."""
    pend_r = data.View(PendingWrite(len(done.payload.tag), max_bursts), pending.r_data)
    # B: count the bursts of the head entry; report notify commands.
    b_left = Signal(range(max_bursts + 1))  # bursts of the head entry still to come - 1
    b_last = Signal()  # b_left == 0, registered with it
    b_err = Signal()
    # The head entry is copied out of the queue first (a cycle per entry,
    # while the next B cannot come sooner), so the B handshake does not
    # reach into the queue's pointers.
    head = Signal(PendingWrite(len(done.payload.tag), max_bursts))
    head_valid = Signal()
    with m.If(~head_valid):
        m.d.comb += pending.r_en.eq(1)
        m.d.sync += [
            head.eq(pend_r),
            head_valid.eq(pending.r_rdy),
            b_left.eq(pend_r.last),
            b_last.eq(pend_r.last == 0),
        ]
    # The report goes into done_q the cycle after it is decided, from
    # flip-flops (dq_en, dq_data), so the decision (head_valid, the B
    # handshake, b_last, notify: 4 LUT levels) does not reach into done_q's
    # level and pointers (docs/timing.md#rx-dma-writer). A decision clears
    # head_valid, and the next head is loaded a cycle later, so the next
    # decision comes after the write has landed and sees done_q.w_rdy with
    # it.
    dq_en = Signal()
    dq_data = Signal(len(done_q.w_data))
    m.d.comb += [done_q.w_en.eq(dq_en), done_q.w_data.eq(dq_data)]
    m.d.sync += dq_en.eq(0)
    with m.If(head_valid):
        with m.If(head.none):
            with m.If(done_q.w_rdy):
                m.d.sync += [dq_en.eq(head.notify),
                             dq_data.eq(Cat(head.tag, Const(1, 1))),
                             head_valid.eq(0)]
        with m.Elif(done_q.w_rdy):
            m.d.comb += bready.eq(1)
            with m.If(bvalid):
                err = b_err | (bresp != AXI_RESP_OKAY)
                with m.If(b_last):
                    m.d.sync += [
                        dq_en.eq(head.notify),
                        dq_data.eq(Cat(head.tag, ~err)),
                        b_err.eq(0),
                        head_valid.eq(0),
                    ]
                with m.Else():
                    m.d.sync += [
                        b_left.eq(b_left - 1),
                        b_last.eq(b_left == 1),
                        b_err.eq(err),
                    ]

    done_r = data.View(DmaDone(len(done.payload.tag)), done_q.r_data)
    m.d.comb += [
        done.valid.eq(done_q.r_rdy),
        done.payload.eq(done_r),
        done_q.r_en.eq(done.ready),
    ]

"""AXI4 write master for the receive path: payload placement and CQE writes.

``RxDmaWriter`` takes write commands, in order, and the byte stream each one
writes; it turns them into AXI4 INCR bursts with byte strobes and reports,
per command, when every burst of it has its B response.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from hw.axi import AXI_BURST_INCR, AXI_RESP_OKAY, AXI4Signature, check_dma_addr_width
from hw.stream import Beat, check_data_width

__all__ = ["CQE_BYTES", "DmaDone", "RxDmaWriter", "WriteCmd"]

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
    nothing computed from the offered command reaches a counter. The first
    W beat is then offered 3 cycles and the first AW 3 cycles after a
    command is taken: W beats leave through an output register (WDATA,
    WSTRB, WLAST and WVALID are flip-flops), and the first burst's AWLEN is
    computed from registers in the cycle before its AW; each later burst's
    in the cycle after the previous AW. W beats may come before their AW,
    as AXI allows. The AW handshake moves flags only: the next burst's
    address and bytes are stepped, and the offered one's address loaded
    into an output register, in the cycle its AWLEN is computed. A writing
    command enters the B queue in the cycle its last AW is first offered
    (from registers, not on its handshake); a zero-length ``notify``
    command 2 cycles after it is taken; each queue entry is loaded into registers in
    a cycle of its own before its B responses are counted, and ``done``
    follows the last of them by 2 cycles (a register, then its queue). Throughput: 1 W beat
    per cycle while ``data`` and ``wready`` allow; two idle cycles between
    commands (three after a command of one W beat or a zero-length
    ``notify``, whose AW or report then ends it); up to ``max_outstanding``
    commands wait for their B responses while later ones are written.
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
        dw, bpb, lb = self.data_width, self.bpb, exact_log2(self.bpb)
        bnd = self.boundary
        max_bursts = (65535 + bpb) // bnd + 2

        # Reads are not used.
        m.d.comb += [axi.arvalid.eq(0), axi.rready.eq(1)]
        m.d.comb += [
            axi.awid.eq(0),
            axi.awsize.eq(lb),
            axi.awburst.eq(AXI_BURST_INCR),
            axi.awcache.eq(0b0011),
            axi.awprot.eq(0b010),
        ]

        # B bookkeeping: one entry per AXI-writing or notifying command.
        m.submodules.pending = pending = SyncFIFOBuffered(
            width=self.tag_width + 2 + ceil_log2(max_bursts + 1), depth=self.max_outstanding
        )
        m.submodules.done_q = done_q = SyncFIFOBuffered(
            width=self.tag_width + 1, depth=self.max_outstanding
        )
        pend_w = data.View(
            data.StructLayout(
                {
                    "tag": unsigned(self.tag_width),
                    "notify": unsigned(1),
                    "none": unsigned(1),  # no burst: report at once
                    "last": unsigned(ceil_log2(max_bursts + 1)),  # bursts - 1
                }
            ),
            pending.w_data,
        )
        pend_r = data.View(pend_w.shape(), pending.r_data)

        # ---- command stage: AW generation and W generation run side by side
        cmd = Signal(WriteCmd(self.tag_width, self.addr_width))
        aw_addr = Signal(self.addr_width)  # next burst start (byte address)
        aw_left = Signal(17)  # bytes not yet covered by an AW
        aw_busy = Signal()
        bursts = Signal(range(max_bursts + 1))

        w_busy = Signal()
        drain = Signal()  # consuming input only
        beat_addr = Signal(self.addr_width)  # address of the W beat being emitted (aligned)
        out_left = Signal(range(65536 // bpb + 3))  # W beats still to emit
        # The W beat's last-lane mask and WLAST from flip-flops kept with
        # out_left and beat_addr: out_left == 1, and the beat ends a boundary.
        out_last = Signal()
        bnd_last = Signal()
        in_left = Signal(range(65536 // bpb + 3))  # input beats still expected
        in_one = Signal()  # in_left == 1, as a register (no compare behind WREADY)
        in_ended = Signal()
        starved = Signal()  # in_ended & (in_left != 0), as a register
        first_beat = Signal()
        shift = Signal(lb)
        end_lane = Signal(lb)  # lane of the last byte written
        prev = Signal(dw)
        inline_buf = Signal(8 * CQE_BYTES)
        inline_left = Signal(range(CQE_BYTES // min(bpb, CQE_BYTES) + 2))

        # AW runs from registers: a command's burst length, and whether the
        # burst is its last, are computed the cycle before the burst is offered.
        lbnd = exact_log2(bnd)
        aw_prep = Signal()  # this cycle computes the next burst
        aw_valid = Signal()
        aw_last = Signal()  # the burst offered is the command's last
        aw_len = Signal(8)  # its AWLEN
        cmd_end = Signal(lbnd)  # low bits of the address of the command's last byte
        zero_notify = Signal()  # a zero-length notify command to report next cycle
        room = Signal(range(bnd + 1))  # bytes from the command's address to the boundary
        cmd_fits = Signal()  # the command ends before the first boundary
        aw_first = Signal()  # the next burst is the command's first
        # (in_left != 0) & ~in_ended, as two registers split by the command's
        # ``inline``: the W handshake is then a function of flip-flops, WREADY
        # and the stream's valid only (``inline`` is not in front of the W
        # beat's clock enable, nor of the input select in front of the
        # realigning mux).
        in_stream = Signal()  # the input is due from ``data``
        in_inline = Signal()  # the input is due from the inline CQE bytes
        need_in = in_stream | in_inline

        # The cycle after a command is taken: its registered copy is decoded.
        decode = Signal()
        idle = ~aw_busy & ~w_busy & ~drain & ~zero_notify & ~decode

        # W output register: the realigned beat, its strobes and WLAST are
        # computed from the writer's registers and the payload stream, and
        # reach the bus (an AXI4RegisterSlice in NicCore) from flip-flops.
        # w_free: the register can take a beat this cycle.
        wq_valid = Signal()
        wq_data = Signal(dw)
        wq_strb = Signal(bpb)
        wq_last = Signal()
        w_free = ~wq_valid | axi.wready

        # Input mux: the payload stream or the inline CQE bytes.
        in_valid = Signal()
        in_last = Signal()
        with m.If(cmd.inline):
            m.d.comb += [
                in_valid.eq(1),
                in_last.eq(inline_left == 1),
            ]
        with m.Else():
            m.d.comb += [
                in_valid.eq(self.data.valid),
                in_last.eq(self.data.payload.last),
                # Ready without the stream's valid in it (it matters only with
                # valid): a W beat can go and takes input from the stream, or
                # the drain runs. Fewer LUTs from in_stream to the payload
                # register's enable in the parser
                # (docs/timing.md#rx-dma-writer).
                self.data.ready.eq((w_busy & w_free & in_stream) | drain),
            ]
        # The inline bytes move on a beat whenever a W beat can go or the
        # drain runs: for an inline command (its input always valid) that is
        # when one is taken, or after its last beat, when they are read no
        # more; other commands never read them. So this 257-bit enable has no
        # handshake in it but WREADY.
        with m.If(drain | (w_busy & w_free)):
            if 8 * CQE_BYTES > dw:
                m.d.sync += inline_buf.eq(inline_buf >> dw)
            m.d.sync += inline_left.eq(inline_left - 1)

        # Accept a command. While the writer is idle its command registers
        # follow the offered command, taken or not (nothing reads them while
        # idle), so their enable is the idle decode of flip-flops and not the
        # handshake with the queue's level; only `decode` waits for it. They
        # are copies: every sum over the command's address and length is
        # taken in the decode cycle from these registers, so the command's
        # source (the engine's completion/placement mux) reaches no adder
        # (docs/timing.md#rx-dma-writer).
        #
        # Only the command's own copy loads under ``idle`` (a LUT of five
        # flags), and its 256 inline bits not even that: they follow the
        # offered command in every cycle (the decode cycle reads the accepted
        # command's, into inline_buf, before they change again). The working
        # registers (addresses, counts, flags) load in the decode cycle from
        # the copy, under ``decode``, a flip-flop: ``idle`` is too slow an
        # enable for ~400 bits (docs/timing.md#rx-dma-writer).
        c = self.cmd.payload
        m.d.sync += cmd.inline_data.eq(c.inline_data)
        with m.If(idle):
            m.d.sync += [cmd[f].eq(c[f]) for f, _ in cmd.shape() if f != "inline_data"]
        with m.If(idle & self.cmd.valid & pending.w_rdy):
            m.d.comb += self.cmd.ready.eq(1)
            m.d.sync += decode.eq(1)

        # Decode: from the registered copy.
        d_len = cmd.len
        d_shift = cmd.addr[:lb]
        d_in_beats = (d_len + (bpb - 1)) >> lb
        d_in_left = Mux(cmd.inline, (CQE_BYTES + bpb - 1) // bpb, d_in_beats)
        d_out_beats = (d_len + d_shift + (bpb - 1)) >> lb
        # d_out_beats == 1 without the full-width adder in front of out_last
        d_one_beat = ((d_len != 0) & (d_len[lb + 1 :] == 0)
                      & (d_len[: lb + 1] + d_shift <= bpb))
        d_end_full = Signal(lbnd + 17)
        m.d.comb += d_end_full.eq(cmd.addr[:lbnd] + d_len - 1)
        d_end = d_end_full[:lbnd]
        with m.If(decode):
            m.d.sync += [
                decode.eq(0),
                aw_addr.eq(cmd.addr),
                aw_left.eq(cmd.len),
                bursts.eq(0),
                beat_addr.eq(Cat(Const(0, lb), cmd.addr[lb:])),
                in_ended.eq(0),
                starved.eq(0),
                first_beat.eq(1),
                shift.eq(d_shift),
                aw_first.eq(1),
                prev.eq(0),
                inline_left.eq((CQE_BYTES + bpb - 1) // bpb),
                # the inline bytes from the command's copy, under ``decode`` (a
                # flip-flop) rather than under ``idle`` (a LUT of five;
                # docs/timing.md#rx-dma-writer)
                inline_buf.eq(cmd.inline_data),
                out_left.eq(d_out_beats),
                out_last.eq(d_one_beat),
                bnd_last.eq(cmd.addr[lb:lbnd] == (bnd // bpb) - 1),
                in_left.eq(d_in_left),
                in_one.eq(d_in_left == 1),
                end_lane.eq(d_end[:lb]),
                cmd_end.eq(d_end),
                cmd_fits.eq(d_end_full[lbnd:] == 0),
                room.eq(bnd - cmd.addr[:lbnd]),
                in_stream.eq(~cmd.inline & (d_len != 0)),
                in_inline.eq(cmd.inline),
            ]
            with m.If(cmd.discard):
                m.d.sync += drain.eq(d_len != 0)
            with m.Else():
                m.d.sync += [
                    aw_busy.eq(d_len != 0),
                    aw_prep.eq(d_len != 0),
                    w_busy.eq(d_len != 0),
                    # Nothing to write: report through the B queue to keep order.
                    zero_notify.eq((d_len == 0) & cmd.notify),
                ]
        with m.If(zero_notify):
            # The command was taken with room in the queue, and nothing else
            # writes to it before the next command.
            m.d.sync += zero_notify.eq(0)
            m.d.comb += [
                pending.w_en.eq(1),
                pend_w.tag.eq(cmd.tag),
                pend_w.notify.eq(1),
                pend_w.none.eq(1),
            ]

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
        pend_last = Signal(ceil_log2(max_bursts + 1))  # the command's bursts - 1
        m.d.comb += last.eq(Mux(aw_first, cmd_fits, aw_left <= bnd))
        m.d.sync += pend_go.eq(0)
        with m.If(aw_prep):
            m.d.sync += [
                aw_prep.eq(0),
                aw_valid.eq(1),
                aw_last.eq(last),
                aw_out.eq(aw_addr[lb:]),
                # Beats - 1: to the command's last byte, or to the boundary.
                aw_len.eq(Mux(last, cmd_end[lb:] - aw_addr[lb:lbnd], ~aw_addr[lb:lbnd])),
                pend_go.eq(last),
                pend_last.eq(bursts),
                bursts.eq(bursts + 1),
                # The next burst (read only if this one is not the last)
                # starts at the boundary.
                aw_addr.eq(Cat(Const(0, lbnd), aw_addr[lbnd:] + 1)),
                aw_left.eq(aw_left - room),
                room.eq(bnd),
                aw_first.eq(0),
            ]
        m.d.comb += [
            axi.awaddr.eq(Cat(Const(0, lb), aw_out)),
            axi.awlen.eq(aw_len),
            axi.awvalid.eq(aw_valid),
        ]
        with m.If(aw_valid & axi.awready):
            m.d.sync += aw_valid.eq(0)
            with m.If(aw_last):
                m.d.sync += aw_busy.eq(0)
            with m.Else():
                m.d.sync += aw_prep.eq(1)
        with m.If(pend_go):
            m.d.comb += [
                pending.w_en.eq(1),
                pend_w.tag.eq(cmd.tag),
                pend_w.notify.eq(cmd.notify),
                pend_w.last.eq(pend_last),
            ]

        # W: realign lane-0 input to the target address: each output beat is
        # the current input beat shifted up by `shift` lanes over the top
        # lanes of the previous one.
        cur = (Mux(in_inline, inline_buf[: min(dw, 8 * CQE_BYTES)], 0)
               | Mux(in_stream, self.data.payload.data, 0))
        window = Cat(prev, cur)
        strb = Signal(bpb)
        lanes = Signal(bpb)
        m.d.comb += lanes.eq(Const((1 << bpb) - 1, bpb))
        lo_mask = Mux(first_beat, lanes << shift, lanes)
        hi_mask = Mux(out_last, lanes >> (~end_lane)[:lb], lanes)
        # Beats whose input never came (stream ended early) write nothing.
        m.d.comb += strb.eq(Mux(starved, 0, (lo_mask & hi_mask)[:bpb]))
        # Output lane j is window lane j + bpb - shift: a bpb:1 mux per bit
        # on the shift register, not a shifter on an offset computed from it.
        realigned = Cat(
            Cat(window[dw + 8 * (j - k) : dw + 8 * (j - k + 1)] for k in range(bpb))
            .word_select(shift, 8)
            for j in range(bpb))
        w_go = w_busy & w_free & (~in_stream | self.data.valid)
        # The output register follows the realigned beat whenever it is free
        # (its enable is WREADY and its own valid flag, no writer state).
        with m.If(w_free):
            m.d.sync += [
                wq_valid.eq(w_go),
                wq_data.eq(realigned),
                wq_strb.eq(strb),
                wq_last.eq(out_last | bnd_last),
            ]
        m.d.comb += [
            axi.wdata.eq(wq_data),
            axi.wstrb.eq(wq_strb),
            axi.wlast.eq(wq_last),
            axi.wvalid.eq(wq_valid),
        ]
        with m.If(w_go):
            m.d.sync += [
                beat_addr.eq(beat_addr + bpb),
                out_left.eq(out_left - 1),
                out_last.eq(out_left == 2),
                bnd_last.eq(beat_addr[lb:lbnd] == (bnd // bpb) - 2),
                first_beat.eq(0),
                prev.eq(cur),
            ]
            with m.If(need_in):
                m.d.sync += [in_left.eq(in_left - 1), in_one.eq(in_left == 2)]
                with m.If(in_last):
                    # in_left stops here: the beats still expected are starved.
                    m.d.sync += [in_ended.eq(1), starved.eq(~in_one)]
            # Without need_in (both flags are already clear then): one term
            # fewer between WREADY and these flags.
            with m.If(in_last | in_one):
                m.d.sync += [in_stream.eq(0), in_inline.eq(0)]
            with m.If(out_last):
                m.d.sync += w_busy.eq(0)
                # Input longer than the command says: drain the rest.
                with m.If(~cmd.inline & ~in_ended & ~(need_in & in_last)):
                    m.d.sync += drain.eq(1)

        # Drain: consume input up to its last beat.
        with m.If(drain):
            with m.If(in_valid & in_last):
                m.d.sync += drain.eq(0)

        # B: count the bursts of the head entry; report notify commands.
        b_left = Signal(range(max_bursts + 1))  # bursts of the head entry still to come - 1
        b_last = Signal()  # b_left == 0, registered with it
        b_err = Signal()
        # The head entry is copied out of the queue first (a cycle per entry,
        # while the next B cannot come sooner), so the B handshake does not
        # reach into the queue's pointers.
        head = Signal(pend_w.shape())
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
                m.d.comb += axi.bready.eq(1)
                with m.If(axi.bvalid):
                    err = b_err | (axi.bresp != AXI_RESP_OKAY)
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

        done_r = data.View(DmaDone(self.tag_width), done_q.r_data)
        m.d.comb += [
            self.done.valid.eq(done_q.r_rdy),
            self.done.payload.eq(done_r),
            done_q.r_en.eq(self.done.ready),
        ]
        return m

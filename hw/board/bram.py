"""AXI4 slave over block RAM: the board's host memory (hw/board/soc.py).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from ..axi import AXI_RESP_DECERR, AXI_RESP_OKAY, AXI4LiteSignature, AXI4Signature
from ..bits import one_hot_select
from ..pipeline import OneHotFSM, unchecked_read_port
from .util import is_pow2


class AXI4BRAM(wiring.Component):
    """Block RAM of ``size`` bytes: an AXI4 slave (NicCore's DMA) and a 32-bit
    AXI4-Lite host port onto the same bytes.

    Parameters: ``size`` bytes (a power of two, at least 4 data words);
    ``data_width`` of the AXI4 port (and of the RAM's words); ``id_width``,
    ``addr_width`` of the AXI4 port.

    Interface
    ---------
    ``s_axi``   In(AXI4Signature(addr_width, data_width, id_width)): INCR
                bursts of any length and any ``size`` up to the data width
                (narrow beats use the lanes of their address, ``wstrb`` the
                bytes); the burst type is taken as INCR (NicCore issues only
                INCR). One read burst and one write burst at a time; a read
                and a write proceed in parallel. A beat whose address is not
                below ``size`` (the upper address bits must be 0) is not
                performed: a read beat answers DECERR with zero data, a write
                burst with such a beat answers DECERR, and its other beats are
                written.
    ``host``    In(AXI4LiteSignature(log2(size), 32)): word access, ``wstrb``
                honoured. Takes the RAM's port in the cycle it needs it, ahead
                of the AXI4 port (which then waits one cycle).
    ``decerr``  Out(1): one cycle per AXI4 beat outside the RAM.

    The RAM has one read port and one byte-enabled write port (simple dual
    port, one DP16KD column per 36 bits on the ECP5). Every pin of it is
    driven by a flip-flop: the read address is loaded with the next cycle's
    address (the host's or the burst's); the write's address, data and byte
    enables are registered from the W beat (or the host's write) and written
    the cycle after. Its output reaches one flip-flop per bit, which R shows
    in a beat's first cycle and which is copied into a 3-beat buffer of
    flip-flops that R is driven from later; a host read selects its 32-bit
    word from that flip-flop.

    Latency: read, R valid 3 cycles after the AR handshake (AR is registered,
    the RAM read is synchronous, and its word is registered again before R);
    write, B valid 1 cycle after the last W beat, in the cycle the RAM takes
    that beat, so a read the master issues on B reads it. Host: read 4
    cycles from AR to R valid, write 2 cycles from AW+W to B valid.
    Throughput: one beat per cycle on R and on W (R with RREADY held high
    streams without bubbles), less a cycle for each host access.
    """

    def __init__(self, size: int, *, data_width: int = 64, id_width: int = 6,
                 addr_width: int = 64):
        if data_width not in (32, 64, 128, 256, 512):
            raise ValueError(f"data_width must be a power of two in 32..512, not {data_width!r}")
        lane_bytes = data_width // 8
        if not is_pow2(size) or size < 4 * lane_bytes:
            raise ValueError(f"size must be a power of two of at least {4 * lane_bytes} bytes, "
                             f"not {size!r}")
        if not ceil_log2(size) <= addr_width <= 64:
            raise ValueError(f"addr_width must be in {ceil_log2(size)}..64, not {addr_width!r}")
        self.size, self.data_width, self.id_width = size, data_width, id_width
        self.depth = size // lane_bytes
        super().__init__({
            "s_axi": In(AXI4Signature(addr_width, data_width, id_width)),
            "host": In(AXI4LiteSignature(ceil_log2(size), 32)),
            "decerr": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        lane_bits = exact_log2(self.data_width // 8)
        size_bits = exact_log2(self.size)
        # A read and a write of the same word in one cycle read undefined data
        # (``no_rw_check``, the DP16KD's own behaviour): AXI orders no read
        # against a write, and the read-old-data emulation yosys would add
        # otherwise (a write delay and a bypass, a LUT behind every RAM output
        # bit) is too slow (docs/timing.md#board-soc).
        # The RAM is built as two memories, each half of its word (16 of the
        # board's 32 DP16KDs), each with its own copy of the address
        # registers, so that an address flip-flop reaches 16 block RAMs
        # across the chip, not 32. The copies differ in their reset value
        # (the address before the first access, which nothing uses), or
        # synthesis would merge them.
        halves = []
        for h in range(2):
            mem = Memory(shape=self.data_width // 2, depth=self.depth, init=[],
                         attrs={"no_rw_check": 1})
            m.submodules[f"mem{h}"] = mem
            halves.append((unchecked_read_port(m, mem), mem.write_port(granularity=8)))
        axi, host = self.s_axi, self.host
        aw = len(axi.awaddr)

        class BurstAddress:
            """A burst's beat address: ``low`` (the byte in the RAM) and
            ``inside`` (the bits above it are 0), both registers, so neither
            the RAM address nor the range check waits on a wide adder.

            The bits above ``low`` are tested once, when the burst is taken.
            A burst can leave the RAM through its top only, by a carry out of
            ``low``, and then stays outside: coming back to 0 would need a
            wrap past the top of the address space, which crosses a 4 KB
            boundary (AXI forbids it); such a burst's later beats answer
            DECERR too."""

            def __init__(self, name):
                self.low = Signal(size_bits, name=f"{name}_addr")
                # ``low``'s value in the next cycle: what the RAM's address
                # register is loaded from
                self.low_next = Signal(size_bits, name=f"{name}_addr_next")
                m.d.comb += self.low_next.eq(self.low)
                m.d.sync += self.low.eq(self.low_next)
                # the bytes below the beat's size, all ones, from the burst's
                # size: the next beat is (low | below) + 1
                self.below = Signal(size_bits, name=f"{name}_below")
                self.inside = Signal(name=f"{name}_inside")

            def word_next(self):
                return self.low_next[lane_bits:]

            def load(self, addr, size):
                m.d.comb += self.low_next.eq(addr[:size_bits])
                m.d.sync += [
                    self.below.eq((Const(1, size_bits + 1) << size) - 1),
                    self.inside.eq(addr[size_bits:] == 0 if aw > size_bits else 1),
                ]

            def advance(self):
                # INCR: the next beat starts at the next multiple of the beat
                # size; a carry out of the RAM's bits leaves the RAM.
                low_next = (self.low | self.below) + 1
                m.d.comb += self.low_next.eq(low_next[:size_bits])
                with m.If(low_next[size_bits]):
                    m.d.sync += self.inside.eq(0)

        # ---- host port: a small one-hot FSM; it takes the RAM's ports ahead of AXI -----
        # One flip-flop per state: WRITE is the cycle the host's write goes
        # into the write registers (the RAM takes it in WRITE_RESP), READ the
        # cycle the RAM reads the host's word, READ_DATA the cycle the word
        # comes out, READ_WORD the cycle it is in rd_q.
        host_fsm = OneHotFSM(m, ("IDLE", "WRITE", "WRITE_RESP", "READ", "READ_DATA",
                                 "READ_WORD", "READ_RESP"), init="IDLE", name="host_state")
        host_wr = host_fsm.st.WRITE
        host_rd_req = host_fsm.st.READ
        # The write's RAM word, data and byte enables (in its word's lanes),
        # and which 32-bit word a read answers with, loaded in every IDLE
        # cycle (the state's flip-flop is their enable) and so held from the
        # access on: no handshake decode in front of their enables, nor of
        # the write registers.
        host_word = Signal(range(self.depth))
        host_wdata = Signal(32)
        host_lanes = Signal(self.data_width // 8)
        host_sel = Signal(max(1, lane_bits - 2))
        # A write (read) is taken this cycle: the write port's register (the
        # read address register) loads it in the next cycle.
        host_wr_next = Signal()
        host_rd_next = Signal()
        # The RAM's output, registered (below): the only sink of its pins.
        # (no reset: on the board hw/board/outreg.py moves it into the block
        # RAMs' output registers)
        rd_q = Signal(self.data_width, reset_less=True)
        # The host read's 32-bit word, selected from rd_q in READ_WORD (a
        # flip-flop enable).
        host_rd_word = Signal(32)
        words_per_beat = self.data_width // 32

        def word_in_beat(addr):  # which 32-bit word of a RAM word
            return addr[2:lane_bits] if lane_bits > 2 else Const(0, 1)

        with m.If(host_fsm.st.READ_WORD):
            m.d.sync += host_rd_word.eq(rd_q.word_select(host_sel, 32))
        m.d.comb += host.rdata.eq(host_rd_word)
        with host_fsm.State("IDLE"):
            m.d.sync += [host_word.eq(host.awaddr[lane_bits:]),
                         host_wdata.eq(host.wdata),
                         host_lanes.eq(host.wstrb << 4 * word_in_beat(host.awaddr)),
                         host_sel.eq(word_in_beat(host.araddr))]
            with m.If(host.awvalid & host.wvalid):
                m.d.comb += [host.awready.eq(1), host.wready.eq(1), host_wr_next.eq(1)]
                host_fsm.next = "WRITE"
            with m.Elif(host.arvalid):
                m.d.comb += [host.arready.eq(1), host_rd_next.eq(1)]
                host_fsm.next = "READ"
        with host_fsm.State("WRITE"):
            host_fsm.next = "WRITE_RESP"
        with host_fsm.State("WRITE_RESP"):
            m.d.comb += [host.bvalid.eq(1), host.bresp.eq(AXI_RESP_OKAY)]
            with m.If(host.bready):
                host_fsm.next = "IDLE"
        with host_fsm.State("READ"):
            host_fsm.next = "READ_DATA"
        with host_fsm.State("READ_DATA"):
            host_fsm.next = "READ_WORD"
        with host_fsm.State("READ_WORD"):
            host_fsm.next = "READ_RESP"
        with host_fsm.State("READ_RESP"):
            m.d.comb += [host.rvalid.eq(1), host.rresp.eq(AXI_RESP_OKAY)]
            with m.If(host.rready):
                host_fsm.next = "IDLE"

        # ---- AXI4 write: AW, then the W beats, then B ---------------------------------
        w_active = Signal()
        # w_active and not the host's WRITE cycle, as a flip-flop of its own:
        # WREADY, and the W handshake that the burst's registers advance on,
        # is one AND of it with WVALID, not a LUT of the host FSM's WRITE
        # flip-flop, which also selects the write registers' ~90 bits.
        w_open = Signal()
        w_active_next = Signal()
        w_addr = BurstAddress("w")
        w_left = Signal(8)  # beats after the current one
        w_last = Signal()  # w_left == 0, registered: the burst's end is a flip-flop
        w_bad = Signal()
        b_pending = Signal()
        b_pending_next = Signal()
        b_id = Signal(self.id_width)
        # AWREADY (neither a burst nor its B under way) is a flip-flop of its
        # own: it is the clock enable of the AW register slice in front.
        aw_open = Signal(init=1)
        m.d.comb += [axi.awready.eq(aw_open), w_active_next.eq(w_active),
                     b_pending_next.eq(b_pending)]
        with m.If(axi.awvalid & axi.awready):
            w_addr.load(axi.awaddr, axi.awsize)
            m.d.comb += w_active_next.eq(1)
            m.d.sync += [w_left.eq(axi.awlen), w_last.eq(axi.awlen == 0), w_bad.eq(0),
                         b_id.eq(axi.awid)]
        m.d.sync += [w_active.eq(w_active_next), w_open.eq(w_active_next & ~host_wr_next),
                     b_pending.eq(b_pending_next),
                     aw_open.eq(~w_active_next & ~b_pending_next)]
        m.d.comb += axi.wready.eq(w_open)
        w_fire = axi.wvalid & axi.wready
        w_ok = w_addr.inside
        # The write port's pins, the byte enables of 32 block RAMs across the
        # chip among them, are driven by flip-flops: the write's word address,
        # data and byte enables are registered from the host's write (in
        # WRITE) or the W beat, and the RAM takes them the cycle after. A
        # read the master issues on B reads the RAM a cycle after that.
        wr_data = Signal(self.data_width)
        wr_lanes = Signal(self.data_width // 8)
        m.d.sync += [
            wr_data.eq(Mux(host_wr, Cat(*([host_wdata] * words_per_beat)), axi.wdata)),
            wr_lanes.eq(Mux(host_wr, host_lanes, Mux(w_fire & w_ok, axi.wstrb, 0))),
        ]
        for h, (_, wr) in enumerate(halves):
            wr_word = Signal(range(self.depth), name=f"wr_word{h}", init=-h % self.depth)
            m.d.sync += wr_word.eq(Mux(host_wr, host_word, w_addr.low[lane_bits:]))
            m.d.comb += [wr.addr.eq(wr_word),
                         wr.data.eq(wr_data.word_select(h, self.data_width // 2)),
                         wr.en.eq(wr_lanes.word_select(h, self.data_width // 16))]
        with m.If(w_fire):
            w_addr.advance()
            m.d.sync += [w_left.eq(w_left - 1), w_last.eq(w_left == 1)]
            with m.If(~w_ok):
                m.d.sync += w_bad.eq(1)
            with m.If(w_last):
                m.d.comb += [w_active_next.eq(0), b_pending_next.eq(1)]
        m.d.comb += [
            axi.bvalid.eq(b_pending),
            axi.bid.eq(b_id),
            axi.bresp.eq(Mux(w_bad, AXI_RESP_DECERR, AXI_RESP_OKAY)),
        ]
        with m.If(axi.bvalid & axi.bready):
            m.d.comb += b_pending_next.eq(0)

        # ---- AXI4 read: AR, then one RAM read per beat into a slot of the R buffer ----
        # The RAM reads every cycle (its enable is constant) into rd_q, one
        # flip-flop per output bit: the block RAM's output is slow (late in the
        # cycle, docs/timing.md), and a single sink per pin can sit next to its RAM.
        # A beat read in cycle t is in rd_q in t + 2, shown on R from there
        # if it is at the head, and copied into a slot of flip-flops, which R
        # shows it from later: a beat is read only when a slot is sure to be
        # free for it, counted from flip-flops. So neither the RAM's enable
        # nor the slots' clock enables wait on RREADY. Three slots keep R
        # streaming: a beat read in cycle t is on R from t + 2, so two are
        # under way while one is on R.
        r_active = Signal()
        r_addr = BurstAddress("r")
        r_left = Signal(8)
        r_id = Signal(self.id_width)
        m.d.comb += axi.arready.eq(~r_active)
        with m.If(axi.arvalid & axi.arready):
            r_addr.load(axi.araddr, axi.arsize)
            m.d.sync += [r_active.eq(1),
                         r_left.eq(axi.arlen), r_id.eq(axi.arid)]
        slots = 3
        r_used = Signal(range(slots + 1))  # slots holding a beat or being filled
        r_put = Signal(slots, init=1)  # one-hot: the slot of the next read
        r_get = Signal(slots, init=1)  # one-hot: the slot on R
        # one-hot or 0, a flip-flop per slot (its clock enable): the slot whose
        # beat is on the RAM's output this cycle (its fields are taken now), and
        # the same a cycle later, when the beat's word is in rd_q (taken then)
        r_fill = Signal(slots)
        r_fill_q = Signal(slots)
        fill_last = Signal()
        fill_id = Signal(self.id_width)
        fill_bad = Signal()  # the beat is outside the RAM
        slot_data = [Signal(self.data_width, name=f"r_slot{i}_data") for i in range(slots)]
        slot_last = Signal(slots)
        slot_bad = Signal(slots)
        slot_id = [Signal(self.id_width, name=f"r_slot{i}_id") for i in range(slots)]
        # The host goes first: its read takes the port in the cycle it asks.
        # The read address is a register of its own, like the write address.
        issue = Signal()
        m.d.comb += issue.eq(r_active & (r_used != slots) & ~host_rd_req)
        for h, (rd, _) in enumerate(halves):
            rd_word = Signal(range(self.depth), name=f"rd_word{h}", init=-h % self.depth)
            m.d.sync += [
                rd_word.eq(Mux(host_rd_next, host.araddr[lane_bits:], r_addr.word_next())),
                rd_q.word_select(h, self.data_width // 2).eq(rd.data),
            ]
            m.d.comb += [rd.en.eq(1), rd.addr.eq(rd_word)]
        m.d.sync += [r_fill.eq(Mux(issue, r_put, 0)), r_fill_q.eq(r_fill)]
        with m.If(issue):
            r_addr.advance()
            m.d.sync += [
                r_put.eq(r_put.rotate_left(1)),
                fill_last.eq(r_left == 0), fill_id.eq(r_id), fill_bad.eq(~r_addr.inside),
                r_left.eq(r_left - 1),
            ]
            with m.If(r_left == 0):
                m.d.sync += r_active.eq(0)
        # R's valid is a flip-flop, from a count of the beats in the slots.
        r_held = Signal(range(slots + 1))
        r_valid = Signal()
        r_take = r_valid & axi.rready
        r_held_next = r_held + r_fill.any() - r_take
        m.d.sync += [r_held.eq(r_held_next), r_valid.eq(r_held_next != 0)]
        # r_get & ~slot_bad a cycle ahead, a flip-flop per slot, and one for
        # rd_q: where the data on R is (in rd_q in the beat's first cycle,
        # nowhere for a beat outside the RAM, which shows zero), so rdata is
        # one AND-OR of flip-flops.
        r_show = Signal(slots, init=1)
        r_show_q = Signal()
        r_get_next = Mux(r_take, r_get.rotate_left(1), r_get)
        slot_bad_next = Cat(Mux(r_fill[i], fill_bad, slot_bad[i]) for i in range(slots))
        m.d.sync += [r_get.eq(r_get_next),
                     r_show.eq(r_get_next & ~slot_bad_next & ~r_fill),
                     r_show_q.eq((r_get_next & r_fill).any() & ~fill_bad)]
        for i in range(slots):
            with m.If(r_fill[i]):
                m.d.sync += [slot_last[i].eq(fill_last), slot_id[i].eq(fill_id),
                             slot_bad[i].eq(fill_bad)]
            with m.If(r_fill_q[i]):
                m.d.sync += slot_data[i].eq(rd_q)
        m.d.sync += r_used.eq(r_used + issue - r_take)

        m.d.comb += [
            axi.rvalid.eq(r_valid),
            axi.rlast.eq((slot_last & r_get).any()),
            axi.rid.eq(one_hot_select(r_get, slot_id)),
            axi.rdata.eq(one_hot_select(Cat(r_show, r_show_q), [*slot_data, rd_q])),
            axi.rresp.eq(Mux((slot_bad & r_get).any(), AXI_RESP_DECERR, AXI_RESP_OKAY)),
            self.decerr.eq((issue & ~r_addr.inside) | (w_fire & ~w_ok)),
        ]
        return m

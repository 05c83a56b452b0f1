"""The board design: NicCore with its MAC, host memory, register access and LEDs.

``BoardSoC`` is everything of the Versa ECP5 build that does not depend on
the platform: the board top (hw/board/top.py) adds the PLL that makes the
clocks and hands in the RGMII pads; the simulation (tests/hw/test_board_soc.py)
drives the same design through its pins.

::

    uart_rx/tx ── UARTToAXI4Lite ── AXI4LiteDecoder ─┬─ NicCore.s_axil      (CSR blocks)
                                                     ├─ AXI4LiteToCSR ─┬─ BoardRegisters
                                                     │                 └─ MACRegisters ── mdc/mdio
                                                     └─ AXI4BRAM.host  (host-memory window)
    NicCore.m_axi (DMA) ─────────────────────────────── AXI4BRAM.s_axi
    NicCore.mac_tx/mac_rx ── RGMIIMAC ── rgmii pins
    NicCore, RGMIIMAC, AXI4BRAM status ── LED logic ── leds

Address map of the UART bridge (32-bit byte addresses; ``NIC_BASE``,
``BOARD_BASE``, ``MEM_BASE``):

=============  ==========================  ==============================================
address        size                        what
=============  ==========================  ==============================================
0x0000_0000    4 x NicCore ``block_size``  NicCore's CSR space: the block chain the host
                                           driver walks from offset 0 (docs/registers.md)
0x4000_0000    0x100                       board block (``board_register_map``): ID, NEXT,
                                           where the host-memory window is, LED and QP
                                           state, DMA error counter, scratch
0x4000_0100    0x100                       MAC block (hw/board/regs.py, type 0x0010):
                                           control, frame counters, MDIO
0x8000_0000    ``mem_size``                host-memory window: the BRAM NicCore's DMA
                                           master reaches at DMA address 0 (32-bit words)
=============  ==========================  ==============================================

Any other address answers DECERR (UART status 0x03). The board block and
the MAC block form a second chain (``NEXT`` holds the absolute address of
the next block, 0 = last), starting at ``BOARD_BASE``.

Host memory: the ECP5 has no PCIe, so "host memory" is a BRAM of
``mem_size`` bytes on the FPGA. NicCore's DMA master sees it at addresses
0 .. ``mem_size`` - 1 (WQE rings, CQ rings, payload buffers); the host
reads and writes the same bytes through the bridge at ``MEM_BASE`` + the
DMA address, one 32-bit word per UART request (little-endian: byte ``a``
of host memory is bits [8*(a%4)+7 : 8*(a%4)] of the word at ``a & ~3``).
A DMA beat outside the window is not performed: a read answers DECERR
with zero data, a write is dropped and answers DECERR, and both are
counted (``DMA_DECERR``) and light LED 6.

Clock domains (the caller defines them): ``sync`` is the core clock
(NicCore, the UART bridge, the BRAM, the MAC's core side), ``eth_tx`` the
RGMII transmit clock (125 MHz at 1 Gb/s) and ``eth_tx90`` the same shifted
by 90 degrees (the forwarded ``tx_clk``). ``eth_rx`` is made inside the MAC
from the PHY's ``rx_clk``.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from ..arbiter import one_hot_select
from ..axi import AXI_RESP_OKAY, AXI4LiteSignature, AXI4Signature
from ..csr import AXI4LiteToCSR, CSRBusSignature, RegisterMap, grouped_read
from ..nic.core import NicCore
from ..pipeline import OneHotFSM, unchecked_read_port
from ..reliability.layouts import QpState
from .mac import RGMIIMAC
from .mac import STATS as MAC_STATS
from .regs import MACRegisters
from .rgmii import RGMIIPinSignature
from .uart import UARTToAXI4Lite

__all__ = [
    "AXI4BRAM",
    "AXI4LiteDecoder",
    "BOARD_BASE",
    "BOARD_NIC_PARAMS",
    "BOARD_TYPE_ID",
    "BOARD_VERSION",
    "BoardRegisters",
    "BoardSoC",
    "BoardStatus",
    "LEDS",
    "MAC_BASE",
    "MEM_BASE",
    "NIC_BASE",
    "board_register_map",
]

AXI_RESP_DECERR = 0b11

NIC_BASE = 0x0000_0000
BOARD_BASE = 0x4000_0000
MAC_OFFSET = 0x100  # from BOARD_BASE
MAC_BASE = BOARD_BASE + MAC_OFFSET
BOARD_SPACE = 0x200  # board block + MAC block
MEM_BASE = 0x8000_0000
MEM_DMA_BASE = 0  # NicCore's DMA address of host-memory byte 0

BOARD_TYPE_ID = 0x0011  # board blocks from 0x0010 on; 0x0010 is the MAC
BOARD_VERSION = 1

# NicCore at board size (LFE5UM-45F: 16 QPs x 16 EVs does not fit). Any key
# can be overridden through BoardSoC's keyword arguments. The host memory is
# a window at the bottom of a 32-bit map (MEM_DMA_BASE), so 32-bit DMA
# addresses reach all of it.
BOARD_NIC_PARAMS = dict(data_width=64, num_qps=4, evs_per_qp=8, sack_bits=64, max_mtu=1024,
                        mpr_max=256, num_mrs=4, window=64, inflight_depth=64, addr_width=32)

# (bit, name, meaning) of the ``leds`` port.
LEDS = (
    (0, "heartbeat", "toggles every 2**heartbeat_log2 core cycles (about 1 Hz by default)"),
    (1, "rx_activity", "a good frame was received (stretched)"),
    (2, "tx_activity", "a frame was sent (stretched)"),
    (3, "qp_error", "at least one QP is in ERROR"),
    (4, "irq", "NicCore's interrupt line"),
    (5, "uart_activity", "the UART receive line is active (stretched)"),
    (6, "dma_error", "a DMA beat fell outside the host-memory window (sticky until reset)"),
    (7, "rx_bad_frame", "the MAC dropped a received frame: FCS, runt, oversize, RX_ER, "
                        "overflow (stretched)"),
)

# Bytes a WRITE frame adds to its payload on the wire, FCS included: Ethernet 14,
# IPv4 20, UDP 8, BTH 12, RETH 16, ImmDt 4, pad up to 3, ICRC 4, FCS 4.
WRITE_FRAME_OVERHEAD = 14 + 20 + 8 + 12 + 16 + 4 + 3 + 4 + 4


def _is_pow2(value) -> bool:
    return isinstance(value, int) and value > 0 and not value & (value - 1)


# ---- AXI4 slave over block RAM ---------------------------------------------------------------


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
        if not _is_pow2(size) or size < 4 * lane_bytes:
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
        # bit) was on b26's second-worst path.
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
        with host_fsm.state("IDLE"):
            m.d.sync += [host_word.eq(host.awaddr[lane_bits:]),
                         host_wdata.eq(host.wdata),
                         host_lanes.eq(host.wstrb << 4 * word_in_beat(host.awaddr)),
                         host_sel.eq(word_in_beat(host.araddr))]
            with m.If(host.awvalid & host.wvalid):
                m.d.comb += [host.awready.eq(1), host.wready.eq(1), host_wr_next.eq(1)]
                host_fsm.goto("WRITE")
            with m.Elif(host.arvalid):
                m.d.comb += [host.arready.eq(1), host_rd_next.eq(1)]
                host_fsm.goto("READ")
        with host_fsm.state("WRITE"):
            host_fsm.goto("WRITE_RESP")
        with host_fsm.state("WRITE_RESP"):
            m.d.comb += [host.bvalid.eq(1), host.bresp.eq(AXI_RESP_OKAY)]
            with m.If(host.bready):
                host_fsm.goto("IDLE")
        with host_fsm.state("READ"):
            host_fsm.goto("READ_DATA")
        with host_fsm.state("READ_DATA"):
            host_fsm.goto("READ_WORD")
        with host_fsm.state("READ_WORD"):
            host_fsm.goto("READ_RESP")
        with host_fsm.state("READ_RESP"):
            m.d.comb += [host.rvalid.eq(1), host.rresp.eq(AXI_RESP_OKAY)]
            with m.If(host.rready):
                host_fsm.goto("IDLE")

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
        # flip-flop per output bit: the block RAM's output is slow (4.2 ns
        # clock to output), and a single sink per pin can sit next to its RAM.
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


# ---- AXI4-Lite address decoder -----------------------------------------------------------------


class AXI4LiteDecoder(wiring.Component):
    """One AXI4-Lite master onto several slaves, each a window of the address space.

    ``windows`` is a list of ``(name, base, size)``: ``size`` a power of two,
    ``base`` a multiple of it, no overlaps. Slave ``name`` is the port
    ``name`` (Out(AXI4LiteSignature(log2(size), 32))) and sees the address
    relative to its base.

    One transaction at a time: the decoder takes a write (AW and W together,
    so it waits for both; a write goes first when a read is offered too) or
    a read (AR), picks the window from the address, offers the access to
    that slave, holds the slave's response (B, or R with its data) and then
    offers it to the master; it accepts nothing else meanwhile. An address in
    no window is answered by the decoder itself: DECERR, read data 0. What it
    drives to the slaves comes from its registers, and to the master from
    its registers and the master's own valids, so no combinational path
    crosses it from the master's handshake logic to a slave's or back.

    Latency: one cycle from AW+W (or AR) taken to the slave seeing it, one
    cycle from the slave's B (or R) to the master seeing it. Throughput: one
    transaction per slave latency plus 3 cycles.
    """

    def __init__(self, windows, addr_width: int = 32):
        spans = []
        for name, base, size in windows:
            if not _is_pow2(size) or base % size:
                raise ValueError(f"window {name}: size must be a power of two and base a "
                                 f"multiple of it, not base 0x{base:x} size 0x{size:x}")
            if base + size > 1 << addr_width:
                raise ValueError(f"window {name} ends beyond the {addr_width}-bit address space")
            for other, obase, osize in spans:
                if base < obase + osize and obase < base + size:
                    raise ValueError(f"window {name} overlaps window {other}")
            spans.append((name, base, size))
        if not spans:
            raise ValueError("the decoder needs at least one window")
        self.windows = spans
        self.addr_width = addr_width
        members = {"s_axil": In(AXI4LiteSignature(addr_width, 32))}
        for name, _, size in spans:
            members[name] = Out(AXI4LiteSignature(max(1, exact_log2(size)), 32))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        s = self.s_axil
        ports = [getattr(self, name) for name, _, _ in self.windows]
        addr = Signal(self.addr_width)
        wdata = Signal(32)
        wstrb = Signal(4)
        prot = Signal(3)
        # One-hot window of the access, registered when it is taken; none set:
        # no window. The slave's channels are offered while pending, and
        # only to the selected slave.
        sel = Signal(len(self.windows))
        aw_pending, w_pending, ar_pending = Signal(), Signal(), Signal()
        bresp = Signal(2)
        rresp = Signal(2)
        rdata = Signal(32)

        def decode(address):
            return Cat(*(address[exact_log2(size):] == base >> exact_log2(size)
                         for _, base, size in self.windows))

        for i, port in enumerate(ports):
            bits = len(port.awaddr)
            m.d.comb += [
                port.awaddr.eq(addr[:bits]),
                port.araddr.eq(addr[:bits]),
                port.wdata.eq(wdata),
                port.wstrb.eq(wstrb),
                port.awprot.eq(prot),
                port.arprot.eq(prot),
                port.awvalid.eq(sel[i] & aw_pending),
                port.wvalid.eq(sel[i] & w_pending),
                port.arvalid.eq(sel[i] & ar_pending),
                # One access at a time: only the selected slave can answer.
                port.bready.eq(sel[i]),
                port.rready.eq(sel[i]),
            ]
        # One flip-flop per state. The access's registers load in every IDLE
        # cycle (the state's flip-flop is their enable) and hold from the
        # cycle the access is taken: no handshake decode in front of their
        # enables, a wide fan-out. Likewise the response registers load in
        # every WRITE (READ) cycle, the last time in the cycle the slave's
        # B (R) is seen.
        fsm = OneHotFSM(m, ("IDLE", "WRITE", "WRITE_RESP", "READ", "READ_RESP"), init="IDLE",
                        name="decoder_state")
        with fsm.state("IDLE"):
            take_write = s.awvalid & s.wvalid
            take_read = s.arvalid & ~s.awvalid
            address = Mux(s.awvalid, s.awaddr, s.araddr)
            m.d.sync += [sel.eq(decode(address)), addr.eq(address),
                         wdata.eq(s.wdata), wstrb.eq(s.wstrb),
                         prot.eq(Mux(s.awvalid, s.awprot, s.arprot)),
                         aw_pending.eq(take_write), w_pending.eq(take_write),
                         ar_pending.eq(take_read)]
            with m.If(take_write):
                m.d.comb += [s.awready.eq(1), s.wready.eq(1)]
                fsm.goto("WRITE")
            with m.Elif(take_read):
                m.d.comb += s.arready.eq(1)
                fsm.goto("READ")
        with fsm.state("WRITE"):
            for i, port in enumerate(ports):
                with m.If(sel[i] & port.awready):
                    m.d.sync += aw_pending.eq(0)
                with m.If(sel[i] & port.wready):
                    m.d.sync += w_pending.eq(0)
            m.d.sync += bresp.eq(Mux(sel.any(), one_hot_select(sel, [p.bresp for p in ports]),
                                     AXI_RESP_DECERR))
            # No window: the decoder answers at once.
            with m.If((sel & Cat(p.bvalid for p in ports)).any() | ~sel.any()):
                fsm.goto("WRITE_RESP")
        with fsm.state("WRITE_RESP"):
            m.d.comb += [s.bvalid.eq(1), s.bresp.eq(bresp)]
            with m.If(s.bready):
                fsm.goto("IDLE")
        with fsm.state("READ"):
            for i, port in enumerate(ports):
                with m.If(sel[i] & port.arready):
                    m.d.sync += ar_pending.eq(0)
            # one_hot_select: data 0 when no window is selected
            m.d.sync += [
                rresp.eq(Mux(sel.any(), one_hot_select(sel, [p.rresp for p in ports]),
                             AXI_RESP_DECERR)),
                rdata.eq(one_hot_select(sel, [p.rdata for p in ports])),
            ]
            with m.If((sel & Cat(p.rvalid for p in ports)).any() | ~sel.any()):
                fsm.goto("READ_RESP")
        with fsm.state("READ_RESP"):
            m.d.comb += [s.rvalid.eq(1), s.rresp.eq(rresp), s.rdata.eq(rdata)]
            with m.If(s.rready):
                fsm.goto("IDLE")
        return m


# ---- the board's own register block --------------------------------------------------------------


def board_register_map(*, mem_size=0x10000, clk_freq_hz=125_000_000, uart_divisor=1085,
                       num_qps=4) -> RegisterMap:
    """The board block at ``BOARD_BASE`` (type 0x0011): where the host-memory
    window is, what the LEDs show, the QPs in ERROR, the DMA error counter."""
    rm = RegisterMap(
        "board", BOARD_TYPE_ID, BOARD_VERSION,
        "Board block of BoardSoC (hw/board/soc.py), at the bridge address "
        f"0x{BOARD_BASE:08x}: the host-memory window and board status. Read only "
        "except SCRATCH.")
    rm.add("ID", 0x00, "RO", "block identity",
           fields=[("version", 0, 16, f"{BOARD_VERSION}"),
                   ("type", 16, 16, f"0x{BOARD_TYPE_ID:04x} (board)")])
    rm.add("NEXT", 0x04, "RO", f"bridge address of the next block: the MAC block "
                               f"(0x{MAC_BASE:08x})")
    rm.add("MEM_BASE", 0x08, "RO", f"bridge address of the host-memory window "
                                   f"(0x{MEM_BASE:08x})")
    rm.add("MEM_SIZE", 0x0C, "RO", f"bytes of host memory (BRAM) ({mem_size})")
    rm.add("MEM_DMA_BASE_LO", 0x10, "RO", "DMA address of host-memory byte 0, bits 31..0 (0)")
    rm.add("MEM_DMA_BASE_HI", 0x14, "RO", "DMA address of host-memory byte 0, bits 63..32 (0)")
    rm.add("CLK_FREQ", 0x18, "RO", f"core clock, Hz ({clk_freq_hz})")
    rm.add("UART_DIVISOR", 0x1C, "RO", f"core clock cycles per UART bit ({uart_divisor})")
    rm.add("LEDS", 0x20, "RO", "the LED outputs now",
           fields=[(name, bit, 1, doc) for bit, name, doc in LEDS])
    rm.add("QP_ERROR", 0x24, "RO", f"bit i: QP i is in ERROR ({num_qps} QPs), as reliability "
                                   "reports its state changes")
    rm.add("DMA_DECERR", 0x28, "RO", "DMA beats outside the host-memory window, not "
                                     "performed (wraps)")
    rm.add("SCRATCH", 0x2C, "RW", "holds what is written (reset 0)")
    return rm


class BoardRegisters(wiring.Component):
    """CSR slave of the board window: the board block (``board_register_map``)
    at offset 0, and the MAC block at ``MAC_OFFSET``, passed on to ``mac_csr``.

    Interface: ``csr`` (CSR bus slave, 9 address bits), ``mac_csr`` (CSR bus
    master, 8 bits, to ``MACRegisters``), ``leds``, ``qp_error`` (num_qps
    bits), ``dma_decerr`` (one-cycle strobe, counted) In.
    Latency: ``r_data`` the cycle after ``r_stb`` (the MAC block's the same);
    no read of the board block has a side effect. ``LEDS`` and ``QP_ERROR``
    read ``leds`` and ``qp_error`` as they were a cycle before ``r_stb``.
    Throughput: one access per cycle.
    """

    def __init__(self, *, mem_size, clk_freq_hz, uart_divisor, num_qps):
        self.map = board_register_map(mem_size=mem_size, clk_freq_hz=clk_freq_hz,
                                      uart_divisor=uart_divisor, num_qps=num_qps)
        self._const = {"ID": BOARD_TYPE_ID << 16 | BOARD_VERSION, "NEXT": MAC_BASE,
                       "MEM_BASE": MEM_BASE, "MEM_SIZE": mem_size,
                       "MEM_DMA_BASE_LO": MEM_DMA_BASE & 0xFFFF_FFFF,
                       "MEM_DMA_BASE_HI": MEM_DMA_BASE >> 32,
                       "CLK_FREQ": clk_freq_hz, "UART_DIVISOR": uart_divisor}
        super().__init__({
            "csr": In(CSRBusSignature(exact_log2(BOARD_SPACE))),
            "mac_csr": Out(CSRBusSignature(8)),
            "leds": In(len(LEDS)),
            "qp_error": In(num_qps),
            "dma_decerr": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        bus, reg = self.csr, self.map
        to_mac = bus.addr[8]
        read_mac = Signal()
        with m.If(bus.r_stb):
            m.d.sync += read_mac.eq(to_mac)
        m.d.comb += [
            self.mac_csr.addr.eq(bus.addr[:8]),
            self.mac_csr.w_data.eq(bus.w_data),
            self.mac_csr.w_stb.eq(bus.w_stb & to_mac),
            self.mac_csr.r_stb.eq(bus.r_stb & to_mac),
        ]
        own_w_stb = bus.w_stb & ~to_mac
        scratch = Signal(32)
        decerr_count = Signal(32)
        with m.If(self.dma_decerr):
            m.d.sync += decerr_count.eq(decerr_count + 1)
        with m.If(own_w_stb & (bus.addr[:8] == reg["SCRATCH"].offset)):
            m.d.sync += scratch.eq(bus.w_data)
        # The status inputs are registered here: the LED logic in front of
        # them (a stretch counter's compare with 0, an OR of the QPs) is then
        # not in series with the read mux (b37: 4 LUT levels, -0.66 ns).
        leds = Signal.like(self.leds)
        qp_error = Signal.like(self.qp_error)
        m.d.sync += [leds.eq(self.leds), qp_error.eq(self.qp_error)]
        words = {reg[name].offset: const for name, const in self._const.items()}
        for name, sig in (("LEDS", leds), ("QP_ERROR", qp_error),
                          ("DMA_DECERR", decerr_count), ("SCRATCH", scratch)):
            words[reg[name].offset] = sig
        # The read mux registered per group of eight words, each on the low
        # address bits beside its group's compare (hw.csr.grouped_read): fewer
        # LUT levels than a compare of the 8-bit offset per register. A read
        # of an unaligned address answers 0.
        own_data = grouped_read(m, bus.addr[:8], bus.r_stb, words, name="own",
                                unaligned_zero=True)
        m.d.comb += bus.r_data.eq(Mux(read_mac, self.mac_csr.r_data, own_data))
        return m


class BoardStatus(wiring.Component):
    """The board's status: which QPs are in ERROR, and the LEDs (``LEDS``).

    Interface (all In but ``qp_error`` and ``leds``): ``qp_state_update``
    (valid, ready, qpn, state: reliability's QP state-change stream, watched,
    not driven), ``stats_lsb`` (bit 0 of each of the MAC's counters, which
    step by one: it flips at every count), ``irq``, ``uart_rx`` (the
    line), ``dma_decerr`` (strobe); ``qp_error`` Out(num_qps): bit i set
    while QP i is in ERROR; ``leds`` Out(8).
    Latency: 1 cycle from an event to its LED (2 for the MAC's counters).
    """

    def __init__(self, *, num_qps: int, heartbeat_log2: int):
        self.num_qps, self.heartbeat_log2 = num_qps, heartbeat_log2
        super().__init__({
            "qsu_fire": In(1),
            "qsu_qpn": In(range(num_qps)),
            "qsu_error": In(1),
            "stats_lsb": In(data.StructLayout({name: 1 for name, _ in MAC_STATS})),
            "irq": In(1),
            "uart_rx": In(1, init=1),
            "dma_decerr": In(1),
            "qp_error": Out(num_qps),
            "leds": Out(len(LEDS)),
        })

    def elaborate(self, platform):
        m = Module()
        with m.If(self.qsu_fire):
            m.d.sync += self.qp_error.bit_select(self.qsu_qpn, 1).eq(self.qsu_error)

        heartbeat = Signal(self.heartbeat_log2 + 1)
        m.d.sync += heartbeat.eq(heartbeat + 1)
        stretch_cycles = 1 << (self.heartbeat_log2 - 3)

        def stretched(event, name):
            count = Signal(range(stretch_cycles + 1), name=f"{name}_stretch")
            with m.If(event):
                m.d.sync += count.eq(stretch_cycles)
            with m.Elif(count != 0):
                m.d.sync += count.eq(count - 1)
            return count != 0

        def changed(lsb, name):
            # The MAC's counters step by one, so bit 0 flips at every count:
            # a 1-bit compare instead of a 32-bit one in front of the LEDs.
            last = Signal(name=f"{name}_last")
            m.d.sync += last.eq(lsb)
            return lsb != last

        stats = self.stats_lsb
        rx_bad = Cat(*(changed(getattr(stats, n), n) for n in (
            "rx_bad_fcs", "rx_runt", "rx_oversize", "rx_odd_nibble", "rx_error",
            "rx_overflow"))).any()
        uart_line_low = Signal()
        m.d.sync += uart_line_low.eq(~self.uart_rx)
        dma_error = Signal()
        with m.If(self.dma_decerr):
            m.d.sync += dma_error.eq(1)
        leds = {
            "heartbeat": heartbeat[-1],
            "rx_activity": stretched(changed(stats.rx_frames, "rx_frames"), "rx_activity"),
            "tx_activity": stretched(changed(stats.tx_frames, "tx_frames"), "tx_activity"),
            "qp_error": self.qp_error.any(),
            "irq": self.irq,
            "uart_activity": stretched(uart_line_low, "uart_activity"),
            "dma_error": dma_error,
            "rx_bad_frame": stretched(rx_bad, "rx_bad_frame"),
        }
        for bit, name, _ in LEDS:
            m.d.comb += self.leds[bit].eq(leds[name])
        return m


# ---- the SoC ------------------------------------------------------------------------------------


class BoardSoC(wiring.Component):
    """NicCore on a board: RGMII MAC, BRAM host memory, UART register access, LEDs.

    The module docstring has the block diagram and the address map.

    Parameters
    ----------
    clk_freq_hz : the ``sync`` clock in Hz (NicCore's timers, the UART
        divisor, MDC, the heartbeat).
    baud : UART baud rate, used when ``uart_divisor`` is None.
    uart_divisor : core cycles per UART bit (at least 4); None: from
        ``clk_freq_hz / baud``. Simulation uses a small one.
    mem_size : bytes of BRAM host memory, a power of two in 4 KiB..1 MiB
        (64 KiB, 32 DP16KD, by default).
    max_frame : the MAC's largest frame with FCS (1518); must carry a WRITE
        of ``max_mtu`` bytes (``max_mtu + 85``).
    heartbeat_log2 : LED 0 toggles every ``2**heartbeat_log2`` cycles; the
        activity LEDs stay on ``2**(heartbeat_log2 - 3)`` cycles after an
        event. None: about 1 Hz at ``clk_freq_hz``.
    mdio_divisor : MDC is the clock divided by ``2 * mdio_divisor``; None:
        the smallest that keeps MDC at or below 2.5 MHz.
    rgmii_pads : None for the simulation form (an ``rgmii`` port), or the
        platform's ``eth_rgmii`` resource (see ``RGMIIMAC``).
    build_id : NicCore's build identifier.
    **nic_params : any NicCore parameter (``BOARD_NIC_PARAMS`` gives the
        board defaults: 4 QPs x 8 EVs, 64-bit, MTU 1024).

    Interface (domain ``sync`` unless said)
    ---------------------------------------
    ``uart_rx``  In(1), idle high: the host's requests (8N1).
    ``uart_tx``  Out(1), idle high: the responses.
    ``rgmii``    Out(RGMIIPinSignature()): RGMII pins, only without
                 ``rgmii_pads``; ``rx_clk`` clocks the MAC's ``eth_rx``,
                 ``tx_clk`` is forwarded from ``eth_tx90``.
    ``leds``     Out(8): see ``LEDS`` (1 = lit; the platform inverts
                 active-low LEDs).
    ``mdc``, ``mdio_o``, ``mdio_oe`` Out(1), ``mdio_i`` In(1): the PHY's
                 management interface (MACRegisters' MDIO register).

    Clock domains, defined by the caller: ``sync`` (core), ``eth_tx`` (RGMII
    transmit, 125 MHz at 1 Gb/s), ``eth_tx90`` (``eth_tx`` + 90 degrees).

    Latency and throughput: NicCore's and the MAC's (docs/architecture.md,
    docs/board.md); DMA to the BRAM runs at one beat per cycle; a register or
    host-memory word over the UART costs one request and one 6-byte response
    (16 or 20 bytes on the line: about 1.7 ms per write at 115200 baud).
    """

    def __init__(self, *, clk_freq_hz: int = 125_000_000, baud: int = 115200,
                 uart_divisor: int | None = None, mem_size: int = 0x10000,
                 max_frame: int = 1518, heartbeat_log2: int | None = None,
                 mdio_divisor: int | None = None, rgmii_pads=None, build_id: int = 0,
                 **nic_params):
        unknown = set(nic_params) - set(BOARD_NIC_PARAMS) - {"csr_addr_width"}
        if unknown:
            raise ValueError(f"unknown BoardSoC parameters {sorted(unknown)}; NicCore takes "
                             f"{sorted(BOARD_NIC_PARAMS)}")
        params = {**BOARD_NIC_PARAMS, **nic_params}
        if not isinstance(clk_freq_hz, int) or clk_freq_hz <= 0:
            raise ValueError(f"clk_freq_hz must be a positive integer, not {clk_freq_hz!r}")
        if uart_divisor is None:
            if not isinstance(baud, int) or baud <= 0:
                raise ValueError(f"baud must be a positive integer, not {baud!r}")
            uart_divisor = round(clk_freq_hz / baud)
        if not isinstance(uart_divisor, int) or uart_divisor < 4:
            raise ValueError(f"uart_divisor must be an integer of at least 4 cycles per bit, "
                             f"not {uart_divisor!r} (clk_freq_hz {clk_freq_hz}, baud {baud})")
        if not _is_pow2(mem_size) or not 0x1000 <= mem_size <= 0x10_0000:
            raise ValueError(f"mem_size must be a power of two in 4 KiB..1 MiB, not {mem_size!r}")
        if params["max_mtu"] + WRITE_FRAME_OVERHEAD > max_frame:
            raise ValueError(f"max_mtu {params['max_mtu']} needs a MAC max_frame of at least "
                             f"{params['max_mtu'] + WRITE_FRAME_OVERHEAD} bytes, not {max_frame}: "
                             f"lower max_mtu or raise max_frame (jumbo frames)")
        if heartbeat_log2 is None:
            heartbeat_log2 = max(4, clk_freq_hz.bit_length() - 1)
        if not isinstance(heartbeat_log2, int) or not 4 <= heartbeat_log2 <= 40:
            raise ValueError(f"heartbeat_log2 must be in 4..40, not {heartbeat_log2!r}")
        if mdio_divisor is None:
            mdio_divisor = max(1, -(-clk_freq_hz // 5_000_000))
        self.clk_freq_hz, self.uart_divisor, self.mem_size = clk_freq_hz, uart_divisor, mem_size
        self.heartbeat_log2, self.max_frame = heartbeat_log2, max_frame
        self.nic_params = params
        self.nic = NicCore(**params, clk_freq_hz=clk_freq_hz, build_id=build_id)
        self.nic_size = 1 << self.nic.csr_addr_width
        if NIC_BASE + self.nic_size > BOARD_BASE:
            raise ValueError(f"NicCore's CSR space (0x{self.nic_size:x} bytes) overlaps the "
                             f"board block at 0x{BOARD_BASE:08x}")
        self.windows = [("nic", NIC_BASE, self.nic_size), ("board", BOARD_BASE, BOARD_SPACE),
                        ("mem", MEM_BASE, mem_size)]
        self.mac = RGMIIMAC(params["data_width"], max_frame=max_frame, pads=rgmii_pads)
        self.mac_regs = MACRegisters(params["data_width"], max_frame, next_offset=0,
                                     addr_width=8, mdio_divisor=mdio_divisor)
        self.board_regs = BoardRegisters(mem_size=mem_size, clk_freq_hz=clk_freq_hz,
                                         uart_divisor=uart_divisor, num_qps=params["num_qps"])
        self.status = BoardStatus(num_qps=params["num_qps"], heartbeat_log2=heartbeat_log2)
        self.bram = AXI4BRAM(mem_size, data_width=params["data_width"],
                             id_width=self.nic.id_width, addr_width=self.nic.addr_width)
        members = {
            "uart_rx": In(1, init=1),
            "uart_tx": Out(1, init=1),
            "leds": Out(len(LEDS)),
            "mdc": Out(1),
            "mdio_o": Out(1),
            "mdio_oe": Out(1),
            "mdio_i": In(1),
        }
        if rgmii_pads is None:
            members["rgmii"] = Out(RGMIIPinSignature())
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.nic = nic = self.nic
        m.submodules.mac = mac = self.mac
        m.submodules.mac_regs = mac_regs = self.mac_regs
        m.submodules.board_regs = board_regs = self.board_regs
        m.submodules.bram = bram = self.bram

        # ---- register access: UART -> AXI4-Lite -> windows ------------------------------------
        m.submodules.uart = uart = UARTToAXI4Lite(self.uart_divisor)
        m.d.comb += [uart.rx.eq(self.uart_rx), self.uart_tx.eq(uart.tx)]
        m.submodules.decoder = dec = AXI4LiteDecoder(self.windows)
        # The decoder registers each access and response, so the bridge's FSM
        # and NicCore's CSR bridge do not form one combinational path.
        wiring.connect(m, uart.m_axil, dec.s_axil)
        wiring.connect(m, dec.nic, nic.s_axil)
        wiring.connect(m, dec.mem, bram.host)

        # The board window: the board block, and behind it the MAC block.
        m.submodules.board_csr = board_csr = AXI4LiteToCSR(exact_log2(BOARD_SPACE))
        wiring.connect(m, dec.board, board_csr.s_axil)
        wiring.connect(m, board_csr.csr, board_regs.csr)
        wiring.connect(m, board_regs.mac_csr, mac_regs.csr)

        # ---- NicCore's DMA into the BRAM; its MAC streams through the RGMII MAC ----------
        wiring.connect(m, nic.m_axi, bram.s_axi)
        wiring.connect(m, nic.mac_tx, mac.tx_axis)
        wiring.connect(m, mac.rx_axis, nic.mac_rx)
        wiring.connect(m, mac.stats, mac_regs.stats)
        m.d.comb += [
            mac.mii_select.eq(mac_regs.mii_select),
            mac.rx_pass_bad.eq(mac_regs.rx_pass_bad),
            self.mdc.eq(mac_regs.mdc),
            self.mdio_o.eq(mac_regs.mdio_o),
            self.mdio_oe.eq(mac_regs.mdio_oe),
            mac_regs.mdio_i.eq(self.mdio_i),
        ]
        if "rgmii" in self.signature.members:
            wiring.connect(m, wiring.flipped(self.rgmii), mac.rgmii)

        # ---- status: QPs in ERROR, LEDs ---------------------------------------------------------
        # Reliability reports every QP state change (host commands included) on
        # qp_state_update, which NicCore does not bring out: watched here.
        m.submodules.status = status = self.status
        qsu = nic.reliability.qp_state_update
        for name, _ in MAC_STATS:
            m.d.comb += getattr(status.stats_lsb, name).eq(getattr(mac.stats, name)[0])
        m.d.comb += [
            status.qsu_fire.eq(qsu.valid & qsu.ready),
            status.qsu_qpn.eq(qsu.payload.qpn),
            status.qsu_error.eq(qsu.payload.state == QpState.ERROR),
            status.irq.eq(nic.irq),
            status.uart_rx.eq(self.uart_rx),
            status.dma_decerr.eq(bram.decerr),
            board_regs.qp_error.eq(status.qp_error),
            board_regs.dma_decerr.eq(bram.decerr),
            board_regs.leds.eq(status.leds),
            self.leds.eq(status.leds),
        ]
        return m

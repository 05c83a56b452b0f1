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
0x0000_0000    2^``csr_addr_width``        NicCore's CSR space (5 blocks of ``block_size``,
                                           the window a power of two): the block chain
                                           the host driver walks from offset 0
                                           (docs/registers.md)
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

Files: hw/board/bram.py (AXI4BRAM), hw/board/axil_decoder.py
(AXI4LiteDecoder), hw/board/mac.py (RGMIIMAC), hw/board/regs.py
(MACRegisters), hw/board/uart.py (UARTToAXI4Lite), and this file (the board
register block, BoardStatus and BoardSoC, which joins them).
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..csr import AXI4LiteToCSR, CSRBusSignature, RegisterMap, grouped_read
from ..nic.core import NicCore
from ..reliability.layouts import QpState
from .axil_decoder import AXI4LiteDecoder
from .bram import AXI4BRAM
from .mac import RGMIIMAC
from .mac import STATS as MAC_STATS
from .regs import MACRegisters
from .rgmii import RGMIIPinSignature
from .uart import UARTToAXI4Lite
from .util import is_pow2

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
                        mpr_max=256, num_mrs=4, window=64, inflight_depth=64, addr_width=32,
                        nscc=True, ev_gen=True)

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
        # not in series with the read mux (docs/timing.md#board-soc).
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
        if not is_pow2(mem_size) or not 0x1000 <= mem_size <= 0x10_0000:
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

"""The MAC's register block: identity, control, the frame counters and the
PHY's MDIO management interface.

Self-describing like every block (``ID`` type/version, ``NEXT`` offset of the
next block), so the host driver finds it through the UART bridge:
UARTToAXI4Lite -> hw.csr.AXI4LiteToCSR -> ``MACRegisters.csr``.
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..csr import CSRBusSignature, RegisteredWrites, RegisterMap, grouped_read
from .mac import STATS, MACStatsSignature
from .mdio import MDIOMaster

__all__ = ["MAC_TYPE_ID", "MAC_VERSION", "MACRegisters", "mac_register_map"]

MAC_TYPE_ID = 0x0010  # board blocks from 0x0010 on
MAC_VERSION = 1
COUNTER_BASE = 0x10
MDIO_OFFSET = 0x40


def mac_register_map(data_width=64, max_frame=1518, next_offset=0) -> RegisterMap:
    rmap = RegisterMap(
        "mac",
        MAC_TYPE_ID,
        MAC_VERSION,
        "RGMII Ethernet MAC (hw/board/mac.py): speed, bad-frame policy, frame counters.",
    )
    rmap.add(
        "ID",
        0x00,
        "RO",
        "block identity",
        fields=[("version", 0, 16, f"{MAC_VERSION}"), ("type", 16, 16, f"0x{MAC_TYPE_ID:04x}")],
    )
    rmap.add("NEXT", 0x04, "RO", f"offset of the next register block, 0 if last ({next_offset:#x})")
    rmap.add(
        "PARAMS",
        0x08,
        "RO",
        "build parameters",
        fields=[
            ("data_width", 0, 16, f"AXI-Stream data width in bits ({data_width})"),
            ("max_frame", 16, 16, f"largest good frame in bytes with FCS ({max_frame})"),
        ],
    )
    rmap.add(
        "CTRL",
        0x0C,
        "RW",
        "control (reset 0)",
        fields=[
            ("mii_select", 0, 1, "0: 1 Gb/s, 1: 100/10 Mb/s; change only while the link is idle"),
            ("rx_pass_bad", 1, 1, "deliver bad frames with tuser instead of dropping them"),
        ],
    )
    for i, (name, doc) in enumerate(STATS):
        rmap.add(f"CNT_{name.upper()}", COUNTER_BASE + 4 * i, "RO", f"count (wraps): {doc}")
    rmap.add(
        "MDIO",
        MDIO_OFFSET,
        "RW",
        "clause-22 access to the PHY (hw/board/mdio.py): a write "
        "starts one (ignored while busy); a read returns the last read data and busy",
        fields=[
            ("data", 0, 16, "write data / read data"),
            ("reg", 16, 5, "register address (write only)"),
            ("phy", 21, 5, "PHY address (write only)"),
            ("read", 26, 1, "1: read, 0: write (write only)"),
            ("busy", 31, 1, "an access is under way (read only)"),
        ],
    )
    return rmap


class MACRegisters(wiring.Component):
    """CSR slave for one RGMIIMAC.

    Interface: ``csr`` (CSR bus slave), ``stats`` (the MAC's counters),
    ``mii_select`` and ``rx_pass_bad`` (to the MAC), ``mdc``/``mdio_o``/
    ``mdio_oe``/``mdio_i`` (the PHY's management pins; MDC is the clock
    divided by ``2 * mdio_divisor``, at most 2.5 MHz). Latency: ``r_data`` the
    cycle after ``r_stb`` (registered per group of eight words by
    ``hw.csr.grouped_read``, then an OR of the groups); a write takes effect
    the cycle after ``w_stb`` (an MDIO access starts then; MDIO reads busy
    from that cycle on). Throughput: one access per cycle.
    """

    def __init__(self, data_width=64, max_frame=1518, next_offset=0, addr_width=8, mdio_divisor=20):
        self.map = mac_register_map(data_width, max_frame, next_offset)
        self._id = (MAC_TYPE_ID << 16) | MAC_VERSION
        self._params = (max_frame << 16) | data_width
        self._next = next_offset
        self.mdio_divisor = mdio_divisor
        super().__init__(
            {
                "csr": In(CSRBusSignature(addr_width)),
                "stats": In(MACStatsSignature()),
                "mii_select": Out(1),
                "rx_pass_bad": Out(1),
                "mdc": Out(1),
                "mdio_o": Out(1),
                "mdio_oe": Out(1),
                "mdio_i": In(1),
            }
        )

    def elaborate(self, platform):
        m = Module()
        bus = self.csr
        reg = self.map
        ctrl = Signal(2)
        m.d.comb += [self.mii_select.eq(ctrl[0]), self.rx_pass_bad.eq(ctrl[1])]
        with m.If(bus.w_stb & (bus.addr == reg["CTRL"].offset)):
            m.d.sync += ctrl.eq(bus.w_data[:2])

        m.submodules.mdio = mdio = MDIOMaster(self.mdio_divisor)
        # An MDIO write starts the access a cycle later, from registers
        # (hw.csr.RegisteredWrites): the address decode is not in series with
        # the MDIO master's enables. MDIO reads busy while the start is
        # pending, so a read in between finds the access under way.
        w = RegisteredWrites(m, bus, {"mdio": (bus.addr == reg["MDIO"].offset, None)})
        mdio_start = w.stb["mdio"]
        mdio_cmd = w.data[:27]
        m.d.comb += [
            self.mdc.eq(mdio.mdc),
            self.mdio_o.eq(mdio.mdio_o),
            self.mdio_oe.eq(mdio.mdio_oe),
            mdio.mdio_i.eq(self.mdio_i),
            mdio.wdata.eq(mdio_cmd[0:16]),
            mdio.reg.eq(mdio_cmd[16:21]),
            mdio.phy.eq(mdio_cmd[21:26]),
            mdio.read.eq(mdio_cmd[26]),
            mdio.start.eq(mdio_start),
        ]

        # The read mux is registered per group of eight words, each on the
        # low address bits beside its group's compare, rather than as a compare
        # per register on the whole address and a 14-way AND-OR behind it
        # (five LUTs; docs/timing.md#board-soc). The OR of the groups
        # after their registers keeps the read latency at 1.
        words = {
            reg["ID"].offset: self._id,
            reg["NEXT"].offset: self._next,
            reg["PARAMS"].offset: self._params,
            reg["CTRL"].offset: ctrl,
            reg["MDIO"].offset: mdio.rdata | ((mdio.busy | mdio_start) << 31),
        }
        for name, _ in STATS:
            words[reg[f"CNT_{name.upper()}"].offset] = getattr(self.stats, name)
        m.d.comb += bus.r_data.eq(grouped_read(m, bus.addr, bus.r_stb, words))
        return m

"""The per-QP settings of the TX sequencer: which CSR each 32-bit lane of a
QP's settings row holds, how the lanes are grouped into RAMs, their values
after reset, and the store that holds them (``QpSettings``)."""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .regs import Q

__all__ = ["CFG_LANES", "CFG_LANES_IP6", "CFG_GROUPS", "CFG_FLOP_QPS", "MPR_UNIT", "QpSettings",
           "QpWriteSignature", "cfg_lanes", "cfg_groups", "lane_index", "settings_lane",
           "settings_defaults", "registered_address", "BRAM_QPS", "row_port", "row_address"]

MPR_UNIT = 128  # PSNs per unit of qp_mpr

# Per-QP settings held in one RAM row, one 32-bit lane per CSR so that a CSR
# write is a single lane write (write granularity 32): (name, register, bits kept).
CFG_LANES = [
    ("mtu_shift", Q.MTU, 3),  # log2(MTU) - 8: the MTU is 256 << mtu_shift
    ("mpr", Q.MPR, 8),
    ("cwnd", Q.CWND, 16),
    ("dqpn", Q.DEST_QPN, 24),
    ("dst_mac_lo", Q.DST_MAC_LO, 32),
    ("dst_mac_hi", Q.DST_MAC_HI, 16),
    ("dst_ip", Q.DST_IP, 32),
    ("dscp", Q.DSCP, 6),
    ("sq_base_lo", Q.SQ_BASE_LO, 32),
    ("sq_base_hi", Q.SQ_BASE_HI, 32),
    ("sq_log2_size", Q.SQ_LOG2_SIZE, 4),
    ("max_wimm", Q.MAX_WIMM, 16),  # WimmBound keeps the bound; this lane is its read-back
]
# With ``ipv6`` (a build parameter): the peer's IPv6 address above qp_dst_ip's
# 32 bits, and whether the peer is IPv6; after the others, so that every other
# lane keeps its index.
CFG_LANES_IP6 = [
    ("dst_ip6_1", Q.DST_IP6_1, 32),
    ("dst_ip6_2", Q.DST_IP6_2, 32),
    ("dst_ip6_3", Q.DST_IP6_3, 32),
    ("ip6", Q.IP6, 3),  # bit 0 the family, bits 2..1 the EV format
]
lane_index = {name: i for i, (name, _, _) in enumerate(CFG_LANES + CFG_LANES_IP6)}


def cfg_lanes(ipv6: bool = False):
    """The settings lanes of a build with or without ``ipv6``, in row order."""
    return CFG_LANES + (CFG_LANES_IP6 if ipv6 else [])

# The lanes are kept in three RAMs, each read at a registered address of its
# own, so that no row select drives all of a row's bits (``registered_address``):
# the lanes the FSM uses, and two groups of the headers' fields.
CFG_GROUPS = (
    ("ctl", ("mtu_shift", "mpr", "cwnd", "sq_base_lo", "sq_base_hi", "sq_log2_size")),
    ("mac", ("dst_mac_lo", "dst_mac_hi")),
    ("hdr", ("dqpn", "dst_ip", "dscp", "max_wimm")),
)
assert sorted(name for _, names in CFG_GROUPS for name in names) == sorted(
    name for name, _, _ in CFG_LANES)


def cfg_groups(ipv6: bool = False):
    """The RAM groups of a build with or without ``ipv6`` (the IPv6 lanes: one more)."""
    return CFG_GROUPS + ((("ip6", tuple(n for n, _, _ in CFG_LANES_IP6)),) if ipv6 else ())

# Up to this many QPs the settings are flip-flop rows (what synthesis makes of
# so small a memory anyway), each lane of each row written under a flip-flop
# strobe of its own, decoded with w_stb; above it, RAMs with a write address.
CFG_FLOP_QPS = 2


def settings_lane(row, name, width=None):
    """Lane ``name`` of a settings row (the lanes in CFG_LANES order): its
    CFG_LANES bits, or its low ``width``."""
    i = lane_index[name]
    return row[32 * i : 32 * i + (cfg_lanes(True)[i][2] if width is None else width)]


def settings_defaults(max_mtu, inflight_depth, ipv6=False):
    """Each lane's value after reset, in ``cfg_lanes(ipv6)`` order: an MTU of
    1024 (or the largest), MPR and cwnd the in-flight table's size, the rest 0."""
    values = [0] * len(cfg_lanes(ipv6))
    values[lane_index["mtu_shift"]] = min(10, max_mtu.bit_length() - 1) - 8
    values[lane_index["mpr"]] = max(1, inflight_depth // MPR_UNIT)
    values[lane_index["cwnd"]] = inflight_depth
    return values


def registered_address(m: Module, value, name: str):
    """A read port's address, registered: ``value`` of the cycle before.

    Each RAM read port (FSM or CSR) gets a register of its own, never one
    shared by several ports: a shared one drives every row select of all of
    them (~500 sinks for the FSM's four on the board, ~160 for the CSR
    reads'; docs/timing.md#tx-sequencer). The register loads only when it
    differs from ``value``, so that its next value depends on itself and
    synthesis keeps the copies apart."""
    reg = Signal(len(value), name=name)
    with m.If(reg != value):
        m.d.sync += reg.eq(value)
    return reg


# Above this many QPs the per-QP tables that are read a cycle after their
# address (the settings, the WQE state, the counters, the prefetched WQEs)
# are read through synchronous ports, transparent for their write port, which
# synthesis maps to block RAM. Up to it, a combinational read at a registered
# address (``registered_address``): LUT RAM, whose read path starts at a
# flip-flop of its own.
BRAM_QPS = 64


def row_port(mem, *, block_ram: bool, write=None):
    """A new read port of ``mem`` (named as the variable it is assigned to)
    whose data is the row at the address of the cycle before, the write of
    that cycle (through ``write``) included, once its address is given
    ``row_address(...)``: with ``block_ram`` a synchronous port transparent
    for ``write``, else a combinational one. The two differ only in the first
    cycle after reset (a synchronous port's data starts at 0, the other's is
    row 0)."""
    if block_ram:
        return mem.read_port(transparent_for=(write,) if write is not None else (), src_loc_at=1)
    return mem.read_port(domain="comb", src_loc_at=1)


def row_address(m: Module, value, name: str, *, block_ram: bool):
    """The address of a ``row_port`` port reading the row at ``value``:
    ``value`` itself for a synchronous port, else ``registered_address``."""
    return value if block_ram else registered_address(m, value, name)


def QpWriteSignature(num_qps, flop_rows, ipv6=False):
    """A per-QP CSR write, as registered strobes (Out from the decode), the
    cycle they apply: ``q`` the QP, ``data`` the word (0 while ``init``);
    ``lanes`` one enable per settings lane (CFG_LANES order), and with
    ``flop_rows`` the same per row, ``rows`` (``len(CFG_LANES)`` bits per QP,
    QP 0's lowest); ``init`` the write is INIT's of the defaults (every lane
    of row ``q``); ``mtu_shift`` the MTU write's log2(MTU) - 8; ``ctrl``,
    ``doorbell`` a write of qp_ctrl, qp_doorbell; ``unpark`` a write that may
    open the QP's window (MPR, CWND, CTRL, NEXT_PSN); ``next_psn``,
    ``reset``, ``flush`` one-hot by QP: a qp_next_psn write, a qp_ctrl write
    with reset = 1, with flush = 1; ``psn_write``, a qp_next_psn write of
    QP ``q`` or INIT's (``data`` 0) of row ``q``."""
    qb = max(1, (num_qps - 1).bit_length())
    nl = len(cfg_lanes(ipv6))
    return wiring.Signature({
        "q": Out(qb),
        "data": Out(32),
        "lanes": Out(nl),
        "rows": Out(nl * num_qps if flop_rows else 0),
        "init": Out(1),
        "mtu_shift": Out(3),
        "ctrl": Out(1),
        "doorbell": Out(1),
        "unpark": Out(1),
        "next_psn": Out(num_qps),
        "psn_write": Out(1),
        "reset": Out(num_qps),
        "flush": Out(num_qps),
    })


class QpSettings(wiring.Component):
    """Every QP's settings row (CFG_LANES), with one write port and three
    read ports: the sequencer FSM's, the CSR reads' and the WQE prefetch's.

    Interface: ``w`` (``QpWriteSignature``, from ``TxCsrDecode``; this block
    takes ``q``, ``data``, ``lanes``/``rows``, ``init`` and ``mtu_shift``),
    ``fsm_q`` -> ``fsm_row`` and ``csr_q`` -> ``csr_row``: the row of the QP
    given the cycle before, lanes in CFG_LANES order, 32 bits each (only a
    lane's CFG_LANES bits are meaningful).

    Storage: one RAM per CFG_GROUPS group (one write lane of 32 bits per
    setting), each read port a transparent read of the address of the cycle
    before (``row_port``): above ``BRAM_QPS`` QPs (or with ``block_ram``) a
    synchronous port, block RAM; else a combinational one at an address
    register of its own (``registered_address``), LUT RAM. At up to
    ``CFG_FLOP_QPS`` QPs a group is flip-flop rows, read through a mux at
    registered addresses, each lane of each row written under its strobe in
    ``w.rows`` (a flip-flop) rather than a decode of ``w.q``. Each lane's
    write data is ``w.data`` (``w.mtu_shift`` for the MTU), and while
    ``w.init`` its default (``settings_defaults``).

    Latency: a write lands at the end of the cycle its strobes are present;
    a read (each port) gives the row of the address of the cycle before,
    writes of that cycle included. Throughput: one write and three reads per cycle.
    """

    def __init__(self, *, num_qps, max_mtu, inflight_depth, ipv6=False, block_ram=None):
        self.num_qps = num_qps
        self.flop_rows = num_qps <= CFG_FLOP_QPS
        self.block_ram = num_qps > BRAM_QPS if block_ram is None else block_ram
        self.lanes = cfg_lanes(ipv6)
        self.groups = cfg_groups(ipv6)
        self.defaults = settings_defaults(max_mtu, inflight_depth, ipv6)
        qb = max(1, (num_qps - 1).bit_length())
        nl = len(self.lanes)
        super().__init__({
            "w": In(QpWriteSignature(num_qps, self.flop_rows, ipv6)),
            "fsm_q": In(qb),
            "fsm_row": Out(32 * nl),
            "csr_q": In(qb),
            "csr_row": Out(32 * nl),
            "ring_q": In(qb),
            "ring_row": Out(32 * nl),
        })

    def elaborate(self, platform):
        m = Module()
        nq, nl, w = self.num_qps, len(self.lanes), self.w
        qb = max(1, (nq - 1).bit_length())
        cfg_init = self.defaults
        block_ram = self.block_ram and not self.flop_rows

        def address(value, name):
            return row_address(m, value, name, block_ram=block_ram)

        # Per group of lanes: (lane indices, write port, the FSM's read port,
        # the CSR reads' port). A CSR read never meets a settings write (those
        # are applied two cycles after w_stb), so its transparency changes nothing.
        cfg_ports = []
        lanes_fsm = [None] * nl
        lanes_csr = [None] * nl
        lanes_ring = [Const(0, 32)] * nl
        for group, names in self.groups:
            lanes = [lane_index[name] for name in names]
            row_init = sum(cfg_init[i] << (32 * k) for k, i in enumerate(lanes))
            if self.flop_rows:
                cfg_w = [Signal(32 * len(lanes), init=row_init, name=f"cfg_{group}_row{r}")
                         for r in range(nq)]
                r_addr = Signal(qb, name=f"cfg_{group}_r_addr")
                csr_addr = Signal(qb, name=f"cfg_{group}_csr_addr")
                r_data, csr_data = Array(cfg_w)[r_addr], Array(cfg_w)[csr_addr]
                if group == "ctl":
                    ring_addr = Signal(qb, name="cfg_ctl_ring_addr")
                    ring_data = Array(cfg_w)[ring_addr]
            else:
                m.submodules[f"cfg_{group}"] = mem = Memory(
                    shape=32 * len(lanes), depth=nq, init=[row_init] * nq
                )
                cfg_w = mem.write_port(granularity=32)
                ram = dict(block_ram=self.block_ram, write=cfg_w)
                cfg_r = row_port(mem, **ram)
                cfg_csr = row_port(mem, **ram)
                r_addr, r_data = cfg_r.addr, cfg_r.data
                csr_addr, csr_data = cfg_csr.addr, cfg_csr.data
                if group == "ctl":
                    cfg_ring = row_port(mem, **ram)
                    ring_addr, ring_data = cfg_ring.addr, cfg_ring.data
            for k, i in enumerate(lanes):
                lanes_fsm[i] = r_data[32 * k : 32 * (k + 1)]
                lanes_csr[i] = csr_data[32 * k : 32 * (k + 1)]
                if group == "ctl":
                    lanes_ring[i] = ring_data[32 * k : 32 * (k + 1)]
            cfg_ports.append((group, lanes, cfg_w, r_addr, csr_addr))
        m.d.comb += [self.fsm_row.eq(Cat(*lanes_fsm)), self.csr_row.eq(Cat(*lanes_csr)),
                     self.ring_row.eq(Cat(*lanes_ring)),
                     ring_addr.eq(address(self.ring_q, "cfg_ctl_ring_q"))]
        m.d.comb += [r_addr.eq(address(self.fsm_q, f"cfg_{group}_q"))
                     for group, _, _, r_addr, _ in cfg_ports]

        # Every lane is given w.data and the lane enable picks the one written,
        # so the data needs no decode; INIT's zero w.data is the default of
        # every lane but those muxed here.
        lanes_w = []
        for i, (name, _, _) in enumerate(self.lanes):
            lane_data = Signal(32, name=f"cfg_w_{name}")
            value = w.mtu_shift if name == "mtu_shift" else w.data
            m.d.comb += lane_data.eq(Mux(w.init, cfg_init[i], value) if cfg_init[i] else value)
            lanes_w.append(lane_data)
        for _, lanes, cfg_w, _, _ in cfg_ports:
            if self.flop_rows:
                for r, row in enumerate(cfg_w):
                    for k, i in enumerate(lanes):
                        with m.If(w.rows[nl * r + i]):
                            m.d.sync += row[32 * k : 32 * (k + 1)].eq(lanes_w[i])
            else:
                m.d.comb += [
                    cfg_w.addr.eq(w.q),
                    cfg_w.en.eq(Cat(*[w.lanes[i] for i in lanes])),
                    cfg_w.data.eq(Cat(*[lanes_w[i] for i in lanes])),
                ]
        m.d.comb += [csr_addr.eq(address(self.csr_q, f"cfg_{group}_csr_q"))
                     for group, _, _, _, csr_addr in cfg_ports]
        return m

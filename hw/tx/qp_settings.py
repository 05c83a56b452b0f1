"""The per-QP settings of the TX sequencer: which CSR each 32-bit lane of a
QP's settings row holds, how the lanes are grouped into RAMs, and their
values after reset."""

from amaranth.hdl import Module, Signal

from .regs import Q

__all__ = ["CFG_LANES", "CFG_GROUPS", "CFG_FLOP_QPS", "MPR_UNIT", "lane_index", "settings_lane",
           "settings_defaults", "registered_address"]

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
lane_index = {name: i for i, (name, _, _) in enumerate(CFG_LANES)}

# The lanes are kept in three RAMs, each read at a registered address of its
# own, so that no row select drives all of a row's bits (``registered_address``):
# the lanes the FSM uses, and two groups of the headers' fields.
CFG_GROUPS = (
    ("ctl", ("mtu_shift", "mpr", "cwnd", "sq_base_lo", "sq_base_hi", "sq_log2_size")),
    ("mac", ("dst_mac_lo", "dst_mac_hi")),
    ("hdr", ("dqpn", "dst_ip", "dscp", "max_wimm")),
)
assert sorted(name for _, names in CFG_GROUPS for name in names) == sorted(lane_index)

# Up to this many QPs the settings are flip-flop rows (what synthesis makes of
# so small a memory anyway), each lane of each row written under a flip-flop
# strobe of its own, decoded with w_stb; above it, RAMs with a write address.
CFG_FLOP_QPS = 2


def settings_lane(row, name, width=None):
    """Lane ``name`` of a settings row (the lanes in CFG_LANES order): its
    CFG_LANES bits, or its low ``width``."""
    i = lane_index[name]
    return row[32 * i : 32 * i + (CFG_LANES[i][2] if width is None else width)]


def settings_defaults(max_mtu, inflight_depth):
    """Each lane's value after reset, in CFG_LANES order: an MTU of 1024 (or
    the largest), MPR and cwnd the in-flight table's size, the rest 0."""
    values = [0] * len(CFG_LANES)
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

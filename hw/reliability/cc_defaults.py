"""The congestion window's defaults, defined once for the gateware's reset values
(``ReliabilityEngine``), the host driver (``Device.set_congestion``) and the golden
model's NSCC (``sim.model.cc.NsccParams.resolved``).

NSCC (UET 1.0, as the model runs it) aims at a queueing delay of
``TARGET_DELAY_FRACTION`` x the base RTT and starts a flow's window at
``START_CWND_BDP`` x the bandwidth-delay product. The gateware counts its window
in packets and compares the whole RTT sample (16-cycle units) with ``target_rtt``,
so its defaults are:

- ``target_rtt`` = (1 + 0.75) x base RTT, in 16-cycle units (1..0xFFFE: 0xFFFF
  would never be reached by a 16-bit sample, and the window would never shrink);
- ``cwnd_init`` = ceil(1.5 x BDP / wire bytes of a full packet), BDP = base RTT x
  line rate / 8, clamped to 1..``window``.

The base RTT is ``DEFAULT_BASE_RTT_NS`` until the host configures its fabric's; the
line rate is ``data_width`` bits per cycle unless the host says otherwise.
"""

from __future__ import annotations

import math

from hw.protocol import SVC_TIME_UNIT_NS

__all__ = ["DEFAULT_BASE_RTT_NS", "TARGET_DELAY_FRACTION", "START_CWND_BDP", "RTT_UNIT_CYCLES",
           "DATA_WIRE_OVERHEAD", "NSCC_GAINS", "nscc_resolved", "target_rtt_units",
           "start_cwnd_packets", "line_rate_bps", "SVC_SCALE_SHIFT", "svc_scale",
           "svc_units"]

DEFAULT_BASE_RTT_NS = 5000.0  # the model's NsccParams default
TARGET_DELAY_FRACTION = 0.75  # NSCC target queueing delay, x base RTT
START_CWND_BDP = 1.5  # NSCC's first (and largest) window, x BDP
RTT_UNIT_CYCLES = 16  # the RTT sample's unit (hw/reliability/core.py RTT_SHIFT)
# Wire bytes of a data packet besides its payload (a multiple of 4): Ethernet, IPv4,
# UDP, BTH, RETH, ICRC, FCS, preamble and gap (docs/protocol.md, "Byte budget")
DATA_WIRE_OVERHEAD = 14 + 20 + 8 + 12 + 16 + 4 + 4 + 8 + 12
TARGET_RTT_MAX = 0xFFFE
# NSCC's gains and thresholds (mrc.h's names): the model's ``NsccParams`` defaults,
# the gateware NSCC's reset values (``NsccPath``) and the driver's defaults
NSCC_GAINS = {"eta": 0.5, "fi": 1.0, "gamma": 0.8, "max_md_jump": 0.5, "qa_gate": 0.5,
              "qa_threshold": 4.0, "ewma": 0.125}


def line_rate_bps(data_width: int, clk_freq_hz: int) -> float:
    """The NIC's data path rate: one ``data_width`` beat per cycle."""
    return float(data_width) * clk_freq_hz


def target_rtt_units(base_rtt_ns: float, clk_freq_hz: int) -> int:
    """``target_rtt`` for a base RTT: the RTT at NSCC's target delay, in 16-cycle units.
    Raises ValueError naming ``base_rtt_ns`` when it does not fit 1..0xFFFE units."""
    unit_ns = RTT_UNIT_CYCLES * 1e9 / clk_freq_hz
    units = round(base_rtt_ns * (1 + TARGET_DELAY_FRACTION) / unit_ns)
    if not base_rtt_ns > 0 or not 1 <= units <= TARGET_RTT_MAX:
        top = TARGET_RTT_MAX * unit_ns / (1 + TARGET_DELAY_FRACTION)
        raise ValueError(f"base_rtt_ns must be in {unit_ns / (1 + TARGET_DELAY_FRACTION):.0f}"
                         f"..{top:.0f} at {clk_freq_hz} Hz (target_rtt is 16 bits of "
                         f"16-cycle units), not {base_rtt_ns!r}")
    return units


# An ACK's service time (units of SVC_TIME_UNIT_NS) in RTT units:
# (svc x svc_scale) >> SVC_SCALE_SHIFT, rounded down, so that it never exceeds the
# sample it corrects by rounding.
SVC_SCALE_SHIFT = 24


def svc_scale(clk_freq_hz: int) -> int:
    """The multiplier of ``svc_units`` at ``clk_freq_hz``: 2^24 RTT units per
    service-time unit, rounded down."""
    return (clk_freq_hz * SVC_TIME_UNIT_NS * (1 << SVC_SCALE_SHIFT)
            // (RTT_UNIT_CYCLES * 10**9))


def svc_units(svc: int, clk_freq_hz: int) -> int:
    """What the gateware takes off an RTT sample (16-cycle units) for a service
    time of ``svc`` (units of ``SVC_TIME_UNIT_NS``)."""
    return (svc * svc_scale(clk_freq_hz)) >> SVC_SCALE_SHIFT


def start_cwnd_packets(base_rtt_ns: float, rate_bps: float, mtu: int, window: int) -> int:
    """``cwnd_init``: NSCC's starting window, 1.5 x BDP, in packets of ``mtu`` bytes
    of payload, at least 1 and at most ``window``."""
    if not base_rtt_ns > 0 or not rate_bps > 0:
        raise ValueError(f"base_rtt_ns and the line rate must be > 0, not {base_rtt_ns!r}, "
                         f"{rate_bps!r}")
    bdp_bytes = base_rtt_ns * 1e-9 * rate_bps / 8
    packets = math.ceil(START_CWND_BDP * bdp_bytes / (mtu + DATA_WIRE_OVERHEAD))
    return max(1, min(window, packets))


def nscc_resolved(params: dict, bdp_bytes: float, mtu_wire: int) -> dict:
    """NSCC's parameters (``NsccParams``' fields) with the ones left 0 given their
    defaults: ``target_delay_ns`` ``TARGET_DELAY_FRACTION`` x ``base_rtt_ns``,
    ``min_cwnd`` one packet of ``mtu_wire`` bytes, ``max_cwnd`` (also the first
    window) ``START_CWND_BDP`` x ``bdp_bytes``, but at least ``min_cwnd``."""
    p = dict(params)
    if not p.get("target_delay_ns"):
        p["target_delay_ns"] = TARGET_DELAY_FRACTION * p["base_rtt_ns"]
    if not p.get("min_cwnd"):
        p["min_cwnd"] = float(mtu_wire)
    if not p.get("max_cwnd"):
        p["max_cwnd"] = max(START_CWND_BDP * bdp_bytes, p["min_cwnd"])
    return p

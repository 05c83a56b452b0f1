"""``make bench`` section ``wide``: the 512-bit data path, TX alone and two
NICs end to end (issue 32).

- RX at 512 bits: ``sim.bench.rx``'s cases on the ``rx_engine_w512`` build
  (``RX_DATA_WIDTH``), in a process of its own.
- TX at 512 bits: ``sim.bench.tx``'s cases (``tests/hw/test_tx_engine.py``
  ``test_bench`` on the ``tx_engine_w512`` build, memory without pauses, no
  MAC backpressure), in a process of its own (the test module reads its data
  width from ``TX_DATA_WIDTH`` when imported).
- Two NICs at 512 bits: sim/system/line_rate.py's ``line_rate`` (which
  tests/system/test_wide.py asserts) on that test's build (``WIDE_PARAMS``:
  512 bits, MTU up to 4096), one QP writing 16 x 64 KiB over 8 lossless
  paths, TX, fabric, RX and ACKs all in the loop.

Rates are per cycle; Gb/s and Mpps at 250 MHz (Corundum's clock at 512
bits) are those x 250 MHz: what the design would carry at that clock, which
no 512-bit build of it has been placed and routed for. The measurements are
cached, so a whole ``make bench`` (whose peers section quotes them) runs
them once.

    python -m sim.bench --only wide
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from hw.headers import ICRC_BYTES
from hw.tx.layouts import header_lengths
from sim.bench.peers import ETH_100G_64B_MPPS, WIRE_OVERHEAD

try:  # the cocotb side only exists inside the simulator
    import cocotb
except ImportError:  # pragma: no cover
    cocotb = None

ROOT = Path(__file__).resolve().parents[2]
WIDTH = 512
CLOCK_MHZ = 250

__all__ = ["run", "measure_tx", "measure_rx", "measure_system", "clock_for"]


def _child(module: str, function: str, env: dict) -> dict:
    """``module.function()``'s dict, from a child process with ``env`` added (the
    test modules read their data width from the environment when imported)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "figures.json"
        code = (f"import json, sys; from {module} import {function}; "
                f"open(sys.argv[1], 'w').write(json.dumps({function}()))")
        subprocess.run([sys.executable, "-c", code, str(out)], cwd=ROOT, check=True,
                       env={**os.environ, **env, "PYTHONPATH": str(ROOT)})
        return json.loads(out.read_text())


@functools.cache
def measure_tx(width: int = WIDTH) -> dict:
    """``sim.bench.tx.measure_throughput`` at ``width`` bits."""
    return _child("sim.bench.tx", "measure_throughput", {"TX_DATA_WIDTH": str(width)})


@functools.cache
def measure_rx(width: int = WIDTH, behind_dma: bool = False) -> dict:
    """``sim.bench.rx.measure`` at ``width`` bits (``behind_dma``:
    ``measure_behind_dma``, RX's AXI master through NicCore's DMA path)."""
    return _child("sim.bench.rx", "measure_behind_dma" if behind_dma else "measure",
                  {"RX_DATA_WIDTH": str(width)})


@functools.cache
def measure_system() -> tuple[dict, ...]:
    """Two 512-bit NICs at line rate, MTU 1024 and 4096 (this module's
    ``bench_line_rate_*`` on tests/system/test_wide.py's build)."""
    from sim.system.line_rate import WIDE_PARAMS
    from sim.system.simhw import run_two_nic

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "wide"
        run_two_nic("sim.bench.wide", ["bench_line_rate_1024", "bench_line_rate_4096"],
                    "bench", WIDE_PARAMS,
                    extra_env={"WIDE_BENCH_OUT": str(out)})
        return tuple(json.loads(Path(f"{out}.{mtu}.json").read_text()) for mtu in (1024, 4096))


async def _bench_line_rate(dut, mtu: int):
    """``line_rate`` at ``mtu``, written to ``WIDE_BENCH_OUT``.<mtu>.json (a
    system test's harness is one per cocotb test, so one test per MTU)."""
    from sim.system.line_rate import line_rate

    got = await line_rate(dut, mtu)
    Path(f"{os.environ['WIDE_BENCH_OUT']}.{mtu}.json").write_text(json.dumps(got))


if cocotb is not None:

    @cocotb.test(skip=not os.environ.get("WIDE_BENCH_OUT"))
    async def bench_line_rate_1024(dut):
        await _bench_line_rate(dut, 1024)

    @cocotb.test(skip=not os.environ.get("WIDE_BENCH_OUT"))
    async def bench_line_rate_4096(dut):
        await _bench_line_rate(dut, 4096)


def clock_for(gbps: float, frame_bytes: int, width: int) -> float:
    """MHz a ``width``-bit stream needs to carry ``gbps`` of Ethernet of
    ``frame_bytes``-byte frames (each frame ceil(bytes / beat) beats; the
    wire adds its 20 bytes a frame that the stream does not carry)."""
    frames_per_s = gbps * 1e9 / ((frame_bytes + WIRE_OVERHEAD) * 8)
    return frames_per_s * -(-frame_bytes // (width // 8)) / 1e6


def run() -> str:
    tx = measure_tx()
    rx = measure_rx()
    rx_dma = measure_rx(behind_dma=True)
    system = measure_system()
    bpc = tx["data_bytes_per_cycle"]
    lines = ["## 512-bit data path (`python -m sim.bench --only wide`)", "",
             f"Figures per cycle; Gb/s and Mpps at {CLOCK_MHZ} MHz (Corundum's clock at 512 "
             "bits) are those x the clock: what the design would carry there, not a timed "
             "build (no 512-bit NicCore has been placed and routed).", "",
             f"TX alone at {8 * bpc} bits (`tx_engine_w{8 * bpc}`; memory without "
             "pauses, no MAC backpressure; cycles from the first beat of the first frame to "
             "the last beat of the last):", "",
             "| case | packets | cycles | payload B/cycle | best after headers | of the best | "
             f"Gb/s at {CLOCK_MHZ} MHz |", "|---|---|---|---|---|---|---|"]
    for key, label in (("64KiB_mtu1024", "4 x 64 KiB, MTU 1024"),
                       ("64KiB_mtu4096", "4 x 64 KiB, MTU 4096")):
        r = tx[key]
        rate, best = r["payload_bytes"] / r["cycles"], r["payload_bytes"] / r["beats"]
        lines.append(f"| {label} | {r['packets']} | {r['cycles']} | {rate:.2f} | {best:.2f} | "
                     f"**{rate / best:.3f}** | {rate * 8 * CLOCK_MHZ / 1e3:.1f} |")
    lines += ["", "Small messages, one WQE each over 4 QPs, MTU 1024 (the wire's packets per "
              "cycle: a frame's beats back to back):", "",
              "| message | packets | cycles | packets/cycle | wire's packets/cycle | of the wire "
              f"| Mpps at {CLOCK_MHZ} MHz | of 100GbE's {ETH_100G_64B_MPPS:.1f} Mpps |",
              "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for n in (64, 256, 1024, 4096):
        r = tx[f"messages_{n}"]
        pkt, wire = r["packets"] / r["cycles"], r["packets"] / r["beats"]
        lines.append(f"| {n} B | {r['packets']} | {r['cycles']} | {pkt:.4f} | {wire:.4f} | "
                     f"**{pkt / wire:.3f}** | {pkt * CLOCK_MHZ:.1f} | "
                     f"{pkt * CLOCK_MHZ / ETH_100G_64B_MPPS:.3f} |")
    one = tx["64B_writes_1qp"]
    lines += ["", f"On one QP, 64-byte WRITEs: {one['packets']} packets in {one['cycles']} "
              f"cycles, {one['beats'] / one['cycles']:.3f} of the wire: reading 4 WQEs ahead "
              "per QP (`wqe_read_ahead`'s default at this width), the sequencer takes each "
              "WQE as the packet before it is emitted, a packet per 3 cycles (reading one "
              "ahead, a packet per 12 cycles, 0.253 of the wire: docs/tx.md, "
              "\"Scheduling\", \"Limitations\").", "",
              f"RX alone at {8 * bpc} bits (`rx_engine_w{8 * bpc}`, parser included; two 64 KiB "
              "WRITE_WITH_IMM messages a row, AXI slave and ACK sink always ready; ideal: the "
              "frames' beats back to back; ratio: from the first beat in to the last W beat, "
              "so the last frame's way through the pipeline counts (it is checked whole "
              "before its payload is written); input: from the first beat in to the last, "
              "1.000 when RX never holds its input back):", "",
              "| MTU | arrival | payload B/cycle | ideal B/cycle | ratio | input | behind "
              "NicCore's DMA path: B/cycle | ratio | input |",
              "|---|---|---|---|---|---|---|---|---|"]
    for key in ("1024 in order", "1024 shuffled", "4096 in order", "4096 shuffled"):
        r, d = rx[key], rx_dma[key]
        lines.append(f"| {r['mtu']} | {r['order']} | {r['bytes_per_cycle']:.2f} | "
                     f"{r['ideal_bytes_per_cycle']:.2f} | {r['ratio']:.3f} | "
                     f"{r['input_ratio']:.3f} | {d['bytes_per_cycle']:.2f} | "
                     f"{d['ratio']:.3f} | {d['input_ratio']:.3f} |")
    lines += ["", "Behind NicCore's DMA path (`sim.bench.rx.RxBehindDma`: a register slice, "
              "the AXI4Arbiter, a register slice, as in NicCore) RX keeps its rate: the "
              "arbiter passes a burst's W beats once its AW's entry is at the head of its "
              "order FIFO, and RX's DMA writer takes the next command while the current one's "
              "W beats flow, so the next AW is through the arbiter before its beats come, and "
              "W idles one cycle between commands (hw/rx/dma.py). A 1 KiB packet's 16-beat "
              "write takes about 17 cycles where its frame takes 18."]
    one = rx["ACK_N=1, 64 B packets"]
    lines += ["", f"ACKs from RX, one per 64-byte packet: {one['acks']} in {one['cycles']} cycles, "
              f"one per {one['cycles'] / one['acks']:.1f} cycles (the wire brings a 64-byte "
              "WRITE every 3 cycles at 512 bits).", "",
              f"Two NICs at {8 * bpc} bits end to end (tests/system/test_wide.py, one QP, "
              "16 x 64 KiB WRITEs over 8 lossless paths; from the first data frame's last beat "
              "to the last's):", "",
              "| MTU | data frames | cycles | payload B/cycle | best after headers | of the best | "
              f"Gb/s at {CLOCK_MHZ} MHz | cycles between ACKs (4 packets) |",
              "|---|---|---|---|---|---|---|---|"]
    for r in system:
        lines.append(f"| {r['mtu']} | {r['packets']} | {r['cycles']} | "
                     f"{r['payload_B_per_cycle']:.2f} | {r['best_after_headers']:.2f} | "
                     f"**{r['of_best']:.3f}** | {r['gbps_at_250MHz']:.1f} | "
                     f"{r['ack_interval_cycles']:.1f} |")
    lines += ["", "The sender's window (64 packets), not a congestion window's start, bounds it "
              "(`cwnd_init` = `window`). Every frame follows the one before it: at MTU 1024 "
              "four frames take 72 cycles and the receiver's ACKs (one per 4 packets) come "
              f"one per {system[0]['ack_interval_cycles']:.1f}, so RX keeps the sender's pace. "
              "What is left to the best after headers is the frames' whole beats: a 1 KiB "
              "packet's 1,122 bytes are 17.5 beats and take 18."]
    # a data frame over IPv4: Ethernet, IPv4, UDP, BTH, RETH (on every packet), ICRC
    headers = header_lengths()[0] + ICRC_BYTES
    lines += ["", "The clock a line rate needs (each frame a whole number of beats; the wire's "
              "20 bytes a frame are not on the stream):", "",
              "| line rate | stream | MTU 4096 data frames | MTU 1024 | 64-byte WRITEs | "
              "64-byte Ethernet frames |", "|---|---|---|---|---|---|"]
    for gbps, width in ((100, 512), (400, 1024), (400, 2048)):
        lines.append(f"| {gbps}G | {width} bits | "
                     + " | ".join(f"{clock_for(gbps, n, width):.0f} MHz"
                                  for n in (4096 + headers, 1024 + headers, 64 + headers, 64))
                     + " |")
    lines += ["", "100G at 512 bits needs about 200 MHz for bulk frames and 237 MHz for 64-byte "
              "WRITEs, inside Corundum's 250 MHz. At one frame per beat, 400G's 64-byte "
              "Ethernet frames need 595 MHz whatever the width (the last column), and "
              "2048 bits still needs 316 MHz for 64-byte WRITEs: 400G needs a segmented bus, "
              "several frames in one beat, as Corundum's next generation plans."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(run())

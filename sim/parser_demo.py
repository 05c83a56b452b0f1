"""``make sim`` step: scapy traffic through the Verilated RX header parser.

``run(outdir)`` builds a mix of frames with ``host_driver.layers`` (every
opcode, trimmed frames, one frame for each malformation the parser counts,
and a random mix), writes them to ``outdir/traffic.pcap``, and runs them
back to back through ``hw.rx.parser.RxParser`` (64-bit) under Verilator with
FST tracing. This module is also the cocotb test module of that run: the
cocotb side reads the pcap, sends it with cocotbext-axi, checks every frame
against the reference model of ``tests/hw/parser_frames.py`` and leaves its
figures in ``outdir/parser_demo.json``. ``run`` then copies the waveform to
``outdir/parser.fst``, writes ``outdir/report.md`` and returns the summary.

    python -m sim.parser_demo --out build/sim
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
from pathlib import Path

import cocotb
from cocotb.triggers import ClockCycles

ROOT = Path(__file__).resolve().parents[1]
DATA_WIDTH = 64
SEED = 2026
RUN_NAME = f"rx_parser_demo_w{DATA_WIDTH}"
ENV_OUT = "PARSER_DEMO_OUT"
RESULTS = "parser_demo.json"


def demo_traffic(seed: int = SEED) -> list[tuple[bytes, bool, str]]:
    """(frame, tuser, label): valid frames of every kind, each malformation, a random mix."""
    from host_driver import layers as L
    from tests.hw.parser_frames import malformed_cases, random_frame, valid_frame

    rng = random.Random(seed)
    frames = []
    for op in L.WRITE_OPCODES:
        for n in (0, 1, 61, 256, 4096):
            frames.append((valid_frame(rng, op, n), False, f"{L.OPCODES[op]} {n} B"))
    for op in (L.OP_ACKNOWLEDGE, *L.PROBE_OPCODES):
        frames.append((valid_frame(rng, op), False, L.OPCODES[op]))
    frames.append((valid_frame(rng, "trimmed"), False, "trimmed"))
    for name, frame, tuser, _ in malformed_cases(rng):
        frames.append((frame, tuser, name))
    for i in range(200):
        frame, tuser = random_frame(rng)
        frames.append((frame, tuser, f"random {i}"))
    return frames


@cocotb.test()
async def parser_demo(dut):
    """Send the demo pcap back to back, no idle, no backpressure; check and measure."""
    from scapy.utils import rdpcap

    from tests.hw.parser_frames import expect_frame
    from tests.hw.parser_tb import TB

    outdir = Path(os.environ[ENV_OUT])
    frames = [bytes(p) for p in rdpcap(str(outdir / "traffic.pcap"))]
    tuser = set(json.loads((outdir / "traffic_tuser.json").read_text()))
    sent = [(f, i in tuser) for i, f in enumerate(frames)]
    expected = [expect_frame(f, u) for f, u in sent]

    tb = TB(dut)
    await tb.reset()
    for f, u in sent:
        await tb.send(f, u)
    await tb.check(sent, expected)  # raises on any difference from the model
    await ClockCycles(dut.clk, 10)
    summary = {
        "data_width": tb.data_width,
        "frames": len(sent),
        "verdicts": tb.counters(),
        "input_beats": tb.in_beats,
        "input_cycles": tb.in_last - tb.in_first + 1,
        "beats_per_cycle": tb.in_beats / (tb.in_last - tb.in_first + 1),
        "payload_bytes": sum(len(p) for p in tb.payload_frames),
        "records": sum(1 for e in expected if e.verdict == "accepted"),
        "matches_model": True,
    }
    (outdir / RESULTS).write_text(json.dumps(summary, indent=2))


def run(outdir: Path) -> dict:
    """Run the demo into ``outdir``; returns the summary (also printed)."""
    from scapy.utils import wrpcap

    from hw.rx.parser import RxParser
    from sim.cocotb_runner import SIM_BUILD, fst_supported, run_cocotb

    outdir = Path(outdir).resolve()
    outdir.mkdir(parents=True, exist_ok=True)
    traffic = demo_traffic()
    # raw bytes with the Ethernet link type, so that runt frames stay byte-exact
    wrpcap(str(outdir / "traffic.pcap"), [f for f, _, _ in traffic], linktype=1)
    tuser = [i for i, (_, u, _) in enumerate(traffic) if u]
    (outdir / "traffic_tuser.json").write_text(json.dumps(tuser))
    (outdir / RESULTS).unlink(missing_ok=True)

    test_dir = SIM_BUILD / RUN_NAME / "demo"
    run_cocotb(
        name=RUN_NAME,
        elaborate=lambda: RxParser(data_width=DATA_WIDTH),
        toplevel="rx_parser",
        test_module="sim.parser_demo",
        testcase="parser_demo",
        extra_env={ENV_OUT: str(outdir)},
        waves="fst",
        test_dir=test_dir,
    )
    if not (outdir / RESULTS).exists():
        raise RuntimeError(f"the parser demo failed, see {test_dir}")
    summary = json.loads((outdir / RESULTS).read_text())
    kind = "fst" if fst_supported() else "vcd"
    waves = sorted(test_dir.glob(f"*.{kind}"), key=lambda p: p.stat().st_mtime)
    wave_name = f"parser.{kind}"
    if waves:
        shutil.copyfile(waves[-1], outdir / wave_name)
    summary["outdir"] = str(outdir)
    summary["waveform"] = str(outdir / wave_name) if waves else None
    summary["pcap"] = str(outdir / "traffic.pcap")

    lines = [
        f"{summary['frames']} frames from `traffic.pcap` sent back to back into "
        f"`RxParser(data_width={summary['data_width']})` under Verilator, no idle cycles "
        "and no output backpressure. Every verdict, record and payload matched the "
        "reference model (`tests/hw/parser_frames.py`).",
        "",
        "| verdict | frames |",
        "|---|---:|",
        *[f"| {name} | {count} |" for name, count in summary["verdicts"].items()],
        f"| **total** | **{sum(summary['verdicts'].values())}** |",
        "",
        f"- input: {summary['input_beats']} beats in {summary['input_cycles']} cycles, "
        f"**{summary['beats_per_cycle']:.3f} beats/cycle**",
        f"- output: {summary['records']} header records, {summary['payload_bytes']} payload bytes",
        "- files: `traffic.pcap` (the frames, open in Wireshark with the RoCE dissector on "
        f"UDP 4791), `{wave_name}` (waveform, `gtkwave {wave_name}`)",
        "",
    ]
    (outdir / "report.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return summary


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "sim")
    args = parser.parse_args(argv)
    run(args.out)


if __name__ == "__main__":
    main()

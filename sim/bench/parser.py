"""``make bench`` section: input throughput of the RX header parser.

``run()`` sends back-to-back minimum-size frames (zero-length WRITE_ONLY,
74 B) and MTU-size frames (WRITE_MIDDLE with 4096 B of payload, 4170 B)
through ``hw.rx.parser.RxParser`` under Verilator, with no idle cycles on the
input and no backpressure on the outputs, and counts the input beats taken
(``tvalid & tready``) over the cycles from the first beat to the last. Every
frame is also checked against the reference model, so a fast wrong parser
cannot score. It reuses the Verilator builds of the cocotb regression
(``sim_build/rx_parser_w<width>``).

    python -m sim.bench.parser [--widths 64 128 256 512]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import cocotb

ENV_OUT = "PARSER_BENCH_OUT"
DEFAULT_WIDTHS = (64, 128, 256)


@cocotb.test()
async def parser_bench(dut):
    """Measure beats per cycle for each frame size, no idle, no backpressure."""
    from tests.hw.parser_tb import TB, measure_throughput, min_frames, mtu_frames

    tb = TB(dut)
    rows = []
    for name, frames in (("minimum", min_frames(400)), ("MTU", mtu_frames(16))):
        rate = await measure_throughput(tb, frames)
        rows.append(
            {
                "frames": name,
                "count": len(frames),
                "frame_bytes": len(frames[0][0]),
                "beats": tb.in_beats,
                "cycles": tb.in_last - tb.in_first + 1,
                "beats_per_cycle": rate,
            }
        )
    Path(os.environ[ENV_OUT]).write_text(json.dumps({"data_width": tb.data_width, "rows": rows}))


def measure(data_width: int) -> dict:
    """Run the bench test on one data width; returns its figures."""
    from sim.cocotb_runner import SIM_BUILD
    from tests.hw.parser_tb import run as run_parser_tests

    out = SIM_BUILD / f"rx_parser_w{data_width}" / "bench.json"
    out.unlink(missing_ok=True)
    run_parser_tests(
        data_width,
        test_module="sim.bench.parser",
        testcase="parser_bench",
        extra_env={ENV_OUT: str(out)},
    )
    if not out.exists():
        raise RuntimeError(f"the parser bench at {data_width} bits failed, see {out.parent}")
    return json.loads(out.read_text())


def run(widths=DEFAULT_WIDTHS) -> str:
    """The markdown section."""
    lines = [
        "## RX header parser input throughput",
        "",
        "`hw/rx/parser.py` `RxParser`, Verilator, back-to-back frames with no idle "
        "input cycles and no output backpressure (`python -m sim.bench.parser`). "
        "Beats per cycle = input beats accepted / cycles from the first beat to the "
        "last; the target is 1.0. Every frame is also checked against the reference "
        "model.",
        "",
        "| data width | frames | frame size | beats | cycles | beats/cycle |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for width in widths:
        result = measure(width)
        for row in result["rows"]:
            lines.append(
                f"| {result['data_width']} | {row['count']} x {row['frames']} "
                f"| {row['frame_bytes']} B | {row['beats']} | {row['cycles']} "
                f"| {row['beats_per_cycle']:.3f} |"
            )
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", type=int, nargs="*", default=list(DEFAULT_WIDTHS))
    args = parser.parse_args(argv)
    print(run(args.widths))


if __name__ == "__main__":
    main()

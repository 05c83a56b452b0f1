"""cocotb regression of hw.rx.parser.RxParser under Verilator.

Corundum-style: a ``TB`` class binds cocotbext-axi's AxiStreamSource to
``s_axis`` and small monitors to the Amaranth ``hdr``/``payload`` streams and
to ``counters``; ``run_frames`` sends scapy-built frames with an idle inserter
on the input and a backpressure inserter on the outputs, and checks every
frame against ``expect_frame``, a Python reference of the parser written from
docs/protocol.md (verdict per frame in order, header fields against scapy's
dissection, payload byte-exact, counters add up to the frames sent).

pytest builds one Verilator model per data width (``rx_parser_w64``,
``rx_parser_w128``) shared by all cocotb tests of this module; the soak run
is behind ``@pytest.mark.long``.
"""

from __future__ import annotations

import itertools
import os

import cocotb
import pytest
from cocotb.triggers import ClockCycles

from host_driver import layers as L
from tests import seeds
from tests.hw.parser_frames import (
    ALL_OPCODES,
    IPV6,
    MAX_PAYLOAD,
    _set,
    cycle_pause,
    expect_frame,
    malformed_cases,
    malformed_cases_v6,
    payload_lengths,
    random_frame,
    random_pause,
    valid_frame,
)
from tests.hw.parser_tb import TB, measure_throughput, min_frames, mtu_frames, run, run_frames

IDLE = [None, cycle_pause]
BACKPRESSURE = [None, cycle_pause]


@cocotb.test()
@cocotb.parametrize(idle_inserter=IDLE, backpressure_inserter=BACKPRESSURE)
async def test_every_opcode_and_length(dut, idle_inserter, backpressure_inserter):
    """Every opcode and trimmed frames; payload lengths around every beat boundary."""
    rng = seeds.rng(1)
    lanes = len(dut.s_axis__tdata) // 8
    frames = []
    for op in L.WRITE_OPCODES:
        lengths = [n for n in payload_lengths(lanes) if n <= MAX_PAYLOAD]
        if idle_inserter or backpressure_inserter:
            lengths = [n for n in lengths if n < 3 * lanes or n == MAX_PAYLOAD]
        frames += [(valid_frame(rng, op, n), False) for n in lengths]
    for kind in (L.OP_ACKNOWLEDGE, *L.PROBE_OPCODES, "trimmed", "trimmed"):
        frames += [(valid_frame(rng, kind), False) for _ in range(3)]
    rng.shuffle(frames)
    _, expected = await run_frames(dut, frames, idle_inserter, backpressure_inserter)
    assert all(e.verdict == "accepted" for e in expected)


@cocotb.test()
@cocotb.parametrize(idle_inserter=IDLE, backpressure_inserter=BACKPRESSURE)
async def test_malformed(dut, idle_inserter, backpressure_inserter):
    """Each malformation lands in its own counter, between valid frames."""
    rng = seeds.rng(2)
    cases = malformed_cases(rng)
    frames = []
    for name, frame, tuser, counter in cases:
        assert expect_frame(frame, tuser).verdict == counter, f"model disagrees on {name}"
        frames.append((frame, tuser))
        frames.append((valid_frame(rng, rng.choice(ALL_OPCODES), rng.randrange(70)), False))
    tb, _ = await run_frames(dut, frames, idle_inserter, backpressure_inserter)
    for i, (name, _, _, counter) in enumerate(cases):
        assert tb.verdicts[2 * i] == counter, f"{name}: {tb.verdicts[2 * i]}, expected {counter}"
        assert tb.verdicts[2 * i + 1] == "accepted", f"frame after {name}"


@cocotb.test()
async def test_zero_byte_beat(dut):
    """A lone tkeep=0 last beat is a truncated frame and does not upset the next."""
    tb = TB(dut)
    await tb.reset()
    rng = seeds.rng(3)
    good = valid_frame(rng, L.OP_WRITE_ONLY, 17)
    await tb.send(good)
    await tb.send_empty_beat()
    await tb.send(good)
    await tb.send_empty_beat()
    await tb.send_empty_beat()
    sent = [(good, False), (b"", False), (good, False), (b"", False), (b"", False)]
    await tb.check(sent, [expect_frame(f, u) for f, u in sent])


@cocotb.test()
async def test_trim_dscp_register(dut):
    """trim_dscp selects which DSCP means trimmed; 0x3F is then an ordinary DSCP."""
    tb = TB(dut)
    await tb.reset()
    dut.trim_dscp.value = 46
    rng = seeds.rng(14)
    full = valid_frame(rng, L.OP_WRITE_ONLY_IMM, 33)
    sent = [
        (L.trim(full, 46), False),  # trimmed under the register
        (L.trim(full, 0x3F), False),  # not trimmed now, so it ends before its ICRC
        (_set(full, 15, bytes([0x3F << 2 | 2]), ip_fix=True), False),  # TOS is not in the ICRC
        (_set(full, 15, bytes([46 << 2 | 2]), ip_fix=True), False),  # trimmed, with payload
    ]
    expected = [expect_frame(f, u, trim_dscp=46) for f, u in sent]
    verdicts = [e.verdict for e in expected]
    assert verdicts == ["accepted", "truncated", "accepted", "length_mismatch"]
    assert expected[0].fields["trimmed"] and not expected[2].fields["trimmed"]
    for f, u in sent:
        await tb.send(f, u)
    await tb.check(sent, expected)


@cocotb.test()
async def test_giant_frames(dut):
    """Frames longer than any IPv4 length (the byte count saturates) are dropped
    and the parser carries on."""
    rng = seeds.rng(13)
    good = valid_frame(rng, L.OP_WRITE_ONLY, 99)
    giant = good + rng.randbytes(140_000)
    sent = [(giant, False), (good, False), (giant, True), (good, False)]
    expected = [expect_frame(f, u) for f, u in sent]
    verdicts = [e.verdict for e in expected]
    assert verdicts == ["length_mismatch", "accepted", "bad_frame", "accepted"]
    await run_frames(dut, sent)


@cocotb.test()
async def test_random_mix(dut):
    """1,000 random frames, valid and malformed, random idle and backpressure."""
    rng = seeds.rng(int(os.environ.get("RX_PARSER_SEED", "4")))
    frames = [random_frame(rng) for _ in range(1000)]
    idle_rng, bp_rng = seeds.rng(5), seeds.rng(6)
    await run_frames(
        dut, frames, lambda: random_pause(idle_rng, 0.2), lambda: random_pause(bp_rng, 0.3)
    )


@cocotb.test()
@cocotb.parametrize(fills=["frame FIFO", "header FIFO"])
async def test_output_stall(dut, fills):
    """With the outputs stalled the input stops (tready low) once a FIFO is full;
    released, everything comes out and nothing is lost."""
    tb = TB(dut)
    await tb.reset()
    tb.set_backpressure_generator(itertools.repeat(1), itertools.repeat(1))
    rng = seeds.rng(7)
    if fills == "frame FIFO":
        frames = [(valid_frame(rng, L.OP_WRITE_MIDDLE, MAX_PAYLOAD), False) for _ in range(4)]
        frames += [(valid_frame(rng, L.OP_WRITE_ONLY, 100), False) for _ in range(4)]
    else:  # more records than the header FIFO holds, no payload at all
        frames = [(valid_frame(rng, L.OP_WRITE_ONLY, 0), False) for _ in range(40)]
        frames += [(valid_frame(rng, "trimmed"), False) for _ in range(4)]
    for f, u in frames:
        await tb.send(f, u)
    await ClockCycles(dut.clk, 3 * sum(len(f) for f, _ in frames) // tb.lanes)
    assert tb.tready_low > 0, "input never backpressured"
    assert len(tb.verdicts) < len(frames), "all frames taken with the outputs stalled"
    assert not tb.hdr_sink.queue and not tb.payload_frames, "output moved while stalled"
    tb.set_backpressure_generator(None, None)
    await tb.check(frames, [expect_frame(f, u) for f, u in frames])


@cocotb.test()
async def test_throughput(dut):
    """Back-to-back minimum and MTU frames go in at one beat per cycle."""
    tb = TB(dut)
    for name, frames in (("minimum", min_frames()), ("MTU", mtu_frames())):
        rate = await measure_throughput(tb, frames)
        dut._log.info("%s frames: %.3f beats/cycle", name, rate)
        assert rate == 1.0, f"{name} frames: {rate:.3f} beats per cycle"


@cocotb.test(skip=not IPV6)
async def test_ipv6_mix(dut):
    """A parser built with ipv6: valid IPv4 and IPv6 frames of every kind,
    each IPv6 malformation between valid frames, and a random mix of both
    families (half of them broken), with idle cycles and backpressure."""
    rng = seeds.rng(13)
    lanes = len(dut.s_axis__tdata) // 8
    frames = [(valid_frame(rng, kind, n, v6), False)
              for kind in (*ALL_OPCODES, "trimmed") for v6 in (True, False)
              for n in (0, lanes - 1, 3 * lanes + 5)]
    for name, frame, tuser, counter in malformed_cases_v6(rng):
        assert expect_frame(frame, tuser).verdict == counter, f"model disagrees on {name}"
        frames += [(frame, tuser), (valid_frame(rng, rng.choice(ALL_OPCODES), 30, True), False)]
    frames += [random_frame(rng) for _ in range(400)]
    tb, _ = await run_frames(dut, frames, cycle_pause, cycle_pause)
    assert sum(v == "accepted" for v in tb.verdicts) > len(frames) // 3


@cocotb.test(skip=not os.environ.get("RX_PARSER_SOAK"))
async def test_soak(dut):
    """A long random mix, under ``make test-long``."""
    rng = seeds.rng(int(os.environ.get("RX_PARSER_SEED", "10")))
    frames = [random_frame(rng) for _ in range(int(os.environ["RX_PARSER_SOAK"]))]
    idle_rng, bp_rng = seeds.rng(11), seeds.rng(12)
    await run_frames(
        dut, frames, lambda: random_pause(idle_rng, 0.2), lambda: random_pause(bp_rng, 0.3)
    )


# ---------------------------------------------------------------------------
# pytest entry points (``run``: tests/hw/parser_tb.py).


@pytest.mark.parametrize("data_width", [64, 128])
def test_rx_parser(data_width):
    run(data_width)


@pytest.mark.long
@pytest.mark.parametrize("data_width", [64, 128])
def test_rx_parser_ipv6(data_width):
    """The parser built with ipv6 under Verilator: test_ipv6_mix, and every
    other test of this module (IPv4 frames) on that build."""
    run(data_width, ipv6=True)


@pytest.mark.long
@pytest.mark.parametrize("data_width", [64, 128, 256, 512])
def test_rx_parser_soak(data_width):
    run(data_width, testcase="test_soak", extra_env={"RX_PARSER_SOAK": "10000"})

# amaranth: UnusedElaboratable=no
# (the ValueError tests construct parsers that are never elaborated)
"""RxParser in Amaranth's own simulator: a few frames, checked like the cocotb regression.

Fast (no Verilator build); the same reference model as tests/hw/test_rx_parser.py.
"""


import pytest
from amaranth.sim import Simulator

from host_driver import layers as L
from hw.rx.parser import COUNTER_NAMES, RxParser
from tests import seeds
from tests.hw.parser_frames import (
    ALL_OPCODES,
    expect_frame,
    malformed_cases,
    malformed_cases_v6,
    valid_frame,
)
from tests.hw.streams import decode


def simulate(dut: RxParser, frames: list[tuple[bytes, bool]], stall=lambda cycle: False):
    """Send frames back to back, the outputs stalled in the cycles where ``stall``
    says so; returns (verdicts in order, records, payloads, input rate)."""
    lanes = dut.data_width // 8
    verdicts, records, payloads = [], [], []
    stats = {"beats": 0, "cycles": 0}
    done = {"sent": False}

    async def source(ctx):
        first = None
        for frame, tuser in frames:
            chunks = [frame[i : i + lanes] for i in range(0, len(frame), lanes)] or [b""]
            for i, chunk in enumerate(chunks):
                last = i == len(chunks) - 1
                ctx.set(dut.s_axis.tdata, int.from_bytes(chunk, "little"))
                ctx.set(dut.s_axis.tkeep, (1 << len(chunk)) - 1)
                ctx.set(dut.s_axis.tlast, last)
                # bit 0 (bad frame) on the last beat; the plane above it on every beat
                ctx.set(dut.s_axis.tuser, (int(tuser) & 1 and last) | int(tuser) >> 1 << 1)
                ctx.set(dut.s_axis.tvalid, 1)
                while True:
                    ready = ctx.get(dut.s_axis.tready)
                    await ctx.tick()
                    stats["cycles"] += first is not None
                    if ready:
                        break
                if first is None:
                    first = True
                    stats["cycles"] = 1
                stats["beats"] += 1
        ctx.set(dut.s_axis.tvalid, 0)
        done["sent"] = True

    async def sink(ctx):
        n = 0
        buf = bytearray()
        idle = 0
        while idle < 200:
            stalled = stall(n)
            ctx.set(dut.hdr.ready, not stalled)
            ctx.set(dut.payload.ready, not stalled)
            hdr_valid, pay_valid = ctx.get(dut.hdr.valid), ctx.get(dut.payload.valid)
            hdr = ctx.get(dut.hdr.payload.as_value())
            beat = ctx.get(dut.payload.payload)
            await ctx.tick()
            n += 1
            if hdr_valid and not stalled:
                records.append(decode(dut.hdr.payload.shape(), hdr))
            if pay_valid and not stalled:
                nbytes = beat.keep.bit_length()
                buf += beat.data.to_bytes(lanes, "little")[:nbytes]
                if beat.last:
                    payloads.append(bytes(buf))
                    buf = bytearray()
            events = ctx.get(dut.events)
            moved = [name for i, name in enumerate(COUNTER_NAMES) if events >> i & 1]
            assert len(moved) <= 1
            verdicts.extend(moved)
            idle = idle + 1 if done["sent"] and not (hdr_valid or pay_valid or moved) else 0

    sim = Simulator(dut)
    sim.add_clock(4e-9)
    sim.add_testbench(source)
    sim.add_testbench(sink)
    sim.run()
    return verdicts, records, payloads, stats["beats"] / stats["cycles"]


def check(frames, verdicts, records, payloads, ipv6=False):
    expected = [expect_frame(f, u, ipv6=ipv6) for f, u in frames]
    assert verdicts == [e.verdict for e in expected]
    accepted = [e for e in expected if e.verdict == "accepted"]
    assert records == [e.fields for e in accepted]
    assert payloads == [e.payload for e in accepted if e.payload]


@pytest.mark.parametrize("data_width", [64, 256])
def test_a_few_frames(data_width):
    rng = seeds.rng(data_width)
    frames = [
        (valid_frame(rng, L.OP_WRITE_ONLY, 0), False),
        (valid_frame(rng, L.OP_WRITE_FIRST, 37), False),
        (valid_frame(rng, L.OP_WRITE_ONLY_IMM, 64), False),
        (valid_frame(rng, L.OP_ACKNOWLEDGE), False),
        (valid_frame(rng, L.OP_PROBE_REQ), False),
        (valid_frame(rng, "trimmed"), False),
        (valid_frame(rng, L.OP_WRITE_LAST_IMM, 5), True),
        (b"\x01", False),
    ]
    picked = {"bad ICRC, payload bit", "UDP dport 4790", "ACK sack_words 3", "IHL 6"}
    frames += [(f, u) for name, f, u, _ in malformed_cases(rng) if name in picked]
    frames.append((valid_frame(rng, L.OP_WRITE_LAST, 200), False))
    verdicts, records, payloads, rate = simulate(RxParser(data_width=data_width), frames)
    check(frames, verdicts, records, payloads)
    assert rate == 1.0, f"{rate} input beats per cycle with no backpressure"


@pytest.mark.parametrize("data_width", [64, 128, 256, 512])
def test_ipv6(data_width):
    """A parser built with ``ipv6`` takes IPv4 and IPv6 frames of every kind,
    mixed, and drops each broken one (over either family) under its counter:
    the family's offsets, lengths, ICRC masks and 128-bit addresses, frame
    after frame at one beat per cycle."""
    rng = seeds.rng(data_width + 6)
    kinds = list(ALL_OPCODES) + ["trimmed"]
    frames = [(valid_frame(rng, kind, rng.randrange(0, 3 * data_width // 8), v6), False)
              for kind in kinds for v6 in (True, False)]
    frames += [(f, u) for _, f, u, _ in malformed_cases_v6(rng)]
    picked = {"bad ICRC, payload bit", "IHL 6", "bad IP checksum", "ethertype ARP",
              "more fragments"}
    frames += [(f, u) for name, f, u, _ in malformed_cases(rng) if name in picked]
    rng.shuffle(frames)
    frames.append((valid_frame(rng, L.OP_WRITE_LAST, 200, v6=True), False))
    verdicts, records, payloads, rate = simulate(RxParser(data_width, ipv6=True), frames)
    check(frames, verdicts, records, payloads, ipv6=True)
    assert {r["v6"] for r in records} == {0, 1}
    assert rate == 1.0, f"{rate} input beats per cycle with no backpressure"


def test_ipv6_frame_in_an_ipv4_build():
    """Without ``ipv6`` an IPv6 frame is not_ipv4 (or truncated, read as IPv4)."""
    rng = seeds.rng(46)
    frames = [(valid_frame(rng, L.OP_WRITE_ONLY, 100, v6=True), False),
              (valid_frame(rng, L.OP_WRITE_ONLY, 10), False)]
    verdicts, records, payloads, _ = simulate(RxParser(64), frames)
    check(frames, verdicts, records, payloads)
    assert verdicts == ["not_ipv4", "accepted"]


def test_plane_tag():
    """With planes (``plane_bits`` 3) each record carries the plane its frame
    came on (``tuser[3:1]``), whatever the frames before it; a bad frame on any
    plane is still dropped."""
    rng = seeds.rng(7)
    kinds = [L.OP_WRITE_ONLY, L.OP_ACKNOWLEDGE, L.OP_PROBE_REQ, L.OP_WRITE_LAST_IMM]
    frames = [(valid_frame(rng, rng.choice(kinds), rng.randrange(0, 300)),
               rng.randrange(8) << 1 | (rng.random() < 0.1)) for _ in range(24)]
    dut = RxParser(data_width=64, plane_bits=3)
    verdicts, records, payloads, _ = simulate(dut, frames)
    expected = [(expect_frame(f, u & 1), u >> 1) for f, u in frames]
    assert verdicts == [e.verdict for e, _ in expected]
    assert records == [{**e.fields, "plane": plane} for e, plane in expected
                       if e.verdict == "accepted"]
    assert len({r["plane"] for r in records}) > 4


@pytest.mark.parametrize(
    "data_width,max_payload,fifo_depth,stall_cycles",
    [(64, 256, 64, 0), (64, 240, 32, 400), (256, 448, 16, 400)],
)
def test_backpressure(data_width, max_payload, fifo_depth, stall_cycles):
    """Outputs stalled (at first for ``stall_cycles``, then every other cycle) with
    a small frame FIFO, down to one payload + 2 beats: the input waits, mid-frame
    too, and nothing is lost or overwritten."""
    rng = seeds.rng(fifo_depth + stall_cycles)
    lanes = data_width // 8
    # With the outputs stalled the first frame leaves two free entries; the
    # second ends with a payload beat for the verdict stage to write after
    # its last input beat (at 256 bits), into the spare entry.
    first = min(max_payload, (fifo_depth - 2) * lanes)
    frames = [
        (valid_frame(rng, L.OP_WRITE_MIDDLE, first), False),
        (valid_frame(rng, L.OP_WRITE_LAST, 2 * lanes + 6), False),
        (valid_frame(rng, L.OP_WRITE_MIDDLE, max_payload), False),
    ]
    # every payload length modulo 8, with and without ImmDt
    for n in range(8):
        op = rng.choice([L.OP_WRITE_LAST, L.OP_WRITE_LAST_IMM])
        frames.append((valid_frame(rng, op, max_payload - 8 - n), False))
    dut = RxParser(data_width=data_width, max_payload=max_payload, fifo_depth=fifo_depth)
    stall = lambda cycle: cycle < stall_cycles or cycle % 2 == 0  # noqa: E731
    verdicts, records, payloads, rate = simulate(dut, frames, stall)
    check(frames, verdicts, records, payloads)
    assert rate < 1.0


@pytest.mark.parametrize("width", [8, 32, 96, 1024])
def test_unsupported_width(width):
    with pytest.raises(ValueError, match="data_width"):
        RxParser(data_width=width)


def test_bad_fifo_depth():
    with pytest.raises(ValueError, match="fifo_depth"):
        RxParser(data_width=64, max_payload=4096, fifo_depth=256)
    with pytest.raises(ValueError, match="fifo_depth"):
        RxParser(data_width=64, max_payload=256, fifo_depth=48)
    with pytest.raises(ValueError, match="fifo_depth"):
        RxParser(data_width=64, max_payload=256, fifo_depth=32)  # 32 beats + 2 needed

"""The cocotb bench of hw/rx/parser.py's RxParser (``TB``, ``run_frames``,
``measure_throughput``) and ``run``, which builds it under Verilator: shared by
the regression (tests/hw/test_rx_parser.py) and the benchmark
(sim/bench/parser.py)."""

from __future__ import annotations

import logging

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSource

from host_driver import layers as L
from hw.rx.parser import COUNTER_NAMES, ParsedHeader, RxParser
from hw.stream import Beat
from sim import coverage as fcov
from tests import seeds
from tests.hw.parser_frames import (
    IPV6,
    MAX_PAYLOAD,
    SACK_BITS,
    TRIM_DSCP,
    Expected,
    expect_frame,
    valid_frame,
)
from tests.hw.streams import StreamSink, decode


class TB:
    def __init__(self, dut):
        self.dut = dut
        self.log = dut._log
        self.data_width = len(dut.s_axis__tdata)
        self.lanes = self.data_width // 8
        self.record = ParsedHeader(SACK_BITS, ipv6=IPV6)
        self.beat = Beat(self.data_width)
        cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
        self.source = AxiStreamSource(
            AxiStreamBus.from_prefix(dut, "s_axis", bus_separator="__"), dut.clk, dut.rst
        )
        self.source.log.setLevel(logging.WARNING)  # it logs every frame in full at INFO
        self.hdr_sink = StreamSink(dut, "hdr", ready=0)
        self.payload_sink = StreamSink(dut, "payload", ready=0)
        self.verdicts: list[str] = []
        self.in_beats = 0
        self.in_first = self.in_last = None
        self.tready_low = 0
        self.cycle = 0
        self.payload_frames: list[bytes] = []
        self._payload_buf = bytearray()
        self.counts = dict.fromkeys(COUNTER_NAMES, 0)  # the strobes since reset
        cocotb.start_soon(self._monitor())

    async def _monitor(self):
        """Per cycle: the verdict (the one counter strobe), input beats, payload beats."""
        while True:
            await RisingEdge(self.dut.clk)
            self.cycle += 1
            if self.dut.rst.value:
                self.counts = dict.fromkeys(COUNTER_NAMES, 0)
                continue
            events = self.dut.events.value.to_unsigned()
            moved = [n for i, n in enumerate(COUNTER_NAMES) if events >> i & 1]
            assert len(moved) <= 1, f"several counter strobes in one cycle: {moved}"
            for n in moved:
                self.counts[n] += 1
                self.verdicts.append(n)
            if self.dut.s_axis__tvalid.value:
                if self.dut.s_axis__tready.value:
                    self.in_beats += 1
                    self.in_first = self.cycle if self.in_first is None else self.in_first
                    self.in_last = self.cycle
                else:
                    self.tready_low += 1
            while self.payload_sink.queue:
                beat = decode(self.beat, self.payload_sink.queue.popleft())
                keep = beat["keep"]
                nbytes = keep.bit_length()
                assert keep == (1 << nbytes) - 1, f"payload keep not contiguous: {keep:#x}"
                assert beat["last"] or nbytes == self.lanes, "partial payload beat before last"
                self._payload_buf += beat["data"].to_bytes(self.lanes, "little")[:nbytes]
                if beat["last"]:
                    self.payload_frames.append(bytes(self._payload_buf))
                    self._payload_buf = bytearray()

    def set_idle_generator(self, generator=None):
        self.source.set_pause_generator(generator)

    def set_backpressure_generator(self, hdr_generator=None, payload_generator=None):
        self.hdr_sink.set_pause_generator(hdr_generator)
        self.payload_sink.set_pause_generator(payload_generator)

    async def reset(self):
        self.dut.trim_dscp.value = TRIM_DSCP
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 4)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 2)
        self.verdicts.clear()
        self.payload_frames.clear()
        self.hdr_sink.queue.clear()

    def counters(self) -> dict:
        """The verdict strobes counted since reset (what the RX registers'
        counters count)."""
        return dict(self.counts)

    async def send(self, frame: bytes, tuser: bool = False):
        tuser_bytes = [0] * (len(frame) - 1) + [1] if tuser else None
        await self.source.send(AxiStreamFrame(frame, tuser=tuser_bytes))

    async def send_empty_beat(self):
        """A zero-byte last beat (tkeep = 0), which AxiStreamSource cannot send."""
        await self.source.wait()
        await RisingEdge(self.dut.clk)
        bus = self.source.bus
        bus.tdata.value, bus.tkeep.value, bus.tlast.value = 0, 0, 1
        bus.tuser.value, bus.tvalid.value = 0, 1
        while True:
            await RisingEdge(self.dut.clk)
            if bus.tready.value:
                break
        bus.tvalid.value = 0
        bus.tlast.value = 0

    async def check(self, sent: list[tuple[bytes, bool]], expected: list[Expected]):
        """Wait for every verdict, then compare verdicts, records and payloads."""
        accepted = [e for e in expected if e.verdict == "accepted"]
        payloads = [e.payload for e in accepted if e.payload]
        beats = sum(max(1, -(-len(f) // self.lanes)) for f, _ in sent)
        for _ in range(20 * beats + 2000):
            await RisingEdge(self.dut.clk)
            if (
                len(self.verdicts) >= len(sent)
                and len(self.hdr_sink.queue) >= len(accepted)
                and len(self.payload_frames) >= len(payloads)
            ):
                break
        assert len(self.verdicts) == len(sent), (
            f"parser hung or lost frames: {len(self.verdicts)} verdicts for {len(sent)} frames"
        )
        await ClockCycles(self.dut.clk, 20)  # anything extra would show up now
        for i, (exp, got) in enumerate(zip(expected, self.verdicts, strict=True)):
            assert got == exp.verdict, (
                f"frame {i} ({len(sent[i][0])} B): verdict {got}, expected {exp.verdict}"
            )
            fcov.sample_parser_verdict(got)
        records = [decode(self.record, v) for v in self.hdr_sink.queue]
        assert len(records) == len(accepted), f"{len(records)} records, {len(accepted)} accepted"
        for i, (exp, rec) in enumerate(zip(accepted, records, strict=True)):
            assert rec == exp.fields, f"record {i}: got {rec}, expected {exp.fields}"
        assert len(self.payload_frames) == len(payloads)
        for i, (exp, got) in enumerate(zip(payloads, self.payload_frames, strict=True)):
            assert got == exp, f"payload {i}: {len(got)} B, expected {len(exp)} B"
        counters = self.counters()
        assert sum(counters.values()) == len(sent)
        for name in COUNTER_NAMES:
            assert counters[name] == sum(e.verdict == name for e in expected), name
        self.log.info("%d frames: %s", len(sent), {k: v for k, v in counters.items() if v})


async def run_frames(dut, frames, idle_inserter=None, backpressure_inserter=None):
    tb = TB(dut)
    await tb.reset()
    tb.set_idle_generator(idle_inserter() if idle_inserter else None)
    if backpressure_inserter:
        tb.set_backpressure_generator(backpressure_inserter(), backpressure_inserter())
    expected = [expect_frame(f, u) for f, u in frames]
    for f, u in frames:
        await tb.send(f, u)
    await tb.check(frames, expected)
    return tb, expected


async def measure_throughput(tb: TB, frames) -> float:
    """Input beats per cycle from the first beat to the last, no idle, no backpressure."""
    await tb.reset()
    tb.in_beats, tb.in_first, tb.in_last = 0, None, None
    for f, u in frames:
        await tb.send(f, u)
    await tb.check(frames, [expect_frame(f, u) for f, u in frames])
    return tb.in_beats / (tb.in_last - tb.in_first + 1)


def min_frames(n=200):
    rng = seeds.rng(8)
    return [(valid_frame(rng, L.OP_WRITE_ONLY, 0), False) for _ in range(n)]


def mtu_frames(n=8):
    rng = seeds.rng(9)
    return [(valid_frame(rng, L.OP_WRITE_MIDDLE, MAX_PAYLOAD), False) for _ in range(n)]


def run(data_width: int, test_module: str = "tests.hw.test_rx_parser", ipv6: bool = False,
        extra_env=None, **kwargs):
    """Build (once per width and family support) and run cocotb tests on
    RxParser; sim/parser_bench uses it too. ``ipv6``: the parser built with
    it, and the tests' reference told so (``RX_PARSER_IPV6``)."""
    from sim.cocotb_runner import run_cocotb

    return run_cocotb(
        name=f"rx_parser_w{data_width}" + ("_v6" if ipv6 else ""),
        elaborate=lambda: RxParser(
            data_width=data_width, sack_bits=SACK_BITS, max_payload=MAX_PAYLOAD, ipv6=ipv6
        ),
        toplevel="rx_parser",
        test_module=test_module,
        extra_env={**(extra_env or {}), **({"RX_PARSER_IPV6": "1"} if ipv6 else {})},
        **kwargs,
    )

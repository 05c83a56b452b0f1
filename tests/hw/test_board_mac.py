"""cocotb regression of hw.board.mac.RGMIIMAC under Verilator.

Corundum-style: ``TB`` starts the core clock, the 125 MHz ``eth_tx`` clock
and its 90-degree copy ``eth_tx90``, binds cocotbext-eth's ``RgmiiPhy`` to
the RGMII pins (it drives rx_clk) and cocotbext-axi's AxiStreamSource/Sink
to ``tx_axis``/``rx_axis``. Frames are scapy Ethernet frames with random
payloads; every frame is checked byte for byte on the other side, and the
MAC's counters must add up to what was sent.

What the tests hold the MAC to:
* RX: frames of 64..1518 bytes delivered without FCS; bad FCS, runts,
  oversize, RX_ER and (100 Mb/s) odd-nibble frames dropped and counted by
  reason, or delivered with tuser under ``rx_pass_bad``; back-to-back
  frames at the minimum 12-byte inter-frame gap with no loss.
* TX: preamble of 7 + SFD, payload zero-padded to 60 bytes, a correct FCS,
  and exactly 12 byte times of idle between back-to-back frames (measured
  on the pins); tuser drops a frame.
* 100 Mb/s (MII nibbles over RGMII at 25 MHz) both directions.

One Verilator build (``board_mac_w64``) serves every test here; the
jumbo-frame build and the long sweep are behind ``@pytest.mark.long``.
"""

from __future__ import annotations

import itertools
import logging
import os
import random
import struct
import zlib
from itertools import pairwise

import cocotb
import pytest
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, Timer
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource
from cocotbext.eth import GmiiFrame, RgmiiPhy
from scapy.layers.l2 import Ether

from hw.board.mac import RGMIIMAC, STATS
from tests import seeds

MAX_FRAME = int(os.environ.get("BOARD_MAC_MAX_FRAME", "1518"))
CORE_PERIOD_NS = float(os.environ.get("BOARD_MAC_CORE_PERIOD_NS", "16"))
LONG = os.environ.get("BOARD_MAC_LONG") == "1"

PREAMBLE = b"\x55" * 7 + b"\xd5"


def make_payload(size: int, rng: random.Random) -> bytes:
    """A frame of ``size`` bytes without FCS: an Ethernet header and random bytes."""
    hdr = Ether(
        dst=":".join(f"{rng.randrange(256):02x}" for _ in range(6)),
        src="02:00:00:00:00:01",
        type=0x88B5,
    )
    head = bytes(hdr)
    return (head + rng.randbytes(max(0, size - len(head))))[:size]


def fcs(payload: bytes) -> bytes:
    return struct.pack("<L", zlib.crc32(payload))


def raw_frame(payload: bytes, *, fcs_bytes: bytes | None = None) -> GmiiFrame:
    """Preamble, SFD, payload and FCS as given (no padding), for RX stimulus."""
    return GmiiFrame(PREAMBLE + payload + (fcs(payload) if fcs_bytes is None else fcs_bytes))


class TB:
    def __init__(self, dut, speed: float = 1000e6, core_period_ns: float = CORE_PERIOD_NS):
        self.dut = dut
        self.log = dut._log
        self.speed = speed
        self.lanes = len(dut.tx_axis__tdata) // 8
        self.eth_period = {1000e6: 8.0, 100e6: 40.0, 10e6: 400.0}[speed]
        cocotb.start_soon(Clock(dut.clk, core_period_ns, unit="ns").start())
        cocotb.start_soon(Clock(dut.eth_tx_clk, self.eth_period, unit="ns").start())
        cocotb.start_soon(self._start_tx90())
        dut.mii_select.value = int(speed != 1000e6)
        dut.rx_pass_bad.value = 0
        self.phy = RgmiiPhy(
            dut.rgmii__txd,
            dut.rgmii__tx_ctl,
            dut.rgmii__tx_clk,
            dut.rgmii__rxd,
            dut.rgmii__rx_ctl,
            dut.rgmii__rx_clk,
            reset=dut.rst,
            speed=speed,
        )
        self.tx_source = AxiStreamSource(
            AxiStreamBus.from_prefix(dut, "tx_axis", bus_separator="__"), dut.clk, dut.rst
        )
        self.rx_sink = AxiStreamSink(
            AxiStreamBus.from_prefix(dut, "rx_axis", bus_separator="__"), dut.clk, dut.rst
        )
        for model in (self.phy.rx, self.phy.tx, self.tx_source, self.rx_sink):
            model.log.setLevel(logging.WARNING)
        # Upper bound of the TX latency, last beat accepted to first preamble
        # byte on the pins: PacketFIFO and AsyncFIFO plus the framer (docs/board.md).
        self.tx_latency_ps = int((4 * core_period_ns + 8 * self.eth_period) * 1000)
        self.tx_latency_min_ps = int((2 * core_period_ns + 2 * self.eth_period) * 1000)

    async def _start_tx90(self):
        await Timer(self.eth_period / 4, unit="ns")
        await Clock(self.dut.eth_tx90_clk, self.eth_period, unit="ns").start()

    async def reset(self):
        for sig in (self.dut.rst, self.dut.eth_tx_rst, self.dut.eth_tx90_rst):
            sig.value = 1
        await ClockCycles(self.dut.clk, 8)
        await ClockCycles(self.dut.eth_tx_clk, 4)
        for sig in (self.dut.rst, self.dut.eth_tx_rst, self.dut.eth_tx90_rst):
            sig.value = 0
        await ClockCycles(self.dut.clk, 8)

    def stats(self) -> dict[str, int]:
        return {name: getattr(self.dut, f"stats__{name}").value.to_unsigned() for name, _ in STATS}

    def set_idle_generator(self, generator=None):
        if generator:
            self.tx_source.set_pause_generator(generator())

    def set_backpressure_generator(self, generator=None):
        if generator:
            self.rx_sink.set_pause_generator(generator())

    async def rx_quiet(self, cycles: int = 64):
        """Wait until the RGMII source is idle and the MAC has drained."""
        await self.phy.rx.wait()
        await ClockCycles(self.dut.rgmii__rx_clk, 40)
        await ClockCycles(self.dut.clk, cycles)

    async def recv_rx(self, timeout_us: float = 1000.0) -> AxiStreamFrame:
        return await cocotb.triggers.with_timeout(self.rx_sink.recv(), timeout_us, "us")

    async def recv_tx(self, timeout_us: float = 1000.0) -> GmiiFrame:
        return await cocotb.triggers.with_timeout(self.phy.tx.recv(), timeout_us, "us")


def cycle_pause():
    return itertools.cycle([1, 1, 1, 0])


def check_delta(tb, before: dict, **expected):
    after = tb.stats()
    delta = {k: (after[k] - before[k]) & 0xFFFFFFFF for k in after}
    want = {k: expected.get(k, 0) for k in delta}
    assert delta == want, f"counter deltas {delta} != expected {want}"


# ---------------------------------------------------------------------------
# RX


async def run_test_rx(dut, sizes=None, idle_inserter=None, backpressure_inserter=None):
    """Good frames of the given sizes (with FCS) arrive intact and in order."""
    tb = TB(dut)
    await tb.reset()
    tb.set_backpressure_generator(backpressure_inserter)
    rng = seeds.rng(1)
    before = tb.stats()
    payloads = [make_payload(size - 4, rng) for size in sizes]
    for payload in payloads:
        await tb.phy.rx.send(GmiiFrame.from_payload(payload))
    for payload in payloads:
        frame = await tb.recv_rx()
        assert frame.tdata == payload, f"{len(frame.tdata)}-byte frame != {len(payload)}"
        assert not frame.tuser, "tuser set on a good frame"
    await tb.rx_quiet()
    assert tb.rx_sink.empty()
    check_delta(tb, before, rx_frames=len(payloads))


@cocotb.test()
async def test_rx_sizes(dut):
    sizes = [64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 127, 128, 129, 255, 256, 257]
    sizes += [511, 512, 1023, 1024, 1500, 1514, 1517, MAX_FRAME]
    await run_test_rx(dut, sizes)


@cocotb.test()
async def test_rx_backpressure(dut):
    """rx_axis stalled 3 cycles in 4: the store-and-forward buffer absorbs it."""
    await run_test_rx(dut, [64, 200, 64, 333, 1518, 77, 64], backpressure_inserter=cycle_pause)


@cocotb.test()
async def test_rx_back_to_back(dut):
    """Minimum-size and mixed frames at the 12-byte minimum IFG: no loss."""
    tb = TB(dut)
    await tb.reset()
    assert tb.phy.rx.ifg == 12
    rng = seeds.rng(2)
    sizes = [64] * 40 + [rng.randrange(64, 400) for _ in range(20)]
    payloads = [make_payload(s - 4, rng) for s in sizes]
    before = tb.stats()
    sent = []
    for p in payloads:
        tb.phy.rx.send_nowait(GmiiFrame.from_payload(p, tx_complete=sent.append))
    for p in payloads:
        frame = await tb.recv_rx()
        assert frame.tdata == p
    await tb.rx_quiet()
    check_delta(tb, before, rx_frames=len(payloads))
    # The source really sent them back to back: its timestamps are the last
    # byte of one frame and the first preamble byte of the next.
    period_ps = tb.eth_period * 1000
    assert len(sent) == len(payloads)
    for a, b in pairwise(sent):
        idle = (b.sim_time_start - a.sim_time_end) / period_ps - 1
        assert idle == 12, f"source gap {idle} byte times"


@cocotb.test()
async def test_rx_bad_frames(dut):
    """Bad FCS, runts (down to 1 byte), oversize and RX_ER: dropped, counted by
    reason, good frames between them untouched; then the same with rx_pass_bad."""
    tb = TB(dut)
    await tb.reset()
    rng = seeds.rng(3)
    stimulus = []  # (GmiiFrame, payload or None if dropped, reason)

    def good(size):
        p = make_payload(size - 4, rng)
        stimulus.append((GmiiFrame.from_payload(p), p, None))

    def bad_fcs(size):
        p = make_payload(size - 4, rng)
        wrong = bytearray(fcs(p))
        wrong[rng.randrange(4)] ^= 1 << rng.randrange(8)
        stimulus.append((raw_frame(p, fcs_bytes=bytes(wrong)), p, "rx_bad_fcs"))

    def corrupt(size):  # a data bit flipped, FCS of the original
        p = make_payload(size - 4, rng)
        q = bytearray(p)
        q[rng.randrange(len(q))] ^= 0x10
        stimulus.append((raw_frame(bytes(q), fcs_bytes=fcs(p)), bytes(q), "rx_bad_fcs"))

    def runt(size):  # size with FCS, FCS correct
        p = make_payload(size - 4, rng) if size >= 4 else b""
        f = raw_frame(p) if size >= 4 else GmiiFrame(PREAMBLE + rng.randbytes(size))
        stimulus.append((f, p if size > 4 else None, "rx_runt"))

    def oversize(size):
        p = make_payload(size - 4, rng)
        stimulus.append((GmiiFrame.from_payload(p), p, "rx_oversize"))

    def rx_error(size):
        p = make_payload(size - 4, rng)
        f = GmiiFrame.from_payload(p)
        f.error = [0] * len(f.data)
        f.error[8 + rng.randrange(size)] = 1
        stimulus.append((f, p, "rx_error"))

    good(64)
    bad_fcs(64)
    good(100)
    corrupt(300)
    good(64)
    for size in (63, 60, 33, 9, 6, 5, 4, 3, 1):
        runt(size)
        good(64)
    oversize(MAX_FRAME + 1)
    good(MAX_FRAME)
    oversize(MAX_FRAME + 37)
    rx_error(80)
    good(65)
    bad_fcs(1518)
    good(64)

    for pass_bad in (0, 1):
        dut.rx_pass_bad.value = pass_bad
        before = tb.stats()
        for frame, _, _ in stimulus:
            await tb.phy.rx.send(GmiiFrame(frame))
        expected = {}
        for _frame, payload, reason in stimulus:
            if reason:
                expected[reason] = expected.get(reason, 0) + 1
            if reason is None:
                got = await tb.recv_rx()
                assert got.tdata == payload and not got.tuser, (pass_bad, len(got.tdata))
            elif pass_bad and payload:
                got = await tb.recv_rx()
                assert got.tdata == payload, (reason, len(payload), len(got.tdata))
                tuser = got.tuser if isinstance(got.tuser, list) else [got.tuser]
                assert tuser[-1] == 1, f"{reason} frame delivered without tuser"
        await tb.rx_quiet()
        assert tb.rx_sink.empty(), "a bad frame was delivered"
        goods = sum(1 for _, _, r in stimulus if r is None)
        check_delta(tb, before, rx_frames=goods, **expected)


@cocotb.test()
async def test_rx_overflow(dut):
    """rx_axis stopped: frames beyond the buffer are dropped whole and
    counted; every frame delivered afterwards is intact. A bad frame that
    meets the full buffer counts as bad, not also as an overflow."""
    tb = TB(dut)
    await tb.reset()
    rng = seeds.rng(4)
    tb.rx_sink.pause = True
    payloads = [make_payload(1514, rng) for _ in range(4)]
    before = tb.stats()
    for p in payloads:
        await tb.phy.rx.send(GmiiFrame.from_payload(p))
    bad = make_payload(1514, rng)
    await tb.phy.rx.send(raw_frame(bad, fcs_bytes=b"\0\0\0\0"))
    await tb.rx_quiet()
    tb.rx_sink.pause = False
    await ClockCycles(dut.clk, 2000)
    got = []
    while not tb.rx_sink.empty():
        got.append(tb.rx_sink.recv_nowait().tdata)
    stored = len(got)
    # Whole frames that fit in the buffer (512 beats by default), the rest dropped.
    depth = RGMIIMAC(tb.lanes * 8, max_frame=MAX_FRAME).rx_depth
    assert stored == min(len(payloads), depth // -(-1514 // tb.lanes)), stored
    assert got == payloads[:stored]
    check_delta(tb, before, rx_frames=stored, rx_overflow=len(payloads) - stored, rx_bad_fcs=1)


@cocotb.test()
async def test_rx_slow_core_clock(dut):
    """A core clock below the line rate in beats (10 MHz < 15.6 M beats/s):
    beats are lost crossing to the core clock. The frames that lost one are
    dropped and counted as rx_overflow; every frame delivered is intact and
    in order; nothing is counted twice."""
    tb = TB(dut, core_period_ns=100)
    await tb.reset()
    rng = seeds.rng(10)
    payloads = [make_payload(rng.choice([60, 200, 700, 1514]), rng) for _ in range(16)]
    before = tb.stats()
    for p in payloads:
        tb.phy.rx.send_nowait(GmiiFrame.from_payload(p))
    await tb.rx_quiet(cycles=2000)
    got = []
    while not tb.rx_sink.empty():
        got.append(bytes(tb.rx_sink.recv_nowait().tdata))
    it = iter(payloads)
    assert all(any(g == p for p in it) for g in got), "a delivered frame is not a sent one"
    after = tb.stats()
    delta = {k: (after[k] - before[k]) & 0xFFFFFFFF for k in after}
    assert delta["rx_frames"] == len(got)
    assert delta["rx_overflow"] >= 1, "no loss at a core clock below line rate?"
    # Frames merged by a lost last beat are dropped and counted once.
    assert delta["rx_frames"] + delta["rx_overflow"] <= len(payloads)
    others = {k: v for k, v in delta.items() if k not in ("rx_frames", "rx_overflow")}
    assert not any(others.values()), others
    tb.log.info(
        "slow core clock: %d of %d frames delivered, %d overflows",
        len(got),
        len(payloads),
        delta["rx_overflow"],
    )


# ---------------------------------------------------------------------------
# TX


def check_tx_frame(frame: GmiiFrame, payload: bytes):
    assert frame.get_preamble() == PREAMBLE, f"preamble {frame.get_preamble().hex()}"
    padded = payload + bytes(max(0, 60 - len(payload)))
    assert frame.get_payload() == padded, f"{len(frame.get_payload())} bytes != {len(padded)}"
    assert frame.check_fcs(), "bad FCS"
    assert not frame.error, "TX_ER asserted"


async def run_test_tx(dut, sizes, idle_inserter=None, speed=1000e6, back_to_back=False):
    tb = TB(dut, speed)
    await tb.reset()
    tb.set_idle_generator(idle_inserter)
    rng = seeds.rng(5)
    payloads = [make_payload(s, rng) for s in sizes]
    before = tb.stats()
    handed = []
    for p in payloads:
        await tb.tx_source.send(AxiStreamFrame(p, tx_complete=handed.append))
    frames = []
    for p in payloads:
        frame = await tb.recv_tx()
        check_tx_frame(frame, p)
        frames.append(frame)
    await ClockCycles(dut.clk, 50)
    check_delta(tb, before, tx_frames=len(payloads))
    assert tb.phy.tx.empty()
    byte_ps = int(8e12 / speed)
    for f, p in zip(frames, payloads, strict=True):
        length = (f.sim_time_end - f.sim_time_start) / byte_ps
        assert length == 8 + max(60, len(p)) + 4, f"frame on the wire for {length} byte times"
    gaps = check_tx_timing(tb, frames, handed, byte_ps)
    if back_to_back:
        # Every frame but a jumbo one is whole in the MAC before the one
        # ahead of it ends on the wire.
        late = sum(1 for s in sizes[1:] if s > 4000)
        assert gaps.count(12) == len(gaps) - late, f"inter-frame gaps {gaps} byte times"
    return tb


def check_tx_timing(tb, frames, handed, byte_ps):
    """Each frame starts 12 byte times after the previous one ends, or, if it
    was not yet whole in the MAC by then (store and forward), within the TX
    latency of its last beat. Returns the gaps in byte times."""
    gaps = []
    assert len(handed) == len(frames)
    for i, f in enumerate(frames):
        latency = f.sim_time_start - handed[i].sim_time_end
        if i == 0:
            tb.log.info("TX latency %d ps", latency)
            continue
        gap = (f.sim_time_start - frames[i - 1].sim_time_end) / byte_ps
        gaps.append(gap)
        assert gap >= 12, f"frame {i}: inter-frame gap {gap} < 12 byte times"
        if gap > 12:
            # Late only because the frame was not whole yet: it left as soon
            # as the MAC had it.
            tb.log.info("TX frame %d: gap %s, latency %d ps", i, gap, latency)
            assert tb.tx_latency_min_ps <= latency <= tb.tx_latency_ps, (
                f"frame {i}: gap {gap} byte times, {latency} ps after its last beat"
            )
    return gaps


@cocotb.test()
async def test_tx_sizes_back_to_back(dut):
    """All frames queued at once: line rate, gaps of exactly 12 byte times."""
    sizes = [60, 61, 62, 63, 64, 65, 66, 67, 68, 71, 72, 127, 128, 255, 256, 511, 1000, 1514]
    sizes.append(MAX_FRAME - 4)
    await run_test_tx(dut, sizes, back_to_back=True)


@cocotb.test()
async def test_tx_short_and_idle(dut):
    """Frames shorter than 60 bytes are padded; the source idles 3 cycles in 4."""
    await run_test_tx(dut, [1, 2, 7, 8, 9, 14, 15, 16, 17, 42, 59, 60, 61], cycle_pause)


@cocotb.test()
async def test_tx_tuser_drops(dut):
    """A frame with tuser on any beat is not sent; its neighbours are."""
    tb = TB(dut)
    await tb.reset()
    rng = seeds.rng(6)
    before = tb.stats()
    keep = []
    for i, size in enumerate([100, 64, 300, 64, 80]):
        p = make_payload(size, rng)
        if i % 2:
            user = [0] * size
            beat = rng.randrange(-(-size // tb.lanes))
            user[beat * tb.lanes : (beat + 1) * tb.lanes] = [1] * tb.lanes
            await tb.tx_source.send(AxiStreamFrame(p, tuser=user))
        else:
            keep.append(p)
            await tb.tx_source.send(AxiStreamFrame(p))
    for p in keep:
        check_tx_frame(await tb.recv_tx(), p)
    await ClockCycles(dut.clk, 400)
    assert tb.phy.tx.empty()
    check_delta(tb, before, tx_frames=len(keep), tx_dropped=2)


async def run_full_duplex(dut, core_period_ns=CORE_PERIOD_NS, backpressure_inserter=None):
    """Both directions at once, back to back, 64- and 1518-byte frames."""
    tb = TB(dut, core_period_ns=core_period_ns)
    tb.set_backpressure_generator(backpressure_inserter)
    await tb.reset()
    rng = seeds.rng(7)
    sizes = [64, 1518, 64, 64, 1518, 64, 300, 64]
    rx_payloads = [make_payload(s - 4, rng) for s in sizes]
    tx_payloads = [make_payload(s - 4, rng) for s in sizes]
    before = tb.stats()
    for p in rx_payloads:
        tb.phy.rx.send_nowait(GmiiFrame.from_payload(p))
    handed = []
    for p in tx_payloads:
        await tb.tx_source.send(AxiStreamFrame(p, tx_complete=handed.append))
    tx_frames = []
    for p in tx_payloads:
        f = await tb.recv_tx()
        check_tx_frame(f, p)
        tx_frames.append(f)
    for p in rx_payloads:
        assert (await tb.recv_rx()).tdata == p
    await tb.rx_quiet()
    gaps = check_tx_timing(tb, tx_frames, handed, 8000)
    # A 1518-byte frame behind a 64-byte one is not whole in the MAC when the
    # short frame ends (store and forward); every other gap is the minimum.
    assert gaps.count(12) >= len(gaps) - sizes.count(1518), gaps
    check_delta(tb, before, rx_frames=len(sizes), tx_frames=len(sizes))


@cocotb.test()
async def test_full_duplex_line_rate(dut):
    """Core clock 62.5 MHz."""
    await run_full_duplex(dut)


@cocotb.test()
async def test_full_duplex_fast_core(dut):
    """Core clock 156.25 MHz (not a multiple of 125 MHz), rx_axis stalled 3
    cycles in 4 (still 2.5 Gb/s of drain)."""
    await run_full_duplex(dut, core_period_ns=6.4, backpressure_inserter=cycle_pause)


# ---------------------------------------------------------------------------
# 100 Mb/s


def mii_nibbles(data: bytes, extra_nibble: int | None = None) -> GmiiFrame:
    """What an RGMII PHY sends at 100 Mb/s: one nibble per 25 MHz cycle, the
    same nibble at both edges, low nibble first. ``extra_nibble`` appends
    half a byte (a dribble nibble)."""
    nibbles = []
    for b in data:
        nibbles += [b & 0xF, b >> 4]
    if extra_nibble is not None:
        nibbles.append(extra_nibble & 0xF)
    return GmiiFrame(bytes(n * 0x11 for n in nibbles))


@cocotb.test()
async def test_100m(dut):
    """MII nibbles both ways, then odd-nibble frames dropped and counted."""
    tb = TB(dut, speed=100e6)
    await tb.reset()
    rng = seeds.rng(8)
    payloads = [make_payload(s - 4, rng) for s in (64, 65, 127, 300)]
    before = tb.stats()
    for p in payloads:
        await tb.phy.rx.send(GmiiFrame.from_payload(p))
    for p in payloads:
        assert (await tb.recv_rx(timeout_us=200)).tdata == p
    await tb.rx_quiet()
    check_delta(tb, before, rx_frames=len(payloads))

    # Odd nibble count: bypass the model's byte-to-nibble step and send nibbles.
    tb.phy.rx.mii_mode = False
    before = tb.stats()
    good = make_payload(70, rng)
    stim = [
        (mii_nibbles(PREAMBLE + good + fcs(good)), good),
        (mii_nibbles(PREAMBLE + good + fcs(good), extra_nibble=0xA), None),
        (mii_nibbles(PREAMBLE + good + fcs(good)[:3], extra_nibble=0x3), None),
        (mii_nibbles(PREAMBLE + good + fcs(good)), good),
    ]
    for f, _ in stim:
        await tb.phy.rx.send(f)
    for _, p in stim:
        if p is not None:
            assert (await tb.recv_rx(timeout_us=200)).tdata == p
    await tb.rx_quiet()
    assert tb.rx_sink.empty()
    check_delta(tb, before, rx_frames=2, rx_odd_nibble=2)
    tb.phy.rx.mii_mode = True

    tx = [make_payload(s, rng) for s in (60, 1, 200)]
    before = tb.stats()
    for p in tx:
        await tb.tx_source.send(AxiStreamFrame(p))
    frames = [await tb.recv_tx(timeout_us=400) for _ in tx]
    for f, p in zip(frames, tx, strict=True):
        check_tx_frame(f, p)
    gaps = [(b.sim_time_start - a.sim_time_end) / 80000 for a, b in pairwise(frames)]
    assert gaps == [12] * len(gaps), gaps
    check_delta(tb, before, tx_frames=len(tx))


@cocotb.test()
async def test_10m(dut):
    """10 Mb/s: the 100 Mb/s path with a 2.5 MHz clock, both directions."""
    tb = TB(dut, speed=10e6)
    await tb.reset()
    rng = seeds.rng(11)
    payloads = [make_payload(s - 4, rng) for s in (64, 65)]
    before = tb.stats()
    for p in payloads:
        await tb.phy.rx.send(GmiiFrame.from_payload(p))
        await tb.tx_source.send(AxiStreamFrame(p))
    for p in payloads:
        assert (await tb.recv_rx(timeout_us=2000)).tdata == p
    frames = [await tb.recv_tx(timeout_us=2000) for _ in payloads]
    for f, p in zip(frames, payloads, strict=True):
        check_tx_frame(f, p)
    gaps = [(b.sim_time_start - a.sim_time_end) / 800000 for a, b in pairwise(frames)]
    assert gaps == [12], gaps
    await tb.rx_quiet()
    check_delta(tb, before, rx_frames=len(payloads), tx_frames=len(payloads))


@cocotb.test(skip=not LONG)
async def test_sweep_long(dut):
    """Every size 64..max_frame through RX and TX (slow; make test-long)."""
    sizes = list(range(64, MAX_FRAME + 1))
    seeds.rng(9).shuffle(sizes)
    await run_test_rx(dut, sizes)
    await run_test_tx(dut, [s - 4 for s in sizes])


# ---------------------------------------------------------------------------
# pytest


def run(max_frame: int = 1518, **kwargs):
    from sim.cocotb_runner import run_cocotb

    env = {"BOARD_MAC_MAX_FRAME": str(max_frame)}
    env.update(kwargs.pop("extra_env", {}))
    return run_cocotb(
        name=f"board_mac_w64_f{max_frame}",
        elaborate=lambda: RGMIIMAC(64, max_frame=max_frame),
        toplevel="rgmii_mac",
        test_module="tests.hw.test_board_mac",
        extra_env=env,
        **kwargs,
    )


def test_board_mac():
    run()


@pytest.mark.long
def test_board_mac_long():
    run(extra_env={"BOARD_MAC_LONG": "1"}, testcase="test_sweep_long")


@pytest.mark.long
def test_board_mac_jumbo():
    run(max_frame=9018, extra_env={"BOARD_MAC_CORE_PERIOD_NS": "40"})

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

import dataclasses
import ipaddress
import itertools
import logging
import os
import random
from collections import deque

import cocotb
import pytest
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSource
from scapy.layers.l2 import Ether

from host_driver import layers as L
from hw.rx.parser import COUNTER_NAMES, ParsedHeader, ParserCounters, RxParser
from hw.stream import Beat

SACK_BITS = int(os.environ.get("RX_PARSER_SACK_BITS", "64"))
MAX_PAYLOAD = int(os.environ.get("RX_PARSER_MAX_PAYLOAD", "4096"))
TRIM_DSCP = L.TRIM_DSCP_DEFAULT
ALL_OPCODES = L.WRITE_OPCODES + (L.OP_ACKNOWLEDGE,) + L.PROBE_OPCODES


# ---------------------------------------------------------------------------
# Reference model: what the parser must do with one frame (docs/protocol.md).


@dataclasses.dataclass
class Expected:
    verdict: str
    fields: dict | None = None  # the ParsedHeader record, nested like the layout
    payload: bytes = b""


def _ones_complement_ok(header: bytes) -> bool:
    total = sum((header[i] << 8) | header[i + 1] for i in range(0, len(header), 2))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total == 0xFFFF


def _zero(layout) -> dict:
    return {name: (_zero(f.shape) if hasattr(f.shape, "members") else 0) for name, f in layout}


def expect_frame(
    frame: bytes,
    tuser: bool = False,
    trim_dscp: int = TRIM_DSCP,
    sack_bits: int = SACK_BITS,
    max_payload: int = MAX_PAYLOAD,
) -> Expected:
    """The verdict, record and payload for a frame, first failing check wins."""
    n = len(frame)
    if tuser:
        return Expected("bad_frame")
    if n < 54:
        return Expected("truncated")
    opcode = frame[42]
    trimmed = frame[15] >> 2 == trim_dscp
    known = opcode in ALL_OPCODES
    if known:
        hlen = L.header_len(opcode, sack_bits)
        if n < hlen + (0 if trimmed else 4):
            return Expected("truncated")
    ethertype = int.from_bytes(frame[12:14], "big")
    flags_frag = int.from_bytes(frame[20:22], "big")
    if ethertype != 0x0800 or frame[14] >> 4 != 4 or flags_frag & 0x3FFF:
        return Expected("not_ipv4")
    if frame[14] & 0xF != 5:
        return Expected("ipv4_options")
    if not _ones_complement_ok(frame[14:34]):
        return Expected("ipv4_checksum")
    if frame[23] != 17 or int.from_bytes(frame[36:38], "big") != L.ROCE_UDP_PORT:
        return Expected("not_roce")
    if not known or frame[43] & 0xF:
        return Expected("unknown_opcode")
    total_len = int.from_bytes(frame[16:18], "big")
    udp_len = int.from_bytes(frame[38:40], "big")
    pad = (frame[43] >> 4) & 3
    if trimmed:
        payload_len = 0
        length_ok = udp_len == hlen - 34
    else:
        payload_len = udp_len - (hlen - 34) - pad - 4
        length_ok = 0 <= payload_len <= max_payload
    if opcode == L.OP_ACKNOWLEDGE and frame[67] * 32 != sack_bits:
        length_ok = False
    if n != 14 + total_len or udp_len != total_len - 20 or not length_ok:
        return Expected("length_mismatch")
    if not trimmed and L.icrc(frame) != L.frame_icrc_field(frame):
        return Expected("bad_icrc")

    # Accepted: the record from scapy's dissection, not from the offsets above.
    eth = Ether(frame[:42])
    ip, udp = eth[L.IP], eth[L.UDP]
    bth = L.BTH(frame[42:] + (b"\0" * 4 if trimmed else b""))
    fields = _zero(ParsedHeader(sack_bits))
    fields.update(
        eth_src=int(eth.src.replace(":", ""), 16),
        eth_dst=int(eth.dst.replace(":", ""), 16),
        ip_src=int(ipaddress.IPv4Address(ip.src)),
        ip_dst=int(ipaddress.IPv4Address(ip.dst)),
        dscp=ip.tos >> 2,
        ecn=ip.tos & 3,
        ev=udp.sport,
        payload_len=payload_len,
        trimmed=int(trimmed),
    )
    fields["bth"] = {name: bth.getfieldval(name) for name in fields["bth"]}
    for layer, key in ((L.RETH, "reth"), (L.AETH, "aeth"), (L.MRCProbe, "probe")):
        if layer in bth:
            fields[key] = {name: bth[layer].getfieldval(name) for name in fields[key]}
    if L.ImmDt in bth:
        fields["imm"] = bth[L.ImmDt].imm
    if L.MRCSack in bth:
        sack = bth[L.MRCSack]
        fields["sack"] = {name: sack.getfieldval(name) for name in fields["sack"]}
        fields["sack_bitmap"] = sack.bitmap
    payload = frame[hlen : hlen + payload_len]
    if opcode in L.WRITE_OPCODES and not trimmed:
        assert L.write_payload(bth) == payload, "model and scapy disagree on the payload"
    return Expected("accepted", fields, payload)


def decode(layout, value: int) -> dict:
    """A packed Amaranth StructLayout value as a nested dict."""
    out = {}
    for name, field in layout:
        raw = (value >> field.offset) & ((1 << field.width) - 1)
        out[name] = decode(field.shape, raw) if hasattr(field.shape, "members") else raw
    return out


# ---------------------------------------------------------------------------
# Stimulus: valid frames of every kind, and byte edits that break one check.


def fix_ipv4_checksum(frame: bytearray) -> bytearray:
    frame[24:26] = b"\0\0"
    frame[24:26] = L.ipv4_checksum(bytes(frame[14:34])).to_bytes(2, "big")
    return frame


def fix_icrc(frame: bytearray) -> bytearray:
    frame[-4:] = L.icrc(bytes(frame)).to_bytes(4, "little")
    return frame


def valid_frame(rng: random.Random, kind: int | str, payload_len: int = 0) -> bytes:
    """A well-formed frame: an opcode, or "trimmed"."""
    addr = dict(
        src_mac=":".join(f"{rng.randrange(256):02x}" for _ in range(6)),
        dst_mac=":".join(f"{rng.randrange(256):02x}" for _ in range(6)),
        src_ip=str(ipaddress.IPv4Address(rng.getrandbits(32))),
        dst_ip=str(ipaddress.IPv4Address(rng.getrandbits(32))),
    )
    ev = rng.getrandbits(16)
    if kind == "trimmed":
        op = rng.choice(L.WRITE_OPCODES)
        return L.trim(valid_frame(rng, op, rng.randrange(1, 64)), TRIM_DSCP)
    if kind in L.WRITE_OPCODES:
        return bytes(
            L.write_packet(
                opcode=kind,
                dqpn=rng.getrandbits(24),
                psn=rng.getrandbits(24),
                va=rng.getrandbits(64),
                rkey=rng.getrandbits(32),
                dma_len=rng.getrandbits(31),
                imm=rng.getrandbits(32) if kind in L.IMM_OPCODES else None,
                payload=rng.randbytes(payload_len),
                ackreq=rng.getrandbits(1),
                ev=ev,
                dscp=rng.choice([0, 0, 26, 46]),
                ecn=rng.randrange(4),
                **addr,
            )
        )
    if kind == L.OP_ACKNOWLEDGE:
        return bytes(
            L.ack_packet(
                dqpn=rng.getrandbits(24),
                cum_psn=rng.getrandbits(24),
                bitmap=rng.getrandbits(SACK_BITS),
                sack_bits=SACK_BITS,
                syndrome=rng.choice(list(L.SYNDROMES)),
                msn=rng.getrandbits(24),
                ece=rng.getrandbits(1),
                ce_count=rng.getrandbits(16),
                ev=ev,
                **addr,
            )
        )
    if kind in L.PROBE_OPCODES:
        return bytes(
            L.probe_packet(
                response=kind == L.OP_PROBE_RESP,
                dqpn=rng.getrandbits(24),
                probe_id=rng.getrandbits(32),
                ev=ev,
                timestamp=rng.getrandbits(64),
                **addr,
            )
        )
    raise ValueError(kind)


def _set(frame, offset, value: bytes, ip_fix=False, icrc_fix=False):
    f = bytearray(frame)
    f[offset : offset + len(value)] = value
    if ip_fix:
        fix_ipv4_checksum(f)
    if icrc_fix:
        fix_icrc(f)
    return bytes(f)


def _lengths(frame, total_delta=0, udp_delta=0, icrc_fix=True):
    f = bytearray(frame)
    total = int.from_bytes(f[16:18], "big") + total_delta
    udp = int.from_bytes(f[38:40], "big") + udp_delta
    f[16:18] = total.to_bytes(2, "big")
    f[38:40] = udp.to_bytes(2, "big")
    fix_ipv4_checksum(f)
    if icrc_fix:
        fix_icrc(f)
    return bytes(f)


def _flip(frame, offset):
    f = bytearray(frame)
    f[offset] ^= 0x01
    return bytes(f)


def malformed_cases(rng: random.Random) -> list[tuple[str, bytes, bool, str]]:
    """(name, frame, tuser, the counter it must land in): one check broken each."""
    w = valid_frame(rng, L.OP_WRITE_ONLY, 40)
    w0 = valid_frame(rng, L.OP_WRITE_ONLY, 0)
    imm = valid_frame(rng, L.OP_WRITE_LAST_IMM, 13)
    ack = valid_frame(rng, L.OP_ACKNOWLEDGE)
    cases = [
        ("tuser", w, True, "bad_frame"),
        ("tuser on a garbage frame", rng.randbytes(7), True, "bad_frame"),
        ("ethertype IPv6", _set(w, 12, b"\x86\xdd"), False, "not_ipv4"),
        ("ethertype ARP", _set(w, 12, b"\x08\x06"), False, "not_ipv4"),
        ("IP version 6", _set(w, 14, b"\x65", ip_fix=True), False, "not_ipv4"),
        ("more fragments", _set(w, 20, b"\x20\x00", ip_fix=True), False, "not_ipv4"),
        ("fragment offset", _set(w, 20, b"\x40\x08", ip_fix=True), False, "not_ipv4"),
        ("IHL 6", _set(w, 14, b"\x46", ip_fix=True), False, "ipv4_options"),
        ("IHL 4", _set(w, 14, b"\x44"), False, "ipv4_options"),
        ("bad IP checksum", _flip(w, 25), False, "ipv4_checksum"),
        ("TTL changed, checksum not", _set(w, 22, b"\x3f"), False, "ipv4_checksum"),
        ("UDP dport 4790", _set(w, 36, b"\x12\xb6"), False, "not_roce"),
        ("protocol TCP", _set(w, 23, b"\x06", ip_fix=True), False, "not_roce"),
        ("opcode 0x04 (SEND_ONLY)", _set(w, 42, b"\x04", icrc_fix=True), False, "unknown_opcode"),
        ("opcode 0xFF", _set(w, 42, b"\xff", icrc_fix=True), False, "unknown_opcode"),
        ("TVer 1", _set(w, 43, bytes([w[43] | 1]), icrc_fix=True), False, "unknown_opcode"),
        ("total length +4", _lengths(w, total_delta=4), False, "length_mismatch"),
        ("total length -4", _lengths(w, total_delta=-4), False, "length_mismatch"),
        ("UDP length -4", _lengths(w, udp_delta=-4), False, "length_mismatch"),
        ("both lengths +4", _lengths(w, 4, 4), False, "length_mismatch"),
        ("frame shorter than total length", w[:-8], False, "length_mismatch"),
        ("frame longer than total length", w + b"\0" * 4, False, "length_mismatch"),
        (
            "UDP length short of the pad",
            _set(w0, 43, bytes([w0[43] | 0x30]), icrc_fix=True),
            False,
            "length_mismatch",
        ),
        ("ACK sack_words 3", _set(ack, 67, b"\x03", icrc_fix=True), False, "length_mismatch"),
        ("ACK sack_words 1", _set(ack, 67, b"\x01", icrc_fix=True), False, "length_mismatch"),
        (
            "payload over max_payload",
            valid_frame(rng, L.OP_WRITE_ONLY, MAX_PAYLOAD + 4),
            False,
            "length_mismatch",
        ),
        (
            "trimmed with payload",
            _set(w, 15, bytes([TRIM_DSCP << 2 | 2]), ip_fix=True),
            False,
            "length_mismatch",
        ),
        (
            "trimmed with ICRC",
            _set(w0, 15, bytes([TRIM_DSCP << 2 | 2]), ip_fix=True),
            False,
            "length_mismatch",
        ),
        ("bad ICRC, payload bit", _flip(w, 80), False, "bad_icrc"),
        ("bad ICRC, ICRC bit", _flip(w, len(w) - 1), False, "bad_icrc"),
        ("bad ICRC, DQPN bit", _flip(imm, 49), False, "bad_icrc"),
        ("bad ICRC, pad byte", _flip(imm, len(imm) - 5), False, "bad_icrc"),
        ("bad ICRC, ACK bitmap", _flip(ack, 75), False, "bad_icrc"),
    ]
    # Masked bytes do not count: a change there keeps the ICRC good.
    cases.append(
        ("ECN bits changed (masked)", _set(w, 15, b"\x03", ip_fix=True), False, "accepted")
    )
    cases.append(("FECN set (masked)", _set(w, 46, b"\x80"), False, "accepted"))
    for cut in (1, 13, 14, 20, 33, 41, 53):
        cases.append((f"cut at {cut}", w[:cut], False, "truncated"))
    for cut in (54, 60, 69, 73):
        cases.append((f"write cut at {cut}", w0[:cut], False, "truncated"))
    cases.append(("imm cut at 77", imm[:77], False, "truncated"))
    cases.append(("ACK cut inside the bitmap", ack[:75], False, "truncated"))
    cases.append(("trimmed cut inside the RETH", L.trim(w)[:66], False, "truncated"))
    return cases


def payload_lengths(lanes: int) -> list[int]:
    """0..2 beats and a bit (every lane offset of the payload end), around a few
    beat multiples, and the MTU."""
    near = {k * lanes + d for k in (4, 16, 64) for d in (-1, 0, 1)}
    return sorted(set(range(0, 2 * lanes + 5)) | near | {MAX_PAYLOAD - 1, MAX_PAYLOAD})


def random_frame(rng: random.Random) -> tuple[bytes, bool]:
    """A frame for the random mix: mostly valid, or broken in a random way."""
    kind = rng.choice(list(ALL_OPCODES) + ["trimmed"] * 2 + list(L.WRITE_OPCODES))
    pl = rng.randrange(0, 300) if rng.random() < 0.8 else rng.randrange(0, MAX_PAYLOAD + 1)
    frame = valid_frame(rng, kind, pl)
    tuser = False
    r = rng.random()
    if r < 0.55:
        pass
    elif r < 0.65:
        frame = frame[: rng.randrange(1, len(frame))]
    elif r < 0.75:
        f = bytearray(frame)
        for _ in range(rng.randrange(1, 4)):
            f[rng.randrange(min(len(f), 90))] = rng.randrange(256)
        frame = bytes(f)
    elif r < 0.80:
        f = bytearray(frame)
        f[rng.randrange(len(f))] ^= 1 << rng.randrange(8)
        frame = bytes(f)
    elif r < 0.85:
        frame = _lengths(frame, rng.choice([-8, -4, 4, 8]), rng.choice([0, 0, -4, 4]))
    elif r < 0.88:
        tuser = True
    elif r < 0.93:
        frame = rng.randbytes(rng.randrange(1, 200))
    else:
        f = bytearray(frame)
        f[rng.choice([12, 14, 23, 36, 42, 43, 67])] = rng.randrange(256)
        fix_ipv4_checksum(f)
        if f[14] & 0xF == 5:  # the ICRC's IPv4 header is IHL words long
            fix_icrc(f)
        frame = bytes(f)
    return frame, tuser


# ---------------------------------------------------------------------------
# Testbench.


def cycle_pause():
    return itertools.cycle([1, 1, 1, 0])


def random_pause(rng: random.Random, p=0.3):
    while True:
        yield rng.random() < p


class StreamSink:
    """Sink for an ``amaranth.lib.stream`` port (``<name>__payload/valid/ready``)."""

    def __init__(self, dut, name, clock):
        self.valid = getattr(dut, f"{name}__valid")
        self.ready = getattr(dut, f"{name}__ready")
        self.payload = getattr(dut, f"{name}__payload")
        self.clock = clock
        self.queue = deque()
        self.pause = None
        self.ready.value = 0
        cocotb.start_soon(self._run())

    def set_pause_generator(self, generator=None):
        self.pause = generator

    async def _run(self):
        while True:
            await RisingEdge(self.clock)
            if self.ready.value and self.valid.value:
                self.queue.append(self.payload.value.to_unsigned())
            self.ready.value = 0 if (self.pause is not None and next(self.pause)) else 1


class TB:
    def __init__(self, dut):
        self.dut = dut
        self.log = dut._log
        self.data_width = len(dut.s_axis__tdata)
        self.lanes = self.data_width // 8
        self.record = ParsedHeader(SACK_BITS)
        self.beat = Beat(self.data_width)
        cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
        self.source = AxiStreamSource(
            AxiStreamBus.from_prefix(dut, "s_axis", bus_separator="__"), dut.clk, dut.rst
        )
        self.source.log.setLevel(logging.WARNING)  # it logs every frame in full at INFO
        self.hdr_sink = StreamSink(dut, "hdr", dut.clk)
        self.payload_sink = StreamSink(dut, "payload", dut.clk)
        self.verdicts: list[str] = []
        self.in_beats = 0
        self.in_first = self.in_last = None
        self.tready_low = 0
        self.cycle = 0
        self.payload_frames: list[bytes] = []
        self._payload_buf = bytearray()
        cocotb.start_soon(self._monitor())

    async def _monitor(self):
        """Per cycle: the verdict (the one counter that moved), input beats, payload beats."""
        prev = None
        while True:
            await RisingEdge(self.dut.clk)
            self.cycle += 1
            if self.dut.rst.value:
                prev = None
                continue
            counters = decode(ParserCounters, self.dut.counters.value.to_unsigned())
            if prev is not None:
                moved = [n for n in COUNTER_NAMES if counters[n] != prev[n]]
                assert len(moved) <= 1, f"several counters moved in one cycle: {moved}"
                for n in moved:
                    assert counters[n] == prev[n] + 1, f"counter {n} jumped"
                    self.verdicts.append(n)
            prev = counters
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
        return decode(ParserCounters, self.dut.counters.value.to_unsigned())

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


IDLE = [None, cycle_pause]
BACKPRESSURE = [None, cycle_pause]


@cocotb.test()
@cocotb.parametrize(idle_inserter=IDLE, backpressure_inserter=BACKPRESSURE)
async def test_every_opcode_and_length(dut, idle_inserter, backpressure_inserter):
    """Every opcode and trimmed frames; payload lengths around every beat boundary."""
    rng = random.Random(1)
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
    rng = random.Random(2)
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
    rng = random.Random(3)
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
    rng = random.Random(14)
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
    rng = random.Random(13)
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
    rng = random.Random(int(os.environ.get("RX_PARSER_SEED", "4")))
    frames = [random_frame(rng) for _ in range(1000)]
    idle_rng, bp_rng = random.Random(5), random.Random(6)
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
    rng = random.Random(7)
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


async def measure_throughput(tb: TB, frames) -> float:
    """Input beats per cycle from the first beat to the last, no idle, no backpressure."""
    await tb.reset()
    tb.in_beats, tb.in_first, tb.in_last = 0, None, None
    for f, u in frames:
        await tb.send(f, u)
    await tb.check(frames, [expect_frame(f, u) for f, u in frames])
    return tb.in_beats / (tb.in_last - tb.in_first + 1)


def min_frames(n=200):
    rng = random.Random(8)
    return [(valid_frame(rng, L.OP_WRITE_ONLY, 0), False) for _ in range(n)]


def mtu_frames(n=8):
    rng = random.Random(9)
    return [(valid_frame(rng, L.OP_WRITE_MIDDLE, MAX_PAYLOAD), False) for _ in range(n)]


@cocotb.test()
async def test_throughput(dut):
    """Back-to-back minimum and MTU frames go in at one beat per cycle."""
    tb = TB(dut)
    for name, frames in (("minimum", min_frames()), ("MTU", mtu_frames())):
        rate = await measure_throughput(tb, frames)
        dut._log.info("%s frames: %.3f beats/cycle", name, rate)
        assert rate == 1.0, f"{name} frames: {rate:.3f} beats per cycle"


@cocotb.test(skip=not os.environ.get("RX_PARSER_SOAK"))
async def test_soak(dut):
    """A long random mix, under ``make test-long``."""
    rng = random.Random(int(os.environ.get("RX_PARSER_SEED", "10")))
    frames = [random_frame(rng) for _ in range(int(os.environ["RX_PARSER_SOAK"]))]
    idle_rng, bp_rng = random.Random(11), random.Random(12)
    await run_frames(
        dut, frames, lambda: random_pause(idle_rng, 0.2), lambda: random_pause(bp_rng, 0.3)
    )


# ---------------------------------------------------------------------------
# pytest entry points.


def run(data_width: int, test_module: str = "tests.hw.test_rx_parser", **kwargs):
    """Build (once per width) and run cocotb tests on RxParser; sim/parser_bench uses it too."""
    from sim.cocotb_runner import run_cocotb

    return run_cocotb(
        name=f"rx_parser_w{data_width}",
        elaborate=lambda: RxParser(
            data_width=data_width, sack_bits=SACK_BITS, max_payload=MAX_PAYLOAD
        ),
        toplevel="rx_parser",
        test_module=test_module,
        **kwargs,
    )


@pytest.mark.parametrize("data_width", [64, 128])
def test_rx_parser(data_width):
    run(data_width)


@pytest.mark.long
@pytest.mark.parametrize("data_width", [64, 128, 256, 512])
def test_rx_parser_soak(data_width):
    run(data_width, testcase="test_soak", extra_env={"RX_PARSER_SOAK": "10000"})

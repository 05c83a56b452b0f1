# amaranth: UnusedElaboratable=no
# (parsers built for their parameters only, and the ValueError test's unit)
"""The RX parser's sub-components, each alone in Amaranth's simulator.

tests/hw/test_rx_parser.py and tests/unit/test_rx_parser_amaranth.py check the
whole ``RxParser`` against the reference model; these check each part's own
interface, latency and throughput as its docstring gives them, against the
driver's wire-format helpers (host_driver/layers.py).
"""


import pytest
from amaranth.hdl import Elaboratable, Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from host_driver import layers as L
from hw.headers import AETH, BTH, IMMDT, OFF_EXT, OFF_IMMDT, OFF_SACK, PROBE, RETH, SACK
from hw.rx.layouts import COUNTER_NAMES, ParserRecord, Verdict
from hw.rx.parser import RxParser
from hw.rx.parser_checks import FrameLength, IcrcCheck, Ipv4Checksum
from hw.rx.parser_decode import ClassDecode, LengthCheck, bth_beat, header_ends
from hw.rx.parser_frames import FrameBuffer, PayloadWriter
from hw.rx.parser_records import RecordQueue
from hw.rx.parser_verdict import VerdictStages
from tests import seeds

SACK_BITS = 64


def run(dut, *testbenches):
    sim = Simulator(dut)
    sim.add_clock(4e-9, if_exists=True)
    for tb in testbenches:
        sim.add_testbench(tb)
    sim.run()


def fold_ok(header: bytes) -> bool:
    """RFC 1071: the header's 16-bit words sum to 0xFFFF in ones' complement."""
    total = sum((header[i] << 8) | header[i + 1] for i in range(0, len(header), 2))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total == 0xFFFF


def frame_of(rng, opcode, payload_len=0, dscp=0):
    """A well-formed frame of ``opcode`` built by the driver's layers."""
    addr = dict(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02",
                src_ip="10.0.0.1", dst_ip="10.0.0.2", ev=rng.getrandbits(16))
    if opcode in L.WRITE_OPCODES:
        return bytes(L.write_packet(
            opcode=opcode, dqpn=rng.getrandbits(24), psn=rng.getrandbits(24),
            va=rng.getrandbits(64), rkey=rng.getrandbits(32), dma_len=rng.getrandbits(31),
            imm=rng.getrandbits(32) if opcode in L.IMM_OPCODES else None,
            payload=rng.randbytes(payload_len), ackreq=0, dscp=dscp, ecn=0, **addr))
    if opcode == L.OP_ACKNOWLEDGE:
        return bytes(L.ack_packet(
            dqpn=rng.getrandbits(24), cum_psn=rng.getrandbits(24),
            bitmap=rng.getrandbits(SACK_BITS), sack_bits=SACK_BITS, syndrome=0,
            msn=rng.getrandbits(24), ece=0, ce_count=rng.getrandbits(16), **addr))
    return bytes(L.probe_packet(response=opcode == L.OP_PROBE_RESP, dqpn=rng.getrandbits(24),
                                probe_id=rng.getrandbits(32), timestamp=rng.getrandbits(64),
                                **addr))


def beats_of(frame, lanes):
    chunks = [frame[i : i + lanes] for i in range(0, len(frame), lanes)]
    return [(int.from_bytes(c, "little"), (1 << len(c)) - 1, i == len(chunks) - 1)
            for i, c in enumerate(chunks)]


def py_unpack(header, raw: bytes) -> dict:
    """Fields of a hw.headers ``Header`` from its bytes in network order."""
    big = int.from_bytes(raw[: header.size], "big")
    return {name: (big >> (8 * header.size - off - w)) & ((1 << w) - 1)
            for name, off, w in header.fields}


# ---------------------------------------------------------------------------


@pytest.mark.parametrize("stages", [0, 1, 2])
def test_ipv4_checksum(stages):
    """One header per cycle; ``ok`` tells each header's sum ``stages`` cycles later."""
    rng = seeds.rng(stages)
    headers = [b"\0" * 20, b"\xff" * 20]
    for _ in range(60):
        h = bytearray(rng.randbytes(20))
        if rng.random() < 0.5:
            h[10:12] = b"\0\0"
            h[10:12] = L.ipv4_checksum(bytes(h)).to_bytes(2, "big")
        headers.append(bytes(h))
    dut = Ipv4Checksum(stages)

    async def tb(ctx):
        seen = []
        for i in range(len(headers) + stages):
            if i < len(headers):
                ctx.set(dut.header, int.from_bytes(headers[i], "little"))
            if i >= stages:
                seen.append(ctx.get(dut.ok))
            if stages:
                await ctx.tick()
        assert seen == [fold_ok(h) for h in headers]
        assert any(seen) and not all(seen)

    run(dut, tb)


def test_ipv4_checksum_stages_checked():
    with pytest.raises(ValueError, match="stages"):
        Ipv4Checksum(3)


@pytest.mark.parametrize("data_width", [64, 256])
def test_icrc_check(data_width):
    """The CRC register equals the residue two cycles after the last beat iff the
    frame's ICRC is good; frames back to back and with idle cycles."""
    rng = seeds.rng(data_width)
    lanes = data_width // 8
    hdr_beats = -(-74 // lanes)
    frames = []
    for i in range(12):
        f = bytearray(frame_of(rng, rng.choice(L.WRITE_OPCODES + L.PROBE_OPCODES),
                               rng.randrange(0, 200)))
        if i % 3 == 1:
            # any bit but the IHL's: the check reads a 20-byte IPv4 header (the
            # parser drops a frame with any other, and the reference needs one)
            pos = rng.randrange(14, len(f))
            f[pos] ^= 1 << (rng.randrange(4, 8) if pos == 14 else rng.randrange(8))
        if i % 3 == 2:  # a masked byte changes nothing (TTL)
            f[22] ^= 0x5A
        frames.append(bytes(f))
    dut = IcrcCheck(data_width, hdr_beats)

    async def tb(ctx):
        results = []
        took = 0

        async def step(valid, beat=None, k=0):
            nonlocal took
            ctx.set(dut.beat.valid, valid)
            ctx.set(dut.took, took)
            if beat is not None:
                data, keep, last = beat
                ctx.set(dut.beat.data, data)
                ctx.set(dut.beat.keep, keep)
                ctx.set(dut.beat.last, last)
                ctx.set(dut.beat.nbytes, keep.bit_length())
                ctx.set(dut.hdr_beat_oh, 1 << k if k <= hdr_beats else 0)
            await ctx.tick()
            took = valid

        ctx.set(dut.beat.room, 1)
        for n, frame in enumerate(frames):
            for k, beat in enumerate(beats_of(frame, lanes)):
                while n % 2 and rng.random() < 0.3:  # idle cycles on odd frames
                    await step(0)
                await step(1, beat, k)
            # the cycle after the last beat (the next frame's first beat may
            # come in it, on even frames), then the frame's CRC is complete
            await step(0)
            results.append(ctx.get(dut.crc) == ctx.get(dut.residue))
        good = [L.icrc(f) == L.frame_icrc_field(f) for f in frames]
        assert results == good
        assert any(good) and not all(good)

    run(dut, tb)


@pytest.mark.parametrize("data_width", [64, 128])
def test_frame_length(data_width):
    """``frame_len`` is the frame's length in the cycle after its last beat."""
    rng = seeds.rng(data_width)
    lanes = data_width // 8
    lengths = [1, lanes, lanes + 1, 2 * lanes - 1] + [rng.randrange(1, 400) for _ in range(30)]
    dut = FrameLength(data_width)

    async def tb(ctx):
        seen = []
        for n in lengths:
            beats = beats_of(bytes(n), lanes)
            for k, (_, keep, last) in enumerate(beats):
                while rng.random() < 0.3:  # an idle cycle, or a beat refused for room
                    ctx.set(dut.len_beat.valid, rng.random() < 0.5)
                    ctx.set(dut.len_beat.room, 0)
                    await ctx.tick()
                ctx.set(dut.len_beat.valid, 1)
                ctx.set(dut.len_beat.room, 1)
                ctx.set(dut.first, k == 0)
                ctx.set(dut.len_beat.keep, keep)
                ctx.set(dut.len_beat.last, last)
                ctx.set(dut.len_beat.nbytes, keep.bit_length())
                await ctx.tick()
            ctx.set(dut.len_beat.valid, 0)
            ctx.set(dut.first, 1)
            seen.append(ctx.get(dut.frame_len))
        assert seen == lengths

    run(dut, tb)


class _Decode(Elaboratable):
    """ClassDecode and LengthCheck as the parser joins them."""

    def __init__(self, data_width, max_payload=4096):
        parser = RxParser(data_width=data_width, sack_bits=SACK_BITS, max_payload=max_payload)
        self.lanes = data_width // 8
        self.a = ClassDecode(data_width, parser.header_bytes, parser.ack_header_end, max_payload)
        self.b = LengthCheck(data_width, parser.header_bytes, parser.ack_header_end,
                             parser.max_payload_beats)
        self.ack_header_end = parser.ack_header_end

    def elaborate(self, platform):
        m = Module()
        m.submodules.a, m.submodules.b = self.a, self.b
        wiring.connect(m, self.a.decoded, self.b.decoded)
        return m


@pytest.mark.parametrize("data_width", [64, 512])
def test_class_decode_and_length_check(data_width):
    """Stage A's class and overheads, registered at the BTH's beat, and stage B's
    payload figures in the cycle after, for every opcode class, padcount and
    trimming; an unknown opcode and a short UDP length fit no payload."""
    rng = seeds.rng(data_width)
    top = _Decode(data_width, max_payload=1024)
    a, b, lanes = top.a, top.b, top.lanes
    k_bth = bth_beat(lanes)
    _, shifts = header_ends(lanes, top.ack_header_end)
    ops = list(L.WRITE_OPCODES) + [L.OP_ACKNOWLEDGE] + list(L.PROBE_OPCODES)
    cases = [(op, rng.choice([0, 1, 5, 63, 64, 200, 1024, 1025]), rng.choice([0, 46, 0x3F]))
             for op in ops for _ in range(3)]
    cases.append((0x55, 16, 0))

    async def tb(ctx):
        ctx.set(a.trim_dscp_q, 0x3F)
        ctx.set(a.trim_dscp, 0x3F)
        for op, plen, dscp in cases:
            known = op in ops
            frame = bytearray(frame_of(rng, op if known else L.OP_WRITE_ONLY,
                                       plen if op in L.WRITE_OPCODES or not known else 0, dscp))
            frame[42] = op
            hlen = L.header_len(op if known else L.OP_WRITE_ONLY, SACK_BITS)
            pad = (frame[43] >> 4) & 3
            udp_len = int.from_bytes(frame[38:40], "big")
            hdr = int.from_bytes(bytes(frame[:hlen]), "little")
            ctx.set(a.hdr_bytes, hdr)
            ctx.set(a.beat_data, int.from_bytes(bytes(frame[k_bth * lanes : (k_bth + 1) * lanes]),
                                           "little"))
            ctx.set(a.first, k_bth == 0)
            ctx.set(a.at_bth, 1)
            ctx.set(b.udp_length, udp_len)
            ctx.set(b.ip_total_len, int.from_bytes(frame[16:18], "big"))
            assert ctx.get(a.first_beat) == hlen // lanes or not known
            await ctx.tick()
            ctx.set(a.at_bth, 0)
            ctx.set(a.beat_data, 0)  # stage A holds
            d = a.decoded
            assert ctx.get(d.is_write) == (op in L.WRITE_OPCODES)
            assert ctx.get(d.is_imm) == (op in L.IMM_OPCODES)
            assert ctx.get(d.is_ack) == (op == L.OP_ACKNOWLEDGE)
            assert ctx.get(d.is_probe) == (op in L.PROBE_OPCODES)
            assert ctx.get(d.opcode_known) == known
            trimmed = frame[15] >> 2 == 0x3F
            assert ctx.get(d.trimmed) == trimmed
            if known:
                assert ctx.get(d.ovh) == hlen - 34 + 4 + pad
                assert ctx.get(d.udp_need) == hlen - 34
                assert ctx.get(d.frame_need) == hlen + (0 if trimmed else 4)
                assert shifts[ctx.get(d.shift)] == hlen % lanes
            await ctx.tick()
            payload = udp_len - (hlen - 34 + 4 + pad)
            fits = known and not trimmed and 0 <= payload <= 1024
            assert ctx.get(b.payload_fits) == fits
            assert ctx.get(b.writes_payload) == (fits and payload > 0)
            assert ctx.get(b.udp_total) == udp_len + 20
            assert ctx.get(b.udp_need_ne) == (udp_len != hlen - 34)
            if fits and payload > 0:
                beats = -(-payload // lanes)
                assert ctx.get(b.payload_len) == payload
                assert ctx.get(b.payload_beats) == beats
                assert ctx.get(b.beats_m1) == beats - 1
                assert ctx.get(b.one_beat) == (beats == 1)
                assert ctx.get(b.last_keep) == (1 << (payload - (beats - 1) * lanes)) - 1

    run(top, tb)


class _Writer(Elaboratable):
    """PayloadWriter fed by the decode stages, writing into a FrameBuffer."""

    def __init__(self, data_width, depth=64):
        self.dec = _Decode(data_width)
        parser = RxParser(data_width=data_width, sack_bits=SACK_BITS)
        self.frames = FrameBuffer(data_width, depth, parser.max_payload_beats)
        self.writer = PayloadWriter(data_width, parser.header_bytes, parser.ack_header_end,
                                    parser.max_payload_beats, self.frames.ptr_bits)

    def elaborate(self, platform):
        m = Module()
        m.submodules.dec, m.submodules.frames = self.dec, self.frames
        m.submodules.writer = w = self.writer
        a, b = self.dec.a, self.dec.b
        wiring.connect(m, w.write, self.frames.write)
        m.d.comb += [
            w.first_beat.eq(a.first_beat), w.shift.eq(a.decoded.shift),
            w.writes_payload.eq(b.writes_payload), w.beats_m1.eq(b.beats_m1),
            w.one_beat.eq(b.one_beat), w.last_keep.eq(b.last_keep),
            a.beat_data.eq(w.beat.data), a.at_bth.eq(w.at_bth),
        ]
        return m


@pytest.mark.parametrize("data_width", [64, 128, 256])
def test_payload_writer(data_width):
    """Each frame's payload comes out of the frame FIFO realigned to lane 0 when
    verdict stage 3 pushes it, and nothing of a frame it drops."""
    rng = seeds.rng(data_width)
    top = _Writer(data_width)
    w, frames, a, b = top.writer, top.frames, top.dec.a, top.dec.b
    lanes = data_width // 8
    k_bth = bth_beat(lanes)
    ops = list(L.WRITE_OPCODES)
    cases = [(frame_of(rng, rng.choice(ops), rng.randrange(1, 300)), rng.random() < 0.7)
             for _ in range(16)]
    expected = [f[L.header_len(f[42], SACK_BITS) : -4 - (f[43] >> 4 & 3)]
                for f, keep in cases if keep]
    got = []

    async def source(ctx):
        ctx.set(a.trim_dscp_q, 0x3F)
        ctx.set(w.beat.room, 1)
        for frame, keep in cases:
            hlen = L.header_len(frame[42], SACK_BITS)
            ctx.set(a.hdr_bytes, int.from_bytes(frame[:hlen], "little"))
            ctx.set(b.udp_length, int.from_bytes(frame[38:40], "big"))
            for k, (data, _, last) in enumerate(beats_of(frame, lanes)):
                ctx.set(w.beat.data, data)
                ctx.set(w.beat.last, last)
                ctx.set(w.beat.valid, 1)
                ctx.set(w.beat.accept, 1)
                ctx.set(w.at_bth, k == k_bth)
                await ctx.tick()
                ctx.set(w.eof, 0)
            ctx.set(w.beat.valid, 0)
            ctx.set(w.beat.accept, 0)
            ctx.set(w.eof, 1)  # verdict stage 1
            await ctx.tick()
            ctx.set(w.eof, 0)
            await ctx.tick()  # stage 2
            ctx.set(w.v3, 1)
            ctx.set(w.push, keep)
            ctx.set(frames.release.en, keep)
            ctx.set(frames.release.beats, ctx.get(b.payload_beats))
            await ctx.tick()  # stage 3
            ctx.set(w.v3, 0)
            ctx.set(w.push, 0)
            ctx.set(frames.release.en, 0)

    async def sink(ctx):
        buf = bytearray()
        idle = cycle = 0
        while idle < 100 and cycle < 20000:  # (a lost beat ends it too)
            cycle += 1
            ctx.set(frames.payload.ready, rng.random() < 0.8)
            valid, ready = ctx.get(frames.payload.valid), ctx.get(frames.payload.ready)
            beat = ctx.get(frames.payload.payload)
            await ctx.tick()
            idle = 0 if valid or len(got) < len(expected) else idle + 1
            if valid and ready:
                assert beat.keep == (1 << lanes) - 1 or beat.last
                buf += beat.data.to_bytes(lanes, "little")[: beat.keep.bit_length()]
                if beat.last:
                    got.append(bytes(buf))
                    buf = bytearray()

    run(top, source, sink)
    assert got == expected


@pytest.mark.parametrize("data_width", [64, 512])
def test_frame_buffer(data_width):
    """Written beats leave only once released, in order, 4 cycles after their
    release at the earliest, one per cycle, under random backpressure."""
    rng = seeds.rng(data_width)
    lanes = data_width // 8
    dut = FrameBuffer(data_width, 16, 8)
    beats = [(rng.getrandbits(data_width), rng.random() < 0.3) for _ in range(40)]
    out = []

    async def writer(ctx):
        wr_ptr = rel = 0
        for i, (data, last) in enumerate(beats):
            for _ in range(1000):
                if (wr_ptr - ctx.get(dut.rd_ptr)) % 32 < 16:  # not full
                    break
                await ctx.tick()
            else:
                raise AssertionError("the reader stopped reading")
            ctx.set(dut.write.en, 1)
            ctx.set(dut.write.addr, wr_ptr % 16)
            ctx.set(dut.write.data, {"data": data, "keep": (1 << lanes) - 1, "last": last})
            await ctx.tick()
            ctx.set(dut.write.en, 0)
            wr_ptr += 1
            if last or i == len(beats) - 1 or wr_ptr - rel == 8:
                await ctx.tick()
                ctx.set(dut.release.en, 1)
                ctx.set(dut.release.beats, wr_ptr - rel)
                await ctx.tick()
                ctx.set(dut.release.en, 0)
                # nothing leaves before the first release lands (4 cycles); after
                # it, a beat of an earlier release may still wait for the reader
                for _ in range(3):
                    assert rel > 0 or not ctx.get(dut.payload.valid)
                    await ctx.tick()
                rel = wr_ptr

    async def reader(ctx):
        idle = cycle = 0
        while idle < 50 and cycle < 5000:
            cycle += 1
            ready = rng.random() < 0.7
            ctx.set(dut.payload.ready, ready)
            valid, beat = ctx.get(dut.payload.valid), ctx.get(dut.payload.payload)
            await ctx.tick()
            idle = 0 if valid or len(out) < len(beats) else idle + 1
            if valid and ready:
                out.append((beat.data, beat.last))

    run(dut, writer, reader)
    assert out == [(d, int(last)) for d, last in beats]


def test_frame_buffer_latency():
    """A released beat is valid on ``payload`` 4 cycles after the release."""
    dut = FrameBuffer(64, 16, 8)

    async def tb(ctx):
        ctx.set(dut.payload.ready, 1)
        ctx.set(dut.write.en, 1)
        ctx.set(dut.write.data, {"data": 0x1234, "keep": 0xFF, "last": 1})
        await ctx.tick()
        ctx.set(dut.write.en, 0)
        await ctx.tick()
        ctx.set(dut.release.en, 1)
        ctx.set(dut.release.beats, 1)
        await ctx.tick()
        ctx.set(dut.release.en, 0)
        for _ in range(3):
            assert not ctx.get(dut.payload.valid)
            await ctx.tick()
        assert ctx.get(dut.payload.valid) and ctx.get(dut.payload.payload).data == 0x1234

    run(dut, tb)


def test_record_queue():
    """Records come out in order, the extension bytes spread into the fields of
    their class (others 0), 4 cycles after the push into an empty queue, one
    per 2 cycles at most; each taken record releases its beats."""
    rng = seeds.rng(1)
    parser = RxParser(sack_bits=SACK_BITS)
    ext_bytes = parser.header_bytes - OFF_EXT
    dut = RecordQueue(SACK_BITS, ext_bytes, parser.max_payload_beats)
    layout = ParserRecord(SACK_BITS, ext_bytes, parser.max_payload_beats)
    classes = ["is_write", "is_imm", "is_ack", "is_probe"]
    records = []
    for i in range(30):
        cls = classes[i % 4]
        rec = {name: rng.getrandbits(field.width) for name, field in layout
               if name not in ("bth",) and not name.startswith("is_")}
        rec["bth"] = {name: rng.getrandbits(w) for name, _, w in BTH.fields}
        rec.update({c: int(c == cls or (cls == "is_imm" and c == "is_write")) for c in classes})
        rec["beats"] = rng.randrange(0, parser.max_payload_beats + 1)
        records.append(rec)
    got, released, valid_at = [], [], []

    def expect(rec):
        ext = rec["ext"].to_bytes(ext_bytes, "little")
        out = {"reth": {n: 0 for n, _, _ in RETH.fields}, "imm": 0,
               "aeth": {n: 0 for n, _, _ in AETH.fields}, "sack": {n: 0 for n, _, _ in SACK.fields},
               "sack_bitmap": 0, "probe": {n: 0 for n, _, _ in PROBE.fields}}
        if rec["is_write"]:
            out["reth"] = py_unpack(RETH, ext)
        if rec["is_imm"]:
            out["imm"] = py_unpack(IMMDT, ext[OFF_IMMDT - OFF_EXT :])["imm"]
        if rec["is_ack"]:
            out["aeth"] = py_unpack(AETH, ext)
            out["sack"] = py_unpack(SACK, ext[OFF_SACK - OFF_EXT :])
            off = OFF_SACK + SACK.size - OFF_EXT
            out["sack_bitmap"] = int.from_bytes(ext[off : off + SACK_BITS // 8], "big")
        if rec["is_probe"]:
            out["probe"] = py_unpack(PROBE, ext)
        return out

    async def source(ctx):
        for i, rec in enumerate(records):
            while ctx.get(dut.level) >= dut.depth - 1:
                await ctx.tick()
            ctx.set(dut.record, rec)
            ctx.set(dut.push, 1)
            await ctx.tick()
            ctx.set(dut.push, 0)
            if i == 0:
                for _ in range(40):
                    await ctx.tick()

    async def sink(ctx):
        cycle = 0
        while len(got) < len(records) and cycle < 2000:
            ready = cycle > 60 or cycle < 10
            ctx.set(dut.hdr.ready, ready)
            valid = ctx.get(dut.hdr.valid)
            if valid:
                valid_at.append(cycle)
            if ctx.get(dut.release.en):
                released.append(ctx.get(dut.release.beats))
            hdr = ctx.get(dut.hdr.payload)
            await ctx.tick()
            cycle += 1
            if valid and ready:
                got.append(hdr)

    run(dut, source, sink)
    assert valid_at[0] == 4  # pushed in cycle 0
    assert len(got) == len(records)
    assert released == [r["beats"] for r in records]
    taken = [c for c in valid_at if c > 60]  # ready from cycle 61 on: each valid is taken
    assert len(taken) > 10 and all(b - a == 2 for a, b in zip(taken, taken[1:], strict=False))
    for rec, hdr in zip(records, got, strict=True):
        assert hdr.payload_len == rec["payload_len"] and hdr.eth_src == rec["eth_src"]
        assert {n: hdr.bth[n] for n, _, _ in BTH.fields} == rec["bth"]
        exp = expect(rec)
        assert {n: hdr.reth[n] for n, _, _ in RETH.fields} == exp["reth"]
        assert hdr.imm == exp["imm"]
        assert {n: hdr.aeth[n] for n, _, _ in AETH.fields} == exp["aeth"]
        assert {n: hdr.sack[n] for n, _, _ in SACK.fields} == exp["sack"]
        assert hdr.sack_bitmap == exp["sack_bitmap"]
        assert {n: hdr.probe[n] for n, _, _ in PROBE.fields} == exp["probe"]


def test_verdict_stages():
    """The first failing check names the verdict, else the ICRC (when it
    decides); ``push`` 1 cycle after ``v2``, the verdict's counter strobe 2
    cycles after, for one cycle."""
    rng = seeds.rng(3)
    order = [Verdict.BAD_FRAME, Verdict.TRUNCATED, Verdict.NOT_IPV4, Verdict.IPV4_OPTIONS,
             Verdict.IPV4_CHECKSUM, Verdict.NOT_ROCE, Verdict.UNKNOWN_OPCODE,
             Verdict.LENGTH_MISMATCH]
    dut = VerdictStages(order)
    cases = []
    for _ in range(150):
        flags = rng.getrandbits(len(order)) if rng.random() < 0.5 else 0
        flags &= rng.getrandbits(len(order))
        crc = rng.getrandbits(32)
        residue = crc if rng.random() < 0.6 else crc ^ (1 << rng.randrange(32))
        cases.append((flags, rng.random() < 0.8, crc, residue))

    def verdict(flags, check_icrc, crc, residue):
        for i, v in enumerate(order):
            if flags >> i & 1:
                return v
        return Verdict.BAD_ICRC if check_icrc and crc != residue else Verdict.ACCEPTED

    async def tb(ctx):
        counts = dict.fromkeys(COUNTER_NAMES, 0)
        for flags, check_icrc, crc, residue in cases:
            ctx.set(dut.flags, flags)
            ctx.set(dut.check_icrc, check_icrc)
            ctx.set(dut.crc, crc)
            ctx.set(dut.residue, residue)
            ctx.set(dut.v2, 1)
            await ctx.tick()
            ctx.set(dut.v2, 0)
            ctx.set(dut.flags, rng.getrandbits(len(order)))  # not read after v2
            v = verdict(flags, check_icrc, crc, residue)
            assert ctx.get(dut.v3) and ctx.get(dut.push) == (v == Verdict.ACCEPTED)
            await ctx.tick()
            assert not ctx.get(dut.v3) and not ctx.get(dut.push)
            assert ctx.get(dut.events) == 1 << v.value
            counts[COUNTER_NAMES[v.value]] += 1
            await ctx.tick()
            assert ctx.get(dut.events) == 0
        assert all(counts[n] for n in ("accepted", "bad_icrc", "bad_frame"))

    run(dut, tb)


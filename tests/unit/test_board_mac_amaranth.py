"""The MAC's byte-level blocks in Amaranth's simulator, each against a Python
reference: fast checks that run next to the blocks (the cocotb test in
tests/hw/test_board_mac.py covers the whole MAC on RGMII).

* RX: RxDecoder -> RxFCSCheck -> RxPacker on GMII pairs: data, keep, last
  and the status flags of each frame (good, bad FCS, runt, RX_ER, too short
  to hold a byte, oversize).
* TX: TxUnpacker -> TxFramer: preamble, padding, FCS and the 12-byte gap.
* PacketFIFO: commit, drop, overflow of a frame bigger than the buffer.
"""

import struct
import zlib

from amaranth.hdl import Module
from amaranth.sim import Simulator

from hw.board.mac import PacketFIFO, RxDecoder, RxFCSCheck, RxPacker, TxFramer, TxUnpacker
from tests import seeds

PRE = b"\x55" * 7 + b"\xd5"


def fcs(data: bytes) -> bytes:
    return struct.pack("<L", zlib.crc32(data))


def rx_reference(wire: bytes, er_at=None, max_frame=1518):
    """Expected (data without FCS, status dict) for the bytes after the SFD."""
    data = wire[:-4] if len(wire) >= 5 else b""
    status = {
        "fcs_bad": len(wire) < 4 or zlib.crc32(wire[:-4]) != int.from_bytes(wire[-4:], "little"),
        "runt": len(wire) < 64,
        "oversize": len(wire) > max_frame,
        "rx_error": er_at is not None,
        "empty": len(wire) < 5,
    }
    return data, status


def test_rx_chain():
    m = Module()
    m.submodules.dec = dec = RxDecoder()
    m.submodules.chk = chk = RxFCSCheck(max_frame=200)
    m.submodules.pk = pk = RxPacker(64)
    m.d.comb += [
        chk.byte.eq(dec.byte),
        chk.valid.eq(dec.valid),
        chk.end.eq(dec.end),
        chk.odd_nibble.eq(dec.odd_nibble),
        chk.rx_error.eq(dec.rx_error),
        pk.i.eq(chk.o),
        pk.i_valid.eq(chk.o_valid),
        pk.o_ready.eq(1),
    ]
    rng = seeds.rng(1)
    cases = []
    for size in [64, 65, 71, 72, 100, 200, 201, 63, 5, 4, 2]:
        p = rng.randbytes(max(0, size - 4))
        wire = p + fcs(p) if size >= 4 else rng.randbytes(size)
        cases.append((wire, None))
    bad = bytearray(cases[0][0])
    bad[10] ^= 1
    cases.append((bytes(bad), None))
    cases.append((cases[1][0], 20))  # RX_ER on byte 20
    got = []

    async def drive(ctx):
        for wire, er_at in cases:
            for i, b in enumerate(PRE + wire):
                er = er_at is not None and i == 8 + er_at
                ctx.set(dec.rx.d0, b & 0xF)
                ctx.set(dec.rx.d1, b >> 4)
                ctx.set(dec.rx.ctl0, 1)
                ctx.set(dec.rx.ctl1, 1 ^ er)
                await ctx.tick()
            ctx.set(dec.rx.ctl0, 0)
            ctx.set(dec.rx.ctl1, 0)
            await ctx.tick().repeat(3)
        await ctx.tick().repeat(20)

    async def monitor(ctx):
        frame = bytearray()
        async for _, _, valid, word in ctx.tick().sample(pk.o_valid, pk.o):
            if not valid:
                continue
            keep = word.keep
            frame += word.data.to_bytes(8, "little")[: bin(keep).count("1")]
            assert keep & (keep + 1) == 0, f"keep {keep:#x} not contiguous"
            if word.last:
                st = word.status
                got.append(
                    (
                        bytes(frame),
                        {
                            "fcs_bad": bool(st.fcs_bad),
                            "runt": bool(st.runt),
                            "oversize": bool(st.oversize),
                            "rx_error": bool(st.rx_error),
                            "empty": bool(st.empty),
                        },
                    )
                )
                frame = bytearray()

    sim = Simulator(m)
    sim.add_clock(8e-9)
    sim.add_testbench(drive)
    sim.add_process(monitor)
    sim.run()
    assert len(got) == len(cases)
    for (wire, er_at), (data, status) in zip(cases, got, strict=True):
        want_data, want_status = rx_reference(wire, er_at, max_frame=200)
        assert data == want_data, (len(wire), data.hex())
        if want_status["empty"]:
            want_status["fcs_bad"] = status["fcs_bad"]  # meaningless below 5 bytes
        assert status == want_status, (len(wire), status, want_status)


def test_tx_framer():
    m = Module()
    m.submodules.up = up = TxUnpacker(64)
    m.submodules.fr = fr = TxFramer()
    m.d.comb += [
        fr.i.payload.eq(up.o.payload),
        fr.i.valid.eq(up.o.valid),
        up.o.ready.eq(fr.i.ready),
    ]
    rng = seeds.rng(2)
    payloads = [rng.randbytes(n) for n in (1, 59, 60, 61, 64, 100)]
    wire = []

    async def feed(ctx):
        for p in payloads:
            beats = [p[i : i + 8] for i in range(0, len(p), 8)]
            for i, beat in enumerate(beats):
                ctx.set(up.i.payload.data, int.from_bytes(beat.ljust(8, b"\0"), "little"))
                ctx.set(up.i.payload.keep, (1 << len(beat)) - 1)
                ctx.set(up.i.payload.last, i == len(beats) - 1)
                ctx.set(up.i.valid, 1)
                await ctx.tick().until(up.i.ready)
            ctx.set(up.i.valid, 0)
        await ctx.tick().repeat(200)

    async def monitor(ctx):
        tx = fr.tx
        async for _, _, d0, d1, c0, c1 in ctx.tick().sample(tx.d0, tx.d1, tx.ctl0, tx.ctl1):
            assert c0 == c1, "TX_ER asserted"
            wire.append(d0 | d1 << 4 if c0 else None)

    sim = Simulator(m)
    sim.add_clock(8e-9)
    sim.add_testbench(feed)
    sim.add_process(monitor)
    sim.run()
    # Split the byte stream at idle cycles.
    frames, gaps, cur, idle = [], [], bytearray(), 0
    for b in wire:
        if b is None:
            if cur:
                frames.append(bytes(cur))
                cur = bytearray()
            idle += 1
        else:
            if not cur and frames:
                gaps.append(idle)
            idle = 0
            cur.append(b)
    assert len(frames) == len(payloads)
    assert gaps == [12] * (len(payloads) - 1), gaps
    for f, p in zip(frames, payloads, strict=True):
        padded = p.ljust(60, b"\0")
        assert f == PRE + padded + fcs(padded)


def test_packet_fifo():
    dut = PacketFIFO(64, depth=16)
    out = []

    async def write(ctx, n_beats, *, drop=False, user=False):
        for i in range(n_beats):
            ctx.set(dut.w.payload.data, (len(out) << 8) | i)
            ctx.set(dut.w.payload.keep, 0xFF)
            ctx.set(dut.w.payload.last, i == n_beats - 1)
            ctx.set(dut.w.payload.user, user and i == n_beats - 1)
            ctx.set(dut.w.payload.drop, drop)
            ctx.set(dut.w.valid, 1)
            await ctx.tick()
        ctx.set(dut.w.valid, 0)

    async def testbench(ctx):
        ctx.set(dut.r.ready, 0)
        await write(ctx, 3)
        await write(ctx, 4, drop=True)  # discarded
        await write(ctx, 5, user=True)
        await write(ctx, 20)  # bigger than the buffer: overflow
        await ctx.tick().repeat(3)
        ctx.set(dut.r.ready, 1)
        await ctx.tick().repeat(12)
        await write(ctx, 16)  # fills it exactly once emptied
        await ctx.tick().repeat(30)

    async def reader(ctx):
        r = dut.r
        async for _, _, valid, ready, beat in ctx.tick().sample(r.valid, r.ready, r.payload):
            if valid and ready:
                out.append((beat.data & 0xFF, beat.last, beat.user))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.add_process(reader)
    sim.run()
    lasts = [i for i, (_, last, _) in enumerate(out) if last]
    assert [b[0] for b in out[:3]] == [0, 1, 2] and lasts[0] == 2
    assert [b[0] for b in out[3:8]] == [0, 1, 2, 3, 4] and out[7][2] == 1
    assert [b[0] for b in out[8:]] == list(range(16))
    assert len(lasts) == 3

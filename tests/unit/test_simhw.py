"""sim/system/simhw.cpp without a simulator: the DPI functions the Verilog
calls, driven from ctypes, against what the Python side expects (byte lanes,
errors, frames out of mac_tx, a paced mac_tx's backpressure and departures,
frames into mac_rx in the order they fall due)."""

from __future__ import annotations

import ctypes

import pytest

from sim.system import simhw

RAM = 1 << 16


@pytest.fixture(scope="module")
def lib():
    path = simhw.build_library()
    lib = ctypes.CDLL(str(path))
    i64, ci = ctypes.c_int64, ctypes.c_int
    lib.mrc_mem_read.argtypes, lib.mrc_mem_read.restype = [ci, i64], i64
    lib.mrc_mem_write.argtypes, lib.mrc_mem_write.restype = [ci, i64, i64, ci, ci], None
    lib.mrc_mem_failed.argtypes, lib.mrc_mem_failed.restype = [ci], ci
    lib.mrc_mem_protocol_error.argtypes, lib.mrc_mem_protocol_error.restype = [ci, i64], None
    lib.mrc_tx_beat.argtypes, lib.mrc_tx_beat.restype = [ci, i64, ci, ci, i64], None
    lib.mrc_tx_ready.argtypes, lib.mrc_tx_ready.restype = [ci, i64], ci
    lib.mrc_rx_beat.argtypes = [ci, i64, ci, ctypes.POINTER(i64), ctypes.POINTER(ci)]
    lib.mrc_rx_beat.restype = ci
    return lib


@pytest.fixture
def hw(lib):
    py = simhw._load_from(lib)
    py.mrc_sim_reset(RAM, 2)  # two NICs with memories
    return py


def _word(data: bytes) -> int:
    return int.from_bytes(data, "little", signed=True)


def test_memory_lanes_and_backdoor(hw):
    ram = simhw.HostRam(hw, 0, RAM)
    ram.write(0x100, bytes(range(16)))
    assert hw.mrc_mem_read(0, 0x100) == _word(bytes(range(8)))
    assert hw.mrc_mem_read(0, 0x10D) == _word(bytes(range(8, 16)))  # the aligned word
    hw.mrc_mem_write(0, 0x108, _word(b"\xAA" * 8), 0b1000_0001, 1)  # lanes 0 and 7 only
    assert ram.read(0x108, 8) == b"\xAA" + bytes(range(9, 15)) + b"\xAA"
    assert simhw.HostRam(hw, 1, RAM).read(0x100, 16) == bytes(16)  # the other NIC's
    assert hw.mrc_mem_failed(0) == 0 and ram.errors() == (0, 0)


def test_write_burst_lands_whole_at_its_last_beat(hw):
    """A 4-beat burst (a CQE: phase bit in beat 2, WQE index in beat 3) is
    not seen by the host until its last beat, then all of it is."""
    ram = simhw.HostRam(hw, 0, RAM)
    old = bytes(range(100, 132))
    ram.write(0x200, old)
    new = bytes(range(32))
    for beat in range(4):
        hw.mrc_mem_write(0, 0x200 + 8 * beat, _word(new[8 * beat:8 * beat + 8]), 0xFF,
                         int(beat == 3))
        assert ram.read(0x200, 32) == (new if beat == 3 else old), beat
    assert hw.mrc_mem_failed(0) == 0


def test_drop_lanes_breaks_one_beat(hw):
    """The test hook of a broken DMA: the chosen beat loses the chosen lanes,
    the beats around it land whole."""
    ram = simhw.HostRam(hw, 1, RAM)
    ram.drop_lanes(1, 0b0000_0100)
    for beat in range(3):
        hw.mrc_mem_write(1, 0x300 + 8 * beat, _word(b"\xEE" * 8), 0xFF, int(beat == 2))
    assert ram.read(0x300, 24) == b"\xEE" * 10 + b"\x00" + b"\xEE" * 13
    hw.mrc_mem_write(1, 0x300, _word(b"\x11" * 8), 0xFF, 1)
    assert ram.read(0x300, 8) == b"\x11" * 8


def test_memory_errors(hw):
    ram = simhw.HostRam(hw, 1, RAM)
    assert hw.mrc_mem_read(1, RAM) == 0
    hw.mrc_mem_write(1, RAM + 8, 1, 0xFF, 1)
    hw.mrc_mem_protocol_error(1, 0x40)
    assert hw.mrc_mem_failed(1) == 1 and hw.mrc_mem_failed(0) == 0
    assert ram.errors() == (3, RAM)
    with pytest.raises(ValueError, match="outside"):
        ram.read(RAM - 4, 8)
    with pytest.raises(ValueError, match="outside"):
        ram.write(-1, b"x")


def test_tx_beats_make_frames(hw):
    frame = bytes(range(1, 20))  # 19 bytes: 3 beats, the last with 3 lanes
    for k in range(0, len(frame), 8):
        chunk = frame[k:k + 8]
        hw.mrc_tx_beat(0, _word(chunk.ljust(8, b"\0")), (1 << len(chunk)) - 1,
                       int(k + 8 >= len(frame)), k)
    hw.mrc_tx_beat(0, _word(b"\x55" * 8), 0xFF, 0, 24)  # the start of the next frame
    assert hw.mrc_tx_ready(0, 24) == 1  # not paced: every cycle
    assert hw.mrc_tx_departure(0) == -1
    assert hw.mrc_tx_peek(0) == 19 and hw.mrc_tx_peek(1) == -1
    buf = (ctypes.c_uint8 * 19)()
    assert hw.mrc_tx_pop(0, buf) == 19 and bytes(buf) == frame
    assert hw.mrc_tx_peek(0) == -1  # the partial frame stays until its last beat


def test_paced_tx_holds_the_nic_back_to_the_wire(hw):
    """A paced mac_tx (2 ns a byte, 4 overhead bytes a frame, a 40 ns FIFO)
    takes a beat while what it holds leaves within the FIFO's time; each
    frame leaves the wire at the sum of its bytes' and overhead's times
    after the wire was free, and comes out with that departure."""
    port = 3
    hw.mrc_tx_pace(port, 2.0, 4, 40.0)
    now, taken = 100, []
    for _ in range(200):  # a beat offered every 8 ns, 3 frames of 4 beats
        if len(taken) == 12:
            break
        if hw.mrc_tx_ready(port, now):
            last = int(len(taken) % 4 == 3)
            hw.mrc_tx_beat(port, _word(bytes([len(taken)]) * 8), 0xFF, last, now)
            taken.append(now)
        now += 8
    # the rule: a beat is taken when the wire is free within 40 ns; it takes
    # 16 ns of wire, the frame's last 8 ns more
    want, wire, now = [], 0.0, 100
    while len(want) < 12:
        if wire <= now + 40:
            wire = max(wire, now) + 16 + (8 if len(want) % 4 == 3 else 0)
            want.append(now)
        now += 8
    assert taken == want
    departures = []
    buf = (ctypes.c_uint8 * 32)()
    while hw.mrc_tx_peek(port) >= 0:
        departures.append(hw.mrc_tx_departure(port))
        hw.mrc_tx_pop(port, buf)
    assert departures == [172.0, 244.0, 316.0]  # back to back on the wire, 72 ns each
    assert taken[-1] - taken[0] > 2 * 72  # held back: 12 beats would take 88 ns unpaced


def _beats(hw, nic, now):
    data, keep_last = ctypes.c_int64(), ctypes.c_int()
    out = []
    while hw.mrc_rx_beat(nic, now, 0, ctypes.byref(data), ctypes.byref(keep_last)):
        keep = keep_last.value & 0xFF
        n = keep.bit_length()
        assert keep == (1 << n) - 1
        out.append((data.value.to_bytes(8, "little", signed=True)[:n],
                    bool(keep_last.value & 0x100)))
    return out


def _frames(beats):
    frames, cur = [], b""
    for chunk, last in beats:
        cur += chunk
        if last:
            frames.append(cur)
            cur = b""
    assert cur == b""
    return frames


def test_rx_frames_in_the_order_they_fall_due(hw):
    source = simhw.FrameSource(hw, 1)
    source.send_at(b"late" * 5, 1000.0)
    source.send_at(b"early" * 3, 500.2)  # due at 501 ns
    source.send_at(b"tie", 1000)  # same time as "late", queued after it
    assert source.queued() == 3
    assert _beats(hw, 1, 500) == []
    assert _frames(_beats(hw, 1, 501)) == [b"early" * 3]
    assert _beats(hw, 1, 999) == []
    assert _frames(_beats(hw, 1, 1000)) == [b"late" * 5, b"tie"]
    assert source.queued() == 0 and _beats(hw, 0, 10**9) == []


def test_a_wide_beats_words_continue_one_frame(hw):
    """A bus wider than 64 bits takes a beat's 8-byte words one call each:
    ``more`` continues the frame begun (0 once it has ended: the next frame
    starts a beat of its own), and a word with no byte lane to write is no
    access, even outside the memory."""
    source = simhw.FrameSource(hw, 0)
    source.send_at(bytes(range(12)), 0)
    source.send_at(b"next", 0)
    data, keep_last = ctypes.c_int64(), ctypes.c_int()
    refs = ctypes.byref(data), ctypes.byref(keep_last)
    assert hw.mrc_rx_beat(0, 0, 1, *refs) == 0  # no frame begun
    assert hw.mrc_rx_beat(0, 0, 0, *refs) == 1 and keep_last.value == 0xFF
    assert hw.mrc_rx_beat(0, 0, 1, *refs) == 1 and keep_last.value == 0x10F
    assert hw.mrc_rx_beat(0, 0, 1, *refs) == 0  # "next" waits for the next beat
    assert _frames(_beats(hw, 0, 0)) == [b"next"]
    hw.mrc_mem_write(0, RAM, 0, 0, 1)
    assert hw.mrc_mem_failed(0) == 0


def test_nics_beyond_the_reset_count_have_no_memory_and_ports_per_plane(hw):
    """``mrc_sim_reset(bytes, nics)`` sizes the memories of NICs 0..nics-1 only: NIC 2's
    is empty, so its every access is an error; a MAC port is NIC + 8 x plane, so
    NIC 5's plane-2 port holds its own frames."""
    assert hw.mrc_mem_read(2, 0) == 0
    hw.mrc_mem_write(2, 8, 1, 0xFF, 1)
    assert simhw.HostRam(hw, 2, RAM).errors() == (2, 0)
    assert hw.mrc_mem_failed(2) == 1 and hw.mrc_mem_failed(1) == 0
    port = simhw.mac_port(5, 2)
    assert port == 21
    hw.mrc_tx_beat(port, _word(b"\x42" * 8), 0xFF, 1, 0)
    buf = (ctypes.c_uint8 * 8)()
    assert hw.mrc_tx_peek(port) == 8 and hw.mrc_tx_peek(5) == -1
    assert hw.mrc_tx_pop(port, buf) == 8 and bytes(buf) == b"\x42" * 8

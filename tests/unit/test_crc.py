"""hw/crc.py: the multi-byte CRC-32 against zlib, for every byte count, and
``crc32_tail`` (one network for every count) against the bit-serial reference."""

import zlib

import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from host_driver.layers import OP_WRITE_ONLY, icrc, write_packet
from hw.crc import (
    CRC32_INIT,
    CRC32_RESIDUE,
    ICRC_INIT,
    crc32_before_zeros,
    crc32_bytes,
    crc32_state_py,
    crc32_tail,
)
from tests import seeds


def _run_stream(data_width, chunks):
    """Feed (bytes, count) chunks through crc32_bytes combinationally; return the state."""
    state = Signal(32, init=CRC32_INIT)
    data = Signal(data_width)
    count = Signal(range(data_width // 8 + 1))
    nxt = crc32_bytes(state, data, count)
    result = {}

    async def bench(ctx):
        s = CRC32_INIT
        for chunk in chunks:
            ctx.set(state, s)
            ctx.set(data, int.from_bytes(chunk.ljust(data_width // 8, b"\xa5"), "little"))
            ctx.set(count, len(chunk))
            s = ctx.get(nxt)
        result["state"] = s

    sim = Simulator(Module())
    sim.add_testbench(bench)
    sim.run()
    return result["state"]


@pytest.mark.parametrize("data_width", [64, 128])
def test_matches_zlib_every_count(data_width):
    rng = seeds.rng(data_width)
    n = data_width // 8
    chunks = [bytes(rng.randrange(256) for _ in range(k)) for k in list(range(n + 1)) * 3]
    rng.shuffle(chunks)
    message = b"".join(chunks)
    assert _run_stream(data_width, chunks) == crc32_state_py(CRC32_INIT, message)
    assert ~_run_stream(data_width, chunks) & 0xFFFFFFFF == zlib.crc32(message)


def test_residue_and_icrc_init():
    msg = b"The quick brown fox"
    assert crc32_state_py(CRC32_INIT, msg + zlib.crc32(msg).to_bytes(4, "little")) == CRC32_RESIDUE
    assert ICRC_INIT == crc32_state_py(CRC32_INIT, b"\xff" * 8)
    frame = bytes(write_packet(opcode=OP_WRITE_ONLY, dqpn=1, psn=2, va=3, rkey=4, dma_len=1,
                               payload=b"!"))
    masked = bytearray(frame[14:])
    masked[1] = masked[8] = 0xFF
    masked[10:12] = masked[26:28] = b"\xff\xff"
    masked[32] = 0xFF
    assert ~crc32_state_py(ICRC_INIT, bytes(masked[:-4])) & 0xFFFFFFFF == icrc(frame)
    assert crc32_state_py(ICRC_INIT, bytes(masked)) == CRC32_RESIDUE


@pytest.mark.parametrize("nbytes", [8, 16])
def test_crc32_tail_every_count(nbytes):
    """crc32_tail's two parts XORed = the CRC register after the first
    ``count`` bytes of the word, for every count 0..nbytes, random state and
    data (bytes past ``count`` random too: they must not matter)."""
    state = Signal(32)
    data = Signal(8 * nbytes)
    count = Signal(range(nbytes + 1))
    state_part, data_part = crc32_tail(state, data, count, nbytes)
    rng = seeds.rng(nbytes)

    async def bench(ctx):
        for k in list(range(nbytes + 1)) * 3:
            s, word = rng.getrandbits(32), rng.getrandbits(8 * nbytes)
            ctx.set(state, s)
            ctx.set(data, word)
            ctx.set(count, k)
            expect = crc32_state_py(s, word.to_bytes(nbytes, "little")[:k])
            assert ctx.get(state_part) ^ ctx.get(data_part) == expect, (nbytes, k)

    sim = Simulator(Module())
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("count", [0, 1, 3, 8, 61])
def test_crc32_before_zeros_inverts_zero_bytes(count):
    """Leading zero bytes from crc32_before_zeros(s, n) give the CRC from s."""
    for state in (CRC32_INIT, ICRC_INIT, 0, 0x80000001, 0x12345678):
        start = crc32_before_zeros(state, count)
        assert crc32_state_py(start, bytes(count)) == state
        msg = bytes(range(7))
        assert crc32_state_py(start, bytes(count) + msg) == crc32_state_py(state, msg)

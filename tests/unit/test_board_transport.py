"""host_driver.board_transport against a Python model of BoardSoC's bridge
address space (hw/board/soc.py): the board block, the MAC block, NIC
registers and the host-memory window, behind the byte-level UART bridge
model of tests/unit/test_board_uart_transport.py.

Checks: discovery of the window through the board block, host memory in
both modes (blocking port: at once; async port: writes posted until the
next register access or idle, reads refreshed by idle), the order of posted
writes before a doorbell, read-modify-write of partial words that keeps
bytes the NIC wrote, out-of-window accesses refused, and the driver's CQ
polling loop seeing a completion that the "NIC" writes while it waits.
"""

import asyncio
import struct

import pytest

from host_driver.board_transport import BoardError, BoardTransport
from host_driver.driver import CQE_BYTES, CompletionQueue
from host_driver.uart_transport import AsyncUARTTransport, UARTTransport
from hw.board.regs import MAC_TYPE_ID
from hw.board.soc import (
    BOARD_BASE,
    BOARD_TYPE_ID,
    BOARD_VERSION,
    MAC_BASE,
    MEM_BASE,
    board_register_map,
)
from tests.models.uart_bridge import BridgeModel

MEM_SIZE = 0x4000


class SocModel(BridgeModel):
    """The bridge with BoardSoC's address map behind it; ``log`` records every
    access as (op, addr, value)."""

    def __init__(self, mem_size=MEM_SIZE, dma_base=0):
        super().__init__()
        regs = board_register_map()
        for name, value in (("ID", BOARD_TYPE_ID << 16 | BOARD_VERSION), ("NEXT", MAC_BASE),
                            ("MEM_BASE", MEM_BASE), ("MEM_SIZE", mem_size),
                            ("MEM_DMA_BASE_LO", dma_base & 0xFFFFFFFF),
                            ("MEM_DMA_BASE_HI", dma_base >> 32), ("CLK_FREQ", 50_000_000)):
            self.regs[BOARD_BASE + regs[name].offset] = value
        self.regs[MAC_BASE] = MAC_TYPE_ID << 16 | 1
        self.regs[MAC_BASE + 4] = 0
        self.log = []

    def write(self, data: bytes):
        if len(data) in (6, 10):
            addr = int.from_bytes(data[1:5], "big")
            value = int.from_bytes(data[5:9], "big") if len(data) == 10 else None
            self.log.append(("W" if value is not None else "R", addr, value))
        super().write(data)

    # the NIC's side of the window
    def dma_write(self, offset: int, data: bytes):
        for i, b in enumerate(data):
            word = MEM_BASE + ((offset + i) & ~3)
            shift = 8 * ((offset + i) % 4)
            self.regs[word] = self.regs.get(word, 0) & ~(0xFF << shift) | b << shift

    def dma_read(self, offset: int, n: int) -> bytes:
        return bytes((self.regs.get(MEM_BASE + ((offset + i) & ~3), 0) >> 8 * ((offset + i) % 4))
                     & 0xFF for i in range(n))


class AsyncPort:
    """The model behind coroutine read/write, as a cocotb UART model is."""

    def __init__(self, model):
        self.model = model

    async def write(self, data):
        self.model.write(data)

    async def read(self, n):
        return self.model.read(n)


def test_blocking_port_discovers_and_reaches_memory_at_once():
    model = SocModel()
    t = BoardTransport._run_sync_static(BoardTransport.connect(UARTTransport(model)))
    assert not t.is_async
    assert t.window.mem_base == MEM_BASE and t.window.size == MEM_SIZE
    assert t.mac is not None and t.mac.base == MAC_BASE
    addr = t.mem.alloc(64)
    assert 0x1000 <= addr < MEM_SIZE
    t.mem.write(addr, bytes(range(16)))
    assert model.dma_read(addr, 16) == bytes(range(16))  # no flush needed
    model.dma_write(addr + 4, b"\xaa\xbb")
    assert t.mem.read(addr, 8) == bytes([0, 1, 2, 3, 0xAA, 0xBB, 6, 7])
    # a partial word keeps the bytes the NIC wrote around it
    model.dma_write(addr + 32, b"\x11\x22\x33\x44")
    t.mem.write(addr + 33, b"\x99")
    assert model.dma_read(addr + 32, 4) == b"\x11\x99\x33\x44"
    with pytest.raises(BoardError, match="outside the window"):
        t.mem.read(MEM_SIZE - 2, 4)
    # register access goes to the NIC's space at 0
    asyncio.run(t.write32(0x10, 0x1234))
    assert model.regs[0x10] == 0x1234
    assert asyncio.run(t.read32(0x10)) == 0x1234


def test_async_port_posts_writes_and_refreshes_reads_on_idle():
    model = SocModel()
    waited = []

    async def wait_cycles(n):
        waited.append(n)

    async def main():
        t = await BoardTransport.connect(AsyncUARTTransport(AsyncPort(model)),
                                         wait_cycles=wait_cycles)
        assert t.is_async
        addr = t.mem.alloc(128)
        wqe = bytes(range(1, 65))
        t.mem.write(addr, wqe)
        assert model.dma_read(addr, 64) == bytes(64)  # posted
        model.log.clear()
        await t.write32(0x2000, 7)  # the doorbell
        assert model.dma_read(addr, 64) == wqe
        writes = [entry for entry in model.log if entry[0] == "W"]
        assert writes[-1] == ("W", 0x2000, 7)
        assert [a for _, a, _ in writes[:-1]] == [MEM_BASE + addr + 4 * i for i in range(16)]
        # reads: the local copy until idle fetches the words read since
        model.dma_write(addr + 64, b"\x5a" * 8)
        assert t.mem.read(addr + 64, 8) == bytes(8)
        await t.idle(100)
        assert waited == [100]
        assert t.mem.read(addr + 64, 8) == b"\x5a" * 8
        assert await t.mem_read(addr + 64, 4) == b"\x5a" * 4
        # partial-word posted write keeps the NIC's neighbouring bytes
        model.dma_write(addr + 100, b"\x01\x02\x03\x04")
        t.mem.write(addr + 102, b"\xee")
        await t.idle(1)
        assert model.dma_read(addr + 100, 4) == b"\x01\x02\xee\x04"
        await t.mem_write(addr + 120, b"\xc3" * 8)
        assert model.dma_read(addr + 120, 8) == b"\xc3" * 8

    asyncio.run(main())


def test_async_port_cq_polling_sees_the_nic_write():
    """CompletionQueue.wait (poll, idle, poll) over the async port: the CQE
    the NIC writes during the wait is found after an idle."""
    model = SocModel()
    polls = []

    async def wait_cycles(n):
        polls.append(n)
        if len(polls) == 3:  # the NIC completes while the driver polls
            cqe = bytearray(struct.pack("<QIIIBB", 0xABCD, 64, 0, 0, 0, 0).ljust(CQE_BYTES, b"\0"))
            cqe[0x17] |= 0x80
            model.dma_write(cq.addr, bytes(cqe))

    class FakeDevice:
        def __init__(self, transport):
            self.transport, self.mem = transport, transport.mem

    async def main():
        nonlocal cq
        t = await BoardTransport.connect(AsyncUARTTransport(AsyncPort(model)),
                                         wait_cycles=wait_cycles)
        cq = CompletionQueue(FakeDevice(t), 2)
        got = await cq.wait(1, timeout_cycles=10_000, poll_cycles=100)
        assert got[0].wr_id == 0xABCD and got[0].byte_len == 64
        assert len(polls) == 3
        assert model.dma_read(cq.addr + CQE_BYTES, CQE_BYTES) == bytes(CQE_BYTES)

    cq = None
    asyncio.run(main())


def test_connect_refuses_a_board_without_the_board_block():
    model = SocModel()
    model.regs[BOARD_BASE] = 0x0001_0001
    with pytest.raises(BoardError, match="no board block"):
        BoardTransport._run_sync_static(BoardTransport.connect(UARTTransport(model)))
    with pytest.raises(ValueError, match="cocotb clock"):
        BoardTransport(AsyncUARTTransport(AsyncPort(model)), mem_base=MEM_BASE,
                       mem_size=MEM_SIZE)

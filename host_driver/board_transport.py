"""Driver transport for BoardSoC (hw/board/soc.py): the NIC on a board, reached
only through the UART-to-AXI4-Lite bridge.

``BoardTransport`` gives the host driver (host_driver/driver.py) what every
transport gives (host_driver/transport.py): ``read32``/``write32`` on the
NIC's CSR space, ``mem`` (host memory with an allocator) and ``idle``.
Host memory is BoardSoC's BRAM window: the NIC's DMA reaches it at DMA
address ``dma_base + offset``, the host through the bridge at ``mem_base +
offset``, one 32-bit little-endian word per request. ``connect`` finds the
window by reading the board block (type 0x0011) at ``BOARD_BASE``, so
nothing about the build is hard-coded.

Two kinds of port, one API:

* A blocking ``UARTTransport`` (pyserial on a real board: ``open_serial``).
  ``mem.read``/``mem.write`` go to the board at once; ``idle(cycles)``
  sleeps for that many core clock cycles (``asyncio.sleep``).
* An ``AsyncUARTTransport`` (coroutine read/write: a cocotb UART model).
  The driver calls ``mem.read``/``mem.write`` without ``await``, so they
  cannot reach the board at once. Writes are posted: kept in a local copy
  and sent, in address order, before the next register access or ``idle``
  (the driver's WQE-then-doorbell order holds, as a write barrier before an
  MMIO write does on a real host). Reads return the local copy as of the
  last ``idle``: every word read since the previous ``idle`` is fetched
  again from the board at the end of the next one, so a polling loop (``CompletionQueue.
  wait``: poll, idle, poll) sees what the NIC wrote. ``await mem_read()`` /
  ``await mem_write()`` reach the board at once, in both modes.

A write of part of a word reads the word first (read-modify-write), so
bytes the NIC wrote next to it are kept.
"""

from __future__ import annotations

import asyncio
import inspect

from host_driver.transport import HostMemory
from host_driver.uart_transport import AsyncUARTTransport, UARTTransport, open_serial
from hw.board.regs import MAC_TYPE_ID, mac_register_map
from hw.board.soc import BOARD_BASE, BOARD_TYPE_ID, NIC_BASE, board_register_map

__all__ = ["BoardError", "BoardTransport", "BridgeRegisters"]

WORD = 4


class BoardError(IOError):
    """The board is not a BoardSoC this transport knows, or an access is out of range."""


class BridgeRegisters:
    """One register block at an absolute bridge address, registers by name
    (``board_register_map`` / ``mac_register_map``)."""

    def __init__(self, transport: BoardTransport, base: int, regmap):
        self.transport, self.base, self.map = transport, base, regmap

    async def read(self, name: str, index: int = 0) -> int:
        return await self.transport.raw_read32(self.base + self.map[name].addr(index))

    async def write(self, name: str, value: int, index: int = 0) -> None:
        if self.map[name].access == "RO":
            raise ValueError(f"{self.map.name}.{name} is read only")
        await self.transport.raw_write32(self.base + self.map[name].addr(index), value)


class _Window:
    """The BRAM window as ``HostMemory``'s backing: DMA addresses in, bridge words out.

    Keeps a local copy of the window (``shadow``), the bytes written and not
    yet sent (``dirty``) and the words read since the last refresh
    (``watched``); what is done with them depends on the port (see the
    module docstring)."""

    def __init__(self, transport: BoardTransport, mem_base: int, size: int, dma_base: int):
        self.transport = transport
        self.mem_base, self.size, self.dma_base = mem_base, size, dma_base
        self.shadow = bytearray(size)
        self.dirty: set[int] = set()  # byte offsets
        self.watched: set[int] = set()  # word offsets

    def offset(self, addr: int, n: int) -> int:
        off = addr - self.dma_base
        if n < 0 or off < 0 or off + n > self.size:
            raise BoardError(f"host memory access 0x{addr:x}+{n} is outside the window "
                             f"0x{self.dma_base:x}..0x{self.dma_base + self.size:x}")
        return off

    # ---- HostMemory's backing interface (called without await) ------------------------
    def read(self, addr: int, n: int) -> bytes:
        off = self.offset(addr, n)
        t = self.transport
        if not t.is_async:
            return t._run_sync(self._fetch(off, n))
        self.watched.update(range(off & ~3, off + n, WORD))
        return bytes(self.shadow[off:off + n])

    def write(self, addr: int, data: bytes) -> None:
        off = self.offset(addr, len(data))
        self.shadow[off:off + len(data)] = data
        self.dirty.update(range(off, off + len(data)))
        t = self.transport
        if not t.is_async:
            t._run_sync(self.flush())

    # ---- the bridge side ------------------------------------------------------------------
    async def _fetch(self, off: int, n: int) -> bytes:
        t = self.transport
        for word in range(off & ~3, off + n, WORD):
            value = await t._bus_read32(self.mem_base + word)
            fresh = value.to_bytes(WORD, "little")
            for i in range(WORD):
                if word + i not in self.dirty:
                    self.shadow[word + i] = fresh[i]
        return bytes(self.shadow[off:off + n])

    async def flush(self) -> None:
        """Send every dirty byte, a word at a time, in address order."""
        t = self.transport
        while self.dirty:
            word = min(self.dirty) & ~3
            lanes = [word + i in self.dirty for i in range(WORD)]
            if not all(lanes):
                current = (await t._bus_read32(self.mem_base + word)).to_bytes(WORD, "little")
                for i in range(WORD):
                    if not lanes[i]:
                        self.shadow[word + i] = current[i]
            value = int.from_bytes(self.shadow[word:word + WORD], "little")
            await t._bus_write32(self.mem_base + word, value)
            self.dirty.difference_update(range(word, word + WORD))

    async def refresh(self) -> None:
        """Fetch again every word read since the last refresh."""
        watched, self.watched = sorted(self.watched), set()
        for word in watched:
            await self._fetch(word, WORD)


class BoardTransport:
    """The host driver's transport to a BoardSoC over its UART bridge.

    ``uart`` is a ``UARTTransport`` (blocking) or an ``AsyncUARTTransport``;
    ``mem_base``/``mem_size``/``dma_base`` place the host-memory window
    (``connect`` reads them from the board); ``clk_freq_hz`` is the core
    clock (``idle`` on a real board); ``clock`` the cocotb clock signal
    (``idle`` in simulation, async port only), or ``wait_cycles`` an async
    callable that lets that many cycles pass; ``alloc_base`` the first byte
    of the window the allocator hands out.
    """

    def __init__(self, uart, *, mem_base: int, mem_size: int, dma_base: int = 0,
                 clk_freq_hz: int = 125_000_000, clock=None, wait_cycles=None,
                 nic_base: int = NIC_BASE, alloc_base: int = 0x1000):
        if isinstance(uart, AsyncUARTTransport) or inspect.iscoroutinefunction(
                getattr(uart, "read32", None)):
            self.is_async = True
        elif isinstance(uart, UARTTransport) or callable(getattr(uart, "read32", None)):
            self.is_async = False
        else:
            raise ValueError(f"uart must be a UARTTransport or an AsyncUARTTransport, "
                             f"not {uart!r}")
        if self.is_async and clock is None and wait_cycles is None:
            raise ValueError("an async port (simulation) needs the cocotb clock (or "
                             "wait_cycles) for idle()")
        if mem_size < alloc_base + WORD:
            raise ValueError(f"mem_size 0x{mem_size:x} leaves nothing above alloc_base "
                             f"0x{alloc_base:x}")
        self.uart, self.clock, self.clk_freq_hz = uart, clock, clk_freq_hz
        self._wait_cycles = wait_cycles
        self.nic_base = nic_base
        self.window = _Window(self, mem_base, mem_size, dma_base)
        self.mem = HostMemory(self.window, dma_base + mem_size, base=dma_base + alloc_base)
        self.board = BridgeRegisters(self, BOARD_BASE, board_register_map(mem_size=mem_size))
        self.mac: BridgeRegisters | None = None

    # ---- discovery ------------------------------------------------------------------------
    @classmethod
    async def connect(cls, uart, *, clock=None, wait_cycles=None, board_base: int = BOARD_BASE,
                      alloc_base: int = 0x1000) -> BoardTransport:
        """Read the board block at ``board_base`` and return a transport on its window."""
        is_async = inspect.iscoroutinefunction(getattr(uart, "read32", None))

        async def read(addr):
            return await uart.read32(addr) if is_async else uart.read32(addr)

        regs = board_register_map()
        ident = await read(board_base + regs["ID"].offset)
        if ident >> 16 != BOARD_TYPE_ID:
            raise BoardError(f"no board block at 0x{board_base:08x}: ID 0x{ident:08x}, "
                             f"expected type 0x{BOARD_TYPE_ID:04x}")
        values = {name: await read(board_base + regs[name].offset)
                  for name in ("MEM_BASE", "MEM_SIZE", "MEM_DMA_BASE_LO", "MEM_DMA_BASE_HI",
                               "CLK_FREQ", "NEXT")}
        t = cls(uart, mem_base=values["MEM_BASE"], mem_size=values["MEM_SIZE"],
                dma_base=values["MEM_DMA_BASE_LO"] | values["MEM_DMA_BASE_HI"] << 32,
                clk_freq_hz=values["CLK_FREQ"], clock=clock, wait_cycles=wait_cycles,
                alloc_base=alloc_base)
        next_block, seen = values["NEXT"], {board_base}
        while next_block and next_block not in seen:
            seen.add(next_block)
            header = await read(next_block)
            if header >> 16 == MAC_TYPE_ID:
                t.mac = BridgeRegisters(t, next_block, mac_register_map())
            next_block = await read(next_block + 4)
        return t

    @classmethod
    def open_serial(cls, port: str, baud: int = 115200, **kwargs) -> BoardTransport:
        """A transport on a real board behind a serial port (needs pyserial)."""
        return cls._run_sync_static(cls.connect(open_serial(port, baud, **kwargs)))

    # ---- the driver's interface ---------------------------------------------------------------
    async def read32(self, addr: int) -> int:
        return await self.raw_read32(self.nic_base + addr)

    async def write32(self, addr: int, value: int) -> None:
        await self.raw_write32(self.nic_base + addr, value)

    async def idle(self, cycles: int) -> None:
        """Let ``cycles`` core cycles pass. In simulation, the posted host-memory
        writes are sent first, and the words read since the last idle are
        fetched again afterwards."""
        if self.is_async:
            await self.window.flush()
            if self._wait_cycles is not None:
                await self._wait_cycles(cycles)
            else:
                from cocotb.triggers import ClockCycles

                await ClockCycles(self.clock, cycles)
            await self.window.refresh()
        else:
            await asyncio.sleep(cycles / self.clk_freq_hz)

    # ---- host memory, at once -------------------------------------------------------------------
    async def mem_read(self, addr: int, n: int) -> bytes:
        """Read ``n`` bytes of host memory from the board now."""
        await self.window.flush()
        return await self.window._fetch(self.window.offset(addr, n), n)

    async def mem_write(self, addr: int, data: bytes) -> None:
        """Write host memory on the board now."""
        self.mem.write(addr, data)
        await self.window.flush()

    # ---- raw bridge access (absolute addresses) --------------------------------------------------
    async def raw_read32(self, addr: int) -> int:
        """A register read at a bridge address, after the posted host-memory writes."""
        await self.window.flush()
        return await self._bus_read32(addr)

    async def raw_write32(self, addr: int, value: int) -> None:
        """A register write at a bridge address, after the posted host-memory writes."""
        await self.window.flush()
        await self._bus_write32(addr, value)

    async def _bus_read32(self, addr: int) -> int:
        return await self.uart.read32(addr) if self.is_async else self.uart.read32(addr)

    async def _bus_write32(self, addr: int, value: int) -> None:
        if self.is_async:
            await self.uart.write32(addr, value)
        else:
            self.uart.write32(addr, value)

    # ---- running the async helpers on a blocking port -------------------------------------
    def _run_sync(self, coro):
        return self._run_sync_static(coro)

    @staticmethod
    def _run_sync_static(coro):
        """Run a coroutine that never suspends (every await reaches a blocking
        port) to its end, without an event loop."""
        try:
            coro.send(None)
        except StopIteration as done:
            return done.value
        coro.close()
        raise RuntimeError("a blocking-port access suspended; use an AsyncUARTTransport")

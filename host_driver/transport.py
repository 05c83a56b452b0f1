"""Transports for the host-driver model (host_driver/driver.py).

A transport gives the driver three things:

- ``await read32(addr)`` / ``await write32(addr, value)`` on the NIC's CSR space;
- ``mem``: host memory with ``alloc(size, align)``, ``read(addr, n)`` and
  ``write(addr, data)`` (the NIC reaches the same bytes over its DMA master);
- ``await idle(cycles)``: let the NIC run for a while (polling loops);
- optionally ``irq_high()``: the level of the NIC's interrupt line now, or
  None when the transport has none (the driver then reads the causes).

``CocotbTransport`` drives a NicCore in a cocotb testbench: cocotbext-axi's
``AxiLiteMaster`` on ``s_axil`` and an ``AxiRam`` on ``m_axi``.
"""

from __future__ import annotations

__all__ = ["HostMemory", "CocotbTransport"]


class HostMemory:
    """Byte-addressed host memory with a first-fit allocator.

    ``backing`` has ``read(addr, n) -> bytes`` and ``write(addr, data)``
    (cocotbext-axi's ``AxiRam`` does); allocations live in [base, base + size).
    """

    def __init__(self, backing, size: int, base: int = 0x1000):
        if base <= 0 or base >= size:
            raise ValueError(f"base 0x{base:x} must be inside the memory (0x{size:x} bytes) "
                             f"and not 0")
        self.backing, self.size = backing, size
        self._free = [(base, size - base)]  # (addr, length), sorted
        self._used: dict[int, int] = {}

    def alloc(self, size: int, align: int = 64) -> int:
        if size <= 0 or align <= 0 or align & (align - 1):
            raise ValueError(f"need size > 0 and a power-of-two alignment, not {size}, {align}")
        for i, (addr, length) in enumerate(self._free):
            start = (addr + align - 1) & ~(align - 1)
            if start + size <= addr + length:
                pieces = [(addr, start - addr), (start + size, addr + length - start - size)]
                self._free[i:i + 1] = [p for p in pieces if p[1] > 0]
                self._used[start] = size
                return start
        raise MemoryError(f"host memory: no {size} bytes aligned to {align} left")

    def free(self, addr: int) -> None:
        size = self._used.pop(addr)
        self._free.append((addr, size))
        self._free.sort()
        merged = []
        for a, n in self._free:
            if merged and merged[-1][0] + merged[-1][1] == a:
                merged[-1] = (merged[-1][0], merged[-1][1] + n)
            else:
                merged.append((a, n))
        self._free = merged

    def read(self, addr: int, n: int) -> bytes:
        return bytes(self.backing.read(addr, n))

    def write(self, addr: int, data: bytes) -> None:
        self.backing.write(addr, bytes(data))


class CocotbTransport:
    """A NicCore in a cocotb testbench: ``axil`` is an ``AxiLiteMaster`` on its
    ``s_axil``, ``ram`` an ``AxiRam`` of ``ram_size`` bytes on its ``m_axi``
    (or anything with the same ``read``/``write``). ``clock_ns``: the clock's
    period, to let ``idle`` pass as one timer instead of counting edges
    (Python then wakes once per poll, not once per cycle). ``irq``: the
    NIC's ``irq`` port, for ``irq_high``."""

    def __init__(self, axil, ram, ram_size: int, clock, clock_ns: float | None = None,
                 irq=None):
        self.axil, self.clock, self.clock_ns, self.irq = axil, clock, clock_ns, irq
        self.mem = HostMemory(ram, ram_size)

    def irq_high(self) -> bool | None:
        """The ``irq`` port's level (None without one): a port read, no CSR access."""
        return None if self.irq is None else bool(self.irq.value)

    async def read32(self, addr: int) -> int:
        return await self.axil.read_dword(addr)

    async def write32(self, addr: int, value: int) -> None:
        await self.axil.write_dword(addr, value)

    async def idle(self, cycles: int) -> None:
        from cocotb.triggers import ClockCycles, Timer

        if self.clock_ns is not None and cycles > 0:
            await Timer(cycles * self.clock_ns, unit="ns")
        else:
            await ClockCycles(self.clock, cycles)

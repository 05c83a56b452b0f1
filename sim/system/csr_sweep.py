"""Writes to the CSR space that must change nothing: every word address of a
NicCore's AXI4-Lite space that no register decodes, and every read-only one.

The addresses come from the RegisterMaps that docs/registers.md is generated
from (through the driver's discovered blocks, ``Device.info/tx/rx/rel``). A
register is writable when its access is RW or WO; every other word, in a
block's window or beyond the last block, is a target of the sweep.

``snapshot`` reads every register that a read does not change (all but RP,
a read that pops a queue; RC reads clear, so the snapshot reads them twice
and keeps the second value, which a change after the first read would
show).
"""

from __future__ import annotations

__all__ = ["WRITABLE", "register_words", "sweep_targets", "sweep_value", "write_all", "snapshot",
           "diff"]

WRITABLE = ("RW", "WO")


def _blocks(dev):
    return (dev.info, dev.tx, dev.rx, dev.rel)


def register_words(dev) -> dict[int, tuple[str, str, int]]:
    """Every word a register occupies: address -> (block, register, index),
    with the register's access in ``dev``'s maps."""
    words = {}
    for blk in _blocks(dev):
        for reg in blk.map.registers:
            for i in range(reg.count):
                words[blk.base + reg.addr(i)] = (blk.name, reg.name, i)
    return words


def _access(dev):
    return {blk.base + reg.addr(i): reg.access for blk in _blocks(dev)
            for reg in blk.map.registers for i in range(reg.count)}


def sweep_targets(dev, csr_addr_width: int) -> list[int]:
    """The word addresses of the whole CSR space (``csr_addr_width`` bits)
    that are unmapped or not writable, ascending."""
    access = _access(dev)
    return [a for a in range(0, 1 << csr_addr_width, 4) if access.get(a) not in WRITABLE]


def sweep_value(addr: int) -> int:
    """All ones at even words, all zeros at odd ones: a register reached through
    aliases of both parities changes whatever it holds."""
    return 0 if addr & 4 else 0xFFFF_FFFF


async def write_all(axil, targets, *, batch: int = 256) -> None:
    """``sweep_value`` to every address of ``targets`` through a cocotbext-axi
    ``AxiLiteMaster``, ``batch`` writes queued at a time (the NIC's bridge takes
    one per 3 cycles), each answered OKAY."""
    for first in range(0, len(targets), batch):
        events = [axil.init_write(addr, sweep_value(addr).to_bytes(4, "little"))
                  for addr in targets[first:first + batch]]
        for event in events:
            await event.wait()
            assert event.data.resp == 0, f"write answered {event.data.resp}"


async def snapshot(dev) -> dict[tuple[str, str, int], int]:
    """The value of every register a read leaves as it is, by (block, name, index)."""
    access = _access(dev)
    out = {}
    for addr, key in register_words(dev).items():
        if access[addr] in ("RP", "WO"):
            continue
        value = await dev.transport.read32(addr)
        if access[addr] == "RC":
            value = await dev.transport.read32(addr)
        out[key] = value
    return out


def diff(before: dict, after: dict) -> list[str]:
    """The registers whose values differ, as text."""
    return [f"{blk}.{name}[{i}]: {before[(blk, name, i)]:#x} -> {after[(blk, name, i)]:#x}"
            for (blk, name, i) in before if before[(blk, name, i)] != after[(blk, name, i)]]

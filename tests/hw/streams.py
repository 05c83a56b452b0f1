"""cocotb drivers for ``amaranth.lib.stream`` ports, and Amaranth layout
records as Python dicts: the one copy that the block benches share.

A port ``<prefix>`` of an Amaranth component appears in its Verilog as
``<prefix>__valid``, ``<prefix>__ready`` and ``<prefix>__payload``.

- ``StreamSource`` holds ``valid`` with the head of its queue until ``ready``;
  with ``idle`` > 0 it leaves ``valid`` low on a cycle with that probability
  (drawn from ``rng``), to vary the input's timing.
- ``StreamSink`` records every handshake as ``(cycle, value)`` in ``items``,
  and the value in ``queue``; ``pause``, an
  iterator of booleans, drops ``ready`` for a cycle whenever it yields true.
- ``pack`` and ``decode`` turn a dict of field values into a layout's integer
  and back (nested layouts as nested dicts).
"""

from __future__ import annotations

from collections import deque

import cocotb
from cocotb.triggers import RisingEdge

__all__ = ["StreamSource", "StreamSink", "pack", "decode"]


def pack(layout, values: dict) -> int:
    word = 0
    for name, field in layout:
        if name not in values:
            continue
        v = values[name]
        if hasattr(field.shape, "members"):
            v = pack(field.shape, v)
        word |= (int(v) & ((1 << field.width) - 1)) << field.offset
    return word


def decode(layout, value: int) -> dict:
    out = {}
    for name, field in layout:
        raw = (value >> field.offset) & ((1 << field.width) - 1)
        out[name] = decode(field.shape, raw) if hasattr(field.shape, "members") else raw
    return out


def _port(dut, prefix):
    return (getattr(dut, f"{prefix}__valid"), getattr(dut, f"{prefix}__ready"),
            getattr(dut, f"{prefix}__payload"))


class StreamSource:
    """Drives ``<prefix>`` from ``queue`` (integers; ``send`` packs a dict with
    ``layout``). ``sent`` counts handshakes, ``accept_cycles`` gives the cycle
    of each (cycles counted from the source's start)."""

    def __init__(self, dut, prefix, layout=None, *, clk=None, idle=0.0, rng=None):
        self.valid, self.ready, self.payload = _port(dut, prefix)
        self.clk = clk if clk is not None else dut.clk
        self.layout = layout
        self.idle = idle
        self.rng = rng  # drawn once per cycle an item could be offered, if given
        self.queue = deque()
        self.sent = 0
        self.cycle = 0
        self.accept_cycles = []
        self.active = False
        self.valid.value = 0
        cocotb.start_soon(self._run())

    @property
    def accepted(self):
        return self.sent

    @accepted.setter
    def accepted(self, value):
        self.sent = value

    def send(self, values: dict):
        self.queue.append(pack(self.layout, values))

    def empty(self):
        return not self.queue and not self.active

    async def drain(self):
        while self.queue:
            await RisingEdge(self.clk)

    async def _run(self):
        while True:
            await RisingEdge(self.clk)
            self.cycle += 1
            if self.active and int(self.ready.value):
                self.queue.popleft()
                self.sent += 1
                self.accept_cycles.append(self.cycle)
                self.active = False
            if self.queue and not self.active and (
                    self.rng is None or self.rng.random() >= self.idle):
                self.payload.value = self.queue[0]
                self.active = True
            self.valid.value = int(self.active)


class StreamSink:
    """Takes ``<prefix>``'s items into ``items`` as ``(cycle, value)``, the
    value decoded with ``layout`` if one is given; ``callback`` (the test's)
    and each of ``observers`` (the bench's) see each."""

    def __init__(self, dut, prefix, layout=None, pause=None, *, clk=None, ready=1):
        self.valid, self.ready, self.payload = _port(dut, prefix)
        self.clk = clk if clk is not None else dut.clk
        self.layout = layout
        self.pause = pause
        self.items = []
        self.queue = deque()  # the values again, for a consumer that pops them
        self.cycle = 0
        self.callback = None
        self.observers = []  # functions that see each value too (coverage sampling)
        self.ready.value = ready
        cocotb.start_soon(self._run())

    def set_pause_generator(self, generator=None):
        self.pause = generator

    def values(self):
        return [v for _, v in self.items]

    records = values

    async def _run(self):
        while True:
            await RisingEdge(self.clk)
            self.cycle += 1
            if int(self.ready.value) and int(self.valid.value):
                raw = self.payload.value.to_unsigned()
                value = decode(self.layout, raw) if self.layout is not None else raw
                self.items.append((self.cycle, value))
                self.queue.append(value)
                if self.callback:
                    self.callback(value)
                for observe in self.observers:
                    observe(value)
            self.ready.value = 0 if (self.pause is not None and next(self.pause)) else 1

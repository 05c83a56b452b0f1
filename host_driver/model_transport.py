"""A transport for the host driver backed by the model NIC (sim/nicmodel/).

``ModelTransport(nic)`` gives ``host_driver.driver`` what ``CocotbTransport``
gives it against the RTL, so the same driver code runs on both:

- ``await read32(addr)`` / ``await write32(addr, value)``: one CSR access of
  the ``ModelNic`` (each lets the NIC's ``csr_access_cycles`` pass first);
- ``mem``: the NIC's host memory (``HostMemory``: ``alloc``, ``read``, ``write``);
- ``await idle(cycles)``: run the model for ``cycles`` x the NIC clock period
  (``1 / clk_freq_hz``, the frequency the device-info block reports).

The model runs synchronously inside these calls; nothing else has to drive it,
so a plain ``asyncio.run(...)`` runs a driver script. Several transports on
NICs of one ``ModelFabric`` share its clock: an ``idle`` on any of them lets
the whole fabric run.
"""

from __future__ import annotations

__all__ = ["ModelTransport"]


class ModelTransport:
    def __init__(self, nic):
        self.nic = nic
        self.mem = nic.mem

    async def read32(self, addr: int) -> int:
        return self.nic.read32(addr)

    async def write32(self, addr: int, value: int) -> None:
        self.nic.write32(addr, value)

    async def idle(self, cycles: int) -> None:
        if cycles < 0:
            raise ValueError(f"cycles must be >= 0, not {cycles!r}")
        self.nic.idle(cycles)

    @property
    def now_ns(self) -> float:
        """Model time, ns (the counterpart of cocotb's ``get_sim_time``)."""
        return self.nic.fabric.now

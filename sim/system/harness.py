"""Two-NIC cocotb harness: TwoNicTop (tests/system/top.py) with, per NIC, an
AxiLiteMaster on its CSR port, an AxiRam as its host memory and the host
driver (host_driver/driver.py) on a CocotbTransport; the MAC ports are joined
by the fabric model (tests/system/fabric.py).

``SystemTB.connect()`` brings one QP on each NIC to RTS, each the other's
peer, and registers a receive buffer on each as a memory region.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles
from cocotbext.axi import (
    AxiBus,
    AxiLiteBus,
    AxiLiteMaster,
    AxiRam,
    AxiStreamBus,
    AxiStreamSink,
    AxiStreamSource,
)

from host_driver.driver import Device, EvProfile, MemoryRegion, QueuePair
from host_driver.transport import CocotbTransport
from tests.system.fabric import Fabric

__all__ = ["SystemTB", "Endpoint", "CLK_NS", "RAM_SIZE"]

CLK_NS = 8
RAM_SIZE = 1 << 23  # 8 MiB of host memory per NIC
MACS = ("02:00:00:00:00:01", "02:00:00:00:00:02")
IPS = ("10.0.0.1", "10.0.0.2")
EVS = [EvProfile.explicit(range(0xC000, 0xC008)), EvProfile.explicit(range(0xD000, 0xD008))]


@dataclass
class Endpoint:
    """One NIC and the objects the driver made on it."""

    dev: Device
    ram: AxiRam
    qp: QueuePair | None = None
    mr: MemoryRegion | None = None
    recv_buf: int = 0
    send_buf: int = 0


class SystemTB:
    def __init__(self, dut, *, seed: int = 1, delay_ns: float = 400.0, num_paths: int = 8):
        self.dut = dut
        for name in ("s_axil", "m_axi", "mac_tx", "mac_rx"):
            for i in range(2):
                logging.getLogger(f"cocotb.{dut._name}.n{i}_{name}").setLevel(logging.WARNING)
        cocotb.start_soon(Clock(dut.clk, CLK_NS, unit="ns").start())
        self.rng = random.Random(seed)
        self.ends: list[Endpoint] = []
        sinks, sources = [], []
        for i in range(2):
            axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, f"n{i}_s_axil", bus_separator="__"),
                                 dut.clk, dut.rst)
            ram = AxiRam(AxiBus.from_prefix(dut, f"n{i}_m_axi", bus_separator="__"), dut.clk,
                         dut.rst, size=RAM_SIZE)
            sinks.append(AxiStreamSink(
                AxiStreamBus.from_prefix(dut, f"n{i}_mac_tx", bus_separator="__"),
                dut.clk, dut.rst))
            sources.append(AxiStreamSource(
                AxiStreamBus.from_prefix(dut, f"n{i}_mac_rx", bus_separator="__"),
                dut.clk, dut.rst))
            transport = CocotbTransport(axil, ram, RAM_SIZE, dut.clk)
            self.ends.append(Endpoint(Device(transport), ram))
        self.fabric = Fabric(sinks, sources, num_paths=num_paths, delay_ns=delay_ns, seed=seed)

    async def reset(self):
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 8)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 8)
        self.fabric.start()

    async def init(self):
        await self.reset()
        for i, end in enumerate(self.ends):
            await end.dev.init()
            await end.dev.set_address(MACS[i], IPS[i])

    async def connect(self, *, buf_size: int = 1 << 20, sq_log2: int = 4, mtu: int = 1024,
                      timeout: int = 10, mpr: int = 2, evs=None, ack_n: int = 4,
                      ack_t: int = 256, probe_period: int = 0):
        """QP 0 of each NIC to RTS, bound to the other; a receive MR and a send
        buffer of ``buf_size`` bytes on each."""
        evs = evs or EVS
        for end in self.ends:
            dev = end.dev
            pd = dev.alloc_pd()
            send_cq = dev.create_cq(sq_log2)
            recv_cq = dev.create_cq(8)
            end.qp = await dev.create_qp(pd, send_cq, recv_cq, sq_log2=sq_log2)
            end.recv_buf = dev.mem.alloc(buf_size, align=4096)
            end.send_buf = dev.mem.alloc(buf_size, align=4096)
            dev.mem.write(end.recv_buf, bytes(buf_size))
            end.mr = await pd.reg_mr(end.recv_buf, buf_size)
            await end.qp.to_init()
            await dev.set_probe_period(probe_period)
        psns = [0x10, 0xFFFFF0]  # nic1 starts near the PSN wrap
        for i, end in enumerate(self.ends):
            peer = self.ends[1 - i]
            await end.qp.to_rtr(dest_qpn=peer.qp.qpn, peer_mac=MACS[1 - i], peer_ip=IPS[1 - i],
                                rq_psn=psns[1 - i], mpr=mpr, ack_n=ack_n, ack_t=ack_t)
        for i, end in enumerate(self.ends):
            await end.qp.to_rts(evs=evs[i], sq_psn=psns[i], mtu=mtu, timeout=timeout)

    def random_bytes(self, n: int) -> bytes:
        return self.rng.randbytes(n)

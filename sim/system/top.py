"""The two-NIC system top: two NicCores, each with its own DMA master (to its
own host memory) and its own AXI4-Lite CSR port; their MAC ports are joined
by the cocotb fabric model (tests/system/fabric.py), not in gateware.

Ports: ``n{i}_s_axil``, ``n{i}_m_axi``, ``n{i}_mac_tx``, ``n{i}_mac_rx`` and
``n{i}_irq`` for NIC i in 0, 1.
"""

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.axi import AXI4LiteSignature, AXI4Signature
from hw.nic import NicCore
from hw.stream import AXIStreamSignature

__all__ = ["NIC_PARAMS", "TwoNicTop", "BUILD_IDS"]

# A small NIC that the simulator builds in a few minutes: 2 QPs, 8 EVs (paths).
# The timer unit is 16 cycles (15.625 MHz), so retransmit timeouts are short.
NIC_PARAMS = dict(data_width=64, num_qps=2, evs_per_qp=8, sack_bits=64, max_mtu=1024,
                  mpr_max=256, num_mrs=2, window=64, inflight_depth=64,
                  clk_freq_hz=15_625_000)
BUILD_IDS = (0x5157_0000, 0x5157_0001)


class TwoNicTop(wiring.Component):
    def __init__(self, params=None):
        params = dict(NIC_PARAMS if params is None else params)
        self.nics = [NicCore(**params, build_id=build_id) for build_id in BUILD_IDS]
        nic = self.nics[0]
        members = {}
        for i in range(2):
            members[f"n{i}_s_axil"] = In(AXI4LiteSignature(nic.csr_addr_width, 32))
            members[f"n{i}_m_axi"] = Out(AXI4Signature(64, nic.data_width, nic.id_width))
            members[f"n{i}_mac_tx"] = Out(AXIStreamSignature(nic.data_width))
            members[f"n{i}_mac_rx"] = In(AXIStreamSignature(nic.data_width, user_width=1))
            members[f"n{i}_irq"] = Out(1)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        for i, nic in enumerate(self.nics):
            m.submodules[f"nic{i}"] = nic
            wiring.connect(m, wiring.flipped(getattr(self, f"n{i}_s_axil")), nic.s_axil)
            wiring.connect(m, nic.m_axi, wiring.flipped(getattr(self, f"n{i}_m_axi")))
            wiring.connect(m, nic.mac_tx, wiring.flipped(getattr(self, f"n{i}_mac_tx")))
            wiring.connect(m, wiring.flipped(getattr(self, f"n{i}_mac_rx")), nic.mac_rx)
            m.d.comb += getattr(self, f"n{i}_irq").eq(nic.irq)
        return m

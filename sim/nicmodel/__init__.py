"""A register-level model of NicCore on the golden model's transport and fabric.

``ModelNic`` answers the NIC's CSR space (the same ``RegisterMap``s the
gateware decodes: hw/nic/csr.py, hw/tx/regs.py, hw/rx/regs.py,
hw/reliability/registers.py, in NicCore's block order and window size) and
reaches host memory the way NicCore's DMA master does: it fetches 64-byte WQEs
from the send ring on a doorbell (hw/tx/layouts.py ``WQE_LAYOUT``), reads
payload from host memory when a packet leaves, places received payload at the
RETH VA after the MR table's R_Key and bounds check, and writes 32-byte CQEs
with phase bits into the send ring (reliability's format,
hw/reliability/completion.py) and the receive ring (RX's format,
hw/rx/cqe.py). The transport between two ModelNics is the golden model's
``MrcQp`` (sim/model/qp.py) on a ``sim.fabric`` multipath fabric, with the
hardware's rules where they differ from the model's (see docs/model.md,
"The model NIC").

Interface
---------
``ModelFabric(num_paths=8, delay_ns=400.0, gbps=1.0, seed=1, routing="explicit",
planes=1, core_gbps=None)``
    one event engine (time in ns) and ``planes`` planes of ``num_paths`` paths
    shared by the NICs attached to it; ``advance(ns)`` runs the model.
``ModelNic(params, fabric, build_id=0, mem_size=8 MiB, csr_access_cycles=4)``
    ``params`` are NicCore's (a dict like sim/system/top.py's ``NIC_PARAMS``:
    data_width, num_qps, evs_per_qp, sack_bits, max_mtu, mpr_max, num_mrs,
    window, inflight_depth, clk_freq_hz, and optionally num_planes and ipv6,
    which gives the IPv6 address registers and TX ``caps.ipv6``; the model's
    packets carry no addresses, so the family changes nothing else); bad
    parameters raise ValueError. On a fabric of one plane (the default), the
    NIC's planes are nominal: the device-info block reports ``num_planes``,
    but the EV entries keep no plane (the field reads 0) and every frame goes
    on the one plane, whose paths are the EVs', as the two-NIC system
    fabric treats the RTL's planes. On a fabric of planes
    (``ModelFabric(planes=n)``), each EV entry keeps the plane TX's entry is
    written with, and TX works as NicCore's: one data path, at the sum of
    the ports' rates, takes the QPs' packets in turn, each QP choosing the
    next GOOD EV after its cursor over every plane (an EV on a plane the
    NIC lacks: never), and the packet queues at that plane's port. The
    planes block (with ``num_planes`` above 1, so that the driver finds
    NicCore's chain) reads every link up and no link event; it counts each
    plane's frames sent and received on a fabric of planes, none on one
    plane.
    ``read32(addr)`` / ``write32(addr, value)``: one CSR access (each lets
    ``csr_access_cycles`` clock cycles pass first, as an AXI4-Lite access
    does); ``mem``: its host memory (``host_driver.transport.HostMemory``);
    ``clk_period_ns``; ``idle(cycles)``.

Timing is event-accurate, not cycle-accurate: packets take the fabric's
serialisation and propagation times, everything inside the NIC (WQE fetch,
DMA, CQE writes, ACK processing) takes no time.

Files: common.py (constants), fabric.py (ModelFabric), qp.py (the golden
model's QP, EV table and NIC with the hardware's rules), registers.py and
lifecycle.py (ModelNic's CSR behaviour and QP lifecycle), nic.py (ModelNic).
"""

from .common import NIC_PARAM_NAMES
from .fabric import ModelFabric
from .nic import ModelNic

__all__ = ["ModelFabric", "ModelNic", "NIC_PARAM_NAMES"]

"""``ModelNic``: NicCore's CSR space and DMA behaviour over the golden model
(sim/nicmodel/__init__.py)."""

from __future__ import annotations

from host_driver.transport import HostMemory
from hw.nic.core import BLOCK_ORDER, check_nic_params
from hw.nic.csr import device_info_register_map, host_view
from hw.nic.ev_load import ev_gen_register_map
from hw.nic.plane_status import plane_register_map
from hw.reliability.cc_defaults import (
    DEFAULT_BASE_RTT_NS,
    line_rate_bps,
    start_cwnd_packets,
    target_rtt_units,
)
from hw.reliability.nscc_path import nscc_register_words, nscc_reset_values
from hw.reliability.registers import register_map as rel_register_map
from hw.rx.regs import COUNTERS as RX_COUNTERS
from hw.rx.regs import rx_register_map
from hw.tx.regs import tx_register_map
from sim.model.qp import (
    RESET,
)

from .common import (
    NIC_OPTIONAL_PARAMS,
    NIC_PARAM_NAMES,
    _Ram,
)
from .fabric import ModelFabric
from .lifecycle import QpLifecycle
from .qp import _HwEvTable, _HwNicCore, _HwQp
from .registers import RegisterBehaviour


class ModelNic(RegisterBehaviour, QpLifecycle):
    """NicCore's CSR space and DMA behaviour over the golden model (module docstring)."""

    RESET_VALUES = {
        ("rx", "TRIM_DSCP"): 0x3F,
        ("reliability", "ev_loss_threshold"): 2, ("reliability", "cwnd_min"): 1,
        ("reliability", "cwnd_ai"): 256, ("reliability", "cwnd_ai_fast"): 1024,
        ("reliability", "cwnd_md_shift"): 1, ("reliability", "cwnd_trim_dec"): 1,
    }

    def __init__(self, params: dict, fabric: ModelFabric, *, build_id: int = 0,
                 mem_size: int = 1 << 23, csr_access_cycles: int = 4):
        params = dict(params)
        build_id = params.pop("build_id", build_id)
        missing = [n for n in NIC_PARAM_NAMES if n not in params]
        unknown = sorted(set(params) - set(NIC_PARAM_NAMES) - set(NIC_OPTIONAL_PARAMS))
        if missing or unknown:
            raise ValueError(f"NIC parameters: missing {missing}, unknown {unknown}; give "
                             f"exactly {list(NIC_PARAM_NAMES)}, and optionally "
                             f"{list(NIC_OPTIONAL_PARAMS)} (sim/system/top.py NIC_PARAMS)")
        check_nic_params(build_id=build_id, **params)
        if not isinstance(csr_access_cycles, int) or csr_access_cycles < 0:
            raise ValueError(f"csr_access_cycles must be an integer >= 0, "
                             f"not {csr_access_cycles!r}")
        self.params = params
        self.build_id = build_id
        self.fabric = fabric
        self.csr_access_cycles = csr_access_cycles
        self.clk_period_ns = 1e9 / params["clk_freq_hz"]
        nq, ne = params["num_qps"], params["evs_per_qp"]
        ipv6 = params.get("ipv6", False)
        self.maps = {
            "device_info": host_view(device_info_register_map()),
            "tx": host_view(tx_register_map(nq, ne, ipv6, params.get("ev_width", 16))),
            "rx": host_view(rx_register_map(nq, params["num_mrs"], ipv6=ipv6)),
            "reliability": host_view(rel_register_map(nq, ne, params["window"], ipv6,
                                                      params.get("ev_width", 16))),
            "ev_gen": host_view(ev_gen_register_map(params.get("ev_width", 16))),
        }
        # NicCore's chain: the planes block last, with planes
        self.block_order = BLOCK_ORDER
        if params.get("num_planes", 1) > 1:
            self.maps["planes"] = host_view(plane_register_map(params["num_planes"]))
            self.block_order = (*BLOCK_ORDER, "planes")
        # NicCore's windows: every block decodes at least 16 address bits
        self.block_bits = max(16, *((m.size - 1).bit_length() for m in self.maps.values()))
        self._by_name = {block: {r.name: r for r in m.registers} for block, m in self.maps.items()}
        self._fields = {(block, r.name): {f[0]: (f[1], f[2]) for f in r.fields}
                        for block, m in self.maps.items() for r in m.registers}
        self.decode = {}
        for name, regmap in self.maps.items():
            table = {}
            for reg in regmap.registers:
                for i in range(reg.count):
                    table[reg.addr(i)] = (reg, i)
            self.decode[name] = table
        self.store: dict[tuple[str, int], int] = {}
        for (block, reg), value in self.RESET_VALUES.items():
            self.store[(block, self.maps[block][reg].addr())] = value
        # the window's bounds, NSCC's start window and target (hw/reliability/cc_defaults.py)
        rel_map = self.maps["reliability"]
        self.store[("reliability", rel_map["cwnd_max"].addr())] = params["window"]
        self.store[("reliability", rel_map["cwnd_init"].addr())] = start_cwnd_packets(
            DEFAULT_BASE_RTT_NS, line_rate_bps(params["data_width"], params["clk_freq_hz"]),
            params["max_mtu"], params["window"])
        self.store[("reliability", rel_map["target_rtt"].addr())] = target_rtt_units(
            DEFAULT_BASE_RTT_NS, params["clk_freq_hz"])
        # NSCC's registers: off, its defaults (hw/reliability/nscc_path.py)
        for name, word in nscc_register_words(nscc_reset_values(
                params["clk_freq_hz"], params["data_width"], params["max_mtu"],
                DEFAULT_BASE_RTT_NS)).items():
            self.store[("reliability", rel_map[name].addr())] = word
        self.mem = HostMemory(_Ram(mem_size), mem_size)
        self.host = fabric.attach(self)
        self.core = _HwNicCore(self, self.host, fabric.engine, fabric.paths)
        self.reset_time = fabric.now
        self.rx_cnt = {name: 0 for name in RX_COUNTERS}
        self.rel_cnt = {reg.name[4:]: 0 for reg in self.maps["reliability"].registers
                        if reg.name.startswith("cnt_")}
        self.ev_tables = [_HwEvTable(self, q) for q in range(nq)]
        # per plane of a fabric of planes: frames sent and received (the planes block)
        counted = fabric.planes if fabric.planes > 1 else 0
        self.plane_frames = {"tx_frames": [0] * counted, "rx_frames": [0] * counted}
        self.qps: list[_HwQp | None] = [None] * nq
        self.rel_state = [RESET] * nq
        self.tx_consumer = [0] * nq
        self.tx_halt = [False] * nq  # TX refused a WQE of the QP: no new work
        self.sq_flushed = [0] * nq  # reliability: WQEs completed up to (a flush's end)
        self.send_cq_pi = [0] * nq
        self.recv_cq_pi = [0] * nq
        self.tx_ev = [[(0, 0)] * ne for _ in range(nq)]  # TX's own table (value, state)
        # (qpn, ev index, old, new, drops, rtt_ns): reliability's EV event queue
        self.ev_events: list[tuple[int, int, int, int, int, int]] = []
        self.irq_completion = False
        self.ev_gen_status = 0  # the ev_gen block's gen_status word

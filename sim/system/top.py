"""The system top: ``num_nics`` NicCores (two by default), each with its own
DMA master (to its own host memory) and its own AXI4-Lite CSR port; their
MAC ports are joined by a cocotb fabric model (sim/system/fabric.py between
two NICs, sim/system/switch.py's switch per plane between any number), not
in gateware.

Ports: NIC i's (0 .. num_nics - 1) NicCore ports, each named ``n{i}_`` and its own:
``n{i}_s_axil``, ``n{i}_m_axi``, ``n{i}_mac_tx``, ``n{i}_mac_rx``, ``n{i}_irq``,
and with planes ``n{i}_mac_tx_p{p}``, ``n{i}_mac_rx_p{p}``, ``n{i}_link_up``
and ``n{i}_plane_drops``.

Build cost: NicCore is elaborated once, into a Verilog module ``nic_core``,
and ``two_nic`` instantiates that module once per NIC (``system_verilog``).
The NICs are then the same hardware (the same ``build_id`` too), Amaranth
elaborates half as much, and Verilator sees one module it can compile once.
``run_cocotb(elaborate=TwoNicTop, ...)`` picks this up through
``verilog_text``; its ``cocotb_public = False`` keeps only the top's ports
visible to Python (tests and demos reach the NICs only through them).
"""

from amaranth.hdl import ClockSignal, Instance, Module, ResetSignal
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from hw.nic import NicCore

__all__ = ["NIC_PARAMS", "MANY_QPS_PARAMS", "PARAMS_ENV", "system_params", "BUILD_ID",
           "BUILD_IDS", "NIC_MODULE", "MAX_NICS", "TwoNicTop", "system_verilog"]

# A NIC that the simulator builds in a few minutes: 16 QPs, 8 EVs (paths), four
# planes (a QP's EV i is on plane i mod 4 unless the driver binds it), IPv6
# as well as IPv4 (each QP over its peer's family; the tests bind over IPv4
# unless they say), and EV entries of 64 bits (MRC's UDP, STEV and SRv6
# formats; the tests use UDP's unless they say).
# The timer unit is 16 cycles (15.625 MHz), so retransmit timeouts are short.
NIC_PARAMS = dict(data_width=64, num_qps=16, evs_per_qp=8, sack_bits=64, max_mtu=1024,
                  mpr_max=256, num_mrs=16, window=64, inflight_depth=64,
                  clk_freq_hz=15_625_000, num_planes=4, ipv6=True, ev_width=64)
# The many-QP system build (tests/system/test_many_qps.py): NIC_PARAMS with 1,024 QPs
# and 256 MRs (a region per connection of the test).
MANY_QPS_PARAMS = {"num_qps": 1024, "num_mrs": 256}
# A run's NicCore parameters, when its build is not NIC_PARAMS': the overrides as
# JSON, which run_two_nic hands the simulator's Python (system_params reads them).
PARAMS_ENV = "MRC_SYSTEM_PARAMS"
BUILD_ID = 0x5157_0000
BUILD_IDS = (BUILD_ID, BUILD_ID)  # per NIC: one module, so one build id
NIC_MODULE = "nic_core"


def system_params() -> dict:
    """The NicCore parameters of the build this simulation runs: NIC_PARAMS
    with the overrides that ``sim.system.simhw.run_two_nic`` was given."""
    import json
    import os

    return {**NIC_PARAMS, **json.loads(os.environ.get(PARAMS_ENV, "{}"))}


def nic_ports(nic: NicCore):
    """(Verilog port name, direction "i"/"o", signal) of each NicCore port."""
    for path, member, value in nic.signature.flatten(nic):
        direction = "i" if member.flow == In else "o"
        yield "__".join(str(p) for p in path), direction, value


MAX_NICS = 8  # the simulation hardware's limit (sim/system/simhw.cpp NICS)


class TwoNicTop(wiring.Component):
    """``num_nics`` (2 .. MAX_NICS) instances of the Verilog module ``nic_core``
    (a NicCore built with ``params``); elaborate it with ``system_verilog``,
    which also emits that module."""

    def __init__(self, params=None, num_nics: int = 2):
        if not isinstance(num_nics, int) or not 2 <= num_nics <= MAX_NICS:
            raise ValueError(f"num_nics must be an integer in 2..{MAX_NICS}, not {num_nics!r}")
        self.num_nics = num_nics
        self.params = dict(NIC_PARAMS if params is None else params)
        # The NicCore that system_verilog converts into the ``nic_core`` module.
        self.nic = nic = NicCore(**self.params, build_id=BUILD_ID)
        self.csr_addr_width, self.data_width = nic.csr_addr_width, nic.data_width
        self.num_planes = nic.num_planes
        members = {f"n{i}_{name}": member for i in range(num_nics)
                   for name, member in nic.signature.members.items()}
        super().__init__(members)
        self._nic_ports = [(name, d) for name, d, _ in nic_ports(nic)]

    # cocotb touches only the top's ports: Verilator need not keep the inside
    # public (sim/cocotb_runner.py), which makes the build several times smaller.
    cocotb_public = False
    # The model's hot code at -O1, not Verilator's -Os: its C++ compiles in
    # about a third of the compiler time (the build is most of a first
    # ``make sim``) and the model runs as fast (docs/benchmarks.md).
    make_vars = ("OPT_FAST=-O1",)

    def build_key(self) -> str:
        """What the Verilog depends on: the gateware sources and the parameters
        (run_cocotb reuses a simulator built from the same key)."""
        from pathlib import Path

        from sim.cocotb_runner import ROOT, source_digest

        return source_digest(ROOT / "hw", Path(__file__),
                             extra=(self.params, BUILD_ID, self.num_nics))

    def verilog_text(self, toplevel: str = "two_nic", emit_src: bool = False) -> str:
        """Verilog of this top: the ``nic_core`` module once, then ``toplevel``
        (``emit_src``: with Amaranth's source locations, for coverage builds)."""
        from amaranth.back import verilog

        nic_text = verilog.convert(self.nic, name=NIC_MODULE, emit_src=emit_src)
        return nic_text + "\n" + verilog.convert(self, name=toplevel, emit_src=emit_src)

    def elaborate(self, platform):
        m = Module()
        for i in range(self.num_nics):
            mine = {}
            for path, _member, value in self.signature.flatten(self):
                head = str(path[0])
                if head.startswith(f"n{i}_"):
                    mine["__".join([head[len(f"n{i}_"):], *map(str, path[1:])])] = value
            ports = {"i_clk": ClockSignal(), "i_rst": ResetSignal()}
            for name, direction in self._nic_ports:
                ports[f"{direction}_{name}"] = mine[name]
            m.submodules[f"nic{i}"] = Instance(NIC_MODULE, **ports)
        return m


def system_verilog(params=None, toplevel: str = "two_nic") -> str:
    """Verilog of the two-NIC top with ``params`` (NIC_PARAMS by default)."""
    return TwoNicTop(params).verilog_text(toplevel)

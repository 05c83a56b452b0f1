"""The reliability engine's cocotb bench (``rel_top``), shared by its tests.

``RelTestTop`` puts the project's AXI4-Lite bridge in front of a
``ReliabilityEngine``'s CSR bus. ``TB`` drives it: a scripted requester stands
in for TX (``send``: TX's sent records; ``doorbell``), a scripted responder
builds ACK / SACK / NAK / probe-response frames with scapy
(``host_driver.layers``), dissects them back and drives ``peer_ack`` with the
``ParsedHeader`` record RX would hand over (``ack``); the CSR bus is driven by
cocotbext-axi's AxiLiteMaster (``read``, ``write``, ``counters``, ``setup``),
and WQEs and CQEs live in an AxiRam. ``run(config, test_module)`` builds the
Verilator model of ``CONFIGS[config]`` (or reuses it) and runs a module's
cocotb tests on it: ``rel_q4`` (4 QPs, 8 EVs, a 15.625 MHz clock so the
timeout unit is 16 cycles) and ``rel_125m`` (2 QPs, 2 EVs, 125 MHz).
"""

from __future__ import annotations

import logging
import os

import cocotb
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles
from cocotb.utils import get_sim_time
from cocotbext.axi import (
    AxiBus,
    AxiLiteBus,
    AxiLiteMaster,
    AxiRam,
    AxiStreamBus,
    AxiStreamSink,
)
from scapy.layers.l2 import Ether

from host_driver import layers as L
from hw.axi import AXI4LiteSignature
from hw.csr import AXI4LiteToCSR
from hw.reliability.engine import ReliabilityEngine, timeout_unit_cycles
from hw.reliability.layouts import (
    AckUpdate,
    CwndUpdate,
    EvUpdate,
    QpStateUpdate,
    RetxRequest,
    SentRecord,
    SqProducer,
    WqeFlags,
)
from hw.reliability.registers import register_map
from hw.rx.parser import ParsedHeader
from sim import coverage as fcov
from tests.hw.peer_frames import parsed_header
from tests.hw.streams import StreamSink, StreamSource

CONFIGS = {
    "rel_q4": dict(num_qps=4, evs_per_qp=8, sack_bits=64, clk_freq_hz=15_625_000, window=64),
    "rel_125m": dict(num_qps=2, evs_per_qp=2, sack_bits=64, clk_freq_hz=125_000_000, window=16),
}
CONFIG = os.environ.get("REL_CONFIG", "rel_q4")
P = CONFIGS[CONFIG]
RMAP = register_map(P["num_qps"], P["evs_per_qp"], P["window"])
UNIT = timeout_unit_cycles(P["clk_freq_hz"])
EV_BASE_VALUE = 0xC000
OWN_MAC, PEER_MAC = "02:00:00:00:00:01", "02:00:00:00:00:02"
OWN_IP, PEER_IP = "10.0.0.1", "10.0.0.2"
SQ_BASE, CQ_BASE, RING_LOG2 = 0x10000, 0x40000, 6
QP_MEM = 0x80000  # per-QP stride in host memory
# the simulated clock period; the engine's time units follow clk_freq_hz instead
# (cycles x 1e9 / clk_freq_hz ns: ``nominal_ns``)
CLK_NS = 8


def nominal_ns() -> float:
    """The simulation time in the engine's ns: its cycles at ``clk_freq_hz``."""
    return get_sim_time("ns") / CLK_NS * 1e9 / P["clk_freq_hz"]


class RelTestTop(wiring.Component):
    """ReliabilityEngine with the AXI4-Lite bridge in front of its CSR bus."""

    def __init__(self, **params):
        self.engine = ReliabilityEngine(**params)
        members = {n: m for n, m in self.engine.signature.members.items() if n != "csr"}
        members["s_axil"] = In(AXI4LiteSignature(16, 32))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.engine = eng = self.engine
        m.submodules.bridge = bridge = AXI4LiteToCSR(
            16, read_latency=ReliabilityEngine.CSR_READ_LATENCY)
        wiring.connect(m, wiring.flipped(self.s_axil), bridge.s_axil)
        wiring.connect(m, bridge.csr, eng.csr)
        for name in ("peer_ack", "sent", "sq_producer"):
            wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(eng, name))
        for name in ("retx", "ack_update", "ev_update", "cwnd_update", "qp_state_update",
                     "m_axis_probe", "m_axi"):
            wiring.connect(m, getattr(eng, name), wiring.flipped(getattr(self, name)))
        m.d.comb += self.irq.eq(eng.irq)
        return m


# ---------------------------------------------------------------------------


class TB:
    def __init__(self, dut, backpressure=None):
        self.dut = dut
        cocotb.start_soon(Clock(dut.clk, CLK_NS, unit="ns").start())
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil", bus_separator="__"),
                                  dut.clk, dut.rst)
        self.ram = AxiRam(AxiBus.from_prefix(dut, "m_axi", bus_separator="__"), dut.clk,
                          dut.rst, size=1 << 22)
        for bus in ("m_axi", "s_axil", "m_axis_probe"):
            logging.getLogger(f"cocotb.rel_top.{bus}").setLevel(logging.WARNING)
        self.probe_sink = AxiStreamSink(
            AxiStreamBus.from_prefix(dut, "m_axis_probe", bus_separator="__"), dut.clk, dut.rst)
        self.sent = StreamSource(dut, "sent", SentRecord)
        self.acks = StreamSource(dut, "peer_ack", ParsedHeader(P["sack_bits"]))
        self.doorbells = StreamSource(dut, "sq_producer", SqProducer)

        def bp():
            return None if backpressure is None else backpressure()

        self.retx = StreamSink(dut, "retx", RetxRequest, bp())
        self.ack_upd = StreamSink(dut, "ack_update", AckUpdate, bp())
        self.ev_upd = StreamSink(dut, "ev_update", EvUpdate, bp())
        self.cwnd_upd = StreamSink(dut, "cwnd_update", CwndUpdate, bp())
        self.qps_upd = StreamSink(dut, "qp_state_update", QpStateUpdate, bp())
        self.cqe_count = {}
        self.retx.observers.append(lambda rec: fcov.sample_retx(rec["reason"]))
        self.ev_upd.observers.append(fcov.EvTracker())
        self.ack_upd.observers.append(fcov.UnaTracker())
        self.sack_shifts = fcov.SackShiftTracker(P["window"])

    async def reset(self):
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 4)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 4)

    @property
    def cycle(self):
        return self.retx.cycle

    async def write(self, name, value, index=0):
        await self.axil.write_dword(RMAP[name].addr(index), value)

    async def read(self, name, index=0):
        return await self.axil.read_dword(RMAP[name].addr(index))

    async def counters(self):
        """Every counter, read after COUNTER_LAG cycles: all events strobed
        before the call are in."""
        from hw.reliability.registers import COUNTER_LAG, COUNTER_NAMES

        await ClockCycles(self.dut.clk, COUNTER_LAG)
        return {n: await self.read(f"cnt_{n}") for n in COUNTER_NAMES}

    async def setup(self, *, t=12, linear=2, exp=3, min_active=1, sack_thr=3, ev_thr=2,
                    cwnd_init=None, qps=(0,), probe_period=0, **params):
        await self.write("own_mac_lo", 0x00000001)
        await self.write("own_mac_hi", 0x0200)
        await self.write("own_ip", 0x0A000001)
        await self.write("ev_loss_threshold", ev_thr)
        await self.write("probe_period", probe_period)
        for name, value in params.items():
            await self.write(name, value)
        if cwnd_init is not None:
            await self.write("cwnd_init", cwnd_init)
        for q in qps:
            await self.write("qp_rel_cfg", t | linear << 5 | exp << 8 | min_active << 16
                             | sack_thr << 24, q)
            await self.write("sq_base_lo", SQ_BASE + q * QP_MEM, q)
            await self.write("sq_base_hi", 0, q)
            await self.write("cq_base_lo", CQ_BASE + q * QP_MEM, q)
            await self.write("cq_base_hi", 0, q)
            await self.write("ring_sizes", RING_LOG2 | RING_LOG2 << 8, q)
            await self.write("peer_mac_lo", 0x00000002, q)
            await self.write("peer_mac_hi", 0x0200, q)
            await self.write("peer_ip", 0x0A000002, q)
            await self.write("dest_qpn", 0x100 + q, q)
            for e in range(P["evs_per_qp"]):
                await self.write("ev", EV_BASE_VALUE + 16 * q + e, q * P["evs_per_qp"] + e)
            await self.write("qp_ctrl", 3, q)  # RTS
        await ClockCycles(self.dut.clk, 10)

    # --- host memory: WQEs and CQEs -------------------------------------------
    def post_wqe(self, q, index, wr_id, length, imm=0, opcode=0x0A, signaled=True):
        addr = SQ_BASE + q * QP_MEM + (index % (1 << RING_LOG2)) * 64
        wqe = bytearray(64)
        wqe[0] = opcode
        wqe[1] = WqeFlags.SIGNALED if signaled else 0
        wqe[4:8] = imm.to_bytes(4, "little")
        wqe[8:16] = wr_id.to_bytes(8, "little")
        wqe[0x20:0x24] = length.to_bytes(4, "little")
        self.ram.write(addr, bytes(wqe))

    def cqes(self, q):
        """Every valid CQE of QP q's ring, in ring order (first pass: phase 1)."""
        out = []
        for i in range(1 << RING_LOG2):
            raw = self.ram.read(CQ_BASE + q * QP_MEM + 32 * i, 32)
            if not raw[0x17] & 0x80:
                break
            out.append(dict(
                wr_id=int.from_bytes(raw[0:8], "little"),
                byte_len=int.from_bytes(raw[8:12], "little"),
                imm=int.from_bytes(raw[12:16], "little"),
                qpn=int.from_bytes(raw[16:20], "little"),
                status=raw[0x14], opcode=raw[0x15],
                wqe_index=int.from_bytes(raw[0x18:0x1A], "little")))
        return out

    # --- the scripted requester (TX stand-in) ---------------------------------
    def send(self, q, psn, ev, *, last=1, wqe=0, retx=0):
        self.sent.send(dict(qpn=q, psn=psn & 0xFFFFFF, ev_index=ev, retx=retx, last=last,
                            wqe_index=wqe))

    def refuse(self, q, wqe):
        """TX's record of a WQE it refused (unknown opcode): no packet."""
        self.sent.send(dict(qpn=q, psn=0x123456, ev_index=0, wqe_index=wqe, op_err=1))

    # --- the scripted responder ------------------------------------------------
    def ack(self, q, cum_psn, bitmap=0, *, sack_base=None, syndrome=L.AETH_ACK, psn=None,
            ece=0, ev=None):
        frame = bytes(L.ack_packet(dqpn=q, cum_psn=cum_psn & 0xFFFFFF, sack_base=sack_base,
                                   bitmap=bitmap, sack_bits=P["sack_bits"], syndrome=syndrome,
                                   psn=psn, ece=ece, ev=EV_BASE_VALUE if ev is None else ev,
                                   src_mac=PEER_MAC, dst_mac=OWN_MAC, src_ip=PEER_IP,
                                   dst_ip=OWN_IP))
        assert L.check_frame(frame) == (True, True)
        self.acks.send(parsed_header(frame))
        self.sack_shifts(q, (cum_psn + 1) & 0xFFFFFF if sack_base is None else sack_base)

    def probe_answer(self, request: bytes):
        """The responder's answer to a probe request frame, as RX would parse it."""
        req = Ether(request)
        pr = req[L.MRCProbe]
        frame = bytes(L.probe_packet(response=True, dqpn=0, probe_id=pr.probe_id, ev=pr.ev,
                                     timestamp=pr.timestamp, src_mac=PEER_MAC,
                                     dst_mac=OWN_MAC, src_ip=PEER_IP, dst_ip=OWN_IP))
        rec = parsed_header(frame)
        return rec

    def doorbell(self, q, producer):
        """The host's doorbell write to TX, as NicCore's DoorbellSnoop reports it."""
        self.doorbells.send(dict(qpn=q, producer=producer & 0xFFFF))

    async def settle(self, cycles=200):
        await self.doorbells.drain()
        await self.sent.drain()
        await self.acks.drain()
        await ClockCycles(self.dut.clk, cycles)


def ev_value(q, e):
    return EV_BASE_VALUE + 16 * q + e


async def pop_events(tb):
    """The EV event queue, read empty: QPN, EV index, old and new state, drops."""
    events = []
    n = await tb.read("ev_event_count")
    for _ in range(n):
        qpn = await tb.read("ev_event_qpn")
        raw = await tb.read("ev_event")
        assert raw >> 15 & 1 and qpn >> 31
        events.append(dict(qpn=qpn & 0xFFFFFF, ev=raw & 0xFF, old=raw >> 8 & 3,
                           new=raw >> 10 & 3, drops=raw >> 16))
    return events


def run(config: str, test_module: str = "tests.hw.test_reliability", **kwargs):
    """Build (or reuse) ``config``'s simulator and run ``test_module``'s cocotb tests."""
    from sim.cocotb_runner import run_cocotb
    return run_cocotb(
        name=config,
        elaborate=lambda: RelTestTop(**CONFIGS[config]),
        toplevel="rel_top",
        test_module=test_module,
        extra_env={"REL_CONFIG": config, **kwargs.pop("extra_env", {})},
        **kwargs,
    )

"""TxEngine and ReliabilityEngine together under Verilator, with a scripted responder.

TX's ``sent`` feeds the reliability block; its ``retx``, ``ack_update`` and
``ev_update`` feed TX, as in the NIC. Each block has its own CSR bus
(AxiLiteMaster) and its own host memory (AxiRam; the WQEs are written to both).
The responder dissects every frame TX puts on ``m_axis`` with the project's
scapy layers, drops those sent on a black-holed EV, and answers with scapy-built
ACK / SACK frames (parsed into the ``ParsedHeader`` record RX would hand over)
and probe responses once the black hole heals.

Checks: every retransmission goes out on another EV than the lost packet; once
the EV is ASSUMED_BAD (handed to TX on ``ev_update``) TX commits no packet to it
until a probe answer brings it back, after which TX uses it again; every WQE
completes with a SUCCESS CQE; no timeout fires.
"""

from __future__ import annotations

import logging
import struct

import cocotb
from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiRam, AxiStreamBus, AxiStreamSink
from scapy.layers.inet import UDP
from scapy.layers.l2 import Ether

from host_driver import layers as L
from hw.axi import AXI4LiteSignature, AXI4Signature
from hw.csr import AXI4LiteToCSR
from hw.reliability.engine import ReliabilityEngine
from hw.reliability.layouts import EvUpdate, RetxRequest, SentRecord
from hw.reliability.registers import COUNTER_NAMES, register_map
from hw.rx.parser import ParsedHeader
from hw.stream import AXIStreamSignature
from hw.tx.engine import TxEngine
from hw.tx.regs import QP_BASE as TX_QP_BASE
from hw.tx.regs import QP_STRIDE as TX_QP_STRIDE
from hw.tx.regs import G, Q
from tests.hw.peer_frames import parsed_header
from tests.hw.streams import StreamSource, decode

NUM_QPS, EVS = 2, 8
CLK_HZ = 15_625_000
RMAP = register_map(NUM_QPS, EVS, 64)
RING, RING_LOG2, CQ = 0x10000, 6, 0x40000
BUF = 0x100000
MTU = 512
EV_VALUES = [0xC000 + i for i in range(EVS)]
BAD_EV = 3
OWN_MAC, PEER_MAC = "02:00:00:00:00:01", "02:00:00:00:00:02"
OWN_IP, PEER_IP = "10.0.0.1", "10.0.0.2"


class JointTop(wiring.Component):
    def __init__(self):
        self.tx = TxEngine(data_width=64, num_qps=NUM_QPS, evs_per_qp=EVS, max_mtu=1024,
                           inflight_depth=64)
        self.rel = ReliabilityEngine(num_qps=NUM_QPS, evs_per_qp=EVS, clk_freq_hz=CLK_HZ,
                                     window=64)
        super().__init__({
            "s_axil": In(AXI4LiteSignature(16, 32)),
            "m_axi": Out(AXI4Signature(64, 64, 4)),
            "m_axis": Out(AXIStreamSignature(64)),
            "rel_axil": In(AXI4LiteSignature(16, 32)),
            "rel_axi": Out(AXI4Signature(64, 64, 4)),
            "peer_ack": In(stream.Signature(ParsedHeader(64))),
            "m_axis_probe": Out(AXIStreamSignature(64)),
            "irq": Out(1),
            # taps on the internal streams, valid when a transfer happens
            "sent_tap": Out(SentRecord), "sent_tap_valid": Out(1),
            "retx_tap": Out(RetxRequest), "retx_tap_valid": Out(1),
            "ev_tap": Out(EvUpdate), "ev_tap_valid": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.tx = tx = self.tx
        m.submodules.rel = rel = self.rel
        m.submodules.tx_bridge = txb = AXI4LiteToCSR(16, read_latency=TxEngine.CSR_READ_LATENCY)
        m.submodules.rel_bridge = relb = AXI4LiteToCSR(
            16, read_latency=ReliabilityEngine.CSR_READ_LATENCY)
        wiring.connect(m, wiring.flipped(self.s_axil), txb.s_axil)
        wiring.connect(m, txb.csr, tx.csr)
        wiring.connect(m, wiring.flipped(self.rel_axil), relb.s_axil)
        wiring.connect(m, relb.csr, rel.csr)
        wiring.connect(m, tx.m_axi, wiring.flipped(self.m_axi))
        wiring.connect(m, tx.m_axis, wiring.flipped(self.m_axis))
        wiring.connect(m, rel.m_axi, wiring.flipped(self.rel_axi))
        wiring.connect(m, rel.m_axis_probe, wiring.flipped(self.m_axis_probe))
        wiring.connect(m, wiring.flipped(self.peer_ack), rel.peer_ack)
        wiring.connect(m, tx.sent, rel.sent)
        wiring.connect(m, rel.retx, tx.retx)
        wiring.connect(m, rel.ack_update, tx.ack_update)
        wiring.connect(m, rel.ev_update, tx.ev_update)
        wiring.connect(m, rel.wimm_done, tx.wimm_done)
        for port in (rel.cwnd_update, rel.qp_state_update):  # TX has no port for them yet
            m.d.comb += port.ready.eq(1)
        m.d.comb += [
            self.irq.eq(rel.irq),
            self.sent_tap.eq(tx.sent.payload),
            self.sent_tap_valid.eq(tx.sent.valid & tx.sent.ready),
            self.retx_tap.eq(rel.retx.payload),
            self.retx_tap_valid.eq(rel.retx.valid & rel.retx.ready),
            self.ev_tap.eq(rel.ev_update.payload),
            self.ev_tap_valid.eq(rel.ev_update.valid & rel.ev_update.ready),
        ]
        return m


def ip_int(ip):
    return int.from_bytes(bytes(int(x) for x in ip.split(".")), "big")


class TB:
    def __init__(self, dut):
        self.dut = dut
        for bus in ("s_axil", "m_axi", "m_axis", "rel_axil", "rel_axi", "m_axis_probe"):
            logging.getLogger(f"cocotb.{dut._name}.{bus}").setLevel(logging.WARNING)
        cocotb.start_soon(Clock(dut.clk, 8, unit="ns").start())
        self.tx_csr = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil", bus_separator="__"),
                                    dut.clk, dut.rst)
        self.rel_csr = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "rel_axil", bus_separator="__"),
                                     dut.clk, dut.rst)
        self.tx_ram = AxiRam(AxiBus.from_prefix(dut, "m_axi", bus_separator="__"), dut.clk,
                             dut.rst, size=1 << 22)
        self.rel_ram = AxiRam(AxiBus.from_prefix(dut, "rel_axi", bus_separator="__"), dut.clk,
                              dut.rst, size=1 << 22)
        self.wire = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis", bus_separator="__"),
                                  dut.clk, dut.rst)
        self.probes = AxiStreamSink(
            AxiStreamBus.from_prefix(dut, "m_axis_probe", bus_separator="__"), dut.clk, dut.rst)
        self.acks = StreamSource(dut, "peer_ack", ParsedHeader(64))
        self.cycle = 0
        self.sent, self.retx, self.ev = [], [], []  # (cycle, record)
        self.pi = 0  # TX's producer index (start_qp reads it)
        self.wr_ids = []  # posted, in order

    async def reset(self):
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 4)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 4)
        cocotb.start_soon(self._taps())

    async def _taps(self):
        d = self.dut
        while True:
            await RisingEdge(d.clk)
            self.cycle += 1
            for name, lst, layout in (("sent", self.sent, SentRecord),
                                      ("retx", self.retx, RetxRequest),
                                      ("ev", self.ev, EvUpdate)):
                if getattr(d, f"{name}_tap_valid").value:
                    value = getattr(d, f"{name}_tap").value.to_unsigned()
                    lst.append((self.cycle, decode(layout, value)))

    async def rel_write(self, name, value, index=0):
        await self.rel_csr.write_dword(RMAP[name].addr(index), value)

    async def rel_read(self, name, index=0):
        return await self.rel_csr.read_dword(RMAP[name].addr(index))

    async def tx_write(self, q, off, value):
        await self.tx_csr.write_dword(TX_QP_BASE + q * TX_QP_STRIDE + off, value)


    async def start_qp(self, q, cwnd):
        """TX and reliability brought up, QP ``q`` enabled with window ``cwnd``
        over the 8 EVs, and in RTS."""
        for _ in range(100):
            if await self.tx_csr.read_dword(G.STATUS) & 1:
                break
            await ClockCycles(self.dut.clk, 64)
        await self.tx_csr.write_dword(G.SRC_MAC_LO, 0x00000001)
        await self.tx_csr.write_dword(G.SRC_MAC_HI, 0x0200)
        await self.tx_csr.write_dword(G.SRC_IP, ip_int(OWN_IP))
        for i, v in enumerate(EV_VALUES):
            await self.tx_csr.write_dword(G.EV_SELECT, i | q << 8)
            await self.tx_csr.write_dword(G.EV_ENTRY, v)
        for off, value in ((Q.MTU, MTU), (Q.MPR, 1), (Q.CWND, cwnd), (Q.NEXT_PSN, 0),
                           (Q.DEST_QPN, 0x100), (Q.DST_MAC_LO, 0x00000002),
                           (Q.DST_MAC_HI, 0x0200), (Q.DST_IP, ip_int(PEER_IP)), (Q.DSCP, 0),
                           (Q.SQ_BASE_LO, RING), (Q.SQ_BASE_HI, 0),
                           (Q.SQ_LOG2_SIZE, RING_LOG2)):
            await self.tx_write(q, off, value)
        self.pi = await self.tx_csr.read_dword(TX_QP_BASE + q * TX_QP_STRIDE + Q.DOORBELL)
        await self.tx_write(q, Q.CTRL, 1)
        # reliability: same EVs and ring, its own CQ
        await self.rel_write("own_mac_lo", 0x00000001)
        await self.rel_write("own_mac_hi", 0x0200)
        await self.rel_write("own_ip", ip_int(OWN_IP))
        await self.rel_write("ev_loss_threshold", 2)
        await self.rel_write("probe_period", 1500)
        await self.rel_write("qp_rel_cfg", 12 | 7 << 5 | 7 << 8 | 2 << 16 | 2 << 24, q)
        for name, value in (("sq_base_lo", RING), ("cq_base_lo", CQ),
                            ("ring_sizes", RING_LOG2 | RING_LOG2 << 8), ("peer_mac_lo", 2),
                            ("peer_mac_hi", 0x0200), ("peer_ip", ip_int(PEER_IP)),
                            ("dest_qpn", 0x100)):
            await self.rel_write(name, value, q)
        for i, v in enumerate(EV_VALUES):
            await self.rel_write("ev", v, q * EVS + i)
        await self.rel_write("qp_ctrl", 3, q)

    async def post(self, q, n, length):
        """``n`` WRITEs of ``length`` bytes on QP ``q`` (WQEs in both blocks'
        memories), one doorbell."""
        for _ in range(n):
            wr_id = 0x5000 + len(self.wr_ids)
            self.wr_ids.append(wr_id)
            addr = BUF + len(self.wr_ids) * 0x1000
            self.tx_ram.write(addr, bytes(range(256)) * (length // 256))
            wqe = struct.pack("<BBHIQQQII", 0, 1, 0, 0, wr_id, addr, 0x7000_0000, length,
                              0x1234).ljust(64, b"\0")
            slot = RING + (self.pi % (1 << RING_LOG2)) * 64
            self.tx_ram.write(slot, wqe)
            self.rel_ram.write(slot, wqe)
            self.pi = (self.pi + 1) & 0xFFFF
        await self.tx_write(q, Q.DOORBELL, self.pi)

    def responder(self, q):
        """The scripted responder, started: drops what goes out on ``BAD_EV``
        until ``state["healed"]``, ACKs (cumulative + SACK bitmap) every second
        packet and when idle, answers probes but those on the black hole. Its
        ``state["wire"]``: (cycle, PSN, EV, cumulative PSN then) per frame."""
        tb, dut = self, self.dut
        state = dict(healed=False, received=set(), cum=-1, unacked=0, wire=[])

        def ack():
            rcv = state["received"]
            while state["cum"] + 1 in rcv:
                state["cum"] += 1
            cum = state["cum"]
            bitmap = sum(1 << i for i in range(64) if cum + 1 + i in rcv)
            frame = bytes(L.ack_packet(dqpn=q, cum_psn=cum & 0xFFFFFF, bitmap=bitmap,
                                       src_mac=PEER_MAC, dst_mac=OWN_MAC, src_ip=PEER_IP,
                                       dst_ip=OWN_IP))
            tb.acks.send(parsed_header(frame))
            state["unacked"] = 0

        async def run():
            idle = 0
            while True:
                if not tb.wire.empty():
                    frame = bytes((await tb.wire.recv()).tdata)
                    assert L.check_frame(frame) == (True, True)
                    pkt = Ether(frame)
                    psn, ev = pkt[L.BTH].psn, pkt[UDP].sport
                    state["wire"].append((tb.cycle, psn, ev, state["cum"]))
                    if ev == EV_VALUES[BAD_EV] and not state["healed"]:
                        continue  # black hole
                    state["received"].add(psn)
                    state["unacked"] += 1
                    idle = 0
                    if state["unacked"] >= 2:
                        ack()
                elif not tb.probes.empty():
                    req = bytes((await tb.probes.recv()).tdata)
                    pr = Ether(req)[L.MRCProbe]
                    if state["healed"] or pr.ev != EV_VALUES[BAD_EV]:
                        frame = bytes(L.probe_packet(response=True, dqpn=q,
                                                     probe_id=pr.probe_id, ev=pr.ev,
                                                     timestamp=pr.timestamp))
                        tb.acks.send(parsed_header(frame))
                else:
                    await RisingEdge(dut.clk)
                    idle += 1
                    if state["unacked"] and idle > 50:
                        ack()

        cocotb.start_soon(run())
        return state

    async def completions(self):
        """Waits for every WQE's CQE; returns them as (wr_id, status, phase)."""
        for _ in range(400):
            await ClockCycles(self.dut.clk, 50)
            if await self.rel_read("cnt_cqes") == len(self.wr_ids):
                break
        cqes = []
        for i in range(len(self.wr_ids)):
            raw = self.rel_ram.read(CQ + 32 * i, 32)
            cqes.append((int.from_bytes(raw[:8], "little"), raw[0x14], raw[0x17] >> 7))
        return cqes


@cocotb.test()
async def test_blackholed_ev(dut):
    tb = TB(dut)
    await tb.reset()
    q = 0
    await tb.start_qp(q, cwnd=64)
    state = tb.responder(q)
    wr_ids = tb.wr_ids
    await tb.post(q, 12, 2048)  # 48 packets over 8 EVs: EV 3 gets a few, all lost
    for _ in range(400):
        await ClockCycles(dut.clk, 50)
        if any(r["state"] == 1 for _, r in tb.ev):
            break
    bad = [(c, r) for c, r in tb.ev if r["state"] == 1]
    assert bad and bad[0][1] == {"qpn": q, "ev_index": BAD_EV, "state": 1}, tb.ev
    bad_at = bad[0][0]
    await ClockCycles(dut.clk, 3000)
    await tb.post(q, 6, 2048)
    await ClockCycles(dut.clk, 3000)
    state["healed"] = True
    for _ in range(400):
        await ClockCycles(dut.clk, 50)
        if any(r["state"] == 0 for c, r in tb.ev if c > bad_at):
            break
    good_at = next(c for c, r in tb.ev if c > bad_at and r["state"] == 0)
    await tb.post(q, 6, 2048)
    # every WQE completed, in order, SUCCESS
    assert await tb.completions() == [(w, 0, 1) for w in wr_ids]
    counters = {n: await tb.rel_read(f"cnt_{n}") for n in COUNTER_NAMES}
    assert counters["timeouts"] == 0 and counters["acks_unsent"] == 0
    assert counters["retx_sack"] == len(tb.retx) > 0
    # retransmissions: on another EV than the lost transmission
    last_ev = {}
    for _, rec in tb.sent:
        if rec["retx"]:
            assert rec["ev_index"] != last_ev[rec["psn"]], rec
        last_ev[rec["psn"]] = rec["ev_index"]
    assert {r["psn"] for _, r in tb.retx} == {r["psn"] for _, r in tb.sent if r["retx"]}
    # EV 3 unused from ASSUMED_BAD (+ TX's 8-cycle handover) until the probe brought it back
    window = [r for c, r in tb.sent if bad_at + 8 <= c < good_at]
    assert len(window) > 10 and all(r["ev_index"] != BAD_EV for r in window)
    after = [r for c, r in tb.sent if c >= good_at + 8 and not r["retx"]]
    assert any(r["ev_index"] == BAD_EV for r in after), "EV 3 not used again after the probe"
    dut._log.info("joint: %d packets, %d retransmits, EV 3 bad for %d cycles, %d probes answered",
                  len(tb.sent), len(tb.retx), good_at - bad_at, counters["probe_resps"])


@cocotb.test()
async def test_window_past_holes(dut):
    """TX's window holds the PSNs in flight that are not SACKed: with a window
    of 4 packets and every eighth packet black-holed (before its EV goes
    ASSUMED_BAD), TX sends PSNs 4 and more past the responder's cumulative
    PSN while the hole pins it, instead of stopping until the hole is
    retransmitted; every WQE completes, and no timeout fires."""
    tb = TB(dut)
    await tb.reset()
    q, cwnd = 0, 4
    await tb.start_qp(q, cwnd=cwnd)
    state = tb.responder(q)
    await tb.post(q, 8, 2048)  # 32 packets
    assert await tb.completions() == [(w, 0, 1) for w in tb.wr_ids]
    # PSNs at or past cum + 1 + cwnd go out only with SACKed PSNs below them
    past = [(psn, cum) for _, psn, _, cum in state["wire"] if psn - (cum + 1) >= cwnd]
    assert past, state["wire"]
    assert await tb.rel_read("cnt_timeouts") == 0
    assert await tb.rel_read("cnt_retx_sack") > 0
    dut._log.info("window past holes: %d of %d frames sent %d or more past the cumulative PSN",
                  len(past), len(state["wire"]), cwnd)


def test_rel_tx_joint():
    from sim.cocotb_runner import run_cocotb
    run_cocotb(name="rel_tx_joint", elaborate=JointTop, toplevel="rel_tx_joint",
               test_module="tests.hw.test_rel_tx_joint")

"""The TX engine's bench, shared by tests/hw/test_tx_engine.py and
sim/bench/tx.py.

Corundum-style: a ``TB`` class binds cocotbext-axi models to the test top
(AXI4LiteToCSR in front of TxEngine, ``tx_test_top``): AxiLiteMaster on the
CSRs, AxiRam as host memory (random AR/R pauses standing in for latency),
AxiStreamSink on the MAC side (random backpressure), drivers for
``retx``/``ack_update``/``ev_update`` and a monitor on ``sent``. A small host
driver (``Host``) puts WQEs in the send rings and rings doorbells, and
``Scoreboard`` keeps, per QP, the packets a message must become (a Python
reference written from docs/protocol.md and docs/tx.md), dissects every frame
with the project's scapy layers and checks it field by field.

``run`` builds the engine's Verilator model (``build_name()``, its
parameters from the ``TX_*`` environment) and runs a module's cocotb tests on
it; ``bench_case`` times a batch of messages with memory at full speed and no
backpressure (the read channel accounted by ``read_channel``).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import os
import random
import struct
from collections import Counter, defaultdict

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotb.utils import get_sim_time, get_time_from_sim_steps
from cocotbext.axi import (
    AxiBus,
    AxiLiteBus,
    AxiLiteMaster,
    AxiRam,
    AxiStreamBus,
    AxiStreamSink,
)
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether

from host_driver import layers as L
from hw.protocol import (
    EV_FORMAT_BITS,
    EvFormat,
    ev_hi_words,
    srv6_carrier,
    srv6_sport,
    stev_fields,
)
from hw.tx.ev import default_ev_plane
from hw.tx.layouts import EvState
from hw.tx.regs import EV_PLANE_LSB, QP_BASE, QP_STRIDE, G, Q
from tests import seeds

DATA_WIDTH = int(os.environ.get("TX_DATA_WIDTH", "64"))
NUM_QPS = int(os.environ.get("TX_NUM_QPS", "16"))
EVS_PER_QP = int(os.environ.get("TX_EVS_PER_QP", "16"))
INFLIGHT = int(os.environ.get("TX_INFLIGHT", "256"))
# planes (MAC ports): each frame's tuser is its EV's plane, checked per frame
NUM_PLANES = int(os.environ.get("TX_NUM_PLANES", "3"))
# built with ipv6: IPv4 and IPv6 peers side by side
IPV6 = bool(int(os.environ.get("TX_IPV6", "1")))
# EV entries of 64 bits with ipv6: every EV format (QpConfig.ev_format)
EV_WIDTH = int(os.environ.get("TX_EV_WIDTH", "64" if IPV6 else "16"))
CLK_NS = 4

RING_BASE = 0x10000
RING_LOG2 = 6
RING_BYTES = 64 << RING_LOG2
BUF_BASE = max(0x100000, RING_BASE + NUM_QPS * RING_BYTES)  # the buffers above every ring
MEM_SIZE = 1 << 23
SRC_MAC = "02:00:00:00:00:01"
SRC_IP = "10.0.0.1"
SRC_IP6 = "2001:db8:0:1::1"


def mac_int(mac: str) -> int:
    return int(mac.replace(":", ""), 16)


def ip_int(ip: str) -> int:
    """An IPv4 or IPv6 address (colons) as an integer."""
    return int(ipaddress.ip_address(ip))


def random_pause(rng: random.Random, p: float):
    while True:
        yield int(rng.random() < p)


# ---------------------------------------------------------------------------
# Reference: the packets a WQE becomes (docs/protocol.md, docs/tx.md).


@dataclasses.dataclass
class Packet:
    qp: int
    psn: int
    opcode: int
    va: int
    laddr: int
    length: int
    dma_len: int
    rkey: int
    imm: int | None
    ackreq: int
    se: int
    wqe_index: int
    last: bool


def segment(qp, first_psn, wqe_index, laddr, raddr, length, rkey, imm, mtu) -> list[Packet]:
    n = max(1, -(-length // mtu))
    out = []
    for i in range(n):
        first, last = i == 0, i == n - 1
        if first and last:
            op = L.OP_WRITE_ONLY_IMM if imm is not None else L.OP_WRITE_ONLY
        elif first:
            op = L.OP_WRITE_FIRST
        elif last:
            op = L.OP_WRITE_LAST_IMM if imm is not None else L.OP_WRITE_LAST
        else:
            op = L.OP_WRITE_MIDDLE
        out.append(
            Packet(
                qp=qp,
                psn=(first_psn + i) & L.PSN_MASK,
                opcode=op,
                va=(raddr + i * mtu) & (2**64 - 1),
                laddr=laddr + i * mtu,
                length=min(mtu, length - i * mtu),
                dma_len=length,
                rkey=rkey,
                imm=imm if op in L.IMM_OPCODES else None,
                ackreq=int(last),
                se=int(last and imm is not None),
                wqe_index=wqe_index,
                last=last,
            )
        )
    return out


@dataclasses.dataclass
class QpConfig:
    qp: int
    mtu: int = 1024
    dqpn: int = 0
    dst_mac: str = "02:00:00:00:00:02"
    dst_ip: str = "10.0.0.2"
    dscp: int = 0
    next_psn: int = 0
    mpr: int = 2
    cwnd: int = 256
    ev_format: EvFormat = EvFormat.UDP  # an IPv6 peer's; an IPv4 peer's frames are UDP's


# ---------------------------------------------------------------------------
# Testbench


class TB:
    def __init__(self, dut):
        self.dut = dut
        self.log = dut._log
        self.lanes = DATA_WIDTH // 8
        for bus in ("s_axil", "m_axi", "m_axis"):
            logging.getLogger(f"cocotb.{dut._name}.{bus}").setLevel(logging.WARNING)
        cocotb.start_soon(Clock(dut.clk, CLK_NS, unit="ns").start())
        self.axil = AxiLiteMaster(
            AxiLiteBus.from_prefix(dut, "s_axil", bus_separator="__"), dut.clk, dut.rst
        )
        self.ram = AxiRam(
            AxiBus.from_prefix(dut, "m_axi", bus_separator="__"), dut.clk, dut.rst, size=MEM_SIZE
        )
        self.sink = AxiStreamSink(
            AxiStreamBus.from_prefix(dut, "m_axis", bus_separator="__"), dut.clk, dut.rst
        )
        self.sent = []  # (cycle, record dict)
        self.refused = []  # sent records with op_err: WQEs TX refused, no frame
        self.cycle = 0
        self.frames = []  # (ns of the first beat, frame bytes)
        self.frame_planes = []  # each frame's tuser: its plane
        for name in ("retx", "ack_update", "ev_update", "wimm_done"):
            getattr(dut, f"{name}__valid").value = 0
        dut.sent__ready.value = 1
        if NUM_PLANES > 1:
            dut.link_up.value = (1 << NUM_PLANES) - 1  # a test may take a plane down

    def set_memory_latency(self, rng: random.Random | None, p: float = 0.3):
        r = self.ram.read_if
        r.ar_channel.set_pause_generator(random_pause(rng, p) if rng else None)
        r.r_channel.set_pause_generator(
            random_pause(random.Random(rng.random()), p) if rng else None
        )

    def set_backpressure(self, rng: random.Random | None, p: float = 0.3):
        self.sink.set_pause_generator(random_pause(rng, p) if rng else None)

    async def reset(self):
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 4)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 2)
        cocotb.start_soon(self._monitor_sent())
        cocotb.start_soon(self._collect_frames())
        for _ in range(100):
            if await self.read(G.STATUS) & 1:
                break
            await ClockCycles(self.dut.clk, 64)
        else:
            raise AssertionError("engine not ready after reset")

    async def _monitor_sent(self):
        dut = self.dut
        while True:
            await RisingEdge(dut.clk)
            self.cycle += 1
            if dut.sent__valid.value and dut.sent__ready.value:
                v = int(dut.sent__payload.value)
                rec = dict(
                    qpn=v & 0xFFFFFF,
                    psn=(v >> 24) & 0xFFFFFF,
                    ev_index=(v >> 48) & 0xFF,
                    retx=(v >> 56) & 1,
                    last=(v >> 57) & 1,
                    wqe_index=(v >> 58) & 0xFFFF,
                )
                if (v >> 74) & 1:  # op_err
                    self.refused.append(dict(qpn=rec["qpn"], wqe_index=rec["wqe_index"]))
                else:
                    self.sent.append((get_sim_time("ns"), rec))

    async def _collect_frames(self):
        while True:
            frame = await self.sink.recv()
            tuser = frame.tuser if isinstance(frame.tuser, list) else [frame.tuser or 0]
            assert len(set(tuser)) == 1, f"tuser (the plane) changes within a frame: {tuser}"
            self.frame_planes.append(tuser[0] if NUM_PLANES > 1 else None)
            if NUM_PLANES == 1:
                assert not any(tuser), "tuser set on a one-plane TX's frame"
            start_ns = get_time_from_sim_steps(frame.sim_time_start, "ns")
            self.frames.append((start_ns, bytes(frame.tdata)))

    async def drive(self, name: str, value: int):
        """One transfer on an Amaranth stream input (payload packed as its layout)."""
        dut = self.dut
        valid, ready = getattr(dut, f"{name}__valid"), getattr(dut, f"{name}__ready")
        getattr(dut, f"{name}__payload").value = value
        valid.value = 1
        while True:
            await RisingEdge(dut.clk)
            if ready.value:
                break
        valid.value = 0
        return get_sim_time("ns")

    async def retx(self, qpn, psn, reason=0):
        return await self.drive("retx", qpn | (psn << 24) | (reason << 48))

    async def ack(self, qpn, una_psn):
        return await self.drive("ack_update", qpn | (una_psn << 24))

    async def ev_update(self, qpn, ev_index, state):
        return await self.drive("ev_update", qpn | (ev_index << 24) | (state << 32))

    async def wimm_done(self, qpn):
        """Reliability completed a WRITE_WITH_IMM WQE of ``qpn`` SUCCESS."""
        return await self.drive("wimm_done", qpn)

    async def write(self, addr, value):
        await self.axil.write_dword(addr, value & 0xFFFFFFFF)
        return get_sim_time("ns")

    async def read(self, addr):
        return await self.axil.read_dword(addr)

    @staticmethod
    def qreg(qp, off):
        return QP_BASE + qp * QP_STRIDE + off


class Host:
    """Driver model: QP setup, send rings in host memory, doorbells, EV tables."""

    def __init__(self, tb: TB):
        self.tb = tb
        self.cfg: dict[int, QpConfig] = {}
        self.pi = defaultdict(int)
        self.next_psn: dict[int, int] = {}
        self.buf_next = BUF_BASE
        self.ev_value = {}  # (qp, index) -> value
        self.ev_state = {}  # (qp, index) -> state
        self.ev_plane = {}  # (qp, index) -> plane
        # (ns, qp, index, state): when each EV state change was handed over
        self.ev_history = []
        self.sb = Scoreboard(self)

    async def setup(self):
        tb = self.tb
        await tb.write(G.SRC_MAC_LO, mac_int(SRC_MAC) & 0xFFFFFFFF)
        await tb.write(G.SRC_MAC_HI, mac_int(SRC_MAC) >> 32)
        await tb.write(G.SRC_IP, ip_int(SRC_IP))
        if IPV6:
            for i in range(4):
                await tb.write(G.SRC_IP6 + 4 * i, ip_int(SRC_IP6) >> (32 * i) & 0xFFFFFFFF)
        for q in range(NUM_QPS):
            for i in range(EVS_PER_QP):
                self.ev_value[(q, i)] = 0xC000 + i
                self.ev_state[(q, i)] = EvState.GOOD
                self.ev_plane[(q, i)] = default_ev_plane(i, NUM_PLANES)

    async def open_qp(self, cfg: QpConfig, enable=True):
        tb, q = self.tb, cfg.qp
        if not cfg.dqpn:
            cfg.dqpn = 0x100 + q
        self.cfg[q] = cfg
        regs = [
            (Q.MTU, cfg.mtu),
            (Q.MPR, cfg.mpr),
            (Q.CWND, cfg.cwnd),
            (Q.NEXT_PSN, cfg.next_psn),
            (Q.DEST_QPN, cfg.dqpn),
            (Q.DST_MAC_LO, mac_int(cfg.dst_mac) & 0xFFFFFFFF),
            (Q.DST_MAC_HI, mac_int(cfg.dst_mac) >> 32),
            (Q.DST_IP, ip_int(cfg.dst_ip) & 0xFFFFFFFF),
            (Q.DSCP, cfg.dscp),
            (Q.SQ_BASE_LO, self.ring(q) & 0xFFFFFFFF),
            (Q.SQ_BASE_HI, self.ring(q) >> 32),
            (Q.SQ_LOG2_SIZE, RING_LOG2),
        ]
        v6 = ":" in cfg.dst_ip
        assert IPV6 or not v6, "an IPv6 peer needs the build with ipv6 (TX_IPV6=1)"
        if IPV6:
            regs += [(off, ip_int(cfg.dst_ip) >> (32 * i) & 0xFFFFFFFF) for i, off in
                     enumerate((Q.DST_IP6_1, Q.DST_IP6_2, Q.DST_IP6_3), start=1)]
            regs.append((Q.IP6, int(v6) | cfg.ev_format << 1))
        for off, value in regs:
            await tb.write(tb.qreg(q, off), value)
        self.next_psn[q] = cfg.next_psn
        self.pi[q] = await tb.read(tb.qreg(q, Q.DOORBELL))
        if enable:
            await tb.write(tb.qreg(q, Q.CTRL), 1)

    def ring(self, q):
        return RING_BASE + q * RING_BYTES

    def alloc(self, length, rng: random.Random, align_offset=None):
        off = rng.randrange(64) if align_offset is None else align_offset
        addr = self.buf_next + off
        self.buf_next = (addr + length + 63) & ~63
        assert self.buf_next < MEM_SIZE, "test buffer space exhausted"
        self.tb.ram.write(addr, rng.randbytes(length))
        return addr

    async def post(self, q, length, rng, imm=None, laddr=None, raddr=None, doorbell=True):
        """Write one WQE, ring the doorbell; returns the packets it must become."""
        if laddr is None:
            laddr = self.alloc(length, rng)
        if raddr is None:
            raddr = rng.getrandbits(48) << 4 | rng.randrange(16)
        rkey = rng.getrandbits(32)
        wr_id = rng.getrandbits(64)
        idx = self.pi[q]
        wqe = struct.pack(
            "<BBHIQQQII",
            1 if imm is not None else 0,
            1,
            0,
            imm or 0,
            wr_id,
            laddr,
            raddr,
            length,
            rkey,
        ).ljust(64, b"\xa5")
        self.tb.ram.write(self.ring(q) + (idx % (1 << RING_LOG2)) * 64, wqe)
        pkts = segment(q, self.next_psn[q], idx, laddr, raddr, length, rkey, imm, self.cfg[q].mtu)
        self.next_psn[q] = (self.next_psn[q] + len(pkts)) & L.PSN_MASK
        self.pi[q] = (idx + 1) & 0xFFFF
        self.sb.expect(pkts)
        if doorbell:
            await self.ring_doorbell(q)
        return pkts

    async def post_unsent(self, q, length, rng, opcode=None):
        """Write a WQE that must not be sent (no packets expected), without the
        doorbell; ``opcode``: its opcode byte instead of WRITE's."""
        psn = self.next_psn[q]
        await self.post(q, length, rng, doorbell=False)
        npkts = max(1, -(-length // self.cfg[q].mtu))
        del self.sb.pending[q][-npkts:]
        self.next_psn[q] = psn
        if opcode is not None:
            slot = (self.pi[q] - 1) % (1 << RING_LOG2)
            self.tb.ram.write(self.ring(q) + slot * 64, bytes([opcode]))

    async def ring_doorbell(self, q):
        await self.tb.write(self.tb.qreg(q, Q.DOORBELL), self.pi[q])

    def ev_entry(self, q, index):
        """The ev_entry register's value for the host's view of an entry."""
        plane = self.ev_plane[(q, index)] if NUM_PLANES > 1 else 0
        return (self.ev_value[(q, index)] & 0xFFFF | self.ev_state[(q, index)] << 16
                | plane << EV_PLANE_LSB)

    async def set_ev(self, q, index, value=None, state=EvState.GOOD, via_stream=False,
                     plane=None):
        tb = self.tb
        if via_stream:
            assert value is None and plane is None
            t = await tb.ev_update(q, index, state)
        else:
            await tb.write(G.EV_SELECT, index | (q << 8))
            if value is None:
                value = self.ev_value[(q, index)]
            if plane is None:
                plane = self.ev_plane[(q, index)]
            for k in range(ev_hi_words(EV_WIDTH)):  # taken and cleared by the entry write
                await tb.write(G.EV_VALUE_HI + 4 * k, value >> 16 + 32 * k & 0xFFFFFFFF)
            t = await tb.write(G.EV_ENTRY, value & 0xFFFF | (state << 16)
                               | plane << EV_PLANE_LSB)
            self.ev_value[(q, index)] = value
            self.ev_plane[(q, index)] = plane
        # the state counts from the handover on; the old one for picks before it
        self.ev_history.append((t, q, index, state))
        self.ev_state[(q, index)] = state

    def good_at(self, q, index, t_ns) -> bool:
        """Was (q, index) GOOD for a pick committed at ``t_ns``? A change handed
        over at T binds every record committed from T + 8 cycles on."""
        state = EvState.GOOD
        for t, hq, hi, s in self.ev_history:
            if (hq, hi) == (q, index) and t + 8 * CLK_NS <= t_ns:
                state = s
        return state == EvState.GOOD


class Scoreboard:
    """Expected packets per QP; checks each frame and the matching sent record."""

    def __init__(self, host: Host):
        self.host = host
        self.pending: dict[int, list[Packet]] = defaultdict(list)  # new packets, PSN order
        self.by_psn: dict[tuple[int, int], Packet] = {}
        self.retx_expected: list[tuple[int, int]] = []
        self.checked_frames = 0
        self.sent_index = 0
        self.last_ev: dict[tuple[int, int], int] = {}  # (qp, psn) -> EV index last used
        self.ev_uses: dict[int, Counter] = defaultdict(Counter)  # new packets per EV index
        self.order: list[int] = []  # QP of each new packet, in wire order
        self.retx_seen: list[tuple[int, int, int, int]] = []  # (qp, psn, old ev, new ev)
        self.next_una: dict[int, int] = {}  # PSN after the last new packet checked, per QP

    def expect(self, pkts):
        for p in pkts:
            self.pending[p.qp].append(p)
            self.by_psn[(p.qp, p.psn)] = p

    def expect_retx(self, qp, psn):
        self.retx_expected.append((qp, psn))

    def outstanding(self) -> int:
        return sum(len(v) for v in self.pending.values()) + len(self.retx_expected)

    def check(self, tb: TB):
        """Check every frame and sent record received so far."""
        host = self.host
        dqpn_to_qp = {c.dqpn: q for q, c in host.cfg.items()}
        while self.checked_frames < len(tb.frames):
            if self.sent_index >= len(tb.sent):
                break  # the record of a frame always precedes its first beat
            t_frame, frame = tb.frames[self.checked_frames]
            t_sent, rec = tb.sent[self.sent_index]
            pkt = Ether(frame)
            bth = pkt[L.BTH]
            q = dqpn_to_qp.get(bth.dqpn)
            assert q is not None, f"frame for unknown DestQP {bth.dqpn:#x}"
            # an SRv6 frame's ICRC covers its peer's address, the carrier's end
            seen = frame
            if L.is_ipv6(frame) and host.cfg[q].ev_format == EvFormat.SRV6 and EV_WIDTH >= 64:
                seen = L.with_ipv6_dst(frame, ip_int(host.cfg[q].dst_ip))
            ip_ok, icrc_ok = L.check_frame(seen)
            assert ip_ok, f"frame {self.checked_frames}: bad IPv4 checksum"
            assert icrc_ok, f"frame {self.checked_frames}: bad ICRC"
            assert (rec["qpn"], rec["psn"]) == (q, bth.psn), (
                f"sent record {rec} does not match frame QP {q} PSN {bth.psn:#x}"
            )
            if rec["retx"]:
                assert (q, bth.psn) in self.retx_expected, (
                    f"unrequested retransmit {q}/{bth.psn:#x}"
                )
                self.retx_expected.remove((q, bth.psn))
                exp = self.by_psn[(q, bth.psn)]
                exp = dataclasses.replace(exp, ackreq=1)
                old = self.last_ev[(q, bth.psn)]
                self.retx_seen.append((q, bth.psn, old, rec["ev_index"]))
            else:
                assert self.pending[q], f"QP {q}: unexpected new packet PSN {bth.psn:#x}"
                exp = self.pending[q].pop(0)
                assert bth.psn == exp.psn, f"QP {q}: PSN {bth.psn:#x}, expected {exp.psn:#x}"
                self.ev_uses[q][rec["ev_index"]] += 1
                self.order.append(q)
                self.next_una[q] = (bth.psn + 1) & L.PSN_MASK
            assert rec["last"] == int(exp.last) and rec["wqe_index"] == exp.wqe_index, rec
            self.last_ev[(q, bth.psn)] = rec["ev_index"]
            self.check_fields(pkt, frame, exp, rec, t_sent)
            plane = tb.frame_planes[self.checked_frames]
            if plane is not None:
                want = host.ev_plane[(q, rec["ev_index"])]
                assert plane == want, f"QP {q} PSN {bth.psn:#x}: plane {plane}, its EV's is {want}"
            self.checked_frames += 1
            self.sent_index += 1

    def check_fields(self, pkt, frame, exp: Packet, rec, t_sent):
        host = self.host
        cfg = host.cfg[exp.qp]
        udp, bth = pkt[UDP], pkt[L.BTH]
        reth = pkt[L.RETH]
        where = f"QP {exp.qp} PSN {exp.psn:#x}"
        v6 = ":" in cfg.dst_ip
        src_ip = SRC_IP6 if v6 else SRC_IP
        assert pkt.dst == cfg.dst_mac and pkt.src == SRC_MAC, where
        ev_index = rec["ev_index"]
        ev = host.ev_value[(exp.qp, ev_index)]
        fmt = cfg.ev_format if v6 and EV_WIDTH >= EV_FORMAT_BITS[cfg.ev_format] else \
            EvFormat.UDP
        sport, flow, dst_ip = ev & 0xFFFF, 0, cfg.dst_ip
        if fmt == EvFormat.STEV:
            sport, flow = stev_fields(ev)
        elif fmt == EvFormat.SRV6:
            sport = srv6_sport(ev)
            dst_ip = str(ipaddress.IPv6Address(srv6_carrier(ip_int(cfg.dst_ip), ev)))
        if v6:
            ip = pkt[IPv6]
            assert pkt.type == L.ETHERTYPE_IPV6, where
            assert (ip.tc, ip.fl, ip.nh, ip.hlim) == ((cfg.dscp << 2) | L.ECN_ECT0, flow, 17, 64)
            assert ip.plen == udp.len == len(frame) - 54, where
        else:
            ip = pkt[IP]
            assert pkt.type == L.ETHERTYPE_IPV4, where
            assert (ip.version, ip.ihl, ip.tos) == (4, 5, (cfg.dscp << 2) | L.ECN_ECT0), where
            assert (ip.id, int(ip.flags), ip.frag, ip.ttl, ip.proto) == (0, 2, 0, 64, 17), where
            assert ip.len == len(frame) - 14 and udp.len == len(frame) - 34, where
        assert (ip.src, ip.dst) == (src_ip, dst_ip), where
        assert udp.dport == L.ROCE_UDP_PORT and udp.chksum == 0, where
        assert udp.sport == sport, (
            f"{where}: UDP source port {udp.sport:#x} is not EV {ev_index}'s ({ev:#x}, {fmt.name})"
        )
        assert host.good_at(exp.qp, ev_index, t_sent), f"{where}: EV {ev_index} was not GOOD"
        assert bth.opcode == exp.opcode, f"{where}: opcode {bth.opcode:#x} != {exp.opcode:#x}"
        assert (bth.se, bth.migreq, bth.tver, bth.pkey) == (exp.se, 0, 0, 0xFFFF), where
        assert (bth.fecn, bth.becn, bth.resv6, bth.resv7) == (0, 0, 0, 0), where
        assert bth.padcount == (-exp.length) % 4, where
        assert bth.dqpn == cfg.dqpn and bth.ackreq == exp.ackreq, where
        assert (reth.va, reth.rkey, reth.dma_len) == (exp.va, exp.rkey, exp.dma_len), where
        if exp.imm is not None:
            assert pkt[L.ImmDt].imm == exp.imm, where
        else:
            assert L.ImmDt not in pkt, where
        data = host.tb.ram.read(exp.laddr, exp.length)
        got = L.write_payload(bth)
        assert got == data, f"{where}: payload differs from host memory"
        ref = L.write_packet(
            opcode=exp.opcode,
            dqpn=cfg.dqpn,
            psn=exp.psn,
            va=exp.va,
            rkey=exp.rkey,
            dma_len=exp.dma_len,
            payload=data,
            imm=exp.imm,
            ev=sport,
            flow_label=flow,
            ackreq=exp.ackreq,
            dscp=cfg.dscp,
            src_mac=SRC_MAC,
            dst_mac=cfg.dst_mac,
            src_ip=src_ip,
            dst_ip=cfg.dst_ip,
        )
        ref[L.BTH].se = exp.se
        ref = bytes(ref) if fmt != EvFormat.SRV6 else L.srv6_frame(bytes(ref), ev)
        assert ref == frame, f"{where}: frame differs from the reference bytes"

    async def wait_all(self, tb: TB, timeout_cycles=200_000, ack=False):
        """Check frames as they come until every expected packet is in; with
        ``ack``, acknowledge each QP's checked packets as reliability would."""
        acked = {}
        for _ in range(timeout_cycles // 64):
            self.check(tb)
            if ack:
                for q, una in list(self.next_una.items()):
                    if acked.get(q) != una:
                        await tb.ack(q, una)
                        acked[q] = una
            if self.outstanding() == 0:
                break
            await ClockCycles(tb.dut.clk, 64)
        await ClockCycles(tb.dut.clk, 200)  # nothing more may come
        self.check(tb)
        assert self.outstanding() == 0, (
            f"{self.outstanding()} packets missing: "
            + ", ".join(f"QP {q}: {len(v)}" for q, v in self.pending.items() if v)
            + f"; retransmits {self.retx_expected[:8]}"
        )
        assert self.checked_frames == len(tb.frames), "frames beyond the expected ones"
        assert self.sent_index == len(tb.sent), "sent records without frames"


async def make_tb(dut, seed=0, latency=True, backpressure=True):
    tb = TB(dut)
    rng = seeds.rng(seed)
    tb.set_memory_latency(random.Random(rng.random()) if latency else None)
    tb.set_backpressure(random.Random(rng.random()) if backpressure else None)
    await tb.reset()
    host = Host(tb)
    await host.setup()
    return tb, host


async def check_counters(tb: TB, host: Host):
    sb = host.sb
    sent_new = Counter(r["qpn"] for _, r in tb.sent if not r["retx"])
    sent_retx = Counter(r["qpn"] for _, r in tb.sent if r["retx"])
    for q in host.cfg:
        assert await tb.read(tb.qreg(q, Q.CONSUMER)) == host.pi[q], f"QP {q} consumer index"
        assert await tb.read(tb.qreg(q, Q.NEXT_PSN)) == host.next_psn[q], f"QP {q} next PSN"
        tx = await tb.read(tb.qreg(q, Q.TX_PACKETS))
        retx = await tb.read(tb.qreg(q, Q.RETX_PACKETS))
        assert tx == sent_new[q] + sent_retx[q] and retx == sent_retx[q], f"QP {q} counters"
    assert sb.checked_frames == len(tb.frames)


# ---------------------------------------------------------------------------
# The engine's Verilator build, and the benchmark's measurement


def tx_test_top(**params):
    """TxEngine(**params) with AXI4LiteToCSR in front of its CSR bus: the
    toplevel ``tx_engine_top`` of the TX engine's tests and bench."""
    from amaranth.hdl import Module
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In

    from hw.axi import AXI4LiteSignature
    from hw.csr import AXI4LiteToCSR
    from hw.tx.engine import TxEngine

    class TxTestTop(wiring.Component):
        """TxEngine with AXI4LiteToCSR in front of its CSR bus."""

        def __init__(self):
            self.engine = TxEngine(**params)
            ports = dict(self.engine.signature.members)
            del ports["csr"]
            ports["s_axil"] = In(AXI4LiteSignature(16, 32))
            super().__init__(ports)

        def elaborate(self, platform):
            m = Module()
            m.submodules.bridge = bridge = AXI4LiteToCSR(16, read_latency=TxEngine.CSR_READ_LATENCY)
            m.submodules.engine = engine = self.engine
            wiring.connect(m, wiring.flipped(self.s_axil), bridge.s_axil)
            wiring.connect(m, bridge.csr, engine.csr)
            for name in ("m_axi", "m_axis", "sent"):
                wiring.connect(m, getattr(engine, name), wiring.flipped(getattr(self, name)))
            for name in ("retx", "ack_update", "ev_update", "wimm_done"):
                wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(engine, name))
            if "link_up" in engine.signature.members:
                m.d.comb += engine.link_up.eq(self.link_up)
            return m

    return TxTestTop()


def build_name():
    """``tx_engine_w<DATA_WIDTH>``, then each ``TX_*`` knob that differs from
    its default (``_q256`` for 256 QPs, ...): one build directory per build."""
    knobs = (("q", NUM_QPS, 16), ("e", EVS_PER_QP, 16), ("i", INFLIGHT, 256),
             ("p", NUM_PLANES, 3), ("v6_", int(IPV6), 1), ("ev", EV_WIDTH, 64 if IPV6 else 16))
    return f"tx_engine_w{DATA_WIDTH}" + "".join(f"_{k}{v}" for k, v, d in knobs if v != d)


def run(test_module="tests.hw.test_tx_engine", **kwargs):
    """Runs ``test_module``'s cocotb tests (``run_cocotb``'s ``kwargs``:
    ``testcase``, ``extra_env``) on the engine's Verilator build."""
    from sim.cocotb_runner import run_cocotb

    return run_cocotb(
        name=build_name(),
        elaborate=lambda: tx_test_top(
            data_width=DATA_WIDTH,
            num_qps=NUM_QPS,
            evs_per_qp=EVS_PER_QP,
            inflight_depth=INFLIGHT,
            num_planes=NUM_PLANES,
            ipv6=IPV6,
            ev_width=EV_WIDTH,
        ),
        toplevel="tx_engine_top",
        test_module=test_module,
        **kwargs,
    )


async def read_channel(dut, log):
    """Per cycle (time, R beat by ARID or None, AR taken, reads outstanding before
    it): the DMA read channel, for the benchmark's account of a packet's cycles."""
    outstanding = 0
    while True:
        await RisingEdge(dut.clk)
        ar = bool(dut.m_axi__arvalid.value and dut.m_axi__arready.value)
        beat = None
        if dut.m_axi__rvalid.value and dut.m_axi__rready.value:
            beat = int(dut.m_axi__rid.value)
        log.append((get_sim_time("ns"), beat, ar, outstanding))
        outstanding += ar - (beat is not None and bool(dut.m_axi__rlast.value))


def read_channel_account(log, ns_first, ns_last) -> dict:
    """The read channel between two times: R beats of WQE fetches (ARID 0) and of
    payload (ARID 1), bursts, and the cycles a burst was outstanding with no beat
    (the memory's latency)."""
    window = [entry for entry in log if ns_first <= entry[0] <= ns_last]
    return dict(
        wqe_beats=sum(1 for _, b, _, _ in window if b == 0),
        payload_beats=sum(1 for _, b, _, _ in window if b == 1),
        bursts=sum(1 for _, _, ar, _ in window if ar),
        waiting=sum(1 for _, b, _, n in window if b is None and n > 0),
        idle=sum(1 for _, b, _, n in window if b is None and n == 0),
    )


async def bench_case(dut, messages, mtu, qps):
    """``messages`` (lengths, one WQE each, spread over ``qps`` in turn) at
    ``mtu``, memory at full speed and no MAC backpressure: packets, payload,
    frame bytes and beats, the cycles from the first frame's first beat to
    the last's last, and the read channel's account."""
    tb, host = await make_tb(dut, seed=91, latency=False, backpressure=False)
    reads = []
    cocotb.start_soon(read_channel(dut, reads))
    rng = seeds.rng(92)
    for q in qps:
        await host.open_qp(
            QpConfig(q, mtu=mtu, cwnd=INFLIGHT, mpr=max(1, INFLIGHT // 128)), enable=False
        )
    payload = 0
    for i, n in enumerate(messages):
        q = qps[i % len(qps)]
        await host.post(q, n, rng, laddr=host.alloc(n, rng, align_offset=0), doorbell=False)
        payload += n
    for q in qps:
        await host.ring_doorbell(q)
    for q in qps:
        await tb.write(tb.qreg(q, Q.CTRL), 1)
    await host.sb.wait_all(tb, timeout_cycles=2_000_000, ack=True)
    ns_first = tb.frames[0][0]
    # the last frame ends (beats - 1) cycles after its first beat
    last_beats = -(-len(tb.frames[-1][1]) // tb.lanes)
    ns_last = tb.frames[-1][0] + (last_beats - 1) * CLK_NS
    cycles = (ns_last - ns_first) // CLK_NS + 1
    wire = sum(len(f) for _, f in tb.frames)
    beats = sum(-(-len(f) // tb.lanes) for _, f in tb.frames)
    return dict(
        packets=len(tb.frames),
        payload_bytes=payload,
        frame_bytes=wire,
        beats=beats,
        cycles=int(cycles),
        read_channel=read_channel_account(reads, ns_first, ns_last),
    )

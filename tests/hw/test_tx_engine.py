"""cocotb regression of hw.tx.engine.TxEngine under Verilator.

Corundum-style: a ``TB`` class binds cocotbext-axi models to the test top
(AXI4LiteToCSR in front of TxEngine): AxiLiteMaster on the CSRs, AxiRam as
host memory (random AR/R pauses standing in for latency), AxiStreamSink on
the MAC side (random backpressure), drivers for ``retx``/``ack_update``/
``ev_update`` and a monitor on ``sent``. A small host driver (``Host``) puts
WQEs in the send rings and rings doorbells, and ``Scoreboard`` keeps, per QP,
the packets a message must become (a Python reference written from
docs/protocol.md and docs/tx.md).

Every frame is dissected with the project's scapy layers and checked field by
field against the reference, then rebuilt byte for byte with
``host_driver.layers.write_packet`` from the reference and host memory; the
IPv4 checksum and ICRC are verified with ``check_frame``. The build has
``ipv6`` (``TX_IPV6``, 1 by default): a QP whose peer is an IPv6 address
frames over IPv6, checked the same way. The EV (UDP source
port) of every packet must be GOOD for its QP at the time the packet was
committed (the ``sent`` record's cycle).

pytest builds one Verilator model (``tx_engine_w64``) shared by all cocotb
tests of this module; a long random soak is behind ``@pytest.mark.long``.
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
import pytest
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
from hw.tx.regs import EV_PLANE_LSB, QP_BASE, QP_STRIDE, TX_TYPE_ID, G, Q
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
BUF_BASE = 0x100000
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
# Tests


def message_lengths(mtu: int) -> list[int]:
    return sorted(
        {
            0,
            1,
            3,
            7,
            8,
            9,
            63,
            64,
            255,
            256,
            257,
            mtu - 1,
            mtu,
            mtu + 1,
            2 * mtu + 3,
            4095,
            4096,
            4097,
            3 * mtu + mtu // 2 + 5,
        }
    )


@cocotb.test()
@cocotb.parametrize(mtu=[256, 1024, 4096])
async def test_messages(dut, mtu):
    """Lengths 0..64 KiB, aligned and not, across 4 KiB pages, with and without
    immediate, on 4 QPs at once; random memory latency and MAC backpressure."""
    tb, host = await make_tb(dut, seed=mtu)
    rng = seeds.rng(mtu + 1)
    qps = [0, 5, 10, 15][:NUM_QPS]
    for q in qps:
        await host.open_qp(
            QpConfig(
                q,
                mtu=mtu,
                dscp=q * 3 % 64,
                next_psn=rng.getrandbits(24),
                dst_mac=f"02:00:00:00:01:{q:02x}",
                dst_ip=f"10.1.0.{q + 2}",
            )
        )
    lengths = message_lengths(mtu)
    for i, n in enumerate(lengths):
        q = qps[i % len(qps)]
        imm = rng.getrandbits(32) if rng.random() < 0.5 else None
        # some buffers start just below a 4 KiB page so the read crosses it
        laddr = None
        if i % 3 == 0:
            page = (host.buf_next + 4096) & ~4095
            laddr = page - rng.randrange(1, 64)
            host.buf_next = laddr
            laddr = host.alloc(n, rng, align_offset=0)
        await host.post(q, n, rng, imm=imm, laddr=laddr)
    await host.post(qps[0], 65536, rng, imm=0x12345678)
    await host.post(qps[1], 65536 - 3, rng, laddr=host.alloc(65536, rng, align_offset=5))
    await host.sb.wait_all(tb, ack=True)
    await check_counters(tb, host)


@cocotb.test()
async def test_many_qps(dut):
    """All QPs at once with mixed MTUs: every packet right, and the round-robin
    visits every QP with work once per round."""
    tb, host = await make_tb(dut, seed=11)
    rng = seeds.rng(12)
    for q in range(NUM_QPS):
        await host.open_qp(QpConfig(q, mtu=256, next_psn=rng.getrandbits(24)), enable=False)
    # 12 packets per QP, posted while disabled, then all enabled
    for q in range(NUM_QPS):
        await host.post(q, 4 * 256, rng, doorbell=False)
        await host.post(q, 8 * 256 - rng.randrange(200), rng, imm=q, doorbell=False)
        await host.ring_doorbell(q)
    for q in range(NUM_QPS):
        await tb.write(tb.qreg(q, Q.CTRL), 1)
    await host.sb.wait_all(tb)
    order = host.sb.order
    # once every QP has sent (each was enabled and its first WQE read ahead),
    # and a round after that (the read-ahead, faster than these packets take
    # WQEs, catching up with the QPs whose first WQE ran out meanwhile),
    # each window of NUM_QPS consecutive packets holds every QP once, until
    # QPs run dry
    all_in = max(order.index(q) for q in range(NUM_QPS)) + 1
    assert all_in < 4 * NUM_QPS, order
    steady = order[all_in + NUM_QPS : len(order) - 2 * NUM_QPS]
    assert len(steady) >= 5 * NUM_QPS, order
    for i in range(len(steady) - NUM_QPS + 1):
        window = steady[i : i + NUM_QPS]
        assert len(set(window)) == NUM_QPS, f"not round-robin at {i}: {window} in {order}"
    # second phase: different MTUs, random lengths, all QPs
    for q in range(NUM_QPS):
        mtu = rng.choice([256, 512, 1024, 2048, 4096])
        await tb.write(tb.qreg(q, Q.MTU), mtu)
        host.cfg[q].mtu = mtu
        for _ in range(3):
            await host.post(
                q,
                rng.randrange(0, 9000),
                rng,
                imm=rng.getrandbits(32) if rng.random() < 0.3 else None,
            )
    await host.sb.wait_all(tb, ack=True)
    await check_counters(tb, host)


@cocotb.test(skip=not IPV6)
async def test_ipv6_peers(dut):
    """QPs whose peers are IPv6 addresses beside QPs with IPv4 peers, every
    QP with messages of every packet kind at once: each frame over its QP's
    family, byte-exact against scapy's (IPv6: traffic class, flow label 0,
    hop limit 64, payload length; the ICRC over IPv6's masks). A QP moved
    from IPv4 to IPv6 between messages frames the next ones over IPv6."""
    tb, host = await make_tb(dut, seed=31)
    rng = seeds.rng(32)
    qps = list(range(min(NUM_QPS, 4)))
    for q in qps:
        peer = f"2001:db8:{q:x}::{q + 2:x}" if q % 2 else f"10.2.0.{q + 2}"
        await host.open_qp(QpConfig(q, mtu=rng.choice([256, 1024]), dscp=rng.getrandbits(6),
                                    next_psn=rng.getrandbits(24), dst_ip=peer,
                                    dst_mac=f"02:00:00:00:02:{q:02x}"))
    for i in range(24):
        q = qps[i % len(qps)]
        await host.post(q, rng.choice([0, 1, 3, 64, 255, 256, 257, 1500, 3000]), rng,
                        imm=rng.getrandbits(32) if rng.random() < 0.4 else None)
    await host.sb.wait_all(tb, ack=True)
    # QP 0 moves to an IPv6 peer (its new address first, then the family)
    cfg = host.cfg[qps[0]]
    cfg.dst_ip = "fd00::abcd:1"
    for i, off in enumerate((Q.DST_IP, Q.DST_IP6_1, Q.DST_IP6_2, Q.DST_IP6_3)):
        await tb.write(tb.qreg(qps[0], off), ip_int(cfg.dst_ip) >> (32 * i) & 0xFFFFFFFF)
    await tb.write(tb.qreg(qps[0], Q.IP6), 1)
    for n in (0, 700, 2500):
        await host.post(qps[0], n, rng, imm=n or None)
    await host.sb.wait_all(tb, ack=True)
    v6 = sum(frame[12:14] == b"\x86\xdd" for _, frame in tb.frames)
    assert 0 < v6 < len(tb.frames), f"{v6} of {len(tb.frames)} frames over IPv6"
    assert await tb.read(G.SRC_IP6 + 12) == ip_int(SRC_IP6) >> 96
    assert await tb.read(tb.qreg(qps[1], Q.IP6)) == 1
    await check_counters(tb, host)


@cocotb.test(skip=EV_WIDTH < 64)
async def test_ev_formats(dut):
    """QPs of each EV format over IPv6 (UDP, STEV, SRv6), beside an IPv4 QP
    whose format bits say SRv6, with 64-bit EVs of their own (the bits above
    15 through ev_value_hi), messages of every packet kind at once under the
    sink's backpressure: each frame carries its EV where its format puts it
    (STEV's flow label, SRv6's carrier and source port; the IPv4 QP's as
    UDP's), byte-exact against scapy's, the SRv6 frames' ICRC over the
    peer's address; the entries read back whole."""
    tb, host = await make_tb(dut, seed=33)
    rng = seeds.rng(34)
    formats = [EvFormat.UDP, EvFormat.STEV, EvFormat.SRV6, EvFormat.SRV6]
    qps = list(range(min(NUM_QPS, len(formats))))
    for q in qps:
        v6 = q < 3
        peer = f"fd00:0:{q + 2:x}::" if v6 else f"10.2.0.{q + 2}"
        await host.open_qp(QpConfig(q, mtu=rng.choice([256, 1024]), dscp=rng.getrandbits(6),
                                    next_psn=rng.getrandbits(24), dst_ip=peer,
                                    dst_mac=f"02:00:00:00:02:{q:02x}", ev_format=formats[q]))
        for i in range(EVS_PER_QP):
            ev = (0x0E00 + i) << 48 | (q + 2) << 32 | rng.getrandbits(32)
            await host.set_ev(q, i, value=ev)
    for i in range(32):
        q = qps[i % len(qps)]
        await host.post(q, rng.choice([0, 1, 3, 64, 255, 256, 257, 1500, 3000]), rng,
                        imm=rng.getrandbits(32) if rng.random() < 0.4 else None)
    await host.sb.wait_all(tb, ack=True)
    for q in qps:
        await tb.write(G.EV_SELECT, 5 | q << 8)
        words = [await tb.read(G.EV_VALUE_HI + 4 * k) for k in range(ev_hi_words(EV_WIDTH))]
        assert words == [host.ev_value[(q, 5)] >> 16 + 32 * k & 0xFFFFFFFF
                         for k in range(len(words))]
    flows = {L.flow_label(frame) for _, frame in tb.frames}
    assert len(flows) > 1, "no STEV flow label on the wire"
    await check_counters(tb, host)


@cocotb.test()
async def test_psn_wrap(dut):
    """PSNs wrap from 0xFFFFFF to 0, for sending, the window and ack_update."""
    tb, host = await make_tb(dut, seed=21)
    rng = seeds.rng(22)
    await host.open_qp(QpConfig(3, mtu=256, next_psn=0xFFFFF0, cwnd=24))
    await host.post(3, 40 * 256 + 17, rng, imm=7)  # 41 packets, PSN 0xFFFFF0..0x000018
    await ClockCycles(tb.dut.clk, 3000)
    host.sb.check(tb)
    assert len(tb.sent) == 24, f"{len(tb.sent)} sent with a window of 24"
    # acknowledge across the wrap
    await tb.ack(3, 0x000002)
    assert await tb.read(tb.qreg(3, Q.UNA_PSN)) == 0x000002
    await host.sb.wait_all(tb)
    psns = [r["psn"] for _, r in tb.sent]
    assert psns[15:18] == [0xFFFFFF, 0x000000, 0x000001], psns[14:19]
    await check_counters(tb, host)


@cocotb.test()
async def test_unknown_opcode_and_reset(dut):
    """A WQE whose opcode TX does not know becomes no packet: one sent record
    with op_err and its ring index, the consumer index past it, and no new work
    from the QP (the WQE after it is not sent) while a retransmission of its
    PSNs in flight still goes; qp_ctrl.reset empties the ring (consumer =
    doorbell) and drops a part-sent WQE (another QP, parked on its window),
    after which each QP sends exactly the host's next WQE."""
    tb, host = await make_tb(dut, seed=71)
    rng = seeds.rng(72)
    q, q2 = 2, 5
    await host.open_qp(QpConfig(q, mtu=256, next_psn=0x500))
    await host.open_qp(QpConfig(q2, mtu=256, next_psn=0x700, cwnd=2))
    await host.post(q, 600, rng)  # 3 packets, WQE 0
    await host.post(q2, 5 * 256, rng)  # 5 packets, 2 go out (cwnd 2)
    await ClockCycles(tb.dut.clk, 3000)
    bad = host.pi[q]
    await host.post_unsent(q, 100, rng, opcode=0x07)
    await host.post_unsent(q, 100, rng)
    await host.ring_doorbell(q)
    await ClockCycles(tb.dut.clk, 3000)
    host.sb.check(tb)
    assert tb.refused == [{"qpn": q, "wqe_index": bad}], tb.refused
    assert await tb.read(tb.qreg(q, Q.CONSUMER)) == bad + 1
    assert await tb.read(tb.qreg(q, Q.STATUS)) & 1 == 0  # no part-sent WQE
    assert len(host.sb.pending[q]) == 0 and host.sb.checked_frames == len(tb.frames) == 5
    st2 = await tb.read(tb.qreg(q2, Q.STATUS))
    assert st2 & 3 == 3 and st2 >> 8 == 2, hex(st2)  # part sent, parked, 2 in flight
    # the halted QP still retransmits its PSNs in flight
    host.sb.expect_retx(q, 0x501)
    await tb.retx(q, 0x501)
    await ClockCycles(tb.dut.clk, 2000)
    host.sb.check(tb)
    assert host.sb.retx_expected == [] and len(tb.refused) == 1
    # reset: consumer = doorbell, the part-sent WQE of q2 dropped
    for qq in (q, q2):
        await tb.write(tb.qreg(qq, Q.CTRL), 2)
        assert await tb.read(tb.qreg(qq, Q.CONSUMER)) == host.pi[qq]
        assert await tb.read(tb.qreg(qq, Q.STATUS)) & 3 == 0
        assert await tb.read(tb.qreg(qq, Q.CTRL)) == 0
    del host.sb.pending[q2][:]  # the 3 packets of q2's WQE not sent
    for qq, psn in ((q, 0x900), (q2, 0xA00)):
        await tb.write(tb.qreg(qq, Q.NEXT_PSN), psn)
        host.next_psn[qq] = psn
        await tb.write(tb.qreg(qq, Q.CWND), 256)
        await host.post(qq, 300, rng)
        await tb.write(tb.qreg(qq, Q.CTRL), 1)
    await host.sb.wait_all(tb)
    assert len(tb.refused) == 1
    await check_counters(tb, host)


@cocotb.test()
async def test_max_wimm(dut):
    """qp_max_wimm bounds a QP's WRITE_WITH_IMM messages started and not completed:
    at the bound the next WITH_IMM WQE is not sent and the QP's WQEs behind it
    (a plain WRITE too) wait, while another QP sends and the QP's own
    retransmissions go; each wimm_done (reliability's SUCCESS completion) lets
    one more start. qp_wimm_outstanding and qp_status.wimm_blocked show it;
    qp_ctrl.reset and .flush set the count to 0, bound 0 is no bound."""
    tb, host = await make_tb(dut, seed=81)
    rng = seeds.rng(82)
    q, q2 = 4, 9
    await host.open_qp(QpConfig(q, mtu=256, next_psn=0x300))
    await host.open_qp(QpConfig(q2, mtu=256, next_psn=0x400))
    await tb.write(tb.qreg(q, Q.MAX_WIMM), 2)
    assert await tb.read(tb.qreg(q, Q.MAX_WIMM)) == 2

    async def settle(sent):
        await ClockCycles(tb.dut.clk, 2500)
        host.sb.check(tb)
        assert len(tb.sent) == sent, f"{len(tb.sent)} packets sent, expected {sent}"

    async def outstanding(qp):
        return await tb.read(tb.qreg(qp, Q.WIMM_OUTSTANDING))

    async def blocked(qp):
        return (await tb.read(tb.qreg(qp, Q.STATUS))) >> 3 & 1

    await host.post(q, 600, rng, imm=0xA)  # 3 packets
    await host.post(q, 100, rng, imm=0xB)
    await host.post(q, 100, rng, imm=0xC)  # the third: waits
    await host.post(q, 300, rng)  # a plain WRITE behind it: waits too (2 packets)
    await host.post(q, 50, rng, imm=0xE)
    for _ in range(3):  # another QP, no bound: all go
        await host.post(q2, 100, rng, imm=7)
    await settle(4 + 3)
    assert [p.imm for p in host.sb.pending[q]][:1] == [0xC]
    assert await outstanding(q) == 2 and await blocked(q) == 1
    assert await outstanding(q2) == 3 and await blocked(q2) == 0
    # a retransmission of the parked QP still goes
    host.sb.expect_retx(q, 0x301)
    await tb.retx(q, 0x301)
    await settle(8)
    # one completes: C and the WRITE behind it go, E waits
    await tb.wimm_done(q)
    await settle(8 + 1 + 2)
    assert await outstanding(q) == 2 and await blocked(q) == 1
    # a completion for another QP or a QPN beyond the table changes nothing here
    await tb.wimm_done(q2)
    await tb.wimm_done(NUM_QPS + 3)
    await settle(11)
    assert await outstanding(q2) == 2
    await tb.wimm_done(q)
    await host.sb.wait_all(tb)
    assert await outstanding(q) == 2 and await blocked(q) == 0
    for _ in range(4):  # never below 0
        await tb.wimm_done(q)
    assert await outstanding(q) == 0
    # bound 1, reset: the count and the parked WQE go, the QP restarts at the doorbell
    await tb.write(tb.qreg(q, Q.MAX_WIMM), 1)
    sent = len(tb.sent)
    await host.post(q, 100, rng, imm=1)
    await host.post(q, 100, rng, imm=2)
    await settle(sent + 1)
    assert await outstanding(q) == 1 and await blocked(q) == 1
    await tb.write(tb.qreg(q, Q.CTRL), 2)  # reset
    assert await outstanding(q) == 0 and await blocked(q) == 0
    del host.sb.pending[q][:]
    await tb.write(tb.qreg(q, Q.NEXT_PSN), 0x900)
    host.next_psn[q] = 0x900
    await host.post(q, 100, rng, imm=3)
    await tb.write(tb.qreg(q, Q.CTRL), 1)
    await host.sb.wait_all(tb)
    assert await outstanding(q) == 1
    # flush (reliability's ERROR): the count to 0
    await tb.write(tb.qreg(q, Q.CTRL), 4)
    assert await outstanding(q) == 0 and await tb.read(tb.qreg(q, Q.CTRL)) == 0
    # bound 0: none; a bound above the in-flight table reads back as written
    await tb.write(tb.qreg(q, Q.MAX_WIMM), 0)
    await tb.write(tb.qreg(q, Q.CTRL), 1)
    for i in range(4):
        await host.post(q, 10, rng, imm=i)
    await host.sb.wait_all(tb)
    assert await outstanding(q) == 4
    await tb.write(tb.qreg(q2, Q.MAX_WIMM), 0xFFFF)
    assert await tb.read(tb.qreg(q2, Q.MAX_WIMM)) == 0xFFFF
    await check_counters(tb, host)


@cocotb.test()
async def test_window(dut):
    """min(MPR x 128, cwnd) limits the PSNs in flight; acks reopen it."""
    tb, host = await make_tb(dut, seed=31)
    rng = seeds.rng(32)
    q = 7
    await host.open_qp(QpConfig(q, mtu=256, cwnd=5, next_psn=0x1000))
    for _ in range(30):
        await host.post(q, rng.randrange(0, 300), rng)  # 1 or 2 packets each
    total = len(host.sb.pending[q])
    una = 0x1000
    rounds = 0
    while True:
        await ClockCycles(tb.dut.clk, 400)
        host.sb.check(tb)
        sent = len(tb.sent)
        status = await tb.read(tb.qreg(q, Q.STATUS))
        inflight = status >> 8
        assert inflight == sent - (una - 0x1000), (inflight, sent, una)
        if sent == total:
            break
        assert inflight == 5, f"window of 5 not filled: {inflight} in flight"
        assert status & 2, "QP not parked on its window"
        # acknowledge a random part of what is in flight
        una += rng.randrange(1, 6)
        await tb.ack(q, una)
        rounds += 1
    assert rounds >= 5
    # a stale ack (behind una) and one beyond next_psn are ignored
    await tb.ack(q, una - 3)
    await tb.ack(q, 0x1000 + total + 5)
    assert await tb.read(tb.qreg(q, Q.UNA_PSN)) == una
    # MPR limits too: MPR 1 = 128 PSNs, with cwnd out of the way
    await tb.ack(q, 0x1000 + total)
    await tb.write(tb.qreg(q, Q.CWND), 1000)
    await tb.write(tb.qreg(q, Q.MPR), 1)
    await host.post(q, 140 * 256, rng)
    await ClockCycles(tb.dut.clk, 128 * 90 + 2000)
    host.sb.check(tb)
    assert len(tb.sent) == total + 128, f"{len(tb.sent) - total} sent with MPR 128"
    await tb.ack(q, 0x1000 + total + 100)
    await host.sb.wait_all(tb)
    await check_counters(tb, host)


@cocotb.test()
async def test_retransmit(dut):
    """Retransmit requests for arbitrary PSNs re-read the payload and go out on
    another GOOD EV; PSNs not in flight are ignored and counted."""
    tb, host = await make_tb(dut, seed=41)
    rng = seeds.rng(42)
    for q in (1, 2):
        await host.open_qp(QpConfig(q, mtu=1024, next_psn=0xFFFFF8 if q == 2 else 100))
    for _ in range(6):
        for q in (1, 2):
            await host.post(
                q,
                rng.randrange(0, 5000),
                rng,
                imm=rng.getrandbits(32) if rng.random() < 0.5 else None,
            )
    await host.sb.wait_all(tb)
    inflight = {q: [p.psn for p in host.sb.by_psn.values() if p.qp == q] for q in (1, 2)}
    requests = []
    for _ in range(30):
        q = rng.choice((1, 2))
        psn = rng.choice(inflight[q])
        requests.append((q, psn))
    for q, psn in requests:
        host.sb.expect_retx(q, psn)
        await tb.retx(q, psn, reason=rng.randrange(3))
    await host.sb.wait_all(tb)
    for q, psn, old, new in host.sb.retx_seen:
        assert old != new, f"QP {q} PSN {psn:#x} retransmitted on the EV it last used ({old})"
    # the same PSN again: must avoid the EV of the retransmit, not the original
    q, psn = requests[0]
    host.sb.expect_retx(q, psn)
    await tb.retx(q, psn)
    await host.sb.wait_all(tb)
    assert host.sb.retx_seen[-1][2] != host.sb.retx_seen[-1][3]
    # not in flight: an acknowledged PSN, one never sent, a QP out of range
    ignored0 = await tb.read(G.RETX_IGNORED)
    una = (min(inflight[1]) + 3) & L.PSN_MASK
    await tb.ack(1, una)
    await tb.retx(1, min(inflight[1]))
    await tb.retx(2, host.next_psn[2])
    await tb.retx(NUM_QPS + 3, 0)
    await ClockCycles(tb.dut.clk, 300)
    host.sb.check(tb)
    assert await tb.read(G.RETX_IGNORED) == ignored0 + 3
    assert host.sb.outstanding() == 0
    # with one GOOD EV left, a retransmit uses it even if it was the last one
    for i in range(1, EVS_PER_QP):
        await host.set_ev(2, i, state=EvState.DENIED)
    psn = host.next_psn[2]
    await host.post(2, 10, rng)
    await host.sb.wait_all(tb)
    host.sb.expect_retx(2, psn)
    await tb.retx(2, psn)
    await host.sb.wait_all(tb)
    assert host.sb.retx_seen[-1][2:] == (0, 0)
    await check_counters(tb, host)


@cocotb.test()
async def test_ev_states(dut):
    """EVs going ASSUMED_BAD or DENIED mid-message (by CSR and by ev_update) are
    not used from the next packet on; a QP with no GOOD EV stalls and resumes;
    spreading over the GOOD EVs stays even."""
    tb, host = await make_tb(dut, seed=51)
    rng = seeds.rng(52)
    q = 4
    await host.open_qp(QpConfig(q, mtu=256, cwnd=256, mpr=2))
    values = rng.sample(range(1, 0x10000), EVS_PER_QP)
    for i, v in enumerate(values):
        state = EvState.DENIED if i in (3, 9) else EvState.GOOD
        await host.set_ev(q, i, value=v, state=state)
    for _ in range(2):
        await host.post(q, 120 * 256 + 1, rng)
    # change states while the message streams
    changes = [
        (5, EvState.ASSUMED_BAD, True),
        (0, EvState.DENIED, False),
        (12, EvState.ASSUMED_BAD, False),
        (3, EvState.GOOD, True),
        (15, EvState.ASSUMED_BAD, True),
    ]
    for index, state, via_stream in changes:
        await ClockCycles(tb.dut.clk, rng.randrange(200, 900))
        await host.set_ev(q, index, state=state, via_stream=via_stream)
        await tb.ack(q, tb.sent[-1][1]["psn"] if tb.sent else 0)
    await host.sb.wait_all(tb)
    # spreading since the last change: most- vs least-used GOOD EV
    t_last = host.ev_history[-1][0] + 8 * CLK_NS
    uses = Counter(r["ev_index"] for t, r in tb.sent if t >= t_last)
    good = [i for i in range(EVS_PER_QP) if host.ev_state[(q, i)] == EvState.GOOD]
    assert set(uses) <= set(good)
    counts = [uses[i] for i in good]
    n = sum(counts)
    assert n >= 4 * len(good), "too few packets to judge spreading"
    assert max(counts) - min(counts) <= 1, f"round-robin spreading off: {uses}"
    # every EV of the QP not GOOD: the QP parks, then resumes on the one made GOOD
    await tb.ack(q, host.next_psn[q])
    for i in good:
        await host.set_ev(q, i, state=EvState.ASSUMED_BAD, via_stream=bool(i % 2))
    sent_before = len(tb.sent)
    await host.post(q, 10 * 256, rng)
    await ClockCycles(tb.dut.clk, 2000)
    assert len(tb.sent) == sent_before, "packets sent with no GOOD EV"
    status = await tb.read(tb.qreg(q, Q.STATUS))
    assert status & 4, "QP not parked for want of a GOOD EV"
    await host.set_ev(q, 7, state=EvState.GOOD)
    await host.sb.wait_all(tb)
    assert {r["ev_index"] for _, r in tb.sent[sent_before:]} == {7}
    # the CSR view of the table
    await tb.write(G.EV_SELECT, 5 | (q << 8))
    assert await tb.read(G.EV_ENTRY) == host.ev_entry(q, 5)
    assert host.ev_value[(q, 5)] == values[5] and host.ev_state[(q, 5)] == EvState.ASSUMED_BAD
    await check_counters(tb, host)


@cocotb.test()
async def test_spreading(dut):
    """Over N packets with a fixed set of GOOD EVs, use counts differ by at most
    one: max/min <= ceil(N/G)/floor(N/G)."""
    tb, host = await make_tb(dut, seed=61, latency=False, backpressure=False)
    rng = seeds.rng(62)
    for q in (0, 1):
        await host.open_qp(QpConfig(q, mtu=256))
    bad = {0: {2, 3, 7, 11, 12}, 1: set(range(1, EVS_PER_QP, 2))}
    for q in (0, 1):
        for i in sorted(bad[q]):
            await host.set_ev(q, i, state=EvState.DENIED if i % 2 else EvState.ASSUMED_BAD)
    # planes as a controller binds them, any of the NIC's (checked per frame)
    for i in range(EVS_PER_QP):
        await host.set_ev(1, i, state=host.ev_state[(1, i)], plane=rng.randrange(NUM_PLANES))
    acked = {0: 0, 1: 0}
    for _ in range(4):
        for q in (0, 1):
            await host.post(q, 100 * 256, rng)
        await host.sb.wait_all(tb)
        for q in (0, 1):
            await tb.ack(q, host.next_psn[q])
            acked[q] = host.next_psn[q]
    for q in (0, 1):
        uses = host.sb.ev_uses[q]
        good = [i for i in range(EVS_PER_QP) if i not in bad[q]]
        assert set(uses) == set(good), f"QP {q}: EVs used {sorted(uses)}, GOOD {good}"
        n = sum(uses.values())
        counts = [uses[i] for i in good]
        bound = -(-n // len(good)) / (n // len(good))
        tb.log.info(
            "QP %d: %d packets over %d EVs, max/min %.4f (bound %.4f)",
            q,
            n,
            len(good),
            max(counts) / min(counts),
            bound,
        )
        assert max(counts) / min(counts) <= bound, uses


async def ev_entries_unchanged(tb, host, q):
    for i in range(EVS_PER_QP):
        await tb.write(G.EV_SELECT, i | (q << 8))
        assert await tb.read(G.EV_ENTRY) == host.ev_entry(q, i), f"EV {i} changed"


@cocotb.test(skip=NUM_PLANES < 2)
async def test_links_steer_spraying(dut):
    """A plane whose link is down (``link_up``) is not sprayed on: the QP's
    packets spread evenly over its GOOD EVs on live planes and none leaves on
    the dead plane, with no EV's state changed; an EV bound to a plane the NIC
    lacks is never used. A QP whose every EV is on a dead plane stalls, and
    resumes on that plane as its link comes back."""
    tb, host = await make_tb(dut, seed=71, latency=False, backpressure=False)
    rng = seeds.rng(72)
    q = 2
    all_up = (1 << NUM_PLANES) - 1
    await host.open_qp(QpConfig(q, mtu=256))
    await host.set_ev(q, 0, plane=7)  # 7: a plane the NIC lacks
    dut.link_up.value = all_up & ~0b10
    start, frames0 = len(tb.sent), len(tb.frame_planes)
    await host.post(q, 64 * 256, rng)
    await host.sb.wait_all(tb, ack=True)
    uses = Counter(r["ev_index"] for _, r in tb.sent[start:])
    live = [i for i in range(EVS_PER_QP) if host.ev_plane[(q, i)] not in (1, 7)]
    assert sorted(uses) == live, f"EVs used {sorted(uses)}, live {live}"
    counts = [uses[i] for i in live]
    assert max(counts) - min(counts) <= 1, f"uneven over the live planes: {uses}"
    assert set(tb.frame_planes[frames0:]) == set(range(NUM_PLANES)) - {1}
    await ev_entries_unchanged(tb, host, q)

    # every EV on the dead plane: the QP stalls, then the link comes back
    for i in range(EVS_PER_QP):
        await host.set_ev(q, i, plane=1)
    start, frames0 = len(tb.sent), len(tb.frame_planes)
    await host.post(q, 16 * 256, rng)
    await ClockCycles(dut.clk, 3000)
    assert len(tb.sent) == start, "a packet left with every EV's plane down"
    dut.link_up.value = all_up
    await host.sb.wait_all(tb, ack=True)
    uses = Counter(r["ev_index"] for _, r in tb.sent[start:])
    assert sorted(uses) == list(range(EVS_PER_QP)), uses
    assert set(tb.frame_planes[frames0:]) == {1}
    await ev_entries_unchanged(tb, host, q)
    await check_counters(tb, host)


@cocotb.test()
async def test_registers(dut):
    """Block header, parameters, RW registers read back, bad MTUs ignored."""
    tb, host = await make_tb(dut, seed=71, latency=False, backpressure=False)
    assert await tb.read(G.ID) == (TX_TYPE_ID << 16) | 1
    assert await tb.read(G.NUM_QPS) == NUM_QPS
    assert await tb.read(G.EVS_PER_QP) == EVS_PER_QP
    caps = await tb.read(G.CAPS)
    assert caps & 0xFF == DATA_WIDTH // 8 and (caps >> 8) & 0xF == 12
    assert 1 << ((caps >> 12) & 0xF) == INFLIGHT
    assert (caps >> 16) & 1 == IPV6
    rng = seeds.rng(72)
    for q in (0, NUM_QPS - 1):
        vals = {
            Q.DEST_QPN: rng.getrandbits(24),
            Q.DST_MAC_LO: rng.getrandbits(32),
            Q.DST_MAC_HI: rng.getrandbits(16),
            Q.DST_IP: rng.getrandbits(32),
            Q.DSCP: rng.getrandbits(6),
            Q.SQ_BASE_LO: rng.getrandbits(26) << 6,
            Q.SQ_BASE_HI: rng.getrandbits(32),
            Q.SQ_LOG2_SIZE: rng.randrange(16),
            Q.MPR: rng.getrandbits(8),
            Q.CWND: rng.getrandbits(16),
            Q.NEXT_PSN: rng.getrandbits(24),
            Q.MTU: 2048,
        }
        for off, v in vals.items():
            await tb.write(tb.qreg(q, off), v)
        for off, v in vals.items():
            assert await tb.read(tb.qreg(q, off)) == v, f"QP {q} register {off:#x}"
        assert await tb.read(tb.qreg(q, Q.UNA_PSN)) == vals[Q.NEXT_PSN]
        for bad in (0, 100, 128, 8192, 3000):
            await tb.write(tb.qreg(q, Q.MTU), bad)
            assert await tb.read(tb.qreg(q, Q.MTU)) == 2048
    await tb.write(G.EV_SELECT, 3 | (2 << 8))
    assert await tb.read(G.EV_SELECT) == 3 | (2 << 8)
    # default: 0xC000 + index, GOOD, plane index mod num_planes (0 with one plane)
    assert await tb.read(G.EV_ENTRY) == 0xC003 | (3 % NUM_PLANES) << EV_PLANE_LSB
    assert await tb.read(G.SRC_IP) == ip_int(SRC_IP)
    assert await tb.read(QP_BASE + NUM_QPS * QP_STRIDE) == 0  # beyond the last QP


@cocotb.test(skip=not os.environ.get("TX_SOAK"))
async def test_soak(dut):
    """Random traffic on every QP with random retransmits, acks and EV changes."""
    tb, host = await make_tb(dut, seed=int(os.environ.get("TX_SEED", "81")))
    rng = seeds.rng(int(os.environ.get("TX_SEED", "81")) + 1)
    for q in range(NUM_QPS):
        await host.open_qp(
            QpConfig(q, mtu=rng.choice([256, 1024, 4096]), next_psn=rng.getrandbits(24))
        )
    for _ in range(int(os.environ["TX_SOAK"])):
        q = rng.randrange(NUM_QPS)
        await host.post(
            q,
            rng.choice([rng.randrange(64), rng.randrange(20000)]),
            rng,
            imm=rng.getrandbits(32) if rng.random() < 0.3 else None,
        )
        host.sb.check(tb)
        if rng.random() < 0.2 and tb.sent:
            _, rec = rng.choice(tb.sent[-50:])
            una = await tb.read(tb.qreg(rec["qpn"], Q.UNA_PSN))
            if (rec["psn"] - una) & L.PSN_MASK < 0x800000:
                host.sb.expect_retx(rec["qpn"], rec["psn"])
                await tb.retx(rec["qpn"], rec["psn"])
        if rng.random() < 0.1:
            i = rng.randrange(1, EVS_PER_QP)
            await host.set_ev(q, i, state=rng.choice([0, 0, 1, 2]), via_stream=rng.random() < 0.5)
    await host.sb.wait_all(tb, timeout_cycles=2_000_000, ack=True)
    await check_counters(tb, host)


# ---------------------------------------------------------------------------
# pytest entry points


def _top(**params):
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


def run(**kwargs):
    from sim.cocotb_runner import run_cocotb

    return run_cocotb(
        name=f"tx_engine_w{DATA_WIDTH}",
        elaborate=lambda: _top(
            data_width=DATA_WIDTH,
            num_qps=NUM_QPS,
            evs_per_qp=EVS_PER_QP,
            inflight_depth=INFLIGHT,
            num_planes=NUM_PLANES,
            ipv6=IPV6,
            ev_width=EV_WIDTH,
        ),
        toplevel="tx_engine_top",
        test_module="tests.hw.test_tx_engine",
        **kwargs,
    )


def test_tx_engine():
    run()


@pytest.mark.long
def test_tx_engine_soak():
    run(testcase="test_soak", extra_env={"TX_SOAK": "400"})


# ---------------------------------------------------------------------------
# Benchmark (sim/bench/tx.py runs this through the same Verilator build)


async def _read_channel(dut, log):
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


async def _bench_case(dut, messages, mtu, qps):
    tb, host = await make_tb(dut, seed=91, latency=False, backpressure=False)
    reads = []
    cocotb.start_soon(_read_channel(dut, reads))
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


@cocotb.test()
async def test_throughput(dut):
    """With memory at full speed and no backpressure, 64 KiB messages leave at
    one beat per cycle (>= 0.95 of the frames' beats), and 64-byte writes, on
    four QPs and on one, at >= 0.9 of the wire's packet rate (each WQE
    prefetched while the packets before it are sent)."""
    r = await _bench_case(dut, [65536] * 2, 1024, [0])
    assert r["cycles"] <= r["beats"] / 0.95, r
    for qps in ([0, 1, 2, 3], [0]):
        r = await _bench_case(dut, [64] * 64, 1024, qps)
        assert r["cycles"] <= r["beats"] / 0.9, r


MESSAGE_SIZES = (64, 256, 1024, 4096)


@cocotb.test(skip=not os.environ.get("TX_BENCH_OUT"))
async def test_bench(dut):
    import json

    results = {}
    for mtu in (1024, 4096):
        results[f"64KiB_mtu{mtu}"] = await _bench_case(dut, [65536] * 4, mtu, [0])
    results["64B_writes"] = await _bench_case(dut, [64] * 256, 1024, [0, 1, 2, 3])
    # one QP: its ring (2^RING_LOG2 WQEs) posted at once
    results["64B_writes_1qp"] = await _bench_case(dut, [64] * (1 << RING_LOG2), 1024, [0])
    # message sizes, one WQE each, 64 over 4 QPs, MTU 1024
    for n in MESSAGE_SIZES:
        results[f"messages_{n}"] = await _bench_case(dut, [n] * 64, 1024, [0, 1, 2, 3])
    results["data_bytes_per_cycle"] = DATA_WIDTH // 8
    with open(os.environ["TX_BENCH_OUT"], "w") as f:
        json.dump(results, f, indent=1)

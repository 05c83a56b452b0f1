"""cocotb tests of ``RxPipeline`` (the receive engine after the parser).

The testbench pieces here are shared by test_rx_engine.py and sim/rx_bench.py.

``RxTB`` drives ``RxPipeline`` (everything after the parser): header records
and payload beats built from scapy packets, CSRs, an AxiRam for host memory
(every byte written is checked against the allowed ranges as it is written)
and an AxiStreamSink for the ACK frames. ``RxModel`` is the scoreboard: the
responder semantics of docs/rx.md in plain Python.
"""

from __future__ import annotations

import ipaddress
import os
import random
from collections import Counter, deque

import cocotb
import pytest
from amaranth.hdl import Shape
from amaranth.lib import data
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge
from cocotbext.axi import (
    AxiBus,
    AxiRam,
    AxiStreamBus,
    AxiStreamFrame,
    AxiStreamSink,
    AxiStreamSource,
)
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from host_driver.layers import (
    AETH,
    BTH,
    IMM_OPCODES,
    PSN_MASK,
    RETH,
    WRITE_OPCODES,
    ImmDt,
    MRCProbe,
    MRCSack,
    check_frame,
    trim,
    write_packet,
    write_payload,
)
from hw.rx.parser import ParsedHeader
from hw.rx.regs import COUNTER_BASE, COUNTERS, MR_BASE, MR_STRIDE, QP_BASE, QP_STRIDE, RxRegisters
from tests.hw.rx_ack_stream import OWN_IP, OWN_MAC, AckStream, biased_psn

LAST_OPCODES = (0x08, 0x09, 0x0A, 0x0B)
AETH_ACK, NAK_REMOTE_ACCESS, NAK_TRIMMED = 0x1F, 0x62, 0x70
RTS, RTR, INIT = 3, 2, 1


def mac2int(mac: str) -> int:
    return int(mac.replace(":", ""), 16)


def ip2int(ip: str) -> int:
    return int(ipaddress.IPv4Address(ip))


# ---- packing ParsedHeader records --------------------------------------------------

def layout_fields(layout, base=0, prefix=""):
    out = {}
    for name, field in layout:
        shape = field.shape
        if isinstance(shape, data.Layout):
            out.update(layout_fields(shape, base + field.offset, f"{prefix}{name}."))
        else:
            out[f"{prefix}{name}"] = (base + field.offset, Shape.cast(shape).width)
    return out


class RecordCodec:
    def __init__(self, layout):
        self.fields = layout_fields(layout)

    def pack(self, values: dict) -> int:
        word = 0
        for name, v in values.items():
            off, w = self.fields[name]
            word |= (int(v) & ((1 << w) - 1)) << off
        return word

    def unpack(self, word: int) -> dict:
        return {n: (word >> off) & ((1 << w) - 1) for n, (off, w) in self.fields.items()}


def header_record(pkt, *, sack_bits=64, trimmed=False, trim_dscp=0x3F) -> tuple[dict, bytes]:
    """(ParsedHeader field values, payload) of a scapy frame, as the parser gives them."""
    pkt = Ether(bytes(pkt))
    ip, udp, bth = pkt[IP], pkt[UDP], pkt[BTH]
    rec = {
        "eth_src": mac2int(pkt[Ether].src),
        "eth_dst": mac2int(pkt[Ether].dst),
        "ip_src": ip2int(ip.src),
        "ip_dst": ip2int(ip.dst),
        "dscp": trim_dscp if trimmed else ip.tos >> 2,
        "ecn": ip.tos & 3,
        "ev": udp.sport,
        "trimmed": int(trimmed),
    }
    for f in ("opcode", "se", "migreq", "padcount", "tver", "pkey", "fecn", "becn", "resv6",
              "dqpn", "ackreq", "resv7", "psn"):
        rec[f"bth.{f}"] = getattr(bth, f)
    payload = b""
    if RETH in pkt:
        for f in ("va", "rkey", "dma_len"):
            rec[f"reth.{f}"] = getattr(pkt[RETH], f)
        if ImmDt in pkt:
            rec["imm"] = pkt[ImmDt].imm
        payload = b"" if trimmed else write_payload(pkt)
    if AETH in pkt:
        rec["aeth.syndrome"], rec["aeth.msn"] = pkt[AETH].syndrome, pkt[AETH].msn
    if MRCSack in pkt:
        s = pkt[MRCSack]
        for f in ("cum_psn", "sack_base", "ece", "sack_words", "ce_count"):
            rec[f"sack.{f}"] = getattr(s, f)
        rec["sack_bitmap"] = s.bitmap
    if MRCProbe in pkt:
        p = pkt[MRCProbe]
        for f in ("probe_id", "ev", "timestamp"):
            rec[f"probe.{f}"] = getattr(p, f)
    rec["payload_len"] = len(payload)
    return rec, payload


def message_packets(*, dqpn, first_psn, va, rkey, length, mtu, imm=None, ev=0xC000,
                    ackreq_last=True, src_ip="10.0.0.1", ecn=2, seed=None):
    """The packets of one RDMA WRITE [WITH IMM] message and its payload bytes."""
    rng = random.Random(seed)
    data_bytes = bytes(rng.getrandbits(8) for _ in range(length))
    n = max(1, -(-length // mtu))
    pkts = []
    for i in range(n):
        if n == 1:
            op = 0x0B if imm is not None else 0x0A
        elif i == 0:
            op = 0x06
        elif i == n - 1:
            op = 0x09 if imm is not None else 0x08
        else:
            op = 0x07
        last = i == n - 1
        pkts.append(write_packet(
            opcode=op, dqpn=dqpn, psn=(first_psn + i) & PSN_MASK, va=va + i * mtu, rkey=rkey,
            dma_len=length, payload=data_bytes[i * mtu:(i + 1) * mtu],
            imm=imm if (last and imm is not None) else None, ev=ev,
            ackreq=int(last and ackreq_last), ecn=ecn, src_ip=src_ip, dst_ip=OWN_IP,
            dst_mac=OWN_MAC,
        ))
    return pkts, data_bytes


# ---- stream drivers -------------------------------------------------------------------

class StreamSource:
    """Drives an amaranth.lib.stream port (valid/ready/payload) from a queue."""

    def __init__(self, clk, port_prefix, dut, idle=0.0, rng=None):
        self.clk = clk
        self.valid = getattr(dut, f"{port_prefix}__valid")
        self.ready = getattr(dut, f"{port_prefix}__ready")
        self.payload = getattr(dut, f"{port_prefix}__payload")
        self.queue = deque()
        self.idle = idle
        self.rng = rng or random.Random(1)
        self.sent = 0
        self.active = False
        self.valid.value = 0
        cocotb.start_soon(self._run())

    def empty(self):
        return not self.queue and not self.active

    async def _run(self):
        self.active = False
        while True:
            await RisingEdge(self.clk)
            if self.active and int(self.ready.value):
                self.queue.popleft()
                self.sent += 1
                self.active = False
            if self.queue and not self.active and self.rng.random() >= self.idle:
                self.payload.value = self.queue[0]
                self.active = True
            self.valid.value = int(self.active)


class StreamSink:
    def __init__(self, clk, port_prefix, dut):
        self.clk = clk
        self.valid = getattr(dut, f"{port_prefix}__valid")
        self.ready = getattr(dut, f"{port_prefix}__ready")
        self.payload = getattr(dut, f"{port_prefix}__payload")
        self.items = []
        self.ready.value = 1
        cocotb.start_soon(self._run())

    async def _run(self):
        while True:
            await RisingEdge(self.clk)
            if int(self.valid.value) and int(self.ready.value):
                self.items.append(int(self.payload.value))


def pause_gen(rng, prob):
    while True:
        yield rng.random() < prob


# ---- the scoreboard -------------------------------------------------------------------

class QpModel:
    def __init__(self, cfg):
        self.cfg = cfg
        self.epsn = cfg["epsn"]
        self.recv = set()  # PSNs at or after epsn that are in
        self.msn = 0
        self.unacked = 0
        self.ece = 0
        self.ce_count = 0
        self.pending = {}  # psn -> (opcode, imm, dma_len)
        self.cq_prod = 0
        self.ev = 0
        self.mac = 0
        self.placed = set()  # every PSN placed since the QP was set up


class RxModel:
    """Responder semantics of docs/rx.md, frame by frame, marks in arrival order."""

    def __init__(self, *, num_qps=16, sack_bits=64, mpr_max=1024, max_pending=8):
        self.num_qps, self.sack_bits, self.mpr_max = num_qps, sack_bits, mpr_max
        self.max_pending = max_pending
        self.qps: dict[int, QpModel] = {}
        self.mrs: dict[int, dict] = {}
        self.count = Counter()
        self.acks: list[dict] = []
        self.cqes: list[tuple[int, bytes]] = []
        self.writes: list[tuple[int, bytes]] = []
        self.own_ip = ip2int(OWN_IP)

    def window(self, q):
        mpr = q.cfg["mpr"] * 128
        return self.mpr_max if mpr == 0 or mpr > self.mpr_max else mpr

    def _ack(self, qpn, q, syndrome, psn=None):
        cum = (q.epsn - 1) & PSN_MASK
        bitmap = 0
        for i in range(self.sack_bits):
            if (q.epsn + i) & PSN_MASK in q.recv:
                bitmap |= 1 << i
        self.acks.append(dict(
            syndrome=syndrome, psn=cum if syndrome == AETH_ACK else psn, cum_psn=cum,
            sack_base=q.epsn, bitmap=bitmap, msn=q.msn, ece=q.ece, ce_count=q.ce_count,
            ev=q.ev, dst_mac=q.mac, dqpn=q.cfg["peer_qpn"], dst_ip=q.cfg["peer_ip"]))
        self.count["naks_sent" if syndrome != AETH_ACK else "acks_sent"] += 1
        q.unacked = q.ece = q.ce_count = 0

    def pending_total(self):
        return sum(len(q.pending) for q in self.qps.values())

    def frame(self, rec, payload):
        get = rec.get
        op = get("bth.opcode", 0)
        if op in (0x11, 0xC1):
            self.count["peer_frames"] += 1
            return "peer"
        qpn = get("bth.dqpn", 0)
        if qpn >= self.num_qps:
            self.count["bad_qpn"] += 1
            return "drop"
        if get("ip_dst") != self.own_ip:
            self.count["not_for_us"] += 1
            return "drop"
        q = self.qps.get(qpn)
        if q is None or q.cfg["state"] not in (RTR, RTS):
            self.count["qp_state"] += 1
            return "drop"
        if get("ip_src") != q.cfg["peer_ip"]:
            self.count["bad_source"] += 1
            return "drop"
        if op == 0xC0:
            self.count["probe_requests"] += 1
            self.count["probes_answered"] += 1
            self.acks.append(dict(probe=True, ev=get("ev"), dst_mac=get("eth_src"),
                                  dqpn=q.cfg["peer_qpn"], dst_ip=q.cfg["peer_ip"],
                                  probe_id=get("probe.probe_id", 0),
                                  probe_ev=get("probe.ev", 0),
                                  timestamp=get("probe.timestamp", 0)))
            return "probe"
        if op not in WRITE_OPCODES:
            return "drop"
        psn = get("bth.psn", 0)
        q.ev, q.mac = get("ev"), get("eth_src")
        if get("trimmed"):
            self.count["trimmed"] += 1
            if q.cfg["trim_nack"]:
                self._ack(qpn, q, NAK_TRIMMED, psn)
            return "trimmed"
        length = get("payload_len", 0)
        rkey, va = get("reth.rkey", 0), get("reth.va", 0)
        mr = next((m for _, m in sorted(self.mrs.items())
                   if m["rkey"] == rkey and m["access"] & 3 == 3), None)
        if mr is None:
            self.count["bad_rkey"] += 1
            self._ack(qpn, q, NAK_REMOTE_ACCESS, psn)
            return "nak"
        if not (mr["base"] <= va and va - mr["base"] + length <= mr["length"]):
            self.count["bad_bounds"] += 1
            self._ack(qpn, q, NAK_REMOTE_ACCESS, psn)
            return "nak"
        d = (psn - q.epsn) & PSN_MASK
        if d >= 1 << 23 or psn in q.recv:
            self.count["duplicate"] += 1
            self._ack(qpn, q, AETH_ACK)
            return "dup"
        if d >= self.window(q):
            self.count["out_of_window"] += 1
            return "oow"
        # (one pending entry stays for the LAST packet at the expected PSN)
        if op in LAST_OPCODES and self.pending_total() >= self.max_pending - (d != 0):
            self.count["wimm_full"] += 1
            return "wimm_full"
        if op in IMM_OPCODES and not self.cq_room(q):
            self.count["cq_full"] += 1
            return "cq_full"
        if get("ecn") == 3:
            q.ece = 1
            q.ce_count = min(q.ce_count + 1, 0xFFFF)
        if op in LAST_OPCODES:
            q.pending[psn] = (op, get("imm", 0), get("reth.dma_len", 0))
        # placed
        if length:
            self.writes.append((va, payload))
        self.count["placed"] += 1
        q.recv.add(psn)
        q.placed.add(psn)
        old = q.epsn
        while q.epsn in q.recv:
            q.recv.remove(q.epsn)
            q.epsn = (q.epsn + 1) & PSN_MASK
        adv = (q.epsn - old) & PSN_MASK
        for p in sorted(q.pending, key=lambda p: (p - old) & PSN_MASK):
            if (p - old) & PSN_MASK < adv:
                opc, imm, dma_len = q.pending.pop(p)
                q.msn = (q.msn + 1) & PSN_MASK
                if opc in IMM_OPCODES:
                    self._cqe(qpn, q, opc, imm, dma_len)
        q.unacked += 1
        n = q.cfg["ack_n"] or 1
        if get("bth.ackreq", 0) or q.unacked >= n:
            self._ack(qpn, q, AETH_ACK)
        return "placed"

    @staticmethod
    def cq_room(q):
        """A CQ slot is free for one more completion: the CQEs written and those
        held (accepted WITH_IMMEDIATE LAST packets not yet completed) leave one."""
        cfg = q.cfg
        held = sum(1 for opc, _, _ in q.pending.values() if opc in IMM_OPCODES)
        used = (q.cq_prod + held - cfg.get("cq_cons", 0)) & 0xFFFF
        return bool(cfg["cq_enable"]) and used < 1 << cfg["cq_log2"]

    def _cqe(self, qpn, q, opcode, imm, dma_len):
        cfg = q.cfg
        size = 1 << cfg["cq_log2"]
        if not cfg["cq_enable"] or (q.cq_prod - cfg.get("cq_cons", 0)) & 0xFFFF >= size:
            self.count["cq_overflow"] += 1
            return
        phase = 0x80 if not (q.cq_prod >> cfg["cq_log2"]) & 1 else 0
        addr = cfg["cq_base"] + (q.cq_prod % size) * 32
        cqe = (q.msn.to_bytes(8, "little") + dma_len.to_bytes(4, "little")
               + imm.to_bytes(4, "little") + qpn.to_bytes(4, "little")
               + bytes([0, opcode, 0, phase]) + bytes(8))
        q.cq_prod += 1
        self.cqes.append((addr, cqe))
        self.count["cqe_written"] += 1

    def flush_timer_acks(self):
        """The ACKs the coalescing timers send once traffic stops."""
        for qpn, q in sorted(self.qps.items()):
            if q.unacked:
                self._ack(qpn, q, AETH_ACK)


# ---- the testbench ---------------------------------------------------------------------

class RxTB:
    def __init__(self, dut, *, sack_bits=64, mem_size=1 << 20, seed=1, num_qps=16,
                 frames=False):
        self.dut = dut
        self.rng = random.Random(seed)
        self.sack_bits = sack_bits
        self.codec = RecordCodec(ParsedHeader(sack_bits))
        cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
        self.ram = AxiRam(AxiBus.from_prefix(dut, "m_axi", bus_separator="__"), dut.clk, dut.rst,
                          size=mem_size)
        self.ram.write_if.log.setLevel("WARNING")
        self.ram.read_if.log.setLevel("WARNING")
        self.ack_sink = AxiStreamSink(
            AxiStreamBus.from_prefix(dut, "m_axis_ack", bus_separator="__"), dut.clk, dut.rst)
        self.ack_sink.log.setLevel("WARNING")
        self.frames = frames
        if frames:  # RxEngine: MAC frames through the parser
            self.mac = AxiStreamSource(
                AxiStreamBus.from_prefix(dut, "s_axis", bus_separator="__"), dut.clk, dut.rst)
            self.mac.log.setLevel("WARNING")
        else:  # RxPipeline: parser records and payload beats
            self.hdr = StreamSource(dut.clk, "hdr", dut, rng=self.rng)
            self.payload = StreamSource(dut.clk, "payload", dut, rng=self.rng)
            dut.parser_counters.value = 0
        self.peer = StreamSink(dut.clk, "peer_ack", dut)
        self.model = RxModel(num_qps=num_qps, sack_bits=sack_bits)
        self.allowed: list[tuple[int, int]] = []
        self.violations: list[tuple[int, int]] = []
        self.poisoned: list[tuple[int, int]] = []
        self.shadow = bytearray(mem_size)  # what memory must hold
        self.mem_size = mem_size
        write = self.ram.write_if._write

        async def checked_write(address, data_):
            for lo, hi in self.poisoned:
                if lo <= address < hi:
                    raise OSError("poisoned")  # answered SLVERR
            if not any(lo <= address and address + len(data_) <= hi for lo, hi in self.allowed):
                self.violations.append((address, len(data_)))
            await write(address, data_)

        self.ram.write_if._write = checked_write
        dut.csr__w_stb.value = 0
        dut.csr__r_stb.value = 0

    def set_backpressure(self, prob):
        wi = self.ram.write_if
        for ch in (wi.aw_channel, wi.w_channel, wi.b_channel):
            ch.set_pause_generator(pause_gen(random.Random(self.rng.random()), prob))
        self.ack_sink.set_pause_generator(pause_gen(random.Random(self.rng.random()), prob))
        if self.frames:
            self.mac.set_pause_generator(pause_gen(random.Random(self.rng.random()), prob))
        else:
            self.hdr.idle = prob
            self.payload.idle = prob

    async def reset(self):
        self.dut.rst.value = 1
        for _ in range(4):
            await RisingEdge(self.dut.clk)
        self.dut.rst.value = 0
        await RisingEdge(self.dut.clk)

    def fill_memory(self):
        pattern = bytes(self.rng.getrandbits(8) for _ in range(4096)) * (self.mem_size // 4096)
        self.ram.write(0, pattern)
        self.shadow[:] = pattern

    # -- CSRs
    async def csr_write(self, addr, value):
        d = self.dut
        d.csr__addr.value = addr
        d.csr__w_data.value = value & 0xFFFFFFFF
        d.csr__w_stb.value = 1
        await RisingEdge(d.clk)
        d.csr__w_stb.value = 0

    async def csr_read(self, addr):
        d = self.dut
        d.csr__addr.value = addr
        d.csr__r_stb.value = 1
        await RisingEdge(d.clk)
        d.csr__r_stb.value = 0
        for _ in range(RxRegisters.CSR_READ_LATENCY - 1):
            await RisingEdge(d.clk)
        await ReadOnly()
        value = int(d.csr__r_data.value)
        await RisingEdge(d.clk)
        return value

    async def counters(self):
        return {n: await self.csr_read(COUNTER_BASE + 4 * i) for i, n in enumerate(COUNTERS)}

    async def reset_qps(self, num_qps=16):
        """The QP table is memory, not cleared by reset: put every QP in RESET."""
        for q in range(num_qps):
            await self.csr_write(QP_BASE + q * QP_STRIDE, 0)

    async def set_own(self, mac=OWN_MAC, ip=OWN_IP):
        await self.csr_write(0x0C, mac2int(mac) & 0xFFFFFFFF)
        await self.csr_write(0x10, mac2int(mac) >> 32)
        await self.csr_write(0x14, ip2int(ip))

    async def add_mr(self, index, base, length, rkey, access=3):
        a = MR_BASE + index * MR_STRIDE
        for off, v in ((0, base & 0xFFFFFFFF), (4, base >> 32), (8, length), (12, rkey),
                       (16, access)):
            await self.csr_write(a + off, v)
        self.model.mrs[index] = dict(base=base, length=length, rkey=rkey, access=access)
        if access & 3 == 3:
            self.allowed.append((base, base + length))

    async def setup_qp(self, qpn, *, peer_ip="10.0.0.1", peer_qpn=0x77, epsn=0, state=RTS,
                       mpr=8, ack_n=1, ack_t=0xFFFF, trim_nack=1, cq_base=None, cq_log2=5,
                       cq_enable=1):
        if cq_base is None:
            cq_base = 0xC0000 + qpn * 0x1000
        cfg = dict(peer_ip=ip2int(peer_ip), peer_qpn=peer_qpn, epsn=epsn, state=state, mpr=mpr,
                   ack_n=ack_n, ack_t=ack_t, trim_nack=trim_nack, cq_base=cq_base,
                   cq_log2=cq_log2, cq_enable=cq_enable, cq_cons=0)
        a = QP_BASE + qpn * QP_STRIDE
        await self.csr_write(a + 0x00, state | trim_nack << 3 | mpr << 8)
        await self.csr_write(a + 0x04, ack_n | ack_t << 16)
        await self.csr_write(a + 0x08, cfg["peer_ip"])
        await self.csr_write(a + 0x0C, peer_qpn)
        await self.csr_write(a + 0x14, cq_base & 0xFFFFFFFF)
        await self.csr_write(a + 0x18, cq_base >> 32)
        await self.csr_write(a + 0x1C, cq_log2 | cq_enable << 31)
        await self.csr_write(a + 0x20, 0)
        await self.csr_write(a + 0x10, epsn)
        for _ in range(80):  # the bitmap clear
            await RisingEdge(self.dut.clk)
        self.model.qps[qpn] = QpModel(cfg)
        if cq_enable:
            self.allowed.append((cq_base, cq_base + 32 * (1 << cq_log2)))
            # the host zeroes the ring before it polls it
            self.ram.write(cq_base, bytes(32 << cq_log2))
            self.shadow[cq_base:cq_base + (32 << cq_log2)] = bytes(32 << cq_log2)

    async def set_cq_cons(self, qpn, cons):
        """The host reports the receive CQEs it has read (``QP_CQ_CONS``)."""
        await self.csr_write(QP_BASE + qpn * QP_STRIDE + 0x20, cons & 0xFFFF)
        self.model.qps[qpn].cfg["cq_cons"] = cons & 0xFFFF

    async def poll_cq(self, qpn):
        """The host takes the CQEs the engine has written (their phase bit says
        so) and reports them (``QP_CQ_CONS``)."""
        cfg = self.model.qps[qpn].cfg
        log2, cons = cfg["cq_log2"], cfg.get("cq_cons", 0)
        while True:
            flags = self.ram.read(cfg["cq_base"] + 32 * (cons % (1 << log2)) + 0x17, 1)[0]
            if flags >> 7 != 1 - (cons >> log2 & 1):
                break
            cons += 1
        await self.set_cq_cons(qpn, cons)
        return cons

    # -- traffic
    def send(self, pkt, *, trimmed=False):
        rec, payload = header_record(pkt, sack_bits=self.sack_bits, trimmed=trimmed)
        if self.frames:
            raw = trim(bytes(pkt)) if trimmed else bytes(pkt)
            self.model.frame(rec, payload)
            self.send_raw(raw)
        else:
            self.send_record(rec, payload)

    def send_raw(self, raw, tuser=0):
        """A frame the model does not see (RxEngine only)."""
        self.mac.send_nowait(AxiStreamFrame(raw, tuser=tuser))

    def inputs_idle(self):
        if self.frames:
            return self.mac.empty() and self.mac.idle()
        return self.hdr.empty() and self.payload.empty()

    def send_record(self, rec, payload):
        outcome = self.model.frame(rec, payload)
        self.hdr.queue.append(self.codec.pack(rec))
        bpb = 8
        for i in range(0, len(payload), bpb):
            chunk = payload[i:i + bpb]
            last = i + bpb >= len(payload)
            beat = int.from_bytes(chunk, "little") | ((1 << len(chunk)) - 1) << 64 | int(last) << 72
            self.payload.queue.append(beat)
        return outcome

    def _backlog(self):
        if self.frames:
            return self.mac.count()
        return len(self.hdr.queue) + len(self.payload.queue)

    async def drain(self, extra=200, stall=100_000):
        """Wait until the inputs are consumed and the outputs have been quiet for
        ``extra`` cycles (AXI writes, B responses, ACK frames). Fails if nothing
        moves for ``stall`` cycles: the pipeline must never hang."""
        d = self.dut
        busy = (d.m_axi__awvalid, d.m_axi__wvalid, d.m_axi__bvalid, d.m_axis_ack__tvalid)
        idle_for = quiet = 0
        backlog = self._backlog()
        while quiet < extra:
            await RisingEdge(d.clk)
            now = self._backlog()
            moving = now < backlog or any(int(s.value) for s in busy)
            backlog = now
            idle_for = 0 if moving else idle_for + 1
            assert idle_for < stall, f"pipeline hung with {now} inputs waiting"
            quiet = 0 if (moving or not self.inputs_idle()) else quiet + 1

    def apply_model_writes(self):
        for addr, payload in self.model.writes:
            self.shadow[addr:addr + len(payload)] = payload
        self.model.writes.clear()
        for addr, cqe in self.model.cqes:
            self.shadow[addr:addr + len(cqe)] = cqe
        self.model.cqes.clear()

    def check_memory(self):
        self.apply_model_writes()
        assert not self.violations, f"writes outside every region: {self.violations[:5]}"
        got = self.ram.read(0, self.mem_size)
        if got != bytes(self.shadow):
            bad = [i for i in range(self.mem_size) if got[i] != self.shadow[i]]
            raise AssertionError(
                f"{len(bad)} bytes differ, first at {bad[0]:#x}: got {got[bad[0]]:#04x} "
                f"want {self.shadow[bad[0]]:#04x}")

    def ack_frames(self):
        frames = []
        while not self.ack_sink.empty():
            frames.append(bytes(self.ack_sink.recv_nowait().tdata))
        return frames

    def decode_ack(self, raw):
        ip_ok, icrc_ok = check_frame(raw)
        assert ip_ok and icrc_ok, f"bad checksum/ICRC in {raw.hex()}"
        pkt = Ether(raw)
        bth = pkt[BTH]
        out = dict(ev=pkt[UDP].sport, dst_mac=mac2int(pkt[Ether].dst), dqpn=bth.dqpn,
                   dst_ip=ip2int(pkt[IP].dst))
        assert pkt[Ether].src == OWN_MAC and pkt[IP].src == OWN_IP
        assert pkt[UDP].dport == 4791 and pkt[IP].ttl == 64 and pkt[IP].tos == 2
        if bth.opcode == 0xC1:
            assert len(raw) == 74
            p = pkt[MRCProbe]
            out.update(probe=True, probe_id=p.probe_id, probe_ev=p.ev, timestamp=p.timestamp)
            return out
        assert bth.opcode == 0x11 and len(raw) == 74 + self.sack_bits // 8
        s = pkt[MRCSack]
        assert s.sack_words == self.sack_bits // 32
        out.update(syndrome=pkt[AETH].syndrome, psn=bth.psn, msn=pkt[AETH].msn,
                   cum_psn=s.cum_psn, sack_base=s.sack_base, bitmap=s.bitmap, ece=s.ece,
                   ce_count=s.ce_count)
        return out

    def check_acks(self):
        """Every ACK frame decoded (checksum and ICRC checked) and compared with
        the model's, in order; returns the decoded frames."""
        got = [self.decode_ack(f) for f in self.ack_frames()]
        want = self.model.acks
        self.model.acks = []
        brief = [(a.get("syndrome"), a.get("psn"), a.get("bitmap")) for a in got]
        for i, (g, w) in enumerate(zip(got, want, strict=False)):
            assert g == w, f"ACK {i}: got {g}, want {w}; all got {brief}"
        wbrief = [(a.get("syndrome"), a.get("psn"), a.get("bitmap")) for a in want]
        assert len(got) == len(want), f"{len(got)} ACK frames, want {len(want)}: {brief} {wbrief}"
        return got

    async def check_counters(self):
        c = await self.counters()
        for name in COUNTERS:
            if name.startswith("parser_"):
                continue
            if name == "acks_sent":
                continue  # checked frame by frame in check_acks
            assert c[name] == self.model.count[name], (
                f"counter {name}: {c[name]}, want {self.model.count[name]}")
        return c


# ---- tests ------------------------------------------------------------------------------

MTU = 1024
ACK_T = 3000  # long enough that ACK_N decides while traffic flows
MR0 = dict(base=0x10000, length=0x20000, rkey=0x1001)  # 128 KiB
MR1 = dict(base=0x40003, length=0x1001, rkey=0x2002)  # unaligned base and length
MR2 = dict(base=0x50000, length=0x1000, rkey=0x3003)  # registered without REMOTE_WRITE


async def start(dut, *, seed=1, backpressure=0.0):
    tb = RxTB(dut, seed=seed)
    await tb.reset()
    await tb.reset_qps()
    tb.fill_memory()
    tb.set_backpressure(backpressure)
    await tb.set_own()
    await tb.add_mr(0, **MR0)
    await tb.add_mr(1, **MR1)
    await tb.add_mr(2, **MR2, access=1)
    return tb


async def finish(tb, *, timer_acks=True, acks_out=None):
    await tb.drain()
    if timer_acks:
        tb.model.flush_timer_acks()
        for _ in range(ACK_T + 4 * 16 * 4):  # the timer plus a full scan
            await RisingEdge(tb.dut.clk)
    tb.check_memory()
    counters = await tb.check_counters()
    got = tb.check_acks()
    if acks_out is not None:
        acks_out += got
    return counters


def orderings(n, rng):
    perm = list(range(n))
    rng.shuffle(perm)
    return {"in_order": list(range(n)), "reversed": list(reversed(range(n))), "random": perm}


@cocotb.test()
async def test_orderings(dut):
    """64 KiB WRITE_WITH_IMM at MTU 1024: in order, reversed and shuffled, with backpressure."""
    tb = await start(dut, seed=1)
    cases = orderings(64, random.Random(7)).items()
    for qpn, bp, (name, order) in zip((1, 2, 3), (0.0, 0.3, 0.5), cases, strict=True):
        tb.set_backpressure(bp)
        await tb.setup_qp(qpn, epsn=100 * qpn, ack_n=4, ack_t=ACK_T)
        pkts, _ = message_packets(dqpn=qpn, first_psn=100 * qpn, va=MR0["base"] + 0x100 * qpn,
                                  rkey=MR0["rkey"], length=65536, mtu=MTU,
                                  imm=0xABCD0000 + qpn, seed=qpn)
        for i in order:
            tb.send(pkts[i])
        await finish(tb)
        assert tb.model.count["cqe_written"] == qpn, name


@cocotb.test()
async def test_many_messages_shuffled(dut):
    """Small messages of random sizes and alignments, shuffled: CQEs in message order."""
    tb = await start(dut, seed=11, backpressure=0.2)
    await tb.setup_qp(3, epsn=5000, ack_n=3, ack_t=ACK_T, cq_log2=3)
    rng = random.Random(5)
    pkts, psn, va = [], 5000, MR0["base"] + 1
    for k in range(12):
        length = rng.choice([0, 1, 7, 100, 1023, 1024, 1025, 3000])
        p, _ = message_packets(dqpn=3, first_psn=psn, va=va, rkey=MR0["rkey"], length=length,
                               mtu=MTU, imm=None if k % 3 == 2 else 0x1000 + k, seed=k,
                               ackreq_last=False)
        pkts += p
        psn += len(p)
        va += length + rng.randrange(0, 9)
    # Shuffle within groups of 7 packets, and let each group be written before
    # the next arrives, so no more than 7 completions are ever pending (an
    # out-of-order LAST packet needs two of the 8 entries free). A LAST
    # packet holds its pending entry until the cumulative PSN passes it, i.e.
    # until every earlier PSN's data has its B response; without the wait, how
    # many entries the next group finds taken depends on the DMA's latency (a
    # register slice on the writer's AW/W made the table full here: wimm_full),
    # while the model frees them as the packets arrive.
    for g in range(0, len(pkts), 7):
        group = pkts[g:g + 7]
        rng.shuffle(group)
        for p in group:
            tb.send(p)
        await tb.drain()
    await finish(tb)
    # 12 messages, 8 with immediates; a ring of 8 CQEs takes all of them.
    assert tb.model.count["cqe_written"] == 8


@cocotb.test()
async def test_psn_wrap(dut):
    """Messages across the 2^24 PSN wrap, shuffled, with the window and SACK across it."""
    tb = await start(dut, seed=3, backpressure=0.2)
    first = PSN_MASK - 20
    await tb.setup_qp(2, epsn=first, ack_n=1)
    pkts, _ = message_packets(dqpn=2, first_psn=first, va=MR0["base"] + 0x8000,
                              rkey=MR0["rkey"], length=48 * 256, mtu=256, imm=7, seed=9)
    order = list(range(len(pkts)))
    random.Random(2).shuffle(order)
    for i in order:
        tb.send(pkts[i])
    await finish(tb)
    assert tb.model.qps[2].epsn == (first + 48) & PSN_MASK


@cocotb.test()
async def test_ring_laps(dut):
    """4,600 small packets, shuffled within 200-PSN blocks: more than two laps of the
    2,048-bit bitmap ring, across the PSN wrap, with SACK bitmaps checked at every ACK."""
    tb = await start(dut, seed=12, backpressure=0.1)
    first = PSN_MASK - 1000
    await tb.setup_qp(13, epsn=first, mpr=8, ack_n=16, ack_t=ACK_T)
    rng = random.Random(13)
    n = 4600
    pkts = [write_packet(opcode=0x07 if i < n - 1 else 0x08, dqpn=13, psn=first + i,
                         va=MR0["base"] + 16 * i, rkey=MR0["rkey"], dma_len=16 * n,
                         payload=rng.randbytes(16), dst_ip=OWN_IP, dst_mac=OWN_MAC)
            for i in range(n)]
    for block in range(0, n, 200):
        order = list(range(block, min(block + 200, n)))
        rng.shuffle(order)
        for i in order:
            tb.send(pkts[i])
    c = await finish(tb)
    assert c["placed"] == n and tb.model.qps[13].epsn == (first + n) & PSN_MASK


@cocotb.test()
async def test_duplicates(dut):
    """Duplicates are dropped, counted and acknowledged at once, with the ACK's state."""
    tb = await start(dut, seed=4)
    await tb.setup_qp(4, epsn=0, ack_n=2, ack_t=ACK_T)
    pkts, _ = message_packets(dqpn=4, first_psn=0, va=MR0["base"], rkey=MR0["rkey"],
                              length=8 * 512, mtu=512, imm=1, seed=4)
    for i in (0, 1, 3, 5, 6):
        tb.send(pkts[i])
    await finish(tb)
    # Old (before cum), SACKed and repeated duplicates, each answered at once.
    for i in (0, 3, 3, 6, 1):
        tb.send(pkts[i])
    await finish(tb)
    for i in (2, 4, 7):
        tb.send(pkts[i])
    await finish(tb)
    # Back to back: the second copy finds the first in flight (not yet marked).
    pkts2, _ = message_packets(dqpn=4, first_psn=8, va=MR0["base"] + 0x4000, rkey=MR0["rkey"],
                               length=512, mtu=512, imm=2, seed=5)
    tb.send(pkts2[0])
    tb.send(pkts2[0])
    await tb.drain()
    tb.model.acks.clear()  # the second copy's ACK races the first's mark
    tb.ack_frames()
    tb.check_memory()
    c = await tb.check_counters()
    assert c["duplicate"] == 6


async def one(tb, pkt):
    """Send one frame and let the pipeline settle: NAKs are sent when a packet is
    checked and ACKs when it is marked, so settling makes their order exact."""
    tb.send(pkt)
    await tb.drain(extra=40)


@cocotb.test()
async def test_bad_packets(dut):
    """Window, MR, bounds, state and source violations: dropped, counted, NAKed like RoCE."""
    tb = await start(dut, seed=5, backpressure=0.2)
    await tb.setup_qp(5, epsn=1000, mpr=1, ack_n=1)  # window of 128 PSNs
    await tb.setup_qp(6, epsn=0, state=INIT)
    await tb.setup_qp(7, epsn=0, state=RTR, peer_ip="10.0.0.9")

    def wr(psn, va, length, rkey=MR0["rkey"], dqpn=5, **kw):
        return write_packet(opcode=0x0A, dqpn=dqpn, psn=psn, va=va, rkey=rkey, dma_len=length,
                            payload=bytes(range(256)) * (length // 256) + bytes(length % 256),
                            dst_ip=kw.pop("dst_ip", OWN_IP), dst_mac=OWN_MAC, **kw)

    b0, l0 = MR0["base"], MR0["length"]
    b1, l1 = MR1["base"], MR1["length"]
    await one(tb, wr(1000 + 128, b0, 64))  # just beyond the window
    await one(tb, wr(1000 + 127, b0 + 0x100, 64))  # the last PSN inside it: placed
    await one(tb, wr(1000 + 5000, b0, 64))  # far beyond
    await one(tb, wr(1000, b0, 64, rkey=0xDEAD))  # unknown rkey
    await one(tb, wr(1000, MR2["base"], 64, rkey=MR2["rkey"]))  # no write access
    await one(tb, wr(1000, b0 - 1, 64))  # starts one byte below
    await one(tb, wr(1000, b0 - 32, 64))  # straddles the start
    await one(tb, wr(1000, b0 + l0 - 63, 64))  # straddles the end by one byte
    await one(tb, wr(1000, b0 + l0, 64))  # just above
    await one(tb, wr(1000, 0xFFFFFFFFFFFFFFC0, 64))  # wraps the 64-bit space
    await one(tb, wr(1000, b1 + l1 - 17, 17, rkey=MR1["rkey"]))  # fits exactly at the end
    await one(tb, wr(1001, b1 - 1, 2, rkey=MR1["rkey"]))
    await one(tb, wr(0, b0, 64, dqpn=6))  # QP in INIT
    await one(tb, wr(0, b0, 64, dqpn=7))  # wrong source IP
    await one(tb, wr(0, b0, 64, dqpn=9))  # QP never set up (RESET)
    await one(tb, wr(0, b0, 64, dqpn=0x123456))  # no such QP
    await one(tb, wr(0, b0, 64, dqpn=7, src_ip="10.0.0.9", dst_ip="10.0.0.77"))  # not ours
    await one(tb, wr(0, b0 + 64, 64, dqpn=7, src_ip="10.0.0.9"))  # accepted on QP 7 (RTR)
    c = await finish(tb)
    for name, want in dict(out_of_window=2, bad_rkey=2, bad_bounds=6, qp_state=2, bad_source=1,
                           bad_qpn=1, not_for_us=1, placed=3, naks_sent=8).items():
        assert c[name] == want, (name, c[name], want)


@cocotb.test()
async def test_trim_probe_peer(dut):
    """TRIM_NACK on and off, EV probes answered, ACK frames passed to peer_ack."""
    tb = await start(dut, seed=6)
    await tb.setup_qp(8, epsn=10, trim_nack=1)
    await tb.setup_qp(9, epsn=10, trim_nack=0)
    for qpn in (8, 9):
        pkt = write_packet(opcode=0x06, dqpn=qpn, psn=12, va=MR0["base"], rkey=MR0["rkey"],
                           dma_len=4096, payload=bytes(1024), ev=0xC123, dst_ip=OWN_IP,
                           dst_mac=OWN_MAC)
        tb.send(pkt, trimmed=True)
    from host_driver.layers import ack_packet, probe_packet
    tb.send(probe_packet(response=False, dqpn=8, probe_id=0x5555AAAA, ev=0xD001,
                         timestamp=0x0123456789ABCDEF, dst_ip=OWN_IP, dst_mac=OWN_MAC))
    tb.send(probe_packet(response=False, dqpn=8, probe_id=1, ev=0xD002, timestamp=2,
                         src_ip="10.9.9.9", dst_ip=OWN_IP))  # not the peer: dropped
    peer = [ack_packet(dqpn=8, cum_psn=77, bitmap=0b1010, dst_ip=OWN_IP),
            probe_packet(response=True, dqpn=8, probe_id=3, ev=0xD003, timestamp=4,
                         dst_ip=OWN_IP)]
    for p in peer:
        tb.send(p)
    c = await finish(tb)
    assert c["trimmed"] == 2 and c["naks_sent"] == 1 and c["probes_answered"] == 1
    assert c["bad_source"] == 1 and c["peer_frames"] == 2
    want = [tb.codec.pack(header_record(p)[0]) for p in peer]
    assert tb.peer.items == want


def imm_only(qpn, psn, imm, va=None):
    """A one-packet WRITE_WITH_IMM (WRITE_ONLY_WITH_IMMEDIATE) of 16 bytes."""
    return write_packet(opcode=0x0B, dqpn=qpn, psn=psn, rkey=MR0["rkey"], dma_len=16,
                        va=MR0["base"] + 0x100 * psn if va is None else va,
                        payload=bytes([imm & 0xFF]) * 16, imm=imm, dst_ip=OWN_IP,
                        dst_mac=OWN_MAC)


def acked_psns(acks, first_psn, sack=True):
    """The PSNs the ACKs name as received: up to each ACK's cum_psn and (``sack``)
    its SACK bits."""
    got = set()
    for a in acks:
        if a.get("syndrome") != AETH_ACK:
            continue
        got.update(range(first_psn, first_psn + ((a["cum_psn"] - first_psn + 1) & PSN_MASK)))
        if sack:
            got.update(a["sack_base"] + i for i in range(64) if a["bitmap"] >> i & 1)
    return got


def ring_imms(tb, qpn, log2):
    """The immediates of the CQEs in a QP's receive ring (phase bit set or clear)."""
    cfg = tb.model.qps[qpn].cfg
    raw = tb.ram.read(cfg["cq_base"], 32 << log2)
    return {int.from_bytes(raw[32 * i + 12:32 * i + 16], "little") for i in range(1 << log2)}


@cocotb.test()
async def test_cq_full_holds_completion(dut):
    """A WITH_IMMEDIATE LAST packet that finds no free slot in its QP's receive CQ
    (the CQEs written plus the completions already held for the QP fill it) is
    dropped (``cq_full``) and not acknowledged; once the host frees a slot the
    retransmission completes. Every PSN an ACK names as received (cumulatively:
    at once; SACKed: once the holes before it are filled) has its CQE."""
    tb = await start(dut, seed=21)
    q, log2 = 6, 1  # a ring of 2 CQEs
    await tb.setup_qp(q, epsn=0, ack_n=1, ack_t=ACK_T, cq_log2=log2)
    acks, cqes = [], set()

    async def stage(*psns):
        for p in psns:
            tb.send(imm_only(q, p, 0x100 + p))
        c = await finish(tb, timer_acks=False, acks_out=acks)
        cqes.update(ring_imms(tb, q, log2))
        for p in acked_psns(acks, 0, sack=False):
            assert 0x100 + p in cqes, f"PSN {p} acknowledged, its CQE never written"
        return c

    c = await stage(0, 1, 2)  # two fill the ring, the third finds it full
    assert (c["cqe_written"], c["cq_full"], c["cq_overflow"]) == (2, 1, 0), c
    assert acks[-1]["cum_psn"] == 1
    await tb.set_cq_cons(q, 1)
    # PSN 3 takes the free slot (held until PSN 2 is in); PSN 2 finds none.
    c = await stage(3, 2)
    assert (c["cqe_written"], c["cq_full"]) == (2, 2), c
    assert acks[-1]["cum_psn"] == 1 and acks[-1]["bitmap"] == 0b10
    await tb.set_cq_cons(q, 2)
    c = await stage(2)  # the retransmission completes PSN 2, then 3
    assert (c["cqe_written"], c["cq_full"], c["cq_overflow"]) == (4, 2, 0), c
    assert acks[-1]["cum_psn"] == 3 and {0x102, 0x103} <= cqes
    assert {0x100 + p for p in acked_psns(acks, 0)} <= cqes
    # A disabled ring holds every completion back the same way.
    await tb.csr_write(QP_BASE + q * QP_STRIDE + 0x1C, log2)
    tb.model.qps[q].cfg["cq_enable"] = 0
    await tb.set_cq_cons(q, 4)
    c = await stage(4)
    assert (c["cq_full"], c["cq_overflow"]) == (3, 0) and acks[-1]["cum_psn"] == 3, c


@cocotb.test()
async def test_pending_full_loses_nothing(dut):
    """The pending-completion table (shared by all QPs) full: the LAST packet that
    finds it full is dropped and not acknowledged, nothing acknowledged is lost,
    and an in-order LAST packet always finds an entry (no deadlock)."""
    tb = await start(dut, seed=22)
    qa, qb = 7, 8
    for qpn in (qa, qb):  # PEER_QPN tells their ACKs apart
        await tb.setup_qp(qpn, peer_qpn=0x70 + qpn, epsn=0, ack_n=1, ack_t=ACK_T, cq_log2=4)
    acks = {qa: [], qb: []}
    sent = {qa: set(), qb: set()}

    async def stage(pkts):
        for qpn, p in pkts:
            tb.send(imm_only(qpn, p, qpn << 8 | p, va=MR0["base"] + qpn * 0x1000 + 0x40 * p))
            sent[qpn].add(p)
        await tb.drain()
        for a in [tb.decode_ack(f) for f in tb.ack_frames()]:
            acks[a["dqpn"] - 0x70].append(a)
        return await tb.check_counters()

    # Out of order (PSN 0 missing on both QPs): the table fills up.
    order = [(qa, 1), (qb, 1), (qa, 2), (qb, 2), (qa, 3), (qb, 3), (qa, 4), (qb, 4), (qa, 5)]
    c = await stage(order)
    held = 8 - 1  # one entry stays for an in-order LAST packet
    assert c["wimm_full"] == len(order) - held, c
    # The holes, in order: each PSN 0 completes its QP's held messages.
    c = await stage([(qa, 0)])
    c = await stage([(qb, 0)])
    assert c["wimm_full"] == len(order) - held and c["cqe_written"] == held + 2, c
    # Retransmit what was dropped, until every message is complete.
    for _ in range(3):
        missing = [(qpn, p) for qpn in (qa, qb) for p in sorted(sent[qpn])
                   if p >= tb.model.qps[qpn].epsn]
        c = await stage(missing)
    tb.model.acks.clear()
    tb.check_memory()
    for qpn in (qa, qb):
        assert tb.model.qps[qpn].epsn == max(sent[qpn]) + 1
        imms = ring_imms(tb, qpn, 4)
        for p in acked_psns(acks[qpn], 0):
            assert qpn << 8 | p in imms, f"QP {qpn} PSN {p} acknowledged, no CQE"
    assert c["cqe_written"] == sum(len(v) for v in sent.values())


@cocotb.test()
async def test_dma_error_and_ce(dut):
    """A write answered SLVERR is not marked (retransmission is accepted); ECN echo."""
    tb = await start(dut, seed=8)
    await tb.setup_qp(10, epsn=0, ack_n=2, ack_t=ACK_T)
    pkts, _ = message_packets(dqpn=10, first_psn=0, va=MR0["base"] + 0x10000,
                              rkey=MR0["rkey"], length=4 * 1024, mtu=MTU, imm=9, seed=1, ecn=3)
    poison = (MR0["base"] + 0x10400, MR0["base"] + 0x10800)
    tb.poisoned.append(poison)
    tb.send_record(*header_record(pkts[0]))
    # The model must not place the poisoned packet: feed the DUT directly.
    rec, payload = header_record(pkts[1])
    tb.hdr.queue.append(tb.codec.pack(rec))
    for i in range(0, len(payload), 8):
        last = int(i + 8 >= len(payload))
        word = int.from_bytes(payload[i:i + 8], "little")
        tb.payload.queue.append(word | 0xFF << 64 | last << 72)
    tb.model.count["dma_error"] += 1
    await tb.drain()
    # The failed burst may have written part of its data before the error.
    tb.shadow[poison[0]:poison[0] + 1024] = tb.ram.read(poison[0], 1024)
    tb.poisoned.clear()
    for i in (1, 2, 3):
        tb.send(pkts[i])
    await finish(tb)


@cocotb.test()
async def test_back_to_back_init(dut):
    """QP_EPSN written for six QPs on consecutive cycles: every QP gets its own."""
    tb = await start(dut, seed=14)
    qpns = range(1, 7)
    for q in qpns:  # configure everything but the ePSN first
        await tb.setup_qp(q, epsn=0xABC000 + q)
    for q in qpns:
        await tb.csr_write(QP_BASE + q * QP_STRIDE + 0x10, 1000 * q)
        tb.model.qps[q] = QpModel(dict(tb.model.qps[q].cfg, epsn=1000 * q))
    for q in qpns:
        tb.send(write_packet(opcode=0x0A, dqpn=q, psn=1000 * q, va=MR0["base"] + 64 * q,
                             rkey=MR0["rkey"], dma_len=8, payload=bytes([q]) * 8,
                             dst_ip=OWN_IP, dst_mac=OWN_MAC))
    c = await finish(tb, timer_acks=False)
    assert c["placed"] == 6 and c["out_of_window"] == 0 and c["duplicate"] == 0


@cocotb.test()
async def test_registers(dut):
    """Identity, parameters and read-back of the RW registers."""
    tb = RxTB(dut)
    await tb.reset()
    assert await tb.csr_read(0x00) == 0x0003 << 16 | 1
    params = await tb.csr_read(0x08)
    assert params & 0xF == 4 and (params >> 4) & 0xFF == 16 and (params >> 16) & 0xFF == 2
    assert await tb.csr_read(0x18) == 0x3F
    assert int(dut.trim_dscp.value) == 0x3F
    await tb.csr_write(0x18, 0x2A)
    assert await tb.csr_read(0x18) == 0x2A and int(dut.trim_dscp.value) == 0x2A
    await tb.add_mr(5, base=0x1234_5678_9ABC_DEF0, length=77, rkey=0x55, access=3)
    a = MR_BASE + 5 * MR_STRIDE
    assert [await tb.csr_read(a + o) for o in (0, 4, 8, 12, 16)] == [
        0x9ABCDEF0, 0x12345678, 77, 0x55, 3]
    await tb.setup_qp(15, peer_qpn=0xABCDEF, epsn=0x123456, mpr=3, ack_n=9, ack_t=77)
    q = QP_BASE + 15 * QP_STRIDE
    assert await tb.csr_read(q + 0x0C) == 0xABCDEF
    assert await tb.csr_read(q + 0x10) == 0x123456
    assert await tb.csr_read(q + 0x04) == 9 | 77 << 16
    assert await tb.csr_read(q + 0x24) == 0  # a hole in the QP block
    assert await tb.csr_read(0x0FFC) == 0  # unmapped


FUZZ_PEERS = {0x100 + q: q for q in (11, 12)}  # PEER_QPN -> QPN of the fuzzed QPs
SETTLE = 40  # quiet cycles after which the engine has finished a packet's mark


async def fuzz(tb, n, seed, acks):
    """Mutated valid packets and random records, PSNs biased to the window's
    edges. After a packet at the expected PSN (it advances the cumulative PSN)
    the pipeline settles, so the model's verdicts, which see the advance at
    once, are the engine's (it advances at the B response)."""
    rng = random.Random(seed)
    await tb.setup_qp(11, peer_qpn=0x10B, epsn=rng.randrange(1 << 24), mpr=2, ack_n=4,
                      ack_t=ACK_T, cq_log2=3)
    await tb.setup_qp(12, peer_qpn=0x10C, epsn=PSN_MASK - 50, mpr=1, ack_n=1, ack_t=ACK_T)
    for k in range(n):
        qpn = rng.choice((11, 12, 12, 11, 13, 0x40))
        opcode = rng.choice((0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0xC0))
        length = rng.choice((0, 1, 5, 64, 255, 256, 700, 1024, 1500))
        mr = rng.choice((MR0, MR1, MR2, dict(base=0, length=0, rkey=rng.getrandbits(32))))
        va = mr["base"] + rng.choice((0, 1, -1, mr["length"] - length, mr["length"],
                                      rng.randrange(-4096, mr["length"] + 4096)))
        q = tb.model.qps.get(qpn)
        psn = biased_psn(rng, q.epsn, tb.model.window(q)) if q else rng.getrandbits(24)
        if opcode == 0xC0:
            from host_driver.layers import probe_packet
            pkt = probe_packet(response=False, dqpn=qpn, probe_id=k, ev=rng.getrandbits(16),
                               timestamp=k, dst_ip=OWN_IP, dst_mac=OWN_MAC)
        else:
            pkt = write_packet(opcode=opcode, dqpn=qpn, psn=psn, va=va & (2**64 - 1),
                               rkey=mr["rkey"], dma_len=rng.getrandbits(20),
                               payload=bytes(rng.getrandbits(8) for _ in range(length)),
                               imm=k if opcode in IMM_OPCODES else None,
                               ackreq=rng.getrandbits(1), ecn=rng.choice((2, 3)),
                               src_ip=rng.choice(("10.0.0.1",) * 5 + ("10.0.0.3",)),
                               dst_ip=OWN_IP, dst_mac=OWN_MAC, ev=rng.getrandbits(16))
        rec, payload = header_record(pkt, trimmed=opcode != 0xC0 and rng.random() < 0.05)
        # Random bit flips in fields the parser does not check.
        for _ in range(rng.choice((0, 0, 1, 2))):
            name = rng.choice(("bth.se", "bth.migreq", "bth.resv7", "bth.pkey", "bth.fecn",
                               "reth.dma_len", "imm", "eth_src", "ev", "bth.ackreq"))
            off, w = tb.codec.fields[name]
            rec[name] = rec.get(name, 0) ^ (1 << rng.randrange(w))
        epsn = q.epsn if q else None
        tb.send_record(rec, payload)
        if (q and q.epsn != epsn) or rng.random() < 0.02:
            await tb.drain(extra=SETTLE)
            acks.collect()
            if q and rng.random() < 0.2:  # the host polls the receive CQ
                await tb.poll_cq(qpn)
    await tb.drain()
    acks.collect()


@cocotb.test()
async def test_fuzz(dut):
    """1,000 fuzzed records (10,000 with RX_FUZZ_PACKETS), PSNs at the window's
    edges: memory byte-exact against the model (nothing outside a region), every
    counter the model's, every ACK/NAK frame decoded and ICRC-checked and held
    to the rules of tests/hw/rx_ack_stream.py, the settled state exact."""
    n = int(os.environ.get("RX_FUZZ_PACKETS", "1000"))
    tb = await start(dut, seed=99, backpressure=0.2)
    acks = AckStream(tb, FUZZ_PEERS)
    await fuzz(tb, n, 1234, acks)
    tb.check_memory()
    c = await tb.counters()
    outcomes = ("peer_frames", "probe_requests", "bad_qpn", "not_for_us", "qp_state",
                "bad_source", "bad_rkey", "bad_bounds", "placed", "duplicate",
                "out_of_window", "wimm_full", "cq_full", "dma_error", "trimmed")
    assert sum(c[k] for k in outcomes) == n, {k: c[k] for k in outcomes}
    for name in COUNTERS:
        if not name.startswith("parser_") and name != "acks_sent":  # (ACK timers)
            assert c[name] == tb.model.count[name], (name, c[name], tb.model.count[name])
    acks.check_model_naks_and_probes()
    for qpn in FUZZ_PEERS.values():
        await acks.poke(qpn, va=MR0["base"], rkey=MR0["rkey"])
    assert acks.acks > n // 20, acks.acks  # the stream was not empty
    # After all that, a valid message is still accepted and completed.
    tb.model.count.clear()
    await tb.setup_qp(11, epsn=0, ack_n=1)
    before = await tb.counters()
    pkts, _ = message_packets(dqpn=11, first_psn=0, va=MR0["base"], rkey=MR0["rkey"],
                              length=3000, mtu=MTU, imm=5, seed=77)
    for p in pkts:
        tb.send(p)
    await tb.drain()
    tb.check_memory()
    after = await tb.counters()
    assert after["placed"] - before["placed"] == 3
    assert after["cqe_written"] - before["cqe_written"] == 1


# ---- pytest entry ---------------------------------------------------------------------



def build_pipeline():
    from hw.rx.engine import RxPipeline

    return RxPipeline(data_width=64, num_qps=16, num_mrs=16, sack_bits=64, mpr_max=1024)


def run_pipeline_tests(testcase=None, extra_env=None):
    from sim.cocotb_runner import run_cocotb

    return run_cocotb(name="rx_pipeline_w64", elaborate=build_pipeline, toplevel="rx_pipeline",
                      test_module="tests.hw.test_rx_pipeline", testcase=testcase,
                      extra_env=extra_env)


def test_rx_pipeline():
    run_pipeline_tests()


@pytest.mark.long
def test_rx_pipeline_fuzz_long():
    run_pipeline_tests("test_fuzz", extra_env={"RX_FUZZ_PACKETS": "10000"})


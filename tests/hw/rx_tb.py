"""The RX benches, shared by tests/hw/test_rx_pipeline.py, test_rx_engine.py
and sim/bench/rx.py.

``RxTB`` drives ``RxPipeline`` (everything after the parser: header records
and payload beats built from scapy packets) or ``RxEngine`` (MAC frames,
``frames=True``): CSRs, an AxiRam for host memory (every byte written is
checked against the allowed ranges as it is written) and an AxiStreamSink for
the ACK frames. ``RxModel`` is the scoreboard: the responder semantics of
docs/rx.md in plain Python. ``AckStream`` checks the ACK stream under fuzzed
traffic.

Every frame on ``m_axis_ack`` is decoded and its IPv4 checksum and ICRC checked
(``RxTB.decode_ack``). Their number and order depend on when the engine marks
packets (at their B responses) and on its ACK timers, which the model does not
follow, so the stream is held to rules that hold whatever the timing:

- an ACK's PSN is its cum_psn, its sack_base is cum_psn + 1 and its bitmap's
  bit 0 is clear (that PSN would be the cumulative one);
- per QP, cum_psn and MSN never go back;
- every PSN an ACK names as received (up to cum_psn, or a SACK bit) was
  accepted by the model: nothing is acknowledged that was not placed;
- the NAKs (syndrome, PSN) and probe responses are exactly the model's, in
  order (a NAK is sent at once on its packet's check);
- the last ACK of each QP, sent for a duplicate once everything is settled,
  has exactly the model's cum_psn, bitmap and MSN (``final``).
"""

from __future__ import annotations

import ipaddress
import os
import random
from collections import Counter

import cocotb
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
from hw.headers import mtu_code
from hw.rx.mr_table import make_rkey, rkey_index
from hw.rx.parser import ParsedHeader
from hw.rx.regs import (
    COUNTER_BASE,
    COUNTER_LAG,
    COUNTERS,
    QP_BASE,
    QP_STRIDE,
    RxRegisters,
    rx_register_map,
)
from sim import coverage as fcov
from sim.model.packet import NAK_INVALID_REQUEST, length_check, message_extent
from tests import seeds
from tests.hw.streams import StreamSink, StreamSource

LAST_OPCODES = (0x08, 0x09, 0x0A, 0x0B)
OWN_MAC, OWN_IP = "02:00:00:00:00:02", "10.0.0.2"  # the responder's addresses
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
    rng = seeds.rng(seed)
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
        self.armed = 0  # when its ACK timer started (RxModel.arms), if unacked
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
        self.arms = 0  # ACK timers started so far: their order of expiry
        self.cqes: list[tuple[int, bytes]] = []
        self.writes: list[tuple[int, bytes]] = []
        self.own_ip = ip2int(OWN_IP)
        self.own_mac = mac2int(OWN_MAC)

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

    def peer_frame(self, rec):
        """RxPeerFilter's checks (docs/security.md, "Peer frames")."""
        get = rec.get
        q = self.qps.get(get("bth.dqpn", 0))
        checks = (
            ("peer_bad_qpn", get("bth.dqpn", 0) >= self.num_qps),
            ("peer_not_for_us", get("ip_dst") != self.own_ip),
            ("peer_bad_mac", get("eth_dst") != self.own_mac),
            ("peer_qp_state", q is None or q.cfg["state"] != RTS),
            ("peer_bad_source", q is None or get("ip_src") != q.cfg["peer_ip"]),
            ("peer_bad_sack", get("bth.opcode") == 0x11
             and get("sack.sack_base", 0) != (get("sack.cum_psn", 0) + 1) & PSN_MASK),
        )
        for name, failed in checks:
            if failed:
                self.count[name] += 1
                return "drop"
        return "peer"

    def frame(self, rec, payload):
        """Judge one frame: its outcome ("placed", "dup", "nak", ...), with the
        counts, ACKs, writes and CQEs it implies; sampled for sim/coverage.py."""
        get = rec.get
        op = get("bth.opcode", 0)
        q = self.qps.get(get("bth.dqpn", 0))
        epsn = q.epsn if q is not None else None
        window = self.window(q) if q is not None else None
        before, acks = dict(self.count), len(self.acks)
        outcome = self._frame(rec, payload)
        counted = [n for n, v in self.count.items() if v != before.get(n, 0)]
        naks = [a["syndrome"] for a in self.acks[acks:] if a.get("syndrome", AETH_ACK) != AETH_ACK]
        write = op in WRITE_OPCODES and epsn is not None
        fcov.sample_rx_frame(op, outcome, counted, naks,
                             offset=(get("bth.psn", 0) - epsn) if write else None,
                             window=window, wrapped=write and q.epsn < epsn)
        return outcome

    def _frame(self, rec, payload):
        get = rec.get
        op = get("bth.opcode", 0)
        if op in (0x11, 0xC1):
            self.count["peer_frames"] += 1
            return self.peer_frame(rec)
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
            d = (psn - q.epsn) & PSN_MASK
            if d >= 1 << 23 or d >= self.window(q) or psn in q.recv:
                self.count["trim_stale"] += 1  # not a PSN still awaited: no NAK
                return "drop"
            self.count["trimmed"] += 1
            if q.cfg["trim_nack"]:
                self._ack(qpn, q, NAK_TRIMMED, psn)
            return "trimmed"
        length = get("payload_len", 0)
        rkey, va = get("reth.rkey", 0), get("reth.va", 0)
        # the golden model's length rules (NAK 0x61), then R_Key, PD and the
        # bounds of the message extent (NAK 0x62)
        verdict = length_check(op, length, get("reth.dma_len", 0), q.cfg["mtu"])
        if verdict:
            self.count[verdict] += 1
            self._ack(qpn, q, NAK_INVALID_REQUEST, psn)
            return "nak"
        # the entry the R_Key names, holding that whole R_Key, valid and writable
        mr = self.mrs.get(rkey_index(rkey))
        if mr is None or mr["rkey"] != rkey or mr["access"] & 3 != 3:
            self.count["bad_rkey"] += 1
            self._ack(qpn, q, NAK_REMOTE_ACCESS, psn)
            return "nak"
        if mr["pd"] != q.cfg["pd"]:
            self.count["bad_pd"] += 1
            self._ack(qpn, q, NAK_REMOTE_ACCESS, psn)
            return "nak"
        lo, hi = message_extent(op, va, length, get("reth.dma_len", 0))
        if not (mr["base"] <= lo and hi - mr["base"] <= mr["length"]):
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
        if op in IMM_OPCODES and not self.cq_room(q, d != 0):
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
        elif q.unacked == 1:
            self.arms += 1
            q.armed = self.arms
        return "placed"

    @staticmethod
    def cq_room(q, early):
        """A CQ slot is free for one more completion: the CQEs written and those
        held (accepted WITH_IMMEDIATE LAST packets not yet completed) leave one;
        for a packet not at the expected PSN (``early``) the held alone leave
        one too."""
        cfg = q.cfg
        held = sum(1 for opc, _, _ in q.pending.values() if opc in IMM_OPCODES)
        used = (q.cq_prod + held - cfg.get("cq_cons", 0)) & 0xFFFF
        size = 1 << cfg["cq_log2"]
        return bool(cfg["cq_enable"]) and used < size and not (early and held + 1 >= size)

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
        """The ACKs the coalescing timers send once traffic stops, in the order the
        timers started: each runs ACK_T cycles from its QP's first unacknowledged
        packet (docs/rx.md, "ACK coalescing")."""
        due = sorted((q.armed, qpn) for qpn, q in self.qps.items() if q.unacked)
        for _, qpn in due:
            self._ack(qpn, self.qps[qpn], AETH_ACK)


# ---- the testbench ---------------------------------------------------------------------

class RxTB:
    def __init__(self, dut, *, sack_bits=64, mem_size=1 << 20, seed=1, num_qps=16, num_mrs=16,
                 frames=False):
        self.dut = dut
        self.regs = rx_register_map(num_qps, num_mrs)
        self.rng = seeds.rng(seed)
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
            self.hdr = StreamSource(dut, "hdr", rng=self.rng)
            self.payload = StreamSource(dut, "payload", rng=self.rng)
            dut.parser_events.value = 0
        self.peer = StreamSink(dut, "peer_ack")
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
        """Every counter, read after COUNTER_LAG cycles: all events strobed
        before the call are in."""
        for _ in range(COUNTER_LAG):
            await RisingEdge(self.dut.clk)
        return {n: await self.csr_read(COUNTER_BASE + 4 * i) for i, n in enumerate(COUNTERS)}

    async def reset_qps(self, num_qps=16):
        """The QP table is memory, not cleared by reset: put every QP in RESET."""
        for q in range(num_qps):
            await self.csr_write(QP_BASE + q * QP_STRIDE, 0)

    async def set_own(self, mac=OWN_MAC, ip=OWN_IP):
        await self.csr_write(0x0C, mac2int(mac) & 0xFFFFFFFF)
        await self.csr_write(0x10, mac2int(mac) >> 32)
        await self.csr_write(0x14, ip2int(ip))

    def mr_addr(self, index):
        """The CSR address of MR ``index``'s first word (MR_BASE_LO)."""
        return self.regs["MR_BASE_LO"].addr(index)

    async def add_mr(self, index, base, length, rkey, access=3, pd=0):
        a = self.mr_addr(index)
        for off, v in ((0, base & 0xFFFFFFFF), (4, base >> 32), (8, length), (12, rkey),
                       (16, access | pd << 8)):
            await self.csr_write(a + off, v)
        self.model.mrs[index] = dict(base=base, length=length, rkey=rkey, access=access, pd=pd)
        if access & 3 == 3:
            self.allowed.append((base, base + length))

    async def setup_qp(self, qpn, *, peer_ip="10.0.0.1", peer_qpn=0x77, epsn=0, state=RTS,
                       mpr=8, ack_n=1, ack_t=0xFFFF, trim_nack=1, cq_base=None, cq_log2=5,
                       cq_enable=1, mtu=1024, pd=0):
        if cq_base is None:
            cq_base = 0xC0000 + qpn * 0x1000
        cfg = dict(peer_ip=ip2int(peer_ip), peer_qpn=peer_qpn, epsn=epsn, state=state, mpr=mpr,
                   ack_n=ack_n, ack_t=ack_t, trim_nack=trim_nack, cq_base=cq_base,
                   cq_log2=cq_log2, cq_enable=cq_enable, cq_cons=0, mtu=mtu, pd=pd)
        a = QP_BASE + qpn * QP_STRIDE
        await self.csr_write(a + 0x00, (state | trim_nack << 3 | mtu_code(mtu) << 4 | mpr << 8
                                        | pd << 16))
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
        ``extra`` cycles (no AXI write, B response or ACK frame offered or
        taken). Fails if nothing moves (no input taken, no transfer on an
        output) for ``stall`` cycles: the pipeline must never hang, nor an
        output stay offered and never taken. Returns the cycles from the last
        input taken to the last output activity."""
        d = self.dut
        ports = [(d.m_axi__awvalid, d.m_axi__awready), (d.m_axi__wvalid, d.m_axi__wready),
                 (d.m_axi__bvalid, d.m_axi__bready), (d.m_axis_ack__tvalid, d.m_axis_ack__tready)]
        if self.frames:
            ports.append((d.s_axis__tvalid, d.s_axis__tready))
        idle_for = quiet = after_input = 0
        backlog = self._backlog()
        while quiet < extra:
            await RisingEdge(d.clk)
            now = self._backlog()
            offered = [int(v.value) for v, _ in ports[:4]]
            moving = now < backlog or any(int(v.value) and int(r.value) for v, r in ports)
            backlog = now
            idle_for = 0 if moving else idle_for + 1
            assert idle_for < stall, (
                f"pipeline hung: nothing moved for {stall} cycles with {now} inputs waiting "
                f"and AW, W, B, ACK offered {offered}")
            inputs_idle = self.inputs_idle()
            after_input = after_input + 1 if inputs_idle else 0
            quiet = 0 if (moving or any(offered) or not inputs_idle) else quiet + 1
        return after_input - quiet

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


# ---- the benches' regions and helpers ----------------------------------------------------

MTU = 1024
ACK_T = 3000  # long enough that ACK_N decides while traffic flows
# each at the entry its R_Key names (add_mr's index)
MR0 = dict(base=0x10000, length=0x20000, rkey=make_rkey(0, tag=0x11))  # 128 KiB
MR1 = dict(base=0x40003, length=0x1001, rkey=make_rkey(1, tag=0x22))  # unaligned base, length
MR2 = dict(base=0x50000, length=0x1000, rkey=make_rkey(2, tag=0x33))  # without REMOTE_WRITE


async def start(dut, *, seed=1, backpressure=0.0, frames=False):
    """A bench on reset with every QP in RESET, memory filled, OWN_MAC/OWN_IP
    and MR0 (writable), MR1 (writable) and MR2 (no REMOTE_WRITE) set."""
    tb = RxTB(dut, seed=seed, frames=frames)
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


SETTLE = 200  # quiet cycles after which the engine has finished a packet's mark


# ---- the ACK stream under fuzzed traffic ----------------------------------------------------

HALF = 1 << 23


def after_or_at(a: int, b: int) -> bool:
    """PSN (or MSN) ``a`` is at or after ``b`` (24-bit serial numbers)."""
    return (a - b) & PSN_MASK < HALF


def biased_psn(rng, epsn: int, window: int) -> int:
    """A PSN where the checks decide: within 8 of the expected PSN or of the
    window's far edge (``epsn + window``) most of the time, else anywhere."""
    r = rng.random()
    if r < 0.4:
        return (epsn + rng.randrange(-8, 9)) & PSN_MASK
    if r < 0.7:
        return (epsn + window + rng.randrange(-8, 9)) & PSN_MASK
    if r < 0.8:
        return rng.getrandbits(24)
    return (epsn + rng.randrange(-20, window + 20)) & PSN_MASK


class AckStream:
    """The ACK frames of one run, checked as they are collected.

    ``peers`` maps each QP's PEER_QPN (the ACK's DestQP) to its QPN.
    """

    def __init__(self, tb, peers: dict[int, int]):
        self.tb, self.peers = tb, peers
        self.last: dict[int, dict] = {}
        self.naks: list[tuple] = []
        self.probes: list[dict] = []
        self.frames = 0
        self.acks = 0

    def collect(self):
        """Decode the frames sent so far and check each (see the module doc)."""
        model = self.tb.model
        for raw in self.tb.ack_frames():
            a = self.tb.decode_ack(raw)  # checksum, ICRC, addresses, length
            self.frames += 1
            if a.get("probe"):
                self.probes.append(a)
                continue
            qpn = self.peers[a["dqpn"]]
            if a["syndrome"] != AETH_ACK:
                self.naks.append((qpn, a["syndrome"], a["psn"]))
                continue
            self.acks += 1
            cum = a["cum_psn"]
            assert a["psn"] == cum and a["sack_base"] == (cum + 1) & PSN_MASK, a
            assert a["bitmap"] & 1 == 0, a
            prev = self.last.get(qpn)
            if prev is not None:
                assert after_or_at(cum, prev["cum_psn"]), (prev, a)
                assert after_or_at(a["msn"], prev["msn"]), (prev, a)
            placed = model.qps[qpn].placed
            start = prev["cum_psn"] if prev is not None else (model.qps[qpn].cfg["epsn"] - 1)
            for i in range((cum - start) & PSN_MASK):
                psn = (start + 1 + i) & PSN_MASK
                assert psn in placed, f"QP {qpn}: ACK {a} covers PSN {psn}, never placed"
            for i in range(len(bin(a["bitmap"])) - 2):
                if a["bitmap"] >> i & 1:
                    psn = (cum + 1 + i) & PSN_MASK
                    assert psn in placed, f"QP {qpn}: ACK {a} SACKs PSN {psn}, never placed"
            self.last[qpn] = a

    def check_model_naks_and_probes(self):
        """The NAKs and probe responses are exactly the model's, in order."""
        want_naks, want_probes = [], []
        model = self.tb.model
        for w in model.acks:
            if w.get("probe"):
                want_probes.append(w)
            elif w["syndrome"] != AETH_ACK:
                want_naks.append((self.peers[w["dqpn"]], w["syndrome"], w["psn"]))
        model.acks.clear()
        assert self.naks == want_naks, f"NAKs {self.naks[:8]}..., want {want_naks[:8]}..."
        assert self.probes == want_probes
        self.naks.clear()
        self.probes.clear()

    async def poke(self, qpn: int, *, va: int, rkey: int):
        """Send a zero-length duplicate (the PSN before the expected one) to a
        writable region: its ACK, sent at once, names the QP's settled state,
        which ``final`` compares with the model's."""
        q = self.tb.model.qps[qpn]
        self.tb.send(write_packet(opcode=0x0A, dqpn=qpn, psn=q.epsn - 1, va=va, rkey=rkey,
                                  dma_len=0, dst_ip=OWN_IP, dst_mac=OWN_MAC))
        await self.tb.drain()
        self.collect()
        self.final(qpn)
        self.tb.model.acks.clear()  # (compared by ``final``)

    def final(self, qpn: int):
        """The QP's last ACK (sent for a duplicate after everything settled)
        names exactly the model's state."""
        q = self.tb.model.qps[qpn]
        a = self.last[qpn]
        bitmap = sum(1 << i for i in range(self.tb.sack_bits)
                     if (q.epsn + i) & PSN_MASK in q.recv)
        got = (a["cum_psn"], a["bitmap"], a["msn"])
        assert got == ((q.epsn - 1) & PSN_MASK, bitmap, q.msn), (qpn, got, q.epsn, q.msn)


# ---- the engine's Verilator build ------------------------------------------------------------
# tests/hw/test_rx_engine.py runs its cocotb tests on it, and sim/bench/rx.py
# its measurements (``test_module="sim.bench.rx"``). The data path: 64 bits
# for the default tests, 512 for test_rx_engine_512; sim/bench/rx.py measures
# at either, in a process of its own.
DATA_WIDTH = int(os.environ.get("RX_DATA_WIDTH", "64"))


def build_engine(width=None):
    """The RxEngine the RX engine tests and benches run (``width``: its data
    path, ``DATA_WIDTH`` by default)."""
    from hw.rx.engine import RxEngine

    return RxEngine(data_width=width or DATA_WIDTH, num_qps=16, num_mrs=16, sack_bits=64,
                    mpr_max=1024)


def run_engine_tests(testcase=None, extra_env=None, test_module="tests.hw.test_rx_engine",
                     width=None):
    """Runs ``test_module``'s cocotb tests (``testcase``: only that one) on
    ``build_engine(width)``'s Verilator build (``rx_engine_w<width>``)."""
    from sim.cocotb_runner import run_cocotb

    width = width or DATA_WIDTH
    return run_cocotb(name=f"rx_engine_w{width}", elaborate=lambda: build_engine(width),
                      toplevel="rx_engine",
                      test_module=test_module, testcase=testcase,
                      extra_env={**(extra_env or {}), "RX_DATA_WIDTH": str(width)})

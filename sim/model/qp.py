"""Queue pairs: the MRC requester/responder and what they share with the baselines.

A QP object plays both RC roles: as requester it segments posted RDMA WRITEs
into packets, sprays them, processes ACK/SACK/NAK and retransmits; as
responder it accepts data into its PSN bitmap, places payload, coalesces
ACKs and produces receive completions for WRITE_WITH_IMM.

Internally every PSN also has an unbounded sequence index (``idx``) so the
model never confuses laps of the 24-bit PSN space; everything on the wire is
a 24-bit PSN compared with serial-number arithmetic (``psn_diff``).
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass
from typing import NamedTuple

from hw.protocol import SVC_TIME_MAX, SVC_TIME_UNIT_NS, QpState

from .cc import Nscc, NsccParams
from .ev import EvTable
from .packet import (
    ACK,
    AETH_ACK,
    IMM_OPCODES,
    LAST_OPCODES,
    NAK_INVALID_REQUEST,
    NAK_REMOTE_ACCESS,
    NAK_TRIMMED,
    OP_WRITE_FIRST,
    OP_WRITE_LAST,
    OP_WRITE_LAST_IMM,
    OP_WRITE_MIDDLE,
    OP_WRITE_ONLY,
    OP_WRITE_ONLY_IMM,
    PROBE_REQ,
    PROBE_RESP,
    PSN_BITS,
    PSN_MASK,
    Packet,
    ack_wire_len,
    data_wire_len,
    length_check,
    message_extent,
    probe_wire_len,
    psn_diff,
)

# QP states (verbs), named as in the one definition (hw/protocol.py)
RESET, INIT, RTR, RTS, ERROR = (s.name for s in QpState)
_NEXT_STATE = {RESET: (INIT,), INIT: (RTR,), RTR: (RTS,), RTS: (), ERROR: (RESET,)}

# Completion status (verbs names)
SUCCESS = "SUCCESS"
RETRY_EXC_ERR = "RETRY_EXC_ERR"
LOC_QP_OP_ERR = "LOC_QP_OP_ERR"  # a WR the requester cannot execute (unknown opcode)
WR_FLUSH_ERR = "WR_FLUSH_ERR"
REM_ACCESS_ERR = "REM_ACCESS_ERR"
REM_INV_REQ_ERR = "REM_INV_REQ_ERR"

# Completion opcodes
WC_RDMA_WRITE = "RDMA_WRITE"
WC_RECV_RDMA_WITH_IMM = "RECV_RDMA_WITH_IMM"

MTUS = (256, 512, 1024, 2048, 4096)
RTO_UNIT_NS = 1024.0
EXP_CNT_FOREVER = 25

# TxRecord states
OUTSTANDING, LOST, DELIVERED = 0, 1, 2


@dataclass
class QpConfig:
    """Per-QP attributes (the fields of mrc.h's QP and reliability attributes)."""

    mtu: int = 4096
    mpr: int = 255  # in units of 128 PSNs
    rto_exp: int = 8  # timeout = 1.024 us x 2^rto_exp
    linear_cnt: int = 7
    exp_cnt: int = 7
    ack_every: int = 4  # coalesce: ACK every N accepted packets...
    ack_delay_ns: float = 2000.0  # ...or T after the first unacknowledged one
    sack_bits: int = 64
    trim_nack: bool = True
    ev_bad_threshold: int = 2
    ev_min_active: int = 1
    probe_interval_ns: float = 20000.0
    reo_wnd_ns: float = 2000.0  # SACK loss detection: reordering allowance
    # SACK loss detection by count, reliability's rule (docs/reliability.md, step
    # 5) in place of RACK: a hole with this many SACKed PSNs above it is lost
    # (0: RACK with reo_wnd_ns)
    sack_threshold: int = 0
    # MRC's max_wimm: a requester has at most this many WRITE_WITH_IMM messages
    # started and not yet completed (the next one waits, and the QP's later
    # WQEs behind it); a responder holds at most this many early LAST packets
    max_wimm: int = 1024
    start_psn: int = 0
    place_payload: bool = False
    pd: int = 0  # protection domain: the QP writes only regions of its own
    ipv6: bool = False  # the peer is over IPv6: each frame 20 bytes longer on the wire

    def validate(self) -> None:
        if self.mtu not in MTUS:
            raise ValueError(f"MTU {self.mtu} not in {MTUS}")
        if not 1 <= self.mpr <= 255:
            raise ValueError("MPR is an 8-bit field in units of 128 PSNs, 1..255")
        if not 0 <= self.rto_exp <= 24:
            raise ValueError("rto_exp (t) must be 0..24")
        if not 0 <= self.linear_cnt <= 7:
            raise ValueError("linear_cnt must be 0..7")
        if not 0 <= self.exp_cnt <= 25:
            raise ValueError("exp_cnt must be 0..25 (25 = forever)")
        if self.sack_bits % 32 or not 32 <= self.sack_bits <= 8160:
            raise ValueError("sack_bits must be a multiple of 32 in 32..8160")
        if self.ack_every < 1:
            raise ValueError("ack_every must be >= 1")
        if not 0 <= self.start_psn <= PSN_MASK:
            raise ValueError(f"start_psn is {PSN_BITS} bits (0..{PSN_MASK:#x}), "
                             f"not {self.start_psn!r}")
        if self.max_wimm < 1:
            raise ValueError("max_wimm must be >= 1")
        if self.sack_threshold < 0:
            raise ValueError(f"sack_threshold must be >= 0 (0: RACK), not {self.sack_threshold}")

    def timeout_ns(self, retries: int) -> float:
        """Timer value after ``retries`` timeouts without progress."""
        exp = self.rto_exp
        if retries > self.linear_cnt:
            exp += retries - self.linear_cnt
        return RTO_UNIT_NS * (1 << min(exp, 24))

    def retry_limit(self) -> int | None:
        return None if self.exp_cnt == EXP_CNT_FOREVER else self.linear_cnt + self.exp_cnt


class Completion(NamedTuple):
    time_ns: float
    qpn: int
    wr_id: int
    status: str
    opcode: str
    byte_len: int
    imm: int | None


class WorkRequest:
    __slots__ = ("wr_id", "remote_va", "rkey", "length", "imm", "data", "npkts",
                 "first_idx", "last_idx", "post_time", "sent_pkts")

    def __init__(self, wr_id, remote_va, rkey, length, imm, data, mtu, post_time):
        self.wr_id = wr_id
        self.remote_va = remote_va
        self.rkey = rkey
        self.length = length
        self.imm = imm
        self.data = data
        self.npkts = max(1, -(-length // mtu))
        self.first_idx = -1
        self.last_idx = -1
        self.post_time = post_time
        self.sent_pkts = 0


class TxRecord:
    """Requester state of one PSN until the cumulative ACK passes it.

    ``fast_retx``: declared lost by a NAK TRIMMED or a SACK hole since the last
    timeout (reliability's ``fast_done``): a NAK TRIMMED naming it again is
    refused, a copy lost again waits for the timer (docs/protocol.md).
    ``trim_refused``: the copy in flight was named by such a refused NAK, so
    its loss is congestion, no evidence against its EV."""

    __slots__ = ("idx", "psn", "wr", "seg", "opcode", "payload_len", "wire_len", "ev",
                 "send_time", "tx_count", "state", "fast_retx", "trim_refused")

    def __init__(self, idx, psn, wr, seg, opcode, payload_len, wire_len):
        self.idx = idx
        self.psn = psn
        self.wr = wr
        self.seg = seg
        self.opcode = opcode
        self.payload_len = payload_len
        self.wire_len = wire_len
        self.ev = None
        self.send_time = 0.0
        self.tx_count = 0
        self.state = OUTSTANDING
        self.fast_retx = False
        self.trim_refused = False


def segment_opcode(seg: int, npkts: int, imm: bool) -> int:
    if npkts == 1:
        return OP_WRITE_ONLY_IMM if imm else OP_WRITE_ONLY
    if seg == 0:
        return OP_WRITE_FIRST
    if seg == npkts - 1:
        return OP_WRITE_LAST_IMM if imm else OP_WRITE_LAST
    return OP_WRITE_MIDDLE


class QpBase:
    """What every transport shares: state machine, work requests, completions,
    the retransmit timer with linear/exponential retries, the responder MR
    check and ACK coalescing."""

    kind = "base"

    def __init__(self, nic, qpn: int, cfg: QpConfig, evs: EvTable,
                 cc_params: NsccParams | None = None) -> None:
        cfg.validate()
        self.nic = nic
        self.engine = nic.engine
        self.qpn = qpn
        self.cfg = cfg
        self.evs = evs
        evs.qpn = qpn
        evs.clock = lambda: self.engine.now
        self.state = RESET
        self.peer = None  # remote host
        self.dqpn = None
        mtu_wire = self._mtu_wire = data_wire_len(cfg.mtu, False, cfg.ipv6)
        params = (cc_params or NsccParams(enabled=False, max_cwnd=1e18, min_cwnd=1.0))
        self.cc = Nscc(params, mtu_wire)
        # requester
        self.sq_psn = cfg.start_psn
        self.una_idx = 0
        self.una_psn = cfg.start_psn
        self.nxt_idx = 0
        self.records: dict[int, TxRecord] = {}
        self.wrs: deque[WorkRequest] = deque()  # posted, not completed, in order
        self.seg_wr: WorkRequest | None = None  # WR being segmented
        self.seg_queue: deque[WorkRequest] = deque()  # posted, not yet segmented
        self.inflight = 0  # wire bytes outstanding (not delivered, not lost)
        self.wimm_outstanding = 0  # WRITE_WITH_IMM WRs started, not completed
        self.retries = 0
        self.rto_deadline: float | None = None
        self._rto_pending = False
        self.send_cq: list[Completion] = []
        # responder
        self.rq_psn = 0
        self.rcv_idx = 0
        self.rcv_psn = 0
        self.pending_last: dict[int, Packet] = {}
        self._pending_heap: list[int] = []
        self.msn = 0
        self.recv_cq: list[Completion] = []
        self._recv_wr_id = 0
        self._unacked = 0
        self._ece = False
        self._ce_count = 0
        self._svc_from = 0.0  # when the newest packet placed arrived: an ACK's service time
        self._ack_timer_gen = 0
        self._ack_timer_armed = False
        self._last_rx_ev = 0
        self._last_rx_plane = 0
        self.window_psns = cfg.mpr * 128
        self.ack_wire = ack_wire_len(cfg.sack_bits, cfg.ipv6)
        # observability (the scoreboard reads these)
        self.stats = dict(
            tx_data=0, tx_new=0, tx_retx=0, tx_bytes=0, acks_rx=0, naks_trim_rx=0,
            naks_seq_rx=0, naks_trim_repeat=0, invalid_acks=0, timeouts=0, losses_detected=0,
            rx_data=0, rx_bytes=0, rx_dup=0, rx_out_of_window=0, rx_trimmed=0,
            rx_access_err=0, rx_invalid_req=0, rx_ooo_dropped=0, acks_tx=0, naks_tx=0,
            probes_tx=0, probes_rx=0, probe_resps_stale=0, go_back=0, rx_wimm_full=0,
        )
        self.retx_log: list[tuple[float, int, int, str]] = []  # (time, psn, ev, why)
        self.tx_log: list[tuple[float, int, int, bool]] | None = None  # (time, psn, ev, retx)
        self.rx_log: list[tuple[float, int, int]] | None = None  # (time, path, bytes)
        self.cwnd_log: list[tuple[float, float]] | None = None

    # -- state machine -----------------------------------------------------
    def modify(self, state: str, *, peer=None, dqpn: int | None = None,
               rq_psn: int | None = None, sq_psn: int | None = None) -> None:
        if state == ERROR:
            self._to_error(WR_FLUSH_ERR)
            return
        if state not in _NEXT_STATE[self.state]:
            raise ValueError(f"QP {self.qpn}: {self.state} -> {state} is not allowed")
        if state == RTR:
            if peer is None or dqpn is None:
                raise ValueError("RTR needs the peer host and its QPN")
            self.peer = peer
            self.dqpn = dqpn
            self.rq_psn = self.cfg.start_psn if rq_psn is None else rq_psn & PSN_MASK
            self.rcv_psn = self.rq_psn
        if state == RTS:
            self.sq_psn = self.cfg.start_psn if sq_psn is None else sq_psn & PSN_MASK
            self.una_psn = self.sq_psn
        if state == RESET:
            raise ValueError("re-using a QP from ERROR is not modelled")
        self.state = state

    def post_write(self, wr_id: int, remote_va: int, rkey: int, length: int,
                   imm: int | None = None, data: bytes | None = None) -> None:
        """Post an RDMA WRITE (``imm`` None) or WRITE_WITH_IMM."""
        if self.state != RTS:
            raise ValueError(f"QP {self.qpn} is {self.state}, post needs RTS")
        if not 0 <= length < (1 << 31):
            raise ValueError("length must fit the RETH DMA length")
        if data is not None and len(data) != length:
            raise ValueError("data length differs from the WR length")
        if imm is not None and not 0 <= imm <= 0xFFFFFFFF:
            raise ValueError("immediate is 32 bits")
        wr = WorkRequest(wr_id, remote_va, rkey, length, imm, data, self.cfg.mtu,
                         self.engine.now)
        self.wrs.append(wr)
        self.seg_queue.append(wr)
        self.nic.kick()

    # -- requester helpers ---------------------------------------------------
    def _new_record(self) -> TxRecord | None:
        """Segment the next PSN of the posted WRs."""
        wr = self.seg_wr
        if wr is None or wr.sent_pkts == wr.npkts:
            if not self.seg_queue:
                return None
            wr = self.seg_wr = self.seg_queue.popleft()
        seg = wr.sent_pkts
        idx = self.nxt_idx
        if seg == 0:
            wr.first_idx = idx
            wr.last_idx = idx + wr.npkts - 1
            if wr.imm is not None:
                self.wimm_outstanding += 1
        mtu = self.cfg.mtu
        payload = min(mtu, wr.length - seg * mtu)
        opcode = segment_opcode(seg, wr.npkts, wr.imm is not None)
        wire = (self._mtu_wire if payload == mtu and opcode not in IMM_OPCODES
                else data_wire_len(payload, opcode in IMM_OPCODES, self.cfg.ipv6))
        rec = TxRecord(idx, (self.sq_psn + idx) & PSN_MASK, wr, seg, opcode, payload, wire)
        wr.sent_pkts += 1
        self.records[idx] = rec
        self.nxt_idx = idx + 1
        return rec

    def _packet(self, rec: TxRecord, ev, retx: bool) -> Packet:
        wr = rec.wr
        mtu = self.cfg.mtu
        off = rec.seg * mtu
        data = None
        if wr.data is not None:
            data = wr.data[off:off + rec.payload_len]
        pkt = Packet.data_packet(
            self.nic.host, self.peer, ev.plane, ev.value, self.dqpn, rec.psn, rec.opcode,
            wr.remote_va + off, wr.rkey, wr.length, rec.payload_len, wr.imm,
            ackreq=retx or rec.opcode in LAST_OPCODES, data=data, ipv6=self.cfg.ipv6)
        now = self.engine.now
        pkt.send_time = now
        pkt.retx = retx
        rec.send_time = now
        rec.tx_count += 1
        rec.trim_refused = False
        rec.ev = ev
        ev.tx_packets += 1
        st = self.stats
        st["tx_data"] += 1
        st["tx_bytes"] += rec.wire_len
        if retx:
            st["tx_retx"] += 1
        else:
            st["tx_new"] += 1
        if self.tx_log is not None:
            self.tx_log.append((now, rec.psn, ev.value, retx))
        if self.rto_deadline is None:
            self._arm_rto()
        return pkt

    def _complete_sends(self) -> None:
        """Requester completions in order once the cumulative ACK passes a WR."""
        una = self.una_idx
        wrs = self.wrs
        now = self.engine.now
        while wrs and 0 <= wrs[0].last_idx < una and wrs[0].sent_pkts == wrs[0].npkts:
            wr = wrs.popleft()
            if wr.imm is not None:
                self.wimm_outstanding -= 1
            self.send_cq.append(Completion(now, self.qpn, wr.wr_id, SUCCESS, WC_RDMA_WRITE,
                                           wr.length, wr.imm))
            self.nic.on_completion(self, self.send_cq[-1], wr)

    def outstanding(self) -> bool:
        return self.nxt_idx != self.una_idx

    def wimm_limit(self) -> int | None:
        """The QP's bound on WRITE_WITH_IMM messages started and not completed
        (None: none)."""
        return self.cfg.max_wimm

    def wimm_blocked(self) -> bool:
        """The next new PSN would start a WRITE_WITH_IMM while ``wimm_limit()``
        of them are outstanding: the QP waits (its WRs go in order, so the ones
        behind wait too) until one completes."""
        wr = self.seg_wr
        if (wr is not None and wr.sent_pkts < wr.npkts) or not self.seg_queue:
            return False
        limit = self.wimm_limit()
        return (self.seg_queue[0].imm is not None and limit is not None
                and self.wimm_outstanding >= limit)

    def idle(self) -> bool:
        """No posted work left: everything sent and acknowledged, or the QP is in ERROR."""
        return self.state == ERROR or (not self.wrs and not self.outstanding())

    # -- retransmit timer ------------------------------------------------------
    def _arm_rto(self) -> None:
        self.rto_deadline = self.engine.now + self.cfg.timeout_ns(self.retries)
        if not self._rto_pending:
            self._rto_pending = True
            self.engine.at(self.rto_deadline, self._rto_check)

    def _rto_check(self, _arg=None) -> None:
        self._rto_pending = False
        if self.state != RTS or self.rto_deadline is None:
            return
        if not self.outstanding():
            self.rto_deadline = None
            return
        now = self.engine.now
        if now < self.rto_deadline:
            self._rto_pending = True
            self.engine.at(self.rto_deadline, self._rto_check)
            return
        self.stats["timeouts"] += 1
        self.retries += 1
        limit = self.cfg.retry_limit()
        if limit is not None and self.retries > limit:
            self._to_error(RETRY_EXC_ERR)
            return
        self.cc.on_timeout(now)
        self._on_timeout()
        self._arm_rto()
        self.nic.kick()

    def _on_timeout(self) -> None:
        raise NotImplementedError

    def _progress(self) -> None:
        self.retries = 0
        if self.outstanding():
            self._arm_rto()
        else:
            self.rto_deadline = None

    def _to_error(self, first_status: str) -> None:
        """Retries exhausted (or a fatal error): every outstanding WQE completes
        with an error, the first with ``first_status``, the rest flushed."""
        now = self.engine.now
        self.state = ERROR
        status = first_status
        while self.wrs:
            wr = self.wrs.popleft()
            self.send_cq.append(Completion(now, self.qpn, wr.wr_id, status, WC_RDMA_WRITE,
                                           0, wr.imm))
            self.nic.on_completion(self, self.send_cq[-1], wr)
            status = WR_FLUSH_ERR
        self.seg_queue.clear()
        self.seg_wr = None
        self.records.clear()
        self.inflight = 0
        self.wimm_outstanding = 0  # flushed
        self.rto_deadline = None
        self.nic.on_qp_error(self)

    # -- responder helpers -------------------------------------------------------
    def _check_access(self, pkt: Packet) -> bool:
        """The length rules (NAK 0x61), then R_Key, PD and the bounds of the
        packet's message extent (NAK 0x62), as docs/rx.md orders them."""
        if length_check(pkt.opcode, pkt.payload_len, pkt.dma_len, self.cfg.mtu):
            self.stats["rx_invalid_req"] += 1
            self._send_ack(pkt, NAK_INVALID_REQUEST, pkt.psn)
            return False
        mr = self.nic.mrs.get(pkt.rkey)
        lo, hi = message_extent(pkt.opcode, pkt.va, pkt.payload_len, pkt.dma_len)
        if mr is None or mr.pd != self.cfg.pd or lo < mr.va or hi > mr.va + mr.length:
            self.stats["rx_access_err"] += 1
            self._send_ack(pkt, NAK_REMOTE_ACCESS, pkt.psn)
            return False
        if self.cfg.place_payload and pkt.data is not None:
            off = pkt.va - mr.va
            mr.buf[off:off + pkt.payload_len] = pkt.data
        return True

    def _recv_complete(self, pkt: Packet) -> None:
        self.msn = (self.msn + 1) & PSN_MASK
        if pkt.opcode in IMM_OPCODES:
            self._recv_wr_id += 1
            comp = Completion(self.engine.now, self.qpn, self._recv_wr_id, SUCCESS,
                              WC_RECV_RDMA_WITH_IMM, pkt.dma_len, pkt.imm)
            self.recv_cq.append(comp)
            self.nic.on_completion(self, comp, None)

    def _note_rx(self, pkt: Packet) -> None:
        st = self.stats
        st["rx_data"] += 1
        st["rx_bytes"] += pkt.payload_len
        if self.rx_log is not None:
            self.rx_log.append((self.engine.now, pkt.path, pkt.payload_len))

    def _coalesce(self, pkt: Packet) -> None:
        """ACK every ``ack_every`` accepted packets, at once on AckReq, else after T."""
        if pkt.ce:
            self._ece = True
            self._ce_count += 1
        self._unacked += 1
        self._svc_from = self.engine.now
        self._last_rx_ev = pkt.ev
        self._last_rx_plane = pkt.plane
        if pkt.ackreq or self._unacked >= self.cfg.ack_every:
            self._send_ack(pkt, AETH_ACK, None)
        elif not self._ack_timer_armed:
            self._ack_timer_armed = True
            self.engine.after(self.cfg.ack_delay_ns, self._ack_timer, self._ack_timer_gen)

    def _ack_timer(self, gen) -> None:
        if gen != self._ack_timer_gen:
            return
        self._ack_timer_armed = False
        if self._unacked:
            self._send_ack(None, AETH_ACK, None)

    def _sack_bitmap(self) -> int:
        return 0

    def _send_ack(self, pkt: Packet | None, syndrome: int, nak_psn: int | None) -> None:
        """ACK/NAK with the SACK extension, on the EV the triggering packet came on."""
        if pkt is not None:
            ev, plane = pkt.ev, pkt.plane
        else:
            ev, plane = self._last_rx_ev, self._last_rx_plane
        cum = (self.rcv_psn - 1) & PSN_MASK
        ack = Packet(ACK, self.nic.host, self.peer, plane, ev, self.dqpn)
        ack.wire_len, ack.ipv6 = self.ack_wire, self.cfg.ipv6
        ack.syndrome = syndrome
        ack.msn = self.msn
        ack.psn = cum if nak_psn is None else nak_psn
        ack.cum_psn = cum
        ack.sack_base = self.rcv_psn
        ack.sack_bits = self.cfg.sack_bits
        ack.sack_bitmap = self._sack_bitmap()
        ack.ece = self._ece
        ack.ce_count = min(self._ce_count, 0xFFFF)
        ack.svc_time = min(int((self.engine.now - self._svc_from) // SVC_TIME_UNIT_NS),
                           SVC_TIME_MAX)
        ack.send_time = self.engine.now
        if syndrome == AETH_ACK:
            self.stats["acks_tx"] += 1
        else:
            self.stats["naks_tx"] += 1
        self._unacked = 0
        self._ece = False
        self._ce_count = 0
        self._ack_timer_gen += 1
        self._ack_timer_armed = False
        self.nic.send_control(ack)

    def on_probe_req(self, pkt: Packet) -> None:
        """Answer a probe on the EV it came on; probes take no PSN."""
        self.stats["probes_rx"] += 1
        resp = Packet(PROBE_RESP, self.nic.host, pkt.src, pkt.plane, pkt.ev, self.dqpn)
        resp.wire_len, resp.ipv6 = probe_wire_len(self.cfg.ipv6), self.cfg.ipv6
        resp.probe_id = pkt.probe_id
        resp.timestamp = pkt.timestamp
        self.nic.send_control(resp)

    def on_probe_resp(self, pkt: Packet) -> None:
        pass


class MrcQp(QpBase):
    """The MRC transport: spraying over GOOD EVs, SACK, selective retransmission
    on another EV, NAK TRIMMED, EV health with probes, NSCC window."""

    kind = "mrc"

    def __init__(self, nic, qpn, cfg, evs, cc_params=None) -> None:
        super().__init__(nic, qpn, cfg, evs, cc_params)
        self.sacked = 0  # bitmap of delivered PSNs relative to una_idx
        self.retx_queue: deque[TxRecord] = deque()
        self.rack: deque = deque()  # (record, tx_count) in send order
        self.rack_time = -1.0
        self.rcv_bitmap = 0  # bit i: PSN rcv_psn + i received
        self._probe_pending = False
        self._probe_seq = 0

    # -- requester -------------------------------------------------------------
    def pull(self, plane: int) -> Packet | None:
        """The next data packet for ``plane``: retransmissions first, then new PSNs."""
        if self.state != RTS:
            return None
        cc = self.cc
        rq = self.retx_queue
        while rq:
            rec = rq[0]
            if rec.state != LOST:
                rq.popleft()
                continue
            if self.inflight and self.inflight + rec.wire_len > cc.cwnd:
                return None
            ev = self.evs.pick(plane, rec.ev)
            if ev is None:
                break
            rq.popleft()
            rec.state = OUTSTANDING
            self.inflight += rec.wire_len
            pkt = self._packet(rec, ev, True)
            self.rack.append((rec, rec.tx_count))
            return pkt
        if rq:
            return None  # retransmissions wait for an EV on another plane
        if self.window_full():
            return None
        wr = self.seg_wr
        if (wr is None or wr.sent_pkts == wr.npkts) and not self.seg_queue:
            return None
        if self.inflight and self.inflight + self._mtu_wire > cc.cwnd:
            return None
        ev = self.evs.pick(plane)
        if ev is None:
            return None
        rec = self._new_record()
        self.inflight += rec.wire_len
        pkt = self._packet(rec, ev, False)
        self.rack.append((rec, rec.tx_count))
        return pkt

    def can_send(self) -> bool:
        """Cheap over-approximation of ``pull() is not None`` (for any plane)."""
        if self.state != RTS:
            return False
        if self.inflight and self.inflight + self._mtu_wire > self.cc.cwnd:
            return False
        if self.retx_queue:
            return True
        if self.window_full():
            return False
        return self.has_work()

    def window_full(self) -> bool:
        """A new PSN waits: the PSNs from una on fill MPR's range, or a
        WRITE_WITH_IMM waits for its bound."""
        return self.nxt_idx - self.una_idx >= self.window_psns or self.wimm_blocked()

    def has_work(self) -> bool:
        return bool(self.retx_queue) or bool(self.seg_queue) or (
            self.seg_wr is not None and self.seg_wr.sent_pkts < self.seg_wr.npkts)

    def _declare_lost(self, rec: TxRecord, why: str, blame_ev: bool, front: bool = False) -> None:
        rec.state = LOST
        rec.fast_retx = why != "timeout"
        self.inflight -= rec.wire_len
        self.stats["losses_detected"] += 1
        self.retx_log.append((self.engine.now, rec.psn, rec.ev.value, why))
        if front:
            self.retx_queue.appendleft(rec)
        else:
            self.retx_queue.append(rec)
        if blame_ev:  # a timeout blames in _on_timeout
            self.evs.loss(rec.ev, "loss")

    def _deliver_rec(self, rec: TxRecord, now: float) -> None:
        if rec.state == OUTSTANDING:
            self.inflight -= rec.wire_len
        rec.state = DELIVERED
        self._acked_bytes += rec.payload_len
        self.evs.delivered(rec.ev)
        if rec.send_time > self.rack_time:
            self.rack_time = rec.send_time
        if rec.tx_count == 1 and rec.send_time > self._rtt_send:
            self._rtt_send = rec.send_time

    def on_ack(self, pkt: Packet) -> None:
        if self.state != RTS:
            return
        now = self.engine.now
        st = self.stats
        st["acks_rx"] += 1
        una = self.una_idx
        span = self.nxt_idx - una
        advance = psn_diff((pkt.cum_psn + 1) & PSN_MASK, self.una_psn)
        if advance > span:
            st["invalid_acks"] += 1  # acknowledges PSNs never sent: ignore it whole
            return
        self._acked_bytes = 0
        self._rtt_send = -1.0
        progress = False
        records = self.records
        if advance > 0:
            for idx in range(una, una + advance):
                rec = records.pop(idx)
                if rec.state != DELIVERED:
                    self._deliver_rec(rec, now)
            una += advance
            self.una_idx = una
            self.una_psn = (self.una_psn + advance) & PSN_MASK
            self.sacked >>= advance
            span -= advance
            progress = True
        # the bitmap against una: a base behind una (a stale or reordered ACK) still
        # reports the PSNs from una up that its upper bits name
        base_off = psn_diff(pkt.sack_base, self.una_psn)
        if pkt.sack_bitmap:
            bitmap = (pkt.sack_bitmap << base_off if base_off >= 0
                      else pkt.sack_bitmap >> -base_off) & ((1 << span) - 1)
            new = bitmap & ~self.sacked
            if new:
                self.sacked |= new
                progress = True
                while new:
                    low = new & -new
                    rec = records[una + low.bit_length() - 1]
                    if rec.state != DELIVERED:
                        self._deliver_rec(rec, now)
                    new ^= low
        if pkt.syndrome == NAK_TRIMMED:
            st["naks_trim_rx"] += 1
            off = psn_diff(pkt.psn, self.una_psn)
            if 0 <= off < span:
                rec = records[una + off]
                if rec.state != DELIVERED and rec.fast_retx:
                    # already resent by a NAK or a SACK hole since the last timeout:
                    # no second retransmit or window cut (a copy trimmed again waits
                    # for the timer), so a forged NAK costs at most one of each
                    st["naks_trim_repeat"] += 1
                    rec.trim_refused = True
                elif rec.state == OUTSTANDING:
                    # trimmed = congestion, not a path failure: resend at once, EV not blamed
                    self._declare_lost(rec, "trim", blame_ev=False, front=True)
                    self.cc.on_trim(now, rec.wire_len)
        # the responder's service time is not the path's: taken off the sample, which
        # a saturated one (that or longer) leaves out
        rtt = None
        if self._rtt_send >= 0 and pkt.svc_time < SVC_TIME_MAX:
            rtt = max(now - self._rtt_send - pkt.svc_time * SVC_TIME_UNIT_NS, 0.0)
        self.cc.on_ack(now, self._acked_bytes, pkt.ece, rtt)
        if self.cwnd_log is not None:
            self.cwnd_log.append((now, self.cc.cwnd))
        if progress:
            self._progress()
            self._complete_sends()
        fatal = {NAK_REMOTE_ACCESS: REM_ACCESS_ERR,
                 NAK_INVALID_REQUEST: REM_INV_REQ_ERR}.get(pkt.syndrome)
        if fatal:
            # verbs: the responder refused the request. What the NAK's cumulative
            # PSN and SACK bitmap acknowledge has completed above; the oldest WQE
            # left completes with the error, the rest flushed, the QP in ERROR
            self._to_error(fatal)
            return
        self._rack_detect()
        self.nic.kick()

    def _rack_detect(self) -> None:
        """A packet is lost once a packet sent ``reo_wnd`` after it was delivered.

        Only PSNs the responder could have reported are judged: those below
        ``sack_base + sack_bits`` (the bitmap's reach). A PSN beyond it may have
        arrived without the ACK being able to say so; it waits until the
        cumulative PSN moves (or the timer fires). With ``sack_threshold`` set,
        the count rule decides instead (``_count_detect``)."""
        if self.cfg.sack_threshold:
            self.rack.clear()
            self._count_detect(self.cfg.sack_threshold)
            return
        rack = self.rack
        limit = self.rack_time - self.cfg.reo_wnd_ns
        horizon = self.una_idx + self.cfg.sack_bits
        deferred = []
        while rack:
            rec, n = rack[0]
            if rec.state != OUTSTANDING or rec.tx_count != n:
                rack.popleft()
                continue
            if rec.send_time >= limit:
                break
            rack.popleft()
            if rec.idx >= horizon:
                deferred.append((rec, n))
                continue
            self._declare_lost(rec, "sack", blame_ev=not rec.trim_refused)
            self._maybe_probe()
        if deferred:
            deferred.reverse()
            rack.extendleft(deferred)  # still the oldest sends, in send order

    def _count_detect(self, threshold: int) -> None:
        """Reliability's rule: walking the holes (in flight, not SACKed, not
        fast-retransmitted since the last timeout) upwards, a hole with at least
        ``threshold`` SACKed PSNs above it is lost; above the first that is not,
        none is (fewer SACKed PSNs lie above each)."""
        una, sacked = self.una_idx, self.sacked
        above = bin(sacked).count("1")
        for off in range(self.nxt_idx - una):
            if (sacked >> off) & 1:
                above -= 1
                continue
            rec = self.records[una + off]
            if rec.state != OUTSTANDING or rec.fast_retx:
                continue
            if above < threshold:
                break
            self._declare_lost(rec, "sack", blame_ev=True)
            self._maybe_probe()

    def _on_timeout(self) -> None:
        # the timer waited on the oldest PSN in flight and not SACKed (lost and
        # not yet resent, too): the EV it last went out on takes the loss
        # evidence, unless a NAK TRIMMED named it (congestion, not the path);
        # the PSNs sent after it may still be on their way, so their EVs do not
        oldest = next((rec for rec in self.records.values() if rec.state != DELIVERED), None)
        if oldest is not None and not oldest.trim_refused:
            self.evs.loss(oldest.ev, "timeout")
        for rec in list(self.records.values()):
            rec.fast_retx = False  # every PSN may be fast-retransmitted once more
            if rec.state == OUTSTANDING:
                self._declare_lost(rec, "timeout", blame_ev=False)
        self.rack.clear()
        self._maybe_probe()

    # -- probes ----------------------------------------------------------------
    def _maybe_probe(self) -> None:
        if not self._probe_pending and self.evs.bad():
            self._probe_pending = True
            self.engine.after(self.cfg.probe_interval_ns, self._probe_tick)

    def _probe_tick(self, _arg=None) -> None:
        self._probe_pending = False
        if self.state == ERROR:
            return
        bad = self.evs.bad()
        for ev in bad:
            self._probe_seq = (self._probe_seq + 1) & 0xFFFFFFFF
            ev.probe_id = self._probe_seq
            req = Packet(PROBE_REQ, self.nic.host, self.peer, ev.plane, ev.value, self.dqpn)
            req.wire_len, req.ipv6 = probe_wire_len(self.cfg.ipv6), self.cfg.ipv6
            req.probe_id = self._probe_seq
            req.timestamp = int(self.engine.now)
            self.stats["probes_tx"] += 1
            self.nic.send_control(req)
        if bad:
            self._probe_pending = True
            self.engine.after(self.cfg.probe_interval_ns, self._probe_tick)

    def probe_outstanding(self, pkt: Packet) -> bool:
        """Whether a probe response answers the latest probe of its EV: its
        probe_id, and a timestamp neither in the future nor older than two
        probe periods (a replay or an unsolicited answer does not)."""
        ev = self.evs.by_value.get(pkt.ev)
        age = self.engine.now - pkt.timestamp
        return (ev is not None and ev.probe_id == pkt.probe_id
                and 0 <= age <= 2 * self.cfg.probe_interval_ns)

    def on_probe_resp(self, pkt: Packet) -> None:
        if not self.probe_outstanding(pkt):
            self.stats["probe_resps_stale"] += 1
            return  # stale or unknown: only the latest probe of an EV counts
        ev = self.evs.by_value.get(pkt.ev)
        ev.probe_rtt_ns = self.engine.now - pkt.timestamp
        if self.evs.probe_response(ev):
            self.nic.kick()

    # -- responder -------------------------------------------------------------
    def _sack_bitmap(self) -> int:
        return self.rcv_bitmap & ((1 << self.cfg.sack_bits) - 1)

    def _accept(self, pkt: Packet, d: int) -> None:
        """Mark a placed packet ``d`` PSNs past the expected one as received:
        hold a LAST packet until the PSNs before it are in, advance the
        expected PSN over the received run, complete the messages it passes,
        and coalesce the ACK (the model NIC's ``on_data`` ends with it too)."""
        self.rcv_bitmap |= 1 << d
        self._note_rx(pkt)
        if pkt.opcode in LAST_OPCODES:
            idx = self.rcv_idx + d
            self.pending_last[idx] = pkt
            heapq.heappush(self._pending_heap, idx)
        if d == 0:
            bm = self.rcv_bitmap
            n = (~bm & (bm + 1)).bit_length() - 1  # trailing ones
            self.rcv_bitmap = bm >> n
            self.rcv_idx += n
            self.rcv_psn = (self.rcv_psn + n) & PSN_MASK
            heap = self._pending_heap
            while heap and heap[0] < self.rcv_idx:
                self._recv_complete(self.pending_last.pop(heapq.heappop(heap)))
        self._coalesce(pkt)

    def on_data(self, pkt: Packet) -> None:
        if self.state not in (RTR, RTS):
            return
        st = self.stats
        if pkt.trimmed:
            st["rx_trimmed"] += 1
            if self.cfg.trim_nack:
                self._send_ack(pkt, NAK_TRIMMED, pkt.psn)
            return
        d = psn_diff(pkt.psn, self.rcv_psn)
        if d < 0 or (self.rcv_bitmap >> d) & 1:
            st["rx_dup"] += 1
            self._send_ack(pkt, AETH_ACK, None)  # re-ack: the first ACK may be lost
            return
        if d >= self.window_psns:
            st["rx_out_of_window"] += 1
            return
        if d and pkt.opcode in LAST_OPCODES and len(self.pending_last) >= self.cfg.max_wimm:
            st["rx_wimm_full"] += 1  # no room to hold an early immediate: drop, resent later
            return
        if not self._check_access(pkt):
            return
        self._accept(pkt, d)

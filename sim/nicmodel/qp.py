"""The golden model's QP, EV table and NIC with the hardware's rules where
they differ (docs/model.md, "The model NIC"): ``_HwQp``, ``_HwEvTable``,
``_HwNicCore``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hw.headers import PATH_MTU
from hw.reliability.layouts import CqeStatus
from hw.rx.window import MAX_PENDING
from sim.model.ev import DENIED, EvTable
from sim.model.nic import Nic
from sim.model.packet import (
    ACK,
    AETH_ACK,
    DATA,
    IMM_OPCODES,
    LAST_OPCODES,
    NAK_INVALID_REQUEST,
    NAK_REMOTE_ACCESS,
    NAK_TRIMMED,
    PROBE_REQ,
    PROBE_RESP,
    PSN_MASK,
    length_check,
    message_extent,
    psn_diff,
)
from sim.model.qp import (
    LOC_QP_OP_ERR,
    RETRY_EXC_ERR,
    RTR,
    RTS,
    SUCCESS,
    WC_RECV_RDMA_WITH_IMM,
    Completion,
    MrcQp,
    QpConfig,
    WorkRequest,
)

from .common import (
    CQE_STATUS,
)

if TYPE_CHECKING:
    from .nic import ModelNic


class _HwEvTable(EvTable):
    """The QP's EV table in reliability: ``evs_per_qp`` entries, index = the
    hardware's EV index, each on the plane TX's entry names (on a fabric of
    planes; else plane 0); transitions go to the NIC's EV event queue."""

    def __init__(self, nic: ModelNic, qpn: int):
        n, planes = nic.params["evs_per_qp"], nic.fabric.planes
        super().__init__([(i, i % planes) for i in range(n)], planes, qpn=qpn)
        self.nic = nic
        self._cursor = n - 1  # TX's cursor: the first choice is EV 0
        for ev in self.evs:
            ev.value = 0
        self.reindex()

    def pick(self, plane, avoid=None):
        """With planes, TX's rule (docs/tx.md): the next GOOD EV after the QP's
        cursor in index order, whatever its plane (the packet leaves on the EV's
        plane), a retransmission's other than the EV it was lost on if another
        is GOOD. With one plane, the golden model's."""
        if self.planes == 1:
            return super().pick(plane, avoid)
        good = [ev for row in self._good for ev in row]
        if not good:
            return None
        n = len(self.evs)
        good.sort(key=lambda ev: (ev.index - self._cursor - 1) % n)
        ev = good[1] if good[0] is avoid and len(good) > 1 else good[0]
        self._cursor = ev.index
        return ev

    def reindex(self):
        self.by_value = {}
        for ev in self.evs:
            if ev.state != DENIED:
                self.by_value.setdefault(ev.value, ev)

    def _transition(self, ev, new, reason):
        old = ev.state
        super()._transition(ev, new, reason)
        self.reindex()
        # the golden model's event (just appended) says whether a probe made it
        self.nic._ev_event(self.qpn, ev, old, new, self.events[-1].rtt_ns)


class _RefusedWr(WorkRequest):
    """A WQE TX fetched and refused (unknown opcode): no packet; it completes
    LOC_QP_OP_ERR once every WQE before it has completed."""

    __slots__ = ()


class _HwQp(MrcQp):
    """``MrcQp`` where the hardware differs: register-driven enables and
    windows, RX's validation order and MR table, SACK loss detection by a
    SACKed-PSN count (``sack_threshold``, 0 = off) instead of RACK, NAKs
    other than TRIMMED ignored, CQEs written into host memory."""

    def __init__(self, nic: ModelNic, qpn: int, cfg: QpConfig, evs: EvTable):
        super().__init__(nic.core, qpn, cfg, evs, None)
        self.hw = nic
        self.cwnd_psns = self.window_psns  # qp_cwnd's, from the RTS entry on

    # -- requester ---------------------------------------------------------------------
    def pull(self, plane):
        if not self.hw.tx_enabled(self.qpn):
            return None
        return super().pull(plane)

    def can_send(self):
        return self.hw.tx_enabled(self.qpn) and super().can_send()

    def window_full(self):
        """TX's window check (docs/tx.md, "Sequencing and window"): the PSNs from
        una on fill min(MPR x 128, ``window``) (``window_psns``), or those
        of them not SACKed reach ``qp_cwnd`` (``cwnd_psns``; with NSCC on, its
        byte window over the bytes outstanding stands for it), or a
        WRITE_WITH_IMM waits for its bound."""
        if super().window_full():
            return True
        unsacked = self.nxt_idx - self.una_idx - self.sacked.bit_count()
        return not self.cc.p.enabled and unsacked >= self.cwnd_psns

    def wimm_limit(self):
        """TX ``qp_max_wimm``: 0 is no bound, above the in-flight table's size it is
        that size (hw/tx/wimm.py). The responder's early-LAST bound is RX's
        pending-completion table, shared by all QPs (``ModelNic.pending_total``)."""
        bound = self.hw.reg("tx", "qp_max_wimm", self.qpn) & 0xFFFF
        return min(bound, self.hw.params["inflight_depth"]) or None

    def on_ack(self, pkt):
        cnt = self.hw.rel_cnt
        # a fresh QP (nothing sent since RTS) does not know its PSNs yet: ignored
        if self.state != RTS or self.fresh or pkt.syndrome not in (
                AETH_ACK, NAK_TRIMMED, NAK_INVALID_REQUEST, NAK_REMOTE_ACCESS):
            cnt["acks_ignored"] += 1
            return
        advance = psn_diff((pkt.cum_psn + 1) & PSN_MASK, self.una_psn)
        if advance > self.nxt_idx - self.una_idx:
            cnt["acks_unsent"] += 1
            self.stats["invalid_acks"] += 1
            return
        cnt["acks"] += 1
        if pkt.syndrome == NAK_TRIMMED:
            cnt["naks_trimmed"] += 1
        if pkt.syndrome in (NAK_INVALID_REQUEST, NAK_REMOTE_ACCESS):
            cnt["naks_fatal"] += 1
            super().on_ack(pkt)  # what it acknowledges, then ERROR (MrcQp.on_ack)
            return
        before = (self.una_idx, self.sacked, len(self.retx_log))
        repeats = self.stats["naks_trim_repeat"]
        super().on_ack(pkt)
        cnt["naks_trim_repeat"] += self.stats["naks_trim_repeat"] - repeats
        if (self.una_idx, self.sacked, len(self.retx_log)) == before:
            cnt["acks_stale"] += 1

    @property
    def fresh(self) -> bool:
        """Nothing sent since RTS: reliability learns the QP's PSNs from TX's
        first sent record, so until then una_psn and nxt_psn read 0 and every
        ACK/NAK is ignored (``acks_ignored``)."""
        return self.nxt_idx == 0

    def _rack_detect(self):
        # reliability's rule (MrcQp._count_detect) with the register's threshold
        # (0: no SACK loss detection)
        self.rack.clear()
        threshold = self.hw.sack_threshold(self.qpn)
        if threshold:
            self._count_detect(threshold)

    def _on_timeout(self):
        self.hw.rel_cnt["timeouts"] += 1
        # reliability's timeout walk blames its first PSN's EV, whether
        # a refused NAK TRIMMED named it or not (it keeps no such mark)
        for rec in self.records.values():
            rec.trim_refused = False
        super()._on_timeout()

    def _declare_lost(self, rec, why, blame_ev, front=False):
        self.hw.rel_cnt[{"timeout": "retx_timeout", "sack": "retx_sack",
                         "trim": "retx_nak"}[why]] += 1
        super()._declare_lost(rec, why, blame_ev, front)

    def refuse(self, wqe_index):
        """TX refused WQE ``wqe_index`` and sends nothing more from the QP."""
        self.wrs.append(_RefusedWr(wqe_index, 0, 0, 0, None, None, self.cfg.mtu,
                                   self.engine.now))
        self._check_refused()

    def _check_refused(self):
        if self.state == RTS and self.wrs and isinstance(self.wrs[0], _RefusedWr):
            self._to_error(LOC_QP_OP_ERR)

    def _complete_sends(self):
        super()._complete_sends()
        self._check_refused()

    def _to_error(self, first_status):
        if first_status == RETRY_EXC_ERR:
            self.hw.rel_cnt["retry_exhausted"] += 1
        begun = bool(self.wrs)
        super()._to_error(first_status)
        # every WQE posted (up to the doorbell) completes, fetched by TX or not
        self.hw._flush_unfetched(self.qpn, CQE_STATUS.get(first_status, CqeStatus.FLUSHED)
                                 if not begun else CqeStatus.FLUSHED)
        self.hw._tx_stop(self.qpn)  # reliability's qp_state_update: TX stops the QP

    # -- probes ----------------------------------------------------------------------------
    def _maybe_probe(self):
        if self.hw.probe_period_ns():
            self.cfg.probe_interval_ns = self.hw.probe_period_ns()
            super()._maybe_probe()

    def _probe_tick(self, _arg=None):
        if not self.hw.probe_period_ns():
            self._probe_pending = False
            return
        self.cfg.probe_interval_ns = self.hw.probe_period_ns()
        before = self.stats["probes_tx"]
        super()._probe_tick(_arg)
        self.hw.rel_cnt["probes_sent"] += self.stats["probes_tx"] - before

    def on_probe_resp(self, pkt):
        # ProbeReplyCheck: only the answer to the outstanding probe, while probing
        if not self.hw.probe_period_ns() or not self.probe_outstanding(pkt):
            self.hw.rel_cnt["probes_stale"] += 1
            self.stats["probe_resps_stale"] += 1
            return
        self.hw.rel_cnt["probe_resps"] += 1
        if self.state == RTS:
            super().on_probe_resp(pkt)

    # -- responder -----------------------------------------------------------------------------
    def _send_ack(self, pkt, syndrome, nak_psn):
        self.hw.rx_cnt["acks_sent" if syndrome == AETH_ACK else "naks_sent"] += 1
        super()._send_ack(pkt, syndrome, nak_psn)

    def on_data(self, pkt):
        """RX's order: QP state, source, trim, length rules (NAK 0x61), MR check
        (NAK 0x62), then the PSN window."""
        hw, q, cnt, st = self.hw, self.qpn, self.hw.rx_cnt, self.stats
        if hw.rx_state(q) not in (RTR, RTS):
            cnt["qp_state"] += 1
            return
        if not hw.from_peer(pkt):
            cnt["bad_source"] += 1
            return
        if pkt.trimmed:
            d = psn_diff(pkt.psn, self.rcv_psn)
            if d < 0 or d >= hw.rx_window(q) or (self.rcv_bitmap >> d) & 1:
                cnt["trim_stale"] += 1  # not a PSN still awaited: no NAK
                return
            cnt["trimmed"] += 1
            st["rx_trimmed"] += 1
            if hw.rx_field("QP_CTRL", q, "trim_nack"):
                self._send_ack(pkt, NAK_TRIMMED, pkt.psn)
            return
        verdict = length_check(pkt.opcode, pkt.payload_len, pkt.dma_len,
                               PATH_MTU.get(hw.rx_field("QP_CTRL", q, "mtu")))
        if verdict:
            cnt[verdict] += 1
            st["rx_invalid_req"] += 1
            self._send_ack(pkt, NAK_INVALID_REQUEST, pkt.psn)
            return
        verdict = hw.mr_check(pkt.rkey, hw.rx_field("QP_CTRL", q, "pd"),
                              *message_extent(pkt.opcode, pkt.va, pkt.payload_len, pkt.dma_len))
        if verdict:
            cnt[verdict] += 1
            st["rx_access_err"] += 1
            self._send_ack(pkt, NAK_REMOTE_ACCESS, pkt.psn)
            return
        d = psn_diff(pkt.psn, self.rcv_psn)
        if d < 0 or (self.rcv_bitmap >> d) & 1:
            cnt["duplicate"] += 1
            st["rx_dup"] += 1
            self._send_ack(pkt, AETH_ACK, None)
            return
        if d >= hw.rx_window(q):
            cnt["out_of_window"] += 1
            st["rx_out_of_window"] += 1
            return
        # RX's pending-completion table, shared by all QPs: a LAST packet takes an
        # entry until the cumulative PSN passes it, an out-of-order one needs two
        # free (one stays for a LAST packet at a QP's expected PSN)
        if pkt.opcode in LAST_OPCODES and hw.pending_total() >= MAX_PENDING - (d != 0):
            cnt["wimm_full"] += 1
            st["rx_wimm_full"] += 1
            return
        if pkt.opcode in IMM_OPCODES and not hw.recv_cq_room(q, self._held_imm(), d != 0):
            cnt["cq_full"] += 1  # not acknowledged: resent once the host frees a slot
            return
        if pkt.payload_len:
            hw.mem.write(pkt.va, bytes(pkt.data))
        cnt["placed"] += 1
        self._accept(pkt, d)

    def _held_imm(self) -> int:
        """WITH_IMMEDIATE LAST packets accepted whose message is not complete yet."""
        return sum(1 for p in self.pending_last.values() if p.opcode in IMM_OPCODES)

    def _recv_complete(self, pkt):
        # RX's CQE: wr_id is the message's MSN (every message counts, with or
        # without an immediate), byte_len the RETH DMA length, the BTH opcode
        self.msn = (self.msn + 1) & PSN_MASK
        if pkt.opcode in IMM_OPCODES:
            comp = Completion(self.engine.now, self.qpn, self.msn, SUCCESS,
                              WC_RECV_RDMA_WITH_IMM, pkt.dma_len, pkt.imm)
            self.recv_cq.append(comp)
            self.hw._write_recv_cqe(self.qpn, self.msn, pkt.dma_len, pkt.imm, pkt.opcode)

    def reset_responder(self, epsn: int):
        """RX ``QP_EPSN``: expected PSN, empty bitmap, MSN 0, no pending completions,
        no ACK state."""
        self.rq_psn = self.rcv_psn = epsn & PSN_MASK
        self.rcv_bitmap = 0
        self.pending_last.clear()
        self._pending_heap.clear()
        self.msn = 0
        self._unacked = 0
        self._ece = False  # (RX zeroes the QP's row: the CE marks go too)
        self._ce_count = 0
        self._ack_timer_gen += 1
        self._ack_timer_armed = False


class _HwNicCore(Nic):
    """The golden model's NIC (transmit scheduler) with RX's frame dispatch.

    With planes, TX's data path: one scheduler at the sum of the ports' rates
    takes the QPs' packets in turn, each on the plane of the EV its QP chose
    (``_HwEvTable.pick``), into that plane's uplink, where it queues behind
    the port's frames as in NicCore's MAC; with one plane, the golden model's
    scheduler per port."""

    def __init__(self, model_nic: ModelNic, host, engine, fabric):
        super().__init__(host, engine, fabric)
        self.hw = model_nic
        self.completion_hooks.append(model_nic._on_completion)
        self._dp_free = 0.0  # when the data path takes the next packet
        self._dp_wake = False
        self._dp_ns_per_byte = 8.0 / (host.uplinks[0].gbps * self.planes)

    def kick(self):
        if self.planes == 1:
            super().kick()
        elif not self._dp_wake:
            self._send_dp(None)

    def _send_dp(self, _arg):
        self._dp_wake = False
        now = self.engine.now
        if self._dp_free > now:
            self._dp_wake = True
            self.engine.push(self._dp_free, self._send_dp)
            return
        pkt = self._pull_next(0)  # the plane is the chosen EV's (_HwEvTable.pick)
        if pkt is None:
            return
        self._count(pkt, "tx_frames")
        self.fabric.send(pkt)
        self._dp_free = now + pkt.wire_len * self._dp_ns_per_byte
        if self._may_send():  # else the next ACK kicks it
            self._dp_wake = True
            self.engine.push(self._dp_free, self._send_dp)

    def _count(self, pkt, name):
        frames = self.hw.plane_frames[name]
        if frames:
            frames[pkt.plane] += 1

    def send_control(self, pkt):
        self._count(pkt, "tx_frames")
        super().send_control(pkt)

    def receive(self, pkt):
        self._count(pkt, "rx_frames")
        hw, cnt = self.hw, self.hw.rx_cnt
        cnt["parser_accepted"] += 1
        kind = pkt.kind
        if kind in (ACK, PROBE_RESP):  # the validator passes them to RxPeerFilter
            cnt["peer_frames"] += 1
            drop = hw.peer_frame_check(pkt)
            qp = self.qps.get(pkt.dqpn)
            if drop is not None:
                cnt[drop] += 1
            elif qp is None:
                hw.rel_cnt["acks_ignored"] += 1
            elif kind == ACK:
                qp.on_ack(pkt)
            else:
                qp.on_probe_resp(pkt)
            return
        if pkt.dqpn >= hw.params["num_qps"]:
            cnt["bad_qpn"] += 1
            return
        if not hw.for_us(pkt):
            cnt["not_for_us"] += 1
            return
        qp = self.qps.get(pkt.dqpn)
        if kind == DATA:
            if qp is None:
                cnt["qp_state"] += 1
            else:
                qp.on_data(pkt)
        elif kind == PROBE_REQ:
            q = pkt.dqpn
            if qp is None or hw.rx_state(q) not in (RTR, RTS):
                cnt["qp_state"] += 1
            elif not hw.from_peer(pkt):
                cnt["bad_source"] += 1
            else:
                cnt["probe_requests"] += 1
                cnt["probes_answered"] += 1
                qp.on_probe_req(pkt)


# ---- the NIC ---------------------------------------------------------------------------------

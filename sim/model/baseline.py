"""Baselines in the same engine: RoCEv2 RC go-back-N, and oblivious spraying.

``GbnQp(spray=False)`` is RoCEv2 RC as deployed: one UDP source port (EV) per
QP, so ECMP pins the QP to one path; the responder accepts only the expected
PSN, answers the first out-of-order packet of a gap with NAK PSN sequence
error and drops everything until the gap is filled; the requester goes back
to the NAKed PSN and resends everything from there; the same retransmit timer
(1.024 us x 2^t, linear then exponential retries) recovers tail losses.
Trimmed packets mean nothing to a RoCE responder: it drops them.

``GbnQp(spray=True)`` is oblivious spraying: the same go-back-N protocol, but
the requester rotates the EV per packet over all its EVs (no health, no
probes, no SACK), so path reordering looks like loss.

Both use the same NSCC-style window as MRC (when enabled in the scenario), so
that the comparison isolates loss recovery and path selection; deployed RoCE
uses DCQCN (rate based), which is not modelled.
"""

from __future__ import annotations

from .ev import DENIED
from .packet import (
    AETH_ACK,
    LAST_OPCODES,
    NAK_PSN_SEQ_ERROR,
    NAK_REMOTE_ACCESS,
    PSN_MASK,
    Packet,
    psn_diff,
)
from .qp import DELIVERED, LOST, OUTSTANDING, REM_ACCESS_ERR, RTR, RTS, QpBase


class GbnQp(QpBase):
    kind = "gbn"

    def __init__(self, nic, qpn, cfg, evs, cc_params=None, spray: bool = False) -> None:
        super().__init__(nic, qpn, cfg, evs, cc_params)
        self.spray = spray
        self.kind = "spray" if spray else "gbn"
        self.send_idx = 0  # next index to (re)send; nxt_idx = highest ever sent + 1
        self._nak_sent = False
        self._ev_rr = 0

    # -- requester -------------------------------------------------------------
    def _pick_ev(self, plane: int):
        usable = [ev for ev in self.evs.evs if ev.state != DENIED]
        if not usable:
            return None
        if not self.spray:
            # RoCE: one source port for the QP's life, so one port and one path
            ev = usable[0]
            return ev if ev.plane == plane else None
        evs = [ev for ev in usable if ev.plane == plane]
        if not evs:
            return None
        ev = evs[self._ev_rr % len(evs)]
        self._ev_rr += 1
        return ev

    def pull(self, plane: int) -> Packet | None:
        if self.state != RTS:
            return None
        if self.send_idx - self.una_idx >= self.window_psns:
            return None
        resend = self.send_idx < self.nxt_idx
        if not resend:
            wr = self.seg_wr
            if (wr is None or wr.sent_pkts == wr.npkts) and not self.seg_queue:
                return None
        if self.inflight and self.inflight + self._mtu_wire > self.cc.cwnd:
            return None
        ev = self._pick_ev(plane)
        if ev is None:
            return None
        if resend:
            rec = self.records[self.send_idx]
        else:
            rec = self._new_record()
        rec.state = OUTSTANDING
        self.send_idx += 1
        self.inflight += rec.wire_len
        pkt = self._packet(rec, ev, resend)
        if resend:
            self.retx_log.append((self.engine.now, rec.psn, ev.value, "go-back-n"))
        return pkt

    def can_send(self) -> bool:
        if self.state != RTS or self.send_idx - self.una_idx >= self.window_psns:
            return False
        if self.inflight and self.inflight + self._mtu_wire > self.cc.cwnd:
            return False
        return self.has_work()

    def has_work(self) -> bool:
        return self.send_idx < self.nxt_idx or bool(self.seg_queue) or (
            self.seg_wr is not None and self.seg_wr.sent_pkts < self.seg_wr.npkts)

    def _rewind(self, idx: int) -> None:
        """Go back: every PSN from ``idx`` on will be sent again."""
        idx = max(idx, self.una_idx)
        if idx >= self.send_idx:
            return
        for i in range(idx, self.send_idx):
            rec = self.records[i]
            if rec.state == OUTSTANDING:
                self.inflight -= rec.wire_len
                rec.state = LOST
        self.stats["go_back"] += 1
        self.stats["losses_detected"] += self.send_idx - idx
        self.send_idx = idx

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
            st["invalid_acks"] += 1
            return
        if pkt.syndrome == NAK_REMOTE_ACCESS:
            self._to_error(REM_ACCESS_ERR)
            return
        acked = 0
        rtt = None
        if advance > 0:
            for idx in range(una, una + advance):
                rec = self.records.pop(idx)
                if rec.state == OUTSTANDING:
                    self.inflight -= rec.wire_len
                rec.state = DELIVERED
                acked += rec.payload_len
                if rec.tx_count == 1:
                    rtt = now - rec.send_time
            self.una_idx = una = una + advance
            self.una_psn = (self.una_psn + advance) & PSN_MASK
            if self.send_idx < una:
                self.send_idx = una
            self._progress()
            self._complete_sends()
        if pkt.syndrome == NAK_PSN_SEQ_ERROR:
            st["naks_seq_rx"] += 1
            off = psn_diff(pkt.psn, self.una_psn)
            if 0 <= off < self.nxt_idx - una:
                self._rewind(una + off)
        self.cc.on_ack(now, acked, pkt.ece, rtt)
        if self.cwnd_log is not None:
            self.cwnd_log.append((now, self.cc.cwnd))
        self.nic.kick()

    def _on_timeout(self) -> None:
        self._rewind(self.una_idx)

    # -- responder -------------------------------------------------------------
    def on_data(self, pkt: Packet) -> None:
        if self.state not in (RTR, RTS):
            return
        st = self.stats
        if pkt.trimmed:
            st["rx_trimmed"] += 1  # RoCE has no trimming: the header is dropped
            return
        d = psn_diff(pkt.psn, self.rcv_psn)
        if d < 0:
            st["rx_dup"] += 1
            self._send_ack(pkt, AETH_ACK, None)
            return
        if d > 0:
            st["rx_ooo_dropped"] += 1
            if not self._nak_sent:
                self._nak_sent = True
                self._send_ack(pkt, NAK_PSN_SEQ_ERROR, self.rcv_psn)
            return
        if not self._check_access(pkt):
            return
        self._nak_sent = False
        self._note_rx(pkt)
        self.rcv_idx += 1
        self.rcv_psn = (self.rcv_psn + 1) & PSN_MASK
        if pkt.opcode in LAST_OPCODES:
            self._recv_complete(pkt)
        self._coalesce(pkt)

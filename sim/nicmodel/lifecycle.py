"""The model NIC's QP lifecycle, WQE fetch, completions and EV events (a mixin
of ``ModelNic``)."""

from __future__ import annotations

from hw.reliability.cc_defaults import RTT_UNIT_CYCLES
from hw.reliability.completion import CQE_BYTES, WQE_USED_BYTES
from hw.reliability.layouts import CqeStatus
from hw.reliability.nscc import nscc_params
from hw.reliability.registers import NSCC_REGISTERS, RTT_NS_MAX
from hw.tx.layouts import WQE_BYTES, WQE_LAYOUT, WqeFlags, WqeOpcode
from sim.model.cc import Nscc, NsccParams
from sim.model.ev import ASSUMED_BAD, GOOD
from sim.model.packet import (
    PSN_MASK,
    ack_wire_len,
    data_wire_len,
)
from sim.model.qp import (
    ERROR,
    RTR,
    RTS,
    QpConfig,
)

from .common import (
    CQE_STATUS,
    EV_CODES,
    EV_EVENT_DEPTH,
    NEVER,
    _Payload,
    _phase,
)
from .qp import _HwQp


class QpLifecycle:
    """QP creation and teardown, WQE fetch, CQE writes and events (``ModelNic``'s mixin)."""

    # ---- QP lifecycle ----------------------------------------------------------------------------

    def _peer_host(self, peer: tuple[bool, int], what: str):
        """The host of the NIC whose own address is ``peer`` (over IPv6, address)."""
        v6, ip = peer
        nic = self.fabric.nic_of_address(v6, ip)
        if nic is None:
            digits = 32 if v6 else 8
            ips = [f"0x{n.own_address(v6):0{digits}x}" for n in self.fabric.nics]
            raise ValueError(f"model NIC: {what} 0x{ip:0{digits}x} is no NIC on the model fabric "
                             f"(their {'OWN_IP6' if v6 else 'OWN_IP'}s: {ips}); set the "
                             f"peer's address first")
        return nic.host

    def _create_qp(self, q):
        """The QP as RX sees it in RTR: peer, its QPN, expected PSN."""
        cfg = QpConfig(mtu=self.params["max_mtu"], mpr=1, sack_bits=self.params["sack_bits"],
                       reo_wnd_ns=0.0, probe_interval_ns=1.0)
        qp = _HwQp(self, q, cfg, self.ev_tables[q])
        qp.state = RTR
        qp.peer = self._peer_host(self.rx_peer(q), "RX QP_PEER_IP")
        qp.cfg.ipv6 = self.rx_peer(q)[0]
        qp.ack_wire = ack_wire_len(qp.cfg.sack_bits, qp.cfg.ipv6)
        qp.dqpn = self.rx_reg("QP_PEER_QPN", q) & 0xFFFFFF
        qp.reset_responder(self.rx_reg("QP_EPSN", q))
        self._apply_ack_cfg(qp)
        self.qps[q] = qp
        self.core.qps[q] = qp
        self.core._qp_list.append(qp)

    def _apply_ack_cfg(self, qp):
        """RX ``QP_ACK``: ACK after n placed packets (0 means 1) or t cycles."""
        ack = self.rx_reg("QP_ACK", qp.qpn)
        qp.cfg.ack_every = max(1, ack & 0xFF)
        # RX's scan finds a run-out timer within 4 x num_qps cycles: 2 x num_qps late
        # on average (docs/rx.md, ACK coalescing)
        qp.cfg.ack_delay_ns = ((ack >> 16) + 2 * self.params["num_qps"]) * self.clk_period_ns

    def _apply_rel_cfg(self, qp):
        """Reliability ``qp_rel_cfg`` and ``ev_loss_threshold``: timer and EV health."""
        cfg, table = qp.cfg, qp.evs
        rel_cfg = {f: self.field("reliability", "qp_rel_cfg", qp.qpn, f)
                   for f in ("t", "linear_cnt", "exp_cnt", "ev_min_active")}
        cfg.rto_exp = min(rel_cfg["t"], 24)
        cfg.linear_cnt = rel_cfg["linear_cnt"]
        cfg.exp_cnt = min(rel_cfg["exp_cnt"], 25)
        cfg.ev_min_active = table.min_active = rel_cfg["ev_min_active"]
        threshold = self.reg("reliability", "ev_loss_threshold") & 0xF
        cfg.ev_bad_threshold = table.bad_threshold = threshold or NEVER

    def _destroy_qp(self, q):
        qp = self.qps[q]
        if qp is None:
            return
        qp.state = ERROR  # pending timer, probe and ACK events find it dead
        qp.rto_deadline = None
        qp._unacked = 0
        qp._ack_timer_gen += 1
        self.qps[q] = None
        self.core.qps.pop(q, None)
        self.core._qp_list.remove(qp)

    def _start(self, q):
        """Reliability's RTS command: the requester starts from TX's and
        reliability's registers."""
        if self.qps[q] is None:
            self._create_qp(q)
        qp = self.qps[q]
        peer = self._peer_host(self.tx_peer(q), "TX qp_dst_ip")
        if peer is not qp.peer:
            raise ValueError(f"model NIC QP {q}: TX qp_dst_ip and RX QP_PEER_IP name different "
                             f"hosts; the model QP has one peer")
        cfg, p = qp.cfg, self.params
        mtu = self.reg("tx", "qp_mtu", q)
        cfg.mtu = mtu if mtu in (256, 512, 1024, 2048, 4096) and mtu <= p["max_mtu"] \
            else p["max_mtu"]
        self._apply_rel_cfg(qp)
        cfg.trim_nack = bool(self.rx_field("QP_CTRL", q, "trim_nack"))
        cfg.ipv6 = self.tx_peer(q)[0]
        qp._mtu_wire = data_wire_len(cfg.mtu, False, cfg.ipv6)
        qp.ack_wire = ack_wire_len(cfg.sack_bits, cfg.ipv6)
        mpr = (self.reg("tx", "qp_mpr", q) & 0xFF) or 1
        cwnd = self.reg("tx", "qp_cwnd", q) or p["window"]
        qp.window_psns = max(1, min(128 * mpr, p["window"]))
        qp.cwnd_psns = max(1, min(cwnd, p["window"]))
        self._start_nscc(qp)
        qp.sq_psn = qp.una_psn = self.reg("tx", "qp_next_psn", q) & PSN_MASK
        qp.state = RTS
        self.rel_state[q] = RTS
        self._fetch(q)

    def _start_nscc(self, qp):
        """NSCC on (``nscc_ctrl.enabled``): the QP's window is the golden model's
        ``Nscc`` with the registers' parameters, from its RTS entry (as the
        gateware's NsccPath starts a QP's state); off: no byte window."""
        fields = {f: self.field("reliability", name, 0, f)
                  for name, (_, flds) in NSCC_REGISTERS.items() for f, *_ in flds}
        if not fields["enabled"]:
            return
        unit_ns = RTT_UNIT_CYCLES * 1e9 / self.params["clk_freq_hz"]
        mtu_wire = fields["mtu_wire"]
        qp.cc = Nscc(NsccParams(**nscc_params(fields, unit_ns, mtu_wire)), mtu_wire)

    def _flush_unfetched(self, q, first_status, start=None):
        """Complete the WQEs between TX's consumer index (or ``start``) and the
        last doorbell (reliability sees every doorbell: NicCore's
        DoorbellSnoop). TX's consumer index stays behind, as in the RTL."""
        producer = self.reg("tx", "qp_doorbell", q) & 0xFFFF
        index = self.tx_consumer[q] if start is None else start
        status = first_status
        while index != producer:
            self._write_send_cqe(q, index, status)
            index, status = (index + 1) & 0xFFFF, CqeStatus.FLUSHED
        self.sq_flushed[q] = producer

    def _rel_qp_state(self, q):
        """Reliability's state of QP q (its qp_ctrl)."""
        qp = self.qps[q]
        return qp.state if qp is not None and qp.state in (RTS, ERROR) else self.rel_state[q]

    def _tx_stop(self, q):
        addr = self.maps["tx"]["qp_ctrl"].addr(q)
        self.store[("tx", addr)] = self.store.get(("tx", addr), 0) & ~1

    def _tx_reset(self, q):
        """TX qp_ctrl.reset: stopped, ring empty from the doorbell on."""
        self._tx_stop(q)
        self.tx_consumer[q] = self.reg("tx", "qp_doorbell", q) & 0xFFFF
        self.tx_halt[q] = False

    def _fetch(self, q):
        """TX: take the WQEs between the consumer index and the doorbell."""
        qp = self.qps[q]
        if qp is None or qp.state != RTS or not self.tx_enabled(q) or self.tx_halt[q]:
            return
        producer = self.reg("tx", "qp_doorbell", q) & 0xFFFF
        base = self.reg("tx", "qp_sq_base_lo", q) | self.reg("tx", "qp_sq_base_hi", q) << 32
        size = 1 << min(self.reg("tx", "qp_sq_log2_size", q), 15)
        while self.tx_consumer[q] != producer:
            index = self.tx_consumer[q]
            raw = self.mem.read(base + (index % size) * WQE_BYTES, WQE_BYTES)
            wqe = {name: int.from_bytes(raw[off:off + n], "little")
                   for name, off, n in WQE_LAYOUT}
            if wqe["opcode"] not in WqeOpcode.KNOWN:
                # refused: consumed, nothing more taken until qp_ctrl is written
                self.tx_consumer[q] = (index + 1) & 0xFFFF
                self.tx_halt[q] = True
                qp.refuse(index)
                return
            imm = wqe["imm"] if wqe["opcode"] == WqeOpcode.WRITE_WITH_IMM else None
            length = wqe["length"] & 0x7FFFFFFF
            qp.post_write(index, wqe["raddr"], wqe["rkey"], length, imm,
                          _Payload(self.mem, wqe["laddr"], length))
            self.tx_consumer[q] = (index + 1) & 0xFFFF

    # ---- completions and events ------------------------------------------------------------------

    def _on_completion(self, qp, completion, wr):
        if wr is None:  # receive completions are written by _write_recv_cqe
            return
        self._write_send_cqe(qp.qpn, wr.wr_id,
                             CQE_STATUS.get(completion.status, CqeStatus.FLUSHED))

    def _write_send_cqe(self, q, wqe_index, status):
        """Reliability's CompletionWriter: WQE bytes 0x00..0x27 from the SQ ring,
        the CQE at CQ base + (n mod size) x 32 with phase bit."""
        rel = "reliability"
        sq_base = self.reg(rel, "sq_base_lo", q) | self.reg(rel, "sq_base_hi", q) << 32
        cq_base = self.reg(rel, "cq_base_lo", q) | self.reg(rel, "cq_base_hi", q) << 32
        sq_log2 = self.field(rel, "ring_sizes", q, "sq_log2")
        cq_log2 = self.field(rel, "ring_sizes", q, "cq_log2")
        raw = self.mem.read(sq_base + (wqe_index & ((1 << sq_log2) - 1)) * WQE_BYTES,
                            WQE_USED_BYTES)
        if status == CqeStatus.SUCCESS and not raw[0x01] & WqeFlags.SIGNALED:
            return  # unsignaled: no CQE on success
        pi = self.send_cq_pi[q]
        byte_len = int.from_bytes(raw[0x20:0x24], "little") if status == 0 else 0
        cqe = (raw[0x08:0x10] + byte_len.to_bytes(4, "little") + raw[0x04:0x08]
               + q.to_bytes(4, "little") + bytes((status, raw[0x00], 0, _phase(pi, cq_log2)))
               + (wqe_index & 0xFFFF).to_bytes(2, "little") + bytes(6))
        self.mem.write(cq_base + (pi & ((1 << cq_log2) - 1)) * CQE_BYTES, cqe)
        self.send_cq_pi[q] = (pi + 1) & 0xFFFF
        self.rel_cnt["cqes"] += 1
        self.irq_completion = True

    def recv_cq_room(self, q, held: int, early: bool) -> bool:
        """RX's CQ check for a WITH_IMMEDIATE LAST packet: the ring is enabled and
        the CQEs written and not consumed plus ``held`` (completions accepted,
        not yet written) leave a slot for it; a packet not at the expected PSN
        (``early``) also needs ``held`` alone to leave one, so held completions
        never take the slot of the message they wait for."""
        ctrl = self.rx_reg("QP_CQ_CTRL", q)
        log2, enable = ctrl & 0x1F, ctrl >> 31
        used = (self.recv_cq_pi[q] + held - self.rx_reg("QP_CQ_CONS", q)) & 0xFFFF
        return bool(enable) and used < 1 << log2 and not (early and held + 1 >= 1 << log2)

    def _write_recv_cqe(self, q, msn, byte_len, imm, opcode):
        """RX's CQE (hw/rx/cqe.py); its slot was checked when the LAST packet was
        accepted (``recv_cq_room``), so only a host that took the slot back since
        (ring disabled or shrunk, ``QP_CQ_CONS`` moved past it) sees an overflow."""
        ctrl = self.rx_reg("QP_CQ_CTRL", q)
        log2, enable = ctrl & 0x1F, ctrl >> 31
        pi, cons = self.recv_cq_pi[q], self.rx_reg("QP_CQ_CONS", q) & 0xFFFF
        if not enable or (pi - cons) & 0xFFFF >= 1 << log2:
            self.rx_cnt["cq_overflow"] += 1
            return
        base = self.rx_reg("QP_CQ_BASE_LO", q) | self.rx_reg("QP_CQ_BASE_HI", q) << 32
        cqe = (msn.to_bytes(8, "little") + (byte_len & 0xFFFFFFFF).to_bytes(4, "little")
               + (imm or 0).to_bytes(4, "little") + q.to_bytes(4, "little")
               + bytes((0, opcode, 0, _phase(pi, log2))) + bytes(8))
        self.mem.write(base + (pi & ((1 << log2) - 1)) * CQE_BYTES, cqe)
        self.recv_cq_pi[q] = (pi + 1) & 0xFFFF
        self.rx_cnt["cqe_written"] += 1

    def _ev_event(self, q, ev, old, new, rtt_ns=None):
        if old == GOOD and new == ASSUMED_BAD:
            self.rel_cnt["ev_to_bad"] += 1
        elif old == ASSUMED_BAD and new == GOOD:
            self.rel_cnt["ev_to_good"] += 1
        if len(self.ev_events) >= EV_EVENT_DEPTH:
            self.rel_cnt["events_lost"] += 1
            return
        # ev_event_rtt: whole ns, saturating; 0 only for an event no probe answer made
        rtt = 0 if rtt_ns is None else min(max(1, round(rtt_ns)), RTT_NS_MAX)
        self.ev_events.append((q, ev.index, EV_CODES[old], EV_CODES[new], ev.drops, rtt))

"""A register-level model of NicCore on the golden model's transport and fabric.

``ModelNic`` answers the NIC's CSR space (the same ``RegisterMap``s the
gateware decodes: hw/nic/csr.py, hw/tx/regs.py, hw/rx/regs.py,
hw/reliability/registers.py, in NicCore's block order and window size) and
reaches host memory the way NicCore's DMA master does: it fetches 64-byte WQEs
from the send ring on a doorbell (hw/tx/layouts.py ``WQE_LAYOUT``), reads
payload from host memory when a packet leaves, places received payload at the
RETH VA after the MR table's R_Key and bounds check, and writes 32-byte CQEs
with phase bits into the send ring (reliability's format,
hw/reliability/completion.py) and the receive ring (RX's format,
hw/rx/cqe.py). The transport between two ModelNics is the golden model's
``MrcQp`` (sim/model/qp.py) on a ``sim.fabric`` multipath fabric, with the
hardware's rules where they differ from the model's (see docs/model.md,
"The model NIC").

Interface
---------
``ModelFabric(num_paths=8, delay_ns=400.0, gbps=1.0, seed=1, routing="explicit")``
    one event engine (time in ns) and one plane of ``num_paths`` paths shared
    by the NICs attached to it; ``advance(ns)`` runs the model.
``ModelNic(params, fabric, build_id=0, mem_size=8 MiB, csr_access_cycles=4)``
    ``params`` are NicCore's (a dict like sim/system/top.py's ``NIC_PARAMS``:
    data_width, num_qps, evs_per_qp, sack_bits, max_mtu, mpr_max, num_mrs,
    window, inflight_depth, clk_freq_hz); bad parameters raise ValueError.
    ``read32(addr)`` / ``write32(addr, value)``: one CSR access (each lets
    ``csr_access_cycles`` clock cycles pass first, as an AXI4-Lite access
    does); ``mem``: its host memory (``host_driver.transport.HostMemory``);
    ``clk_period_ns``; ``idle(cycles)``.

Timing is event-accurate, not cycle-accurate: packets take the fabric's
serialisation and propagation times, everything inside the NIC (WQE fetch,
DMA, CQE writes, ACK processing) takes no time.
"""

from __future__ import annotations

import heapq

from host_driver.transport import HostMemory
from hw.headers import PATH_MTU
from hw.nic.core import BLOCK_ORDER, check_nic_params
from hw.nic.csr import device_info_register_map, header_word, host_view
from hw.protocol import EvState, QpState
from hw.reliability.cc_defaults import (
    DEFAULT_BASE_RTT_NS,
    line_rate_bps,
    start_cwnd_packets,
    target_rtt_units,
)
from hw.reliability.completion import CQE_BYTES, WQE_USED_BYTES
from hw.reliability.layouts import CqeStatus
from hw.reliability.registers import register_map as rel_register_map
from hw.rx.regs import COUNTERS as RX_COUNTERS
from hw.rx.regs import rx_register_map
from hw.rx.window import MAX_PENDING
from hw.tx.layouts import WQE_BYTES, WQE_LAYOUT, WqeFlags, WqeOpcode
from hw.tx.regs import CTRL_FLUSH_BIT as TX_CTRL_FLUSH_BIT
from hw.tx.regs import CTRL_RESET_BIT as TX_CTRL_RESET_BIT
from hw.tx.regs import tx_register_map
from sim.fabric import Engine
from sim.fabric import Fabric as PathFabric
from sim.model.ev import ASSUMED_BAD, DENIED, GOOD, EvTable
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
    data_wire_len,
    length_check,
    message_extent,
    psn_diff,
)
from sim.model.qp import (
    ERROR,
    LOC_QP_OP_ERR,
    OUTSTANDING,
    REM_ACCESS_ERR,
    REM_INV_REQ_ERR,
    RESET,
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

__all__ = ["ModelFabric", "ModelNic", "NIC_PARAM_NAMES"]

NIC_PARAM_NAMES = ("data_width", "num_qps", "evs_per_qp", "sack_bits", "max_mtu", "mpr_max",
                   "num_mrs", "window", "inflight_depth", "clk_freq_hz")
STATE_CODES = {s.name: int(s) for s in QpState}
EV_CODES = {s.name: int(s) for s in EvState}
EV_NAMES = {v: k for k, v in EV_CODES.items()}
CQE_STATUS = {SUCCESS: CqeStatus.SUCCESS, RETRY_EXC_ERR: CqeStatus.RETRY_EXCEEDED,
              LOC_QP_OP_ERR: CqeStatus.LOC_QP_OP_ERR,
              REM_ACCESS_ERR: CqeStatus.REM_ACCESS, REM_INV_REQ_ERR: CqeStatus.REM_INV_REQ}
MR_VALID, MR_REMOTE_WRITE = 1, 2
EV_EVENT_DEPTH = 32
NEVER = 1 << 30  # an EV loss threshold of 0 means never


class _Ram:
    def __init__(self, size: int):
        self.data = bytearray(size)

    def read(self, addr: int, n: int) -> bytes:
        if addr < 0 or addr + n > len(self.data):
            raise ValueError(f"host memory access [0x{addr:x}, +{n}) outside "
                             f"0x{len(self.data):x} bytes")
        return bytes(self.data[addr:addr + n])

    def write(self, addr: int, data: bytes) -> None:
        if addr < 0 or addr + len(data) > len(self.data):
            raise ValueError(f"host memory access [0x{addr:x}, +{len(data)}) outside "
                             f"0x{len(self.data):x} bytes")
        self.data[addr:addr + len(data)] = data


class _Payload:
    """A WQE's payload in host memory, read when a packet slices it (TX's DMA
    reads payload per packet, retransmissions included)."""

    __slots__ = ("mem", "addr", "length")

    def __init__(self, mem, addr, length):
        self.mem, self.addr, self.length = mem, addr, length

    def __len__(self):
        return self.length

    def __getitem__(self, s: slice) -> bytes:
        start, stop, _ = s.indices(self.length)
        return self.mem.read(self.addr + start, stop - start) if stop > start else b""


# ---- the fabric ---------------------------------------------------------------------------


class ModelFabric:
    """The event engine and a one-plane ``sim.fabric`` fabric for ModelNics.

    A frame crosses the sender's uplink, the core link of its path (path = EV
    mod ``num_paths`` with explicit routing) toward the receiver, and the
    receiver's downlink. Every link runs at ``gbps``; the whole propagation
    delay ``delay_ns`` sits on the core link, so it is per path. Switch
    queues are unlimited: no ECN marks, no trimming, no overflow.
    """

    def __init__(self, *, num_paths: int = 8, delay_ns: float = 400.0, gbps: float = 1.0,
                 seed: int = 1, routing: str = "explicit"):
        if not isinstance(num_paths, int) or num_paths < 1:
            raise ValueError(f"num_paths must be a positive integer, not {num_paths!r}")
        if delay_ns < 0 or gbps <= 0:
            raise ValueError(f"need delay_ns >= 0 and gbps > 0, not {delay_ns!r}, {gbps!r}")
        self.engine = Engine()
        self.paths = PathFabric(self.engine, planes=1, paths_per_plane=num_paths,
                                port_gbps=gbps, core_gbps=gbps, link_delay_ns=0.0,
                                queue_bytes=1 << 62, ecn_bytes=1 << 62, trim=False,
                                routing=routing, seed=seed)
        self.delay_ns = delay_ns
        self.nics: list[ModelNic] = []

    @property
    def now(self) -> float:
        return self.engine.now

    def attach(self, nic: ModelNic):
        host = self.paths.add_host(f"nic{len(self.nics)}")
        for link in self.paths.core.values():
            if link.name.endswith(f".to.{host.name}"):
                link.prop_ns = self.delay_ns
        self.nics.append(nic)
        return host

    def advance(self, ns: float) -> None:
        """Run the model for ``ns`` nanoseconds."""
        until = self.engine.now + ns
        self.engine.run(until=until)
        # Engine.run stops before the first later event without moving the clock
        if self.engine.now < until:
            self.engine.now = until

    def nic_of_ip(self, ip: int) -> ModelNic | None:
        for nic in self.nics:
            if nic.own_ip == ip:
                return nic
        return None


# ---- the QP: golden-model MRC with the hardware's rules -----------------------------------


class _HwEvTable(EvTable):
    """The QP's EV table in reliability: ``evs_per_qp`` entries, index = the
    hardware's EV index; transitions go to the NIC's EV event queue."""

    def __init__(self, nic: ModelNic, qpn: int):
        n = nic.params["evs_per_qp"]
        super().__init__([(i, 0) for i in range(n)], 1, qpn=qpn)
        self.nic = nic
        for ev in self.evs:
            ev.value = 0
        self.reindex()

    def reindex(self):
        self.by_value = {}
        for ev in self.evs:
            if ev.state != DENIED:
                self.by_value.setdefault(ev.value, ev)

    def _transition(self, ev, new, reason):
        old = ev.state
        super()._transition(ev, new, reason)
        self.reindex()
        self.nic._ev_event(self.qpn, ev, old, new)


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

    # -- requester ---------------------------------------------------------------------
    def pull(self, plane):
        if not self.hw.tx_enabled(self.qpn):
            return None
        return super().pull(plane)

    def can_send(self):
        return self.hw.tx_enabled(self.qpn) and super().can_send()

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
        # reliability's rule (docs/reliability.md step 5): walking the holes
        # upwards, a hole with at least sack_threshold SACKed PSNs above it is
        # lost, once per timeout round; the walk stops at the first that is not
        self.rack.clear()
        threshold = self.hw.sack_threshold(self.qpn)
        if not threshold:
            return
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

    def _on_timeout(self):
        self.hw.rel_cnt["timeouts"] += 1
        # reliability's timeout walk blames the first PSN on each EV, whether
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
        if hw.frame_addresses(pkt)[0] != hw.rx_reg("QP_PEER_IP", q):
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
        if pkt.opcode in IMM_OPCODES and not hw.recv_cq_room(q, self._held_imm()):
            cnt["cq_full"] += 1  # not acknowledged: resent once the host frees a slot
            return
        if pkt.payload_len:
            hw.mem.write(pkt.va, bytes(pkt.data))
        cnt["placed"] += 1
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
        """RX ``QP_EPSN``: expected PSN, empty bitmap, MSN 0, no pending completions."""
        self.rq_psn = self.rcv_psn = epsn & PSN_MASK
        self.rcv_bitmap = 0
        self.pending_last.clear()
        self._pending_heap.clear()
        self.msn = 0
        self._unacked = 0
        self._ack_timer_gen += 1
        self._ack_timer_armed = False


class _HwNicCore(Nic):
    """The golden model's NIC (transmit scheduler) with RX's frame dispatch."""

    def __init__(self, model_nic: ModelNic, host, engine, fabric):
        super().__init__(host, engine, fabric)
        self.hw = model_nic
        self.completion_hooks.append(model_nic._on_completion)

    def receive(self, pkt):
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
        if hw.frame_addresses(pkt)[1] != hw.own_ip:
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
            elif hw.frame_addresses(pkt)[0] != hw.rx_reg("QP_PEER_IP", q):
                cnt["bad_source"] += 1
            else:
                cnt["probe_requests"] += 1
                cnt["probes_answered"] += 1
                qp.on_probe_req(pkt)


# ---- the NIC ---------------------------------------------------------------------------------


class ModelNic:
    """NicCore's CSR space and DMA behaviour over the golden model (module docstring)."""

    RESET_VALUES = {
        ("rx", "TRIM_DSCP"): 0x3F,
        ("reliability", "ev_loss_threshold"): 2, ("reliability", "cwnd_min"): 1,
        ("reliability", "cwnd_ai"): 256, ("reliability", "cwnd_ai_fast"): 1024,
        ("reliability", "cwnd_md_shift"): 1, ("reliability", "cwnd_trim_dec"): 1,
    }

    def __init__(self, params: dict, fabric: ModelFabric, *, build_id: int = 0,
                 mem_size: int = 1 << 23, csr_access_cycles: int = 4):
        params = dict(params)
        build_id = params.pop("build_id", build_id)
        missing = [n for n in NIC_PARAM_NAMES if n not in params]
        unknown = sorted(set(params) - set(NIC_PARAM_NAMES))
        if missing or unknown:
            raise ValueError(f"NIC parameters: missing {missing}, unknown {unknown}; give "
                             f"exactly {list(NIC_PARAM_NAMES)} (sim/system/top.py NIC_PARAMS)")
        check_nic_params(build_id=build_id, **params)
        if not isinstance(csr_access_cycles, int) or csr_access_cycles < 0:
            raise ValueError(f"csr_access_cycles must be an integer >= 0, "
                             f"not {csr_access_cycles!r}")
        self.params = params
        self.build_id = build_id
        self.fabric = fabric
        self.csr_access_cycles = csr_access_cycles
        self.clk_period_ns = 1e9 / params["clk_freq_hz"]
        nq, ne = params["num_qps"], params["evs_per_qp"]
        self.maps = {
            "device_info": host_view(device_info_register_map()),
            "tx": host_view(tx_register_map(nq, ne)),
            "rx": host_view(rx_register_map(nq, params["num_mrs"])),
            "reliability": host_view(rel_register_map(nq, ne, params["window"])),
        }
        # NicCore's windows: every block decodes at least 16 address bits
        self.block_bits = max(16, *((m.size - 1).bit_length() for m in self.maps.values()))
        self._by_name = {block: {r.name: r for r in m.registers} for block, m in self.maps.items()}
        self._fields = {(block, r.name): {f[0]: (f[1], f[2]) for f in r.fields}
                        for block, m in self.maps.items() for r in m.registers}
        self.decode = {}
        for name, regmap in self.maps.items():
            table = {}
            for reg in regmap.registers:
                for i in range(reg.count):
                    table[reg.addr(i)] = (reg, i)
            self.decode[name] = table
        self.store: dict[tuple[str, int], int] = {}
        for (block, reg), value in self.RESET_VALUES.items():
            self.store[(block, self.maps[block][reg].addr())] = value
        # the window's bounds, NSCC's start window and target (hw/reliability/cc_defaults.py)
        rel_map = self.maps["reliability"]
        self.store[("reliability", rel_map["cwnd_max"].addr())] = params["window"]
        self.store[("reliability", rel_map["cwnd_init"].addr())] = start_cwnd_packets(
            DEFAULT_BASE_RTT_NS, line_rate_bps(params["data_width"], params["clk_freq_hz"]),
            params["max_mtu"], params["window"])
        self.store[("reliability", rel_map["target_rtt"].addr())] = target_rtt_units(
            DEFAULT_BASE_RTT_NS, params["clk_freq_hz"])
        self.mem = HostMemory(_Ram(mem_size), mem_size)
        self.host = fabric.attach(self)
        self.core = _HwNicCore(self, self.host, fabric.engine, fabric.paths)
        self.reset_time = fabric.now
        self.rx_cnt = {name: 0 for name in RX_COUNTERS}
        self.rel_cnt = {reg.name[4:]: 0 for reg in self.maps["reliability"].registers
                        if reg.name.startswith("cnt_")}
        self.ev_tables = [_HwEvTable(self, q) for q in range(nq)]
        self.qps: list[_HwQp | None] = [None] * nq
        self.rel_state = [RESET] * nq
        self.tx_consumer = [0] * nq
        self.tx_halt = [False] * nq  # TX refused a WQE of the QP: no new work
        self.sq_flushed = [0] * nq  # reliability: WQEs completed up to (a flush's end)
        self.send_cq_pi = [0] * nq
        self.recv_cq_pi = [0] * nq
        self.tx_ev = [[(0, 0)] * ne for _ in range(nq)]  # TX's own table (value, state)
        self.ev_events: list[tuple[int, int, int, int, int]] = []
        self.irq_completion = False

    # ---- host side: CSR accesses and time ---------------------------------------------------

    def idle(self, cycles: int) -> None:
        self.fabric.advance(cycles * self.clk_period_ns)

    def read32(self, addr: int) -> int:
        self.idle(self.csr_access_cycles)
        block, offset = self._block(addr)
        if block is None:
            return 0
        regmap = self.maps[block]
        if offset == 0:
            return header_word(regmap)
        if offset == 4:
            index = BLOCK_ORDER.index(block)
            return (index + 1) << self.block_bits if index + 1 < len(BLOCK_ORDER) else 0
        hit = self.decode[block].get(offset)
        if hit is None:
            return 0
        reg, index = hit
        value = getattr(self, f"_read_{block}")(reg.name, index)
        if value is None:
            value = self.store.get((block, offset), 0)
        return value & 0xFFFFFFFF

    def write32(self, addr: int, value: int) -> None:
        if not 0 <= value < 1 << 32:
            raise ValueError(f"CSR write of {value!r}: not a 32-bit value")
        self.idle(self.csr_access_cycles)
        block, offset = self._block(addr)
        if block is None or offset in (0, 4):
            return
        hit = self.decode[block].get(offset)
        if hit is None:
            return
        reg, index = hit
        if reg.access == "RO":
            return
        if reg.fields:
            mask = 0
            for _, lsb, width, _ in reg.fields:
                mask |= ((1 << width) - 1) << lsb
            value &= mask
        old = self.store.get((block, offset), 0)
        self.store[(block, offset)] = value
        handler = getattr(self, f"_write_{block}_{reg.name}", None)
        if handler is not None:
            handler(index, value, old)

    def _block(self, addr):
        index, offset = addr >> self.block_bits, addr & ((1 << self.block_bits) - 1)
        if index >= len(BLOCK_ORDER) or addr & 3:
            return None, 0
        return BLOCK_ORDER[index], offset

    # ---- register helpers ----------------------------------------------------------------------

    def reg(self, block: str, name: str, index: int = 0) -> int:
        """The stored word of register ``name`` (element ``index``) of ``block``."""
        reg = self._by_name[block][name]
        if not 0 <= index < reg.count:
            raise IndexError(f"{block}.{name}[{index}] is out of range 0..{reg.count - 1}")
        return self.store.get((block, reg.offset + index * reg.stride), 0)

    def field(self, block: str, name: str, index: int, fname: str) -> int:
        lsb, width = self._fields[block, name][fname]
        return (self.reg(block, name, index) >> lsb) & ((1 << width) - 1)

    def rx_reg(self, name, q):
        return self.reg("rx", name, q)

    def rx_field(self, name, q, fname):
        return self.field("rx", name, q, fname)

    def rx_state(self, q) -> str:
        code = self.rx_field("QP_CTRL", q, "state")
        return {v: k for k, v in STATE_CODES.items()}.get(code, RESET)

    def rx_window(self, q) -> int:
        mpr_max = self.params["mpr_max"] // 128
        mpr = self.rx_field("QP_CTRL", q, "mpr")
        return 128 * (mpr_max if mpr == 0 or mpr > mpr_max else mpr)

    def tx_enabled(self, q) -> bool:
        return bool(self.reg("tx", "qp_ctrl", q) & 1)

    def sack_threshold(self, q) -> int:
        return self.field("reliability", "qp_rel_cfg", q, "sack_threshold")

    def probe_period_ns(self) -> float:
        return self.reg("reliability", "probe_period") * self.clk_period_ns

    @property
    def own_ip(self) -> int:
        return self.reg("rx", "OWN_IP")

    def fabric_src_ip(self, host) -> int | None:
        nic = host.nic.hw if host.nic is not None else None
        return nic.reg("tx", "src_ip") if nic is not None else None

    @property
    def own_mac(self) -> int:
        return self.reg("rx", "OWN_MAC_HI") << 32 | self.reg("rx", "OWN_MAC_LO")

    def frame_addresses(self, pkt) -> tuple[int | None, int, int]:
        """(IPv4 source, IPv4 destination, Ethernet destination) of a received
        frame: the sending NIC's and ours, or what a forged frame claims."""
        f = pkt.forged
        src = self.fabric_src_ip(pkt.src) if f is None or f.src_ip is None else f.src_ip
        dst = self.own_ip if f is None or f.dst_ip is None else f.dst_ip
        mac = self.own_mac if f is None or f.dst_mac is None else f.dst_mac
        return src, dst, mac

    def peer_frame_check(self, pkt) -> str | None:
        """RxPeerFilter's checks of an ACK/NAK or probe response, in its order:
        the counter of the first that fails, None if all pass."""
        q = pkt.dqpn
        src, dst, mac = self.frame_addresses(pkt)
        if q >= self.params["num_qps"]:
            return "peer_bad_qpn"
        if dst != self.own_ip:
            return "peer_not_for_us"
        if mac != self.own_mac:
            return "peer_bad_mac"
        if self.rx_state(q) != RTS:
            return "peer_qp_state"
        if src != self.rx_reg("QP_PEER_IP", q):
            return "peer_bad_source"
        if pkt.kind == ACK and pkt.sack_base != (pkt.cum_psn + 1) & PSN_MASK:
            return "peer_bad_sack"
        return None

    def pending_total(self) -> int:
        """Entries in use in RX's pending-completion table (``MAX_PENDING``, one
        for all QPs): the LAST packets accepted whose message is not complete."""
        return sum(len(qp.pending_last) for qp in self.qps if qp is not None)

    def mr_check(self, rkey: int, pd: int, lo: int, hi: int) -> str | None:
        """None if [lo, hi) is inside a valid, writable region named by
        ``rkey`` of protection domain ``pd``, else the RX counter that counts
        the refusal (the lowest-numbered region with the R_Key decides)."""
        for i in range(self.params["num_mrs"]):
            if self.rx_reg("MR_RKEY", i) != rkey:
                continue
            if self.rx_reg("MR_ACCESS", i) & 3 != MR_VALID | MR_REMOTE_WRITE:
                continue
            if self.rx_field("MR_ACCESS", i, "pd") != pd:
                return "bad_pd"
            base = self.rx_reg("MR_BASE_LO", i) | self.rx_reg("MR_BASE_HI", i) << 32
            if base <= lo and hi <= base + self.rx_reg("MR_LENGTH", i):
                return None
            return "bad_bounds"
        return "bad_rkey"

    # ---- reads with behaviour (None: the stored value) ------------------------------------------

    def _read_device_info(self, name, index):
        if name == "build_id":
            return self.build_id
        if name == "nic_version":
            from hw.nic.csr import NIC_VERSION

            return NIC_VERSION
        if name == "block_size":
            return 1 << self.block_bits
        if name == "addr_width":
            return 64  # the model's DMA addresses are whole 64-bit addresses
        if name in self.params:
            return self.params[name]
        return None

    def _read_tx(self, name, q):
        p = self.params
        qp = self.qps[q] if name.startswith("qp_") else None
        if name == "num_qps":
            return p["num_qps"]
        if name == "evs_per_qp":
            return p["evs_per_qp"]
        if name == "caps":
            return (p["data_width"] // 8 | (p["max_mtu"].bit_length() - 1) << 8
                    | (p["inflight_depth"].bit_length() - 1) << 12)
        if name == "status":
            ready_ns = p["num_qps"] * p["evs_per_qp"] * self.clk_period_ns
            return int(self.fabric.now - self.reset_time >= ready_ns)
        if name == "ev_entry":
            sel = self.reg("tx", "ev_select")
            qpn, i = sel >> 8 & 0xFFFF, sel & 0xFF
            if qpn < p["num_qps"] and i < p["evs_per_qp"]:
                value, state = self.tx_ev[qpn][i]
                return value | state << 16
            return 0
        if name == "qp_consumer":
            return self.tx_consumer[q]
        live = qp is not None and qp.state in (RTS, ERROR)
        if name == "qp_una_psn":
            return qp.una_psn if live else self.reg("tx", "qp_next_psn", q)
        if name == "qp_next_psn" and live:
            return (qp.sq_psn + qp.nxt_idx) & PSN_MASK
        if name == "qp_tx_packets":
            return qp.stats["tx_data"] if qp else 0
        if name == "qp_retx_packets":
            return qp.stats["tx_retx"] if qp else 0
        if name == "qp_max_wimm":
            return self.reg("tx", name, q) & 0xFFFF
        if name == "qp_wimm_outstanding":
            return qp.wimm_outstanding if qp else 0
        if name == "qp_status":
            if not live:
                return 0
            active = qp.seg_wr is not None and 0 < qp.seg_wr.sent_pkts < qp.seg_wr.npkts
            inflight = qp.nxt_idx - qp.una_idx
            return (int(active) | int(inflight >= qp.window_psns) << 1
                    | int(qp.evs.good_count() == 0) << 2
                    | int(qp.state == RTS and qp.wimm_blocked()) << 3
                    | (inflight & 0xFFFFFF) << 8)
        return None

    def _read_rx(self, name, index):
        p = self.params
        if name == "PARAMS":
            return ((p["num_qps"].bit_length() - 1) | p["num_mrs"] << 4
                    | (p["sack_bits"] // 32) << 16 | (p["mpr_max"] // 128) << 24)
        if name.startswith("CNT_"):
            return min(self.rx_cnt[name[4:].lower()], 0xFFFFFFFF)
        return None

    def _read_reliability(self, name, index):
        p = self.params
        if name == "params":
            return p["num_qps"] | p["evs_per_qp"] << 12 | p["window"] << 20
        if name == "timeout_unit":
            return round(1.024e-6 * p["clk_freq_hz"])
        if name.startswith("cnt_"):
            value = self.rel_cnt[name[4:]]
            if name == "cnt_floor_blocked":
                value = sum(t.floor_blocked for t in self.ev_tables)
            return min(value, 0xFFFFFFFF)
        if name == "irq_status":
            value = int(bool(self.ev_events)) | int(self.irq_completion) << 1
            self.irq_completion = False
            return value
        if name == "ev_event_count":
            return len(self.ev_events)
        if name == "ev_event_qpn":
            return self.ev_events[0][0] | 1 << 31 if self.ev_events else 0
        if name == "ev_event":
            if not self.ev_events:
                return 0
            qpn, i, old, new, drops = self.ev_events.pop(0)
            return i | old << 8 | new << 10 | 1 << 15 | min(drops, 0xFFFF) << 16
        if name == "ev":
            ev = self.ev_tables[index // p["evs_per_qp"]].evs[index % p["evs_per_qp"]]
            return ev.value | EV_CODES[ev.state] << 16
        qp = self.qps[index] if name in ("qp_ctrl", "una_psn", "nxt_psn", "qp_cc") else None
        if name == "qp_ctrl":
            return STATE_CODES[qp.state] if qp is not None and qp.state in (RTS, ERROR) else \
                STATE_CODES[self.rel_state[index]]
        if name in ("una_psn", "nxt_psn"):
            if qp is None or qp.state not in (RTS, ERROR) or qp.fresh:
                return 0
            return qp.una_psn if name == "una_psn" else (qp.sq_psn + qp.nxt_idx) & PSN_MASK
        if name == "qp_cc":
            window = qp.window_psns if qp is not None else p["window"]
            return min(window, 0xFFFF) | (min(qp.retries, 31) if qp else 0) << 16
        return None

    # ---- writes with behaviour -------------------------------------------------------------------

    def _write_tx_qp_ctrl(self, q, value, old):
        self.tx_halt[q] = False
        if value >> TX_CTRL_RESET_BIT & 1:
            self._tx_reset(q)
        if value & (1 << TX_CTRL_RESET_BIT | 1 << TX_CTRL_FLUSH_BIT):
            # reset and flush: TX's count of outstanding WRITE_WITH_IMMs to 0
            if self.qps[q] is not None:
                self.qps[q].wimm_outstanding = 0
            value &= ~(1 << TX_CTRL_RESET_BIT | 1 << TX_CTRL_FLUSH_BIT)  # read 0
            self.store[("tx", self.maps["tx"]["qp_ctrl"].addr(q))] = value
        if value & 1 and not old & 1:
            self._fetch(q)
            self.core.kick()  # retransmissions may be waiting

    def _write_tx_qp_doorbell(self, q, value, old):
        self._fetch(q)
        if self._rel_qp_state(q) == ERROR:
            # reliability sees the doorbell: what was posted since the flush, FLUSHED
            self._flush_unfetched(q, CqeStatus.FLUSHED, start=self.sq_flushed[q])

    def _write_tx_qp_max_wimm(self, q, value, old):
        self.core.kick()  # a QP waiting at its old bound may go

    def _write_tx_ev_entry(self, q_unused, value, old):
        sel = self.reg("tx", "ev_select")
        qpn, i = sel >> 8 & 0xFFFF, sel & 0xFF
        if qpn < self.params["num_qps"] and i < self.params["evs_per_qp"]:
            self.tx_ev[qpn][i] = (value & 0xFFFF, value >> 16 & 3)

    def _write_rx_QP_CTRL(self, q, value, old):
        if self.rx_state(q) in (RTR, RTS) and self.qps[q] is None:
            self._create_qp(q)

    def _write_rx_QP_ACK(self, q, value, old):
        if self.qps[q] is not None:
            self._apply_ack_cfg(self.qps[q])

    def _write_rx_QP_EPSN(self, q, value, old):
        self.recv_cq_pi[q] = 0
        if self.qps[q] is not None:
            self.qps[q].reset_responder(value)

    def _write_reliability_qp_ctrl(self, q, value, old):
        state = {v: k for k, v in STATE_CODES.items()}.get(value & 7)
        if state is None:
            return
        qp = self.qps[q]
        if state == RESET:
            if self._rel_qp_state(q) != RESET:  # qp_state_update: TX empties its ring
                self._tx_reset(q)
            self.sq_flushed[q] = self.reg("tx", "qp_doorbell", q) & 0xFFFF
            self._destroy_qp(q)
            self.send_cq_pi[q] = 0
            self.rel_state[q] = RESET
            self._tx_stop(q)
            if self.rx_state(q) in (RTR, RTS):
                self._create_qp(q)
        elif state == ERROR:
            self.rel_state[q] = ERROR
            if qp is not None and qp.state != ERROR:
                qp.modify(ERROR)  # every WQE not completed: FLUSHED
            self._tx_stop(q)
        elif state == RTS:
            if qp is None or qp.state != RTS:
                self._start(q)
        else:
            self.rel_state[q] = state

    def _write_reliability_ev(self, index, value, old):
        ne = self.params["evs_per_qp"]
        table = self.ev_tables[index // ne]
        ev = table.evs[index % ne]
        ev.value = value & 0xFFFF
        if value >> 31 & 1:
            state = EV_NAMES.get(value >> 16 & 3)
            if state in (GOOD, DENIED) and ev.state != state:
                ev.loss_run = 0
                table._transition(ev, state, "controller")
                self.core.kick()
        table.reindex()

    def _write_reliability_qp_rel_cfg(self, q, value, old):
        if self.qps[q] is not None and self.qps[q].state == RTS:
            self._apply_rel_cfg(self.qps[q])

    def _write_reliability_ev_loss_threshold(self, index, value, old):
        for qp in self.qps:
            if qp is not None and qp.state == RTS:
                self._apply_rel_cfg(qp)

    def _write_reliability_probe_period(self, index, value, old):
        for qp in self.qps:
            if qp is not None and qp.state == RTS and value and not old:
                qp._maybe_probe()

    # ---- QP lifecycle ----------------------------------------------------------------------------

    def _peer_host(self, ip: int, what: str):
        nic = self.fabric.nic_of_ip(ip)
        if nic is None:
            ips = [f"0x{n.own_ip:08x}" for n in self.fabric.nics]
            raise ValueError(f"model NIC: {what} 0x{ip:08x} is no NIC on the model fabric "
                             f"(their OWN_IPs: {ips}); set the peer's address first")
        return nic.host

    def _create_qp(self, q):
        """The QP as RX sees it in RTR: peer, its QPN, expected PSN."""
        cfg = QpConfig(mtu=self.params["max_mtu"], mpr=1, sack_bits=self.params["sack_bits"],
                       reo_wnd_ns=0.0, probe_interval_ns=1.0)
        qp = _HwQp(self, q, cfg, self.ev_tables[q])
        qp.state = RTR
        qp.peer = self._peer_host(self.rx_reg("QP_PEER_IP", q), "RX QP_PEER_IP")
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
        qp.cfg.ack_delay_ns = (ack >> 16) * self.clk_period_ns

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
        peer = self._peer_host(self.reg("tx", "qp_dst_ip", q), "TX qp_dst_ip")
        if peer is not qp.peer:
            raise ValueError(f"model NIC QP {q}: TX qp_dst_ip and RX QP_PEER_IP name different "
                             f"hosts; the model QP has one peer")
        cfg, p = qp.cfg, self.params
        mtu = self.reg("tx", "qp_mtu", q)
        cfg.mtu = mtu if mtu in (256, 512, 1024, 2048, 4096) and mtu <= p["max_mtu"] \
            else p["max_mtu"]
        self._apply_rel_cfg(qp)
        cfg.trim_nack = bool(self.rx_field("QP_CTRL", q, "trim_nack"))
        qp._mtu_wire = data_wire_len(cfg.mtu, False)
        mpr = (self.reg("tx", "qp_mpr", q) & 0xFF) or 1
        cwnd = self.reg("tx", "qp_cwnd", q) or p["window"]
        qp.window_psns = max(1, min(128 * mpr, p["window"], cwnd))
        qp.sq_psn = qp.una_psn = self.reg("tx", "qp_next_psn", q) & PSN_MASK
        qp.state = RTS
        self.rel_state[q] = RTS
        self._fetch(q)

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

    def recv_cq_room(self, q, held: int) -> bool:
        """RX's CQ check for a WITH_IMMEDIATE LAST packet: the ring is enabled and
        the CQEs written and not consumed plus ``held`` (completions accepted,
        not yet written) leave a slot for it."""
        ctrl = self.rx_reg("QP_CQ_CTRL", q)
        log2, enable = ctrl & 0x1F, ctrl >> 31
        used = (self.recv_cq_pi[q] + held - self.rx_reg("QP_CQ_CONS", q)) & 0xFFFF
        return bool(enable) and used < 1 << log2

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

    def _ev_event(self, q, ev, old, new):
        if old == GOOD and new == ASSUMED_BAD:
            self.rel_cnt["ev_to_bad"] += 1
        elif old == ASSUMED_BAD and new == GOOD:
            self.rel_cnt["ev_to_good"] += 1
        if len(self.ev_events) >= EV_EVENT_DEPTH:
            self.rel_cnt["events_lost"] += 1
            return
        self.ev_events.append((q, ev.index, EV_CODES[old], EV_CODES[new], ev.drops))


def _phase(pi: int, log2: int) -> int:
    """Flags byte: bit 7 = phase, 1 on the ring's first pass, toggling on each pass."""
    return (1 - ((pi >> log2) & 1)) << 7

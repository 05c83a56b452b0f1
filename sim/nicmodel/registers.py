"""The model NIC's CSR space: accesses, register helpers, and the reads and
writes that have behaviour (a mixin of ``ModelNic``)."""

from __future__ import annotations

from hw.nic.csr import header_word
from hw.protocol import PLANE_BITS, EvFormat, ev_formats, ev_hi_values, ev_hi_words
from hw.reliability.layouts import CqeStatus
from hw.rx.mr_table import rkey_index
from hw.rx.regs import PEER_ADDRESS_REGS as RX_PEER_ADDRESS
from hw.tx.regs import CTRL_FLUSH_BIT as TX_CTRL_FLUSH_BIT
from hw.tx.regs import CTRL_RESET_BIT as TX_CTRL_RESET_BIT
from hw.tx.regs import EV_PLANE_LSB
from hw.tx.regs import PEER_ADDRESS_REGS as TX_PEER_ADDRESS
from sim.model.ev import DENIED, GOOD
from sim.model.packet import (
    ACK,
    PSN_MASK,
)
from sim.model.qp import (
    ERROR,
    RESET,
    RTR,
    RTS,
)

from .common import (
    EV_CODES,
    EV_NAMES,
    MR_REMOTE_WRITE,
    MR_VALID,
    STATE_CODES,
)


class RegisterBehaviour:
    """CSR accesses and the registers with behaviour (``ModelNic``'s mixin)."""

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
            index = self.block_order.index(block)
            return (index + 1) << self.block_bits if index + 1 < len(self.block_order) else 0
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
        self._apply_write(block, offset, value)

    def _apply_write(self, block: str, offset: int, value: int) -> None:
        """A write decoded to ``block``'s word at ``offset``: stored (masked to the
        register's fields; a read-only one ignores it) and acted on."""
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
        if index >= len(self.block_order) or addr & 3:
            return None, 0
        return self.block_order[index], offset

    # ---- register helpers ----------------------------------------------------------------------

    def reg(self, block: str, name: str, index: int = 0) -> int:
        """The stored word of register ``name`` (element ``index``) of ``block``."""
        reg = self._by_name[block][name]
        if not 0 <= index < reg.count:
            raise IndexError(f"{block}.{name}[{index}] is out of range 0..{reg.count - 1}")
        return self.store.get((block, reg.offset + index * reg.stride), 0)

    def pack(self, block: str, name: str, **fields: int) -> int:
        """A register's word with ``fields`` at their places in the register map
        (the rest 0); a value wider than its field raises ValueError."""
        word = 0
        for fname, value in fields.items():
            lsb, width = self._fields[block, name][fname]
            if not 0 <= value < (1 << width):
                raise ValueError(f"{block}.{name}.{fname} is {width} bits, not {value!r}")
            word |= value << lsb
        return word

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

    def words_of(self, block, name, count=4, index=None):
        """The value of ``count`` 32-bit words, the lowest first: register
        ``name``'s elements 0.. (``index`` None), or the registers
        ``name.format(i)`` of element ``index``."""
        if index is None:
            return sum(self.reg(block, name, i) << 32 * i for i in range(count))
        return sum(self.reg(block, name.format(i), index) << 32 * i for i in range(1, count))

    def own_address(self, v6: bool = False) -> int:
        """The NIC's own address of a family (RX ``OWN_IP`` or ``OWN_IP6``)."""
        return self.words_of("rx", "OWN_IP6") if v6 else self.own_ip

    def _peer(self, block, regs, q) -> tuple[bool, int]:
        """(over IPv6, address) of QP ``q``'s peer in ``block``'s registers
        ``regs`` (the block's ``PEER_ADDRESS_REGS``)."""
        low, high, family = regs
        if not self.params.get("ipv6"):
            return False, self.reg(block, low, q)
        v6 = bool(self.reg(block, family, q) & 1)
        value = self.reg(block, low, q) | (self.words_of(block, high, index=q) if v6 else 0)
        return v6, value

    def rx_peer(self, q) -> tuple[bool, int]:
        """RX's peer of QP ``q``: (over IPv6, ``QP_PEER_IP``, and ``QP_PEER_IP6_*``)."""
        return self._peer("rx", RX_PEER_ADDRESS, q)

    def tx_peer(self, q) -> tuple[bool, int]:
        """TX's destination of QP ``q``: (over IPv6, ``qp_dst_ip``, and ``qp_dst_ip6_*``)."""
        return self._peer("tx", TX_PEER_ADDRESS, q)

    def fabric_src_ip(self, host, v6: bool = False) -> int | None:
        nic = host.nic.hw if host.nic is not None else None
        if nic is None:
            return None
        return nic.words_of("tx", "src_ip6") if v6 else nic.reg("tx", "src_ip")

    @property
    def own_mac(self) -> int:
        return self.reg("rx", "OWN_MAC_HI") << 32 | self.reg("rx", "OWN_MAC_LO")

    def frame_addresses(self, pkt) -> tuple[int | None, int, int, bool]:
        """(IP source, IP destination, Ethernet destination, over IPv6) of a
        received frame: the sending NIC's and ours, or what a forged frame
        claims. An honest frame goes over the family its QP is bound over
        (RX ``QP_PEER_V6``), a forged one over IPv4."""
        f = pkt.forged
        v6 = f is None and pkt.dqpn < self.params["num_qps"] and self.rx_peer(pkt.dqpn)[0]
        src = self.fabric_src_ip(pkt.src, v6) if f is None or f.src_ip is None else f.src_ip
        dst = self.own_address(v6) if f is None or f.dst_ip is None else f.dst_ip
        mac = self.own_mac if f is None or f.dst_mac is None else f.dst_mac
        return src, dst, mac, v6

    def from_peer(self, pkt) -> bool:
        """The frame comes from QP ``pkt.dqpn``'s peer, over the peer's family."""
        src, _, _, v6 = self.frame_addresses(pkt)
        return (v6, src) == self.rx_peer(pkt.dqpn)

    def for_us(self, pkt) -> bool:
        """The frame is for our address of its family."""
        _, dst, _, v6 = self.frame_addresses(pkt)
        return dst == self.own_address(v6)

    def peer_frame_check(self, pkt) -> str | None:
        """RxPeerFilter's checks of an ACK/NAK or probe response, in its order:
        the counter of the first that fails, None if all pass."""
        q = pkt.dqpn
        if q >= self.params["num_qps"]:
            return "peer_bad_qpn"
        if not self.for_us(pkt):
            return "peer_not_for_us"
        if self.frame_addresses(pkt)[2] != self.own_mac:
            return "peer_bad_mac"
        if self.rx_state(q) != RTS:
            return "peer_qp_state"
        if not self.from_peer(pkt):
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
        the refusal. The R_Key names its entry (``rkey_index``), which must
        exist and hold that whole R_Key."""
        i = rkey_index(rkey)
        if (i >= self.params["num_mrs"] or self.rx_reg("MR_RKEY", i) != rkey
                or self.rx_reg("MR_ACCESS", i) & 3 != MR_VALID | MR_REMOTE_WRITE):
            return "bad_rkey"
        if self.rx_field("MR_ACCESS", i, "pd") != pd:
            return "bad_pd"
        base = self.rx_reg("MR_BASE_LO", i) | self.rx_reg("MR_BASE_HI", i) << 32
        if base <= lo and hi <= base + self.rx_reg("MR_LENGTH", i):
            return None
        return "bad_bounds"

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
        if name == "num_planes":
            planes = self.params.get("num_planes", 1)
            return planes if planes > 1 else 0  # 0: one plane, as NicCore reads it
        if name == "caps":
            from hw.nic.csr import NIC_CAPABILITIES, caps_word

            return caps_word(NIC_CAPABILITIES)
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
            formats = ev_formats(p.get("ev_width", 16))
            return (p["data_width"] // 8 | (p["max_mtu"].bit_length() - 1) << 8
                    | (p["inflight_depth"].bit_length() - 1) << 12
                    | int(p.get("ipv6", False)) << 16 | int(EvFormat.STEV in formats) << 17
                    | int(EvFormat.SRV6 in formats) << 18)
        if name == "status":
            ready_ns = p["num_qps"] * p["evs_per_qp"] * self.clk_period_ns
            return int(self.fabric.now - self.reset_time >= ready_ns)
        if name == "ev_entry":
            sel = self.reg("tx", "ev_select")
            qpn, i = sel >> 8 & 0xFFFF, sel & 0xFF
            if qpn < p["num_qps"] and i < p["evs_per_qp"]:
                value, state = self.tx_ev[qpn][i]
                plane = self.ev_tables[qpn].evs[i].plane if self.fabric.planes > 1 else 0
                return value & 0xFFFF | state << 16 | plane << EV_PLANE_LSB
            return 0
        if name == "ev_value_hi":  # the selected entry's bits above 15
            sel = self.reg("tx", "ev_select")
            qpn, i = sel >> 8 & 0xFFFF, sel & 0xFF
            if qpn < p["num_qps"] and i < p["evs_per_qp"]:
                return self.tx_ev[qpn][i][0] >> 16 + 32 * q & 0xFFFFFFFF
            return 0
        if name == "qp_consumer":
            return self.tx_consumer[q]
        live = qp is not None and qp.state in (RTS, ERROR)
        if name == "qp_una_psn":
            return qp.una_psn if live else self.reg("tx", "qp_next_psn", q)
        if name == "qp_next_psn" and live:
            return (qp.sq_psn + qp.nxt_idx) & PSN_MASK
        if name == "qp_cwnd" and live and self.field("reliability", "nscc_ctrl", 0, "enabled"):
            # NSCC drives TX's window: its bytes // mtu_wire within 1..window (NsccEngine)
            return max(1, min(int(qp.cc.cwnd) // qp.cc.mtu, p["window"]))
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
            return (int(active) | int(qp.window_full() and not qp.wimm_blocked()) << 1
                    | int(qp.evs.good_count() == 0) << 2
                    | int(qp.state == RTS and qp.wimm_blocked()) << 3
                    | (inflight & 0xFFFFFF) << 8)
        return None

    def _read_rx(self, name, index):
        p = self.params
        if name == "PARAMS":
            return self.maps["rx"]["PARAMS"].pack(
                log2_qps=p["num_qps"].bit_length() - 1, mrs=p["num_mrs"],
                sack_words=p["sack_bits"] // 32, mpr_max=p["mpr_max"] // 128)
        if name.startswith("CNT_"):
            return min(self.rx_cnt[name[4:].lower()], 0xFFFFFFFF)
        return None

    def _read_reliability(self, name, index):
        p = self.params
        if name == "params":
            return self.maps["reliability"]["params"].pack(
                num_qps=p["num_qps"], evs_per_qp=p["evs_per_qp"], window=p["window"])
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
        if name == "ev_event_rtt":
            return self.ev_events[0][5] | 1 << 31 if self.ev_events else 0
        if name == "ev_event":
            if not self.ev_events:
                return 0
            qpn, i, old, new, drops, _ = self.ev_events.pop(0)
            return i | old << 8 | new << 10 | 1 << 15 | min(drops, 0xFFFF) << 16
        if name == "ev":
            ev = self.ev_tables[index // p["evs_per_qp"]].evs[index % p["evs_per_qp"]]
            return ev.value & 0xFFFF | EV_CODES[ev.state] << 16
        qp = self.qps[index] if name in ("qp_ctrl", "una_psn", "nxt_psn", "qp_cc") else None
        if name == "qp_ctrl":
            return STATE_CODES[qp.state] if qp is not None and qp.state in (RTS, ERROR) else \
                STATE_CODES[self.rel_state[index]]
        if name in ("una_psn", "nxt_psn"):
            if qp is None or qp.state not in (RTS, ERROR) or qp.fresh:
                return 0
            return qp.una_psn if name == "una_psn" else (qp.sq_psn + qp.nxt_idx) & PSN_MASK
        if name == "qp_cc":
            window = min(qp.window_psns, qp.cwnd_psns) if qp is not None else p["window"]
            return min(window, 0xFFFF) | (min(qp.retries, 31) if qp else 0) << 16
        return None

    def _read_planes(self, name, index):
        """The planes block of a model NIC with planes: every link reads up and
        no link ever changes (the model has no links to lose); on a fabric of
        planes, each plane's frames sent and received are counted (on a fabric
        of one plane, none: the planes are nominal)."""
        if name == "link_up":
            return (1 << self.params["num_planes"]) - 1
        if name in ("tx_frames", "rx_frames") and index < len(self.plane_frames[name]):
            return self.plane_frames[name][index] & 0xFFFFFFFF
        return 0

    def _read_ev_gen(self, name, index):
        if name == "gen_status":
            return self.ev_gen_status
        if name == "gen_start":
            return 0  # write only
        return None

    # ---- writes with behaviour -------------------------------------------------------------------

    def _internal_write(self, block, name, index, value):
        """A write NicCore makes on its own (an injected CSR write): decoded and
        acted on as the host's, without bus time."""
        self._apply_write(block, self.maps[block][name].addr(index), value)

    def _write_ev_gen_gen_start(self, index_unused, value, old):
        """EvGenBlock's run, at once (the gateware's takes hundreds of cycles,
        which the model does not count): the EVs found GOOD, the rest DENIED,
        in TX's and reliability's tables; a QP out of range: nothing."""
        from hw.nic.ev_load import auto_params, deposit
        from sim.model.ev import generated_evs

        ne = self.params["evs_per_qp"]
        q = self.field("ev_gen", "gen_qp", 0, "qpn")
        if q >= self.params["num_qps"]:
            self.ev_gen_status = 1 << 3  # bad_qp
            return
        width = self.params.get("ev_width", 16)
        bits, template = 0xFFFF, 0
        if width > 16:  # the EV bits a value fills, 0 read as 0xFFFF; the others'
            words = [self.reg("ev_gen", name, k) for name in ("gen_bits", "gen_template")
                     for k in (0, 1)]
            bits = (words[0] | words[1] << 32) & ((1 << width) - 1) or 0xFFFF
            template = words[2] | words[3] << 32
        if value & 1:
            params = auto_params(q, ne, bits, template)
        else:
            f = {n: self.field("ev_gen", reg, 0, n) for reg, names in (
                ("gen_range", ("min", "max")), ("gen_init", ("init", "mask")),
                ("gen_shape", ("width", "count"))) for n in names}
            params = dict(width=f["width"], init=f["init"], min_ev=f["min"], max_ev=f["max"],
                          mask=f["mask"], count=f["count"])
        try:
            if not 1 <= params["width"] <= 16 or not 1 <= params["count"] <= ne:
                raise ValueError("width or count out of range")
            values = [v for v, _ in generated_evs(**params)]
        except ValueError:
            values = None
        if values is not None and width > 16:  # each value deposited in the template
            values = [deposit(v, bits, template) & ((1 << width) - 1) for v in values]
        for i in range(ne):
            good = values is not None and i < len(values)
            value, state = (values[i] if good else 0), EV_CODES[GOOD if good else DENIED]
            self._internal_write("tx", "ev_select", 0,
                                 self.pack("tx", "ev_select", qpn=q, ev_index=i))
            for k, word in enumerate(ev_hi_values(value, width)):
                self._internal_write("tx", "ev_value_hi", k, word)
            self._internal_write("tx", "ev_entry", 0,
                                 self.pack("tx", "ev_entry", value=value & 0xFFFF, state=state))
            for k, word in enumerate(ev_hi_values(value, width)):
                self._internal_write("reliability", "ev_value_hi", k, word)
            self._internal_write("reliability", "ev", q * ne + i,
                                 self.pack("reliability", "ev", value=value & 0xFFFF,
                                           state=state, set_state=1))
        self.ev_gen_status = 1 << 1 if values is None else len(values) << 8


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
            self.tx_ev[qpn][i] = (value & 0xFFFF | self._take_ev_hi("tx"), value >> 16 & 3)
            if self.fabric.planes > 1:  # the EV's packets leave on its plane's port
                table = self.ev_tables[qpn]
                table.evs[i].plane = value >> EV_PLANE_LSB & ((1 << PLANE_BITS) - 1)
                table._rebuild()

    def _write_rx_QP_CTRL(self, q, value, old):
        if self.rx_state(q) in (RTR, RTS) and self.qps[q] is None:
            self._create_qp(q)

    def _write_rx_QP_ACK(self, q, value, old):
        if self.qps[q] is not None:
            self._apply_ack_cfg(self.qps[q])

    def _write_rx_QP_PEER_QPN(self, q, value, old):
        """RX reads ``QP_PEER_QPN`` when it sends an ACK or probe answer: a write
        after the QP left RESET applies to the next one."""
        if self.qps[q] is not None:
            self.qps[q].dqpn = value & 0xFFFFFF

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
        ev.value = value & 0xFFFF | self._take_ev_hi("reliability")
        if value >> 31 & 1:
            state = EV_NAMES.get(value >> 16 & 3)
            if state in (GOOD, DENIED) and ev.state != state:
                ev.loss_run = 0
                table._transition(ev, state, "controller")
                self.core.kick()
        table.reindex()

    def _take_ev_hi(self, block) -> int:
        """The EV bits above 15 staged in ``block``'s ``ev_value_hi``, cleared:
        an entry write takes them (so a 16-bit writer stores zeros there)."""
        width = self.params.get("ev_width", 16)
        value = 0
        for k in range(ev_hi_words(width)):
            value |= self.reg(block, "ev_value_hi", k) << 16 + 32 * k
            self._internal_write(block, "ev_value_hi", k, 0)
        return value & ((1 << width) - 1)

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

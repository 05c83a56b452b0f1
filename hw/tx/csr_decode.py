"""The TX register block's decode (hw/tx/regs.py): CSR writes into
registered strobes, the global registers, and the CSR read path."""

import operator
from functools import reduce

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..bits import one_hot_select
from ..csr import CSRBusSignature, RegisteredWrites, block_decode
from ..protocol import PLANE_BITS, PSN_BITS, EvFormat, ev_formats, ev_hi_words
from .qp_settings import QpWriteSignature, cfg_lanes, settings_lane
from .regs import (
    CTRL_FLUSH_BIT,
    CTRL_RESET_BIT,
    EV_PLANE_LSB,
    QP_BASE,
    QP_STRIDE,
    TX_TYPE_ID,
    TX_VERSION,
    G,
    Q,
)

__all__ = ["TxCsrDecode", "READ_GROUP"]

# CSR read words per registered group of the read mux (an AND-OR of 8 words
# is two LUT levels)
READ_GROUP = 8


class TxCsrDecode(wiring.Component):
    """The TX register block's decode, for the ``Sequencer``.

    Interface: ``csr`` (the CSR bus, ``regs.tx_register_map``); ``ready``
    (the sequencer's INIT is done) and ``init_q`` (the settings row INIT
    writes); ``qp_w`` (``QpWriteSignature``: per-QP writes as strobes);
    ``qsel`` (the QP of ``csr.addr``, combinational, for the read ports'
    addresses); ``src_mac``, ``src_ip``; the EV table's CSR port (``ev_sel``,
    ``ev_we``, ``ev_value``, ``ev_state``, ``ev_plane`` out, ``ev_r_value``/
    ``ev_r_state``/``ev_r_plane`` in); and the values that reads return
    (per-QP flags and, without ``ring_rows``, ring indices one per QP,
    lowest QP lowest; with ``ring_rows`` the indices (``pi``, ``ci``) are the
    ``RingRows``' read port's data at ``qsel`` of the cycle before;
    ``psn_next``, ``psn_una``, ``psn_inflight`` (``PsnTable``'s CSR port),
    ``cfg_row`` and ``counters`` the read ports' data at ``qsel`` of the
    cycle before; ``wimm_count``, likewise).

    Writes: a per-QP write is decoded in two registered steps and applied two
    cycles after ``w_stb`` (the bridge's next strobe comes 3 cycles after it
    at the earliest): at ``w_stb`` the address's pieces are registered (a QP
    write, which register, which QP, the data), the cycle after they become
    one-hot strobes (one per settings lane and, at ``flop_rows``, per lane
    and row; CTRL, NEXT_PSN, DOORBELL), so every enable is a flip-flop and
    no decode of the address lies in front of a strobe
    (docs/timing.md#tx-sequencer). Until ``ready`` the same registers carry
    INIT's writes of the defaults, all lanes of row ``init_q``, with ``data``
    zero. An MTU that is not a power of two from 256 to ``max_mtu`` writes
    nothing. The global registers (SRC_MAC, SRC_IP, EV_SELECT) are written
    one cycle after ``w_stb`` (``hw.csr.RegisteredWrites``); EV_ENTRY goes
    to the EV table at ``w_stb`` (``ev_we``; the table takes the state change
    1 to 3 cycles later and it binds the packets chosen 3 cycles after that,
    hw/tx/ev.py).

    Reads: the register is decoded with ``r_stb`` into one-hot selects (and
    a QP's STATUS word taken then), the RAM read ports give their data the
    cycle after, and the AND-OR of the selected values is taken in two
    registered steps (per group of ``READ_GROUP`` words, then the groups'
    OR): a read answers 3 cycles after ``r_stb`` (``CSR_READ_LATENCY``). A
    write strobed the cycle before ``r_stb`` has landed by then, so reads
    need no bypass. The EV table's entry at ``ev_sel`` is registered every
    cycle: a read of EV_ENTRY sees the entry as it was the cycle before
    ``r_stb``.

    Throughput: one CSR access per cycle is decoded; the sequencer relies on
    the bridge's 3 cycles between strobes for the per-QP writes.
    """

    def __init__(self, *, num_qps, evs_per_qp, csr_addr_width, max_mtu, data_width,
                 inflight_depth, addr_width, flop_rows, wimm_count_width, ipv6=False,
                 ev_width=16, ring_rows=False):
        self.num_qps, self.evs_per_qp = num_qps, evs_per_qp
        self.ipv6, self.ev_width = ipv6, ev_width
        self.lanes = cfg_lanes(ipv6)
        self.max_mtu, self.data_width = max_mtu, data_width
        self.inflight_depth, self.addr_width = inflight_depth, addr_width
        self.flop_rows, self.ring_rows = flop_rows, ring_rows
        ring_w = 16 if ring_rows else 16 * num_qps
        qb = max(1, (num_qps - 1).bit_length())
        eb = max(1, (evs_per_qp - 1).bit_length())
        self.qp_bits, self.ev_bits = qb, eb
        super().__init__({
            "csr": In(CSRBusSignature(csr_addr_width)),
            "ready": In(1),
            "init_q": In(range(num_qps + 1)),
            "qp_w": Out(QpWriteSignature(num_qps, flop_rows, ipv6)),
            "qsel": Out(qb),
            "src_mac": Out(48),
            "src_ip": Out(32),
            **({"src_ip6": Out(128)} if ipv6 else {}),
            "ev_sel": Out(qb + eb),
            "ev_we": Out(1),
            "ev_value": Out(ev_width),
            "ev_state": Out(2),
            "ev_plane": Out(PLANE_BITS),
            "ev_r_value": In(ev_width),
            "ev_r_state": In(2),
            "ev_r_plane": In(PLANE_BITS),
            # read values
            "enable": In(num_qps),
            "wqe_active": In(num_qps),
            "win_blocked": In(num_qps),
            "ev_blocked": In(num_qps),
            "wimm_wait": In(num_qps),
            "psn_next": In(PSN_BITS),
            "psn_una": In(PSN_BITS),
            "psn_inflight": In(PSN_BITS),
            "pi": In(ring_w),
            "ci": In(ring_w),
            "cfg_row": In(32 * len(self.lanes)),
            "counters": In(64),
            "wimm_count": In(wimm_count_width),
            "retx_ignored": In(32),
            "retx_no_ev": In(32),
        })

    def elaborate(self, platform):
        m = Module()
        nq, ne = self.num_qps, self.evs_per_qp
        qb, eb = self.qp_bits, self.ev_bits
        nl = len(self.lanes)
        max_mtu_log2 = self.max_mtu.bit_length() - 1
        mtu_shift_bits = max(1, (max_mtu_log2 - 8).bit_length())
        csr, qw = self.csr, self.qp_w

        def per_qp(flat, width):
            return Array(flat[width * i : width * (i + 1)] for i in range(nq))

        if not self.ring_rows:
            pi, ci = per_qp(self.pi, 16), per_qp(self.ci, 16)

        # (the QP blocks are aligned up to 32 QPs: no carry chain in front of
        # the write strobes; docs/timing.md#tx-sequencer)
        in_qp, qsel = block_decode(csr.addr, QP_BASE, QP_STRIDE, nq)
        reg = csr.addr[: QP_STRIDE.bit_length() - 1]
        m.d.comb += [
            self.qsel.eq(qsel),
            self.ev_value[:16].eq(csr.w_data[:16]),  # taken with ev_we
            self.ev_state.eq(csr.w_data[16:18]),
            self.ev_plane.eq(csr.w_data[EV_PLANE_LSB : EV_PLANE_LSB + PLANE_BITS]),
        ]

        # ---- per-QP writes, step 1, at w_stb: the address's pieces
        valid_mtu = Signal()  # w_data is an MTU the block takes
        mtu_shift_d = Signal(3)
        for lg in range(8, max_mtu_log2 + 1):
            with m.If(csr.w_data == (1 << lg)):
                m.d.comb += [valid_mtu.eq(1), mtu_shift_d.eq(lg - 8)]
        d_qp_w = Signal()  # a write to a QP's block, after INIT
        d_lane = Signal(nl)  # the register is this settings lane
        d_ctrl, d_next_psn, d_doorbell, d_unpark = Signal(), Signal(), Signal(), Signal()
        d_q = Signal(qb)
        d_ready = Signal()
        d_init_q = Signal.like(self.init_q)
        d_data = Signal(32)
        d_mtu_shift = Signal(3)
        m.d.sync += [
            d_qp_w.eq(csr.w_stb & in_qp & self.ready),
            d_lane.eq(Cat(*[(reg == off) & (valid_mtu | (name != "mtu_shift"))
                            for name, off, _ in self.lanes])),
            d_ctrl.eq(reg == Q.CTRL),
            d_next_psn.eq(reg == Q.NEXT_PSN),
            d_doorbell.eq(reg == Q.DOORBELL),
            d_unpark.eq((reg == Q.MPR) | (reg == Q.CWND) | (reg == Q.CTRL) | (reg == Q.NEXT_PSN)),
            d_q.eq(qsel),
            d_ready.eq(self.ready),
            d_init_q.eq(self.init_q),
            d_data.eq(csr.w_data),
            d_mtu_shift.eq(mtu_shift_d),
        ]

        # ---- step 2: the strobes
        qw_lanes = Signal(nl)
        # with flip-flop rows: per row, its lanes' write strobes (the lane's
        # and the QP's, or INIT's row), registered like qw_lanes, so that
        # each lane of each row loads under a flip-flop and not a LUT of qw_q
        # and qw_lanes (docs/timing.md#tx-sequencer)
        qw_rows = [Signal(nl, name=f"qw_row{r}") for r in range(nq if self.flop_rows else 0)]
        qw_init = Signal()
        qw_q = Signal(qb)
        qw_data = Signal(32)
        mtu_shift_w = Signal(3)
        qw_ctrl = Signal()
        qw_doorbell = Signal()
        qw_unpark = Signal()
        qw_next_psn = Signal(nq)
        qw_psn_write = Signal()
        qw_reset = Signal(nq)
        qw_flush = Signal(nq)
        lane_hit = d_lane & d_qp_w.replicate(nl)
        m.d.sync += [
            qw_lanes.eq(Mux(d_ready, lane_hit, (1 << nl) - 1)),
            qw_init.eq(~d_ready),
            qw_q.eq(Mux(d_ready, d_q, d_init_q)),
            *[qw_row.eq(Mux(d_ready, lane_hit & (d_q == r).replicate(nl),
                            (d_init_q == r).replicate(nl)))
              for r, qw_row in enumerate(qw_rows)],
            qw_data.eq(Mux(d_ready, d_data, 0)),
            mtu_shift_w.eq(d_mtu_shift),
            qw_ctrl.eq(d_qp_w & d_ctrl),
            qw_next_psn.eq(Cat(*[d_qp_w & d_next_psn & (d_q == i) for i in range(nq)])),
            qw_psn_write.eq(~d_ready | (d_qp_w & d_next_psn)),
            qw_reset.eq(Cat(*[d_qp_w & d_ctrl & d_data[CTRL_RESET_BIT] & (d_q == i)
                              for i in range(nq)])),
            qw_flush.eq(Cat(*[d_qp_w & d_ctrl & d_data[CTRL_FLUSH_BIT] & (d_q == i)
                              for i in range(nq)])),
            qw_doorbell.eq(d_qp_w & d_doorbell),
            qw_unpark.eq(d_qp_w & d_unpark),
        ]
        m.d.comb += [
            qw.q.eq(qw_q), qw.data.eq(qw_data), qw.lanes.eq(qw_lanes), qw.init.eq(qw_init),
            qw.mtu_shift.eq(mtu_shift_w), qw.ctrl.eq(qw_ctrl), qw.doorbell.eq(qw_doorbell),
            qw.unpark.eq(qw_unpark), qw.next_psn.eq(qw_next_psn), qw.psn_write.eq(qw_psn_write),
            qw.reset.eq(qw_reset),
            qw.flush.eq(qw_flush),
        ]
        if qw_rows:
            m.d.comb += qw.rows.eq(Cat(*qw_rows))

        # ---- global registers: one-hot strobes and the data registered at
        # w_stb, applied the cycle after, so that their enables are flip-flops
        src_mac = Signal(48)
        src_ip = Signal(32)
        src_ip6 = Signal(128)
        ev_select = Signal(qb + eb)
        ip6_words = [(f"ip6_{i}", G.SRC_IP6 + 4 * i) for i in range(4 if self.ipv6 else 0)]
        hi_words = [(f"ev_hi_{i}", G.EV_VALUE_HI + 4 * i)
                    for i in range(ev_hi_words(self.ev_width))]
        gw = RegisteredWrites(m, csr, {
            key: (csr.addr == offset, None) for key, offset in (
                ("mac_lo", G.SRC_MAC_LO), ("mac_hi", G.SRC_MAC_HI), ("ip", G.SRC_IP),
                ("ev_select", G.EV_SELECT), *ip6_words, *hi_words)}, name="gw")
        m.d.comb += self.ev_we.eq(csr.w_stb & (csr.addr == G.EV_ENTRY))
        with m.If(gw.stb["mac_lo"]):
            m.d.sync += src_mac[:32].eq(gw.data)
        with m.If(gw.stb["mac_hi"]):
            m.d.sync += src_mac[32:].eq(gw.data[:16])
        with m.If(gw.stb["ip"]):
            m.d.sync += src_ip.eq(gw.data)
        with m.If(gw.stb["ev_select"]):
            m.d.sync += ev_select.eq(Cat(gw.data[:eb], gw.data[8 : 8 + qb]))
        for i, (key, _) in enumerate(ip6_words):
            with m.If(gw.stb[key]):
                m.d.sync += src_ip6[32 * i : 32 * (i + 1)].eq(gw.data)
        if hi_words:
            # an EV's bits above 15, staged for the next EV_ENTRY write, which
            # takes them and clears them (a 16-bit writer stores zeros there)
            ev_hi = Signal(self.ev_width - 16)
            m.d.comb += self.ev_value[16:].eq(ev_hi)
            with m.If(self.ev_we):
                m.d.sync += ev_hi.eq(0)
            for i, (key, _) in enumerate(hi_words):
                with m.If(gw.stb[key]):
                    m.d.sync += ev_hi[32 * i : 32 * (i + 1)].eq(gw.data)
        m.d.comb += [self.src_mac.eq(src_mac), self.src_ip.eq(src_ip), self.ev_sel.eq(ev_select)]
        if self.ipv6:
            m.d.comb += self.src_ip6.eq(src_ip6)

        # ---- reads
        ev_entry = Signal(EV_PLANE_LSB + PLANE_BITS)
        r_ev_hi = Signal(self.ev_width - 16)  # the entry's bits above 15, for EV_VALUE_HI
        if hi_words:
            m.d.sync += r_ev_hi.eq(self.ev_r_value[16:])
        m.d.sync += ev_entry.eq(Cat(self.ev_r_value[:16], self.ev_r_state,
                                    Const(0, EV_PLANE_LSB - 18), self.ev_r_plane))
        r_q = Signal(qb)
        r_flags = Signal(4)
        with m.If(csr.r_stb):
            m.d.sync += [
                r_q.eq(qsel),
                r_flags.eq(Cat(
                    self.wqe_active.bit_select(qsel, 1),
                    self.win_blocked.bit_select(qsel, 1),
                    self.ev_blocked.bit_select(qsel, 1),
                    self.wimm_wait.bit_select(qsel, 1),
                )),
            ]
        # the PSNs in flight: the PSN table's read port, at qsel of r_stb's cycle
        r_status = Cat(r_flags, Const(0, 4), self.psn_inflight)
        reads = []  # (decode of csr.addr at r_stb, value the cycle after)
        for name, off, _ in self.lanes:
            value = settings_lane(self.cfg_row, name)
            if name == "sq_base_hi":
                value = value & ((1 << (self.addr_width - 32)) - 1)  # the bits the SQ base keeps
            if name == "mtu_shift":
                value = Const(256, 13) << value[:mtu_shift_bits]
            reads.append((in_qp & (reg == off), value))
        reads += [
            (in_qp & (reg == Q.CTRL), self.enable.bit_select(r_q, 1)),
            (in_qp & (reg == Q.NEXT_PSN), self.psn_next),
            (in_qp & (reg == Q.UNA_PSN), self.psn_una),
            (in_qp & (reg == Q.DOORBELL), self.pi if self.ring_rows else pi[r_q]),
            (in_qp & (reg == Q.CONSUMER), self.ci if self.ring_rows else ci[r_q]),
            (in_qp & (reg == Q.TX_PACKETS), self.counters[:32]),
            (in_qp & (reg == Q.RETX_PACKETS), self.counters[32:]),
            (in_qp & (reg == Q.STATUS), r_status),
            (in_qp & (reg == Q.WIMM_OUTSTANDING), self.wimm_count),
        ]
        db = self.inflight_depth.bit_length() - 1
        formats = ev_formats(self.ev_width)
        caps = ((self.data_width // 8) | (max_mtu_log2 << 8) | (db << 12) | (self.ipv6 << 16)
                | ((EvFormat.STEV in formats) << 17) | ((EvFormat.SRV6 in formats) << 18))
        reads += [
            (csr.addr == off, value)
            for off, value in (
                (G.ID, Const((TX_TYPE_ID << 16) | TX_VERSION, 32)),
                (G.STATUS, self.ready),
                (G.NUM_QPS, Const(nq, 32)),
                (G.EVS_PER_QP, Const(ne, 32)),
                (G.CAPS, Const(caps, 32)),
                (G.SRC_MAC_LO, src_mac[:32]),
                (G.SRC_MAC_HI, src_mac[32:]),
                (G.SRC_IP, src_ip),
                (G.EV_SELECT, Cat(ev_select[:eb], Const(0, 8 - eb), ev_select[eb:])),
                (G.EV_ENTRY, ev_entry),
                (G.RETX_IGNORED, self.retx_ignored),
                (G.RETX_NO_EV, self.retx_no_ev),
                *[(off, src_ip6[32 * i : 32 * (i + 1)]) for i, (_, off) in enumerate(ip6_words)],
                *[(off, r_ev_hi[32 * i : 32 * (i + 1)]) for i, (_, off) in enumerate(hi_words)],
            )
        ]
        r_sel = Signal(len(reads))
        with m.If(csr.r_stb):
            m.d.sync += r_sel.eq(Cat(*[hit for hit, _ in reads]))
        # The AND-OR of the selected values in two registered steps: one per
        # group of READ_GROUP words, then the OR of the groups (one LUT). One
        # step (3-4 LUT levels from r_sel, whose bits fan out over all 32
        # bits) is too slow (docs/timing.md#tx-sequencer).
        groups = []
        for g in range(0, len(reads), READ_GROUP):
            part = Signal(32, name=f"r_part{g // READ_GROUP}")
            m.d.sync += part.eq(one_hot_select(
                r_sel[g:g + READ_GROUP], [value for _, value in reads[g:g + READ_GROUP]]))
            groups.append(part)
        r_word = Signal(32)
        m.d.sync += r_word.eq(reduce(operator.or_, groups))
        m.d.comb += csr.r_data.eq(r_word)
        return m

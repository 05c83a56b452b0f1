"""Send-queue scheduling, WQE fetch, segmentation, PSNs, window, EV choice,
in-flight records and retransmit requests: the TX control path."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..bits import all_below
from ..csr import CSRBusSignature
from ..pipeline import OneHotFSM
from ..protocol import PLANE_BITS, PSN_BITS
from .csr_decode import TxCsrDecode
from .dma import ReadData, ReadRequest
from .ev import EvBusSignature
from .layouts import (
    WQE_BYTES,
    AckUpdate,
    PacketDesc,
    PayloadDesc,
    RetxRequest,
    SentRecord,
)
from .packet_desc import PacketDescriptors, header_lanes
from .psn_table import PsnTable
from .qp_counters import QpCounters
from .qp_flags import QpFlags
from .qp_settings import (
    BRAM_QPS,
    MPR_UNIT,
    QpSettings,
    cfg_lanes,
    lane_index,
    registered_address,
    row_address,
    row_port,
    settings_lane,
)
from .regs import CTRL_FLUSH_BIT, CTRL_RESET_BIT
from .scheduler import EvChoice, QpScheduler
from .seq_states import (
    SeqContext,
    WindowCheck,
    back_states,
    fetch_request_states,
    fetch_states,
    grant_open,
    offset_states,
    retx_states,
    serve_grant,
    take_state,
    window_states,
)
from .wimm import WimmBusSignature, wimm_widths
from .wqe_loader import WqeLoader, WqeState
from .wqe_prefetch import BurstShare, WqePrefetch, read_ahead

__all__ = ["Sequencer"]


def InflightRecord(ev_bits):
    """What the in-flight table keeps per PSN: the packet's WQE and index in
    it, and its EV."""
    return data.StructLayout(
        {"wqe_index": unsigned(16), "pkt_index": unsigned(24), "ev_index": unsigned(ev_bits)})


class Sequencer(wiring.Component):
    """The TX control path: one decision per packet, sequential.

    Interface: ``csr`` (the TX register block, ``regs.tx_register_map``,
    decoded by ``TxCsrDecode``, hw/tx/csr_decode.py),
    ``wqe_req``/``wqe_data`` (AXI4 read bursts of 64-byte WQEs), ``ev``
    (the ``EvTable``), ``retx`` and ``ack_update`` from reliability, and per
    packet one ``hdr_desc`` (header fields), one ``pay_desc`` (payload to
    read) and one ``sent`` record, all three in the same cycle; ``hdr_plane``
    is the packet's plane (its EV's), valid with ``hdr_desc``.

    Per packet: pick a QP round-robin among those enabled, with work, and not
    parked (window full, no GOOD EV, max_wimm reached); check the window (the
    PSNs in flight against min(MPR x 128, ``max_span``, in-flight table
    size), those of them not SACKed against cwnd); take the prefetched WQE if none is part sent;
    cut the next MTU-sized packet; pick the next GOOD EV after the
    QP's cursor; record (WQE, packet index, EV) under the PSN; emit. The
    front half (FSM ``st``: LOAD, CHECK, TAKE or OFFSET) checks a QP's
    window and takes its WQE, then hands the packet to the back half
    (``bst``: SEGMENT, EV_VALUE, EMIT), which cuts it, chooses its EV and
    emits it while the front half checks the next QP (``seq_states.hand_off``):
    reading one WQE ahead, never the back half's; reading several, also the
    back half's, taking its next WQE only as the back half emits that QP's
    packet that ends its WQE (the chain: the PSN, EV cursor and ring index
    forwarded from the back half, the back half's packet counted in the
    window). A parked QP costs no cycles until an
    ack_update, CSR write or EV state change for it unparks it. Retransmit
    requests go first, once the back half is idle: check that the PSN is in
    flight, read its record, re-fetch its WQE and emit the same packet on a
    GOOD EV other than the one it last used. A fetched WQE with an
    opcode not in ``WqeOpcode.KNOWN`` becomes no packet: OP_ERR issues a
    ``sent`` record with ``op_err`` for it and halts the QP's new work until
    its ``qp_ctrl`` is written; ``qp_ctrl.reset`` sets the consumer index to
    the doorbell and drops a part-sent WQE (docs/tx.md, "Refused WQEs", "QP
    reset").

    ``wimm`` goes to a ``WimmBound`` (hw/tx/wimm.py), which counts per QP the
    WRITE_WITH_IMM messages started and not completed: a WITH_IMMEDIATE WQE
    whose first packet is next, on a QP ``at_bound``, is not sent: SEGMENT
    parks the QP with the WQE kept (as for want of an EV) until the QP is
    below its bound again; the QP's later WQEs wait behind it, its
    retransmissions do not (docs/tx.md, "The max_wimm bound").

    Host addresses (the SQ base, WQE addresses, the WQE's ``laddr`` and the
    payload addresses) are ``addr_width`` bits: ``qp_sq_base_hi`` keeps bits
    ``addr_width - 33..0`` (the rest read 0), a WQE's ``laddr`` is taken
    modulo 2^addr_width, and base + slot and ``laddr`` + offset wrap within
    ``addr_width`` bits. The remote address (``raddr``, the RETH VA) is 64.

    Sub-components (docs/tx.md, "Inside the ``Sequencer``"): ``TxCsrDecode``
    (CSR writes as strobes, reads), ``QpSettings`` (the per-QP settings
    rows), ``PsnTable`` (PSNs and ``ack_update``), ``QpScheduler`` (the QP
    to serve) and ``EvChoice`` (the packet's EV); each docstring gives its
    own latencies. ``QpFlags`` (hw/tx/qp_flags.py) holds the per-QP
    flip-flops the FSM and the CSRs share; the FSM's states after IDLE are
    built in hw/tx/seq_states.py (``WindowCheck``: the window check). A CSR
    write lands one cycle after ``w_stb`` (a QP's two, EV_ENTRY's at
    ``w_stb``); a doorbell is seen by the WQE prefetch two cycles after
    that, and by the scheduler once the QP's WQE is read.

    For timing, the state machine is one-hot, the window check is
    registered over LOAD and CHECK (a QP that is over its window parks one
    state later), a retransmit's in-flight check over RETX_CHECK and
    RETX_COMPARE (its in-flight record registered in RETX_COMPARE, its
    WQE's slot computed from that in RETX_RECORD), the WQE request is
    registered in FETCH and presented in FETCH_REQ, the WQE's beats are
    registered before their fields load (the last lands in PARSE),
    ``retx_no_ev`` counts a dropped retransmit the cycle after SEGMENT, the
    per-QP RAMs are read at the address of the cycle before (``row_port``), the
    packet's addresses (``raddr``/``laddr`` + offset) are registered before
    EMIT, and the back half works from copies loaded at the hand-off (its
    QP ``bq``, WQE ``bcur``, the settings lanes its headers carry, MTU,
    PSN, EV cursor, offset), whose
    enable is TAKE's or OFFSET's flip-flop and the back half's being free.

    New WQEs are read ahead: ``WqePrefetch`` (hw/tx/wqe_prefetch.py) reads
    each enabled QP's next posted WQEs, up to ``wqe_read_ahead`` (None: the
    default of ``read_ahead``, 4 at 256 bits and up with up to 64 QPs, else
    1), into a buffer, and the scheduler serves a QP with a part-sent or a
    prefetched WQE; TAKE consumes the buffered one at ``ci`` (``ci`` moves
    on) in one cycle. A retransmission re-fetches its WQE on
    the same channel (``BurstShare``, ahead of the prefetch).

    Latency: 6 cycles from a grant to the packet's EMIT (LOAD, CHECK, TAKE
    or OFFSET, SEGMENT, EV_VALUE, EMIT), 7 from IDLE; SEGMENT waits while
    there is no room downstream, and TAKE goes through OFFSET when the back
    half is busy or the opcode is unknown; 10 plus the WQE burst and the
    memory's latency for a retransmit. Throughput: one packet per 3 cycles
    over three QPs or more (the front half's LOAD and CHECK of the next QP
    under the back half's SEGMENT and EV_VALUE, its TAKE under EMIT), when
    each QP's next WQE is ready (docs/tx.md, "Scheduling"). Reading several
    WQEs ahead (4, the default at 256 bits and up) also over two QPs and on
    one whose packets each end a WQE (64-byte WRITEs); on one QP, 7 cycles
    from a packet that does not end its WQE to the next (the WQE's row is
    written at its EMIT). Reading one ahead, 3 and 4 in turn over two QPs,
    7 on one, and with a WQE per packet 12 on one (from a take of a QP to
    its next).
    """

    def __init__(
        self,
        *,
        data_width=64,
        num_qps=16,
        evs_per_qp=16,
        max_mtu=4096,
        csr_addr_width=16,
        inflight_depth=256,
        addr_width=64,
        max_span=None,
        ipv6=False,
        ev_width=16,
        wqe_read_ahead=None,
    ):
        self.max_span = max_span
        self.wqe_read_ahead = read_ahead(wqe_read_ahead, data_width, num_qps)
        self.ipv6, self.ev_width = ipv6, ev_width
        self.data_width = data_width
        self.addr_width = addr_width
        self.num_qps = num_qps
        self.evs_per_qp = evs_per_qp
        self.max_mtu = max_mtu
        self.inflight_depth = inflight_depth
        self.qp_bits = max(1, (num_qps - 1).bit_length())
        self.ev_bits = max(1, (evs_per_qp - 1).bit_length())
        super().__init__(
            {
                "csr": In(CSRBusSignature(csr_addr_width)),
                "wqe_req": Out(stream.Signature(ReadRequest(addr_width))),
                "wqe_data": In(stream.Signature(ReadData(data_width))),
                "ev": Out(EvBusSignature(num_qps, evs_per_qp, ev_width)),
                "retx": In(stream.Signature(RetxRequest)),
                "ack_update": In(stream.Signature(AckUpdate)),
                "hdr_desc": Out(stream.Signature(PacketDesc(ipv6, ev_width))),
                "pay_desc": Out(stream.Signature(PayloadDesc(addr_width))),
                "sent": Out(stream.Signature(SentRecord)),
                "src_mac": Out(48),
                "src_ip": Out(32),
                **({"src_ip6": Out(128)} if ipv6 else {}),
                "hdr_plane": Out(PLANE_BITS),
                "wimm": Out(WimmBusSignature(num_qps, inflight_depth)),
            }
        )

    def elaborate(self, platform):
        m = Module()
        nq, ne = self.num_qps, self.evs_per_qp
        qb, eb = self.qp_bits, self.ev_bits
        depth = self.inflight_depth
        db = depth.bit_length() - 1
        nbytes = self.data_width // 8
        wqe_beats = WQE_BYTES // nbytes
        max_mtu_log2 = self.max_mtu.bit_length() - 1

        # ---- per-QP flags, read by the scheduler every cycle; ring indices, EV cursors
        flags = QpFlags(nq, ne, read_ahead=self.wqe_read_ahead)

        # ---- per-QP settings, WQE progress, counters, in-flight records: RAM
        # The FSM and the CSR reads read each RAM at the address of the cycle
        # before, transparent for its writes (``row_port``): LUT RAM at an
        # address register of that port's own, or above BRAM_QPS QPs block RAM.
        m.submodules.settings = settings = QpSettings(
            num_qps=nq, max_mtu=self.max_mtu, inflight_depth=depth, ipv6=self.ipv6)
        cfg = settings.fsm_row  # the settings row of cur_q (registered), in cfg_lanes order

        # A row is read (in CHECK) only while the QP's wqe_active is set: TAKE
        # sets it and the EMIT or the parking SEGMENT that always follows writes
        # the row (a SEGMENT's the cycle after), so INIT leaves these rows alone.
        wqe_state = WqeState(self.addr_width)
        m.submodules.wqe_state = wqe_mem = Memory(shape=wqe_state, depth=nq, init=[])
        wqe_w = wqe_mem.write_port()
        ram = dict(block_ram=nq > BRAM_QPS)
        wqe_r = row_port(wqe_mem, write=wqe_w, **ram)

        m.submodules.counters = counters = QpCounters(nq)

        m.submodules.inflight = inflight_mem = Memory(
            shape=InflightRecord(eb), depth=nq << db, init=[]
        )
        infl_w = inflight_mem.write_port()
        infl_r = inflight_mem.read_port(domain="comb")

        # ---- global registers
        retx_ignored = Signal(32)
        retx_no_ev = Signal(32)
        # a retransmit dropped for want of an EV, registered: the counter moves the
        # cycle after SEGMENT, its enable a flip-flop and not the EV choice
        retx_no_ev_inc = Signal()
        m.d.sync += retx_no_ev_inc.eq(0)
        with m.If(retx_no_ev_inc):
            m.d.sync += retx_no_ev.eq(retx_no_ev + 1)

        cur_q = Signal(qb)  # the front half's QP
        cur_q_next = Signal(qb)  # the value cur_q takes at the next edge (IDLE, a hand-off)
        # The back half's QP, set when a packet is handed over (b_load, below)
        # and held to its EMIT; cur_q while busy only in a chain (_chain).
        bq = Signal(qb)
        bq_next = Signal(qb)  # the value bq takes at the next edge
        m.d.comb += [
            cur_q_next.eq(cur_q),
            settings.fsm_q.eq(cur_q),
            wqe_r.addr.eq(row_address(m, cur_q, "wqe_q", **ram)),
            # read 3 cycles before EMIT: the hand-off's cycle
            counters.q.eq(bq_next),
            self.ev.good_qp.eq(bq_next),
        ]

        init_q = Signal(range(nq + 1))
        ready = Signal()

        # ---- CSR decode: per-QP writes as strobes (qw), applied below, and reads
        dec = self._csr_decode(m, settings, counters, init_q, ready, flags.ring_rows)
        qw = dec.qp_w

        # ---- the WQE reads (each QP's next WQE read ahead, a retransmission's
        # re-fetched) and the QP to serve next
        pf_take = Signal()  # TAKE consumes cur_q's prefetched WQE
        pf, share, sched = self._wqe_reads(m, flags, settings, qw, cur_q, pf_take)

        # ---- the per-packet FSM
        retx_mode = Signal()
        retx_psn = Signal(PSN_BITS)
        retx_qpn_ok = Signal()
        retx_in_flight = Signal()
        rec = Signal(InflightRecord(eb))
        fetch_index = Signal(16)
        fetch_beat = Signal(range(max(wqe_beats, 2)))
        cur = Signal(wqe_state)
        op_bad = Signal()  # the fetched WQE's opcode is not one TX executes
        offset = Signal(32)
        seg_rest = Signal(32)  # bytes of the WQE from this packet on
        seg_mtu = Signal(13)
        seg_last = Signal()
        seg_first = Signal()
        seg_len = Signal(13)
        seg_psn = Signal(PSN_BITS)
        ev_index = Signal(eb)
        # the back half's copies of the front's, loaded at the hand-off: its
        # WQE, and of its settings row the lanes PacketDescriptors reads
        bcur = Signal(wqe_state)
        bretx = Signal()
        bcursor = Signal(eb)
        lane_width = {name: width for name, _, width in cfg_lanes(self.ipv6)}
        b_lanes = {name: Signal(width or lane_width[name], name=f"b_{name}")
                   for name, width in header_lanes(self.ipv6, self.ev_width)}
        bcfg = Cat(*(Cat(b_lanes[name], Const(0, 32 - len(b_lanes[name]))) if name in b_lanes
                     else Const(0, 32) for name in lane_width))
        psn_advance = Signal()  # EMIT sends a new PSN: next_psn[bq] moves on
        readies = self.hdr_desc.ready & self.pay_desc.ready & self.sent.ready
        # EMIT sends this cycle: the three valids, the in-flight and counter
        # writes and every per-packet update. A flip-flop, set in the state
        # before from that cycle's readies (room was checked in SEGMENT and
        # only our writes take it, so they are this cycle's): no decode is in
        # front of the enables it drives.
        emit_go = Signal()
        # the WQE row of bq is written (bcur, by EMIT with pkt_index + 1, or
        # the cycle after SEGMENT parks the QP): one flip-flop for the write
        # enable of the row's RAM, set the cycle before. Its
        # address is bq of the cycle before, a register of its own: bq
        # is set at the hand-off and holds from there to the EMIT and to the
        # BIDLE after a parking SEGMENT, so both writes see the two equal.
        wqe_we = Signal()
        m.d.comb += [
            wqe_w.addr.eq(registered_address(m, bq, "wqe_w_q")),
            wqe_w.data.eq(bcur),
            wqe_w.data.pkt_index.eq(Mux(emit_go, bcur.pkt_index + 1, bcur.pkt_index)),
            wqe_w.en.eq(wqe_we),
        ]

        # only the bits that an MTU up to max_mtu needs
        mtu_shift_bits = max(1, (max_mtu_log2 - 8).bit_length())
        mtu_shift = settings_lane(cfg, "mtu_shift")[:mtu_shift_bits]
        # Array reads go through plain signals first: arithmetic on two
        # ArrayProxy values would expand to num_qps^2 terms.
        cur_ci = Signal(16)
        cur_cursor = Signal(eb)
        flags.read_cur(m, cur_q, cur_q_next, cur_ci, cur_cursor)
        spec, chain, ci_now = self._chain(m, cur_ci, bcur, pf, pf_take)
        # the PSNs: next and oldest unacknowledged per QP, moved by EMIT, acks
        # and qp_next_psn writes
        m.submodules.psns = psns = PsnTable(nq, cur_wait=spec is not None)
        wiring.connect(m, wiring.flipped(self.ack_update), psns.ack)
        psn_inputs = dict(cur_q=cur_q, cur_q_next=cur_q_next, retx_psn=retx_psn, write=qw.next_psn,
                          write_stb=qw.psn_write, write_q=qw.q, write_data=qw.data[:PSN_BITS],
                          advance=psn_advance, advance_psn=seg_psn, advance_q=bq,
                          csr_q=dec.qsel)
        m.d.comb += [getattr(psns, name).eq(value) for name, value in psn_inputs.items()]
        mpr_psns = settings_lane(cfg, "mpr") * MPR_UNIT
        cwnd = settings_lane(cfg, "cwnd")
        # the window check (seq_states.WindowCheck): LOAD, CHECK and the park
        window = WindowCheck(m, nq, db, retx_mode, mpr_psns, cwnd, self.max_span)
        # the SQ base keeps addr_width bits: sq_base_hi's lane is read that narrow
        sq_hi_bits = self.addr_width - 32
        sq_base = Cat(settings_lane(cfg, "sq_base_lo"),
                      settings_lane(cfg, "sq_base_hi", sq_hi_bits))
        sq_log2 = settings_lane(cfg, "sq_log2_size")
        ring_mask = all_below(sq_log2, 16)  # (1 << sq_log2_size) - 1
        # the WQE's ring slot (fetch_index mod size) is registered with
        # fetch_index, so FETCH's address is one addr_width-bit add from flip-flops
        fetch_slot = Signal(16)
        psn_out = Mux(retx_mode, retx_psn, psns.cur_next)

        # EV choice: next GOOD after the cursor; a retransmit avoids its last EV
        # unless it is the only GOOD one.
        m.submodules.ev_choice = ev_choice = EvChoice(ne)
        m.d.comb += [ev_choice.good.eq(self.ev.good), ev_choice.cursor.eq(bcursor),
                     ev_choice.retx.eq(bretx), ev_choice.avoid.eq(rec.ev_index),
                     self.ev.val_sel.eq(Cat(ev_index, bq))]

        m.d.comb += [counters.retx.eq(bretx), counters.ready.eq(ready),
                     counters.init_q.eq(init_q)]

        # The WQE request comes from flip-flops: FETCH registers the address
        # (an addr_width-bit add behind the settings RAM) and FETCH_REQ presents it.
        # It, the three per-packet outputs and the in-flight record are driven
        # in every state: their valids (and infl_w.en) say when they count, so
        # no field needs gating by the FSM state.
        wqe_valid = Signal()
        wqe_addr = Signal(self.addr_width)
        m.d.comb += [
            share.a_req.valid.eq(wqe_valid),
            share.a_req.payload.addr.eq(wqe_addr),
            share.a_req.payload.len.eq(wqe_beats - 1),
        ]

        # ---- the per-packet state machine, one-hot (hw.pipeline.OneHotFSM): a
        # state's enables and selects are its flip-flop; assignments made in
        # every cycle come before the states' blocks.
        STATES = ("INIT", "IDLE", "LOAD", "CHECK", "RETX_CHECK", "RETX_COMPARE",
                  "RETX_RECORD", "TAKE", "FETCH", "FETCH_REQ", "FETCH_DATA", "PARSE", "OFFSET",
                  "OP_ERR")
        fsm = OneHotFSM(m, STATES, "INIT")
        st = fsm.st
        # the back half (seq_states.back_states), one packet at a time
        bfsm = OneHotFSM(m, ("BIDLE", "SEGMENT", "EV_VALUE", "EMIT"), "BIDLE", name="bst")
        b_idle = bfsm.ongoing("BIDLE")
        # it takes a packet at this edge if idle, or sending its last
        can_accept = b_idle | (bfsm.ongoing("EMIT") & emit_go)
        handoff = Signal()  # TAKE or OFFSET hands its packet over (seq_states.hand_off)

        m.d.sync += [emit_go.eq(0), wqe_we.eq(0)]
        # INIT writes every counters row, EMIT the row of bq
        m.d.comb += [
            counters.init.eq(st.INIT),
            counters.emit.eq(emit_go),
            infl_w.en.eq(emit_go),
            # read for RETX_RECORD alone; retx_psn and cur_q are set in IDLE
            infl_r.addr.eq(registered_address(m, Cat(retx_psn[:db], cur_q), "infl_addr")),
        ]
        psn_off_r = Signal(PSN_BITS)  # retx_psn - una_psn of the QP
        # loaded at the hand-off, used in SEGMENT: the WQE's first packet is next, it
        # is a WITH_IMMEDIATE one and the QP is at its max_wimm (not a retransmit)
        wimm_hold = Signal()
        m.d.comb += [
            self.wimm.start.eq(emit_go & ~bretx & seg_first & bcur.with_imm),
            self.wimm.start_qp.eq(bq),
        ]

        # cur, the WQE being sent: the QP's row in CHECK, loaded on every
        # branch so that its enable is the state's flip-flop (a new WQE
        # overwrites every field of it in TAKE, a re-fetched one from its
        # beats and in PARSE, before cur is used or written back)
        m.submodules.wqe_loader = loader = WqeLoader(data_width=self.data_width,
                                                     addr_width=self.addr_width)
        m.d.comb += [
            *[getattr(loader, f"in_{name.lower()}").eq(st[name])
              for name in ("IDLE", "LOAD", "RETX_CHECK", "RETX_COMPARE", "FETCH_DATA", "PARSE",
                           "TAKE")],
            loader.retx.eq(retx_mode), loader.row.eq(wqe_r.data), loader.wqe.eq(pf.rd_wqe),
            loader.beat.eq(share.a_data.payload.data), loader.beat_valid.eq(share.a_data.valid),
            loader.beat_index.eq(fetch_beat), loader.parse_wqe_index.eq(fetch_index),
            loader.parse_pkt_index.eq(Mux(retx_mode, rec.pkt_index, 0)),
            cur.eq(loader.cur), op_bad.eq(loader.op_bad),
        ]

        # what the states share (hw/tx/seq_states.py builds those after IDLE)
        c = SeqContext(
            m=m, fsm=fsm, seq=self, flags=flags, window=window, cur_q=cur_q, retx_mode=retx_mode,
            psns=psns, cur=cur, cur_ci=ci_now, fetch_index=fetch_index, fetch_slot=fetch_slot,
            fetch_beat=fetch_beat, ring_mask=ring_mask, sq_base=sq_base, wqe_valid=wqe_valid,
            wqe_addr=wqe_addr, retx_qpn_ok=retx_qpn_ok, retx_in_flight=retx_in_flight,
            psn_off_r=psn_off_r, rec=rec, infl_r=infl_r, retx_ignored=retx_ignored,
            retx_no_ev_inc=retx_no_ev_inc, op_bad=op_bad, readies=readies, offset=offset,
            wimm_hold=wimm_hold, seg_rest=seg_rest, seg_mtu=seg_mtu,
            seg_first=seg_first, seg_last=seg_last, seg_len=seg_len, seg_psn=seg_psn,
            ev_index=ev_index, ev_choice=ev_choice, emit_go=emit_go,
            wqe_we=wqe_we, psn_advance=psn_advance, wqe_req=share.a_req, wqe_data=share.a_data,
            wqe_ready=pf.ready, pf_take=pf_take, wqe_known=loader.wqe_known,
            wqe_with_imm=loader.wqe_with_imm, sched=sched, cur_q_next=cur_q_next, bfsm=bfsm,
            bq=bq, bcur=bcur, bretx=bretx, can_accept=can_accept, handoff=handoff, spec=spec,
            chain=chain)

        copies = [(reg, settings_lane(cfg, name)) for name, reg in b_lanes.items()]
        self._hand_off_copies(m, c, st, loader, copies, (bcursor, cur_cursor), psn_out,
                              mtu_shift, bq_next)
        self._packet_outputs(m, c, st, bcfg, infl_w, db)

        with fsm.State("INIT"):
            # Settings and counters back to their defaults after a (soft)
            # reset; CSR writes to per-QP settings are lost until ``ready``.
            with m.If(init_q < nq):
                m.d.sync += init_q.eq(init_q + 1)
            with m.Elif(self.ev.ready):
                m.d.sync += ready.eq(1)
                fsm.next = "IDLE"

        with fsm.State("IDLE"):
            # a retransmit waits for an ack taken before it (PsnTable.ack_busy)
            # and for the back half to be idle (its QP may be the retransmit's)
            with m.If(self.retx.valid & ~psns.ack_busy):
                with m.If(b_idle):
                    m.d.comb += [self.retx.ready.eq(1),
                                 cur_q_next.eq(self.retx.payload.qpn[:qb])]
                    m.d.sync += [
                        cur_q.eq(self.retx.payload.qpn[:qb]),
                        retx_qpn_ok.eq(self.retx.payload.qpn < nq),
                        retx_psn.eq(self.retx.payload.psn),
                        retx_mode.eq(1),
                    ]
                    fsm.next = "RETX_CHECK"
            with m.Elif(grant_open(c)):
                serve_grant(c)

        # the other states, in the order of their blocks
        window_states(c)
        retx_states(c)
        take_state(c)
        fetch_request_states(c)
        fetch_states(c)
        offset_states(c)
        back_states(c)

        # ---- unparks and CSR writes (decoded in TxCsrDecode) applied to the per-QP
        # state, after the FSM's writes, which they override in the same cycle
        # (the settings take theirs in QpSettings)
        flags.apply_writes(m, qw, psns.ack_apply, window.clear, self.ev)
        self._wimm_writes(m, qw)
        flags.apply_doorbell(m, qw)

        self._read_values(m, dec, flags, sched, psns, settings, counters, retx_ignored,
                          retx_no_ev)
        return m

    def _chain(self, m, cur_ci, bcur, pf, pf_take):
        """Reading several WQEs ahead, the front half may check the back half's
        QP (``spec``: from the hand-off that served it, ``seq_states.hand_off``)
        and take its next WQE as the back half emits that QP's packet that ends
        a WQE (``chain``: that TAKE), the back half's PSN, EV and ring index
        forwarded; returns (``spec``, ``chain``, ``cur_q``'s ``ci``), or
        (None, None, ``cur_ci``) reading one WQE ahead."""
        if self.wqe_read_ahead == 1:
            return None, None, cur_ci
        spec, chain, ci_now = Signal(), Signal(), Signal(16)
        # the back half's new packet is of its QP's last taken WQE: ci is one
        # past it (RingRows lands a take a cycle late when it meets a write)
        m.d.comb += [
            ci_now.eq(Mux(spec, bcur.wqe_index + 1, cur_ci)),
            chain.eq(pf_take & spec),
            # the buffered WQE TAKE reads: cur_q's at its ci (the slot: ci mod depth)
            pf.rd_slot.eq(ci_now[:len(pf.rd_slot)]),
        ]
        return spec, chain, ci_now

    def _hand_off_copies(self, m, c, st, loader, copies, cursor, psn, mtu_shift, bq_next):
        """The hand-off: the back half's registers (``c.bq``, ``c.bretx``,
        ``c.bcur``, ``c.seg_psn`` from ``psn``, ``c.seg_mtu`` from
        ``mtu_shift``, ``c.offset``, ``c.wimm_hold``, the EV cursor (the
        (register, value) pair ``cursor``) and each (register, value) of
        ``copies``, the header lanes) load whenever TAKE or OFFSET meets the
        back half free (a flip-flop's worth of logic for their enables); when
        no packet is handed over, the back half stays idle and nothing reads
        them. A new WQE's packet is at offset 0; the QP at its max_wimm holds
        a WITH_IMMEDIATE WQE's first packet (not a retransmission's); a
        chained TAKE's packet (``c.chain``) takes the back half's PSN + 1 and
        EV as its PSN and cursor. ``bq_next`` is the value ``bq`` takes."""
        cur, cur_q, retx_mode = c.cur, c.cur_q, c.retx_mode
        bcursor, cursor = cursor
        if c.chain is not None:  # a chained packet follows the back half's (its QP's)
            psn = Mux(c.chain, c.seg_psn + 1, psn)
            cursor = Mux(c.chain, c.ev_index, cursor)
        b_load = (st.TAKE | st.OFFSET) & c.can_accept
        at_bound = self.wimm.at_bound.bit_select(cur_q, 1)
        m.d.comb += bq_next.eq(Mux(b_load, cur_q, c.bq))
        with m.If(b_load):
            m.d.sync += [
                c.bq.eq(cur_q),
                c.bretx.eq(retx_mode),
                *[reg.eq(value) for reg, value in copies],
                bcursor.eq(cursor),
                c.seg_psn.eq(psn),
                c.seg_mtu.eq(Const(256, 9) << mtu_shift),
                c.bcur.eq(Mux(st.TAKE, loader.taken, cur)),
                c.offset.eq(Mux(st.TAKE, 0,
                                Cat(Const(0, 8), cur.pkt_index) << mtu_shift)),
                c.wimm_hold.eq(at_bound & Mux(st.TAKE, loader.wqe_with_imm,
                                              ~retx_mode & cur.with_imm
                                              & (cur.pkt_index == 0))),
            ]

    def _packet_outputs(self, m, c, st, bcfg, infl_w, db):
        """The packet's header and payload descriptors (``PacketDescriptors``,
        from the back half's registers), its ``sent`` record and in-flight
        row, all offered at EMIT (``c.emit_go``), and OP_ERR's ``sent``
        record (the back half idle), the front's WQE's."""
        m.submodules.packet_desc = desc = PacketDescriptors(self.addr_width, self.ipv6,
                                                            self.ev_width)
        packet = dict(wqe=c.bcur, offset=c.offset, first=c.seg_first, last=c.seg_last,
                      length=c.seg_len, psn=c.seg_psn, retx=c.bretx, settings=bcfg,
                      ev_value=self.ev.value)
        m.d.comb += [getattr(desc, name).eq(value) for name, value in packet.items()]
        sent = self.sent.payload
        m.d.comb += [
            self.hdr_desc.payload.eq(desc.hdr),
            self.hdr_plane.eq(self.ev.plane),
            self.pay_desc.payload.eq(desc.pay),
            self.hdr_desc.valid.eq(c.emit_go),
            self.pay_desc.valid.eq(c.emit_go),
            self.sent.valid.eq(c.emit_go | st.OP_ERR),
            sent.op_err.eq(st.OP_ERR),
            sent.qpn.eq(Mux(st.OP_ERR, c.cur_q, c.bq)),
            sent.retx.eq(c.bretx & ~st.OP_ERR),
            sent.wqe_index.eq(Mux(st.OP_ERR, c.cur.wqe_index, c.bcur.wqe_index)),
            sent.psn.eq(c.seg_psn),
            sent.ev_index.eq(c.ev_index),
            sent.last.eq(c.seg_last),
            infl_w.addr.eq(Cat(c.seg_psn[:db], c.bq)),
            infl_w.data.wqe_index.eq(c.bcur.wqe_index),
            infl_w.data.pkt_index.eq(c.bcur.pkt_index),
            infl_w.data.ev_index.eq(c.ev_index),
        ]

    def _read_values(self, m, dec, flags, sched, psns, settings, counters, retx_ignored,
                     retx_no_ev):
        """The values CSR reads return, into ``TxCsrDecode``'s inputs."""
        ring_pi, ring_ci = flags.csr_values(m, dec.qsel)
        read_values = dict(
            enable=flags.enable, wqe_active=flags.wqe_active, win_blocked=flags.win_blocked,
            ev_blocked=flags.ev_blocked, wimm_wait=sched.wimm_wait, psn_next=psns.csr_next,
            psn_una=psns.csr_una, psn_inflight=psns.csr_inflight, pi=ring_pi,
            ci=ring_ci, cfg_row=settings.csr_row,
            counters=counters.csr_data, wimm_count=self.wimm.rd_count, retx_ignored=retx_ignored,
            retx_no_ev=retx_no_ev)
        m.d.comb += [getattr(dec, name).eq(value) for name, value in read_values.items()]

    def _wqe_reads(self, m, flags, settings, qw, cur_q, pf_take):
        """``WqePrefetch`` (each QP's next WQE read ahead, its ring settings from
        the settings' ring port, its buffer read at ``cur_q``; ``pf_take``: TAKE
        consumes it; a ring reset drops it), ``BurstShare`` (the WQE channel,
        a retransmission's re-fetch first) joined to the WQE ports, and the
        ``QpScheduler`` over the QPs with a part-sent or a prefetched WQE;
        returns the three."""
        m.submodules.prefetch = pf = WqePrefetch(num_qps=self.num_qps,
                                                 data_width=self.data_width,
                                                 addr_width=self.addr_width,
                                                 ring_rows=flags.ring_rows,
                                                 depth=self.wqe_read_ahead)
        m.submodules.wqe_share = share = BurstShare(data_width=self.data_width,
                                                    addr_width=self.addr_width)
        wiring.connect(m, pf.req, share.b_req)
        wiring.connect(m, share.b_data, pf.data)
        wiring.connect(m, share.req, wiring.flipped(self.wqe_req))
        wiring.connect(m, wiring.flipped(self.wqe_data), share.data)
        ring = settings.ring_row
        m.d.comb += [
            *flags.prefetch_inputs(pf), pf.enable.eq(flags.enable),
            pf.op_halt.eq(flags.op_halt), settings.ring_q.eq(pf.ring_q),
            pf.sq_base.eq(Cat(settings_lane(ring, "sq_base_lo"),
                              settings_lane(ring, "sq_base_hi", self.addr_width - 32))),
            pf.sq_log2.eq(settings_lane(ring, "sq_log2_size")),
            pf.take.eq(pf_take), pf.take_q.eq(cur_q), pf.drop.eq(qw.reset), pf.rd_q.eq(cur_q),
            pf.drop_stb.eq(qw.ctrl & qw.data[CTRL_RESET_BIT]), pf.drop_q.eq(qw.q),
        ]
        if self.wqe_read_ahead > 1:
            m.d.comb += [pf.post_stb.eq(qw.doorbell), pf.post_q.eq(qw.q)]
        m.submodules.scheduler = sched = QpScheduler(self.num_qps)
        qp_flags = dict(**flags.scheduler_inputs(), wqe_ready=pf.ready,
                        at_bound=self.wimm.at_bound)
        m.d.comb += [getattr(sched, name).eq(value) for name, value in qp_flags.items()]
        return pf, share, sched

    def _csr_decode(self, m, settings, counters, init_q, ready, ring_rows):
        """``TxCsrDecode`` joined to the CSR bus, the settings' write port, the
        EV table's CSR port and the read selects of the settings, counters and
        WimmBound; returns it (its ``qp_w`` strobes are applied by the caller)."""
        nq, ne, depth = self.num_qps, self.evs_per_qp, self.inflight_depth
        m.submodules.csr_decode = dec = TxCsrDecode(
            num_qps=nq, evs_per_qp=ne, csr_addr_width=len(self.csr.addr), max_mtu=self.max_mtu,
            data_width=self.data_width, inflight_depth=depth, addr_width=self.addr_width,
            flop_rows=settings.flop_rows, wimm_count_width=wimm_widths(depth)[1],
            ipv6=self.ipv6, ev_width=self.ev_width, ring_rows=ring_rows)
        wiring.connect(m, wiring.flipped(self.csr), dec.csr)
        wiring.connect(m, dec.qp_w, settings.w)
        m.d.comb += [
            dec.ready.eq(ready),
            dec.init_q.eq(init_q),
            settings.csr_q.eq(dec.qsel),
            counters.csr_q.eq(dec.qsel),
            self.wimm.rd_q.eq(dec.qsel),  # rd_count: the cycle after r_stb
            # the EV table's CSR port
            *[getattr(self.ev, f"csr_{name}").eq(getattr(dec, f"ev_{name}"))
              for name in ("sel", "we", "value", "state", "plane")],
            dec.ev_r_value.eq(self.ev.csr_r_value),
            dec.ev_r_state.eq(self.ev.csr_r_state),
            dec.ev_r_plane.eq(self.ev.csr_r_plane),
            self.src_mac.eq(dec.src_mac),
            self.src_ip.eq(dec.src_ip),
        ]
        if self.ipv6:
            m.d.comb += self.src_ip6.eq(dec.src_ip6)
        return dec

    def _wimm_writes(self, m, qw):
        """WimmBound's count of a QP is 0 after a reset, a flush (the QP's WQEs
        were completed by reliability's ERROR) and INIT; its bound is written
        with the settings lane (INIT writes its default, 0: no bound)."""
        nq = self.num_qps
        m.d.comb += [
            self.wimm.clear.eq(qw.reset | qw.flush | qw.init.replicate(nq)),
            self.wimm.clear_stb.eq(qw.init | (qw.ctrl & (qw.data[CTRL_RESET_BIT]
                                                         | qw.data[CTRL_FLUSH_BIT]))),
            self.wimm.clear_q.eq(qw.q),
            self.wimm.limit_we.eq(qw.lanes[lane_index["max_wimm"]]),
            self.wimm.limit_q.eq(qw.q),
            self.wimm.limit_data.eq(qw.data[:16]),  # max_wimm's default is 0, like INIT's data
        ]

"""The Sequencer's per-packet states (hw/tx/sequencer.py), built into its
``OneHotFSM`` from ``SeqContext``, the registers they share: the window check
(``WindowCheck``; LOAD, CHECK), a retransmit's in-flight check (RETX_CHECK,
RETX_COMPARE, RETX_RECORD), the WQE fetch (FETCH, FETCH_REQ, FETCH_DATA,
PARSE), the new WQE (TAKE) and the hand-off (OFFSET, OP_ERR): the front
half, ``fsm``; and the packet (SEGMENT, EV_VALUE, EMIT, from BIDLE): the back
half, ``bfsm``, which cuts and emits one packet while the front half checks
the next QP's window.

Each builder opens its states with ``fsm.State`` in the FSM's order (the
Sequencer calls them in that order, INIT and IDLE first): a state's enables
and selects are its flip-flop, and a register written in several states takes
the value of the one whose flip-flop is set."""

from dataclasses import dataclass

from amaranth.hdl import Module, Mux, Signal, Value

from ..pipeline import OneHotFSM
from ..protocol import PSN_BITS
from .qp_flags import QpFlags

__all__ = ["SeqContext", "WindowCheck", "back_states", "fetch_request_states", "fetch_states",
           "grant_open", "offset_states", "retx_states", "serve_grant", "take_state",
           "window_states"]


class WindowCheck:
    """The window check, split for timing: in LOAD the PSNs in flight are
    registered (``inflight_r``), and those of them not SACKed
    (``unsacked_r``); in CHECK (settings read) inflight >= min(MPR x 128,
    ``max_span``, depth) or unsacked >= cwnd is registered (``over_r``),
    and the next state (FETCH or OFFSET) parks the QP if it is over
    (``full``). An unpark of the QP (ack_update, CSR write: ``clear``, per
    QP) from LOAD on makes that state go back to IDLE without parking: the
    QP is picked again and checked afresh. Unparks are seen through a
    register (``clear_r``), so that the ack's compare is not in front of the
    FSM: those of the cycle before LOAD count too (``hit``), which costs at
    most a needless check. ``over_r`` is only loaded in CHECK (no other value
    muxed into it); a retransmit, which has no CHECK, ignores it."""

    def __init__(self, m: Module, num_qps: int, depth_bits: int, retx_mode, mpr_psns, cwnd,
                 max_span: int | None = None):
        db = depth_bits
        self.inflight_r = inflight_r = Signal(PSN_BITS, name="inflight_r")
        self.unsacked_r = unsacked_r = Signal(PSN_BITS, name="unsacked_r")
        self.over_r = Signal(name="over_r")
        self.full = self.over_r & ~retx_mode

        # inflight_r >= min(MPR x 128, max_span, depth) or unsacked_r >= cwnd:
        # at depth or more it is over whatever the settings, and below depth
        # only the low db bits of either (unsacked_r <= inflight_r) can reach
        # a limit, so the compares are db bits wide. max_span (reliability's
        # window: the PSNs from una it can track) is a constant.
        def reaches(count, limit):
            return (limit[db:] == 0) & ~(count[:db] < limit[:db])

        self.over = (inflight_r[db:].any() | reaches(inflight_r, mpr_psns)
                     | reaches(unsacked_r, cwnd))
        if max_span is not None and max_span < 1 << db:
            self.over = self.over | ~(inflight_r[:db] < max_span)
        self.clear = Signal(num_qps, name="wb_clear")  # window unparks this cycle
        self.clear_r = Signal(num_qps, name="wb_clear_r")  # window unparks the cycle before
        self.hit = Signal(name="wb_hit")  # the QP was unparked since the cycle before LOAD
        m.d.sync += self.clear_r.eq(self.clear)


@dataclass
class SeqContext:
    """The registers and values the Sequencer's states share (see the
    Sequencer's elaborate for what each holds)."""
    m: Module
    fsm: OneHotFSM
    seq: object  # the Sequencer: its ports
    flags: QpFlags
    window: WindowCheck
    cur_q: Signal
    retx_mode: Signal
    psns: object  # PsnTable
    cur: Value  # WqeLoader's cur
    cur_ci: Signal
    fetch_index: Signal
    fetch_slot: Signal
    fetch_beat: Signal
    ring_mask: Value
    sq_base: Value
    wqe_valid: Signal
    wqe_addr: Signal
    retx_qpn_ok: Signal
    retx_in_flight: Signal
    psn_off_r: Signal
    rec: Value
    infl_r: object  # the in-flight table's read port
    retx_ignored: Signal
    retx_no_ev_inc: Signal
    op_bad: Signal
    readies: Value
    offset: Signal
    wimm_hold: Signal
    seg_rest: Signal
    seg_mtu: Signal
    seg_first: Signal
    seg_last: Signal
    seg_len: Signal
    seg_psn: Signal
    ev_index: Signal
    ev_choice: object  # EvChoice
    emit_go: Signal
    wqe_we: Signal
    psn_advance: Signal
    wqe_req: object  # a retransmission's WQE burst: request and beats (BurstShare's a)
    wqe_data: object
    wqe_ready: Value  # per QP: its next WQE is prefetched (WqePrefetch.ready)
    pf_take: Signal  # TAKE consumes cur_q's prefetched WQE
    wqe_known: Value  # cur_q's prefetched WQE has an opcode TX executes (WqeLoader)
    wqe_with_imm: Value  # ... and it is a WRITE_WITH_IMM
    sched: object  # QpScheduler
    cur_q_next: Signal  # the value cur_q takes at the next edge
    bfsm: OneHotFSM  # the back half: BIDLE, SEGMENT, EV_VALUE, EMIT
    bq: Signal  # the back half's QP
    bcur: Signal  # its WQE (cur as handed off)
    bretx: Signal  # its packet is a retransmission
    can_accept: Value  # the back half takes a packet at this edge (BIDLE, or EMIT sending)
    handoff: Signal  # TAKE or OFFSET hands the packet over (SEGMENT next)
    # reading several WQEs ahead (else None): cur_q is the back half's QP, served
    # at its hand-off, its next packet checked under the back half's (spec); TAKE
    # takes its next WQE as the back half emits its WQE's last packet (chain)
    spec: Signal | None = None
    chain: Signal | None = None


def window_park(c: SeqContext):
    """In FETCH or OFFSET, the CHECK before found the window full: park the QP
    and go back to IDLE. An unpark from the cycle before LOAD to CHECK leaves
    the QP unparked, and one in this cycle clears win_blocked after this
    (``QpFlags.apply_writes``)."""
    m, w = c.m, c.window
    with m.If(~w.hit & ~w.clear_r.bit_select(c.cur_q, 1)):
        m.d.sync += c.flags.win_blocked.bit_select(c.cur_q, 1).eq(1)
    c.fsm.next = "IDLE"


def serve_grant(c: SeqContext, same=None):
    """The scheduler's grant is taken (IDLE, or a hand-off): cur_q is its QP
    from the next cycle, a new packet's LOAD; ``same``: it is the QP just
    handed over (spec)."""
    m = c.m
    m.d.comb += [c.sched.next.eq(1), c.cur_q_next.eq(c.sched.grant)]
    m.d.sync += [c.cur_q.eq(c.sched.grant), c.retx_mode.eq(0)]
    if c.spec is not None:
        m.d.sync += c.spec.eq(0 if same is None else same)
    c.fsm.next = "LOAD"


def grant_open(c: SeqContext):
    """The scheduler's grant is one the front half may take (in IDLE or at a
    hand-off): not the back half's QP while the back half is busy, since
    that QP's EMIT lands its PSN advance, EV cursor and wqe_active at its
    edge and the PSN table's window figures a cycle after (its next packet
    goes through IDLE). Reading several WQEs ahead, also the back half's QP
    in the cycle it emits: its LOAD counts an advance the PSN table has not
    landed (``cur_wait``), and its TAKE, 3 cycles after the emit, sees the
    max_wimm count's start (``WimmBound``: 3 cycles at most)."""
    free = c.bfsm.ongoing("BIDLE") | (c.sched.grant != c.bq)
    if c.spec is not None:
        free = free | (c.bfsm.ongoing("EMIT") & c.emit_go)
    return c.sched.valid & free


def hand_off(c: SeqContext):
    """TAKE or OFFSET hands its packet to the back half, which is in SEGMENT
    from the next cycle with the registers loaded at this edge (the
    Sequencer's ``b_load``), and takes the next grant if it can: one the
    front half may take (``grant_open``) and not this QP, which the back
    half now holds, with no retransmit waiting (IDLE takes those). Reading
    several WQEs ahead it may take this QP too, after a new packet (spec):
    its next packet is checked under this one, and TAKE takes its next WQE
    only as this one is emitted, the WQE's last (``take_state``)."""
    m = c.m
    m.d.comb += c.handoff.eq(1)
    open_other = grant_open(c) & (c.sched.grant != c.cur_q)
    same = None
    if c.spec is not None:
        same = c.sched.valid & (c.sched.grant == c.cur_q) & ~c.retx_mode
        open_other = open_other | same
    with m.If(~c.seq.retx.valid & open_other):
        serve_grant(c, same)
    with m.Else():
        c.fsm.next = "IDLE"


def window_states(c: SeqContext):
    """LOAD and CHECK: the window check's first two cycles, and the WQE to
    fetch."""
    m, fsm, w, q = c.m, c.fsm, c.window, c.cur_q
    inflight, unsacked = c.psns.inflight, c.psns.unsacked
    if c.spec is not None:
        # PSNs of the QP not yet in the table's figures: with spec, the back
        # half's packet (advanced at its EMIT), and an advance that met a write
        pend = c.spec + c.psns.cur_wait
        inflight, unsacked = inflight + pend, unsacked + pend
    with fsm.State("LOAD"):
        m.d.sync += [
            w.inflight_r.eq(inflight),
            w.unsacked_r.eq(unsacked),
            w.hit.eq(w.clear_r.bit_select(q, 1)),
        ]
        fsm.next = "CHECK"

    with fsm.State("CHECK"):
        m.d.sync += [
            w.over_r.eq(w.over),
            w.hit.eq(w.hit | w.clear_r.bit_select(q, 1)),
        ]
        # the index of the WQE TAKE may consume, loaded whatever the branch (the
        # state's flip-flop is the enable): only TAKE reads it
        m.d.sync += c.fetch_index.eq(c.cur_ci)
        # with spec the back half's WQE is still active: TAKE sees if it ends
        new_wqe = ~c.flags.wqe_active.bit_select(q, 1)
        if c.spec is not None:
            new_wqe = new_wqe | c.spec
        with m.If(~c.flags.enable.bit_select(q, 1)):
            fsm.next = "IDLE"
        with m.Elif(new_wqe):
            fsm.next = "TAKE"
        with m.Else():
            fsm.next = "OFFSET"


def retx_states(c: SeqContext):
    """RETX_CHECK, RETX_COMPARE, RETX_RECORD: a retransmit's PSN is in flight
    (else counted in retx_ignored), its in-flight record, its WQE to fetch."""
    m, fsm = c.m, c.fsm
    with fsm.State("RETX_CHECK"):
        # the PSN's offset from una_psn and the PSNs in flight are registered
        # here and compared in RETX_COMPARE: two subtractions (per QP and
        # then a mux of the QP, or from the QP's RAM rows; PsnTable), then
        # a compare, is too deep for one cycle
        m.d.sync += [
            c.psn_off_r.eq(c.psns.psn_offset),
            c.window.inflight_r.eq(c.psns.inflight),
        ]
        fsm.next = "RETX_COMPARE"

    with fsm.State("RETX_COMPARE"):
        # registered: the compare is not in front of the next-state logic
        m.d.sync += c.retx_in_flight.eq(
            c.retx_qpn_ok & c.flags.enable.bit_select(c.cur_q, 1)
            & (c.psn_off_r < c.window.inflight_r)
        )
        # The PSN's record, read at the address registered in RETX_CHECK
        # (no EMIT, the in-flight table's only writer, until the next
        # IDLE), is registered here and its WQE's slot computed from the
        # register in RETX_RECORD: the LUT-RAM read (its address net to
        # every RAM slice) is not in front of fetch_slot's mask and mux
        # (docs/timing.md#tx-sequencer). Loaded whatever
        # the branch, as in CHECK: a retransmit's fields are only read
        # after the FETCH that follows.
        m.d.sync += c.rec.eq(c.infl_r.data)
        fsm.next = "RETX_RECORD"

    with fsm.State("RETX_RECORD"):
        # loaded whatever the branch, as in CHECK: they are only read after
        # the FETCH that follows
        m.d.sync += [
            c.fetch_index.eq(c.rec.wqe_index),
            c.fetch_slot.eq(c.rec.wqe_index & c.ring_mask),
        ]
        with m.If(c.retx_in_flight):
            fsm.next = "FETCH"
        with m.Else():
            m.d.sync += c.retx_ignored.eq(c.retx_ignored + 1)
            fsm.next = "IDLE"


def take_state(c: SeqContext):
    """TAKE: a new WQE, prefetched (``WqePrefetch``), is consumed (loaded into
    ``cur`` by WqeLoader; ci moves on, the QP's WQE is part sent), unless the
    window is full (the QP parks) or the QP's ring was reset since its grant
    (nothing is prefetched: back to IDLE). Its first packet is at offset 0,
    so TAKE does OFFSET's work for it when it can: with the back half free
    and an opcode TX executes it hands the packet over; otherwise it goes to
    OFFSET, which waits for the back half or turns an unknown opcode into
    OP_ERR."""
    m, fsm, q = c.m, c.fsm, c.cur_q
    with fsm.State("TAKE"):
        with m.If(c.window.full):
            window_park(c)
        with m.Elif(~c.wqe_ready.bit_select(q, 1)):
            fsm.next = "IDLE"
        if c.spec is not None:
            # spec: only as the back half emits this QP's new packet, its WQE's
            # last, and not before a WITH_IMMEDIATE WQE (its max_wimm count moves
            # with that emit); else back to IDLE, nothing taken
            chain_ok = (c.bfsm.ongoing("EMIT") & c.emit_go & (c.bq == q) & ~c.bretx
                        & c.seg_last & ~c.wqe_with_imm)
            with m.Elif(c.spec & ~chain_ok):
                fsm.next = "IDLE"
        with m.Else():
            m.d.comb += c.pf_take.eq(1)
            c.flags.take(m, q, c.cur_ci)
            m.d.sync += c.flags.wqe_active.bit_select(q, 1).eq(1)
            with m.If(c.wqe_known & c.can_accept):
                hand_off(c)
            with m.Else():
                fsm.next = "OFFSET"


def fetch_request_states(c: SeqContext):
    """FETCH and FETCH_REQ: a retransmission's WQE address registered, then
    presented."""
    m, fsm = c.m, c.fsm
    with fsm.State("FETCH"):
        m.d.sync += [c.wqe_addr.eq(c.sq_base + (c.fetch_slot << 6)), c.wqe_valid.eq(1)]
        fsm.next = "FETCH_REQ"

    with fsm.State("FETCH_REQ"):
        with m.If(c.wqe_req.ready):
            m.d.sync += [c.wqe_valid.eq(0), c.fetch_beat.eq(0)]
            fsm.next = "FETCH_DATA"


def fetch_states(c: SeqContext):
    """FETCH_DATA and PARSE: a retransmission's WQE beats (loaded into
    ``cur`` by WqeLoader, which sets its wqe_index and pkt_index in PARSE)."""
    m, fsm = c.m, c.fsm
    with fsm.State("FETCH_DATA"):
        m.d.comb += c.wqe_data.ready.eq(1)
        with m.If(c.wqe_data.valid):
            m.d.sync += c.fetch_beat.eq(c.fetch_beat + 1)
            with m.If(c.wqe_data.payload.last):
                fsm.next = "PARSE"

    with fsm.State("PARSE"):
        fsm.next = "OFFSET"


def offset_states(c: SeqContext):
    """OFFSET and OP_ERR: a part-sent WQE's, a retransmission's or a new WQE
    TAKE could not hand over waits for the back half and is handed over (the
    packet's offset, from its index, loaded with it), or the QP parks on its
    window; an unknown opcode's op_err record, once the back half is idle
    (the two share ``sent``)."""
    m, fsm, seq, q, flags = c.m, c.fsm, c.seq, c.cur_q, c.flags
    with fsm.State("OFFSET"):
        with m.If(c.window.full):
            window_park(c)
        with m.Elif(c.op_bad):
            with m.If(c.bfsm.ongoing("BIDLE")):
                fsm.next = "OP_ERR"
        with m.Elif(c.can_accept):
            hand_off(c)

    with fsm.State("OP_ERR"):
        # a WQE with an unknown opcode (taken in TAKE): no packet, one
        # sent record with op_err = 1 (reliability completes it LOC_QP_OP_ERR once
        # the QP's PSNs in flight are done, and puts the QP in ERROR); the QP takes
        # no new work until its qp_ctrl is written
        with m.If(seq.sent.ready):
            m.d.sync += [
                flags.wqe_active.bit_select(q, 1).eq(0),
                flags.op_halt.bit_select(q, 1).eq(1),
            ]
            fsm.next = "IDLE"


def back_states(c: SeqContext):
    """BIDLE, SEGMENT, EV_VALUE, EMIT (``bfsm``): the packet handed over is
    cut from ``bcur`` at ``offset``, gets its EV and PSN, and is emitted (or
    its QP parked for an EV or its max_wimm). SEGMENT chooses the EV only
    with room downstream, and waits for it, so that a packet is committed 2
    cycles after its EV was chosen and an EV state change binds every packet
    chosen after it. EMIT takes the next packet when the front half hands
    one over in its cycle."""
    m, b, q, flags, cur = c.m, c.bfsm, c.bq, c.flags, c.bcur
    with b.State("BIDLE"):
        with m.If(c.handoff):
            b.next = "SEGMENT"

    with b.State("SEGMENT"):
        # the bytes left are registered here (the MTU at the hand-off) and
        # the packet cut in EV_VALUE: a subtraction and a compare in one
        # cycle each
        m.d.sync += [
            c.seg_rest.eq(cur.length - c.offset),
            c.seg_first.eq(cur.pkt_index == 0),
            c.ev_index.eq(c.ev_choice.index),
        ]
        with m.If(~c.bretx):
            m.d.sync += flags.wimm_park.bit_select(q, 1).eq(c.wimm_hold)
        with m.If(c.wimm_hold):
            # park the QP at its max_wimm, keeping its WQE (written back the
            # next cycle, as below) until it is below its bound again
            m.d.sync += c.wqe_we.eq(1)
            b.next = "BIDLE"
        with m.Elif(c.ev_choice.found):
            with m.If(c.readies):
                b.next = "EV_VALUE"
        with m.Elif(c.bretx):
            m.d.sync += c.retx_no_ev_inc.eq(1)
            b.next = "BIDLE"
        with m.Else():
            # park the QP, keeping its WQE (written back the next cycle,
            # when bcur and bq are still this QP's), until one of its
            # EVs is GOOD
            m.d.sync += [c.wqe_we.eq(1), flags.ev_blocked.bit_select(q, 1).eq(1)]
            b.next = "BIDLE"

    with b.State("EV_VALUE"):
        mtu_bits = len(c.seg_mtu)
        last = (c.seg_rest[mtu_bits:] == 0) & ~(c.seg_mtu < c.seg_rest[:mtu_bits])
        m.d.sync += [
            c.seg_last.eq(last),
            c.seg_len.eq(Mux(last, c.seg_rest, c.seg_mtu)),
            c.emit_go.eq(c.readies),
            c.wqe_we.eq(c.readies & ~c.bretx),
        ]
        b.next = "EMIT"

    with b.State("EMIT"):
        with m.If(c.emit_go):
            flags.set_cursor(m, q, c.ev_index)
            with m.If(~c.bretx):
                m.d.comb += c.psn_advance.eq(1)
                active = flags.wqe_active.bit_select(q, 1).eq(~c.seg_last)
                if c.chain is None:
                    m.d.sync += active
                else:  # not where a chained TAKE sets it for the QP's next WQE
                    with m.If(~c.chain):
                        m.d.sync += active
            with m.If(c.handoff):
                b.next = "SEGMENT"
            with m.Else():
                b.next = "BIDLE"
        with m.Else():
            # no room yet: send in the cycle after the readies are seen
            m.d.sync += [c.emit_go.eq(c.readies), c.wqe_we.eq(c.readies & ~c.bretx)]

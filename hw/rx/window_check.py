"""The PSN window's check of a request (states CHECK_RD, CHECK, CHECK_X and
PROBE of ``RxPsnWindow``'s state machine): where its PSN falls against the
QP's expected PSN and window, whether it is received or in flight, whether a
LAST packet has room, and then place or discard, acknowledge or not.

``check_flags`` makes the flags CHECK registers and ``check_datapath``
their next values; ``entry_rows`` gives the tables the row of the packet
WRITEBACK enters; ``check_states`` builds the four states.
"""

from dataclasses import dataclass

from amaranth.hdl import Cat, Const, Mux, Signal

from hw.headers import Opcode
from hw.protocol import PSN_BITS, Syndrome

from .layouts import ReqKind
from .window_context import WindowContext

__all__ = ["CheckFlags", "check_datapath", "check_flags", "check_states", "entry_rows"]


@dataclass
class CheckFlags:
    """The checks of CHECK_X, registered in CHECK from the request, the QP row
    and the bitmap word as they are read (the tables do not change between
    CHECK and CHECK_X), so CHECK_X only combines flags."""

    d: Signal  # (psn - epsn) mod 2^24
    window_psns: Signal  # the QP's window, in PSNs
    inside: Signal  # d < window_psns
    bit_set: Signal  # the PSN's bit is set
    flight_hit: Signal  # the PSN is in flight
    is_last: Signal  # a LAST or ONLY packet
    has_imm: Signal  # ... WITH_IMMEDIATE
    discard: Signal  # a payload to drain if the packet is not placed
    slot: Signal  # the free in-flight slot
    pend_free: Signal  # the free pending entry
    # CHECK's verdicts on room for a LAST packet: no pending entry for it (an
    # out-of-order one needs two free, so one stays for the LAST packet at the
    # expected PSN), and no free slot in its QP's CQ (an out-of-order one
    # also needs the QP's held completions to leave one slot).
    pend_no_room: Signal
    cq_no_room: Signal
    # CQ room refused by the held completions alone, for a packet IDLE did
    # not take (peek): writes in flight make "out of order" and "held" differ
    # from the received PSNs' view, so the packet is checked again once they
    # have completed (CHECK_X goes back to IDLE without taking it)
    cq_retry: Signal
    # The QP's WITH_IMMEDIATE entries in the pending table, registered in
    # CHECK_RD from rq.qp (loaded in IDLE) and the entries (unchanged from IDLE
    # to WRITEBACK).
    pend_imm_q: Signal
    # The request's kind, one flag each (DROP and unknown kinds: kind_other),
    # and the free in-flight slot and pending entry one-hot (the enter
    # vectors, set in CHECK_X, need no decode of slot or pend_free).
    kind: dict
    kind_other: Signal
    slot_oh: Signal
    pend_oh: Signal
    values: list = None  # their next values, CHECK's assignments (check_datapath)


def check_flags(c: WindowContext) -> CheckFlags:
    """The flags, named as docs/timing.md names them."""
    win = c.win
    d = Signal(PSN_BITS)
    window_psns = Signal(range(win.mpr_max + 1))
    inside = Signal()
    bit_set = Signal()
    flight_hit = Signal()
    is_last = Signal()
    has_imm = Signal()
    discard = Signal()
    chk_slot = Signal(win.tag_bits)
    chk_pend_free = Signal(range(win.max_pending))
    chk_pend_no_room = Signal()
    chk_cq_no_room = Signal()
    cq_retry = Signal()
    pend_imm_q = Signal(range(win.max_pending + 1))
    chk_kind = {k: Signal(name=f"chk_kind_{k.name.lower()}")
                for k in (ReqKind.DATA, ReqKind.TRIM, ReqKind.NAK, ReqKind.PROBE)}
    chk_kind_other = Signal()
    chk_slot_oh = Signal(win.inflight)
    chk_pend_oh = Signal(win.max_pending)
    return CheckFlags(d, window_psns, inside, bit_set, flight_hit, is_last, has_imm, discard,
                      chk_slot, chk_pend_free, chk_pend_no_room, chk_cq_no_room, cq_retry,
                      pend_imm_q, chk_kind, chk_kind_other, chk_slot_oh, chk_pend_oh)


def check_datapath(c: WindowContext, k: CheckFlags):
    """The flags' next values (``k.values``, assigned in CHECK), from the
    request, the QP's row and configuration as read, and the bitmap word."""
    m, win, rq, q_rd, b_rd = c.m, c.win, c.rq, c.q_rd, c.b_rd
    flight, pending, W, lw = c.flight, c.pending, c.W, c.lw
    mpr_psns = Cat(Const(0, 7), win.cfg.mpr)
    # The QP's CQ: the CQEs written plus its completions held fill the ring;
    # or, for a packet not at the expected PSN, the held alone would with it,
    # so held completions never take the slot of the message they wait for
    # (it finds one once the host has consumed the CQEs written).
    cq_full_mask = (Const(0xFFFF, 16) << win.cfg.cq_log2)[:16]
    cq_used_full = Signal()
    cq_held_full = Signal()
    m.d.comb += [
        cq_used_full.eq(
            ((q_rd.data.cq_prod - win.cfg.cq_cons + k.pend_imm_q)[:16] & cq_full_mask).any()),
        cq_held_full.eq(
            (rq.psn != q_rd.data.epsn) & ((k.pend_imm_q + 1) & cq_full_mask).any()),
    ]
    d_c = Signal(PSN_BITS)
    window_psns_c = Signal(range(win.mpr_max + 1))
    m.d.comb += [
        d_c.eq(rq.psn - q_rd.data.epsn),
        window_psns_c.eq(
            Mux((win.cfg.mpr == 0) | (mpr_psns > win.mpr_max), win.mpr_max, mpr_psns)
        ),
    ]
    # rq.psn's position in its word, one-hot, registered from rq (loaded in
    # IDLE) every cycle like rq_le, so valid from CHECK_RD and MARK_RD on:
    # CHECK's bit_set is an AND-OR of it with the word read (3 LUT levels for
    # 32 bits) rather than a 32:1 mux selected by rq.psn (7 LUT levels;
    # docs/timing.md#rx-window), and MARK's marked bit is this register
    # rather than a LUT of rq_le.
    m.d.sync += c.rq_bit.eq(Cat(rq.psn[:lw] == i for i in range(W)))
    k.values = [
        k.d.eq(d_c),
        k.window_psns.eq(window_psns_c),
        k.inside.eq(d_c < window_psns_c),
        k.bit_set.eq((b_rd.data & c.rq_bit).any()),
        k.flight_hit.eq(flight.hit),
        k.is_last.eq(
            Cat(*[rq.opcode == op for op in (
                Opcode.WRITE_LAST, Opcode.WRITE_LAST_IMM, Opcode.WRITE_ONLY,
                Opcode.WRITE_ONLY_IMM
            )]).any()
        ),
        k.has_imm.eq(
            (rq.opcode == Opcode.WRITE_LAST_IMM) | (rq.opcode == Opcode.WRITE_ONLY_IMM)
        ),
        k.discard.eq(rq.payload_len != 0),
        k.slot.eq(flight.free_slot),
        k.pend_free.eq(pending.free_slot),
        k.pend_no_room.eq(
            ~pending.any_free | ((rq.psn != q_rd.data.epsn) & ~pending.two_free)
        ),
        k.cq_no_room.eq(~win.cfg.cq_enable | cq_used_full | cq_held_full),
        k.cq_retry.eq(c.peek & win.cfg.cq_enable & ~cq_used_full & cq_held_full),
        k.kind_other.eq(~Cat(rq.kind == kind for kind in k.kind).any()),
        k.slot_oh.eq(flight.free_onehot),
        k.pend_oh.eq(pending.free_onehot),
    ] + [k.kind[kind].eq(rq.kind == kind) for kind in k.kind]


def entry_rows(c: WindowContext, k: CheckFlags):
    """The rows WRITEBACK enters in the tables' LUT RAM for an accepted
    packet, and the pending table's view of the operation."""
    rq, pending = c.rq, c.pending
    c.m.d.comb += [
        c.flight.write_slot.eq(k.slot),
        pending.write_slot.eq(k.pend_free),
        pending.row.imm_flag.eq(k.has_imm),
        pending.row.opcode.eq(rq.opcode),
        pending.row.imm.eq(rq.imm),
        pending.row.dma_len.eq(rq.dma_len),
        pending.request.qp.eq(rq.qp),
        pending.request.psn.eq(rq.psn),
        pending.request.imm.eq(k.has_imm),
        pending.request.tag.eq(k.slot),
        pending.qp.eq(c.qp),
        pending.epsn.eq(c.qs.epsn),
        pending.tag.eq(c.done_tag),
    ]


def check_states(c: WindowContext, k: CheckFlags):
    """CHECK_RD (the QP's row arrives), CHECK (the flags registered), CHECK_X
    (the verdict: place or discard, count, then WRITEBACK, an ACK/NAK, a
    probe's answer, or IDLE) and PROBE."""
    m, fsm, cnt, rq, qs, cfg = c.m, c.fsm, c.cnt, c.rq, c.qs, c.cfg
    place_cmd, place_valid, ack_syn = c.place_cmd, c.place_valid, c.ack_syn
    d, inside, bit_set, flight_hit = k.d, k.inside, k.bit_set, k.flight_hit
    discard, is_last, has_imm, chk_kind = k.discard, k.is_last, k.has_imm, k.kind
    P = c.win.max_pending

    with fsm.State("CHECK_RD"):
        m.d.sync += [
            c.qs_load.eq(1),
            k.pend_imm_q.eq(c.pending.imm_count),
        ]
        fsm.next = "CHECK"
    with fsm.State("CHECK"):
        m.d.sync += k.values
        fsm.next = "CHECK_X"
    with fsm.State("CHECK_X"):
        m.d.sync += [
            c.bm_word.eq(c.widx(qs.epsn)),  # for ACK0
            place_cmd.addr.eq(rq.va),
            place_cmd.len.eq(rq.payload_len),
            place_cmd.discard.eq(1),
            place_cmd.notify.eq(0),
            place_cmd.inline.eq(0),
            place_cmd.tag.eq(k.slot),
            ack_syn.eq(Syndrome.ACK),
        ]
        # a packet IDLE peeked at is taken here unless it is checked again
        m.d.comb += c.win.req.ready.eq(c.peek & ~k.cq_retry)
        # One branch per request kind; the kinds' flags are registered from
        # rq.kind against distinct constants, so at most one is set (OneOf: no
        # priority between the branches).
        with fsm.OneOf() as when:
            with when(chk_kind[ReqKind.DATA]):
                with m.If(k.cq_retry):
                    fsm.next = "IDLE"
                # The bit is only meaningful inside the window: beyond it the
                # ring aliases PSNs of the current window.
                with m.Elif(d[23] | (inside & (bit_set | flight_hit))):
                    m.d.comb += cnt.duplicate.eq(1)
                    m.d.sync += place_valid.eq(discard)
                    fsm.next = "ACK0"
                with m.Elif(~inside):
                    m.d.comb += cnt.out_of_window.eq(1)
                    m.d.sync += place_valid.eq(discard)
                    fsm.next = "WRITEBACK"
                with m.Elif(is_last & k.pend_no_room):
                    m.d.comb += cnt.wimm_full.eq(1)
                    m.d.sync += place_valid.eq(discard)
                    fsm.next = "WRITEBACK"
                with m.Elif(has_imm & k.cq_no_room):
                    # Not acknowledged until its CQE has a slot: the sender
                    # resends it (a completion is never lost once acknowledged).
                    m.d.comb += cnt.cq_full.eq(1)
                    m.d.sync += place_valid.eq(discard)
                    fsm.next = "WRITEBACK"
                with m.Else():
                    # Accepted: in flight until its B response (the
                    # tables are written in WRITEBACK, next).
                    m.d.sync += [
                        c.accept.eq(1),
                        c.flight_enter.eq(k.slot_oh),
                        c.pend_enter.eq(k.pend_oh & is_last.replicate(P)),
                    ]
                    m.d.sync += [
                        place_valid.eq(1),
                        place_cmd.discard.eq(0),
                        place_cmd.notify.eq(1),
                    ]
                    fsm.next = "WRITEBACK"
            with when(chk_kind[ReqKind.TRIM]):
                m.d.sync += place_valid.eq(discard)
                # Only a trim of a PSN still awaited (inside the window, not
                # received, not being written) is answered; any other is
                # stale (late or forged) and changes nothing.
                with m.If(d[23] | ~inside | bit_set | flight_hit):
                    m.d.comb += cnt.trim_stale.eq(1)
                    fsm.next = "WRITEBACK"
                with m.Elif(cfg.trim_nack):
                    m.d.comb += cnt.trimmed.eq(1)
                    m.d.sync += ack_syn.eq(Syndrome.NAK_TRIMMED)
                    fsm.next = "ACK0"
                with m.Else():
                    m.d.comb += cnt.trimmed.eq(1)
                    fsm.next = "WRITEBACK"
            with when(chk_kind[ReqKind.NAK]):
                m.d.sync += [place_valid.eq(discard), ack_syn.eq(rq.syndrome)]
                fsm.next = "ACK0"
            with when(chk_kind[ReqKind.PROBE]):
                m.d.sync += place_valid.eq(discard)
                fsm.next = "PROBE"
            with when(k.kind_other):
                m.d.sync += place_valid.eq(discard)
                fsm.next = "IDLE"

    with fsm.State("PROBE"):
        with m.If(~c.win.ack.valid):
            # (ack_job follows the probe's answer while ack_valid is clear)
            m.d.comb += [cnt.probes_answered.eq(1), c.ack_reader.send.eq(1)]
            fsm.next = "IDLE"

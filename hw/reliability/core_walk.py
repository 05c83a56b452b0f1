"""The reliability core's per-PSN walk (PICK, LCNT, WALK, USE) and the actions of
SENT and USE. Builders of ``ReliabilityCore`` (hw/reliability/core_ctx.py)."""

from amaranth.hdl import Cat, Const, Mux, Signal

from hw.bits import below_const, bit_at, greater_than_const, one_hot_select, onehot, popcount

from .core_layouts import W_ADV, W_LOSS, W_SACK, W_TMO
from .layouts import CqeStatus, EvState, QpState, RetxReason


def walk_states(ctx):
    """PICK, LCNT, WALK and USE: the per-PSN walk's states."""
    m, pick_off_rd, pick_off, sent_psns = ctx.m, ctx.pick_off_rd, ctx.pick_off, ctx.sent_psns
    q, slot, st, fsm, walk_psn, cur = ctx.q, ctx.slot, ctx.st, ctx.fsm, ctx.walk_psn, ctx.cur
    pick_any, room_walk, off_bit, W = ctx.pick_any, ctx.room_walk, ctx.off_bit, ctx.W
    walk_kind, progress, infl, adv, e_ev = ctx.walk_kind, ctx.progress, ctx.infl, ctx.adv, ctx.e_ev
    newly, e_retx, rtt_ts, e_ts = ctx.newly, ctx.e_retx, ctx.rtt_ts, ctx.e_ts
    rtt_valid, count, loss_hole, thr_high = ctx.rtt_valid, ctx.count, ctx.loss_hole, ctx.thr_high
    cfg, adv_unsent = ctx.cfg, ctx.adv_unsent

    # the walk's per-PSN entry: read in PICK at the PSN it picks, held through LCNT
    # and USE (the read address is pick_off_rd's, pick_off's in PICK)
    m.d.comb += [sent_psns.read_qp.eq(q), sent_psns.read_slot.eq(slot(pick_off_rd)),
                 sent_psns.hold.eq(st.LCNT | st.USE)]
    with fsm.State("PICK"):
        # PICK's flip-flop its enable: in the last cycle of PICK before USE or LCNT,
        # pick_off is the PSN's (una changes in PICK only when no PSN is left)
        m.d.sync += walk_psn.eq(cur.una + pick_off)
        with m.If(pick_any):
            # the room for USE's pushes is awaited here: PICK and LCNT push
            # nothing, and PICK's values hold while it waits
            with m.If(room_walk):
                m.d.sync += off_bit.eq(onehot(pick_off, W))
                with m.If(walk_kind[W_SACK]):
                    m.d.sync += progress.eq(1)  # a new SACK bit
                with m.If(walk_kind[W_LOSS]):
                    fsm.next = "LCNT"
                with m.Else():
                    fsm.next = "USE"
        with m.Else(), fsm.OneOf() as when:  # walk_kind is one-hot
            with when(walk_kind[W_ADV]):
                m.d.sync += [
                    infl.eq(infl - adv),
                    cur.una.eq(cur.una + adv),  # sacked, fast_done: in USE
                ]
                with m.If(adv != 0):
                    m.d.sync += progress.eq(1)
                fsm.next = "SACK"
            with when(walk_kind[W_SACK]):
                fsm.next = "NAK"
            with when(walk_kind[W_LOSS]):
                fsm.next = "CC"
            with when(walk_kind[W_TMO]):
                fsm.next = "FINAL"

    def deliver():
        m.d.sync += [cur.ev_loss[e_ev].eq(0), newly.eq(newly + 1)]
        with m.If(~e_retx):
            m.d.sync += [rtt_ts.eq(e_ts), rtt_valid.eq(1)]

    # registered every cycle: in LCNT, the SACKed PSNs above the PSN in use (pick_off in
    # PICK, which leaves sacked as it is) counted per group of 4 PSNs
    sacked_above_4 = []
    for g in range(0, W, 4):
        # bit i: SACKed and above pick_off (pick_off < i, not pick_off > i - 1)
        above = Cat(*[cur.sacked[i] & ~greater_than_const(pick_off, i - 1) if i else Const(0, 1)
                      for i in range(g, min(g + 4, W))])
        count_4 = Signal(3, name=f"sacked_above_{g}")
        m.d.sync += count_4.eq(popcount(above))
        sacked_above_4.append(count_4)
    with fsm.State("LCNT"):
        m.d.sync += off_bit.eq(off_bit)
        m.d.sync += loss_hole.eq(~thr_high & (sum(sacked_above_4)
                                              >= cfg.sack_threshold[: (W + 1).bit_length()]))
        fsm.next = "USE"

    with fsm.State("WALK"):  # walk_mask set: the first pick is registered
        with m.If(adv_unsent):
            count("acks_unsent")
            fsm.next = "IDLE"
        with m.Else():
            # the ADV walk's WALK follows ACK_ADV (the other walks set walk_kind)
            with m.If(walk_kind[W_ADV]):
                count("acks")
            fsm.next = "PICK"

    with fsm.State("USE"):  # actions below, under st.USE
        with m.If(walk_kind[W_LOSS] & ~loss_hole):
            fsm.next = "CC"
        with m.Else():
            fsm.next = "PICK"
    ctx.export(deliver=deliver)


def sent_and_use_actions(ctx):
    """SENT's per-PSN write and USE's actions by walk kind."""
    m, E, s, st, sent_psns, q, wbits = ctx.m, ctx.E, ctx.s, ctx.st, ctx.sent_psns, ctx.q, ctx.wbits
    e_ev, ebits, e_last, now_ts = ctx.e_ev, ctx.ebits, ctx.e_last, ctx.now_ts
    sent_new, cur, una_chg, sent_moves = ctx.sent_new, ctx.cur, ctx.una_chg, ctx.sent_moves
    want_arm, sent_d, infl, count = ctx.want_arm, ctx.sent_d, ctx.infl, ctx.count
    sent_operr, adv_raw, adv_below = ctx.sent_operr, ctx.adv_raw, ctx.adv_below
    sack_rel, infl_mask_q, infl_mask = ctx.sack_rel, ctx.infl_mask_q, ctx.infl_mask
    nak_mask, use_mask, walk_mask, use_of = ctx.nak_mask, ctx.use_mask, ctx.walk_mask, ctx.use_of
    deliver, wqe_cpl_inc, push_cpl = ctx.deliver, ctx.wqe_cpl_inc, ctx.push_cpl
    off_bit, loss_hole, push_retx, blamed = ctx.off_bit, ctx.loss_hole, ctx.push_retx, ctx.blamed
    drops_inc, loss_inc, bad_ok, push_ev = ctx.drops_inc, ctx.loss_inc, ctx.bad_ok, ctx.push_ev
    to_bad = ctx.to_bad

    # ---- SENT's and USE's actions ------------------------------------------------
    # The per-PSN writes are SENT's, made the cycle after it (FINAL or IDLE) from
    # flip-flops (SentPsns), so that the retransmission's window test (a carry
    # chain) is not in front of the LUT RAM's write enables. The next read of the
    # entries is PICK's, at least 5 cycles later (after LOAD of another event).
    m.d.comb += [
        sent_psns.write_qp.eq(q), sent_psns.write_slot.eq(s.psn[:wbits] if wbits else 0),
        sent_psns.write_ev.eq(s.ev_index[:ebits]), sent_psns.write_retx.eq(s.retx),
        sent_psns.write_last.eq(s.last), sent_psns.write_ts.eq(now_ts),
    ]
    with m.If(st.SENT):
        with m.If(sent_new):
            m.d.comb += sent_psns.record.eq(1)
            m.d.sync += [
                cur.nxt.eq(s.psn + 1),
                cur.fresh.eq(0),
                cur.wqe_sent.eq(s.wqe_index + 1),
            ]
            # una (= una0 here) moves only for the first PSN (una_chg is set
            # here: FINAL follows)
            with m.If(cur.fresh):
                m.d.sync += [cur.una.eq(s.psn), una_chg.eq(sent_moves),
                             cur.wqe_cpl.eq(s.wqe_index)]
            with m.If(~cur.armed):
                m.d.sync += want_arm.eq(1)
        # a retransmission (RTS, in flight) rewrites its PSN's EV
        with m.Elif((cur.state == QpState.RTS) & s.retx & ~cur.fresh
                    & below_const(sent_d, infl, len(infl))):
            m.d.comb += sent_psns.rewrite.eq(1)
    # a sent record neither tracked nor a retransmission in flight: counted the
    # cycle after SENT, from flip-flops (SENT's, registered, and no per-PSN write)
    after_sent = Signal()
    after_operr = Signal()
    m.d.sync += [after_sent.eq(st.SENT), after_operr.eq(sent_operr)]
    with m.If(after_sent & ~sent_psns.ev_written & ~after_operr):
        count("sent_dropped")

    # the walk's PSNs: set by the state that starts a walk, then USE takes one PSN
    # off at each step; an AND-OR of the (exclusive) states rather than a chain of
    # muxes. TIMEOUT sets it whether it starts a walk or not (read only in walks).
    walk_set = [(st.ACK_ADV, Mux(adv_raw[23], 0, adv_below)),
                (st.SACK_ALIGN, sack_rel & infl_mask_q & ~cur.sacked),
                (st.NAK, nak_mask),
                (st.TIMEOUT, infl_mask & ~cur.sacked),
                (st.USE, use_mask)]
    walk_sel = Cat(*[sel for sel, _ in walk_set])
    with m.If(walk_sel.any()):
        m.d.sync += walk_mask.eq(one_hot_select(walk_sel, [v for _, v in walk_set]))

    # USE's actions by walk kind, each under its strobe (use_of: the kind's
    # step, a flip-flop), one copy for the working copy's fields (cur), one for
    # the pushes (push), one for a delivery (dlv), one for the EVs' loss evidence
    with m.If(use_of(W_ADV, "cur")):
        # the walk takes the PSNs from una up in order: each step shifts
        # sacked and fast_done down by one, so bit 0 is this PSN's
        m.d.sync += [cur.sacked.eq(cur.sacked[1:]),
                     cur.fast_done.eq(cur.fast_done[1:])]
        with m.If(cur.sacked[0]):
            m.d.sync += cur.sacked_n.eq(cur.sacked_n - 1)
        with m.If(e_last):
            m.d.sync += cur.wqe_cpl.eq(wqe_cpl_inc)
    with m.If(use_of(W_ADV, "push") & e_last):
        push_cpl(cur.wqe_cpl, CqeStatus.SUCCESS)
    with m.If(use_of(W_SACK, "cur")):  # the SACK walk's PSNs are not SACKed yet
        m.d.sync += [cur.sacked.eq(cur.sacked | off_bit), cur.sacked_n.eq(cur.sacked_n + 1)]
    # a PSN delivered: by the ADV walk unless SACKed before, by every SACK walk step
    with m.If((use_of(W_ADV, "dlv") & ~cur.sacked[0]) | use_of(W_SACK, "dlv")):
        deliver()
    with m.If(use_of(W_LOSS, "push") & loss_hole):
        push_retx(RetxReason.SACK_HOLE)
    with m.If(use_of(W_LOSS, "cur") & loss_hole):
        m.d.sync += cur.fast_done.eq(cur.fast_done | off_bit)
    with m.If(use_of(W_TMO, "push")):
        push_retx(RetxReason.TIMEOUT)
        m.d.sync += blamed.eq(1)
    # Loss evidence (USE): each hole of the loss walk, and the timeout walk's first
    # PSN, the oldest in flight, which the timer waited on (blamed: the walk is past
    # it; the PSNs sent after it may still be on their way); the EV may become
    # ASSUMED_BAD (never below the floor). Written per EV, an AND of e_ev's decode
    # and that EV's own flip-flops, rather than through selects on e_ev, which put
    # a select of the EVs' flags behind the block RAM's output.
    def blame_on(tag):
        return (use_of(W_LOSS, tag) & loss_hole) | (use_of(W_TMO, tag) & ~blamed)
    for i in range(E):
        hit = Signal(name=f"blame_{i}")
        m.d.comb += hit.eq(blame_on("ev") & (e_ev == i))
        with m.If(hit):
            m.d.sync += [cur.ev_drops[i].eq(drops_inc[i]), cur.ev_loss[i].eq(loss_inc[i])]
            with m.If(bad_ok[i]):
                m.d.sync += cur.ev_state[i].eq(EvState.ASSUMED_BAD)
    with m.If(blame_on("push")):
        with m.If(bit_at(bad_ok, e_ev)):
            push_ev()
            count("ev_to_bad")
        with m.Elif(bit_at(to_bad, e_ev)):
            count("floor_blocked")

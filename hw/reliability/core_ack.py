"""The reliability core's ACK, SACK and NAK states: ACK, ACK_ADV; SACK, SACK_ALIGN,
NAK. Builders of ``ReliabilityCore`` (hw/reliability/core_ctx.py)."""

from amaranth.hdl import Mux, Signal

from hw.bits import all_below, bit_at, onehot

from .core_layouts import W_ADV, W_LOSS, W_SACK
from .layouts import QpState, RetxReason
from .sack_align import SackAlign


def ack_states(ctx):
    """ACK and ACK_ADV: the cumulative advance."""
    m, adv, W, fsm, wbits, adv_raw = ctx.m, ctx.adv, ctx.W, ctx.fsm, ctx.wbits, ctx.adv_raw
    a_cum_next, cur, st, count, infl = ctx.a_cum_next, ctx.cur, ctx.st, ctx.count, ctx.infl
    walk_kind = ctx.walk_kind

    # ---- ACK / NAK ------------------------------------------------------------
    adv_below = Signal(W)
    with fsm.State("ACK"):
        # the advance, and the walk's mask from the low bits alone (ACK_ADV applies
        # the sign), loaded in ACK whether the ACK is ignored or not (ACK's
        # flip-flop is their enable): only ACK_ADV and SACK read them
        low = wbits + 1
        m.d.sync += [adv_raw.eq(a_cum_next - cur.una),
                     adv_below.eq(all_below((a_cum_next[:low] - cur.una[:low])[:low], W))]
        with m.If((cur.state != QpState.RTS) | cur.fresh):
            count("acks_ignored")
            fsm.next = "IDLE"
        with m.Else():
            fsm.next = "ACK_ADV"

    adv_n = Mux(adv_raw[23], 0, adv_raw[: wbits + 1])  # PSNs acknowledged (ACK_ADV)
    # an ACK of PSNs not sent yet: registered in ACK_ADV (0 in other states), it
    # ends the event in WALK (which counts the other ACKs: the count is not in
    # ACK_ADV, behind the window test)
    adv_unsent = Signal()
    beyond = (adv_raw[len(infl):] != 0) | (adv_raw[: len(infl)] > infl)
    unsent = ~adv_raw[23] & beyond
    m.d.sync += adv_unsent.eq(st.ACK_ADV & unsent)
    with fsm.State("ACK_ADV"):  # the ACK counted in WALK, from adv_unsent
        m.d.sync += [adv.eq(adv_n), walk_kind.eq(1 << W_ADV)]
        fsm.next = "WALK"
    ctx.export(adv_below=adv_below, adv_unsent=adv_unsent)


def sack_nak_states(ctx):
    """SACK, SACK_ALIGN and NAK: the SACK walk's mask and the NAK's retransmission."""
    m, core, st, a_base, a_psn = ctx.m, ctx.core, ctx.st, ctx.a_base, ctx.a_psn
    a_cum_next, infl, W, adv_raw, cur = ctx.a_cum_next, ctx.infl, ctx.W, ctx.adv_raw, ctx.cur
    a_bitmap, fsm, walk_kind, count = ctx.a_bitmap, ctx.fsm, ctx.walk_kind, ctx.count
    a_trim, r_retx, lost_cand, push_retx = ctx.a_trim, ctx.r_retx, ctx.lost_cand, ctx.push_retx
    nak_cut, a_fatal = ctx.nak_cut, ctx.a_fatal

    # The SACK bitmap and the NAK's PSN against the new una (hw/reliability/
    # sack_align.py), captured in SACK: a_base, a_psn and a_cum_next are set from IDLE
    # on, and una and infl change only at the end of PICK, the cycle before SACK
    # (the una before it is the ACK's when the ACK is behind it: adv_back)
    m.submodules.sack_align = sack_align = SackAlign(window=W, sack_bits=core.sack_bits)
    adv_back = adv_raw[23]  # set in ACK
    m.d.comb += [
        sack_align.una.eq(cur.una), sack_align.cum_next.eq(a_cum_next),
        sack_align.behind.eq(adv_back), sack_align.sack_base.eq(a_base),
        sack_align.nak_psn.eq(a_psn), sack_align.bitmap.eq(a_bitmap),
        sack_align.infl.eq(infl), sack_align.capture.eq(st.SACK),
    ]
    # the SACKed PSNs against una (SACK_ALIGN); the NAK's PSN: in flight (nak_in),
    # at offset nak_off (NAK)
    sack_rel = sack_align.sacked
    nak_in = sack_align.nak_in
    nak_off = sack_align.nak_off
    with fsm.State("SACK"):
        fsm.next = "SACK_ALIGN"
    with fsm.State("SACK_ALIGN"):
        m.d.sync += walk_kind.eq(1 << W_SACK)
        fsm.next = "WALK"

    # registered every cycle: valid in NAK, whose previous cycle (PICK) changes
    # neither sacked nor the NAK's offset
    nak_hit = Signal()
    m.d.sync += nak_hit.eq(nak_in & ~bit_at(cur.sacked, nak_off))
    # the NAK's PSN already retransmitted by a NAK or a SACK hole since the last
    # timeout (fast_done): the NAK is refused and counted, no retransmission and no
    # window cut (one of each per PSN between timeouts; the timer resends a copy
    # lost again). Registered outside NAK and held in it: NAK marks the PSN in
    # fast_done while it waits for room, which must not refuse its own request.
    nak_again = Signal()
    with m.If(~st.NAK):
        m.d.sync += nak_again.eq(bit_at(cur.fast_done, nak_off))
    nak_go = Signal()
    m.d.comb += nak_go.eq(nak_hit & ~nak_again)

    # the loss walk's holes (NAK): in flight, not SACKed, not yet retransmitted,
    # nor the PSN that the NAK retransmits
    nak_retx = Signal()
    m.d.comb += nak_retx.eq(a_trim & r_retx & nak_go)
    nak_bit = Signal(W)  # registered every cycle: valid in NAK, as nak_hit
    m.d.sync += nak_bit.eq(onehot(nak_off, W))
    nak_mask = lost_cand & ~Mux(nak_retx, nak_bit, 0)
    with fsm.State("NAK"):
        m.d.sync += walk_kind.eq(1 << W_LOSS)
        # the NAK's PSN is marked retransmitted while its request waits for room
        # too (the walk's holes leave it out either way)
        with m.If(a_trim & nak_hit):
            m.d.sync += cur.fast_done.eq(cur.fast_done | nak_bit)
        with m.If(a_trim):
            with m.If(r_retx):
                count("naks_trimmed")
                with m.If(nak_go):
                    push_retx(RetxReason.NAK_TRIMMED)
                    m.d.sync += nak_cut.eq(1)
                with m.Elif(nak_hit):
                    count("naks_trim_repeat")
                fsm.next = "WALK"
        with m.Elif(a_fatal):
            fsm.next = "CC"  # no loss walk: nothing is sent again, CC goes on to FLUSH
        with m.Else():
            fsm.next = "WALK"
    ctx.export(sack_rel=sack_rel, nak_mask=nak_mask)

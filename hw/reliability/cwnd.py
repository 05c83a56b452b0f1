"""The congestion window's datapath of the reliability core. See ``CwndUnit``."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.bits import shift_right
from hw.protocol import PSN_BITS

__all__ = ["CwndUnit"]


class CwndUnit(wiring.Component):
    """One step of a QP's congestion window (docs/reliability.md, "Congestion
    window"), for the core's state machine, which holds the QP's fields steady and
    writes the results back into its working copy.

    The step: the RTT sample (``now_ts - rtt_ts`` less the ACK's service time
    ``svc``, when ``rtt_valid``) against ``target_rtt`` decides ``high`` (else the
    QP's ``delay_high`` stands); the base is ``cwnd``, less ``cwnd_trim_dec`` (not
    below 0) after a NAK TRIMMED's cut (``nak_cut``). With ECE: when ``high`` and
    the last decrease's window is over (``una`` past ``md_recover``, or no decrease
    active), the base less
    max(1, base >> ``cwnd_md_shift``), and a decrease starts (``md_start``). Else the
    active decrease ends once ``una`` is past ``md_recover`` (``md_end``), and
    ``newly`` PSNs add ``newly`` x ai (``cwnd_ai`` when ``high``, else
    ``cwnd_ai_fast``) to the accumulator ``cwnd_acc`` (in 1/256 of a PSN): at base x
    256 the base grows by 1 and the accumulator keeps the rest, else it saturates at
    2^24 - 1. The new window is clamped to ``cwnd_min`` (0 reads 1) ..
    min(``cwnd_max``, ``window``).

    Interface (plain signals: the core's working copy is the datapath's state):

    ``params``    In(GlobalParams); ``now_ts`` In(16): the time in RTT units.
    ``cwnd``, ``cwnd_acc``, ``md_active``, ``md_recover``, ``una``, ``delay_high``,
                  ``newly``, ``rtt_ts``, ``rtt_valid``, ``nak_cut``, ``ece``: In, the
                  QP's values, steady from 2 cycles before ``start`` to ``update``
                  (``rtt_ts``, ``now_ts``: the RTT is measured 2 cycles before
                  ``start``).
    ``svc``       In(16): the ACK's service time in RTT units, steady from 2 cycles
                  before ``start``: ``high`` when the sample is at least
                  ``target_rtt + svc``.
    ``rtt``       Out(16): ``now_ts - rtt_ts`` of the cycle before, registered every
                  cycle (the sample before ``svc`` is taken off: valid in ``start``).
    ``start``     In(1): the step's first cycle (CC): ``high`` (comb, the value to
                  write to ``delay_high``) and the base are registered.
    ``update``    In(1): 3 cycles after ``start`` (CC_NEW): ``new_acc``,
                  ``md_start`` and ``md_end`` (comb) are valid, and the unclamped
                  window is registered.
    ``init``      In(1): loads ``cwnd_init`` as the unclamped window instead (a
                  QP's RTS entry; LOAD, at least 2 cycles before its reader).
    ``new_cwnd``  Out(16): the clamped window, 2 cycles after ``update`` or ``init``
                  (registered every cycle).
    ``cwnd_floor`` Out(16): ``cwnd_min`` (0 reads 1), registered.

    Latency: 5 cycles from ``start`` to ``new_cwnd`` (every stage registered: the
    compares and subtractions are carry chains). Throughput: one step per 5 cycles
    (the stages' registers are shared by one step).
    """

    def __init__(self, *, window, layout):
        self.window = window
        super().__init__({
            "params": In(layout),
            "now_ts": In(16),
            "cwnd": In(16), "cwnd_acc": In(24), "md_active": In(1), "md_recover": In(PSN_BITS),
            "una": In(PSN_BITS), "delay_high": In(1), "newly": In(range(window + 1)),
            "rtt_ts": In(16), "rtt_valid": In(1), "svc": In(16), "rtt": Out(16),
            "nak_cut": In(1), "ece": In(1),
            "start": In(1), "update": In(1), "init": In(1),
            "high": Out(1), "new_acc": Out(24), "md_start": Out(1), "md_end": Out(1),
            "new_cwnd": Out(16), "cwnd_floor": Out(16),
        })

    def elaborate(self, platform):
        m = Module()
        P = self.params
        W = self.window

        # window bounds, registered (global parameters)
        cmin = Signal(16)
        cmax = Signal(16)
        m.d.sync += [cmin.eq(Mux(P.cwnd_min == 0, 1, P.cwnd_min)),
                     cmax.eq(Mux(P.cwnd_max > W, W, P.cwnd_max))]
        m.d.comb += self.cwnd_floor.eq(cmin)

        # set in the step's first cycle (start)
        high_q = Signal()      # the RTT is above target (or was, without a sample)
        ai = Signal(16)        # the increase per PSN (a register in front of inc_prod)
        past = Signal(PSN_BITS)    # una - md_recover
        base = Signal(17)      # the window the step starts from
        # registered every cycle from base, ai, high_q, past (set in start), newly and
        # the QP's fields (steady until update): valid 2 cycles after start (dec_step,
        # inc_prod, base_inc, recovered, may_cut) and 3 (acc_sum, cut_window, cut, some)
        dec_step = Signal(16)
        base_inc = Signal(17)
        cut_window = Signal(17)
        inc_prod = Signal(21)
        acc_sum = Signal(25)
        recovered = Signal()   # una is past md_recover
        may_cut = Signal()     # no decrease active, or its window is over
        unclamped = Signal(17)  # the new window (update) or cwnd_init (init)

        # the bounds applied, registered every cycle (their compares are carry chains)
        m.d.sync += self.new_cwnd.eq(Mux(unclamped[16] | (unclamped < cmin), cmin,
                                         Mux(unclamped > cmax, cmax, unclamped)))
        with m.If(self.init):
            m.d.sync += unclamped.eq(P.cwnd_init)
        # the decrease step base >> cwnd_md_shift, at least 1: its zero test on the
        # bits of base that the shift keeps (a mask), both from the shift registered
        md_shift = Signal(4)
        md_keep = Signal(17)
        # (bit i < 16 is kept when shift <= i: always for bit 15, the 4-bit
        # shift's largest value; bit 16 lands in the 16-bit step when shift != 0)
        m.d.sync += [md_shift.eq(P.cwnd_md_shift),
                     md_keep.eq(Cat(*[P.cwnd_md_shift <= i for i in range(15)], Const(1, 1),
                                    P.cwnd_md_shift != 0))]
        dec = Signal(16)
        m.d.comb += dec.eq(shift_right(base, md_shift)[:16])
        m.d.sync += [
            dec_step.eq(Mux((base & md_keep) == 0, 1, dec)),
            inc_prod.eq(self.newly * ai),
            base_inc.eq(base + 1),
            recovered.eq(~past[23] & (past != 0)),
            may_cut.eq(~self.md_active | (~past[23] & (past != 0))),
            acc_sum.eq(self.cwnd_acc + inc_prod), cut_window.eq(base - dec_step),
        ]
        # the increase's test acc_sum >= base << 8 and its remainder, as two registered
        # subtractions rather than a compare behind acc_sum: acc_room = (base << 8) -
        # cwnd_acc (valid 2 cycles after start), then acc_diff = inc_prod - acc_room =
        # acc_sum - (base << 8) (valid 3 cycles after start, with acc_sum), whose sign is
        # the test (registered as its sign and the low 24 bits, the remainder's width)
        acc_room = Signal(signed(26))
        acc_short = Signal()
        acc_diff = Signal(24)
        diff = inc_prod - acc_room
        m.d.sync += [acc_room.eq((base << 8) - self.cwnd_acc),
                     acc_short.eq(diff[-1]), acc_diff.eq(diff[:24])]
        # update's other selects, registered every cycle: valid 3 cycles after start
        # (high_q set in start, may_cut valid from 2 cycles after it, newly steady)
        cut = Signal()
        some = Signal()
        m.d.sync += [cut.eq(high_q & may_cut), some.eq(self.newly != 0)]
        # the RTT sample less the service time against the target, over two registered
        # stages (a subtraction and a compare, carry chains both): rtt - svc >= target
        # is rtt >= target + svc, whose sum is registered from steady inputs
        rtt = self.rtt
        rtt_limit = Signal(17)
        rtt_high = Signal()
        m.d.sync += [rtt.eq(self.now_ts - self.rtt_ts), rtt_limit.eq(P.target_rtt + self.svc),
                     rtt_high.eq(rtt >= rtt_limit)]

        m.d.comb += self.high.eq(Mux(self.rtt_valid, rtt_high, self.delay_high))
        with m.If(self.start):
            # the window of the last decrease is over once una has passed md_recover
            m.d.sync += [
                high_q.eq(self.high),
                ai.eq(Mux(self.high, P.cwnd_ai, P.cwnd_ai_fast)),
                past.eq(self.una - self.md_recover),
                base.eq(Mux(self.nak_cut,
                            Mux(self.cwnd > P.cwnd_trim_dec, self.cwnd - P.cwnd_trim_dec, 0),
                            self.cwnd)),
            ]

        new_window = Signal(17)
        m.d.comb += [new_window.eq(base), self.new_acc.eq(self.cwnd_acc)]
        with m.If(self.ece):
            with m.If(cut):
                m.d.comb += [new_window.eq(cut_window), self.md_start.eq(1)]
        with m.Else():
            with m.If(self.md_active & recovered):
                m.d.comb += self.md_end.eq(1)
            with m.If(some):
                with m.If(~acc_short):  # acc_sum >= base << 8
                    m.d.comb += [new_window.eq(base_inc), self.new_acc.eq(acc_diff)]
                with m.Else():
                    m.d.comb += self.new_acc.eq(Mux(acc_sum[24], 0xFFFFFF, acc_sum))
        with m.If(self.update):
            m.d.sync += unclamped.eq(new_window)
        return m

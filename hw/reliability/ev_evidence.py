"""What one more piece of loss evidence would do to each of a QP's EVs, for the
reliability core. See ``EvEvidence``."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .layouts import EvState

__all__ = ["EvEvidence"]


class EvEvidence(wiring.Component):
    """Per EV of the QP's working copy, registered every cycle: its loss run and drop
    count after one more loss (``loss_inc``, saturating at 15; ``drops_inc``,
    saturating at 0xFFFF), whether that loss turns it ASSUMED_BAD (``to_bad``: GOOD,
    ``threshold`` set and the loss run reaching it) and whether the floor allows it
    (``bad_ok``: more GOOD EVs than ``min_active``; folded in here so that the
    core's write of the EV's state waits on one flip-flop of the EV's).

    Interface: ``ev_state``, ``ev_loss``, ``ev_drops``: In, the QP's per-EV fields;
    ``threshold`` In(4): ``ev_loss_threshold`` (0: never); ``min_active`` In(8):
    ``ev_min_active``; ``loss_inc``, ``drops_inc``, ``to_bad``, ``bad_ok``: Out.
    Latency 1 cycle (registered); a new value every cycle.
    """

    def __init__(self, *, evs):
        self.num_evs = evs
        super().__init__({
            "ev_state": In(data.ArrayLayout(2, evs)), "ev_loss": In(data.ArrayLayout(4, evs)),
            "ev_drops": In(data.ArrayLayout(16, evs)),
            "threshold": In(4), "min_active": In(8),
            "loss_inc": Out(data.ArrayLayout(4, evs)), "drops_inc": Out(data.ArrayLayout(16, evs)),
            "to_bad": Out(evs), "bad_ok": Out(evs),
        })

    def elaborate(self, platform):
        m = Module()
        E = self.num_evs
        good_count = Signal(range(E + 1))
        m.d.comb += good_count.eq(sum(self.ev_state[i] == EvState.GOOD for i in range(E)))
        floor_ok = Signal()
        m.d.comb += floor_ok.eq(good_count > self.min_active)
        for i in range(E):
            loss_i = Mux(self.ev_loss[i] == 15, 15, self.ev_loss[i] + 1)[:4]
            thr = self.threshold
            to_bad_i = (self.ev_state[i] == EvState.GOOD) & (thr != 0) & (loss_i >= thr)
            drops = self.ev_drops[i]
            m.d.sync += [
                self.loss_inc[i].eq(loss_i),
                self.drops_inc[i].eq(Mux(drops == 0xFFFF, 0xFFFF, drops + 1)),
                self.to_bad[i].eq(to_bad_i),
                self.bad_ok[i].eq(to_bad_i & floor_ok),
            ]
        return m

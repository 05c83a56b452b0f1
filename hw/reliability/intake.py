"""Which event the reliability core takes next. See ``EventPicker``."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.bits import lowest_index

__all__ = ["EventPicker", "SOURCES"]

# the event sources in priority order: the bit of each in ``valid`` and ``take``
SOURCES = ("cmd", "sent", "ack", "tmo", "sweep", "doorbell")


class EventPicker(wiring.Component):
    """The reliability core's next event, chosen a cycle before the core takes it.

    The choice is by priority among the sources valid in the cycle before (``take``,
    one-hot in the order of ``SOURCES``; none: the core waits), with the QP whose
    record the core reads (``qpn``): the core's record memory's read address is this
    flip-flop because at few QPs the memory is flip-flops and multiplexers whose
    selects it drives, hundreds of them. No choice is made in a cycle in which the
    core takes one (``idle`` with a choice made): ``take`` is 0 the cycle after,
    and ``qpn`` holds. A source's valid input must hold its QP until taken.

    Doorbells keep a pending bit per QP (set by ``doorbell``, cleared by
    ``doorbell_taken``, which takes the pending QP of ``take``); the lowest pending
    QP is registered every cycle (a priority tree over ``num_qps`` bits ends at
    flip-flops) and is the last source by priority; the doorbell source is not
    offered in the cycle after a doorbell is taken (its lowest pending QP is then
    a cycle old), so a doorbell is never chosen twice, whenever the core is idle.
    A doorbell for a QP out of range is ignored.

    Interface:

    ``valid``      In(5): cmd, sent, ack, tmo, sweep (the doorbell's is the pending
                   bits').
    ``cmd_qpn``, ``sent_qpn``, ``ack_qpn``, ``tmo_qpn``, ``sweep_qpn``: In, their QPs.
    ``doorbell``, ``doorbell_qpn``: In, a doorbell write (any cycle).
    ``idle``       In(1): the core is in IDLE: it takes the choice made (if any).
    ``doorbell_taken`` In(1): the core takes the doorbell event of ``take``.
    ``take``       Out(6): the choice, one-hot (registered).
    ``qpn``        Out(range(num_qps)): its QP (registered).
    ``sent_ok``    Out(1): the sent record's QP is in range (registered with the
                   choice).

    Latency: a source valid in a cycle is in ``take`` the next (2 cycles for a
    doorbell: its pending bit first). Throughput: one choice per 2 cycles (a cycle
    without a choice follows each one taken).
    """

    def __init__(self, *, num_qps):
        self.num_qps = num_qps
        super().__init__({
            "valid": In(5),
            "cmd_qpn": In(range(num_qps)), "sent_qpn": In(24), "ack_qpn": In(24),
            "tmo_qpn": In(range(num_qps)), "sweep_qpn": In(range(num_qps)),
            "doorbell": In(1), "doorbell_qpn": In(24),
            "idle": In(1), "doorbell_taken": In(1),
            "take": Out(len(SOURCES)), "qpn": Out(range(num_qps)), "sent_ok": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        nq = self.num_qps
        T_CMD, T_SENT, T_ACK, T_TMO, T_SWEEP, _T_DB = range(len(SOURCES))
        take_any = Signal()
        db_pend = Signal(nq)
        db_q = Signal(range(nq))
        db_any = Signal()
        m.d.sync += [db_q.eq(lowest_index(m, db_pend, nq, "db_pick")), db_any.eq(db_pend != 0)]
        with m.If(self.doorbell_taken):
            m.d.sync += db_pend.bit_select(db_q, 1).eq(0)
        with m.If(self.doorbell & (self.doorbell_qpn < nq)):
            m.d.sync += db_pend.bit_select(self.doorbell_qpn[: len(db_q)], 1).eq(1)
        # db_any is a cycle old: in the cycle after a doorbell is taken it may still
        # count the pending bit just cleared, so the doorbell source sits that cycle out
        db_taken_q = Signal()
        m.d.sync += db_taken_q.eq(self.doorbell_taken)
        avail = Cat(self.valid, db_any & ~db_taken_q)
        with m.If(self.idle & take_any):
            m.d.sync += [self.take.eq(0), take_any.eq(0)]
        with m.Else():
            m.d.sync += [
                self.take.eq(Cat(*[avail[i] & ~avail[:i].any() if i else avail[0]
                                   for i in range(len(SOURCES))])),
                take_any.eq(avail.any()), self.sent_ok.eq(self.sent_qpn < nq),
                self.qpn.eq(Mux(avail[T_CMD], self.cmd_qpn,
                                Mux(avail[T_SENT], self.sent_qpn,
                                    Mux(avail[T_ACK], self.ack_qpn,
                                        Mux(avail[T_TMO], self.tmo_qpn,
                                            Mux(avail[T_SWEEP], self.sweep_qpn, db_q)))))),
            ]
        return m

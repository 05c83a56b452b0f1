"""The PSN window's ACK timer scan: a free-running time, and which QP the
next scan looks at and whether its coalesced ACK is due (``TimerScan``); and
the engine's states that scan a QP (``scan_states``)."""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.protocol import PSN_BITS, Syndrome

from .layouts import QpRxState

__all__ = ["TimerScan", "scan_states"]

# Operations the engine starts between two scans, at most.
OPS_PER_SCAN = 3


class TimerScan(wiring.Component):
    """The window engine scans one QP's ACK timer after at most
    ``OPS_PER_SCAN`` operations (or whenever it is idle), QP after QP.

    Interface
    ---------
    ``now``      Out(24): the time in cycles (free-running, mod 2^24): a
                 timer's deadline is ``now + ACK_T``.
    ``due``      Out(1): ``OPS_PER_SCAN`` operations since the last scan: the
                 next one is a scan.
    ``count``    In(1): the engine started an operation other than a scan.
    ``start``    In(1): the engine starts a scan of ``qp``: the next scan is
                 of the QP after it, and the count restarts.
    ``qp``       Out(qp_bits): the QP the next scan looks at.
    ``row``      In(QpRxState): the scanned QP's row as it is read.
    ``check``    In(1): ``row`` is the scanned QP's: register whether its ACK
                 is due.
    ``expired``  Out(1): the QP checked has an armed timer past its deadline
                 and packets not acknowledged.

    Latency: ``due`` (a compare of the operation count), ``qp`` and
    ``expired`` follow ``count``, ``start`` and ``check`` the cycle after. A deadline is passed once
    ``now`` is at or after it by less than 2^23 cycles. Throughput: one
    operation per cycle.
    """

    def __init__(self, qp_bits=4, plane_bits=0, ipv6=False):
        self.qp_bits = qp_bits
        super().__init__({
            "now": Out(PSN_BITS),
            "due": Out(1),
            "count": In(1),
            "start": In(1),
            "qp": Out(qp_bits),
            "row": In(QpRxState(plane_bits, ipv6)),
            "check": In(1),
            "expired": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.now.eq(self.now + 1)
        ops_since_scan = Signal(range(OPS_PER_SCAN + 1))
        m.d.comb += self.due.eq(ops_since_scan == OPS_PER_SCAN)
        with m.If(self.count):
            m.d.sync += ops_since_scan.eq(ops_since_scan + 1)
        with m.If(self.start):
            m.d.sync += [self.qp.eq(self.qp + 1), ops_since_scan.eq(0)]
        with m.If(self.check):
            passed = ~(self.now - self.row.deadline)[PSN_BITS - 1]
            m.d.sync += self.expired.eq(self.row.armed & passed & (self.row.unacked != 0))
        return m


def scan_states(c):
    """The timer scan of ``RxPsnWindow``'s state machine (a ``WindowContext``
    ``c``): SCAN_RD (the QP's row arrives), SCAN (``TimerScan`` registers
    whether its ACK is due) and SCAN_X (send the ACK, or back to IDLE)."""
    m, fsm = c.m, c.fsm
    with fsm.State("SCAN_RD"):
        m.d.sync += c.qs_load.eq(1)
        fsm.next = "SCAN"
    with fsm.State("SCAN"):
        # (scan.expired registers the QP's timer)
        m.d.sync += c.ack_syn.eq(Syndrome.ACK)  # for the ACK SCAN_X may send
        fsm.next = "SCAN_X"
    with fsm.State("SCAN_X"):
        m.d.sync += c.bm_word.eq(c.widx(c.qs.epsn))  # for ACK0
        with m.If(c.scan.expired):
            fsm.next = "ACK0"
        with m.Else():
            fsm.next = "IDLE"

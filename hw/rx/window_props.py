"""Formal properties of the RX PSN window (hw/rx/window.py; ``sim.formal`` runs them).

``PsnWindowHarness`` wraps an ``RxPsnWindow`` at its smallest parameters (2
QPs, 32-bit bitmap words, ``mpr_max`` 128: a window of 128 PSNs in a ring of
256 bits per QP, 2 in-flight slots, 1 pending entry, 32-bit addresses) in
an environment the solver drives freely within the interface's rules:

- ``req``: any request kind the validator sends (DATA, TRIM, NAK, DROP,
  PROBE) for either QP, any PSN, opcode, syndrome, flags and payload length,
  under the stream rule; the fields the window only copies to its outputs
  (``va``, ``dma_len``, ``imm``, ``ev``, ``mac``, the probe's and the
  timestamp) are 0.
- ``place``, ``ack``, ``cqe``: ready or not at will.
- ``done``: a verdict (ok or not) for any write placed (``notify``) and not
  yet answered, in any order, under the stream rule.
- ``cfg``: one configuration, chosen freely and held, whose ``peer_qpn``
  names the QP looked up (``cfg_addr``, a cycle before), so each ACK says
  which QP it speaks of.
- ``init`` (a ``QP_EPSN`` write, any QP and PSN) only while no write is
  waiting on ``place`` or for its verdict (the host re-initialises a quiet
  QP); ``init_busy`` at will.

Asserted, on what the window reports (``place``, ``done``, ``ack``):

- the cumulative PSN an ACK reports for a QP never moves backwards: each is
  at or after the one before, modulo 2^24 (the last, or the init's
  ``epsn - 1``; 2^24 - 1 at reset, when every row is 0);
- the cumulative PSN passes only PSNs that were marked: for one PSN of one QP
  that the solver picks (``target_qp``, ``target_psn``, held), an ACK whose
  cumulative PSN moved over it comes after a write of it with an ok verdict
  since the QP's last init;
- a PSN is accepted (a ``place`` with ``notify``) at most once: the target
  is not accepted while its write waits for a verdict, nor after an ok one
  (until the QP's next init); after a failed one it may be again;
- nothing outside the window is accepted: an accepted PSN is after the last
  cumulative PSN reported for its QP, and less than 128 + (the QP's ok
  verdicts since its init) PSNs after the init's ``epsn`` (the cumulative PSN
  moves by at most one PSN per marked packet).

Reduction: the window engine's logic does not depend on the number of QPs
beyond the row index (2 show that rows do not mix), the word size or the
ring size beyond their ratio to the window (the smallest the constructor
accepts); the copied fields are 0 since no decision reads them.

Bounded at 23 cycles (steps 0..22), not unbounded: the reachable states are
far too many for k-induction without a statement of the engine's own
invariants (the bitmap and the in-flight and pending tables against the
rows). The bound is shallow, and says so: the shortest history in which an
ACK moves a cumulative PSN (a packet accepted, its verdict taken, its PSN
marked and passed) ends at step 22, the last step checked (the covers reach
it there, and a marked PSN offered again at step 16, a failed verdict at
10). So every property is checked on every history up to the first ACK
that moves a cumulative PSN, and a second acceptance of a marked PSN (its
check ends by step 20); longer histories (several packets, a hole filled,
the 2^24 wrap) are left to the simulator tests. Each further step costs
minutes more (step 22 alone took several on a loaded 2-core machine).
An ACK built before an init of its QP and sent after it is not compared
with the init's ``epsn`` (it speaks of the QP before the init).
"""

from amaranth.hdl import Assert, Assume, Cat, Cover, Elaboratable, Module, Mux, Signal

from hw.formal import Proof, harness, valid_until_ready
from hw.protocol import PSN_BITS

from .layouts import ReqKind
from .window import RxPsnWindow

__all__ = ["PROOFS", "PsnWindowHarness"]

PSN_MOD = 1 << PSN_BITS
WINDOW = 128
ZERO_FIELDS = ("va", "dma_len", "imm", "ev", "mac", "probe_id", "probe_ev", "timestamp")


def _after(a, b):
    """``a`` is at or after ``b`` modulo 2^24 (within half the PSN space)."""
    return ((a - b)[:PSN_BITS]) < (1 << (PSN_BITS - 1))


class PsnWindowHarness(Elaboratable):
    """See the module docstring. Free inputs: ``inputs``."""

    def __init__(self):
        self.dut = dut = RxPsnWindow(num_qps=2, sack_bits=32, mpr_max=WINDOW, inflight=2,
                                     max_pending=1, addr_width=32)
        self.target_qp = Signal()
        self.target_psn = Signal(PSN_BITS)
        self.inputs = [
            dut.req.valid, dut.req.payload, dut.place.ready, dut.done.valid, dut.done.payload,
            dut.ack.ready, dut.cqe.ready, dut.cfg, dut.init.valid, dut.init.payload,
            dut.init_busy, self.target_qp, self.target_psn,
        ]

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        tags = dut.inflight
        req, place, done, ack, init = dut.req, dut.place, dut.done, dut.ack, dut.init

        # ---- the environment
        started = Signal()
        m.d.sync += started.eq(1)
        now = Cat(*(getattr(dut.cfg, f) for f in dut.cfg.shape().members if f != "peer_qpn"),
                  self.target_qp, self.target_psn)
        held = Signal(len(now))
        m.d.sync += held.eq(now)
        peer = Signal()
        m.d.sync += peer.eq(dut.cfg_addr)
        m.d.comb += [
            Assume(~started | (now == held)),
            Assume(dut.cfg.peer_qpn == peer),
            Assume(req.payload.kind.as_value() <= ReqKind.PROBE.value),
        ]
        for name in ZERO_FIELDS:
            m.d.comb += Assume(getattr(req.payload, name) == 0)
        valid_until_ready(m, req.valid, req.ready, req.payload, dut_drives=False, name="req")
        valid_until_ready(m, done.valid, done.ready, done.payload, dut_drives=False,
                          name="done")
        valid_until_ready(m, init.valid, init.ready, init.payload, dut_drives=False,
                          name="init")
        for name, port in (("place", place), ("ack", ack), ("cqe", dut.cqe)):
            valid_until_ready(m, port.valid, port.ready, port.payload, dut_drives=True,
                              name=name)

        # The request being checked (the window starts one only with place empty).
        last_qp = Signal()
        last_psn = Signal(PSN_BITS)
        with m.If(req.valid & req.ready):
            m.d.sync += [last_qp.eq(req.payload.qp), last_psn.eq(req.payload.psn)]
        accept = place.valid & place.ready & place.payload.notify
        took = done.valid & done.ready
        # Writes placed and not yet answered, and the QP of each.
        waiting = Signal(tags)
        tag_qp = Signal(tags)
        for t in range(tags):
            with m.If(accept & (place.payload.tag == t)):
                m.d.sync += [waiting[t].eq(1), tag_qp[t].eq(last_qp)]
            with m.If(took & (done.payload.tag == t)):
                m.d.sync += waiting[t].eq(0)
        m.d.comb += [
            Assume(~done.valid | waiting.bit_select(done.payload.tag, 1)),
            Assume(~init.valid | ((waiting == 0) & ~place.valid)),
        ]
        inited = init.valid & init.ready
        # ---- per QP: the last cumulative PSN reported, and the init's epsn
        ack_qp = ack.payload.dqpn[0]
        # An ACK built before an init of its QP speaks of the QP before it:
        # it is not compared with the init's epsn.
        stale = Signal()
        with m.If(ack.valid & ack.ready):
            m.d.sync += stale.eq(0)
        with m.If(inited & ack.valid & ~ack.ready & (init.payload.qp == ack_qp)):
            m.d.sync += stale.eq(1)
        sent = ack.valid & ack.ready & ~stale
        cum = [Signal(PSN_BITS, init=PSN_MOD - 1, name=f"cum{q}") for q in range(2)]
        base = [Signal(PSN_BITS, name=f"base{q}") for q in range(2)]
        marks = [Signal(4, name=f"marks{q}") for q in range(2)]
        for q in range(2):
            this = sent & (ack_qp == q)
            m.d.comb += Assert(~this | _after(ack.payload.cum_psn, cum[q]),
                               f"QP {q}'s cumulative PSN moved backwards")
            with m.If(this):
                m.d.sync += cum[q].eq(ack.payload.cum_psn)
            marked = took & done.payload.ok & (tag_qp.bit_select(done.payload.tag, 1) == q)
            with m.If(marked & (marks[q] != 15)):
                m.d.sync += marks[q].eq(marks[q] + 1)
            with m.If(inited & (init.payload.qp == q)):
                m.d.sync += [cum[q].eq(init.payload.epsn - 1), base[q].eq(init.payload.epsn),
                             marks[q].eq(0)]
        m.d.comb += Assert(~ack.valid | (ack.payload.dqpn[1:] == 0),
                           "an ACK names no QP of the configuration")

        # Nothing outside the window is accepted.
        a_cum = Mux(last_qp, cum[1], cum[0])
        a_base = Mux(last_qp, base[1], base[0])
        a_marks = Mux(last_qp, marks[1], marks[0])
        m.d.comb += [
            Assert(~accept | ~_after(a_cum, last_psn),
                   "a PSN at or before the cumulative PSN was accepted"),
            Assert(~accept | ((last_psn - a_base)[:PSN_BITS] < WINDOW + a_marks),
                   "a PSN beyond the window was accepted"),
        ]

        # ---- the target PSN: accepted at most once, passed only once marked
        is_target = (last_qp == self.target_qp) & (last_psn == self.target_psn)
        t_flight = Signal()
        t_tag = Signal(range(tags))
        t_marked = Signal()
        m.d.comb += Assert(~(accept & is_target) | ~(t_flight | t_marked),
                           "a PSN was accepted twice")
        with m.If(accept & is_target):
            m.d.sync += [t_flight.eq(1), t_tag.eq(place.payload.tag)]
        with m.If(took & t_flight & (done.payload.tag == t_tag)):
            m.d.sync += [t_flight.eq(0), t_marked.eq(done.payload.ok)]
        with m.If(inited & (init.payload.qp == self.target_qp)):
            m.d.sync += [t_flight.eq(0), t_marked.eq(0)]
        t_cum = Mux(self.target_qp, cum[1], cum[0])
        behind = (self.target_psn - t_cum - 1)[:PSN_BITS]
        passes = (sent & (ack_qp == self.target_qp)
                  & (behind < (ack.payload.cum_psn - t_cum)[:PSN_BITS]))
        m.d.comb += Assert(~passes | t_marked,
                           "the cumulative PSN passed a PSN that was not marked")

        # ---- covers: the target accepted, marked, passed, offered again
        again = Signal()
        with m.If(req.valid & req.ready & t_marked & (req.payload.qp == self.target_qp)
                  & (req.payload.psn == self.target_psn)):
            m.d.sync += again.eq(1)
        m.d.comb += [
            Cover(t_marked & passes),
            Cover(again & ~dut.req.valid & t_marked),
            Cover(took & ~done.payload.ok),
            Cover(sent & (ack_qp == 1) & (ack.payload.cum_psn != cum[1])),
        ]
        return m


PROOFS = [
    Proof("rx_psn_window", harness(PsnWindowHarness), mode="bmc", depth=23, cover_depth=24,
          long=True,
          reduction="2 QPs, 32-bit words, a 128-PSN window (ring of 256 bits), 2 in-flight "
                    "slots, 1 pending entry; the fields only copied to outputs held at 0; "
                    "bounded at 23 cycles: step 22 is the first in which an ACK's cumulative "
                    "PSN can pass a PSN accepted and marked (the covers reach it)"),
]

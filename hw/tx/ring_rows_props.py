"""Formal properties of ``RingRows`` (hw/tx/ring_rows.py; ``sim.formal`` runs
them): every QP's ring indices, "ring not empty" flag and EV cursor follow
the writes and takes in the order they are offered, with the latency the
docstring gives, through every read port.

``RingRowsHarness`` drives every input freely within the docstring's rules:
takes at least two cycles apart; at most one decode write (INIT's, a
doorbell, a reset) a cycle, three cycles apart but INIT's; INIT's writes
only before the first take or other write, never with a take nor with
EMIT's cursor write; any QP, any doorbell value, any EV cursor write, any
read addresses.

The RAMs hold anything at the start (a soft reset keeps them), as the
sequencer's INIT assumes. The solver also picks a QP to watch (``wq``, free at the first cycle, then
held). The harness keeps a reference of that QP's row, ``pi``, ``ci`` and
the cursor, updated in the cycle each event is offered, in the order the
docstring gives (a write before a take of the same cycle): INIT zeroes the
indices and sets the cursor to ``evs_per_qp - 1``, a doorbell sets ``pi``, a
reset sets ``ci`` to ``pi``, a take adds 1 to ``ci``, EMIT's write sets the
cursor. Asserted, for the watched QP, from its INIT write on:

- the indices a read port gives at cycle d (its address ``wq`` at d - 1:
  ``cur_ci``, ``ring_ci``, ``csr_pi``, ``csr_ci``) are the reference's after
  every event offered by d - 2, unless an event of the QP is on its way at
  d - 1 (offered then, or a take offered at d - 2 that met a write);
- ``ne`` of the QP is ``pi != ci`` of the same reference, under the same
  exception;
- ``cur_cursor`` at d is the reference cursor after every write up to d - 1
  (the cursor's writes land in their cycle).

So an index lands at the end of the cycle after its event (the cycle after
that for a take that waits), no update is lost or applied twice, an update of
one QP never touches another's row (the watched QP is any), and ``ne`` never
disagrees with the rows once they are written.

Covers: a take that meets a write and waits; the watched ring becoming non-
empty by a doorbell and empty again by a take; a reset emptying it.

Reduction: 2 QPs, 2 EVs per QP (rows do not mix: the watched QP is either);
16-bit indices as built. Bounded at 9 cycles: the watched row's INIT, then
events every cycle within the rules (a doorbell, a write that meets a take,
a take after it, reads at every port); the two-stage pipeline and a take's
one-cycle wait repeat from there. Each further step costs the solver about
twice the one before (the memories' rows against the reference: 12 cycles
take over 20 minutes). Not k-induction: a property cannot read the
memories' rows to tie them to the reference.
"""

from amaranth.hdl import Assert, Assume, Cover, Elaboratable, Module, Mux, Signal

from hw.formal import Proof, harness

from .ring_rows import RingRows

__all__ = ["PROOFS", "RingRowsHarness"]

NQ = 2
EVS = 2


class RingRowsHarness(Elaboratable):
    """See the module docstring. Free inputs: ``inputs``."""

    def __init__(self):
        self.dut = RingRows(NQ, EVS)
        d = self.dut
        self.wq_in = Signal(range(NQ))
        self.inputs = [d.take, d.take_q, d.w_q, d.w_init, d.w_doorbell, d.w_reset, d.w_pi,
                       d.cur_q_next, d.cursor_we, d.cursor_q, d.cursor_data, d.ring_q, d.csr_q,
                       self.wq_in]

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = d = self.dut

        # ---- the environment's rules
        def delayed(value, name):
            r = Signal(len(value), name=name)
            m.d.sync += r.eq(value)
            return r

        w_any = d.w_init | d.w_doorbell | d.w_reset
        w_other = d.w_doorbell | d.w_reset
        take_d1 = delayed(d.take, "take_d1")
        w_d1, w_d2 = delayed(w_any, "w_d1"), Signal(name="w_d2")
        m.d.sync += w_d2.eq(w_d1)
        init_phase = Signal(init=1)
        with m.If(d.take | w_other):
            m.d.sync += init_phase.eq(0)
        m.d.comb += [
            Assume(d.w_init + d.w_doorbell + d.w_reset <= 1),
            Assume(~(d.take & take_d1)),
            Assume(~(w_other & (w_d1 | w_d2))),
            Assume(~(d.w_init & (d.take | ~init_phase))),
            Assume(~(d.w_init & d.cursor_we)),
        ]
        started = Signal()
        m.d.sync += started.eq(1)
        wq = Signal(range(NQ))
        m.d.sync += wq.eq(Mux(started, wq, self.wq_in))
        m.d.comb += Assume(~started | (self.wq_in == wq))
        wq = Mux(started, wq, self.wq_in)  # the watched QP, from the first cycle

        # ---- the reference row of the watched QP, in the order of the events
        ref_pi, ref_ci = Signal(16), Signal(16)
        ref_cursor = Signal(range(EVS), init=0)
        mid_pi = Mux(d.w_init & (d.w_q == wq), 0,
                     Mux(d.w_doorbell & (d.w_q == wq), d.w_pi, ref_pi))
        mid_ci = Mux(d.w_init & (d.w_q == wq), 0,
                     Mux(d.w_reset & (d.w_q == wq), ref_pi, ref_ci))
        m.d.sync += [
            ref_pi.eq(mid_pi),
            ref_ci.eq(Mux(d.take & (d.take_q == wq), mid_ci + 1, mid_ci)),
        ]
        with m.If(d.w_init & (d.w_q == wq)):
            m.d.sync += ref_cursor.eq(EVS - 1)
        with m.Elif(d.cursor_we & (d.cursor_q == wq)):
            m.d.sync += ref_cursor.eq(d.cursor_data)
        # the rows hold anything until INIT writes them (a soft reset keeps the
        # RAMs): the reference speaks from the watched QP's INIT write on
        known = Signal()
        with m.If(d.w_init & (d.w_q == wq)):
            m.d.sync += known.eq(1)
        # the reference as it was a cycle before (after the events up to d - 2)
        old_pi, old_ci = delayed(ref_pi, "old_pi"), delayed(ref_ci, "old_ci")
        old_known = delayed(known, "old_known")

        # an event of the watched QP on its way at d - 1: offered then, or a
        # take offered at d - 2 that met a write
        mine = ((w_any & (d.w_q == wq)) | (d.take & (d.take_q == wq)))
        waits = Signal()
        m.d.sync += waits.eq(d.take & (d.take_q == wq) & w_any)
        on_way = delayed(mine | waits, "on_way")

        def read_at(addr, name):
            """Whether ``addr`` named the watched QP the cycle before."""
            return delayed(addr == wq, name)

        check = old_known & ~on_way
        cur_hit, ring_hit, csr_hit = (read_at(d.cur_q_next, "cur_hit"),
                                      read_at(d.ring_q, "ring_hit"), read_at(d.csr_q, "csr_hit"))
        m.d.comb += [
            Assert(~(check & cur_hit) | (d.cur_ci == old_ci), "cur_ci is not the row's ci"),
            Assert(~(check & ring_hit) | (d.ring_ci == old_ci), "ring_ci is not the row's ci"),
            Assert(~(check & csr_hit) | ((d.csr_pi == old_pi) & (d.csr_ci == old_ci)),
                   "csr_pi/csr_ci are not the row's"),
            Assert(~check | (d.ne.bit_select(wq, 1) == (old_pi != old_ci)),
                   "ne is not pi != ci"),
            Assert(~(known & cur_hit) | (d.cur_cursor == ref_cursor),
                   "cur_cursor is not the row's cursor"),
        ]

        # ---- covers
        ne_w = d.ne.bit_select(wq, 1)
        ne_d1 = delayed(ne_w, "ne_d1")
        reset_w = delayed(d.w_reset & (d.w_q == wq), "reset_w")
        m.d.comb += [
            Cover(waits & known),
            Cover(old_known & ne_d1 & ~ne_w & ~delayed(reset_w, "reset_w2") & csr_hit),
            Cover(old_known & ne_d1 & ~ne_w & delayed(reset_w, "reset_w3")),
        ]
        return m


PROOFS = [
    Proof("tx_ring_rows", harness(RingRowsHarness), mode="bmc", depth=9, cover_depth=9,
          engine="smtbmc --syn yices",
          reduction="2 QPs x 2 EVs (the watched QP is either: rows do not mix); bounded at 9 "
                    "cycles: INIT, then a doorbell, a write meeting a take, a take, a read"),
]

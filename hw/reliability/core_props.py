"""Formal properties of the reliability core (hw/reliability/core.py; ``sim.formal`` runs them).

``CoreUnaHarness`` wraps a whole ``ReliabilityCore``: it owns ``una`` and
``nxt`` (the QP record, written back at the end of each event) and the
decision to complete a WQE (the advance walk pushes a SUCCESS completion for
each PSN it passes whose per-PSN entry ends its WQE). No smaller block makes
either decision: they are states of the core's one state machine. The
environment is free within the interface's rules:

- ``sent``, ``peer_ack``, ``expired``, ``cmd``: any record for either QP (or
  a QP out of range), in any cycle, under the stream rule: packets and
  retransmissions with any PSN, EV, WQE index and flags, WQEs refused; ACKs,
  NAKs (any syndrome), SACKs and probe answers with any cumulative PSN,
  ``sack_base``, bitmap and opcode; timer reports with any generation;
  QP-state commands (RESET, RTS, ERROR, any state) and EV commands.
  ``sq_producer`` (doorbells) and ``probe_tick`` in any cycle; every output
  stalled or taken at will; the per-QP configuration (``rel_data``) any value,
  held.
- one exception, TX's own rule for the target QP (below) in its first RTS
  epoch: its new PSNs go out in order from the first, each below the
  acknowledged PSN + the window, its WQE index the one before plus that
  PSN's ``last``; a refused WQE (``op_err``) only between WQEs, its index the
  next, and nothing new after it.
- the window's parameters (``params``) are the engine's reset values and
  ``now`` counts cycles: only the window (``cwnd``) and the timers' deadlines
  read them, and no una or completion decision reads those.

Asserted:

(a) on the record of either QP, read through ``rec_addr``/``rec_data`` in
    any cycle: ``nxt - una`` (modulo 2^24) is at most the window, so ``una``
    never passes ``nxt``; ``una`` never moves backwards (modulo 2^24) between
    a QP's RESET or RTS commands (from the first record read after the
    command's write-back that is not ``fresh``). For the target QP, at each
    input taken (the core in IDLE, every earlier event written back), the
    record in RTS holds the ``una`` and ``nxt`` of the ACK rule
    (docs/reliability.md, step 1) applied to the PSNs sent and the ACKs and
    NAKs taken: ``una`` moves only to an ACK's ``cum_psn + 1``, only forward
    and never beyond ``nxt`` (an ACK beyond ``nxt`` is ignored);
(b) completions: the harness keeps TX's side of the target QP (``una`` and
    ``nxt`` by the ACK rule, from the records and ACKs it takes) and, for a
    target PSN ``tp`` and WQE index ``tw`` that the solver picks, whether
    ``tp`` was sent new as a PSN of ``tw``. A SUCCESS completion request of
    ``tw`` (``cpl``) comes only when ``tp``, if sent in ``tw``, is below the
    acknowledged PSN; and no PSN of ``tw`` is sent after it completed
    SUCCESS (the WQE was completed before all its PSNs were sent). Every
    (PSN, WQE) pair is a target, so every PSN of a completed WQE was
    acknowledged cumulatively. Checked in the QP's first RTS epoch (from its
    first RTS command to the next RESET or RTS command): a completion of an
    earlier epoch may wait in the completion FIFO past a later epoch's start;
(c) the stream rule on every stream the core drives (``retx``,
    ``ack_update``, ``ev_update``, ``cwnd_update``, ``qp_state_update``,
    ``cpl``, ``probe_req``, ``event``; ``timer_arm`` is never stalled:
    ``RetransmitTimers`` is always ready). The core has no AXI port (the
    CQE writes are ``CompletionWriter``'s).

Reduction: 2 QPs (the record and per-PSN memories are indexed by QP: 2 show
that rows do not mix), 2 EVs per QP, a 4-PSN window, 32-bit SACK bitmaps
(the smallest the constructors accept): the advance, the walk and the window
test are the same logic at every width, on PSNs modulo 2^24 at full width.

Bound: 20 cycles (steps 0..19) for the properties, 22 for the covers,
with ``smtbmc --syn yices``. From reset, the records' CLEAR (2 cycles), an RTS
command (6), sent records (4 each) and an ACK take 21 cycles before the
first completion request leaves ``cpl`` (the cover reaches it at step 21),
and an ACK beyond ``nxt`` taken at step 12 is dropped and its record checked
at step 19 (the cover reaches it there). Each step costs the solver more
than the one before (the run times are in docs/verification.md's proofs
table; ``--syn`` is needed). So the bounded check covers every history of commands, sent
records, timer reports and ACKs taken up to step 19: (a) on every record
read (``nxt - una`` within the window, including ``nxt`` across the 2^24
wrap, a cover at step 13) and against the rule after each sent record
(three, at most, the last written back at step 15) and after an ACK
beyond ``nxt`` (step 19), and (c) on every
output; it ends before the first completion and before any ACK's
write-back, so (b) and the moves of ``una`` by an ACK are stated and
reachable (the covers) but not checked within that bound.
``rel_core_completion`` (``narrow``: only the target QP driven, by
QP-state commands, sent records, ACKs and NAK TRIMMEDs, every output
ready) reaches further: bounded at 24 cycles, it checks (b) at the first
completion request (step 21) and the two steps after it. SACK-filled
holes, the 2^24 wrap of ``una``, timeouts and a second epoch are left to
the simulator tests (tests/hw/test_reliability.py: ACKs, stale and unsent
ACKs, SACK holes, completions; tests/hw/test_rel_model.py: the golden model's
requester against the core, after every ACK of hypothesis-drawn ACK streams;
tests/unit/test_rel_blocks.py: the sent window edge, the ERROR flush;
tests/unit/test_rel_sack_align.py).
"""

from amaranth.hdl import Assert, Assume, Cat, Cover, Elaboratable, Module, Signal

from hw.formal import Proof, harness, valid_until_ready
from hw.headers import Opcode
from hw.protocol import PSN_BITS

from .core import GlobalParams, ReliabilityCore
from .layouts import (
    AETH_ACK,
    NAK_INVALID_REQUEST,
    NAK_REMOTE_ACCESS,
    NAK_TRIMMED,
    CqeStatus,
    QpState,
)

__all__ = ["PROOFS", "CoreUnaHarness"]

NUM_QPS = 2
WINDOW = 4
SACK_BITS = 32
PARAMS = {"ev_loss_threshold": 2, "cwnd_min": 1, "cwnd_max": WINDOW, "cwnd_init": WINDOW,
          "cwnd_ai": 256, "cwnd_ai_fast": 1024, "cwnd_md_shift": 1, "cwnd_trim_dec": 1,
          "target_rtt": 64}
OUTPUTS = ("retx", "ack_update", "ev_update", "cwnd_update", "cc_event", "qp_state_update", "cpl",
           "probe_req", "event")


def _dist(a, b):
    """``a - b`` modulo 2^24."""
    return (a - b)[:PSN_BITS]


def _after(a, b):
    """``a`` is at or after ``b`` modulo 2^24 (within half the PSN space)."""
    return _dist(a, b) < (1 << (PSN_BITS - 1))


class CoreUnaHarness(Elaboratable):
    """See the module docstring. Free inputs: ``inputs``. ``narrow``: the
    environment of the completion proof (``rel_core_completion``): only QP 0,
    the target, gets inputs (its QP-state commands, sent records, ACKs and
    NAK TRIMMEDs: no timer reports, doorbells, probe rounds, EV commands or
    probe answers) and every output is always ready."""

    def __init__(self, narrow=False):
        self.narrow = narrow
        self.dut = dut = ReliabilityCore(num_qps=NUM_QPS, evs_per_qp=2, sack_bits=SACK_BITS,
                                         window=WINDOW, timeout_unit=2)
        self.tq = Signal()  # the target: a QP, one of its PSNs, a WQE index
        self.tp = Signal(PSN_BITS)
        self.tw = Signal(16)
        self.inputs = [
            dut.sent.valid, dut.sent.payload, dut.sq_producer.valid, dut.sq_producer.payload,
            dut.peer_ack.valid, dut.peer_ack.payload, dut.expired.valid, dut.expired.payload,
            dut.cmd.valid, dut.cmd.payload, dut.probe_tick, dut.rel_data, dut.evv_data,
            dut.rec_addr, self.tq, self.tp, self.tw,
            *(getattr(dut, n).ready for n in OUTPUTS),
        ]

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        tq, tp, tw = self.tq, self.tp, self.tw

        # ---- the environment: streams under the stream rule, the rest free
        started = Signal()
        m.d.sync += started.eq(1)
        # the window's parameters: the engine's reset values (no una or completion
        # decision reads them); the timers' clock counts cycles
        m.d.comb += dut.params.eq(GlobalParams.const(PARAMS))
        now = Signal.like(dut.now)
        m.d.sync += now.eq(now + 1)
        m.d.comb += dut.now.eq(now)
        target = Cat(tq, tp, tw, dut.rel_data)
        held = Signal(len(target))
        m.d.sync += held.eq(target)
        m.d.comb += Assume(~started | (target == held))
        for name in ("sent", "peer_ack", "expired", "cmd"):
            port = getattr(dut, name)
            valid_until_ready(m, port.valid, port.ready, port.payload, dut_drives=False,
                              name=name)
        for name in OUTPUTS:
            port = getattr(dut, name)
            valid_until_ready(m, port.valid, port.ready, port.payload, dut_drives=True,
                              name=name)
        m.d.comb += dut.timer_arm.ready.eq(1)

        sent, ack, cmd, cpl = dut.sent, dut.peer_ack, dut.cmd, dut.cpl
        s, a, c = sent.payload, ack.payload, cmd.payload
        if self.narrow:
            syn = a.aeth.syndrome
            m.d.comb += [
                Assume(tq == 0),
                Assume(~sent.valid | (s.qpn == 0)),
                Assume(~cmd.valid | (~c.ev & (c.qpn == 0))),
                Assume(~ack.valid | ((a.bth.dqpn == 0) & (a.bth.opcode == Opcode.ACKNOWLEDGE)
                                     & ((syn == AETH_ACK) | (syn == NAK_TRIMMED)))),
                Assume(~dut.expired.valid & ~dut.sq_producer.valid & ~dut.probe_tick),
                *(Assume(getattr(dut, n).ready) for n in OUTPUTS),
            ]
        took_sent = sent.valid & sent.ready
        took_ack = ack.valid & ack.ready
        took_cmd = cmd.valid & cmd.ready
        took_any = took_sent | took_ack | took_cmd | (dut.expired.valid & dut.expired.ready)
        state_cmd = took_cmd & ~c.ev

        # ---- (a) on every QP's record, read through rec_addr / rec_data
        # rec_data: the record at the rec_addr of the cycle before (none at step 0)
        obs_q = Signal()
        m.d.sync += obs_q.eq(dut.rec_addr)
        rec = dut.rec_data
        m.d.comb += Assert(~started | (_dist(rec.nxt, rec.una) <= WINDOW),
                           "una passed nxt, or nxt - una exceeds the window")
        for q in range(NUM_QPS):
            seen = Signal(name=f"seen{q}")
            pend = Signal(name=f"pend{q}")
            last = Signal(PSN_BITS, name=f"last_una{q}")
            here = started & (obs_q == q)
            with m.If(took_any):
                m.d.sync += pend.eq(0)
            with m.If(here & ~pend):
                m.d.sync += [seen.eq(~rec.fresh), last.eq(rec.una)]
                m.d.comb += Assert(~seen | rec.fresh | _after(rec.una, last),
                                   f"QP {q}'s una moved backwards")
            with m.If(state_cmd & (c.qpn == q)
                      & ((c.state == QpState.RESET) | (c.state == QpState.RTS))):
                m.d.sync += [pend.eq(1), seen.eq(0)]

        # ---- (b) the target QP in its first RTS epoch
        # ep: 0 before the QP's first RTS command, 1 from it to its next RESET or
        # RTS command, 2 after
        ep = Signal(2)
        tq_cmd = state_cmd & (c.qpn == tq)
        with m.If(tq_cmd & (ep == 0) & (c.state == QpState.RTS)):
            m.d.sync += ep.eq(1)
        with m.If(tq_cmd & (ep == 1) & ((c.state == QpState.RTS) | (c.state == QpState.RESET))):
            m.d.sync += ep.eq(2)
        live = ep == 1
        # TX's side: the PSNs sent new in order from the first (una_sh, nxt_sh: the
        # oldest not acknowledged and the next, by the ACK rule of
        # docs/reliability.md), the WQE index of the next (wqe_nx), a WQE begun and
        # not ended (mid), a WQE refused (stopped: TX sends nothing more), the QP
        # put in ERROR (frozen: its ACKs are ignored)
        began = Signal()
        una_sh = Signal(PSN_BITS)
        nxt_sh = Signal(PSN_BITS)
        wqe_nx = Signal(16)
        mid = Signal()
        stopped = Signal()
        frozen = Signal()
        tq_sent = (s.qpn == tq) & live
        new = ~s.retx & ~s.op_err
        in_flight = _dist(nxt_sh, una_sh)
        m.d.comb += [
            Assume(~(sent.valid & tq_sent & new & began)
                   | ((s.psn == nxt_sh) & (s.wqe_index == wqe_nx) & ~stopped
                      & (in_flight < WINDOW))),
            Assume(~(sent.valid & tq_sent & s.op_err)
                   | (~mid & ~stopped & (~began | (s.wqe_index == wqe_nx)))),
        ]
        with m.If(took_sent & tq_sent & new):
            m.d.sync += [began.eq(1), nxt_sh.eq(s.psn + 1), wqe_nx.eq(s.wqe_index + s.last),
                         mid.eq(~s.last)]
            with m.If(~began):
                m.d.sync += una_sh.eq(s.psn)
        with m.If(took_sent & tq_sent & s.op_err):
            m.d.sync += stopped.eq(1)
        syn = a.aeth.syndrome
        fatal = (syn == NAK_INVALID_REQUEST) | (syn == NAK_REMOTE_ACCESS)
        known = (syn == AETH_ACK) | (syn == NAK_TRIMMED) | fatal
        tq_ack = (took_ack & (a.bth.dqpn == tq) & (a.bth.opcode == Opcode.ACKNOWLEDGE) & known
                  & live & began & ~frozen)
        adv = _dist(a.sack.cum_psn + 1, una_sh)
        beyond = adv > in_flight
        with m.If(tq_ack):
            with m.If((adv != 0) & ~beyond):
                m.d.sync += una_sh.eq(a.sack.cum_psn + 1)
            with m.If(fatal):
                m.d.sync += frozen.eq(1)
        with m.If(tq_cmd & (c.state == QpState.ERROR)):
            m.d.sync += frozen.eq(1)

        # the record against the rule: at an input's take (the core in IDLE, every
        # earlier event written back), the record read there is the shadow's, while
        # the QP is in RTS (a timeout that runs out puts it in ERROR unseen here)
        snap = Signal()
        snap_una = Signal(PSN_BITS)
        snap_nxt = Signal(PSN_BITS)
        m.d.sync += [snap.eq(took_any & live & began & (dut.rec_addr == tq)),
                     snap_una.eq(una_sh), snap_nxt.eq(nxt_sh)]
        m.d.comb += Assert(~snap | (rec.state != QpState.RTS)
                           | ((rec.una == snap_una) & (rec.nxt == snap_nxt)),
                           "una or nxt differs from the ACK rule's")

        # the target PSN tp of WQE tw: sent, and the WQE completed SUCCESS
        t_sent = Signal()
        t_done = Signal()
        is_tp = took_sent & tq_sent & new & (s.psn == tp) & (s.wqe_index == tw)
        with m.If(is_tp):
            m.d.sync += t_sent.eq(1)
        acked = _dist(tp, una_sh) >= in_flight
        cp = cpl.payload
        done = (cpl.valid & cpl.ready & ~cp.clear & (cp.status == CqeStatus.SUCCESS)
                & (cp.qpn == tq) & (cp.wqe_index == tw) & live)
        with m.If(done):
            m.d.sync += t_done.eq(1)
        m.d.comb += [
            Assert(~done | ~t_sent | acked,
                   "a WQE completed SUCCESS with a PSN of it not acknowledged"),
            Assert(~is_tp | ~t_done,
                   "a PSN of a WQE was sent after the WQE completed SUCCESS"),
        ]

        # ---- covers: a WQE completed SUCCESS with the target PSN in it; an ACK
        # beyond nxt taken and the record unchanged at the next input; nxt past
        # the 2^24 wrap with una before it
        ignored = Signal()  # an ACK beyond nxt taken (before the input of snap)
        snap_ignored = Signal()
        with m.If(tq_ack & beyond):
            m.d.sync += ignored.eq(1)
        m.d.sync += snap_ignored.eq(ignored)
        rts = rec.state == QpState.RTS
        m.d.comb += [
            Cover(done & t_sent),
            Cover(snap & snap_ignored & rts & (rec.nxt != rec.una)),
            Cover(snap & rts & (rec.nxt < rec.una)),
        ]

        return m


PROOFS = [
    Proof("rel_core_una", harness(CoreUnaHarness), mode="bmc", depth=20, cover_depth=22, long=True,
          engine="smtbmc --syn yices",
          reduction="2 QPs, 2 EVs, a 4-PSN window, 32-bit SACK bitmaps (the smallest the "
                    "constructors accept; PSNs at full width); window parameters at their "
                    "reset values; bounded at 20 cycles (each step costs minutes): commands, "
                    "sent records and ACKs taken; the first completion (step 21) and an "
                    "ACK's write-back of una are beyond it (the covers reach the first)"),
    Proof("rel_core_completion", harness(CoreUnaHarness, narrow=True), mode="bmc", depth=24,
          cover_depth=24, long=True, engine="smtbmc --syn yices",
          reduction="as rel_core_una, with only QP 0 driven (QP-state commands, sent "
                    "records, ACKs and NAK TRIMMEDs; no timer reports, doorbells, probes or EV "
                    "commands) and every output ready; bounded at 24 cycles: the first "
                    "completion (step 21) and the steps after it"),
]

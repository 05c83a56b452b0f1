"""Formal properties of the RX parser (hw/rx/parser.py; ``sim.formal`` runs them).

``ParserDrainHarness`` wraps an ``RxParser`` whose input ``s_axis`` (every
field, and ``trim_dscp``) the solver drives freely under the AXI4-Stream
rule (``tvalid`` held until ``tready``, the beat unchanged while it waits):
any frames, of any length, well-formed or not. Its outputs ``hdr`` and
``payload`` are always ready (``rx_parser_drain``), or not ready for at
most ``STALL`` (4) cycles in a row (``rx_parser_stall``). Asserted:

- ``hdr`` and ``payload`` keep the stream rule (valid held until ready,
  payload stable);
- with the outputs always ready, the input never waits: a beat offered is
  taken in the cycle it is offered (``tready`` is high whenever ``tvalid``
  is; ``in_bound`` 1);
- a frame's verdict strobe (``events``) comes exactly 4 cycles after its
  last beat is taken, one per frame, never two at once;
- a record leaves ``hdr`` only for an accepted frame, and one owed leaves
  within ``rec_bound`` cycles: 3 with the outputs always ready, where it
  leaves exactly 7 cycles after its frame's last beat (3 after its
  ``accepted`` strobe); ``STALL`` + 3 with stalls;
- a payload beat leaves only when a record taken released it (the beats of
  its ``payload_len``), and one released leaves within ``pay_bound``
  cycles: 4 (the first beat 4 cycles after the record, the next at once),
  ``STALL`` + 4 with stalls.

With stalling outputs the input has no bound here: a record held on ``hdr``
keeps its payload in the frame FIFO, and the next frame's payload writes
then stop the input; the wait grows with the depth of the check (with the
first frame pinned, covers reach waits of 1, 2, 3 cycles at steps 23, 24,
25), so its bound lies beyond what a bounded check of this block reaches
in minutes.

``rx_parser_drain_written`` pins the first frame to ``WRITTEN``, a valid
WRITE_ONLY with two payload beats (everything after it free): finding a
frame whose IPv4 checksum and ICRC both hold and that carries payload takes
the solver many minutes on end, so the payload covers are reached there; a
state reachable under the pinned frame is reachable in the free harness
too. The payload bound with stalls is checked but not covered (the first
payload of a free frame leaves at step 20, its stalled wait at 24).

Reduction: 64-bit data (the narrowest the parser takes, the board's),
``sack_bits`` 32, ``max_payload`` 16 bytes (2 beats) and the smallest frame
FIFO the constructor accepts (4 beats: one payload plus 2), so that the
FIFO is as close to full as it can be; a larger payload or FIFO only adds
beats between the same pointer comparisons, and a frame whose payload is
longer than ``max_payload`` is dropped, as in any configuration. The
header FIFO keeps its 16 records (not full within the bound). The verdict,
record and payload paths are pipelines of fixed latency per frame.

Bounds: bounded model checks of 24 cycles (steps 0..23). The shortest
accepted frames (9 beats: a trimmed write) have their record out by step 15
and an ACK by 16, the pinned 12-beat write its payload's last beat at 23
(the covers); 24 cycles hold one frame and most of the next (whose payload
writes start at its beat 9), so a frame's record and payload meet the next
frame's writes. Each further step costs the solver more than all before it
(the run times are in docs/verification.md's proofs table). The stalling
harness is checked to 21 cycles (steps 0..20): its records' stalled waits
are reached by step 19 (the covers).
"""

from amaranth.hdl import Assert, Assume, Cat, Cover, Elaboratable, Module, Mux, Signal

from hw.formal import Proof, harness, valid_until_ready
from hw.protocol import Opcode
from hw.rx.layouts import COUNTER_NAMES, Verdict
from hw.rx.parser import RxParser

__all__ = ["PROOFS", "ParserDrainHarness"]

DATA_BITS = 64
SACK_BITS = 32
MAX_PAYLOAD = 16  # bytes: 2 beats
FIFO_DEPTH = 4  # beats: one max_payload payload plus 2
LANES = DATA_BITS // 8
STALL = 4  # the stalling harnesses: the longest run of an output not ready
# The first frame of the ``written`` harnesses: a WRITE_ONLY of 16 payload
# bytes (host_driver.layers.write_packet), valid: its IPv4 checksum and ICRC
# hold (its record and payload leave in the covers).
WRITTEN = bytes.fromhex(
    "02000000000202000000000108004500004c000040004011269f0a0000010a000002123412b7"
    "003800000a00ffff0000001200000345000000000000100000000077000000100102030405060708"
    "090a0b0c0d0e0f10854eb90d")


class ParserDrainHarness(Elaboratable):
    """See the module docstring. Free inputs: ``inputs``.

    ``stall``: the longest run of cycles in which an output (``hdr``,
    ``payload``) is not ready; 0: both always ready. ``in_bound``: an input
    beat offered is taken within this many cycles (None: not checked); ``rec_bound``,
    ``pay_bound``: cycles a record (a released payload beat) may be owed
    without one leaving.
    """

    def __init__(self, *, stall: int, in_bound: int, rec_bound: int, pay_bound: int,
                 written: bool, ipv6: bool = False):
        self.stall, self.in_bound, self.written = stall, in_bound, written
        self.rec_bound, self.pay_bound = rec_bound, pay_bound
        self.dut = RxParser(data_width=DATA_BITS, sack_bits=SACK_BITS, max_payload=MAX_PAYLOAD,
                            fifo_depth=FIFO_DEPTH, ipv6=ipv6)
        s = self.dut.s_axis
        self.inputs = [s.tdata, s.tkeep, s.tlast, s.tuser, s.tvalid, self.dut.trim_dscp,
                       self.dut.hdr.ready, self.dut.payload.ready]

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        s, hdr, pay = dut.s_axis, dut.hdr, dut.payload
        valid_until_ready(m, s.tvalid, s.tready, Cat(s.tdata, s.tkeep, s.tlast, s.tuser),
                          dut_drives=False, name="s_axis")
        valid_until_ready(m, hdr.valid, hdr.ready, hdr.payload, dut_drives=True, name="hdr")
        valid_until_ready(m, pay.valid, pay.ready, pay.payload, dut_drives=True, name="payload")

        if self.written:  # the first frame is WRITTEN
            beats = [WRITTEN[i : i + LANES] for i in range(0, len(WRITTEN), LANES)]
            beat_no = Signal(range(len(beats) + 1))
            with m.If(s.tvalid & s.tready & (beat_no < len(beats))):
                m.d.sync += beat_no.eq(beat_no + 1)
            with m.Switch(beat_no):
                for k, b in enumerate(beats):
                    with m.Case(k):
                        m.d.comb += Assume(~s.tvalid | (
                            (s.tdata[: 8 * len(b)] == int.from_bytes(b, "little"))
                            & (s.tkeep == (1 << len(b)) - 1)
                            & (s.tlast == (k == len(beats) - 1)) & ~s.tuser))

        # The outputs: always ready, or not ready for at most `stall` cycles in a row.
        for name, ready in (("hdr", hdr.ready), ("payload", pay.ready)):
            if self.stall == 0:
                m.d.comb += Assume(ready)
            else:
                run = Signal(range(self.stall + 1), name=f"{name}_stall")
                m.d.sync += run.eq(Mux(ready, 0, run + 1))
                m.d.comb += Assume(ready | (run < self.stall))

        # Input: a beat offered is taken within in_bound cycles.
        taken = s.tvalid & s.tready
        if self.in_bound is not None:
            in_wait = Signal(range(self.in_bound + 2))
            m.d.sync += in_wait.eq(Mux(s.tvalid & ~s.tready, in_wait + 1, 0))
            m.d.comb += Assert(in_wait < self.in_bound,
                               "an input beat waited in_bound cycles with the outputs draining")

        # Verdict: exactly one strobe per frame, 4 cycles after its last beat.
        ends = Signal(4)
        m.d.sync += ends.eq(Cat(taken & s.tlast, ends[:3]))
        ev = dut.events
        m.d.comb += [
            Assert(ev.any() == ends[3], "a frame's verdict strobe is not 4 cycles after its end"),
            Assert((ev & (ev - 1)) == 0, "two verdict strobes in one cycle"),
        ]

        # Records: one per accepted frame; one owed leaves within rec_bound cycles.
        hdr_take = hdr.valid & hdr.ready
        accepted = ev[Verdict.ACCEPTED.value]
        owed = Signal(4)
        m.d.sync += owed.eq(owed + accepted - hdr_take)
        rec_wait = Signal(range(self.rec_bound + 2))
        m.d.sync += rec_wait.eq(Mux((owed != 0) & ~hdr_take, rec_wait + 1, 0))
        m.d.comb += [
            Assert(~hdr_take | (owed != 0), "a record left for no accepted frame"),
            Assert(rec_wait < self.rec_bound, "an accepted frame's record was owed too long"),
        ]
        if self.stall == 0:
            acc_q = Signal(3)
            m.d.sync += acc_q.eq(Cat(accepted, acc_q[:2]))
            m.d.comb += Assert(hdr_take == acc_q[2],
                               "a record did not leave 7 cycles after its frame's last beat")

        # Payload: each record releases its payload's beats; one released
        # leaves within pay_bound cycles, `last` on each record's final beat.
        plen = hdr.payload.payload_len
        rec_beats = (plen + LANES - 1) >> (LANES.bit_length() - 1)
        beats_owed = Signal(6)
        pay_take = pay.valid & pay.ready
        m.d.sync += beats_owed.eq(beats_owed + Mux(hdr_take, rec_beats, 0) - pay_take)
        pay_wait = Signal(range(self.pay_bound + 2))
        m.d.sync += pay_wait.eq(Mux((beats_owed != 0) & ~pay_take, pay_wait + 1, 0))
        m.d.comb += [
            Assert(~pay_take | (beats_owed != 0), "a payload beat left that no record released"),
            Assert(pay_wait < self.pay_bound, "a released payload beat was held too long"),
        ]

        # Covers.
        bth = hdr.payload.bth
        hdr_stalled, pay_stalled = Signal(), Signal()
        m.d.sync += [hdr_stalled.eq(hdr.valid & ~hdr.ready),
                     pay_stalled.eq(pay.valid & ~pay.ready)]
        m.d.comb += Cover(rec_wait == self.rec_bound - 1)
        if self.written:  # a payload: the WRITTEN frame's two beats
            m.d.comb += [
                Cover(pay_wait == self.pay_bound - 1),
                Cover(pay_take & pay.payload.last & (beats_owed == 1)
                      & (pay.payload.keep == (1 << LANES) - 1)),
            ]
            if self.stall:
                m.d.comb += Cover(pay_stalled & pay.valid & ~pay.ready)
        else:  # a frame of each verdict, a record of each class without payload
            m.d.comb += [Cover(ev[i]) for i in range(len(COUNTER_NAMES))]
            m.d.comb += [
                Cover(hdr_take & hdr.payload.trimmed),
                Cover(hdr_take & (bth.opcode == Opcode.ACKNOWLEDGE)),
                Cover(hdr_take & (bth.opcode == Opcode.PROBE_REQ)),
            ]
            if self.stall:
                m.d.comb += Cover(hdr_stalled & hdr.valid & ~hdr.ready)
            if self.dut.ipv6:
                m.d.comb += [Cover(hdr_take & hdr.payload.v6 & hdr.payload.trimmed),
                             Cover(hdr_take & hdr.payload.v6
                                   & (bth.opcode == Opcode.ACKNOWLEDGE))]
        return m


_REDUCTION = ("64-bit data, sack_bits 32, max_payload 16 bytes (2 beats), the smallest frame "
              "FIFO (4 beats); bounded at 24 cycles: a frame and most of the next (an ACK's "
              "record leaves by step 16, a 12-beat write's payload by 23)")
PROOFS = [
    Proof("rx_parser_drain", harness(ParserDrainHarness, stall=0, in_bound=1, rec_bound=3,
                                     pay_bound=4, written=False),
          mode="bmc", depth=24, cover_depth=17, long=True, reduction=_REDUCTION),
    Proof("rx_parser_drain_written", harness(ParserDrainHarness, stall=0, in_bound=1,
                                             rec_bound=3, pay_bound=4, written=True),
          mode="bmc", depth=24, cover_depth=24, long=True,
          reduction=_REDUCTION + "; the first frame a fixed valid WRITE_ONLY"),
    Proof("rx_parser_drain_v6", harness(ParserDrainHarness, stall=0, in_bound=1, rec_bound=3,
                                        pay_bound=4, written=False, ipv6=True),
          mode="bmc", depth=24, cover_depth=22, long=True,
          reduction=_REDUCTION + "; built with ipv6 (frames of both families; an IPv6 "
          "ACK's record leaves by step 21)"),
    Proof("rx_parser_stall", harness(ParserDrainHarness, stall=STALL, in_bound=None,
                                     rec_bound=STALL + 3, pay_bound=STALL + 4, written=False),
          mode="bmc", depth=21, cover_depth=20, long=True,
          reduction=_REDUCTION.replace("24", "21") + f"; outputs not ready for at most {STALL} "
          "cycles in a row"),
]

"""The RX parser's verdict stages 2 and 3 and its counter strobes."""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .layouts import COUNTER_NAMES, Verdict

__all__ = ["VerdictStages"]


class VerdictStages(wiring.Component):
    """Verdict stages 2 and 3 of ``hw.rx.parser.RxParser``, and its counter
    strobes.

    ``order`` lists the verdicts of the parser's checks, first match wins
    (``Verdict.ACCEPTED`` and ``Verdict.BAD_ICRC`` are decided here).

    Interface, in: ``flags`` (one per check of ``order``: the check failed),
    ``check_icrc`` (the ICRC decides: the frame is not trimmed), both
    registered by verdict stage 1, ``v2`` (the cycle after stage 1: the
    flags hold a frame's), ``crc`` and ``residue`` (``IcrcCheck``'s, compared
    in that cycle). Out: ``v3`` (stage 3: the cycle after ``v2``), ``push``
    (stage 3: the frame is accepted), both flip-flops, and ``events``
    (flip-flops: bit i, of ``COUNTER_NAMES[i]``, high for one cycle per frame
    of that verdict; the RX registers' counter bank counts them).

    Latency: ``push`` and ``v3`` are high 1 cycle after ``v2``; the frame's
    strobe 2 cycles after ``v2``. Throughput: one frame per cycle.
    """

    def __init__(self, order):
        self.order = tuple(Verdict(v) for v in order)
        super().__init__(
            {
                "flags": In(len(self.order)),
                "check_icrc": In(1),
                "v2": In(1),
                "crc": In(32),
                "residue": In(32),
                "v3": Out(1),
                "push": Out(1),
                "events": Out(len(COUNTER_NAMES)),
            }
        )

    def elaborate(self, platform):
        m = Module()
        # Verdict stage 2: the ICRC check (per byte) and the first failing check,
        # registered. No payload beat is written in this cycle (the next
        # frame's first payload beat is its third beat at the earliest, and the
        # final beat of the frame, if any, was written in stage 1), so wr_ptr is
        # where the frame's payload ends.
        crc_ok = Signal(4)
        first_fail = Signal(len(self.order))  # the first check that failed, one-hot
        any_fail = Signal()
        check_icrc_q = Signal()
        v3 = self.v3
        # ``push`` (stage 3: the frame passes its checks and its ICRC matches,
        # or the ICRC does not decide) is the record FIFO's write enable: the
        # block RAMs' write enables, the FIFO's pointer and level, commit_ptr
        # and the rollback. So it is a flip-flop, registered here from the
        # flags and the whole CRC compare (a few LUT levels with few sinks),
        # not a LUT of partial verdicts in front of that wide net
        # (docs/timing.md#rx-parser). crc_ok, any_fail
        # and check_icrc_q tell the verdict.
        push = self.push
        crc, crc_residue = self.crc, self.residue
        m.d.sync += [
            crc_ok[j].eq(crc[8 * j : 8 * j + 8] == crc_residue[8 * j : 8 * j + 8]) for j in range(4)
        ]
        m.d.sync += push.eq(self.v2 & ~self.flags.any() & ((crc == crc_residue) | ~self.check_icrc))
        m.d.sync += [
            first_fail[i].eq(self.flags[i] & ~self.flags[:i].any()) for i in range(len(self.order))
        ]
        m.d.sync += [
            any_fail.eq(self.flags.any()),
            check_icrc_q.eq(self.check_icrc),
            v3.eq(self.v2),
        ]

        # Verdict stage 3, from registered bits: an accepted frame commits its
        # payload and pushes its record; a dropped one is rolled back.
        icrc_bad = check_icrc_q & ~crc_ok.all()
        verdict_oh = Signal(len(COUNTER_NAMES))
        for i, v in enumerate(self.order):
            m.d.comb += verdict_oh[v.value].eq(v3 & first_fail[i])
        m.d.comb += [
            verdict_oh[Verdict.BAD_ICRC.value].eq(v3 & ~any_fail & icrc_bad),
            verdict_oh[Verdict.ACCEPTED.value].eq(push),
        ]

        # The strobes, registered (stage 4).
        m.d.sync += self.events.eq(verdict_oh)
        return m

"""The GENERATED EV profile in gateware: ``EvGenerator``."""

from amaranth.hdl import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

__all__ = ["EV_WIDTH_MAX", "EvGenParams", "EvGenerator"]

EV_WIDTH_MAX = 16  # the UDP profile's EV: the source port


def EvGenParams(max_count):
    return data.StructLayout({"width": range(EV_WIDTH_MAX + 1), "init": 16, "min": 16,
                              "max": 16, "mask": 16, "count": range(max_count + 1)})


class EvGenerator(wiring.Component):
    """Derives a QP's EV values from MRC's GENERATED profile, the rule of the
    golden model's ``sim.model.ev.generated_evs`` (docs/model.md):

    candidate i, for i = 0, 1, ..., 2^width - 1, is
    ``min + (((init + i) & mask) mod (max - min + 1))``; a candidate equal to
    an EV found before it is skipped, until ``count`` EVs are found.

    Interface
    ---------
    ``start``   In(stream(EvGenParams(max_count))): a run's parameters, taken
                while idle. Refused at once (``error``, no EV) unless
                1 <= width <= 16, min <= max < 2^width and
                1 <= count <= ``max_count``; ``mask`` is any 16 bits (bits at
                or above ``width`` pick nothing new: the candidate is taken
                modulo the span).
    ``ev``      Out(stream({"index", "value"})): each EV found, in order
                (index 0, 1, ...).
    ``busy``    Out(1): a run is going on (from the cycle after ``start`` is
                taken to its end).
    ``error``   Out(1): the last run was refused, or tried all 2^width
                candidates and found fewer than ``count`` distinct EVs.
    ``found``   Out(range(max_count + 1)): EVs the last run found.

    Latency and throughput: per candidate, 16 cycles for the modulo (one
    restoring step a cycle), 1 for the value, 2 + (EVs found so far) for the
    repeat check (a scan of the EVs found, one per cycle, in a
    ``max_count``-entry memory), 1 to emit a new EV (more while ``ev`` is not
    ready) and 1 to load the next: about count x (21 + count / 2) cycles when
    candidates rarely repeat, at most 2^width x (21 + count) cycles. A
    control-path operation: its speed only sets how long a QP's EVs take to
    load.
    """

    def __init__(self, max_count: int = 16):
        if not isinstance(max_count, int) or not 1 <= max_count <= 1 << EV_WIDTH_MAX:
            raise ValueError(f"max_count must be in 1..{1 << EV_WIDTH_MAX}, not {max_count!r}")
        self.max_count = max_count
        super().__init__({
            "start": In(stream.Signature(EvGenParams(max_count))),
            "ev": Out(stream.Signature(data.StructLayout(
                {"index": range(max_count), "value": 16}))),
            "busy": Out(1),
            "error": Out(1),
            "found": Out(range(max_count + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.max_count
        p = Signal(EvGenParams(n))
        i = Signal(EV_WIDTH_MAX + 1)       # the candidate's number
        rem = Signal(16)                   # the candidate, then its remainder
        div = Signal(32)                   # the span, shifted: span << (15 - step)
        step = Signal(range(16))
        value = Signal(16)
        found = self.found
        j = Signal(range(n + 2))           # the repeat check's scan
        cmp_valid = Signal()

        m.submodules.mem = mem = Memory(shape=16, depth=n, init=[])
        rd = mem.read_port()
        wr = mem.write_port()

        span = Signal(17)
        m.d.comb += [span.eq(p.max - p.min + 1),
                     self.ev.payload.index.eq(found[:max(1, (n - 1).bit_length())]),
                     self.ev.payload.value.eq(value),
                     wr.addr.eq(found), wr.data.eq(value), rd.addr.eq(j)]
        s = self.start.payload
        valid = ((s.width >= 1) & (s.width <= EV_WIDTH_MAX) & (s.min <= s.max)
                 & ((s.max >> s.width) == 0) & (s.count >= 1) & (s.count <= n))

        def load(k):  # the candidate k into the modulo
            m.d.sync += [i.eq(k), rem.eq((p.init + k)[:16] & p.mask), div.eq(span << 15),
                         step.eq(0)]

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.start.ready.eq(1)
                with m.If(self.start.valid):
                    m.d.sync += [p.eq(s), found.eq(0), self.error.eq(~valid)]
                    with m.If(valid):
                        m.d.sync += self.busy.eq(1)
                        m.next = "LOAD"
            with m.State("LOAD"):
                load(0)
                m.next = "MOD"
            with m.State("MOD"):  # one restoring step a cycle: rem mod span
                with m.If(rem >= div):
                    m.d.sync += rem.eq(rem - div)
                m.d.sync += [div.eq(div >> 1), step.eq(step + 1)]
                with m.If(step == 15):
                    m.d.sync += [j.eq(0), cmp_valid.eq(0)]
                    m.next = "VALUE"
            with m.State("VALUE"):
                m.d.sync += value.eq(p.min + rem)
                m.next = "CHECK"
            with m.State("CHECK"):  # rd.data: the EV found at j - 1 (read at j - 1)
                m.d.sync += [j.eq(j + 1), cmp_valid.eq(j < found)]
                with m.If(cmp_valid & (rd.data == value)):
                    m.next = "NEXT"  # a repeat
                with m.Elif(~cmp_valid & (j != 0)):
                    m.next = "EMIT"
            with m.State("EMIT"):
                m.d.comb += self.ev.valid.eq(1)
                with m.If(self.ev.ready):
                    m.d.comb += wr.en.eq(1)
                    m.d.sync += found.eq(found + 1)
                    with m.If(found + 1 == p.count):
                        m.d.sync += self.busy.eq(0)
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "NEXT"
            with m.State("NEXT"):
                last = (i + 1) >> p.width
                with m.If(last != 0):  # every candidate tried: too few distinct EVs
                    m.d.sync += [self.busy.eq(0), self.error.eq(1)]
                    m.next = "IDLE"
                with m.Else():
                    load(i + 1)
                    m.next = "MOD"
        return m

"""Per-QP retransmit timers: one deadline per QP in a memory, checked by a pipelined scan."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

__all__ = ["DEADLINE_BITS", "RetransmitTimers", "TimerEntry"]

DEADLINE_BITS = 40  # 2^39 cycles of headroom for serial comparison: > 1 h at 125 MHz


def TimerEntry(gen_bits, deadline_bits=DEADLINE_BITS):
    return data.StructLayout({"armed": 1, "gen": gen_bits, "deadline": deadline_bits})


class RetransmitTimers(wiring.Component):
    """Deadline per QP, scanned one QP per cycle.

    Interface
    ---------
    ``now``      Out(``deadline_bits``, 40 by default): the free-running cycle counter
                 deadlines are written in.
    ``arm``      In(stream): ``{qpn, armed, gen, deadline}``; always ready, one write per
                 cycle. ``armed`` = 0 disarms. ``gen`` is the owner's generation tag.
    ``expired``  Out(stream): ``{qpn, gen}`` of an armed entry whose deadline has passed
                 (``now - deadline`` modulo 2^40 below 2^39: serial-number order, so a
                 deadline passed more than 2^39 cycles ago reads as ahead). The owner
                 ignores it unless ``gen`` is still its current generation for the QP: the
                 scan may report an entry again, or report one read just before it was
                 re-armed, or (the memory has no reset) one armed before a reset.

    Latency and error: the scan reads one entry per cycle and checks it the cycle
    after, so an entry is checked every ``num_qps`` cycles; ``expired`` is valid at
    most ``num_qps + 1`` cycles after its deadline, while ``expired`` is taken at
    once. The scan stops while a report waits on ``expired``.
    Cost (40-bit deadlines): one ``num_qps`` x 45-bit memory (one write, one read
    port), a 40-bit counter and one 40-bit subtractor, whatever ``num_qps``.
    Properties: hw/reliability/timer_props.py (``make formal``).
    """

    def __init__(self, num_qps: int, gen_bits: int = 4, deadline_bits: int = DEADLINE_BITS):
        self.num_qps = num_qps
        self.gen_bits = gen_bits
        self.deadline_bits = deadline_bits
        super().__init__(
            {
                "now": Out(deadline_bits),
                "arm": In(
                    stream.Signature(
                        data.StructLayout(
                            {"qpn": range(num_qps), "armed": 1, "gen": gen_bits,
                             "deadline": deadline_bits}
                        )
                    )
                ),
                "expired": Out(
                    stream.Signature(data.StructLayout({"qpn": range(num_qps), "gen": gen_bits}))
                ),
            }
        )

    def elaborate(self, platform):
        m = Module()
        n = self.num_qps
        m.d.sync += self.now.eq(self.now + 1)

        entry_layout = TimerEntry(self.gen_bits, self.deadline_bits)
        m.submodules.mem = mem = Memory(shape=entry_layout, depth=n, init=[])
        wr = mem.write_port()
        rd = mem.read_port()
        m.d.comb += [
            self.arm.ready.eq(1),
            wr.addr.eq(self.arm.payload.qpn),
            wr.data.armed.eq(self.arm.payload.armed),
            wr.data.gen.eq(self.arm.payload.gen),
            wr.data.deadline.eq(self.arm.payload.deadline),
            wr.en.eq(self.arm.valid),
        ]

        idx = Signal(range(n))  # entry being read this cycle
        idx_q = Signal(range(n))  # entry whose data is on rd.data
        busy = Signal()
        m.d.comb += busy.eq(self.expired.valid & ~self.expired.ready)
        with m.If(self.expired.ready):
            m.d.sync += self.expired.valid.eq(0)

        entry = rd.data
        late = Signal(self.deadline_bits)
        m.d.comb += late.eq(self.now - entry.deadline)
        hit = entry.armed & ~late[-1]

        with m.If(busy):
            # keep the data of idx_q on the read port until the report is taken
            m.d.comb += rd.addr.eq(idx_q)
        with m.Else():
            m.d.comb += rd.addr.eq(idx)
            m.d.sync += [idx_q.eq(idx), idx.eq(Mux(idx == n - 1, 0, idx + 1))]
            with m.If(hit):
                m.d.sync += [
                    self.expired.valid.eq(1),
                    self.expired.payload.qpn.eq(idx_q),
                    self.expired.payload.gen.eq(entry.gen),
                ]
        return m

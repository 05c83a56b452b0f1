"""The retransmit timer's deadline: the reliability core's timer writes, with the
deadline each arms computed over a pipeline. See ``TimerDeadline``."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .timer import DEADLINE_BITS

__all__ = ["TimerArm", "TimerDeadline", "TimerWrite"]

MAX_EXP = 24  # the timeout doubles at most 24 times: unit x 2^24


def TimerWrite(num_qps, gen_bits):
    """A timer write as the core asks for it: the QP, armed (0: disarm), the timer
    generation, and what the deadline is computed from: the retries taken and the
    QP's ``t`` and ``linear_cnt`` (``RelConfig``)."""
    return data.StructLayout({"qpn": range(num_qps), "armed": 1, "gen": gen_bits,
                              "retries": 5, "t": 5, "linear_cnt": 3})


def TimerArm(num_qps, gen_bits):
    """A write to ``RetransmitTimers.arm``."""
    return data.StructLayout({"qpn": range(num_qps), "armed": 1, "gen": gen_bits,
                              "deadline": DEADLINE_BITS})


class TimerDeadline(wiring.Component):
    """The reliability core's timer writes, each with its deadline: ``now`` +
    ``timeout_unit`` x 2^min(24, t + max(0, retries - linear_cnt)), modulo 2^40
    (docs/protocol.md: the timer doubles after ``linear_cnt`` retries).

    Interface:

    ``write``      In(stream(TimerWrite), always ready): one write per cycle at most;
                   the payload is sampled in every cycle (valid or not).
    ``now``        In(40): the timers' cycle counter; a write's deadline counts from
                   ``now`` of the cycle it is asked in.
    ``timer_arm``  Out(stream(TimerArm)): to ``RetransmitTimers.arm``, which is always
                   ready (``ready`` is not looked at).

    Latency 4 cycles, in order (a later write to a QP still wins): the retries past
    the linear ones, then the exponent, then the timeout ``unit << exponent``, then the
    deadline's addition, each in a cycle of its own (registered), with ``now`` and the
    write carried alongside. Throughput: one write per cycle.
    """

    def __init__(self, *, num_qps, gen_bits, timeout_unit):
        self.num_qps, self.gen_bits, self.timeout_unit = num_qps, gen_bits, timeout_unit
        super().__init__({
            "write": In(stream.Signature(TimerWrite(num_qps, gen_bits), always_ready=True)),
            "now": In(DEADLINE_BITS),
            "timer_arm": Out(stream.Signature(TimerArm(num_qps, gen_bits))),
        })

    def elaborate(self, platform):
        m = Module()
        w = self.write.payload
        arm_pipe = [(Signal(name=f"arm_v{i}"), Signal(range(self.num_qps), name=f"arm_qpn{i}"),
                     Signal(name=f"arm_armed{i}"), Signal(self.gen_bits, name=f"arm_gen{i}"),
                     Signal(DEADLINE_BITS, name=f"arm_now{i}")) for i in range(3)]
        m.d.sync += Cat(*arm_pipe[0]).eq(Cat(self.write.valid, w.qpn, w.armed, w.gen, self.now))
        for i in range(1, 3):
            m.d.sync += Cat(*arm_pipe[i]).eq(Cat(*arm_pipe[i - 1]))
        over = Signal(6)  # the retries past the linear ones
        arm_t = Signal(5)
        exp = Signal(5)
        timeout = Signal(DEADLINE_BITS)
        exp_raw = arm_t + over
        m.d.sync += [
            over.eq(Mux(w.retries > w.linear_cnt, w.retries - w.linear_cnt, 0)),
            arm_t.eq(w.t),
            exp.eq(Mux(exp_raw > MAX_EXP, MAX_EXP, exp_raw)),
            timeout.eq(Const(self.timeout_unit, DEADLINE_BITS) << exp),
        ]
        out = self.timer_arm.payload
        v2, qpn2, armed2, gen2, now2 = arm_pipe[2]
        m.d.sync += [
            self.timer_arm.valid.eq(v2), out.qpn.eq(qpn2), out.armed.eq(armed2),
            out.gen.eq(gen2), out.deadline.eq(now2 + timeout),
        ]
        return m

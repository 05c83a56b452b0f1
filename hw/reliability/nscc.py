"""NSCC's congestion window in fixed point: one QP's step per ACK, trim, timeout or
start (``NsccUnit``), and the encoding of NSCC's parameters for it (``nscc_config``).

The arithmetic is the golden model's (sim/model/cc.py, ``Nscc``, after UET 1.0 NSCC):
the window in bytes, the four ECN x delay quadrants, quick adapt, trim and timeout.
Its formats and rounding rules, which the next editor must keep bounded as stated:

- the window: Q24.8 bytes (32 bits); delays and the delay average: Q16.8 in the
  caller's time unit (24 bits); times: 16 bits, compared modulo 2**16;
- ``eta / target``, ``gamma``, ``max_md_jump``, ``qa_gate``: fixed point as
  ``NsccConfig`` says; ``nscc_params`` decodes a configuration into the exact
  parameters it stands for, so that model and unit run the same NSCC;
- the two divisions (``fi * mtu * acked / cwnd`` and ``(avg - target) / avg``)
  multiply by a reciprocal from a ROM of ``2**recip_bits`` entries, within
  ``2**-recip_bits`` of the true one (relative);
- every product is truncated to its format (below one LSB).

So a step's window is within ``step_bound`` of the model's from the same state;
``tests/unit/test_rel_nscc.py`` checks that bound step by step, and that whole
trajectories agree (docs/reliability.md, "NSCC in fixed point").
"""

import math

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, enum, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.pipeline import registered_product

__all__ = ["CWND_FRAC", "DELAY_FRAC", "NsccConfig", "NsccKind", "NsccState", "NsccUnit",
           "Reciprocal", "nscc_config", "nscc_params", "reciprocal_table", "step_bound"]

CWND_FRAC = 8  # the window's fraction bits (Q24.8 bytes)
DELAY_FRAC = 8  # the delays' fraction bits (Q16.8 time units)
GAIN_FRAC = 16  # gamma, max_md_jump, qa_gate: Q1.16
TIME_BITS = 16
ACKED_BITS = 20  # bytes one step takes: an ACK's newly acknowledged, a trim's wire size


class NsccKind(enum.Enum, shape=2):
    """What a step does: an ACK (``nbytes`` newly acknowledged, the ECN echo, an RTT
    sample), a NAK TRIMMED (``nbytes``: the trimmed packet's wire size), a
    retransmit timeout, or a QP's start (its first window and clocks)."""
    ACK = 0
    TRIM = 1
    TIMEOUT = 2
    START = 3


NsccConfig = data.StructLayout({
    "enabled": 1,
    "base_rtt": TIME_BITS,  # time units
    "target": TIME_BITS,  # target queueing delay, time units, >= 1
    "qa_delay": 24,  # qa_threshold x target, Q16.8 time units
    "qa_period": TIME_BITS,  # base_rtt + target: quick adapt's window
    "eta_m": 17,  # eta / target x 2**8 = eta_m x 2**-eta_s (Q16.8 delays)
    "eta_s": 6,
    "fi_mtu": 17,  # fi x MTU wire bytes
    "gamma": 17,  # Q1.16
    "max_md_jump": 17,  # Q1.16
    "qa_gate": 17,  # Q1.16
    "ewma_shift": 3,  # the delay average's gain is 2**-ewma_shift
    "min_cwnd": 24,  # bytes
    "max_cwnd": 24,  # bytes
})

# A QP's NSCC state, as the caller keeps it between steps.
NsccState = data.StructLayout({
    "cwnd": 24 + CWND_FRAC,
    "avg_delay": 16 + DELAY_FRAC,
    "last_md": TIME_BITS,
    "qa_start": TIME_BITS,
    "qa_bytes": 24,  # saturating
    "qa_trigger": 1,
})


def reciprocal_table(bits: int) -> list[int]:
    """Entry i: 2**(2 bits + 1) / (2**bits + i + 1/2), rounded: the reciprocal of the
    middle of the interval of mantissas (a leading 1 and ``bits`` more) that i
    stands for, ``bits`` + 2 bits wide."""
    top = 1 << bits
    return [round((1 << (2 * bits + 1)) / (top + i + 0.5)) for i in range(top)]


def _fixed(name, value, frac, bits):
    raw = round(value * (1 << frac))
    if not 0 <= raw < (1 << bits):
        raise ValueError(f"{name} must be in 0..{((1 << bits) - 1) / (1 << frac):g}, "
                         f"not {value!r}")
    return raw


def nscc_config(p, unit_ns: float, mtu_wire: int) -> dict[str, int]:
    """``NsccConfig``'s values for NSCC parameters ``p`` (the model's resolved
    ``NsccParams``: base_rtt_ns, target_delay_ns, eta, fi, gamma, max_md_jump,
    qa_gate, qa_threshold, min_cwnd, max_cwnd, ewma, enabled), times in units of
    ``unit_ns``. A ValueError names the parameter that does not fit."""
    if not unit_ns > 0:
        raise ValueError(f"unit_ns must be > 0, not {unit_ns!r}")
    base = round(p.base_rtt_ns / unit_ns)
    target = round(p.target_delay_ns / unit_ns)
    if not 1 <= target or base + target > 0x7FFF:
        raise ValueError(f"target_delay_ns must be at least one unit ({unit_ns:g} ns), and "
                         f"base_rtt_ns + target_delay_ns at most {0x7FFF} units "
                         f"({0x7FFF * unit_ns:g} ns; times wrap at 2**16), not "
                         f"{p.target_delay_ns!r} and {p.base_rtt_ns!r}")
    ewma_shift = {2.0 ** -k: k for k in range(1, 8)}.get(p.ewma)
    if ewma_shift is None:
        raise ValueError(f"ewma must be 2**-k for k in 1..7 (a shift), not {p.ewma!r}")
    if not 0 <= p.eta < 2:
        raise ValueError(f"eta must be in 0..2, not {p.eta!r}")
    if not 0 <= p.max_md_jump <= 1:
        raise ValueError(f"max_md_jump must be in 0..1 (a fraction of the window), "
                         f"not {p.max_md_jump!r}")
    # eta / target x 2**8 = eta_m x 2**-eta_s, eta_m in [2**16, 2**17) (17 bits kept)
    ratio = p.eta * (1 << DELAY_FRAC) / target
    eta_m = eta_s = 0
    if ratio:
        eta_s = min(63, 17 - math.frexp(ratio)[1])
        eta_m = round(ratio * 2.0 ** eta_s)
        if eta_m >> 17:
            eta_s -= 1
            eta_m = round(ratio * 2.0 ** eta_s)
    min_cwnd, max_cwnd = round(p.min_cwnd), round(p.max_cwnd)
    if not 1 <= min_cwnd <= max_cwnd < (1 << 24):
        raise ValueError(f"min_cwnd and max_cwnd must be 1 <= min_cwnd <= max_cwnd < 2**24 "
                         f"bytes, not {p.min_cwnd!r} and {p.max_cwnd!r}")
    return {
        "enabled": int(bool(p.enabled)),
        "base_rtt": base,
        "target": target,
        "qa_delay": _fixed("qa_threshold x target_delay (in units)",
                           p.qa_threshold * target, DELAY_FRAC, 24),
        "qa_period": base + target,
        "eta_m": eta_m,
        "eta_s": eta_s,
        "fi_mtu": _fixed("fi x mtu (bytes)", p.fi * mtu_wire, 0, 17),
        "gamma": _fixed("gamma", p.gamma, GAIN_FRAC, 17),
        "max_md_jump": _fixed("max_md_jump", p.max_md_jump, GAIN_FRAC, 17),
        "qa_gate": _fixed("qa_gate", p.qa_gate, GAIN_FRAC, 17),
        "ewma_shift": ewma_shift,
        "min_cwnd": min_cwnd,
        "max_cwnd": max_cwnd,
    }


def nscc_params(cfg: dict[str, int], unit_ns: float, mtu_wire: int) -> dict[str, float]:
    """The NSCC parameters (``NsccParams``' fields, times in ns) that ``cfg`` stands for
    exactly: what the model must run to do what the unit does."""
    target_ns = cfg["target"] * unit_ns
    return {
        "base_rtt_ns": cfg["base_rtt"] * unit_ns,
        "target_delay_ns": target_ns,
        "eta": cfg["eta_m"] * 2.0 ** -cfg["eta_s"] * cfg["target"] / (1 << DELAY_FRAC),
        "fi": cfg["fi_mtu"] / mtu_wire,
        "gamma": cfg["gamma"] / (1 << GAIN_FRAC),
        "max_md_jump": cfg["max_md_jump"] / (1 << GAIN_FRAC),
        "qa_gate": cfg["qa_gate"] / (1 << GAIN_FRAC),
        "qa_threshold": cfg["qa_delay"] / (1 << DELAY_FRAC) / cfg["target"],
        "max_cwnd": float(cfg["max_cwnd"]),
        "min_cwnd": float(cfg["min_cwnd"]),
        "ewma": 2.0 ** -cfg["ewma_shift"],
        "enabled": bool(cfg["enabled"]),
    }


def step_bound(recip_bits: int, change: float, nbytes: int, cwnd: float,
               md_per_unit: float = 0.0) -> float:
    """How far (bytes) a step's window may be from the model's, from the same state,
    for a model step that moved the window by ``change`` bytes, took ``nbytes`` and
    held at most ``cwnd``:

    - the fair increase and the decrease (their divisions): 2**-recip_bits of
      themselves;
    - the decrease's fraction, truncated twice: 2**-16 of the window each;
    - for a decrease, the delay average's truncation (one LSB, 2**-8 unit) moves
      the fraction ``gamma x (avg - target) / avg`` by at most ``gamma / target``
      per unit: ``md_per_unit`` (gamma / target in units, 0 without a decrease)
      x 2**-8 of the window;
    - the proportional increase's fraction, truncated: 2**-16 per byte taken;
    - an LSB per truncation of the window."""
    return (change * 2.0 ** -recip_bits + cwnd * 2.0 ** -15
            + cwnd * md_per_unit * 2.0 ** -DELAY_FRAC + nbytes * 2.0 ** -16
            + 4 * 2.0 ** -CWND_FRAC)


def _shift_down(value, amount, offset: int):
    """``value`` x 2**-(``amount`` + ``offset``), for an unsigned ``amount`` and a
    constant ``offset`` < 0 (``NsccUnit``'s shifts, with at most 14 reciprocal
    bits)."""
    assert offset < 0
    return Cat(Const(0, -offset), value) >> amount


class Reciprocal(wiring.Component):
    """1 / ``x`` for an unsigned ``x`` > 0: ``r`` x 2**-(``p`` + bits + 1), with ``p``
    the position of ``x``'s leading 1 and ``r`` (bits + 2 bits) from a ROM indexed
    by the ``bits`` bits after it; within 2**-bits of 1 / ``x`` (relative).

    Interface: ``x`` In(width), read every cycle; ``r``, ``p`` Out: valid 4 cycles
    after ``x`` (the leading 1 and the normalised ``x`` registered, the ROM's read
    register and a register after it: a block RAM's output is slow). Throughput:
    one per cycle. ``x`` = 0 gives ``p`` = 0 and a meaningless ``r``."""

    def __init__(self, width: int, bits: int):
        self.width = width
        self.bits = bits
        super().__init__({"x": In(width), "r": Out(bits + 2), "p": Out(range(width))})

    def elaborate(self, platform):
        m = Module()
        w, b = self.width, self.bits
        zeros = Signal(range(w))  # above the leading 1
        x_q = Signal(w)
        m.d.sync += x_q.eq(self.x)
        for i in range(w):  # the last match, the highest 1, wins
            with m.If(self.x[i]):
                m.d.sync += zeros.eq(w - 1 - i)
        # the ``b`` bits after the leading 1 (which the shift puts at bit w - 1)
        norm = Signal(b)
        m.d.sync += norm.eq((x_q << zeros)[w - 1 - b: w - 1])
        m.submodules.rom = rom = Memory(shape=b + 2, depth=1 << b, init=reciprocal_table(b))
        port = rom.read_port()
        m.d.comb += port.addr.eq(norm)
        m.d.sync += self.r.eq(port.data)
        zeros_q = Signal(range(w))
        zeros_qq = Signal(range(w))
        m.d.sync += [zeros_q.eq(zeros), zeros_qq.eq(zeros_q), self.p.eq(w - 1 - zeros_qq)]
        return m


class NsccUnit(wiring.Component):
    """One NSCC step of a QP's window (sim/model/cc.py's ``Nscc``, in fixed point: the
    module docstring gives the rules).

    Interface:

    ``config``  In(NsccConfig): the parameters, steady while a step runs.
    ``start``   In(1): a step's inputs are taken in this cycle: ``kind``
                (``NsccKind``), ``now`` (16-bit time), ``nbytes`` (an ACK's newly
                acknowledged bytes, a trim's wire bytes), ``ece``, ``rtt_valid``,
                ``rtt`` (the ACK's RTT sample, time units) and ``state``
                (``NsccState``, the QP's).
    ``done``    Out(1): ``LATENCY`` cycles after ``start``: ``new`` (NsccState) is the
                QP's state after the step, ``md`` says it was a multiplicative
                decrease, ``qa`` a quick adapt; they hold until the next step's.

    ACK: the delay ``max(rtt - base_rtt, 0)`` (else the average) updates the
    average and, with ECE, picks the quadrant: no ECE and below target, the
    proportional and the fair increase; no ECE, the fair increase; ECE at or above
    target, a decrease at most once per ``base_rtt``; else nothing. A delay above
    ``qa_delay`` arms quick adapt; at the end of each ``qa_period`` an armed quick
    adapt with fewer than ``qa_gate`` x cwnd bytes acknowledged in the period drops
    the window to them. TRIM: the window less the bytes, quick adapt armed.
    TIMEOUT: half the window. START: ``max_cwnd`` and fresh clocks. Every step
    ends clamped to ``min_cwnd``..``max_cwnd``; with ``enabled`` = 0 only START
    changes the state.

    Latency: ``LATENCY`` (24) cycles, each stage one carry chain, one barrel shift
    or half a product (``registered_product``), registered. Throughput: one step
    per ``LATENCY`` cycles (a step's registers hold it from ``start`` to ``done``).
    """

    LATENCY = 24

    def __init__(self, recip_bits: int = 10):
        if not isinstance(recip_bits, int) or not 6 <= recip_bits <= 14:
            self._MustUse__silence = True  # never elaborated: no "never used" warning
            raise ValueError(f"recip_bits must be 6..14 (a ROM of 2**recip_bits entries), "
                             f"not {recip_bits!r}")
        self.recip_bits = recip_bits
        super().__init__({
            "config": In(NsccConfig),
            "start": In(1),
            "kind": In(NsccKind),
            "now": In(TIME_BITS),
            "nbytes": In(ACKED_BITS),
            "ece": In(1),
            "rtt_valid": In(1),
            "rtt": In(TIME_BITS),
            "state": In(NsccState),
            "done": Out(1),
            "new": Out(NsccState),
            "md": Out(1),
            "qa": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        C = self.config
        B = self.recip_bits
        cw_bits = 24 + CWND_FRAC

        def reg(name, width, value):
            """A stage's register, loaded every cycle: a step's value is in it one
            cycle after the values it is computed from."""
            s = Signal(width, name=name)
            m.d.sync += s.eq(value)
            return s

        def product(name, a, b, drop=0):  # two stages (hw/pipeline.py)
            return registered_product(m, a, b, name, drop)

        def saturated(value, width):
            return Mux(value[width:].any(), (1 << width) - 1, value[:width])

        # cycle 1: the step's inputs, held to done
        i = Signal(NsccState, name="i_state")
        kind = Signal(NsccKind)
        now, nbytes = Signal(TIME_BITS), Signal(ACKED_BITS)
        ece, rtt_valid, rtt = Signal(), Signal(), Signal(TIME_BITS)
        with m.If(self.start):
            m.d.sync += [i.eq(self.state), kind.eq(self.kind), now.eq(self.now),
                         nbytes.eq(self.nbytes), ece.eq(self.ece),
                         rtt_valid.eq(self.rtt_valid), rtt.eq(self.rtt)]
        is_ack = C.enabled & (kind == NsccKind.ACK)
        some = nbytes != 0
        target = Cat(Const(0, DELAY_FRAC), C.target)  # Q16.8

        # cycle 2: the differences; cycle 3: fi x mtu x nbytes
        dsub = reg("dsub", TIME_BITS + 1, rtt - C.base_rtt)  # bit 16: rtt < base_rtt
        md_age = reg("md_age", TIME_BITS, now - i.last_md)
        qa_age = reg("qa_age", TIME_BITS, now - i.qa_start)
        qa_sum = reg("qa_sum", 25, i.qa_bytes + nbytes)
        fair_p = product("fair_p", nbytes, C.fi_mtu)
        # cycle 3
        delay = reg("delay", 24, Mux(dsub[TIME_BITS], 0, Cat(Const(0, DELAY_FRAC), dsub[:16])))
        md_ok = reg("md_ok", 1, md_age >= C.base_rtt)
        qa_due = reg("qa_due", 1, qa_age >= C.qa_period)
        qa_bytes = reg("qa_bytes", 24, saturated(qa_sum, 24))
        # cycle 4: the delay this ACK decides by (its sample, else the average)
        dly = reg("dly", 24, Mux(rtt_valid, delay, i.avg_delay))
        ediff = reg("ediff", 25, delay - i.avg_delay)
        # cycle 5
        avg_new = reg("avg_new", 24, Mux(rtt_valid,
                                         i.avg_delay + (ediff.as_signed() >> C.ewma_shift),
                                         i.avg_delay))
        below = reg("below", 1, dly < target)
        to_target = reg("to_target", 24, target - dly)
        qa_hit = reg("qa_hit", 1, dly > C.qa_delay)
        # cycle 6: the decrease's average (its reciprocal: cycle 10)
        avg_m = reg("avg_m", 24, Mux(avg_new > dly, avg_new, dly))
        m.submodules.recip_avg = recip_avg = Reciprocal(24, B)
        m.d.comb += recip_avg.x.eq(avg_m)
        # cycle 7: eta x (target - delay) / target x 2**16 (below target: < 2**17)
        pi_p = product("pi_p", to_target, C.eta_m)
        over = reg("over", 24, avg_m - target)
        # cycle 8
        pi_frac = reg("pi_frac", 17, pi_p >> C.eta_s)
        # cycle 10: the proportional increase, Q24.8 (nbytes x pi_frac x 2**-16 x 2**8)
        pi_inc = product("pi_inc", nbytes, pi_frac, drop=8)
        # cycle 11: the window after it (its reciprocal: cycle 15)
        # (cwnd1 is read for an enabled ACK only; with nbytes = 0, pi_inc is 0)
        pi = ~ece & below
        cwnd1 = reg("cwnd1", cw_bits, saturated(i.cwnd + Mux(pi, pi_inc, 0), cw_bits))
        m.submodules.recip_cw = recip_cw = Reciprocal(cw_bits, B)
        m.d.comb += recip_cw.x.eq(cwnd1)
        # cycle 12: (avg - target) x r, from cycle 10's r
        over_r = product("over_r", over, recip_avg.r)
        p_avg = reg("p_avg", 5, reg("p_avg_0", 5, recip_avg.p))
        # cycle 13: (avg - target) / avg in Q16 (avg >= target >= 1 unit: p_avg >= 8)
        ratio = reg("ratio", 17, _shift_down(over_r, p_avg, B + 1 - 16))
        # cycle 14: gamma x ratio (one MULT18X18D); cycle 15: the decrease's fraction
        gcut_p = reg("gcut_p", 18, (C.gamma * ratio) >> 16)
        cut = reg("cut", 17, Mux(gcut_p > C.max_md_jump, C.max_md_jump, gcut_p))
        # cycle 17: fi x mtu x nbytes x r, from cycle 15's r; cwnd1 x cut
        fair_r = product("fair_r", fair_p, recip_cw.r)
        p_cw = reg("p_cw", 5, reg("p_cw_0", 5, recip_cw.p))
        md_p = product("md_p", cwnd1, cut, drop=GAIN_FRAC)
        # cycle 18: the fair increase (cwnd1 >= 1 byte: p_cw >= 8), Q24.8, unsaturated;
        # the decrease in bytes (max_md_jump <= 1: at most cwnd1)
        fair_full = reg("fair_full", len(fair_r), _shift_down(fair_r, p_cw, B + 1 - 16))
        md_dec = reg("md_dec", cw_bits, saturated(md_p, cw_bits))
        # cycle 19: the fair increase and the decrease applied
        fair_sum = reg("fair_sum", cw_bits, saturated(cwnd1 + saturated(fair_full, cw_bits),
                                                      cw_bits))
        md_sub = reg("md_sub", cw_bits, cwnd1 - md_dec)
        # cycle 20: the window after the quadrant's action (or the trim, the timeout)
        fair = ~ece  # (read in the ACK branch only; with nbytes = 0, fair_inc is 0)
        md = is_ack & some & ece & ~below & md_ok
        trim_sub = i.cwnd - Cat(Const(0, CWND_FRAC), nbytes)
        cwnd2_v = Signal(cw_bits)
        with m.If(~C.enabled):
            m.d.comb += cwnd2_v.eq(i.cwnd)
        with m.Elif(kind == NsccKind.ACK):
            m.d.comb += cwnd2_v.eq(Mux(fair, fair_sum, Mux(md, md_sub, cwnd1)))
        with m.Elif(kind == NsccKind.TRIM):
            m.d.comb += cwnd2_v.eq(Mux(trim_sub[cw_bits], 0, trim_sub))
        with m.Elif(kind == NsccKind.TIMEOUT):
            m.d.comb += cwnd2_v.eq(i.cwnd >> 1)
        with m.If(kind == NsccKind.START):
            m.d.comb += cwnd2_v.eq(Cat(Const(0, CWND_FRAC), C.max_cwnd))
        cwnd2 = reg("cwnd2", cw_bits, cwnd2_v)
        md_q = reg("md_q", 1, md)
        trigger = reg("trigger", 1, Mux(kind == NsccKind.START, 0,
                                        Mux(~C.enabled, i.qa_trigger,
                                            Mux(kind == NsccKind.TRIM, 1,
                                                Mux(is_ack, i.qa_trigger | qa_hit,
                                                    i.qa_trigger)))))
        # cycle 22: quick adapt's gate, qa_gate x cwnd2 (Q24.8 once shifted)
        qa_gate = product("qa_gate", cwnd2, C.qa_gate, drop=GAIN_FRAC)
        # cycle 23: quick adapt at the end of its period
        qa_cw = Cat(Const(0, CWND_FRAC), qa_bytes)
        min_cw = Cat(Const(0, CWND_FRAC), C.min_cwnd)
        max_cw = Cat(Const(0, CWND_FRAC), C.max_cwnd)
        period_end = is_ack & qa_due
        fire = period_end & trigger & (qa_cw < qa_gate)
        cwnd3 = reg("cwnd3", cw_bits, Mux(fire, Mux(qa_cw > min_cw, qa_cw, min_cw), cwnd2))
        qa_q = reg("qa_q", 1, fire)
        # cycle 24: the bounds (the window is clamped as it is read)
        low = reg("low", 1, cwnd3 < min_cw)
        high = reg("high", 1, cwnd3 > max_cw)
        cwnd4 = reg("cwnd4", cw_bits, cwnd3)
        end_q = reg("end_q", 1, period_end)
        trig_q = reg("trig_q", 1, trigger)

        started = kind == NsccKind.START
        new = self.new
        m.d.comb += [
            new.cwnd.eq(Mux(~C.enabled & ~started, i.cwnd,
                            Mux(low, min_cw, Mux(high, max_cw, cwnd4)))),
            new.avg_delay.eq(Mux(started, 0, Mux(is_ack, avg_new, i.avg_delay))),
            new.last_md.eq(Mux(started, now - C.base_rtt, Mux(md_q, now, i.last_md))),
            new.qa_start.eq(Mux(started | end_q, now, i.qa_start)),
            new.qa_bytes.eq(Mux(started | end_q, 0, Mux(is_ack, qa_bytes, i.qa_bytes))),
            new.qa_trigger.eq(Mux(end_q, 0, trig_q)),
            self.md.eq(md_q),
            self.qa.eq(qa_q),
        ]
        # done: start, LATENCY cycles on
        line = Signal(self.LATENCY)
        m.d.sync += line.eq(Cat(self.start, line[:-1]))
        m.d.comb += self.done.eq(line[-1])
        return m

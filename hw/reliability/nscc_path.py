"""UET NSCC in the reliability engine (``NsccPath``): the core's congestion events
turned into ``NsccEngine`` steps, and the window TX gets, NSCC's or the core's own;
with its registers' layout (``NsccRegs``, after registers.py's ``NSCC_REGISTERS``)
and their values (``nscc_register_values``)."""

from types import SimpleNamespace

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .cc_defaults import (
    DATA_WIRE_OVERHEAD,
    NSCC_GAINS,
    RTT_UNIT_CYCLES,
    TARGET_DELAY_FRACTION,
    nscc_resolved,
)
from .core_layouts import CcEvent
from .layouts import CwndUpdate
from .nscc import ACKED_BITS, NsccKind, nscc_config
from .nscc_engine import NsccEngine, packet_divider
from .registers import NSCC_REGISTERS

__all__ = ["NsccPath", "NsccRegs", "nscc_register_values", "nscc_register_words",
           "nscc_reset_values", "nscc_window"]


def _word(fields):
    """A register's layout: its fields at their bits, padding between them."""
    layout, at = {}, 0
    for name, low, width, _ in fields:
        if low > at:
            layout[f"_{name}_pad"] = low - at
        layout[name] = width
        at = low + width
    return data.StructLayout(layout)


# The registers' contents, one field per register (each a word's fields).
NsccRegs = data.StructLayout({name: _word(f) for name, (_, f) in NSCC_REGISTERS.items()})


def nscc_register_values(*, clk_freq_hz: int, mtu_wire: int, rate_bps: float,
                         base_rtt_ns: float, enabled: bool = True, **params) -> dict:
    """``NsccRegs``' values (a dict by register, then field) for NSCC at ``base_rtt_ns``
    with the gains ``params`` (``NSCC_GAINS``' names, ``target_delay_ns``, ``max_cwnd``,
    ``min_cwnd``; missing ones take their defaults, ``nscc_resolved``), the window in
    packets of ``mtu_wire`` wire bytes, the BDP from ``rate_bps``. A ValueError names a
    parameter that does not fit the registers (``nscc_config``'s)."""
    unknown = set(params) - set(NSCC_GAINS) - {"target_delay_ns", "max_cwnd", "min_cwnd"}
    if unknown:
        raise ValueError(f"unknown NSCC parameters {sorted(unknown)}; known: "
                         f"{sorted(NSCC_GAINS)}, target_delay_ns, max_cwnd, min_cwnd")
    p = nscc_resolved({**NSCC_GAINS, **params, "base_rtt_ns": base_rtt_ns, "enabled": enabled},
                      base_rtt_ns * 1e-9 * rate_bps / 8, mtu_wire)
    unit_ns = RTT_UNIT_CYCLES * 1e9 / clk_freq_hz
    cfg = nscc_config(SimpleNamespace(**p), unit_ns, mtu_wire)
    mul, shift = packet_divider(mtu_wire)
    cfg.update(mtu_wire=mtu_wire, pkt_mul=mul, pkt_shift=shift)
    return {name: {f: cfg[f] for f, *_ in fields} for name, (_, fields) in NSCC_REGISTERS.items()}


def nscc_register_words(values: dict) -> dict[str, int]:
    """The 32-bit word of each register for ``nscc_register_values``' ``values``."""
    return {name: sum(values[name][f] << low for f, low, _, _ in fields)
            for name, (_, fields) in NSCC_REGISTERS.items()}


def nscc_reset_values(clk_freq_hz: int, data_width: int, max_mtu: int, base_rtt_ns: float):
    """The registers' reset: NSCC's defaults at ``base_rtt_ns`` (or, at a clock so
    slow that its target delay would be under one 16-cycle unit, the base RTT whose
    target is one unit), for packets of ``max_mtu``, at the data path's rate,
    disabled."""
    unit_ns = RTT_UNIT_CYCLES * 1e9 / clk_freq_hz
    return nscc_register_values(clk_freq_hz=clk_freq_hz, mtu_wire=max_mtu + DATA_WIRE_OVERHEAD,
                                rate_bps=float(data_width) * clk_freq_hz,
                                base_rtt_ns=max(base_rtt_ns, unit_ns / TARGET_DELAY_FRACTION),
                                enabled=False)


class NsccPath(wiring.Component):
    """The window TX gets: the core's (``core_cwnd``) while NSCC is off, NSCC's
    (``NsccEngine``) while it is on (``regs.nscc_ctrl.enabled``).

    Interface:

    ``regs``       In(NsccRegs): the NSCC registers.
    ``event``      In(stream(CcEvent)): the core's ACK, TIMEOUT and START events.
                   Dropped while NSCC is off. On: an ACK is one step of ``newly`` x
                   ``mtu_wire`` bytes (saturating at 2^20 - 1), preceded by a TRIM
                   step of ``mtu_wire`` bytes if ``trim`` (as the golden model takes
                   a NAK TRIMMED: ``on_trim``, then ``on_ack``); TIMEOUT and START one
                   step each.
    ``core_cwnd``  In(stream(CwndUpdate)): the core's window in packets; passed on
                   while NSCC is off, dropped while it is on.
    ``cwnd_update`` Out(stream(CwndUpdate)): the QP's window for TX, in packets.
    ``md``, ``qa`` Out(1): strobes, an NSCC step decreased the window, or quick
                   adapt cut it.

    The bytes are counted in full packets (``mtu_wire`` each), as TX counts its
    window in packets: for full-MTU traffic the steps are the model's; a shorter
    packet counts as a full one.

    Latency: an event's step is offered 3 cycles after the event is taken (a
    trim's: its TRIM step 2 cycles after, its ACK step when the engine takes the
    next one); the window follows ``NsccEngine.LATENCY`` (31) cycles after the
    engine takes a step. Throughput: one step per 32 cycles (the engine's);
    events wait in the core's FIFO meanwhile (and the core, when it is full).
    """

    def __init__(self, num_qps: int, window: int):
        self.num_qps, self.window = num_qps, window
        super().__init__({
            "regs": In(NsccRegs),
            "event": In(stream.Signature(CcEvent(num_qps, window))),
            "core_cwnd": In(stream.Signature(CwndUpdate)),
            "cwnd_update": Out(stream.Signature(CwndUpdate)),
            "md": Out(1),
            "qa": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.engine = engine = NsccEngine(self.num_qps, self.window)
        regs = self.regs
        on = Signal()
        m.d.sync += on.eq(regs.nscc_ctrl.enabled)
        cfg = engine.config
        for name, (_, fields) in NSCC_REGISTERS.items():
            for f, *_ in fields:
                if f in ("mtu_wire", "pkt_shift", "pkt_mul"):
                    continue
                m.d.comb += cfg[f].eq(regs[name][f])
        mtu_wire = regs.nscc_mtu.mtu_wire
        m.d.comb += [engine.pkt_mul.eq(regs.nscc_pkt_mul.pkt_mul),
                     engine.pkt_shift.eq(regs.nscc_mtu.pkt_shift),
                     self.md.eq(engine.md), self.qa.eq(engine.qa)]

        # the window out: NSCC's while on, the core's while off (the other dropped)
        win = engine.window.payload
        with m.If(on):
            m.d.comb += [self.cwnd_update.valid.eq(engine.window.valid),
                         self.cwnd_update.payload.qpn.eq(win.qpn),
                         self.cwnd_update.payload.cwnd.eq(win.packets),
                         engine.window.ready.eq(self.cwnd_update.ready),
                         self.core_cwnd.ready.eq(1)]
        with m.Else():
            wiring.connect(m, wiring.flipped(self.core_cwnd), wiring.flipped(self.cwnd_update))
            m.d.comb += engine.window.ready.eq(1)

        # the events in: one (or a trim's two) engine steps each
        ev = Signal.like(self.event.payload)
        prod = Signal(range((self.window + 1) * (1 << 14)))
        m.d.sync += prod.eq(ev.newly * mtu_wire)  # valid from TRIM on (ev set in IDLE)
        step = engine.step.payload
        m.d.comb += [step.qpn.eq(ev.qpn), step.now.eq(ev.now), step.ece.eq(ev.ece),
                     step.rtt_valid.eq(ev.rtt_valid), step.rtt.eq(ev.rtt)]
        full = (1 << ACKED_BITS) - 1
        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.event.ready.eq(1)
                with m.If(self.event.valid & on):
                    m.d.sync += ev.eq(self.event.payload)
                    m.next = "MUL"
            with m.State("MUL"):
                m.next = "TRIM"
            with m.State("TRIM"):  # NAK TRIMMED: its cut first
                m.d.comb += [step.kind.eq(NsccKind.TRIM), step.nbytes.eq(mtu_wire),
                             engine.step.valid.eq(ev.trim)]
                with m.If(~ev.trim | engine.step.ready):
                    m.next = "STEP"
            with m.State("STEP"):
                m.d.comb += [step.kind.eq(ev.kind), step.nbytes.eq(Mux(prod > full, full, prod)),
                             engine.step.valid.eq(1)]
                with m.If(engine.step.ready):
                    m.next = "IDLE"
        return m


def nscc_window(m, core, cwnd_update, *, num_qps, window, reset, build):
    """``ReliabilityEngine``'s window for TX: ``core``'s ``cc_event`` and
    ``cwnd_update`` through an ``NsccPath`` onto ``cwnd_update`` (the engine's
    port, flipped), its registers reset to ``reset``; returns them by name for the
    CSR block. Without ``build``: the core's window straight on, its events
    dropped, no registers (they read 0)."""
    if not build:
        wiring.connect(m, core.cwnd_update, cwnd_update)
        m.d.comb += core.cc_event.ready.eq(1)
        return {}
    regs = Signal(NsccRegs, init=reset)
    m.submodules.nscc = nscc = NsccPath(num_qps, window)
    wiring.connect(m, core.cc_event, nscc.event)
    wiring.connect(m, core.cwnd_update, nscc.core_cwnd)
    wiring.connect(m, nscc.cwnd_update, cwnd_update)
    m.d.comb += nscc.regs.eq(regs)
    return {name: regs[name] for name in NSCC_REGISTERS}

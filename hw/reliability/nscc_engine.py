"""Every QP's NSCC window: its state in block RAM, one ``NsccUnit`` step per event,
and the window in packets for TX (``NsccEngine``)."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.pipeline import registered_product

from .nscc import ACKED_BITS, CWND_FRAC, TIME_BITS, NsccConfig, NsccKind, NsccState, NsccUnit

__all__ = ["NsccEngine", "NsccStep", "NsccWindow", "packet_divider"]

BYTES_BITS = 24  # the window's whole bytes (Q24.8 without its fraction)


def NsccStep(num_qps):
    """One event of a QP for its window: ``NsccUnit``'s step inputs and the QP."""
    return data.StructLayout({"qpn": range(num_qps), "kind": NsccKind, "now": TIME_BITS,
                              "nbytes": ACKED_BITS, "ece": 1, "rtt_valid": 1,
                              "rtt": TIME_BITS})


def NsccWindow(num_qps):
    """A QP's window after a step: in whole bytes, and in packets for TX."""
    return data.StructLayout({"qpn": range(num_qps), "bytes": BYTES_BITS, "packets": 16})


def packet_divider(mtu_wire: int) -> tuple[int, int]:
    """(``pkt_mul``, ``pkt_shift``) with ``(b x pkt_mul) >> pkt_shift`` = ``b //
    mtu_wire`` for every ``b`` below 2**24 (a multiply for the division by a
    constant; the round-up reciprocal with 24 + bit_length(mtu_wire) bits of
    shift is exact over that range). A ValueError names a bad ``mtu_wire``."""
    if not isinstance(mtu_wire, int) or not 64 <= mtu_wire < (1 << 14):
        raise ValueError(f"mtu_wire must be 64..16383 bytes, not {mtu_wire!r}")
    shift = BYTES_BITS + mtu_wire.bit_length()
    return -(-(1 << shift) // mtu_wire), shift


class NsccEngine(wiring.Component):
    """The NSCC windows of ``num_qps`` QPs.

    Interface:

    ``config``    In(NsccConfig): as ``NsccUnit``'s; ``pkt_mul``, ``pkt_shift``
                  In: ``packet_divider(mtu_wire)``, the packets of a window are
                  its bytes // ``mtu_wire``, then within 1..``window``.
    ``step``      In(stream(NsccStep)): an event of a QP (its ACK, trim,
                  timeout, or its start when it enters RTS).
    ``window``    Out(stream(NsccWindow)): the QP's window after every step
                  (a START's included).
    ``md``, ``qa`` Out(1): one-cycle strobes, a step decreased the window, or
                  quick adapt cut it (for the counters).

    Each QP's ``NsccState`` is in a memory (``num_qps`` x 113 bits), read when
    its step is taken and written when the unit is done; a QP's state is
    meaningless until its START. One step at a time: a step is taken ``IDLE``
    -> ``READ`` -> ``RUN`` (``NsccUnit.LATENCY`` cycles) -> ``DIVIDE`` (the
    packets, 4 cycles) -> ``WRITE`` -> ``EMIT``.

    Latency: ``LATENCY`` (31) cycles from a step taken to its window valid.
    Throughput: one step per ``LATENCY`` + 1 cycles (the unit holds one).
    """

    LATENCY = NsccUnit.LATENCY + 7

    def __init__(self, num_qps: int, window: int, recip_bits: int = 10):
        if not isinstance(window, int) or not 1 <= window < (1 << 16):
            raise ValueError(f"window must be 1..65535 packets, not {window!r}")
        self.num_qps = num_qps
        self.window_max = window
        self.recip_bits = recip_bits
        super().__init__({
            "config": In(NsccConfig),
            "pkt_mul": In(26),
            "pkt_shift": In(6),
            "step": In(stream.Signature(NsccStep(num_qps))),
            "window": Out(stream.Signature(NsccWindow(num_qps))),
            "md": Out(1),
            "qa": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.unit = unit = NsccUnit(self.recip_bits)
        m.submodules.states = states = Memory(shape=NsccState, depth=self.num_qps, init=[])
        rd = states.read_port()
        wr = states.write_port()

        step = Signal(NsccStep(self.num_qps))  # the step being run
        wait = Signal(range(NsccUnit.LATENCY + 1))
        m.d.comb += [
            unit.config.eq(self.config),
            wr.addr.eq(step.qpn),
            wr.data.eq(unit.new),
            unit.state.eq(rd.data),
            unit.kind.eq(step.kind), unit.now.eq(step.now), unit.nbytes.eq(step.nbytes),
            unit.ece.eq(step.ece), unit.rtt_valid.eq(step.rtt_valid), unit.rtt.eq(step.rtt),
        ]
        # the packets: whole bytes (registered: the unit's output is a mux) x
        # pkt_mul >> pkt_shift (registered_product: 2 cycles), then within 1..window
        whole = Signal(BYTES_BITS)
        m.d.sync += whole.eq(unit.new.cwnd[CWND_FRAC:])
        quotient = Signal(BYTES_BITS + 1)
        prod = registered_product(m, whole, self.pkt_mul, "pkt_prod")
        m.d.sync += quotient.eq(prod >> self.pkt_shift)
        packets = Mux(quotient == 0, 1,
                      Mux(quotient > self.window_max, self.window_max, quotient))
        out = self.window.payload

        with m.FSM():
            with m.State("IDLE"):  # the QP's state is read as its step is taken
                m.d.comb += [self.step.ready.eq(1), rd.addr.eq(self.step.payload.qpn)]
                with m.If(self.step.valid):
                    m.d.sync += step.eq(self.step.payload)
                    m.next = "READ"
            with m.State("READ"):
                m.d.comb += unit.start.eq(1)
                m.d.sync += wait.eq(0)
                m.next = "RUN"
            with m.State("RUN"):
                with m.If(unit.done):
                    m.d.comb += [self.md.eq(unit.md), self.qa.eq(unit.qa)]
                    m.d.sync += wait.eq(0)
                    m.next = "DIVIDE"
            with m.State("DIVIDE"):  # unit.new holds until the next start
                m.d.sync += wait.eq(wait + 1)
                with m.If(wait == 3):
                    m.next = "WRITE"
            with m.State("WRITE"):
                m.d.comb += wr.en.eq(1)
                m.d.sync += [out.qpn.eq(step.qpn), out.bytes.eq(whole),
                             out.packets.eq(packets)]
                m.next = "EMIT"
            with m.State("EMIT"):
                m.d.comb += self.window.valid.eq(1)
                with m.If(self.window.ready):
                    m.next = "IDLE"
        return m


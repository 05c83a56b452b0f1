"""An ACK's SACK bitmap and NAK PSN against the QP's new oldest unacknowledged PSN,
for the reliability core. See ``SackAlign``."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.bits import below_const, shift_right
from hw.protocol import PSN_BITS

__all__ = ["SackAlign"]


class SackAlign(wiring.Component):
    """The SACK bitmap (bit i: PSN ``sack_base + i``) as a window relative to the new
    ``una`` (bit i: PSN ``una + i``), and whether the NAK's PSN is in flight and at
    which offset from ``una``, for the ACK the core is processing.

    The new ``una`` is known before the core's advance walk ends: ``cum_next``
    (cum_psn + 1), or the ``una`` before the ACK when the ACK is behind it
    (``behind``). The distances of ``sack_base`` and the NAK's PSN from both are
    registered every cycle (two stages: the subtractions, then their tests), so that
    the capture only chooses between them.

    Interface (plain signals: the core's state machine strobes the capture):

    ``una``        In(24): the QP's una; in the 2 cycles before ``capture`` the una
                   before the ACK, in the cycle of ``capture`` the new una.
    ``cum_next``, ``behind``, ``sack_base``, ``nak_psn``, ``bitmap``: In, the ACK's,
                   steady from 2 cycles before ``capture`` to it.
    ``infl``       In: PSNs in flight from the new una (``nxt`` - ``una``), in the
                   cycle of ``capture``.
    ``capture``    In(1): registers the choice (the core's SACK state).
    ``sacked``     Out(window): the SACKed PSNs from ``una`` (bit i: una + i), 0 when
                   the bitmap does not overlap the window; valid from the cycle after
                   ``capture`` until the next (comb from registers: a shift by a
                   multiple of 4).
    ``nak_in``     Out(1): the NAK's PSN is in flight (``nak_psn - una`` < ``infl``);
    ``nak_off``    Out: ``nak_psn - una`` modulo the window; both registered at
                   ``capture``.

    Latency: the outputs 1 cycle after ``capture``, which comes at least 2 cycles
    after the ACK's fields are set. Throughput: one ACK per 2 cycles.
    """

    def __init__(self, *, window, sack_bits):
        self.window, self.sack_bits = window, sack_bits
        wbits = (window - 1).bit_length()
        super().__init__({
            "una": In(PSN_BITS), "cum_next": In(PSN_BITS), "behind": In(1),
            "sack_base": In(PSN_BITS),
            "nak_psn": In(PSN_BITS), "bitmap": In(sack_bits), "infl": In(range(window + 1)),
            "capture": In(1),
            "sacked": Out(window), "nak_in": Out(1), "nak_off": Out(max(wbits, 1)),
        })

    def elaborate(self, platform):
        m = Module()
        W, sack_bits = self.window, self.sack_bits
        wbits = (W - 1).bit_length()
        infl = self.infl
        # The bitmap overlaps the window when sack_base - una (dist) is below W, or
        # when una - sack_base (-dist) is 1 .. sack_bits - 1: dist is -1 .. -2**k in its
        # bits above k (all ones, the low bits not all zero) and the k-bit negation of
        # the low bits is below sack_bits. The NAK's PSN is in flight when psn - una is
        # below infl (its bits above infl's width zero, registered with the others).
        k = (sack_bits - 1).bit_length()
        dist = {}
        s_in_from = {}
        d = {}
        d_high_zero = {}
        for name, una_new in (("una", self.una), ("cum", self.cum_next)):
            dist[name] = Signal(PSN_BITS, name=f"dist_{name}")
            s_in_from[name] = Signal(name=f"s_in_{name}")
            d[name] = Signal(PSN_BITS, name=f"nak_d_{name}")
            d_high_zero[name] = Signal(name=f"nak_d_high_zero_{name}")
            neg_low = Signal(k, name=f"neg_low_{name}")
            m.d.comb += neg_low.eq(-dist[name][:k])
            m.d.sync += [
                dist[name].eq(self.sack_base - una_new), d[name].eq(self.nak_psn - una_new),
                s_in_from[name].eq(
                    below_const(dist[name], W, W.bit_length())
                    | (dist[name][k:].all() & (dist[name][:k] != 0)
                       & (neg_low < sack_bits))),
                d_high_zero[name].eq(d[name][len(infl):] == 0),
            ]

        # the bitmap against the new una: when it overlaps the window (s_in), the
        # window is bits s_amt .. s_amt + W - 1 of W zeros below the bitmap (s_amt =
        # W + una - sack_base)
        s_in = Signal()
        s_amt = Signal(range(W + sack_bits))
        # the W zeros and the bitmap shifted by the low 2 bits of s_amt (at capture,
        # from the low bits of sack_base and una alone): ``sacked`` shifts by the rest
        s_low = Signal(W + sack_bits)
        behind = self.behind
        with m.If(self.capture):
            dist_new = Mux(behind, dist["una"], dist["cum"])
            d_new = Mux(behind, d["una"], d["cum"])
            m.d.sync += [
                s_in.eq(Mux(behind, s_in_from["una"], s_in_from["cum"])),
                s_amt.eq(W - dist_new[: len(s_amt)]),
                s_low.eq(shift_right(Cat(Const(0, W), self.bitmap),
                                     (W - self.sack_base[:2] + self.una[:2])[:2])),
                self.nak_in.eq(Mux(behind, d_high_zero["una"], d_high_zero["cum"])
                               & (d_new[: len(infl)] < infl)),
                self.nak_off.eq(d_new[:wbits] if wbits else 0),
            ]
        m.d.comb += self.sacked.eq(Mux(s_in, shift_right(s_low, s_amt[2:] << 2)[:W], 0))
        return m

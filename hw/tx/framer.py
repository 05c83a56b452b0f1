"""Header and payload joined into one frame."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..stream import Beat
from .icrc import count_keep, keep_count
from .layouts import MAX_HEADER_BYTES, FrameHeader

__all__ = ["Framer"]

BASE_HEADER_BYTES = MAX_HEADER_BYTES - 4  # without ImmDt


class Framer(wiring.Component):
    """Stream a frame: the header bytes, then the payload, then the pad.

    ``hdr`` in (``FrameHeader``), ``payload`` in (packed byte stream, one
    frame per ``last``; not read for a zero-length payload), ``o`` out
    (packed frame without ICRC, lanes above ``keep`` zero).

    The header is 70 or 74 bytes (ImmDt), so it ends ``r`` = 70 or 74 mod the
    beat width into a beat: the header's tail is held in an accumulator and
    each payload beat is shifted up by ``r`` lanes (a two-way choice) with
    the bytes that do not fit kept for the next beat. Latency 1 cycle from a
    valid header to the first beat. Throughput 1 beat/cycle, with no idle
    cycle between frames when the next header is ready.
    """

    def __init__(self, data_width: int = 64):
        self.data_width = data_width
        super().__init__(
            {
                "hdr": In(stream.Signature(FrameHeader())),
                "payload": In(stream.Signature(Beat(data_width))),
                "o": Out(stream.Signature(Beat(data_width))),
            }
        )

    def elaborate(self, platform):
        m = Module()
        w = self.data_width
        nbytes = w // 8
        beats_short, r_short = divmod(BASE_HEADER_BYTES, nbytes)
        beats_long, r_long = divmod(MAX_HEADER_BYTES, nbytes)

        hdr = Signal(FrameHeader())
        beat = Signal(range(max(beats_long, 2)))
        head_beats = Signal(range(beats_long + 1))
        acc = Signal(w)
        acc_count = Signal(range(nbytes + 1))
        residue = Signal(range(nbytes))  # header bytes in the last header beat
        length = Signal(13)
        pad = Signal(2)

        pay = self.payload.payload
        pay_bytes = keep_count(pay.keep)
        keep_bits = Cat(*[pay.keep[i].replicate(8) for i in range(nbytes)])
        pay_data = pay.data & keep_bits
        # the payload beat shifted up by the header residue: two choices
        shifted = Mux(residue == r_short, pay_data << (8 * r_short), pay_data << (8 * r_long))
        spill = Mux(
            residue == r_short,
            pay_data >> (8 * (nbytes - r_short)),
            pay_data >> (8 * (nbytes - r_long)),
        )
        total = acc_count + pay_bytes + pad

        def take_header():
            m.d.comb += self.hdr.ready.eq(1)
            m.d.sync += [
                hdr.eq(self.hdr.payload),
                beat.eq(0),
                length.eq(self.hdr.payload.length),
                pad.eq(self.hdr.payload.pad),
                residue.eq(Mux(self.hdr.payload.imm, r_long, r_short)),
                head_beats.eq(Mux(self.hdr.payload.imm, beats_long, beats_short)),
            ]

        def frame_done():
            # the next header is taken in the cycle the last beat leaves
            with m.If(self.hdr.valid):
                take_header()
                m.next = "HEADER"
            with m.Else():
                m.next = "IDLE"

        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.hdr.valid):
                    take_header()
                    m.next = "HEADER"
            with m.State("HEADER"):
                words = [hdr.bytes[i * w : (i + 1) * w] for i in range(beats_long)]
                m.d.comb += [
                    self.o.valid.eq(1),
                    self.o.payload.data.eq(Cat(*words).word_select(beat, w)),
                    self.o.payload.keep.eq(count_keep(nbytes, nbytes)),
                ]
                with m.If(self.o.ready):
                    m.d.sync += beat.eq(beat + 1)
                    with m.If(beat == head_beats - 1):
                        short_tail = hdr.bytes[beats_short * w : beats_short * w + 8 * r_short]
                        long_tail = hdr.bytes[beats_long * w : beats_long * w + 8 * r_long]
                        m.d.sync += [
                            acc.eq(Mux(residue == r_short, short_tail, long_tail)),
                            acc_count.eq(residue),
                        ]
                        with m.If(length == 0):
                            m.next = "TAIL"
                        with m.Else():
                            m.next = "PAYLOAD"
            with m.State("PAYLOAD"):
                m.d.comb += [
                    self.o.valid.eq(self.payload.valid),
                    self.o.payload.data.eq(acc | shifted[:w]),
                    self.payload.ready.eq(self.o.ready),
                ]
                with m.If(pay.last & (total <= nbytes)):
                    m.d.comb += [
                        self.o.payload.keep.eq(count_keep(total, nbytes)),
                        self.o.payload.last.eq(1),
                    ]
                    with m.If(self.payload.valid & self.o.ready):
                        frame_done()
                with m.Else():
                    m.d.comb += self.o.payload.keep.eq(count_keep(nbytes, nbytes))
                    with m.If(self.payload.valid & self.o.ready):
                        m.d.sync += acc.eq(spill)
                        with m.If(pay.last):
                            m.d.sync += acc_count.eq(total - nbytes)
                            m.next = "TAIL"
            with m.State("TAIL"):
                m.d.comb += [
                    self.o.valid.eq(1),
                    self.o.payload.data.eq(acc),
                    self.o.payload.keep.eq(count_keep(acc_count, nbytes)),
                    self.o.payload.last.eq(1),
                ]
                with m.If(self.o.ready):
                    frame_done()
        return m

"""Header and payload joined into one frame."""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
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
    the bytes that do not fit kept for the next beat. The header register
    takes the next header as soon as the current one's beats are out
    (``hdr.ready`` is a flip-flop), and the last payload beat's end test and
    keep come from lane masks registered at the end of the header, so no
    payload-dependent path reaches ``hdr.ready``. Latency 1 cycle from a
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

        # The header register: loaded whenever it is free (``hdr.ready`` is a
        # flip-flop), held while its beats go out, freed at the last one.
        hdr = Signal(FrameHeader())
        hdr_full = Signal()
        m.d.comb += self.hdr.ready.eq(~hdr_full)
        hdr_load = self.hdr.valid & ~hdr_full
        with m.If(hdr_load):
            m.d.sync += [hdr.eq(self.hdr.payload), hdr_full.eq(1)]
        # the header bytes shift down one beat as each header beat leaves, so
        # the beat out is always the low word (no select by beat number); a
        # beat leaves only while the register is full, so the bytes' next
        # value is a two-way choice by ``hdr_full`` under one enable (a
        # flip-flop's clock enable, not a hold path per bit)
        hdr_bytes = hdr.bytes
        hdr_shift = Signal()  # a header beat leaves
        with m.If(hdr_load | hdr_shift):
            m.d.sync += hdr_bytes.eq(Mux(hdr_full, hdr_bytes >> w, self.hdr.payload.bytes))
        head_beats = Mux(hdr.imm, beats_long, beats_short)

        beat = Signal(range(max(beats_long, 2)))
        acc = Signal(w)
        acc_count = Signal(range(nbytes + 1))
        residue = Signal(range(nbytes))  # header bytes in the last header beat
        # the current frame's residue + pad, as registered lane masks for the
        # last payload beat: it ends the frame when no keep lane is at or
        # above nbytes - (residue + pad); its keep then is keep << (residue +
        # pad) with the low residue + pad lanes set (keep is packed).
        rp = Signal(range(nbytes + 4))
        fit_mask = Signal(nbytes)

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
        total = rp + pay_bytes  # acc_count is the residue throughout PAYLOAD
        fits = ~(pay.keep & fit_mask).any()
        # the keep of a payload beat out: all lanes, except on a last beat
        # that ends the frame; as keep is packed and every payload beat but
        # the last is full, that is keep << rp with the low rp lanes set in
        # every case (no dependence on the fit test): lane j is lane j - rp
        # of keep with set lanes below lane 0, one mux per lane on rp's low
        # bits (rp >= nbytes sets every lane)
        lg = nbytes.bit_length() - 1
        keep_ext = Cat(Const((1 << nbytes) - 1, nbytes), pay.keep)
        out_keep = Cat(
            *[
                (rp >= nbytes) | Array([keep_ext[nbytes + j - v] for v in range(nbytes)])[rp[:lg]]
                for j in range(nbytes)
            ]
        )

        def frame_done():
            # the next header, if loaded or arriving now, starts at once
            m.d.sync += beat.eq(0)
            with m.If(hdr_full | self.hdr.valid):
                m.next = "HEADER"
            with m.Else():
                m.next = "IDLE"

        with m.FSM():
            with m.State("IDLE"):
                m.d.sync += beat.eq(0)
                with m.If(hdr_full | self.hdr.valid):
                    m.next = "HEADER"
            with m.State("HEADER"):
                m.d.comb += [
                    self.o.valid.eq(1),
                    self.o.payload.data.eq(hdr_bytes[:w]),
                    self.o.payload.keep.eq(count_keep(nbytes, nbytes)),
                ]
                with m.If(self.o.ready):
                    m.d.comb += hdr_shift.eq(1)
                    m.d.sync += beat.eq(beat + 1)
                    with m.If(beat == head_beats - 1):
                        # the tail is the next word now
                        short_tail = hdr_bytes[w : w + 8 * r_short]
                        long_tail = hdr_bytes[w : w + 8 * r_long]
                        res = Mux(hdr.imm, r_long, r_short)
                        m.d.sync += [
                            acc.eq(Mux(hdr.imm, long_tail, short_tail)),
                            acc_count.eq(res),  # pad is 0 without payload
                            residue.eq(res),
                            rp.eq(res + hdr.pad),
                            fit_mask.eq(
                                Cat(*[res + hdr.pad + i >= nbytes for i in range(nbytes)])
                            ),
                            hdr_full.eq(0),
                        ]
                        with m.If(hdr.length == 0):
                            m.next = "TAIL"
                        with m.Else():
                            m.next = "PAYLOAD"
            with m.State("PAYLOAD"):
                m.d.comb += [
                    self.o.valid.eq(self.payload.valid),
                    self.o.payload.data.eq(acc | shifted[:w]),
                    self.o.payload.keep.eq(out_keep),
                    self.payload.ready.eq(self.o.ready),
                ]
                # ``acc`` and ``acc_count`` are not read again after a last
                # beat that fits (the next header's end sets them), so they
                # take the spill whether it fits or not: no fit test in
                # their enables
                with m.If(self.payload.valid & self.o.ready):
                    m.d.sync += acc.eq(spill)
                    with m.If(pay.last):
                        m.d.sync += acc_count.eq(total - nbytes)
                with m.If(pay.last & fits):
                    m.d.comb += self.o.payload.last.eq(1)
                    with m.If(self.payload.valid & self.o.ready):
                        frame_done()
                with m.Elif(pay.last & self.payload.valid & self.o.ready):
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

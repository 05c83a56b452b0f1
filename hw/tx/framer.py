"""Header and payload joined into one frame."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..bits import index_select
from ..pipeline import OneHotFSM
from ..stream import Beat
from .icrc import count_keep
from .layouts import FrameHeader, TxBeat, header_lengths

__all__ = ["Framer"]


class Framer(wiring.Component):
    """Stream a frame: the header bytes, then the payload, then the pad.

    ``hdr`` in (``FrameHeader``), ``payload`` in (packed byte stream, one
    frame per ``last``; not read for a zero-length payload), ``o`` out
    (packed frame without ICRC, lanes above ``keep`` zero).

    The header is 70 or 74 bytes (ImmDt), so it ends ``r`` = 70 or 74 mod the
    beat width into a beat: the header's tail is held in an accumulator and
    each payload beat is shifted up by ``r`` lanes (a two-way choice) with
    the bytes that do not fit kept for the next beat. With ``ipv6`` (a build
    parameter) a header with ``v6`` set is 90 or 94 bytes, ``r`` one of up
    to four residues (one flag per residue, registered at the header's end,
    picks the shift), and every beat out carries its frame's ``v6`` (``o``
    is then ``TxBeat(data_width, ipv6=True)``, for the ICRC's masks). The header register
    follows ``hdr`` while empty and keeps the next header as soon as the
    current one's beats are out (``hdr.ready`` is a flip-flop); its bytes
    shift down a beat a cycle after each header beat leaves (the beat out is
    the low word or, with a shift pending, the next), so their clock enable
    is one flip-flop rather than a LUT of ``o.ready``. The last payload
    beat's end test and keep come from lane masks registered at the end of
    the header, so no payload-dependent path reaches ``hdr.ready``, and a
    TAIL beat's keep is a registered lane mask. The state machine is one-hot
    (``hw.pipeline.OneHotFSM``: a flip-flop per state, none for IDLE) and
    the beat out an AND-OR of the states' words: the state that says whether
    the payload FIFO is read, and which word leaves, is a flip-flop, not a
    decode. Latency 1 cycle from a valid header to the first beat.
    Throughput 1 beat/cycle, with no idle cycle between frames when the next
    header is ready.
    """

    def __init__(self, data_width: int = 64, ipv6: bool = False):
        self.data_width = data_width
        self.ipv6 = ipv6
        super().__init__(
            {
                "hdr": In(stream.Signature(FrameHeader(ipv6))),
                "payload": In(stream.Signature(Beat(data_width))),
                "o": Out(stream.Signature(TxBeat(data_width, ipv6))),
            }
        )

    def elaborate(self, platform):
        m = Module()
        w = self.data_width
        nbytes = w // 8
        # per kind of header (index 2 * v6 + imm): its whole beats and residue
        kinds = [divmod(n, nbytes) for n in header_lengths(self.ipv6)]
        residues = list(dict.fromkeys(r for _, r in kinds))  # the short header's first
        assert 0 not in residues, "a header must not end on a beat boundary"

        # The header register: it follows ``hdr.payload`` while empty
        # (``hdr.ready`` is the flip-flop ``~hdr_full``; a header is taken
        # when valid then), is held while its beats go out and is freed at
        # the last one. Nothing reads it while empty: HEADER is entered only
        # with a header in it or loading at that edge.
        hdr = Signal(FrameHeader(self.ipv6))
        hdr_full = Signal()
        hdr_full_next = Signal()
        m.d.comb += [self.hdr.ready.eq(~hdr_full), hdr_full_next.eq(hdr_full)]
        # the header's length is kept only as ``no_pay`` (an empty payload,
        # the choice of the state after the header): a flag registered with
        # the header rather than a compare of the length at its end
        no_pay = Signal()
        with m.If(~hdr_full):
            m.d.comb += hdr_full_next.eq(self.hdr.valid)
            m.d.sync += [
                hdr.imm.eq(self.hdr.payload.imm),
                hdr.pad.eq(self.hdr.payload.pad),
                no_pay.eq(self.hdr.payload.length == 0),
            ]
            if self.ipv6:
                m.d.sync += hdr.v6.eq(self.hdr.payload.v6)

        def by_kind(values):
            """The value of the registered header's kind (a mux on its bits)."""
            return index_select(values, Cat(hdr.imm, hdr.v6) if self.ipv6 else hdr.imm,
                                exact=True)

        # The header bytes shift down one beat as each header beat leaves, so
        # the beat out is the low word or the next (no select by beat number).
        # The shift lags the beat by a cycle: ``skew`` (a beat left in the
        # previous cycle, a flip-flop) says the bytes are one beat behind, so
        # the beat out is the second word and the bytes shift now. The
        # bytes' clock enable is then one flip-flop, ``hdr_en`` (empty, or a
        # lagging shift), decided a cycle early, rather than a LUT of the
        # ICRC inserter's ``i.ready`` fanning out to every header bit; their
        # next value is a two-way choice by the ``hdr_full`` flip-flop.
        hdr_bytes = hdr.bytes
        skew = Signal()
        skew_next = Signal()
        hdr_en = Signal(init=1)  # set whenever ``hdr_full`` is clear
        m.d.sync += [
            hdr_full.eq(hdr_full_next),
            skew.eq(skew_next),
            hdr_en.eq(~hdr_full_next | skew_next),
        ]
        with m.If(hdr_en):
            m.d.sync += hdr_bytes.eq(Mux(hdr_full, hdr_bytes >> w, self.hdr.payload.bytes))
        # the header bytes as they would be with the shift on the beat's edge
        head_bytes = Mux(skew, hdr_bytes >> w, hdr_bytes)
        head_beats = by_kind([b for b, _ in kinds])

        beat = Signal(range(max(max(b for b, _ in kinds), 2)))
        acc = Signal(w)
        tail_keep = Signal(nbytes)  # the keep of a TAIL beat
        # the header's residue (bytes in its last beat), registered at the
        # header's end as flags rather than a residue count compared in every
        # payload beat's shift: with two residues one flag (the short
        # header's), else one per residue
        res_flags = Signal(1 if len(residues) == 2 else len(residues))

        def by_residue(values):
            """The value of the current frame's residue (``residues`` order)."""
            if len(residues) == 2:
                return Mux(res_flags[0], values[0], values[1])
            out = 0
            for i, v in enumerate(values):
                out = out | (Value.cast(v) & res_flags[i].replicate(len(Value.cast(v))))
            return out

        # the current frame's residue + pad, as registered lane masks for the
        # last payload beat: it ends the frame when no keep lane is at or
        # above nbytes - (residue + pad); its keep then is keep << (residue +
        # pad) with the low residue + pad lanes set (keep is packed).
        rp = Signal(range(nbytes + 4))
        fit_mask = Signal(nbytes)

        pay = self.payload.payload
        keep_bits = Cat(*[pay.keep[i].replicate(8) for i in range(nbytes)])
        pay_data = pay.data & keep_bits
        # the payload beat shifted up by the header residue: a choice of two
        # (or with IPv6 up to four)
        shifted = by_residue([(pay_data << (8 * r))[:w] for r in residues])
        spill = by_residue([pay_data >> (8 * (nbytes - r)) for r in residues])
        fits = ~(pay.keep & fit_mask).any()
        # the keep of a payload beat out: all lanes, except on a last beat
        # that ends the frame; as keep is packed and every payload beat but
        # the last is full, that is keep << rp with the low rp lanes set in
        # every case (no dependence on the fit test): lane j is lane j - rp
        # of keep with set lanes below lane 0, one mux per lane on rp's low
        # bits (rp >= nbytes sets every lane)
        lg = nbytes.bit_length() - 1
        keep_ext = Cat(Const((1 << nbytes) - 1, nbytes), pay.keep)

        def shifted_lane(src, j):  # lane j - rp[:lg] of src's upper half
            return index_select([src[nbytes + j - v] for v in range(nbytes)], rp[:lg], exact=True)

        out_keep = Cat(*[(rp >= nbytes) | shifted_lane(keep_ext, j) for j in range(nbytes)])
        # the keep of the TAIL beat after a last payload beat that does not
        # fit: its low rp + n - nbytes lanes (n the beat's bytes), so lane j
        # is set when the beat's lane j + nbytes - rp is (keep is packed;
        # lanes below lane 0 set, above the top clear). As rp < 2 * nbytes,
        # that is one mux per lane on rp's low bits, as for ``out_keep``
        # (whose inner mux is this lane when rp >= nbytes), and a choice by
        # rp's top bit; registered for TAIL rather than a count of keep plus
        # rp decoded there.
        keep_low = Cat(pay.keep, Const(0, nbytes))
        spill_keep = Cat(
            *[
                Mux(rp >= nbytes, shifted_lane(keep_ext, j), shifted_lane(keep_low, j))
                for j in range(nbytes)
            ]
        )

        # The state machine, one-hot (hw.pipeline.OneHotFSM): a flip-flop per
        # state but IDLE, each one's next value a sum of products of the
        # transitions into and out of it (no priority chain of the states'
        # blocks in front of it). IDLE is none of them set: it is read in
        # HEADER's next value alone, and a flip-flop of its own would take the
        # end-of-frame test too. The spelling of the transitions sets the
        # netlist that synthesis maps: a change of it is checked with
        # ``python -m hw.board.depth --synth tx`` (LUT4/PFUMX counts, depth).
        fsm = OneHotFSM(m, ("IDLE", "HEADER", "PAYLOAD", "TAIL"), "IDLE", "state",
                        implicit="IDLE", sum_of_products=True)
        header, payload, tail = (fsm.ongoing(n) for n in ("HEADER", "PAYLOAD", "TAIL"))
        next_hdr = hdr_full | self.hdr.valid  # a header loaded or arriving now
        last_head = beat == head_beats - 1
        hdr_end = header & self.o.ready & last_head  # the header's last beat leaves
        pay_end = payload & self.payload.valid & self.o.ready & pay.last
        with fsm.State("IDLE"):
            with m.If(next_hdr):
                fsm.next = "HEADER"
        with fsm.State("HEADER"):
            with m.If(hdr_end):
                with m.If(no_pay):
                    fsm.next = "TAIL"
                with m.Else():
                    fsm.next = "PAYLOAD"
        # the frame's last beat leaves (PAYLOAD's if it fits, TAIL's): the next
        # header, if any, starts at once
        with fsm.State("PAYLOAD"):
            with m.If(pay_end):
                with m.If(fits):
                    with m.If(next_hdr):
                        fsm.next = "HEADER"
                    with m.Else():
                        fsm.next = "IDLE"
                with m.Else():
                    fsm.next = "TAIL"
        with fsm.State("TAIL"):
            with m.If(self.o.ready & next_hdr):
                fsm.next = "HEADER"
            with m.Elif(self.o.ready):
                fsm.next = "IDLE"

        # The beat out, an AND-OR of the states' words (one state flip-flop
        # is set): HEADER sends the header bytes, PAYLOAD ``acc`` and the
        # shifted payload beat, TAIL ``acc``. The payload FIFO is read in
        # PAYLOAD alone: its ``ready`` is an AND of two flip-flops (the state
        # and the ICRC inserter's ``i.ready``), in front of the FIFO's
        # block-RAM read enable.
        acc_out = payload | tail
        m.d.comb += [
            self.o.valid.eq(header | tail | (payload & self.payload.valid)),
            self.o.payload.data.eq(
                (head_bytes[:w] & header.replicate(w))
                | (acc & acc_out.replicate(w))
                | (shifted[:w] & payload.replicate(w))
            ),
            self.o.payload.keep.eq(
                header.replicate(nbytes)
                | (out_keep & payload.replicate(nbytes))
                | (tail_keep & tail.replicate(nbytes))
            ),
            self.o.payload.last.eq(tail | (payload & pay.last & fits)),
            self.payload.ready.eq(payload & self.o.ready),
        ]
        if self.ipv6:
            # the header register may take the next header while this frame's
            # payload goes out: the frame's v6 is kept at the header's end
            frame_v6 = Signal()
            m.d.comb += self.o.payload.v6.eq(Mux(header, hdr.v6, frame_v6))

        # ``beat`` counts the header beats out; it restarts at the last one
        # (it is read in HEADER alone), so no end-of-frame test reaches it
        with m.If(header & self.o.ready):
            m.d.sync += beat.eq(Mux(last_head, 0, beat + 1))
            # after the last beat the bytes are not read again (the next
            # header replaces them), so they need no shift
            m.d.comb += skew_next.eq(~last_head)
        # ``tail_keep`` is read only in TAIL: it takes the header's residue (a
        # frame without payload; pad is 0 then) in every HEADER cycle and
        # follows ``spill_keep`` in every PAYLOAD cycle, so its enable is the
        # state alone
        with m.If(header):
            m.d.sync += tail_keep.eq(by_kind([count_keep(r, nbytes) for _, r in kinds]))
        with m.If(payload):
            m.d.sync += tail_keep.eq(spill_keep)
        with m.If(hdr_end):
            res = by_kind([r for _, r in kinds])
            if len(residues) == 2:
                flags = [by_kind([int(r == residues[0]) for _, r in kinds])]
            else:
                flags = [by_kind([int(r == rr) for _, r in kinds]) for rr in residues]
            m.d.sync += [
                res_flags.eq(Cat(*flags)),
                rp.eq(res + hdr.pad),
                fit_mask.eq(Cat(*[res + hdr.pad + i >= nbytes for i in range(nbytes)])),
            ]
            m.d.comb += hdr_full_next.eq(0)
            if self.ipv6:
                m.d.sync += frame_v6.eq(hdr.v6)
        # ``acc`` takes the header's tail (the next word) at the header's last
        # beat and the spill at each payload beat, a choice by the state
        # flip-flop. It is not read again after a last beat that fits (the
        # next header's end sets it), so it takes the spill whether it fits
        # or not: no fit test in its enable.
        tails = [head_bytes[w : w + 8 * r] for _, r in kinds]
        with m.If(hdr_end | (payload & self.payload.valid & self.o.ready)):
            m.d.sync += acc.eq(Mux(header, by_kind(tails), spill))
        return m

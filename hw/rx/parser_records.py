"""The RX parser's header FIFO and output stage: ``ParserRecord`` in, ``ParsedHeader`` out."""

from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hw.headers import AETH, IMMDT, OFF_EXT, OFF_IMMDT, OFF_SACK, PROBE, RETH, SACK, sack_bitmap
from hw.pipeline import BlockRamFIFO, hold_register

from .layouts import ParsedHeader, ParserRecord
from .parser_frames import ReleaseSignature

__all__ = ["RecordQueue"]


def _bytes(raw, offset, size):
    """Bytes [offset, offset + size) of a lane-ordered Value."""
    return raw[8 * offset : 8 * (offset + size)]


class RecordQueue(wiring.Component):
    """The header records of the frames that ``hw.rx.parser.RxParser`` accepted.

    Interface: ``push`` In(1) and ``record`` In(``ParserRecord``): a record
    to store, in a cycle with room for it (the FIFO has no write guard: the
    writer waits for room, which ``level`` tells); ``level`` Out: the records
    held, the output registers included; ``hdr`` Out(stream of
    ``ParsedHeader``): the records, the extension bytes spread into the
    fields of the opcode class; ``release`` Out(``ReleaseSignature``): the
    payload beats of the record taken on ``hdr`` in this cycle.

    Latency: a record pushed in cycle t is valid on ``hdr`` in cycle t + 4
    (the FIFO's block RAM and output register, then ``rec_mid`` and
    ``rec_out``) when the queue is empty. Throughput: one record per 2 cycles
    (the output registers load only while empty).
    """

    def __init__(self, sack_bits, ext_bytes, max_payload_beats, depth=16, plane_bits=0,
                 ipv6=False):
        self.sack_bits = sack_bits
        self.depth = depth
        self.record_layout = ParserRecord(sack_bits, ext_bytes, max_payload_beats, plane_bits,
                                          ipv6)
        super().__init__(
            {
                "push": In(1),
                "record": In(self.record_layout),
                "level": Out(range(depth + 1)),
                "hdr": Out(stream.Signature(ParsedHeader(sack_bits, plane_bits, ipv6))),
                "release": Out(ReleaseSignature(range(max_payload_beats + 1))),
            }
        )

    def elaborate(self, platform):
        m = Module()
        stored = self.record_layout
        rec_bits = stored.size
        # Without the FIFO's write guard: `push` comes only with room (tready
        # waits for hdr_room, below), so `push`, a flip-flop, is the block
        # RAMs' write enable as it is: no LUT in front of the 16 block RAMs'
        # byte enables (docs/timing.md#rx-parser).
        m.submodules.records = records = BlockRamFIFO(
            width=rec_bits, depth=self.depth, write_guard=False
        )
        m.d.comb += [
            records.w_data.eq(self.record),
            records.w_en.eq(self.push),
            self.level.eq(records.level),
        ]

        # ------------------------------------------------------------------
        # Output stage. The record FIFO's block RAM output passes two registers
        # (one flip-flop per bit each): the validator, and the ACK records it
        # passes on to reliability, are other blocks. The first (``rec_mid``)
        # drives only the second (``rec_out``), one sink per bit, so the
        # placer can keep it by the block RAMs, whose clock-to-output is
        # long (docs/timing.md#rx-parser). Each register loads only while
        # empty, so its enable (several hundred bits) is a flip-flop, and not
        # the validator's ready: ``rec_mid`` empties when ``rec_out`` is empty
        # (it moves there), ``rec_out`` when the validator takes it. A record taken
        # leaves ``rec_out`` empty for a cycle, so a record every 2 cycles at
        # most, which the validator's four cycles per header hide; the second
        # register adds a cycle of latency, not a bubble.
        # Two hw/pipeline.py ``hold_register``s: data without reset, the
        # enables copies of each register's "full" flag, one per 72 bits (two
        # block RAMs' outputs; one net to all ~560 bits is too slow:
        # docs/timing.md#rx-parser), so rec_mid's groups are whole 36-bit block-RAM columns and on
        # the board hw/board/outreg.py moves it into the block RAMs' output
        # registers.
        mid_valid, mid_ready, rec_valid = Signal(), Signal(), Signal()
        mid_data, rec_data = Signal(rec_bits), Signal(rec_bits)
        hold_register(m, records.r_rdy, records.r_en, records.r_data,
                      mid_valid, mid_ready, mid_data, "rec_mid")
        hold_register(m, mid_valid, mid_ready, mid_data,
                      rec_valid, self.hdr.ready, rec_data, "rec_out")
        out_rec = stored(rec_data)
        ext = out_rec.ext
        hdr = self.hdr.payload
        for name, _ in hdr.shape():
            if name not in ParserRecord.EXTENSIONS:
                m.d.comb += hdr[name].eq(out_rec[name])
        with m.If(out_rec.is_write):
            for name, value in RETH.unpack(_bytes(ext, 0, RETH.size)).items():
                m.d.comb += hdr.reth[name].eq(value)
        with m.If(out_rec.is_imm):
            imm = IMMDT.unpack(_bytes(ext, OFF_IMMDT - OFF_EXT, IMMDT.size))["imm"]
            m.d.comb += hdr.imm.eq(imm)
        with m.If(out_rec.is_ack):
            for name, value in AETH.unpack(_bytes(ext, 0, AETH.size)).items():
                m.d.comb += hdr.aeth[name].eq(value)
            for name, value in SACK.unpack(_bytes(ext, OFF_SACK - OFF_EXT, SACK.size)).items():
                m.d.comb += hdr.sack[name].eq(value)
            bitmap_off = OFF_SACK + SACK.size - OFF_EXT
            bitmap = sack_bitmap(self.sack_bits).unpack(
                _bytes(ext, bitmap_off, self.sack_bits // 8)
            )["bitmap"]
            m.d.comb += hdr.sack_bitmap.eq(bitmap)
        with m.If(out_rec.is_probe):
            for name, value in PROBE.unpack(_bytes(ext, 0, PROBE.size)).items():
                m.d.comb += hdr.probe[name].eq(value)
        m.d.comb += [
            self.hdr.valid.eq(rec_valid),
            self.release.en.eq(self.hdr.valid & self.hdr.ready),
            self.release.beats.eq(out_rec.beats),
        ]
        return m

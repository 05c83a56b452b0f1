"""RX header parser: MAC frames in, checked header records and realigned payload out.

``RxParser`` is the first block of the receive path (docs/protocol.md). It
takes Ethernet frames without FCS from the MAC, parses Eth / IPv4 / UDP / BTH
and the opcode's extension headers, checks everything the wire format lets a
receiver check on its own (lengths, IPv4 checksum, UDP port, opcode, ICRC,
trimming) and hands on, for every accepted frame, one ``ParsedHeader`` record
followed by the frame's payload, realigned to lane 0 with pad and ICRC cut.

Interface
---------
``s_axis``    In(AXIStreamSignature(data_width, user_width=1)): frames from
              the MAC, packed (``tkeep`` contiguous from lane 0, only the
              last beat partial; ``tkeep`` of other beats is not looked at);
              ``tuser`` on the last beat marks a bad frame.
``hdr``       Out(stream.Signature(ParsedHeader(sack_bits))): one record per
              accepted frame. A frame's record is always handed over before
              the first beat of its payload; records may run ahead of the
              payload of earlier frames.
``payload``   Out(stream.Signature(Beat(data_width))): the payload of the
              accepted frames with ``payload_len > 0``, in frame order,
              payload byte 0 in lane 0 of the first beat, every beat full
              except the last (``last`` = 1, ``keep`` contiguous).
``trim_dscp`` In(6): the trim DSCP (0x3F by default); sampled at each
              frame's first beat.
``counters``  Out(ParserCounters): 32-bit saturating frame counters, one per
              verdict; every frame increments exactly one.

Verdicts, first match wins: bad_frame, truncated, not_ipv4, ipv4_options,
ipv4_checksum, not_roce, unknown_opcode, length_mismatch, bad_icrc, else
accepted. See ``RxParser`` for the exact conditions.

Structure
---------
Store and forward, because the ICRC verdict is known only at the end of the
frame. The *input stage* captures the first ``header_bytes`` of the frame into
a register, runs the ICRC over the masked bytes and writes the payload,
already realigned (a two-beat window shifted by the payload offset of the
opcode), into a frame FIFO (``amaranth.lib.memory``). In the cycle after the
last beat the *verdict stage* decides from the captured header, the frame
length and the CRC register (which the next frame only overwrites at the end
of that cycle): an accepted frame commits the FIFO write pointer and pushes
its record into a header FIFO, a dropped one rolls the write pointer back.
The *output stage* pops records and releases the committed payload beats of
each popped record to ``payload`` through the memory's read register.

Backpressure, as in a frame FIFO: ``tready`` is low while the frame FIFO is
full (it keeps one spare entry for the final payload beat that the verdict
stage may still write), at any beat, and before the first beat of a frame
while the header FIFO has no room for one more record. Nothing is ever
dropped or overwritten for lack of space, and since the FIFO holds at least
one ``max_payload`` frame plus two beats, a frame being written can always
complete once the committed frames ahead of it drain.

Latency: the record of a frame is valid on ``hdr`` 3 cycles after its last
input beat; its first payload beat 2 cycles after the record is taken.
Throughput: 1 input beat per cycle, no gap between frames, whenever the
outputs are not backpressured (``tready`` is high); 1 record per cycle and 1
payload beat per cycle on the outputs.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.crc import CRC32_RESIDUE, ICRC_INIT, crc32_bytes
from hw.headers import (
    AETH,
    BTH,
    ETH,
    ETHERTYPE_IPV4,
    ICRC_BYTES,
    ICRC_MASKED_BYTES,
    IMMDT,
    IP_PROTO_UDP,
    IPV4,
    OFF_BTH,
    OFF_EXT,
    OFF_IMMDT,
    OFF_IPV4,
    OFF_SACK,
    OFF_UDP,
    PROBE,
    RETH,
    ROCE_UDP_PORT,
    SACK,
    UDP,
    Opcode,
    sack_bitmap,
)
from hw.stream import AXIStreamSignature, Beat

__all__ = ["COUNTER_NAMES", "ParsedHeader", "ParserCounters", "RxParser", "Verdict"]

SUPPORTED_DATA_WIDTHS = (64, 128, 256, 512)

COUNTER_NAMES = (
    "accepted",
    "bad_frame",
    "truncated",
    "not_ipv4",
    "ipv4_options",
    "ipv4_checksum",
    "not_roce",
    "unknown_opcode",
    "length_mismatch",
    "bad_icrc",
)

ParserCounters = data.StructLayout({name: unsigned(32) for name in COUNTER_NAMES})


class Verdict(enum.Enum, shape=4):
    """What the parser did with a frame, in the order of ``COUNTER_NAMES``."""

    ACCEPTED = 0
    BAD_FRAME = 1
    TRUNCATED = 2
    NOT_IPV4 = 3
    IPV4_OPTIONS = 4
    IPV4_CHECKSUM = 5
    NOT_ROCE = 6
    UNKNOWN_OPCODE = 7
    LENGTH_MISMATCH = 8
    BAD_ICRC = 9


class ParsedHeader(data.StructLayout):
    """One accepted frame's header fields; fields its opcode does not carry are 0."""

    def __init__(self, sack_bits: int = 64):
        sack_bitmap(sack_bits)  # checks the width
        super().__init__(
            {
                "eth_src": unsigned(48),
                "eth_dst": unsigned(48),
                "ip_src": unsigned(32),
                "ip_dst": unsigned(32),
                "dscp": unsigned(6),
                "ecn": unsigned(2),
                "ev": unsigned(16),
                "bth": BTH.layout,
                "reth": RETH.layout,
                "imm": unsigned(32),
                "aeth": AETH.layout,
                "sack": SACK.layout,
                "sack_bitmap": unsigned(sack_bits),
                "probe": PROBE.layout,
                "payload_len": unsigned(16),
                "trimmed": unsigned(1),
            }
        )


_HDR_FIXED = UDP.size + BTH.size  # UDP length covers these before the extension headers


def _bytes(raw, offset, size):
    """Bytes [offset, offset + size) of a lane-ordered Value."""
    return raw[8 * offset : 8 * (offset + size)]


class RxParser(wiring.Component):
    """RX header parser with store-and-forward drop (see the module docstring).

    Parameters
    ----------
    data_width : 64, 128, 256 or 512 bits of ``s_axis`` and ``payload``.
    sack_bits : the SACK bitmap width this NIC uses; an ACK whose
        ``sack_words`` disagrees is dropped as a length mismatch.
    max_payload : the largest payload accepted (the MTU), in bytes.
    fifo_depth : frame FIFO depth in beats, a power of two of at least one
        ``max_payload`` payload plus 2 beats; by default room for two payloads.

    A frame is dropped, and counted under the first verdict that applies, when

    - ``bad_frame``: ``tuser`` is set on its last beat;
    - ``truncated``: it ends before the end of its BTH, or before the end of
      its opcode's headers plus, unless trimmed, the ICRC;
    - ``not_ipv4``: EtherType != 0x0800, IP version != 4, MF set or a
      fragment offset;
    - ``ipv4_options``: IHL != 5;
    - ``ipv4_checksum``: the IPv4 header does not sum to 0xFFFF;
    - ``not_roce``: protocol != UDP or destination port != 4791;
    - ``unknown_opcode``: an opcode outside ``Opcode.ALL``, or TVer != 0;
    - ``length_mismatch``: frame length != 14 + IPv4 total length, UDP length
      != total length - 20, UDP length short of the opcode's headers + pad +
      ICRC, payload longer than ``max_payload``, an ACK whose bitmap is not
      ``sack_bits`` wide, or a trimmed frame with anything after its headers;
    - ``bad_icrc``: the CRC over the masked frame from byte 14, ICRC included,
      is not the CRC-32 residue (not checked on trimmed frames).

    A frame whose DSCP is ``trim_dscp`` is trimmed: it carries its headers
    only, no ICRC, and is handed on with ``trimmed`` = 1 and no payload.
    """

    def __init__(self, data_width=64, sack_bits=64, max_payload=4096, fifo_depth=None):
        if data_width not in SUPPORTED_DATA_WIDTHS:
            raise ValueError(
                f"RxParser data_width must be one of {SUPPORTED_DATA_WIDTHS}, not {data_width!r}"
            )
        sack_bitmap(sack_bits)
        if not isinstance(max_payload, int) or not 1 <= max_payload <= 0xFFFF:
            raise ValueError(f"max_payload must be 1..65535 bytes, not {max_payload!r}")
        self.data_width = data_width
        self.sack_bits = sack_bits
        self.max_payload = max_payload
        self.lanes = data_width // 8
        self.max_payload_beats = -(-max_payload // self.lanes)
        min_depth = self.max_payload_beats + 2
        if fifo_depth is None:
            fifo_depth = 1 << (max(2 * self.max_payload_beats, min_depth) - 1).bit_length()
        if (
            not isinstance(fifo_depth, int)
            or fifo_depth & (fifo_depth - 1)
            or fifo_depth < min_depth
        ):
            raise ValueError(
                f"fifo_depth must be a power of two of at least {min_depth} beats (one "
                f"{max_payload}-byte payload at {data_width} bits, plus 2), not {fifo_depth!r}"
            )
        self.fifo_depth = fifo_depth
        self.hdr_fifo_depth = 16

        # Header bytes from the start of the frame to the payload, per opcode.
        self.ack_header_end = OFF_SACK + SACK.size + sack_bits // 8
        self.header_bytes = max(OFF_IMMDT + IMMDT.size, self.ack_header_end)

        super().__init__(
            {
                "s_axis": In(AXIStreamSignature(data_width, user_width=1)),
                "hdr": Out(stream.Signature(ParsedHeader(sack_bits))),
                "payload": Out(stream.Signature(Beat(data_width))),
                "trim_dscp": In(6, init=0x3F),
                "counters": Out(ParserCounters),
            }
        )

    def elaborate(self, platform):
        m = Module()
        lanes = self.lanes
        lane_bits = (lanes - 1).bit_length()
        hdr_len = self.header_bytes
        hdr_beats = -(-hdr_len // lanes)
        assert OFF_EXT + RETH.size >= lanes, "the payload never starts in beat 0"
        assert RETH.size == PROBE.size

        axis = self.s_axis

        # ------------------------------------------------------------------
        # Input stage: one beat per cycle.
        max_beat = (0x1FFFF // lanes) + 2
        beat = Signal(range(max_beat + 1))  # index of the next beat; 0 = start of frame
        frame_len = Signal(17)  # bytes of the frame so far, saturating
        hdr = Signal(8 * hdr_len)  # captured header bytes, lane order
        prev = Signal(self.data_width)  # the previous beat, for realignment
        crc = Signal(32)
        trim_dscp = Signal(6)
        bad_frame = Signal()
        eof = Signal()  # verdict stage: the cycle after a frame's last beat
        flush = Signal()  # ... and the frame's final payload beat is still in `prev`
        flush_last = Signal()

        accept = Signal()
        m.d.comb += accept.eq(axis.tvalid & axis.tready)

        # Bytes of this beat: every beat but the last is full (packed stream).
        nbytes = Signal(range(lanes + 1))
        with m.If(~axis.tlast):
            m.d.comb += nbytes.eq(lanes)
        with m.Else():
            for i in range(lanes):
                with m.If(axis.tkeep[i]):
                    m.d.comb += nbytes.eq(i + 1)

        # Header fields as captured so far (the payload and the verdict only use
        # them once their bytes are in).
        eth = ETH.unpack(_bytes(hdr, 0, ETH.size))
        ip = IPV4.unpack(_bytes(hdr, OFF_IPV4, IPV4.size))
        udp = UDP.unpack(_bytes(hdr, OFF_UDP, UDP.size))
        bth = BTH.unpack(_bytes(hdr, OFF_BTH, BTH.size))
        trimmed = Signal()
        m.d.comb += trimmed.eq(ip["dscp"] == trim_dscp)
        opcode = bth["opcode"]
        is_write = Cat(*[opcode == op for op in Opcode.WRITES]).any()
        is_imm = Cat(*[opcode == op for op in Opcode.WITH_IMM]).any()
        is_ack = opcode == Opcode.ACKNOWLEDGE
        is_probe = Cat(*[opcode == op for op in Opcode.PROBES]).any()
        opcode_known = Signal()
        header_end = Signal(range(hdr_len + 1))  # = the payload offset
        m.d.comb += [
            opcode_known.eq(is_write | is_ack | is_probe),
            header_end.eq(
                Mux(
                    is_imm,
                    OFF_IMMDT + IMMDT.size,
                    Mux(is_ack, self.ack_header_end, OFF_EXT + RETH.size),  # RETH or PROBE
                )
            ),
        ]

        # Payload length from the UDP length, and the number of payload beats.
        # Headers from UDP to payload, then pad and ICRC.
        udp_overhead = header_end - OFF_UDP + bth["padcount"] + ICRC_BYTES
        # negative when the UDP length is short of the headers, pad and ICRC
        payload_len = (udp["length"] - udp_overhead)[:17].as_signed()
        payload_fits = Signal()
        m.d.comb += payload_fits.eq(
            opcode_known & ~trimmed & (payload_len >= 0) & (payload_len <= self.max_payload)
        )
        payload_beats = Signal(range(self.max_payload_beats + 1))
        with m.If(payload_fits):
            m.d.comb += payload_beats.eq((payload_len + lanes - 1) >> lane_bits)
        rem = payload_len[:lane_bits]
        last_keep = Mux(rem == 0, (1 << lanes) - 1, (Const(1, lanes + 1) << rem) - 1)[:lanes]

        # Payload offset: beat index and lane shift, one per header length.
        ends = sorted({OFF_EXT + RETH.size, OFF_IMMDT + IMMDT.size, self.ack_header_end})
        shift = Signal(range(lanes))
        first_beat = Signal(range(hdr_len // lanes + 1))
        with m.Switch(header_end):
            for end in ends:
                with m.Case(end):
                    m.d.comb += [shift.eq(end % lanes), first_beat.eq(end // lanes)]

        # The output beat index j = beat - first_beat - 1 is complete once beat
        # first_beat + j + 1 arrives, or at the end of the frame.
        out_idx = Signal(signed(len(beat) + 2))
        m.d.comb += out_idx.eq(beat - first_beat - 1)
        window = Cat(prev, Mux(eof, 0, axis.tdata))
        aligned = Signal(self.data_width)
        with m.Switch(shift):
            for s in sorted({end % lanes for end in ends}):
                with m.Case(s):
                    m.d.comb += aligned.eq(window[8 * s : 8 * s + self.data_width])

        # Frame FIFO.
        depth = self.fifo_depth
        ptr_bits = (depth - 1).bit_length() + 1
        m.submodules.frames = frames = Memory(shape=Beat(self.data_width), depth=depth, init=[])
        wr = frames.write_port()
        rd = frames.read_port(domain="sync")
        addr_bits = ptr_bits - 1
        wr_ptr = Signal(ptr_bits)
        commit_ptr = Signal(ptr_bits)
        rd_ptr = Signal(ptr_bits)
        rel_ptr = Signal(ptr_bits)  # payload released by popped records

        write_beat = Signal()
        m.d.comb += write_beat.eq(accept & (out_idx >= 0) & (out_idx < payload_beats))
        m.d.comb += [
            wr.addr.eq(wr_ptr[:addr_bits]),
            wr.data.data.eq(aligned),
        ]
        with m.If(eof & flush):
            m.d.comb += [
                wr.en.eq(1),
                wr.data.keep.eq(Mux(flush_last, last_keep, (1 << lanes) - 1)),
                wr.data.last.eq(flush_last),
            ]
        with m.Elif(write_beat):
            is_last = out_idx == payload_beats - 1
            m.d.comb += [
                wr.en.eq(1),
                wr.data.keep.eq(Mux(is_last, last_keep, (1 << lanes) - 1)),
                wr.data.last.eq(is_last),
            ]
        wr_ptr_next = (wr_ptr + wr.en)[:ptr_bits]
        m.d.sync += wr_ptr.eq(wr_ptr_next)

        # ICRC over the masked bytes from byte 14 to the end, ICRC included.
        crc_start_beat, crc_start_lane = OFF_IPV4 // lanes, OFF_IPV4 % lanes
        masked = Signal(self.data_width)
        m.d.comb += masked.eq(axis.tdata)
        for pos in ICRC_MASKED_BYTES:
            with m.If(beat == pos // lanes):
                m.d.comb += masked[8 * (pos % lanes) : 8 * (pos % lanes) + 8].eq(0xFF)
        crc_in = Signal(32)
        crc_data = Signal(self.data_width)
        crc_count = Signal(range(lanes + 1))
        m.d.comb += [
            crc_in.eq(Mux(beat == 0, ICRC_INIT, crc)),
            crc_data.eq(masked),
            crc_count.eq(nbytes),
        ]
        with m.If(beat == crc_start_beat):
            m.d.comb += [
                crc_data.eq(masked >> (8 * crc_start_lane)),
                crc_count.eq(Mux(nbytes > crc_start_lane, nbytes - crc_start_lane, 0)),
            ]
        crc_next = crc32_bytes(crc_in, crc_data, crc_count)

        with m.If(accept):
            m.d.sync += [
                beat.eq(Mux(axis.tlast, 0, Mux(beat == max_beat, beat, beat + 1))),
                prev.eq(axis.tdata),
                # (below 128 bits the first beat ends before byte 14)
                crc.eq(
                    Mux(beat < crc_start_beat, crc_in, crc_next) if crc_start_beat else crc_next
                ),
            ]
            len_in = Mux(beat == 0, 0, frame_len)
            len_sum = Signal(18)
            m.d.comb += len_sum.eq(len_in + nbytes)
            m.d.sync += frame_len.eq(Mux(len_sum[17], 0x1FFFF, len_sum))
            with m.If(beat == 0):
                m.d.sync += trim_dscp.eq(self.trim_dscp)
            for k in range(hdr_beats):
                with m.If(beat == k):
                    lo, hi = 8 * k * lanes, min(8 * (k + 1) * lanes, 8 * hdr_len)
                    m.d.sync += hdr[lo:hi].eq(axis.tdata[: hi - lo])
            with m.If(axis.tlast):
                m.d.sync += [
                    bad_frame.eq(axis.tuser[0]),
                    # the beat out_idx + 1 would have completed is still in `prev`
                    flush.eq((out_idx + 1 >= 0) & (out_idx + 1 < payload_beats)),
                    flush_last.eq(out_idx + 1 == payload_beats - 1),
                ]
        m.d.sync += eof.eq(accept & axis.tlast)

        # ------------------------------------------------------------------
        # Verdict stage, in the cycle after the last beat: `hdr`, `frame_len`,
        # `crc` and `prev` still hold the frame that ended.
        # RFC 1071 sum of the ten 16-bit words (< 2^20), folded twice to 16 bits
        ipsum = sum(
            Cat(_bytes(hdr, OFF_IPV4 + i + 1, 1), _bytes(hdr, OFF_IPV4 + i, 1))
            for i in range(0, IPV4.size, 2)
        )[:20]
        ipsum_fold1 = ipsum[:16] + ipsum[16:]
        ipsum_fold2 = (ipsum_fold1[:16] + ipsum_fold1[16])[:16]
        frame_need = header_end + Mux(trimmed, 0, ICRC_BYTES)
        fragment = (ip["flags"][0]) | (ip["frag_off"] != 0)
        ack_width_bad = is_ack & (
            SACK.unpack(_bytes(hdr, OFF_SACK, SACK.size))["sack_words"] != self.sack_bits // 32
        )
        udp_need = header_end - OFF_UDP
        length_bad = (
            (frame_len != ip["total_len"] + OFF_IPV4)
            | (udp["length"] + IPV4.size != ip["total_len"])
            | Mux(trimmed, udp["length"] != udp_need, ~payload_fits)
            | ack_width_bad
        )

        verdict = Signal(Verdict)
        with m.If(bad_frame):
            m.d.comb += verdict.eq(Verdict.BAD_FRAME)
        with m.Elif((frame_len < OFF_BTH + BTH.size) | (opcode_known & (frame_len < frame_need))):
            m.d.comb += verdict.eq(Verdict.TRUNCATED)
        with m.Elif((eth["ethertype"] != ETHERTYPE_IPV4) | (ip["version"] != 4) | fragment):
            m.d.comb += verdict.eq(Verdict.NOT_IPV4)
        with m.Elif(ip["ihl"] != 5):
            m.d.comb += verdict.eq(Verdict.IPV4_OPTIONS)
        with m.Elif(ipsum_fold2 != 0xFFFF):
            m.d.comb += verdict.eq(Verdict.IPV4_CHECKSUM)
        with m.Elif((ip["proto"] != IP_PROTO_UDP) | (udp["dport"] != ROCE_UDP_PORT)):
            m.d.comb += verdict.eq(Verdict.NOT_ROCE)
        with m.Elif(~opcode_known | (bth["tver"] != 0)):
            m.d.comb += verdict.eq(Verdict.UNKNOWN_OPCODE)
        with m.Elif(length_bad):
            m.d.comb += verdict.eq(Verdict.LENGTH_MISMATCH)
        with m.Elif(~trimmed & (crc != CRC32_RESIDUE)):
            m.d.comb += verdict.eq(Verdict.BAD_ICRC)
        with m.Else():
            m.d.comb += verdict.eq(Verdict.ACCEPTED)

        counters = Signal(ParserCounters)
        m.d.comb += self.counters.eq(counters)
        with m.If(eof):
            for i, name in enumerate(COUNTER_NAMES):
                count = counters[name]
                with m.If((verdict == Verdict(i)) & (count != 0xFFFFFFFF)):
                    m.d.sync += count.eq(count + 1)
            with m.If(verdict == Verdict.ACCEPTED):
                m.d.sync += commit_ptr.eq(wr_ptr_next)
            with m.Else():
                m.d.sync += wr_ptr.eq(commit_ptr)

        # The record.
        record = Signal(ParsedHeader(self.sack_bits))
        m.d.comb += [
            record.eth_src.eq(eth["src"]),
            record.eth_dst.eq(eth["dst"]),
            record.ip_src.eq(ip["src"]),
            record.ip_dst.eq(ip["dst"]),
            record.dscp.eq(ip["dscp"]),
            record.ecn.eq(ip["ecn"]),
            record.ev.eq(udp["sport"]),
            record.trimmed.eq(trimmed),
            record.payload_len.eq(Mux(payload_fits, payload_len, 0)),
        ]
        for name, value in bth.items():
            m.d.comb += record.bth[name].eq(value)
        with m.If(is_write):
            for name, value in RETH.unpack(_bytes(hdr, OFF_EXT, RETH.size)).items():
                m.d.comb += record.reth[name].eq(value)
        with m.If(is_imm):
            m.d.comb += record.imm.eq(IMMDT.unpack(_bytes(hdr, OFF_IMMDT, IMMDT.size))["imm"])
        with m.If(is_ack):
            for name, value in AETH.unpack(_bytes(hdr, OFF_EXT, AETH.size)).items():
                m.d.comb += record.aeth[name].eq(value)
            for name, value in SACK.unpack(_bytes(hdr, OFF_SACK, SACK.size)).items():
                m.d.comb += record.sack[name].eq(value)
            bitmap_off = OFF_SACK + SACK.size
            bitmap = sack_bitmap(self.sack_bits).unpack(
                _bytes(hdr, bitmap_off, self.sack_bits // 8)
            )["bitmap"]
            m.d.comb += record.sack_bitmap.eq(bitmap)
        with m.If(is_probe):
            for name, value in PROBE.unpack(_bytes(hdr, OFF_EXT, PROBE.size)).items():
                m.d.comb += record.probe[name].eq(value)

        m.submodules.records = records = SyncFIFOBuffered(
            width=len(record.as_value()), depth=self.hdr_fifo_depth
        )
        m.d.comb += [
            records.w_data.eq(record),
            records.w_en.eq(eof & (verdict == Verdict.ACCEPTED)),
        ]

        # A beat is taken only with room for its own payload beat and for the
        # one the verdict stage may write in the cycle after a last beat; a
        # frame only with room for its record (and the one being pushed now).
        used = (wr_ptr - rd_ptr)[:ptr_bits]
        room = used <= depth - 2
        hdr_room = records.level + eof <= self.hdr_fifo_depth - 1
        m.d.comb += axis.tready.eq(room & ((beat != 0) | hdr_room))

        # ------------------------------------------------------------------
        # Output stage.
        out_rec = ParsedHeader(self.sack_bits)(records.r_data)
        m.d.comb += [
            self.hdr.payload.eq(out_rec),
            self.hdr.valid.eq(records.r_rdy),
            records.r_en.eq(self.hdr.ready),
        ]
        with m.If(self.hdr.valid & self.hdr.ready):
            m.d.sync += rel_ptr.eq(rel_ptr + ((out_rec.payload_len + lanes - 1) >> lane_bits))

        read = Signal()
        advance = ~self.payload.valid | self.payload.ready
        m.d.comb += [
            read.eq(advance & (rd_ptr != rel_ptr)),
            rd.en.eq(advance),
            rd.addr.eq(rd_ptr[:addr_bits]),
            self.payload.payload.eq(rd.data),
        ]
        with m.If(advance):
            m.d.sync += self.payload.valid.eq(read)
        with m.If(read):
            m.d.sync += rd_ptr.eq(rd_ptr + 1)

        return m

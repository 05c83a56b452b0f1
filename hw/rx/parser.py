"""RX header parser: MAC frames in, checked header records and realigned payload out.

``RxParser`` is the first block of the receive path (docs/protocol.md). It
takes Ethernet frames without FCS from the MAC, parses Eth / IPv4 (or, built
with ``ipv6``, IPv4 and IPv6 side by side) / UDP / BTH and the opcode's
extension headers, checks everything the wire format lets a receiver check on
its own (lengths, IPv4 checksum, UDP port, opcode, ICRC, trimming) and hands
on, for every accepted frame, one ``ParsedHeader`` record followed by the
frame's payload, realigned to lane 0 with pad and ICRC cut.

IPv6 (``ipv6``): the EtherType picks the family, in a flip-flop (``v6``)
loaded with the EtherType's beat; every header after the IP header starts 20
bytes later, so the decode stage reads the BTH at its family's beat, the
payload's realignment shifts are those of both families, the header capture
is 20 bytes longer, and the record's addresses are 128 bits with the family
(``v6``). The ICRC masks the family's fields (``hw.headers.icrc_mask``); in
the EtherType's own beat, which holds masked bytes at 64 bits and wider, the
family comes from that beat (``v6_now``).

Interface
---------
``s_axis``    In(AXIStreamSignature(data_width, user_width=1 + plane_bits)): frames
              from the MAC, packed (``tkeep`` contiguous from lane 0, only the
              last beat partial; ``tkeep`` of other beats is not looked at);
              ``tuser[0]`` on the last beat marks a bad frame, ``tuser[1:]`` on
              it is the plane the frame arrived on (``plane_bits``, 0 with one
              plane), copied into the record.
``hdr``       Out(stream.Signature(ParsedHeader(sack_bits, plane_bits))): one record per
              accepted frame. A frame's record is always handed over before
              the first beat of its payload; records may run ahead of the
              payload of earlier frames.
``payload``   Out(stream.Signature(Beat(data_width))): the payload of the
              accepted frames with ``payload_len > 0``, in frame order,
              payload byte 0 in lane 0 of the first beat, every beat full
              except the last (``last`` = 1, ``keep`` contiguous).
``trim_dscp`` In(6): the trim DSCP (0x3F by default); sampled at each
              frame's first beat.
``events``    Out(len(COUNTER_NAMES)): one strobe per verdict (bit i of
              ``COUNTER_NAMES[i]``), a flip-flop; every frame strobes exactly
              one, for one cycle. The RX registers count them
              (``RxRegisters``' counter bank, saturating at 2**32 - 1).

Verdicts, first match wins: bad_frame, truncated, not_ipv4, ipv4_options,
ipv4_checksum, not_roce, unknown_opcode, length_mismatch, bad_icrc, else
accepted. See ``RxParser`` for the exact conditions.

Structure
---------
Store and forward, because the ICRC verdict is known only at the end of the
frame. The *input stage* captures the first ``header_bytes`` of the frame into
a register, runs the ICRC over the masked bytes and writes the payload,
already realigned (a two-beat window shifted by the payload offset of the
opcode), into a frame FIFO (``amaranth.lib.memory``, through a registered
write port; ``PayloadWriter`` and ``FrameBuffer``, parser_frames.py).
The checks are prepared as the header arrives, so that no
decision waits on a deep network (125 MHz on the ECP5, ~6 LUT levels):

- *decode stage A* (``ClassDecode``, parser_decode.py), registered at the
  beat holding the BTH's first bytes
  (from that beat's data and the captured bytes): opcode class, TVer,
  trimming, header length and the length overheads;
- *length stage B* (``LengthCheck``, parser_decode.py), the cycle after:
  payload length and beats, whether it
  fits, the UDP/IPv4 length checks;
- the IPv4 checksum (``Ipv4Checksum``, parser_checks.py), in two stages
  from the captured header (at 64 bits;
  one at 128, none at 256/512 bits, where the header's last IPv4 byte may
  come in the frame's last beat);
- the frame's length (``FrameLength``, parser_checks.py);
- the ICRC (``IcrcCheck``, parser_checks.py): a beat's masked bytes (those
  before byte 14, and after the end
  in the last beat, zeroed) are registered, and the CRC register takes them
  in the next cycle through one XOR network over itself and the full beat,
  the last beat included;
  the register, advanced by the last beat's missing bytes as zeros, is
  compared with the residue advanced alike (a constant per byte count).

In the cycle after the last beat, *verdict stage 1* registers each check as a
flag (and the record); *stage 2* registers the ICRC comparison, the first
failing check and whether the frame passes; *stage 3* acts on these
registered bits (stages 2 and 3 and the counter strobes: ``VerdictStages``,
parser_verdict.py): an accepted frame commits the FIFO write pointer and pushes
its record into a header FIFO, a dropped one rolls the write pointer back
(the next frame writes no payload before then, or, at 512 bits, writes where
the rollback puts it). The counter strobe comes in the cycle after. The header FIFO
holds the extension headers (RETH, ImmDt, AETH with SACK, probe), which no
opcode has two of, as the raw bytes after the BTH and the opcode class (and
the payload's beat count). The
*output stage* (with the header FIFO: ``RecordQueue``, parser_records.py)
pops records (through two registers after the FIFO's block
RAM), spreads those bytes into the ``ParsedHeader``
fields of their class, and releases the committed payload beats of each popped
record to ``payload`` through the memory's read register and a register slice
(skid buffer).

Backpressure, as in a frame FIFO: ``tready`` is low while the frame FIFO is
full (it keeps one spare entry for the final payload beat that the verdict
stage may still write), at any beat, and before the first beat of a frame
while the header FIFO has no room for one more record (counting the frames
in the verdict stages). Both conditions are registered, from the previous
cycle's state, on the safe side: after the FIFO drains from full, ``tready``
may rise one cycle later than the room appears. Nothing is ever dropped or
overwritten for lack of space, and since the FIFO holds at least one
``max_payload`` frame plus two beats, a frame being written can always
complete once the committed frames ahead of it drain.

Latency: the record of a frame is valid on ``hdr`` 7 cycles after its last
input beat (3 before the verdict was pipelined, 5 before the record FIFO's
output register, 6 before its second output register), and its counter
strobe comes three cycles before; its first payload
beat comes 4 cycles after the record is taken (2 before the output register
slice, 3 before the read data's register ``frame_q``). Throughput: 1 input
beat per cycle, no gap between frames, whenever the outputs are not
backpressured (``tready`` is high); 1 record per 2 cycles (the output
registers load only while empty; the validator takes one per 4) and 1
payload beat per cycle on the outputs.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hw.headers import (
    BTH,
    ETH,
    ETHERTYPE_IPV4,
    ETHERTYPE_IPV6,
    IMMDT,
    IP_PROTO_UDP,
    IPV4,
    IPV6,
    IPV6_SHIFT,
    OFF_BTH,
    OFF_EXT,
    OFF_IMMDT,
    OFF_IPV4,
    OFF_IPV6,
    OFF_SACK,
    OFF_UDP,
    PROBE,
    RETH,
    ROCE_UDP_PORT,
    SACK,
    UDP,
    by_family,
    sack_bitmap,
)
from hw.protocol import TRIM_DSCP_DEFAULT
from hw.stream import AXIStreamSignature, Beat

from .layouts import COUNTER_NAMES, ParsedHeader, Verdict
from .parser_checks import FrameLength, IcrcCheck, InputTapSignature, Ipv4Checksum
from .parser_decode import ClassDecode, LengthCheck, bth_beat
from .parser_frames import FrameBuffer, PayloadWriter
from .parser_records import RecordQueue
from .parser_verdict import VerdictStages

__all__ = ["COUNTER_NAMES", "ParsedHeader", "RxParser", "Verdict"]

SUPPORTED_DATA_WIDTHS = (64, 128, 256, 512)


def _bytes(raw, offset, size):
    """Bytes [offset, offset + size) of a lane-ordered Value."""
    return raw[8 * offset : 8 * (offset + size)]


class HeaderFields:
    """The captured header's fields (``hdr``, lane order), each header after
    the IP header at the frame's family's place (``v6``; None: IPv4 only)."""

    def __init__(self, hdr, v6):
        self.hdr, self.v6 = hdr, v6
        self.eth = ETH.unpack(_bytes(hdr, 0, ETH.size))
        self.ip = IPV4.unpack(_bytes(hdr, OFF_IPV4, IPV4.size))
        self.ip6 = IPV6.unpack(_bytes(hdr, OFF_IPV6, IPV6.size))  # (read with v6 only)
        self.udp = UDP.unpack(self.after_ip(OFF_UDP, UDP.size))
        self.bth = BTH.unpack(self.after_ip(OFF_BTH, BTH.size))

    def after_ip(self, offset, size):
        """Bytes [offset, offset + size) of the headers after the IP header,
        as over IPv4, at the frame's family's place."""
        return by_family(self.v6, _bytes(self.hdr, offset, size),
                         _bytes(self.hdr, offset + IPV6_SHIFT, size))


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
    plane_bits : the width of the plane tag in ``tuser``.
    ipv6 : parse IPv6 frames too (EtherType 0x86DD); the record's addresses
        are then 128 bits (an IPv4 one in the low 32) and ``v6`` its family.

    A frame is dropped, and counted under the first verdict that applies, when

    - ``bad_frame``: ``tuser`` is set on its last beat;
    - ``truncated``: it ends before the end of its BTH, or before the end of
      its opcode's headers plus, unless trimmed, the ICRC;
    - ``not_ipv4``: EtherType != 0x0800 (and, with ``ipv6``, != 0x86DD), IP
      version != 4, MF set or a fragment offset; over IPv6, IP version != 6;
    - ``ipv4_options``: IHL != 5 (IPv4 only);
    - ``ipv4_checksum``: the IPv4 header does not sum to 0xFFFF (IPv4 only);
    - ``not_roce``: protocol != UDP (over IPv6: next header != UDP, so any
      extension header) or destination port != 4791;
    - ``unknown_opcode``: an opcode outside ``Opcode.ALL``, or TVer != 0;
    - ``length_mismatch``: frame length != 14 + IPv4 total length (over IPv6,
      54 + payload length), UDP length != total length - 20 (over IPv6, !=
      payload length), UDP length short of the opcode's headers + pad +
      ICRC, payload longer than ``max_payload``, an ACK whose bitmap is not
      ``sack_bits`` wide, or a trimmed frame with anything after its headers;
    - ``bad_icrc``: the CRC over the masked frame from byte 14, ICRC included,
      is not the CRC-32 residue (not checked on trimmed frames).

    A frame whose DSCP (over IPv6, the traffic class's upper 6 bits) is
    ``trim_dscp`` is trimmed: it carries its headers
    only, no ICRC, and is handed on with ``trimmed`` = 1 and no payload.
    """

    def __init__(self, data_width=64, sack_bits=64, max_payload=4096, fifo_depth=None,
                 plane_bits=0, ipv6=False):
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
        self.plane_bits = plane_bits
        self.ipv6 = bool(ipv6)

        # Header bytes from the start of the frame to the payload, per opcode
        # (over IPv4); the bytes captured, those of the longest header (over
        # IPv6 with `ipv6`).
        self.ack_header_end = OFF_SACK + SACK.size + sack_bits // 8
        self.header_bytes4 = max(OFF_IMMDT + IMMDT.size, self.ack_header_end)
        self.header_bytes = self.header_bytes4 + (IPV6_SHIFT if ipv6 else 0)

        super().__init__(
            {
                "s_axis": In(AXIStreamSignature(data_width, user_width=1 + plane_bits)),
                "hdr": Out(stream.Signature(ParsedHeader(sack_bits, plane_bits, self.ipv6))),
                "payload": Out(stream.Signature(Beat(data_width))),
                "trim_dscp": In(6, init=TRIM_DSCP_DEFAULT),
                "events": Out(len(COUNTER_NAMES)),
            }
        )

    def _checks(self, f, bad_frame, frame_len, ipsum_ok, dec, lengths):
        """The (verdict, condition) pairs of verdict stage 1, first match wins:
        ``f`` the header's fields (``HeaderFields``), ``dec`` and ``lengths``
        decode stage A's and length stage B's outputs, ``ipsum_ok`` the IPv4
        checksum's verdict. Over IPv6: the version, and UDP right after the
        IPv6 header; no checksum, options or fragments there."""
        v6, eth, ip, ip6, udp = f.v6, f.eth, f.ip, f.ip6, f.udp
        frag = (ip["flags"][0]) | (ip["frag_off"] != 0)
        ack_width_bad = dec.is_ack & (
            SACK.unpack(f.after_ip(OFF_SACK, SACK.size))["sack_words"] != self.sack_bits // 32
        )
        return [
            (Verdict.BAD_FRAME, bad_frame),
            (
                Verdict.TRUNCATED,
                (frame_len < by_family(v6, OFF_BTH, OFF_BTH + IPV6_SHIFT) + BTH.size)
                | (dec.opcode_known & (frame_len < dec.frame_need)),
            ),
            (
                Verdict.NOT_IPV4,
                by_family(v6, (eth["ethertype"] != ETHERTYPE_IPV4) | (ip["version"] != 4) | frag,
                          ip6["version"] != 6),
            ),
            (Verdict.IPV4_OPTIONS, by_family(v6, ip["ihl"] != 5, 0)),
            (Verdict.IPV4_CHECKSUM, by_family(v6, ~ipsum_ok, 0)),
            (
                Verdict.NOT_ROCE,
                (by_family(v6, ip["proto"], ip6["next_header"]) != IP_PROTO_UDP)
                | (udp["dport"] != ROCE_UDP_PORT),
            ),
            (Verdict.UNKNOWN_OPCODE, ~dec.opcode_known | dec.tver_bad),
            (
                Verdict.LENGTH_MISMATCH,
                (frame_len != lengths.total_len_eth)
                | (lengths.udp_total != by_family(v6, ip["total_len"], ip6["payload_len"]))
                | Mux(dec.trimmed, lengths.udp_need_ne, ~lengths.payload_fits)
                | ack_width_bad,
            ),
        ]

    def elaborate(self, platform):
        m = Module()
        lanes = self.lanes
        hdr_len = self.header_bytes
        hdr_beats = -(-hdr_len // lanes)
        assert OFF_EXT + RETH.size >= lanes, "the payload never starts in beat 0"
        assert RETH.size == PROBE.size

        axis = self.s_axis

        # ------------------------------------------------------------------
        # Input stage: one beat per cycle.
        # beat_oh[k]: the next beat is beat k of its frame, for the header beats
        # (one-hot, so that the per-beat selects are one LUT deep)
        n_oh = hdr_beats + 1
        beat_oh = Signal(n_oh, init=1)
        first = beat_oh[0]
        hdr = Signal(8 * hdr_len)  # captured header bytes, lane order
        # With `ipv6`, the frame's family: `v6` follows the EtherType's beat as
        # that beat's header chunk does (below), so it holds the frame's from
        # that beat on, until the next frame's comes; `v6_now` is the family
        # for the beat offered, at the EtherType's beat that beat's own.
        # Without `ipv6` both are None, and `by_family` builds IPv4 only.
        v6 = v6_now = None
        if self.ipv6:
            k_eth, eth_lane = divmod(ETH.size - 2, lanes)
            beat_type = axis.tdata[8 * eth_lane : 8 * eth_lane + 16]
            beat_v6 = Cat(beat_type[8:], beat_type[:8]) == ETHERTYPE_IPV6
            v6 = Signal()
            with m.If(beat_oh[k_eth]):
                m.d.sync += v6.eq(beat_v6)
            v6_now = Mux(beat_oh[k_eth], beat_v6, v6)
        trim_dscp = Signal(6)
        bad_frame = Signal()
        # tuser[1:], the plane, taken with bad_frame (with planes only: no field else)
        plane = Signal(self.plane_bits) if self.plane_bits else None
        # verdict stage 1 of a frame with more than one beat (a one-beat frame
        # is never accepted): the record's load enable, so a flip-flop
        rec_load = Signal()
        eof = Signal()  # verdict stage 1: the cycle after a frame's last beat
        v2 = Signal()  # verdict stage 2: the cycle after that

        accept = Signal()
        m.d.comb += accept.eq(axis.tvalid & axis.tready)
        # room in the frame FIFO and in the header FIFO (see `tready`, below)
        room = Signal(init=1)
        hdr_room = Signal(init=1)

        # Bytes of this beat: every beat but the last is full (packed stream).
        nbytes = Signal(range(lanes + 1))
        with m.If(~axis.tlast):
            m.d.comb += nbytes.eq(lanes)
        with m.Else():
            for i in range(lanes):
                with m.If(axis.tkeep[i]):
                    m.d.comb += nbytes.eq(i + 1)

        # Header fields as captured (the verdict only uses them once their bytes
        # are in; see the stages below for when that is).
        f = HeaderFields(hdr, v6)
        eth, ip, ip6, udp, bth = f.eth, f.ip, f.ip6, f.udp, f.bth

        # ------------------------------------------------------------------
        # Decode stage A (ClassDecode), registered at the beat that holds the
        # BTH's first two bytes (opcode, padcount, TVer), from that beat's data
        # and the bytes captured before it; length stage B (LengthCheck), the
        # cycle after, from stage A and the captured UDP and IPv4 lengths:
        # valid from the second cycle after beat k_bth, which is before the
        # first payload beat is written and before the verdict stage of any
        # frame whose verdict depends on it.
        # (at_bth: the family's BTH beat; both families' at 256 and 512 bits,
        # where at 512 the EtherType comes in that beat too)
        k_bth, k_bth6 = bth_beat(lanes), bth_beat(lanes, self.ipv6)
        at_bth = beat_oh[k_bth] if k_bth6 == k_bth else by_family(v6, beat_oh[k_bth],
                                                                  beat_oh[k_bth6])
        m.submodules.decode = decode = ClassDecode(
            self.data_width, hdr_len, self.ack_header_end, self.max_payload, self.ipv6
        )
        m.submodules.lengths = lengths = LengthCheck(
            self.data_width, hdr_len, self.ack_header_end, self.max_payload_beats, self.ipv6
        )
        wiring.connect(m, decode.decoded, lengths.decoded)
        m.d.comb += [
            decode.beat_data.eq(axis.tdata),
            decode.hdr_bytes.eq(hdr),
            decode.at_bth.eq(at_bth),
            decode.first.eq(first),
            decode.trim_dscp.eq(self.trim_dscp),
            decode.trim_dscp_q.eq(trim_dscp),
            lengths.udp_length.eq(udp["length"]),
            lengths.ip_total_len.eq(by_family(v6, ip["total_len"], ip6["payload_len"])),
        ]
        if self.ipv6:
            v6_at_bth = v6_now if k_eth == k_bth else v6
            m.d.comb += [decode.v6.eq(v6_at_bth), lengths.v6.eq(v6)]
        dec = decode.decoded
        is_ack, trimmed = dec.is_ack, dec.trimmed
        payload_fits = lengths.payload_fits

        # ------------------------------------------------------------------
        # IPv4 header checksum: in up to two pipeline stages after the header's
        # last IPv4 byte is captured, as many as fit before the verdict stage of
        # the shortest frame that gets to the checksum verdict (one that reaches
        # the end of the BTH).
        ip_stages = min(2, (OFF_BTH + BTH.size - 1) // lanes - (OFF_UDP - 1) // lanes)
        m.submodules.ip_checksum = ipsum = Ipv4Checksum(ip_stages)
        m.d.comb += ipsum.header.eq(_bytes(hdr, OFF_IPV4, IPV4.size))
        ipsum_ok = ipsum.ok

        # ------------------------------------------------------------------
        # Payload (PayloadWriter): realigned to lane 0 (a two-beat window
        # shifted by the payload offset of the opcode) and written into the
        # frame FIFO (FrameBuffer), through a registered write port (the write
        # lands one cycle after wr_ptr moves, long before the reader may reach
        # it).
        m.submodules.frames = frames = FrameBuffer(
            self.data_width, self.fifo_depth, self.max_payload_beats
        )
        depth = self.fifo_depth
        ptr_bits = frames.ptr_bits
        m.submodules.writer = writer = PayloadWriter(
            self.data_width, hdr_len, self.ack_header_end, self.max_payload_beats, ptr_bits,
            self.ipv6
        )
        wiring.connect(m, writer.write, frames.write)
        if self.ipv6:
            m.d.comb += writer.v6.eq(v6_at_bth)
        m.d.comb += [
            writer.at_bth.eq(at_bth),
            writer.eof.eq(eof),
            writer.first_beat.eq(decode.first_beat),
            writer.shift.eq(dec.shift),
            writer.writes_payload.eq(lengths.writes_payload),
            writer.beats_m1.eq(lengths.beats_m1),
            writer.one_beat.eq(lengths.one_beat),
            writer.last_keep.eq(lengths.last_keep),
        ]
        took, wr_ptr, wr_en = writer.took, writer.wr_ptr, writer.wr_en

        # ICRC (IcrcCheck) over the masked bytes from byte 14 to the end, ICRC
        # included.
        m.submodules.icrc = icrc = IcrcCheck(self.data_width, hdr_beats, self.ipv6)
        m.d.comb += [icrc.took.eq(took), icrc.hdr_beat_oh.eq(beat_oh)]
        if self.ipv6:
            m.d.comb += icrc.v6.eq(v6_now)
        crc, crc_residue = icrc.crc, icrc.residue
        # The frame's length in bytes (FrameLength), loaded in every cycle as
        # if this cycle's beat were taken and the frame's last; verdict stage 1
        # reads it in the cycle after the last beat.
        m.submodules.frame_len = flen = FrameLength(self.data_width)
        m.d.comb += flen.first.eq(first)
        frame_len = flen.frame_len
        # The three watch the input beat alike.
        tap = InputTapSignature(self.data_width).create()
        m.d.comb += [
            tap.data.eq(axis.tdata),
            tap.keep.eq(axis.tkeep),
            tap.last.eq(axis.tlast),
            tap.valid.eq(axis.tvalid),
            tap.room.eq(room),
            tap.accept.eq(accept),
            tap.nbytes.eq(nbytes),
        ]
        wiring.connect(m, tap, writer.beat, icrc.beat, flen.len_beat)
        with m.If(accept):
            m.d.sync += beat_oh.eq(Mux(axis.tlast, 1, beat_oh << 1))
            with m.If(axis.tlast):
                m.d.sync += bad_frame.eq(axis.tuser[0])
                if plane is not None:
                    m.d.sync += plane.eq(axis.tuser[1:])
        m.d.sync += [
            eof.eq(accept & axis.tlast),
            rec_load.eq(accept & axis.tlast & ~first),
            v2.eq(eof),
        ]
        # The header chunk of beat k (and the trim DSCP, at beat 0) follows the
        # input in every cycle while beat k is the next beat, not only when it
        # is taken: its clock enable is then one flip-flop, not `accept` (whose
        # net, with these ~600 sinks, was the slowest of the block). The chunk
        # holds the beat once it is taken, until beat k of the next frame is
        # due; before that it is stale for this frame anyway. Beat 0's chunk
        # changes from the cycle after a last beat (verdict stage 1) on, as it
        # did when the next frame's first beat came at once: stage 1 is the
        # last to read `hdr` (directly or through the IPv4 checksum and stage
        # B), and reads it in that cycle, before the change.
        with m.If(first):
            m.d.sync += trim_dscp.eq(self.trim_dscp)
        for k in range(hdr_beats):
            with m.If(beat_oh[k]):
                lo, hi = 8 * k * lanes, min(8 * (k + 1) * lanes, 8 * hdr_len)
                m.d.sync += hdr[lo:hi].eq(axis.tdata[: hi - lo])

        # ------------------------------------------------------------------

        # Verdict stage 1, in the cycle after the last beat: `hdr`, `frame_len`,
        # `prev` and stages A and B still hold the frame that ended. The checks
        # are registered as flags (and the record as it will be pushed).
        checks = self._checks(f, bad_frame, frame_len, ipsum_ok, dec, lengths)
        flags = Signal(len(checks))
        check_icrc = Signal()  # the ICRC decides (not trimmed)
        m.d.sync += [flags[i].eq(cond) for i, (_, cond) in enumerate(checks)]
        m.d.sync += check_icrc.eq(~trimmed)

        # The record, as stored (in record_q and the header FIFO): the
        # extension headers of the opcode classes, which no frame has two of,
        # share their bytes, kept as the raw bytes after the BTH and the class;
        # the output stage spreads them into the ParsedHeader's fields.
        ext_bytes = self.header_bytes4 - OFF_EXT
        m.submodules.records = records = RecordQueue(
            self.sack_bits, ext_bytes, self.max_payload_beats, self.hdr_fifo_depth,
            self.plane_bits, self.ipv6)
        stored = records.record_layout
        record = Signal(stored)
        m.d.comb += [
            record.eth_src.eq(eth["src"]),
            record.eth_dst.eq(eth["dst"]),
            record.ip_src.eq(by_family(v6, ip["src"], ip6["src"])),
            record.ip_dst.eq(by_family(v6, ip["dst"], ip6["dst"])),
            *([record.v6.eq(v6), record.flow.eq(by_family(v6, 0, ip6["flow_label"]))]
              if v6 is not None else []),
            record.dscp.eq(by_family(v6, ip["dscp"], ip6["dscp"])),
            record.ecn.eq(by_family(v6, ip["ecn"], ip6["ecn"])),
            record.ev.eq(udp["sport"]),
            *([record.plane.eq(plane)] if plane is not None else []),
            record.trimmed.eq(trimmed),
            record.payload_len.eq(Mux(payload_fits, lengths.payload_len, 0)),
            record.beats.eq(Mux(payload_fits, lengths.payload_beats, 0)),
            record.ext.eq(f.after_ip(OFF_EXT, ext_bytes)),
            record.is_write.eq(dec.is_write),
            record.is_imm.eq(dec.is_imm),
            record.is_ack.eq(is_ack),
            record.is_probe.eq(dec.is_probe),
        ]
        for name, value in bth.items():
            m.d.comb += record.bth[name].eq(value)
        # Held until the record is pushed in stage 3: the next frame's stage 1
        # comes 2 cycles later at the earliest, unless it has one beat.
        record_q = Signal(stored)
        with m.If(rec_load):
            m.d.sync += record_q.eq(record)

        # ------------------------------------------------------------------
        # Verdict stages 2 and 3, and the counter strobes (VerdictStages): the ICRC
        # comparison and the first failing check; an accepted frame commits its
        # payload and pushes its record, a dropped one rolls the payload writer
        # back (PayloadWriter).
        m.submodules.verdict = verdict = VerdictStages([v for v, _ in checks])
        m.d.comb += [
            verdict.flags.eq(flags),
            verdict.check_icrc.eq(check_icrc),
            verdict.v2.eq(v2),
            verdict.crc.eq(crc),
            verdict.residue.eq(crc_residue),
            self.events.eq(verdict.events),
        ]
        push, v3 = verdict.push, verdict.v3
        m.d.comb += [writer.v3.eq(v3), writer.push.eq(push)]

        # The header FIFO (RecordQueue) and the output stage behind it; the
        # payload of a record taken on `hdr` is released to the frame FIFO's
        # reader.
        m.d.comb += [
            records.record.eq(record_q),
            records.push.eq(push),
        ]
        wiring.connect(m, wiring.flipped(self.hdr), records.hdr)
        wiring.connect(m, records.release, frames.release)
        wiring.connect(m, wiring.flipped(self.payload), frames.payload)

        # A beat is taken only with room for its own payload beat and for the
        # one the verdict stage may write in the cycle after a last beat; a
        # frame only with room for its record (and the ones of the frames in
        # the verdict stages). Both are registered, from the previous cycle's
        # state, on the safe side: the frame FIFO gains at most one beat per
        # cycle (`used` counts up to the previous cycle's write, and wr_en says
        # whether this one writes), and the records in the FIFO or in flight at
        # most one. `room` is one flip-flop, so that `tready` and the input
        # handshake are one LUT deep.
        used = (wr_ptr - frames.rd_ptr)[:ptr_bits]
        m.d.sync += [
            room.eq((used <= depth - 3) | ((used <= depth - 2) & ~wr_en)),
            hdr_room.eq(records.level + v3 + v2 + eof + 1 <= self.hdr_fifo_depth - 1),
        ]
        m.d.comb += axis.tready.eq(room & (~first | hdr_room))

        return m

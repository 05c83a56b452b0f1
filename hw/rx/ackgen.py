"""Frame builder for the responder's ACK, NAK and probe-response frames."""

import operator
from functools import reduce

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from hw.arbiter import one_hot_select
from hw.bits import index_select
from hw.crc import ICRC_INIT, crc32_before_zeros, crc32_parts
from hw.headers import (
    AETH,
    BTH,
    ETH,
    ETHERTYPE_IPV4,
    ETHERTYPE_IPV6,
    IP_PROTO_UDP,
    IPV4,
    IPV6,
    IPV6_SHIFT,
    OFF_IPV4,
    OFF_UDP,
    OFF_UDP6,
    PROBE,
    ROCE_UDP_PORT,
    SACK,
    UDP,
    Opcode,
    icrc_mask,
    sack_bitmap,
)
from hw.pipeline import OneHotFSM
from hw.protocol import ECN_ECT0, IP_FLAGS_DF, IP_TTL, PKEY_DEFAULT
from hw.stream import AXIStreamSignature, check_data_width

from .layouts import AckJob

__all__ = ["RxAckBuilder", "ack_frame_len", "PROBE_FRAME_LEN"]

PROBE_FRAME_LEN = 14 + 20 + 8 + 12 + 16 + 4


# Lane groups of the output beat register, each with its own clock enable
# and beat index (see elaborate).
OUT_GROUPS = 4

# Beats per group of the CRC source beat's first pick step (see elaborate).
SRC_GROUP = 8


def ack_frame_len(sack_bits):
    return 14 + 20 + 8 + 12 + 4 + 12 + sack_bits // 8 + 4


def _mask(v6):
    """The bits the ICRC sees as ones (``icrc_mask``), as one integer over the frame."""
    return sum(bits << (8 * b) for b, bits in icrc_mask(v6).items())


def _addr_sum(addr):
    """The sum of the two 16-bit words of a 32-bit IPv4 address in a header."""
    return addr[16:] + addr[:16]


def _ipv4_sum(header):
    """RFC 1071 sum (< 2^20) of the ten 16-bit words of a 20-byte header (lane
    order); the checksum is its ones-complement fold, inverted."""
    words = [Cat(header[8 * (2 * i + 1) : 8 * (2 * i + 2)], header[16 * i : 16 * i + 8])
             for i in range(10)]
    return sum(words)[:20]


class RxAckBuilder(wiring.Component):
    """Serialises ``AckJob`` records into Ethernet frames (no FCS).

    Interface
    ---------
    ``job``     In(stream.Signature(AckJob(sack_bits, plane_bits))).
    ``m_axis``  Out(AXIStreamSignature(data_width, max(1, plane_bits))): the
                frames, packed; ``tuser`` is the job's plane on every beat (0
                with one plane).
    ``own_mac``, ``own_ip``: In, the source addresses.

    Frames (docs/protocol.md): Eth / IPv4 (DSCP 0, ECT(0), DF, TTL 64, id 0,
    checksum) / UDP (source port = the job's EV, checksum 0) / BTH (P_Key
    0xFFFF) / AETH / MRC SACK / bitmap / ICRC for an ACK or NAK, ``74 +
    sack_bits / 8`` bytes; Eth / IPv4 / UDP / BTH (opcode 0xC1, PSN 0) / MRC
    PROBE / ICRC for a probe response, 74 bytes. With ``ipv6`` (a build
    parameter) a job with ``v6`` set goes over IPv6 instead (traffic class
    ECT(0), the job's flow label, hop limit 64, from ``own_ip6`` to the job's
    128-bit ``dst_ip``; 20 bytes longer, no checksum): four kinds of frame,
    each with its own image, ICRC masks and beat index, picked by the job's
    ``probe`` and ``v6``.

    The frame is not kept in a shift register: its image is a function of the
    job register (most of it constant), and a beat index picks each beat of it
    into a one-beat register, for the ICRC a cycle before its data part (in
    two registered steps: beats 1.. per group into part registers a cycle
    earlier, beat 0 directly) and for the output a beat ahead of ``m_axis``'s
    register, which loads it through a 2:1 mux (beat 0, with the checksum,
    straight from the image).

    Pipelined for 125 MHz on the ECP5: each ICRC beat is the running CRC's
    state part XOR a data part registered in the cycle before, every beat a
    full one (the bytes the ICRC covers are preceded by zero bytes up to a
    whole number of beats, and the CRC starts from the register those zero
    bytes take to the ICRC's initial value), and the IPv4 checksum, which the ICRC
    does not cover, is summed and folded in three registered steps while the
    ICRC runs and put into the frame with the ICRC. The state machine is one
    flip-flop per state; the job register loads under the IDLE flip-flop and
    the CRC source beat in every cycle, neither under a handshake.

    Latency: the first beat is valid ``3 + ceil((len - 18) / bytes per beat)``
    cycles after the job is taken (the ICRC is computed first, one beat per
    cycle). Throughput: one frame per ``that + beats`` cycles and one more;
    measured with jobs waiting and the sink ready, 23 cycles per ACK (SACK 64)
    and 21 per probe response at 64 bits, 7 at 512.
    """

    def __init__(self, data_width=64, sack_bits=64, plane_bits=0, ipv6=False):
        check_data_width(data_width)
        self.data_width = data_width
        self.sack_bits, self.plane_bits = sack_bits, plane_bits
        self.ipv6 = ipv6
        self.ack_len = ack_frame_len(sack_bits)
        self.max_len = max(self.ack_len, PROBE_FRAME_LEN) + (IPV6_SHIFT if ipv6 else 0)
        super().__init__(
            {
                "job": In(stream.Signature(AckJob(sack_bits, plane_bits, ipv6))),
                "m_axis": Out(AXIStreamSignature(data_width, max(1, plane_bits))),
                "own_mac": In(48),
                "own_ip": In(32),
                **({"own_ip6": In(128)} if ipv6 else {}),
            }
        )

    def elaborate(self, platform):
        m = Module()
        dw, bpb = self.data_width, self.data_width // 8
        W = self.sack_bits
        job = Signal(AckJob(W, self.plane_bits, self.ipv6))
        nbytes = -(-self.max_len // bpb) * bpb
        # The kinds of frame, in the order ``by_kind`` takes them: (v6, probe).
        kinds = [(False, False), (False, True)] + (
            [(True, False), (True, True)] if self.ipv6 else [])

        def by_kind(values):
            """The value for the job's kind, a mux on its bits."""
            return index_select(values, Cat(job.probe, job.v6) if self.ipv6 else job.probe,
                                exact=True)

        def is_kind(kind, rec):
            v6, probe = kind
            hit = rec.probe if probe else ~rec.probe
            return (hit & (rec.v6 if v6 else ~rec.v6)) if self.ipv6 else hit

        def frame_bytes(kind):
            v6, probe = kind
            return (PROBE_FRAME_LEN if probe else self.ack_len) + (IPV6_SHIFT if v6 else 0)

        lengths = [frame_bytes(k) for k in kinds]
        frame_len = by_kind(lengths)

        def pack(header, **fields):
            widths = {name: w for name, _, w in header.fields}
            return header.pack(
                {k: Const(v, widths[k]) if isinstance(v, int) else v for k, v in fields.items()}
            )

        def ip_header(total_len, checksum, src=self.own_ip, dst=job.dst_ip[:32]):
            return pack(
                IPV4, version=4, ihl=5, ecn=ECN_ECT0, total_len=total_len - 14,
                flags=IP_FLAGS_DF, ttl=IP_TTL, proto=IP_PROTO_UDP, checksum=checksum,
                src=src, dst=dst,
            )

        def l3(total_len, opcode, psn, checksum, v6=False):
            if v6:
                ip = (pack(ETH, dst=job.dst_mac, src=self.own_mac, ethertype=ETHERTYPE_IPV6),
                      pack(IPV6, version=6, ecn=ECN_ECT0, flow_label=job.flow,
                           payload_len=total_len - OFF_UDP6, next_header=IP_PROTO_UDP,
                           hop_limit=IP_TTL, src=self.own_ip6, dst=job.dst_ip))
            else:
                ip = (pack(ETH, dst=job.dst_mac, src=self.own_mac, ethertype=ETHERTYPE_IPV4),
                      ip_header(total_len, checksum))
            udp_len = total_len - (OFF_UDP6 if v6 else OFF_UDP)
            return (
                *ip,
                pack(UDP, sport=job.ev, dport=ROCE_UDP_PORT, length=udp_len),
                pack(BTH, opcode=opcode, pkey=PKEY_DEFAULT, dqpn=job.dqpn, psn=psn),
            )

        # The IPv4 checksum is not covered by the ICRC (masked): the frame image
        # is loaded with 0 there, and the checksum, computed in three
        # registered steps from the job while the ICRC runs, is put in with
        # the ICRC. RFC 1071 sum of the ten 16-bit words (< 2^20), then
        # folded. The sum is that of three parts, each a two-word sum
        # registered first or constant: the destination address's words (from
        # the job register, whose bits also feed the whole frame image and so
        # lie far from the adder: nothing else is in front of it), the source
        # address's, and the other words' (with the addresses 0: a constant
        # per frame type, chosen by a copy of job.probe registered beside the
        # adder, not by job.probe, which selects every bit of the image).
        ip_dst_sum = Signal(17)
        ip_src_sum = Signal(17)
        ip_probe = Signal()
        m.d.sync += [
            ip_dst_sum.eq(_addr_sum(job.dst_ip[:32])),
            ip_src_sum.eq(_addr_sum(self.own_ip)),
            ip_probe.eq(job.probe),
        ]
        ip_sum = Signal(20)
        ip_csum = Signal(16)
        fixed_sum = Mux(ip_probe, _ipv4_sum(ip_header(PROBE_FRAME_LEN, 0, src=0, dst=0)),
                        _ipv4_sum(ip_header(self.ack_len, 0, src=0, dst=0)))
        m.d.sync += ip_sum.eq(ip_dst_sum + ip_src_sum + fixed_sum)
        fold = (ip_sum[:16] + ip_sum[16:])[:17]
        m.d.sync += ip_csum.eq(~(fold[:16] + fold[16])[:16])
        def img(kind):
            v6, probe = kind
            if probe:
                return Cat(
                    *l3(frame_bytes(kind), Opcode.PROBE_RESP, 0, 0, v6),
                    pack(PROBE, probe_id=job.probe_id, ev=job.probe_ev, timestamp=job.timestamp),
                )
            return Cat(
                *l3(frame_bytes(kind), Opcode.ACKNOWLEDGE, job.psn, 0, v6),
                pack(AETH, syndrome=job.syndrome, msn=job.msn),
                pack(SACK, svc_hi=job.svc_time[8:], svc_lo=job.svc_time[:8],
                     cum_psn=job.cum_psn, sack_base=job.sack_base, ece=job.ece,
                     sack_words=W // 32, ce_count=job.ce_count),
                pack(sack_bitmap(W), bitmap=job.bitmap),
            )

        images = [img(k) for k in kinds]
        image = Signal(8 * nbytes)
        m.d.comb += image.eq(by_kind(images))

        crc = Signal(32)
        crc_left = Signal(range(nbytes + 1))
        crc_last = Signal()  # this CRC beat is the last one (crc_left <= bpb)
        crc_len = by_kind([n - OFF_IPV4 - 4 for n in lengths])
        # The data part of the next CRC beat, as the parts of the beat's low
        # and high halves (XOR them): two registered XOR trees of half the
        # inputs each, one level less in front of these flip-flops than one
        # tree over the beat; the CRC register XORs both in.
        crc_dpart_lo = Signal(32)
        crc_dpart_hi = Signal(32)
        # The CRC's beats are picked from the image (see the class docstring).
        # The covered bytes of each frame type are preceded by the zero bytes
        # that fill its first beat, so one full-beat network serves every
        # beat; the CRC starts from the register those zero bytes take to
        # ICRC_INIT (zero bytes leave a data part unchanged).

        def zero_lead(length):
            return -(length - OFF_IPV4 - 4) % bpb

        def crc_beats(img, length, mask):
            covered = length - OFF_IPV4 - 4
            src = (Cat(img, Const(0, 8 * nbytes - len(img))) | mask) >> (8 * OFF_IPV4)
            lead = Cat(Const(0, 8 * zero_lead(length)), src[: 8 * covered])
            return [lead[i * dw : (i + 1) * dw] for i in range(len(lead) // dw)]

        crc_init = by_kind([crc32_before_zeros(ICRC_INIT, zero_lead(n)) for n in lengths])

        kind_beats = [crc_beats(im, n, _mask(k[0]))
                      for im, n, k in zip(images, lengths, kinds, strict=True)]
        src_q = Signal(dw)  # the CRC beat whose data part is computed next
        # The beat index, one-hot over each kind of frame's beats apart (the
        # ACK's, the probe response's, and over IPv6 theirs), beat 0 excluded
        # (bit i: beat i + 1): the frame type is in the index (set from the
        # job as it is taken), so no job.probe select lies between the image
        # and src_q. src_first[k] selects kind k's beat 0 (set in IDLE, so 1
        # in LOAD). One copy of the index per half of the beat (each with its
        # own feedback, so synthesis keeps both): a bit of it selects 32 data
        # bits, not 64 (docs/timing.md#rx-ack-builder).
        names = [("ack", "probe")[p] + ("6" if v6 else "") for v6, p in kinds]
        src_next = [[Signal(len(b) - 1, name=f"src_next_{n}_h{h}") for h in range(2)]
                    for n, b in zip(names, kind_beats, strict=True)]
        src_first = [Signal(name=f"src_first_{n}") for n in names]
        # The pick of beats 1.. is in two registered steps: ``src_part``
        # holds the one-hot pick within each group of SRC_GROUP beats, a beat
        # ahead of src_q, which ORs the groups' parts and beat 0's pick (from
        # the job register, which loads as the job is taken, in LOAD).
        src_rest = [b for beats in kind_beats for b in beats[1:]]
        src_groups = [list(range(i, min(i + SRC_GROUP, len(src_rest))))
                      for i in range(0, len(src_rest), SRC_GROUP)]
        src_part = [Signal(dw, name=f"src_part_{k}") for k in range(len(src_groups))]

        def data_part(data):
            return crc32_parts(0, data, bpb)[1]

        def half_parts(data):
            zeros = Const(0, dw // 2)
            return data_part(Cat(data[: dw // 2], zeros)), data_part(Cat(zeros, data[dw // 2 :]))

        # The ICRC goes on the wire least-significant byte first, the IPv4
        # checksum big-endian; both are zero in the image.
        icrc = ~crc
        full = Signal(8 * nbytes)
        at_csum = 8 * (OFF_IPV4 + 10)
        csum = Cat(ip_csum[8:], ip_csum[:8])
        if self.ipv6:
            csum = csum & (~job.v6).replicate(16)  # no checksum over IPv6
        m.d.comb += full.eq(
            image
            | (csum << at_csum)
            | by_kind([icrc << 8 * (n - 4) for n in lengths])
        )
        out_beats = [full[i * dw : (i + 1) * dw] for i in range(nbytes // bpb)]
        out = Signal(dw)
        out_left = Signal(range(nbytes + 5))
        axis = self.m_axis

        def pick(beats, onehot):  # no bit set (past the end): 0
            return one_hot_select(onehot, beats)

        # One flip-flop per state (hw.pipeline.OneHotFSM): the enables and
        # selects of the job, CRC and beat registers are state flip-flops, not
        # decodes of a binary state.
        fsm = OneHotFSM(m, ("IDLE", "LOAD", "PREP", "CRC", "ICRC", "SEND"), "IDLE")
        st = fsm.st

        # The CRC source beat and its data part are loaded in every cycle,
        # with no enable: they are read only in PREP and CRC. src_q gets beat
        # 0 in LOAD (src_first_*, set in IDLE from the offered job's frame
        # type, which the job register takes with it), beat 1 in PREP, ...;
        # the beat index is set in IDLE to beat 1 of the type of the job
        # taken (zero when none is: src_part must be zero in LOAD) and walks
        # on from LOAD, src_part taking beat i in the cycle before src_q does;
        # crc_dpart_lo/hi get the data part of the beat src_q held.
        dpart_lo, dpart_hi = half_parts(src_q)
        half = dw // 2
        offered = self.job.payload
        for h in range(2):
            src_index = Cat(*(nxt[h] for nxt in src_next))
            for part, group in zip(src_part, src_groups, strict=True):
                m.d.sync += part[h * half : (h + 1) * half].eq(
                    pick([src_rest[i][h * half : (h + 1) * half] for i in group],
                         Cat(*(src_index[i] for i in group))))
            m.d.sync += [
                nxt[h].eq(Mux(st.IDLE, self.job.valid & is_kind(kind, offered), nxt[h] << 1))
                for nxt, kind in zip(src_next, kinds, strict=True)
            ]
        m.d.sync += [
            src_q.eq(reduce(operator.or_, [pick([b[0] for b in kind_beats], Cat(*src_first)),
                                           *src_part])),
            *[first.eq(st.IDLE & is_kind(kind, offered))
              for first, kind in zip(src_first, kinds, strict=True)],
            crc_dpart_lo.eq(dpart_lo),
            crc_dpart_hi.eq(dpart_hi),
        ]
        with fsm.State("IDLE"):
            m.d.comb += self.job.ready.eq(1)
            # The job register follows the input while in IDLE (its enable is
            # the IDLE flip-flop, not the handshake); it holds from LOAD on.
            m.d.sync += job.eq(self.job.payload)
            with m.If(self.job.valid):
                fsm.next = "LOAD"
        with fsm.State("LOAD"):
            m.d.sync += [
                crc.eq(crc_init),
                crc_left.eq(crc_len),
                crc_last.eq(crc_len <= bpb),
            ]
            fsm.next = "PREP"
        with fsm.State("PREP"):
            fsm.next = "CRC"
        with fsm.State("CRC"):
            # the CRC register: the state part of a full beat XOR the data
            # part registered in the cycle before
            next_last = crc_left <= 2 * bpb
            m.d.sync += [
                crc.eq(crc32_parts(crc, 0, bpb)[0] ^ crc_dpart_lo ^ crc_dpart_hi),
                crc_left.eq(crc_left - bpb),
                crc_last.eq(next_last),
            ]
            with m.If(crc_last):
                fsm.next = "ICRC"
        # The output beat register ``out`` loads, as it takes a beat (in ICRC,
        # when the CRC is final, the first; in SEND the next as each is taken),
        # beat 0 of the frame in ICRC, else ``out_pre``, the next beat, through
        # a 2:1 mux (a placement near the output's sinks does not stretch the
        # beat network); ``out_pre`` loads with ``out``, the beat index
        # (one-hot, beat 1 until ICRC) picking the beat after the one ``out``
        # takes from the frame. Both registers' clock enable depends on
        # ``m_axis.tready`` from outside, and the beat index selects every bit:
        # they are built once per group of lanes, from the group's own copy of
        # the ICRC and SEND flip-flops and of the beat index (one net to all
        # the output flip-flops is too slow: docs/timing.md#rx-ack-builder).
        # Each copy's next value is a function of the copy itself, so synthesis
        # keeps the copies apart.
        last = out_left <= bpb
        group_bits = dw // OUT_GROUPS
        for g in range(OUT_GROUPS):
            icrc_g = Signal(name=f"icrc_{g}")  # = st.ICRC (entered from CRC, left at once)
            send = Signal(name=f"send_{g}")  # = st.SEND
            # one-hot, bit i: out_pre's next beat is beat i + 1
            out_next = Signal(len(out_beats) - 1, name=f"out_next_{g}")
            lo, hi = g * group_bits, (g + 1) * group_bits
            pre = Signal(group_bits, name=f"out_pre_{g}")
            m.d.sync += [
                icrc_g.eq(Mux(icrc_g, 0, st.CRC & crc_last)),
                send.eq(Mux(send, ~(axis.tready & last), icrc_g)),
            ]
            with m.If(icrc_g | (send & axis.tready)):
                m.d.sync += [
                    out[lo:hi].eq(Mux(icrc_g, out_beats[0][lo:hi], pre)),
                    pre.eq(pick([b[lo:hi] for b in out_beats[1:]], out_next)),
                    out_next.eq(out_next << 1),
                ]
            with m.Elif(~send):
                m.d.sync += out_next.eq(1)
        with fsm.State("ICRC"):
            m.d.sync += out_left.eq(frame_len)
            fsm.next = "SEND"
        with fsm.State("SEND"):
            m.d.comb += [
                axis.tvalid.eq(1),
                axis.tdata.eq(out),
                axis.tlast.eq(last),
                axis.tkeep.eq(
                    Mux(out_left >= bpb, (1 << bpb) - 1,
                        (Const(1, bpb + 1) << out_left[: exact_log2(bpb) + 1]) - 1)
                ),
                # the job register holds until IDLE
                axis.tuser.eq(job.plane if self.plane_bits else 0),
            ]
            with m.If(axis.tready):
                m.d.sync += out_left.eq(out_left - bpb)
                with m.If(last):
                    fsm.next = "IDLE"
        return m

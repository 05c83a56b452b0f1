"""EV probe request frames (docs/protocol.md, MRC PROBE, opcode 0xC0)."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.bits import one_hot_select
from hw.crc import ICRC_INIT, crc32_before_zeros, crc32_parts
from hw.headers import (
    BTH,
    ETH,
    ETHERTYPE_IPV4,
    ETHERTYPE_IPV6,
    ICRC_MASKED_BYTES,
    IP_PROTO_UDP,
    IPV4,
    IPV6,
    IPV6_SHIFT,
    OFF_EXT,
    OFF_IPV4,
    OFF_IPV6_DST,
    OFF_UDP,
    OFF_UDP6,
    PROBE,
    ROCE_UDP_PORT,
    UDP,
    Opcode,
    by_family,
    ev_fields,
    ev_fold,
    icrc_mask,
)
from hw.pipeline import OneHotFSM, load_in_groups, state_copy
from hw.protocol import ECN_ECT0, IP_FLAGS_DF, IP_TTL, PKEY_DEFAULT, EvFormat
from hw.rx.parser import ParsedHeader
from hw.stream import AXIStreamSignature

from .registers import RTT_NS_BITS, RTT_NS_MAX

__all__ = ["NetConfig", "PROBE_FRAME_BYTES", "ProbeBuilder", "ProbeReplyCheck", "ProbeRequest",
           "net_config"]

PROBE_FRAME_BYTES = OFF_EXT + PROBE.size + 4  # 74
_CRC_START = OFF_IPV4
_CRC_END = OFF_EXT + PROBE.size  # the ICRC covers bytes 14..69 (masked), after 8 bytes of ones


def ProbeRequest(num_qps, evs_per_qp):
    return data.StructLayout({"qpn": range(num_qps), "ev_index": range(evs_per_qp),
                              "probe_id": 32})


NetConfig = data.StructLayout({"peer_mac": 64, "peer_ip": 32, "dest_qpn": 32})


def net_config(ipv6=False):
    """A QP's peer as the probe builder reads it: ``NetConfig``, and with
    ``ipv6`` the peer's IPv6 address above ``peer_ip`` (its bits 127..32,
    ``peer_ip6``) and its family (``peer_v6`` bit 0) and EV format (bits
    2..1, ``hw.protocol.EvFormat``), a word each."""
    if not ipv6:
        return NetConfig
    return data.StructLayout({**{name: f.shape for name, f in NetConfig},
                              "peer_ip6": 96, "peer_v6": 32})


class ProbeBuilder(wiring.Component):
    """Builds one 74-byte probe request per ``req`` and sends it on ``m_axis``.

    Interface
    ---------
    ``req``        In(stream(ProbeRequest)): probe EV ``ev_index`` of ``qpn`` with ``probe_id``.
    ``net_addr`` / ``net_data``: synchronous read port on the per-QP peer addresses
                   (``net_config(ipv6)``: peer MAC, peer IPv4, peer QPN; with ``ipv6``
                   the peer's IPv6 address and family).
    ``ev_addr`` / ``ev_data``: synchronous read port on the EV values (qpn x evs + index):
                   the value (``ev_width`` bits), then its plane (``plane_bits``, none with
                   one plane).
    ``own_mac``, ``own_ip`` (and with ``ipv6``, ``own_ip6``): the NIC's addresses.
    ``now_ns``: the timestamp put in the probe.
    ``m_axis``     Out(AXIStreamSignature(data_width, max(1, plane_bits))): ``tuser`` the
                   EV's plane (0 with one plane), on every beat; Eth / IPv4 (ECT(0), DF, TTL 64) /
                   UDP (sport = the EV, dport 4791, checksum 0) / BTH (0xC0, P_Key 0xFFFF,
                   DestQP = peer QPN, PSN 0) / PROBE (probe_id, ev, 0, timestamp) / ICRC.
                   With ``ipv6``, to a peer whose family is IPv6: Eth / IPv6 (ECT(0),
                   flow label 0, hop limit 64) / the same, 94 bytes. With ``ev_width``
                   above 16, the EV rides in the peer's EV format (``hw.headers.ev_fields``:
                   STEV's flow label, SRv6's source port and carrier, the ICRC over the
                   peer's address); PROBE's ``ev`` is the XOR of the EV's 16-bit words
                   (``ev_fold``: the EV itself in the UDP format).

    Latency: 4 cycles to read the configuration and sum the IPv4 header, 3 to build the
    header and feed the ICRC, ceil(56 / bytes per beat) cycles of ICRC,
    then ceil(74 / bytes per beat) beats (10 at 64 bits) at one per cycle. With ``ipv6``
    the ICRC takes ceil(76 / bytes per beat) cycles for either family (the shorter
    IPv4 span led by zero bytes), and an IPv6 probe ceil(94 / bytes per beat) beats.
    Throughput: one probe per about 23 cycles at 64 bits; probes are rare (the IPv4
    checksum's sum, each CRC step's input and that input's part of the CRC are
    registered: 3 cycles more than a single-cycle header and CRC feed).
    """

    def __init__(self, num_qps: int, evs_per_qp: int, data_width: int = 64, plane_bits: int = 0,
                 ipv6: bool = False, ev_width: int = 16):
        self.num_qps, self.evs_per_qp, self.data_width = num_qps, evs_per_qp, data_width
        self.ev_width = ev_width
        self.plane_bits = plane_bits
        self.ipv6 = bool(ipv6)
        super().__init__(
            {
                "req": In(stream.Signature(ProbeRequest(num_qps, evs_per_qp))),
                "net_addr": Out(range(num_qps)),
                "net_data": In(net_config(self.ipv6)),
                "ev_addr": Out(range(num_qps * evs_per_qp)),
                "ev_data": In(ev_width + plane_bits),
                "own_mac": In(48),
                "own_ip": In(32),
                **({"own_ip6": In(128)} if self.ipv6 else {}),
                "now_ns": In(64),
                "m_axis": Out(AXIStreamSignature(data_width, max(1, plane_bits))),
            }
        )

    def elaborate(self, platform):
        m = Module()
        dw = self.data_width
        lanes = dw // 8
        req = Signal(ProbeRequest(self.num_qps, self.evs_per_qp))
        ev_bits = (self.evs_per_qp - 1).bit_length()
        m.d.comb += [
            self.net_addr.eq(req.qpn),
            self.ev_addr.eq(Cat(req.ev_index, req.qpn) if ev_bits else req.qpn),
        ]

        net = Signal(net_config(self.ipv6))
        ev_entry = Signal(self.ev_width + self.plane_bits)  # the value, then the plane
        ev = ev_entry[: self.ev_width]
        stamp = Signal(64)
        # the families' frame lengths; `v6` (held from LATCH) picks the peer's
        lengths = (PROBE_FRAME_BYTES, PROBE_FRAME_BYTES + IPV6_SHIFT)[: 1 + self.ipv6]
        v6 = net.peer_v6[0] if self.ipv6 else None
        fmt = Mux(v6, net.peer_v6[1:3], 0) if self.ev_width > 16 else None
        peer = Cat(net.peer_ip, net.peer_ip6) if self.ipv6 else None
        sport, flow_label, carrier = ev_fields(ev, fmt, self.ev_width, peer)

        frame = Signal(8 * lengths[-1])

        ip_fields = {
            "version": 4, "ihl": 5, "dscp": 0, "ecn": ECN_ECT0,
            "total_len": PROBE_FRAME_BYTES - OFF_IPV4, "ident": 0, "flags": IP_FLAGS_DF,
            "frag_off": 0, "ttl": IP_TTL, "proto": IP_PROTO_UDP, "checksum": 0,
            "src": self.own_ip, "dst": net.peer_ip,
        }
        ip_raw = IPV4.pack(ip_fields)
        words = [Cat(ip_raw[8 * i + 8 : 8 * i + 16], ip_raw[8 * i : 8 * i + 8])
                 for i in range(0, IPV4.size, 2)]
        def tree_sum(values):
            if len(values) == 1:
                return values[0]
            h = len(values) // 2
            return tree_sum(values[:h]) + tree_sum(values[h:])

        # The header's sum without the peer's address (words 8, 9): constants and
        # own_ip, a static setting, summed every cycle; SUM adds the peer's words.
        own_sum = Signal(20)
        m.d.sync += own_sum.eq(tree_sum(words[:8]))
        ipsum = Signal(20)  # registered in SUM, folded in BUILD
        fold1 = Signal(17)
        fold2 = Signal(16)
        m.d.comb += [
            fold1.eq(ipsum[:16] + ipsum[16:]),
            fold2.eq(fold1[:16] + fold1[16]),
        ]
        def after_ip():  # (the UDP length is the same over either family)
            return (
                UDP.pack({"sport": sport, "dport": ROCE_UDP_PORT,
                          "length": PROBE_FRAME_BYTES - OFF_UDP, "checksum": 0}),
                BTH.pack({"opcode": Opcode.PROBE_REQ, "pkey": PKEY_DEFAULT,
                          "dqpn": net.dest_qpn[:24], "psn": 0}),
                PROBE.pack({"probe_id": req.probe_id, "ev": ev_fold(ev), "timestamp": stamp}),
            )

        header = Cat(
            ETH.pack({"dst": net.peer_mac[:48], "src": self.own_mac, "ethertype": ETHERTYPE_IPV4}),
            IPV4.pack({**ip_fields, "checksum": ~fold2}),
            *after_ip(),
        )
        if self.ipv6:
            header6 = Cat(
                ETH.pack({"dst": net.peer_mac[:48], "src": self.own_mac,
                          "ethertype": ETHERTYPE_IPV6}),
                IPV6.pack({"version": 6, "dscp": 0, "ecn": ECN_ECT0, "flow_label": flow_label,
                           "payload_len": lengths[1] - OFF_UDP6, "next_header": IP_PROTO_UDP,
                           "hop_limit": IP_TTL, "src": self.own_ip6,
                           "dst": Cat(net.peer_ip, net.peer_ip6)}),
                *after_ip(),
            )
            header = Mux(v6, header6, header)  # (IPv4's 20 bytes shorter: zeros after it)

        # ICRC over bytes 14..69 (over IPv6 14..89) with the variant bits as ones
        if not self.ipv6:
            masked = Signal(8 * (_CRC_END - _CRC_START))
            parts = []
            for pos in range(_CRC_START, _CRC_END):
                byte = frame[8 * pos : 8 * pos + 8]
                parts.append(Const(0xFF, 8) if pos in ICRC_MASKED_BYTES else byte)
            m.d.comb += masked.eq(Cat(*parts))
            crc_init = ICRC_INIT
        else:
            # Both families' spans are led by zero bytes to the same whole number
            # of beats, so one step sequence serves both; the CRC starts from the
            # register that the zeros take to ICRC_INIT (hw.crc.crc32_before_zeros).
            spans = [n - 4 - _CRC_START for n in lengths]
            steps = -(-spans[1] // lanes)
            spans_masked = []
            for span, family in zip(spans, (False, True), strict=True):
                mask = icrc_mask(family)
                lead = steps * lanes - span
                spans_masked.append(Cat(Const(0, 8 * lead), *[
                    frame[8 * pos : 8 * pos + 8] | mask.get(pos, 0)
                    for pos in range(_CRC_START, _CRC_START + span)]))
            masked = Signal(steps * dw)
            m.d.comb += masked.eq(by_family(v6, *spans_masked))
            crc_init = by_family(v6, *[crc32_before_zeros(ICRC_INIT, steps * lanes - span)
                                       for span in spans])
        steps = -(-len(masked) // dw)
        # step, one-hot: bit k is set in the cycle that registers chunk k (k < steps)
        # and in CRC the cycle that takes chunk k - 2's part into the register. Set to
        # chunk 0 by BUILD, moved up every cycle (to 0 past the top): the chunk mux
        # is an AND-OR on flip-flops, not a decode of a counter.
        step = Signal(steps + 2)
        m.d.sync += step.eq(step << 1)
        crc = Signal(32)
        # The CRC is linear: the register's next value is the XOR of a part from the
        # register alone and a part from the chunk alone, itself the XOR of the parts
        # of the chunk's low and high halves. The chunk of step and its two half parts
        # are registered every cycle (each part an XOR tree over half the chunk), so
        # the loop is one XOR tree of the register and the registered parts: in CRC,
        # step is two ahead of the parts (CRC_WAIT registers chunk 0, CRC_PART its
        # parts). Every chunk but the last is a full beat; the last one's (if
        # partial) parts are chosen beside them.
        chunk = Signal(dw)
        m.d.sync += chunk.eq(one_hot_select(step[:steps], [
            masked[k * dw : (k + 1) * dw] for k in range(steps)]))
        last_count = len(masked) // 8 - (steps - 1) * lanes
        half = dw // 2
        halves = (Cat(chunk[:half], Const(0, dw - half)), Cat(Const(0, half), chunk[half:]))
        part_lo, part_hi = Signal(32, name="part_lo"), Signal(32, name="part_hi")
        state_last = crc32_parts(crc, chunk, last_count)[0]
        if last_count == lanes or steps == 1:
            for part, h in ((part_lo, halves[0]), (part_hi, halves[1])):
                m.d.sync += part.eq(crc32_parts(crc, h, last_count)[1])
            crc_next = state_last ^ part_lo ^ part_hi
        else:
            state_full = crc32_parts(crc, chunk, lanes)[0]
            chunk_last, part_last = Signal(), Signal()
            m.d.sync += [chunk_last.eq(step[steps - 1]), part_last.eq(chunk_last)]
            for part, h in ((part_lo, halves[0]), (part_hi, halves[1])):
                m.d.sync += part.eq(Mux(chunk_last, crc32_parts(crc, h, last_count)[1],
                                        crc32_parts(crc, h, lanes)[1]))
            crc_next = Mux(part_last, state_last, state_full) ^ part_lo ^ part_hi

        beats = -(-lengths[-1] // lanes)
        wire = frame
        if carrier is not None:
            # SRv6: the carrier goes on the wire after the ICRC took the peer's
            # address; net and ev are held from LATCH, so this is a mux on
            # flip-flops
            at = 8 * OFF_IPV6_DST
            field = IPV6.pack({"dst": carrier})[8 * IPV6.offset_of("dst") :]
            wire = Cat(frame[:at], Mux(fmt == EvFormat.SRV6, field, frame[at : at + 128]),
                       frame[at + 128 :])
        padded = Cat(wire, Const(0, beats * dw - len(frame)))
        # the last beat and its keep, per family
        last_beat = [-(-n // lanes) - 1 for n in lengths]
        last_keep = [(1 << (n - last_beat[i] * lanes)) - 1 for i, n in enumerate(lengths)]
        # the beat on m_axis, from a register: the next one is loaded as one is taken,
        # so no beat mux sits between the state and the output. ``next_beat`` is
        # one-hot on the word to load (set to word 0 in CRC, moved up at each load):
        # the word mux is an AND-OR on its flip-flops, not a decode of a beat count.
        out_word = Signal(dw)
        out_last = Signal()
        next_beat = Signal(beats)

        # One flip-flop per state: the enables of req, net, ipsum, frame and out_word
        # and req.ready / tvalid are flip-flops, not decodes of a state register.
        fsm = OneHotFSM(m, ("IDLE", "FETCH", "LATCH", "SUM", "BUILD", "CRC_WAIT", "CRC_PART",
                            "CRC", "ICRC", "SEND"), "IDLE")
        axis = self.m_axis
        # tdata, tlast and tkeep straight from the output registers (only tvalid is the
        # SEND state): their value outside SEND is not looked at
        m.d.comb += [
            axis.tdata.eq(out_word),
            axis.tlast.eq(out_last),
            axis.tuser.eq(ev_entry[self.ev_width :]),  # held from LATCH to the next request's
            axis.tkeep.eq(Mux(out_last, by_family(v6, last_keep[0], last_keep[-1]),
                              (1 << lanes) - 1)),
        ]
        with fsm.State("IDLE"):
            m.d.comb += self.req.ready.eq(1)
            with m.If(self.req.valid):
                m.d.sync += req.eq(self.req.payload)
                fsm.next = "FETCH"
        with fsm.State("FETCH"):
            fsm.next = "LATCH"
        # LATCH and BUILD each last one cycle after FETCH and SUM: the wide loads in them
        # are split into groups of at most 64 bits, each under its own copy of the
        # state's flip-flop: one net to all their enables is several ns of routing
        # (hw/pipeline.py, load_in_groups and state_copy)
        def copy_after(before, name):
            return lambda k: state_copy(m, fsm.st[before], 1, f"st_{name}_{k}")

        load_in_groups(m, [(net, self.net_data), (ev_entry, self.ev_data), (stamp, self.now_ns)],
                       copy_after("FETCH", "LATCH"))
        with fsm.State("LATCH"):
            fsm.next = "SUM"
        with fsm.State("SUM"):
            m.d.sync += ipsum.eq(own_sum + words[8] + words[9])
            fsm.next = "BUILD"
        load_in_groups(m, [(frame[: len(header)], header)], copy_after("SUM", "BUILD"))
        with fsm.State("BUILD"):
            m.d.sync += [crc.eq(crc_init), step.eq(1)]
            fsm.next = "CRC_WAIT"
        with fsm.State("CRC_WAIT"):
            fsm.next = "CRC_PART"
        with fsm.State("CRC_PART"):
            fsm.next = "CRC"
        with fsm.State("CRC"):
            m.d.sync += [crc.eq(crc_next), next_beat.eq(1)]
            with m.If(step[steps + 1]):
                fsm.next = "ICRC"
        # A word into the output register in ICRC (the first beat is all header: the
        # ICRC is in the last 4 of 74 bytes and a beat is at most 64, so it is loaded
        # while the ICRC goes into the frame) and at each beat taken in SEND.
        with m.If(fsm.st.ICRC | (fsm.st.SEND & axis.tready)):
            m.d.sync += [next_beat.eq(next_beat << 1),
                         out_word.eq(one_hot_select(next_beat, [
                             padded[k * dw : (k + 1) * dw] for k in range(beats)])),
                         out_last.eq(by_family(v6, next_beat[last_beat[0]],
                                               next_beat[last_beat[-1]]))]
        with fsm.State("ICRC"):
            if not self.ipv6:
                m.d.sync += frame[len(header) :].eq(~crc)
            else:
                with m.If(v6):
                    m.d.sync += frame[8 * (lengths[1] - 4) :].eq(~crc)
                with m.Else():
                    m.d.sync += frame[8 * (lengths[0] - 4) : 8 * lengths[0]].eq(~crc)
            fsm.next = "SEND"
        with fsm.State("SEND"):
            m.d.comb += axis.tvalid.eq(1)
            with m.If(axis.tready & out_last):
                fsm.next = "IDLE"
        return m


class ProbeReplyCheck(wiring.Component):
    """Passes the peer records for reliability, dropping the probe responses
    that do not answer an outstanding probe (a replay, or one nobody asked for).

    A probe request of round ``r`` carries ``probe_id = r << 8 | EV index``
    and the send time (``now_ns``) as its timestamp (``ProbeBuilder``). A
    PROBE_RESPONSE is passed on only when all of these hold, else dropped and
    counted by ``stale`` (no EV state changes):

    - probing is on (``probing``: ``probe_period`` != 0);
    - its round (``probe_id[8:32]``) is the round being sent or last sent
      (``round``, ``ReliabilityCore.probe_round``), or, while a round is being
      sent (``sweeping``), the one before it (still outstanding on the QPs not
      yet swept): the answer to the latest probe of its EV, and to the one
      before only while the round that replaces it is going out;
    - its timestamp lies between the start of the previous probe round
      (``tick``, the round's start strobe, at ``now_ns``) and now: an answer
      older than two probe periods, or from the future, matches no probe.

    Other records (ACK/NAK) pass unchanged. The EV index and value are checked
    by the core (the EV must be ASSUMED_BAD and its value the echoed EV).

    A passed probe response carries its round trip on ``rtt_ns``: ``now_ns`` one
    cycle after the record is taken, less its timestamp, saturating at
    ``RTT_NS_MAX`` (held with ``o.payload``; 0 for other records).

    Interface: ``i`` In / ``o`` Out (stream.Signature(ParsedHeader(sack_bits)));
    ``round`` In(24), ``sweeping`` In(1), ``probing`` In(1), ``tick`` In(1),
    ``now_ns`` In(64);
    ``stale`` Out(1), a one-cycle strobe per dropped response;
    ``rtt_ns`` Out(RTT_NS_BITS), valid with ``o``.
    Latency: 3 cycles from a record taken to ``o`` valid (the record and the
    round and time differences registered, then the decision). Throughput:
    one record per 4 cycles (the core takes at most one per 8).
    """

    def __init__(self, sack_bits=64):
        self.sack_bits = sack_bits
        super().__init__({
            "i": In(stream.Signature(ParsedHeader(sack_bits))),
            "o": Out(stream.Signature(ParsedHeader(sack_bits))),
            "round": In(24),
            "sweeping": In(1),
            "probing": In(1),
            "tick": In(1),
            "now_ns": In(64),
            "stale": Out(1),
            "rtt_ns": Out(RTT_NS_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        h = Signal(ParsedHeader(self.sack_bits))
        m.d.comb += self.o.payload.eq(h)
        # the start times of the current and the previous round
        start_cur, start_prev = Signal(64), Signal(64)
        with m.If(self.tick):
            m.d.sync += [start_cur.eq(self.now_ns), start_prev.eq(start_cur)]
        is_probe = Signal()
        round_now = Signal()
        round_prev = Signal()
        age = Signal(65)  # now - timestamp: bit 64 set if the timestamp is in the future
        since = Signal(65)  # timestamp - start of the previous round: bit 64 set if before
        probing = Signal()
        ok = Signal()
        rnd = h.probe.probe_id[8:32]
        fsm = OneHotFSM(m, ("IDLE", "DIFF", "DECIDE", "SEND"), "IDLE", name="check_st")
        m.d.comb += self.o.valid.eq(fsm.st.SEND)
        with fsm.State("IDLE"):
            m.d.comb += self.i.ready.eq(1)
            with m.If(self.i.valid):
                m.d.sync += h.eq(self.i.payload)
                fsm.next = "DIFF"
        with fsm.State("DIFF"):
            m.d.sync += [
                is_probe.eq(h.bth.opcode == Opcode.PROBE_RESP),
                round_now.eq(rnd == self.round),
                round_prev.eq(self.sweeping & (rnd == (self.round - 1)[:24])),
                age.eq(Cat(self.now_ns, Const(0, 1)) - Cat(h.probe.timestamp, Const(0, 1))),
                since.eq(Cat(h.probe.timestamp, Const(0, 1)) - Cat(start_prev, Const(0, 1))),
                probing.eq(self.probing),
            ]
            fsm.next = "DECIDE"
        with fsm.State("DECIDE"):
            m.d.comb += ok.eq(probing & (round_now | round_prev) & ~age[64] & ~since[64])
            m.d.sync += self.rtt_ns.eq(Mux(~is_probe, 0, Mux(age[RTT_NS_BITS:] != 0,
                                                             RTT_NS_MAX, age)))
            with m.If(~is_probe | ok):
                fsm.next = "SEND"
            with m.Else():
                m.d.comb += self.stale.eq(1)
                fsm.next = "IDLE"
        with fsm.State("SEND"):
            with m.If(self.o.ready):
                fsm.next = "IDLE"
        return m

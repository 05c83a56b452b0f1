"""Validation of parsed frames: QP lookup, peer check, memory-region check."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from hw.headers import PATH_MTU, Opcode
from hw.pipeline import OneHotFSM, load_in_groups, state_copy
from hw.protocol import ECN_CE
from hw.reliability.layouts import NAK_INVALID_REQUEST, NAK_REMOTE_ACCESS

from .first_fail import first_failing
from .layouts import ParsedHeader, QpConfig, QpState, ReqKind, WindowReq
from .mr_table import MrLookupSignature

__all__ = ["RxValidator", "VALIDATOR_COUNTERS"]

VALIDATOR_COUNTERS = (
    "peer_frames",  # ACK/NAK/probe responses handed to peer_ack
    "probe_requests",
    "bad_qpn",  # DestQP >= num_qps
    "not_for_us",  # IP destination is not ours
    "qp_state",  # QP not in RTR or RTS
    "bad_source",  # IP source is not the QP's bound peer
    "bad_rkey",  # no valid writable region with this R_Key
    "bad_bounds",  # the packet's (or its message's) bytes not inside the region
    "bad_length",  # payload against the path MTU (NAK 0x61)
    "bad_reth",  # RETH DMA length inconsistent with the opcode and payload (NAK 0x61)
    "bad_pd",  # the region belongs to another protection domain than the QP (NAK 0x62)
)


class RxValidator(wiring.Component):
    """Checks every parsed frame against the QP and MR tables.

    Interface
    ---------
    ``hdr``       In(stream.Signature(ParsedHeader(sack_bits, plane_bits))): from the
                  parser; its plane goes on in ``req.plane`` (not to ``peer_ack``).
    ``req``       Out(stream.Signature(WindowReq)): one per frame that is not
                  a peer frame or that has a payload to drain (see below).
    ``peer_ack``  Out(stream.Signature(ParsedHeader(sack_bits))): ACK/NAK
                  frames and probe responses (the requester's business),
                  untouched; they take no QP check here.
    ``cfg_addr`` / ``cfg``: 1-cycle lookup into the QP configuration.
    ``mr_lookup`` Out(``MrLookupSignature``): the region table (``MrTable``),
                  given the frame's R_Key in LOOKUP, answering in CHECK.
    ``own_ip``    In(32); with ``ipv6`` (a build parameter) also ``own_ip6``
                  In(128), and the records and the configuration carry
                  128-bit addresses and their family (``v6``, ``peer_v6``).
    ``counters``  Out: a one-cycle strobe per ``VALIDATOR_COUNTERS`` event.

    Checks, in order (the first failure decides; all are silent drops except
    the length checks, which NAK with *invalid request* 0x61, and the MR
    checks, which NAK with *remote access error* 0x62, as RoCE does; the
    rules are docs/rx.md's "Validation"):

    1. ``bad_qpn``: BTH DestQP >= num_qps.
    2. ``not_for_us``: IPv4 destination != ``own_ip`` (over IPv6: != ``own_ip6``).
    3. ``qp_state``: the QP is not in RTR or RTS.
    4. ``bad_source``: IP source != the QP's ``peer_ip``, or the frame's
       family not the peer's (``peer_v6``, with ``ipv6``). The BTH of a
       request carries only the destination QPN, so the peer is bound by its
       IP address; ACKs go to the QP's configured ``peer_qpn``.
    5. a trimmed WRITE goes on as ``TRIM``, a probe request as ``PROBE``;
    6. ``bad_length`` (0x61): the payload against the QP's path MTU
       (``cfg.mtu``, a ``hw.headers.PATH_MTU`` code): above it, or a FIRST or
       MIDDLE payload other than it;
    7. ``bad_reth`` (0x61): the RETH DMA length ``L`` against the opcode and
       payload (ONLY: ``L`` = payload; FIRST: ``L`` > MTU; MIDDLE: ``L`` >
       2 MTU; LAST: ``L`` > MTU, payload = ``L`` mod MTU and not 0; ``L``
       <= 2^31);
    8. ``bad_rkey``: the entry the R_Key names (its bits 23:8,
       ``hw.rx.mr_table.rkey_index``) is past the table, not VALID and WRITE,
       or holds another R_Key;
    9. ``bad_pd``: that entry's ``pd`` is not the QP's;
    10. ``bad_bounds``: not ``base <= lo`` and ``hi <= base + length``, with
       ``[lo, hi)`` = ``[VA - back, VA + msg_len)``: ``msg_len`` = ``L`` for
       FIRST (its message), the payload length otherwise; ``back`` = ``L`` -
       payload for LAST (its message's earlier packets), 0 otherwise
       (computed without overflow: ``VA - base`` must not borrow, must be at
       least ``back`` and ``(VA - base) + msg_len <= length``). With ``addr_width`` < 64 the
       write must also lie below 2^addr_width: a VA with a bit set at or
       above ``addr_width`` (it would alias into low memory once cut to a DMA
       address) or ``VA + payload_len > 2^addr_width`` (it would wrap) fails
       here too, whatever the region. ``req.va`` is the VA's low
       ``addr_width`` bits.

    Latency: 4 cycles from ``hdr`` valid to ``req`` valid (the checks are
    registered in three stages: the MR table's read and the header's tests
    (compares with the five MTUs' constants, ``L`` - payload); QP checks, the
    MTU's tests selected by the QP's code, the MR's hit, the PD compare and
    the bounds subtractions; decision, with the bounds' two compares as carry chains
    side by side). Throughput:
    one frame per 4 cycles, the next header being taken once ``req`` is;
    the window engine takes at least 5 cycles per request, so this costs
    no throughput.
    """

    def __init__(self, *, num_qps=16, num_mrs=16, sack_bits=64, addr_width=64, plane_bits=0,
                 ipv6=False):
        self.num_qps, self.num_mrs, self.sack_bits = num_qps, num_mrs, sack_bits
        self.addr_width, self.plane_bits = addr_width, plane_bits
        self.ipv6 = ipv6
        self.qp_bits = exact_log2(num_qps)
        super().__init__(
            {
                "hdr": In(stream.Signature(ParsedHeader(sack_bits, plane_bits, ipv6))),
                "req": Out(stream.Signature(WindowReq(self.qp_bits, addr_width, plane_bits,
                                                      ipv6))),
                "peer_ack": Out(stream.Signature(ParsedHeader(sack_bits, ipv6=ipv6))),
                "cfg_addr": Out(self.qp_bits),
                "cfg": In(QpConfig(addr_width, ipv6)),
                "mr_lookup": Out(MrLookupSignature(addr_width)),
                "own_ip": In(32),
                **({"own_ip6": In(128)} if ipv6 else {}),
                "counters": Out(data.StructLayout({n: unsigned(1) for n in VALIDATOR_COUNTERS})),
            }
        )

    def elaborate(self, platform):
        m = Module()
        cnt = self.counters
        h = Signal(ParsedHeader(self.sack_bits, self.plane_bits, self.ipv6))
        m.d.comb += self.cfg_addr.eq(h.bth.dqpn[: self.qp_bits])

        aw = self.addr_width
        req = Signal(WindowReq(self.qp_bits, aw, self.plane_bits, self.ipv6))
        req_valid = Signal()
        m.d.comb += [self.req.valid.eq(req_valid), self.req.payload.eq(req)]
        with m.If(self.req.ready):
            m.d.sync += req_valid.eq(0)
        peer_valid = Signal()  # the PEER state
        # reliability's record: the header without the plane (its last field)
        m.d.comb += [self.peer_ack.valid.eq(peer_valid),
                     self.peer_ack.payload.as_value().eq(
                         h.as_value()[: len(self.peer_ack.payload.as_value())])]

        # The checks are spread over the cycles of a frame, each stage from
        # registers: LOOKUP reads the MR and evaluates what depends on the
        # header alone; CHECK (the QP configuration and the MR have arrived)
        # the QP checks, the MR's and the two halves of the bounds check;
        # DECIDE the bounds check and the first failing check.
        op = h.bth.opcode

        # LOOKUP: the MR table reads the entry the R_Key names (``h`` holds
        # from LOOKUP on, so the entry and its hit hold in CHECK).
        m.d.comb += self.mr_lookup.rkey.eq(h.reth.rkey)
        mr = self.mr_lookup.entry
        mr_hit = Signal()  # registered in CHECK, for DECIDE
        is_peer = Signal()
        bad_qpn = Signal()
        not_for_us = Signal()
        is_probe = Signal()
        is_write = Signal()
        has_payload = Signal()
        # the write leaves the addr_width-bit space; below 64 bits only (at 64
        # the VA is a whole DMA address, as it always was)
        outside = Signal()
        # The packet's length rules against each path MTU (selected in CHECK,
        # once the QP's MTU has arrived), from the header alone: compares with
        # constants, no carry chain. ``p`` payload length, ``L`` RETH DMA length.
        p, L = h.payload_len, h.reth.dma_len
        sizes = [PATH_MTU[c] for c in sorted(PATH_MTU)]
        is_first, is_middle, is_last, is_only = Signal(), Signal(), Signal(), Signal()
        p_eq = Signal(len(sizes))  # p == MTU
        p_gt = Signal(len(sizes))  # p > MTU
        p_mod = Signal(len(sizes))  # p == L modulo MTU (the low bits agree)
        l_gt = Signal(len(sizes) + 1)  # L > MTU; bit len(sizes): L > 2 x the largest
        p_eq_l, p_zero, l_big = Signal(), Signal(), Signal()
        # the extent of the packet's message that the bounds check covers:
        # [VA - back, VA + msg_len) (docs/rx.md): a FIRST packet's message
        # starts at its VA and is L long; a LAST packet's ends with it, and
        # its L - p bytes before it are the message's earlier packets
        msg_len = Signal(32)
        back = Signal(32)

        def above(x, n):  # x > n, n a power of two
            j = exact_log2(n)
            return x[j + 1:].any() | (x[j] & x[:j].any())

        lookup_values = [
            is_first.eq(op == Opcode.WRITE_FIRST),
            is_middle.eq(op == Opcode.WRITE_MIDDLE),
            is_last.eq((op == Opcode.WRITE_LAST) | (op == Opcode.WRITE_LAST_IMM)),
            is_only.eq((op == Opcode.WRITE_ONLY) | (op == Opcode.WRITE_ONLY_IMM)),
            p_eq.eq(Cat(*[p == n for n in sizes])),
            p_gt.eq(Cat(*[above(p, n) for n in sizes])),
            p_mod.eq(Cat(*[p[:exact_log2(n)] == L[:exact_log2(n)] for n in sizes])),
            l_gt.eq(Cat(*[above(L, n) for n in sizes + [2 * sizes[-1]]])),
            p_eq_l.eq(L == p),
            p_zero.eq(p == 0),
            l_big.eq(above(L, 1 << 31)),
            msg_len.eq(Mux(op == Opcode.WRITE_FIRST, L, p)),
            back.eq(Mux((op == Opcode.WRITE_LAST) | (op == Opcode.WRITE_LAST_IMM), L - p, 0)),
            is_peer.eq((op == Opcode.ACKNOWLEDGE) | (op == Opcode.PROBE_RESP)),
            bad_qpn.eq(h.bth.dqpn >= self.num_qps),
            not_for_us.eq(Mux(h.v6, h.ip_dst != self.own_ip6, h.ip_dst != self.own_ip)
                          if self.ipv6 else h.ip_dst != self.own_ip),
            is_probe.eq(op == Opcode.PROBE_REQ),
            is_write.eq(Cat(*[op == o for o in Opcode.WRITES]).any()),
            has_payload.eq(h.payload_len != 0),
        ]
        if aw < 64:
            # [VA, VA + payload_len) below 2^aw: no VA bit at or above aw, and
            # VA's low bits plus the length at most 2^aw
            end = Signal(aw + 1)
            m.d.comb += end.eq(h.reth.va[:aw] + h.payload_len)
            lookup_values.append(outside.eq(h.reth.va[aw:].any()
                                            | (end[aw] & end[:aw].any())))

        # CHECK: the QP checks and the two halves of the bounds check.
        # [VA, VA + len) is inside [base, base + length) when VA - base does
        # not borrow and VA - base <= length - len (which does not borrow).
        # Only VA's low aw bits take part: a VA above them is ``outside``.
        offset = Signal(aw + 1)  # VA - base
        room = Signal(33)  # length - msg_len
        pre_kind = Signal(ReqKind)
        pre_cnt = Signal(data.StructLayout({n: unsigned(1) for n in VALIDATOR_COUNTERS}))
        to_bounds = Signal()  # the bounds check decides
        bad_state = Signal()
        bad_source = Signal()
        bad_length = Signal()
        bad_reth = Signal()
        bad_pd = Signal()
        state = self.cfg.state
        # the length rules at the QP's path MTU (PATH_MTU's codes; any other
        # code takes no data: every WRITE fails bad_length)
        m_valid, m_eq, m_gt, m_mod, m_lgt, m_lgt2 = (
            Signal(name=f"mtu_{n}") for n in ("valid", "eq", "gt", "mod", "lgt", "lgt2"))
        with m.Switch(self.cfg.mtu):
            for k, code in enumerate(sorted(PATH_MTU)):
                with m.Case(code):
                    m.d.comb += [m_valid.eq(1), m_eq.eq(p_eq[k]), m_gt.eq(p_gt[k]),
                                 m_mod.eq(p_mod[k]), m_lgt.eq(l_gt[k]), m_lgt2.eq(l_gt[k + 1])]
        check_values = [
            offset.eq(h.reth.va[:aw] - mr.base),
            room.eq(mr.length - msg_len),
            bad_state.eq((state != QpState.RTR) & (state != QpState.RTS)),
            # an IPv4 frame's addresses are zero above their 32 bits, as the peer's
            bad_source.eq((h.ip_src != self.cfg.peer_ip)
                          | ((h.v6 != self.cfg.peer_v6) if self.ipv6 else 0)),
            # FIRST and MIDDLE carry exactly the MTU, no packet more
            bad_length.eq(~m_valid | m_gt | ((is_first | is_middle) & ~m_eq)),
            # the RETH DMA length against the packet's place in its message:
            # at most 2^31; ONLY carries it all; FIRST is followed by more
            # (L > MTU), MIDDLE by more again (L > 2 MTU); LAST carries the
            # rest after whole-MTU packets (L > MTU, 1 <= p, p = L mod MTU)
            bad_reth.eq(l_big | (is_only & ~p_eq_l) | (is_first & ~m_lgt)
                        | (is_middle & ~m_lgt2) | (is_last & (~m_lgt | ~m_mod | p_zero))),
            bad_pd.eq(mr.pd != self.cfg.pd),
            mr_hit.eq(self.mr_lookup.hit),
        ]

        def classify():
            # The checks in priority order; an outcome is its check failing
            # and none before it (first_failing: flat, at most ten flip-flops,
            # two LUT levels; docs/timing.md#rx-validator).
            kind = Signal(ReqKind)
            # every strobe but bad_bounds, which is decided a stage later
            c = Signal(data.StructLayout(
                {n: unsigned(1) for n in VALIDATOR_COUNTERS if n != "bad_bounds"}))
            tests = (
                ("peer_frames", is_peer),
                ("bad_qpn", bad_qpn),
                ("not_for_us", not_for_us),
                ("qp_state", bad_state),
                ("bad_source", bad_source),
                ("probe_requests", is_probe),
                ("not_write", ~is_write),  # the parser passes no other opcode; dropped
                ("trimmed", h.trimmed),
                ("bad_length", bad_length),
                ("bad_reth", bad_reth),
                ("bad_rkey", ~mr_hit),
                ("bad_pd", bad_pd),
            )
            first = first_failing(m, tests)
            reach = Signal()
            m.d.comb += reach.eq(~Cat(*(t for _, t in tests)).any())
            for name in ("peer_frames", "bad_qpn", "not_for_us", "qp_state", "bad_source",
                         "probe_requests", "bad_length", "bad_reth", "bad_rkey", "bad_pd"):
                m.d.comb += getattr(c, name).eq(first[name])
            invalid = first["bad_length"] | first["bad_reth"]  # NAK 0x61, else 0x62
            nak = invalid | first["bad_rkey"] | first["bad_pd"]
            # the outcomes are exclusive: the kind is an OR of their codes
            m.d.comb += kind.eq(Mux(first["probe_requests"], ReqKind.PROBE, 0)
                                | Mux(first["trimmed"], ReqKind.TRIM, 0)
                                | Mux(nak, ReqKind.NAK, 0)
                                | Mux(reach, ReqKind.DATA, 0)
                                | Mux(~(first["probe_requests"] | first["trimmed"]
                                        | nak | reach), ReqKind.DROP, 0))
            return kind, c, invalid

        # DECIDE: the outcome of every check but the bounds, from registers.
        kind_c, cnt_c, invalid_c = classify()
        # to_bounds is classify's reach (no check before the bounds failed)
        # with the header and MR tests' part registered in CHECK, so the
        # bad_bounds strobe is not behind the whole priority chain
        # (docs/timing.md#rx-validator).
        reach_lookup = Signal()
        check_values.append(reach_lookup.eq(
            ~(is_peer | bad_qpn | not_for_us | is_probe | ~is_write | h.trimmed
              | ~self.mr_lookup.hit)))
        m.d.comb += [pre_kind.eq(kind_c),
                     to_bounds.eq(reach_lookup & ~bad_state & ~bad_source & ~bad_length
                                  & ~bad_reth & ~bad_pd)]
        m.d.comb += [getattr(pre_cnt, n).eq(getattr(cnt_c, n))
                     for n in VALIDATOR_COUNTERS if n != "bad_bounds"]

        # DECIDE
        # offset <= room as the borrow of room - offset (a carry chain only;
        # yosys builds "<=" with a zero test over the difference's bits).
        over = Signal(33)
        m.d.comb += over.eq(Cat(room[:32], Const(0, 1)) - Cat(offset[:32], Const(0, 1)))
        # and VA - base >= back (the message starts inside), likewise
        under = Signal(33)
        m.d.comb += under.eq(Cat(offset[:32], Const(0, 1)) - Cat(back, Const(0, 1)))
        in_bounds = (~offset[aw] & ~room[32] & (offset[32:aw] == 0) & ~over[32] & ~under[32]
                     & ~outside)

        # One flip-flop per state (hw.pipeline.OneHotFSM). A peer frame waits
        # in PEER while it is offered on ``peer_ack`` (``h`` is its payload),
        # so IDLE means that ``h`` is free: the header register (several
        # hundred bits) follows the input in every IDLE cycle and holds from
        # LOOKUP on. Its enables are copies of the IDLE flip-flop, each on at
        # most 64 bits, not one LUT net to ~450 clock enables
        # (docs/timing.md#rx-validator).
        fsm = OneHotFSM(m, ("IDLE", "LOOKUP", "CHECK", "DECIDE", "PEER"), "IDLE",
                        name="validate")
        m.d.comb += peer_valid.eq(fsm.st.PEER)
        take = Signal()  # IDLE -> LOOKUP
        # the transitions into IDLE, from DECIDE and PEER
        to_idle = Signal()
        m.d.comb += to_idle.eq((fsm.st.DECIDE & ~is_peer) | (fsm.st.PEER & self.peer_ack.ready))
        free = Signal()
        m.d.comb += free.eq(fsm.st.IDLE & ~req_valid)

        load_in_groups(m, [(h, self.hdr.payload)],
                       lambda k: state_copy(m, to_idle, take, f"h_load{k}", init=1))
        with fsm.State("IDLE"):
            # Wait until both outputs are free, so a frame never waits half-sent.
            m.d.comb += [self.hdr.ready.eq(free), take.eq(self.hdr.valid & free)]
            with m.If(take):
                fsm.next = "LOOKUP"
        with fsm.State("LOOKUP"):
            m.d.sync += lookup_values
            fsm.next = "CHECK"
        with fsm.State("CHECK"):
            m.d.sync += check_values
            fsm.next = "DECIDE"
        with fsm.State("DECIDE"):
            m.d.sync += [
                req.syndrome.eq(Mux(invalid_c, NAK_INVALID_REQUEST, NAK_REMOTE_ACCESS)),
                req.qp.eq(h.bth.dqpn[: self.qp_bits]),
                req.psn.eq(h.bth.psn),
                req.opcode.eq(op),
                req.ackreq.eq(h.bth.ackreq),
                req.ce.eq(h.ecn == ECN_CE),
                req.va.eq(h.reth.va),
                req.payload_len.eq(h.payload_len),
                req.dma_len.eq(h.reth.dma_len),
                req.imm.eq(h.imm),
                req.ev.eq(h.ev),
                *([req.flow.eq(h.flow)] if self.ipv6 else []),
                *([req.plane.eq(h.plane)] if self.plane_bits else []),
                req.mac.eq(h.eth_src),
                req.probe_id.eq(h.probe.probe_id),
                req.probe_ev.eq(h.probe.ev),
                req.timestamp.eq(h.probe.timestamp),
            ]
            m.d.comb += cnt.eq(pre_cnt)
            with m.If(to_bounds):
                with m.If(in_bounds):
                    m.d.sync += req.kind.eq(ReqKind.DATA)
                with m.Else():
                    m.d.comb += cnt.bad_bounds.eq(1)
                    m.d.sync += req.kind.eq(ReqKind.NAK)
            with m.Else():
                m.d.sync += req.kind.eq(pre_kind)
            # A peer frame only needs the window engine to drain its payload.
            m.d.sync += req_valid.eq(~is_peer | has_payload)
            with m.If(is_peer):
                fsm.next = "PEER"
            with m.Else():
                fsm.next = "IDLE"
        with fsm.State("PEER"):
            with m.If(self.peer_ack.ready):
                fsm.next = "IDLE"
        return m


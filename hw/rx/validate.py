"""Validation of parsed frames: QP lookup, peer check, memory-region check."""

from amaranth.hdl import Cat, Module, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from hw.headers import Opcode

from .layouts import QpConfig, QpState, ReqKind, WindowReq
from .parser import ParsedHeader

__all__ = ["MrEntry", "RxValidator", "VALIDATOR_COUNTERS", "MR_ACCESS_VALID", "MR_ACCESS_WRITE"]

NAK_REMOTE_ACCESS = 0x62
ECN_CE = 0b11
MR_ACCESS_VALID = 1 << 0
MR_ACCESS_WRITE = 1 << 1

VALIDATOR_COUNTERS = (
    "peer_frames",  # ACK/NAK/probe responses handed to peer_ack
    "probe_requests",
    "bad_qpn",  # DestQP >= num_qps
    "not_for_us",  # IP destination is not ours
    "qp_state",  # QP not in RTR or RTS
    "bad_source",  # IP source is not the QP's bound peer
    "bad_rkey",  # no valid writable region with this R_Key
    "bad_bounds",  # [VA, VA + length) not inside the region
)


class MrEntry(data.StructLayout):
    """One memory region as registered by the host."""

    def __init__(self):
        super().__init__(
            {
                "base": unsigned(64),
                "length": unsigned(32),
                "rkey": unsigned(32),
                "access": unsigned(8),
            }
        )


class RxValidator(wiring.Component):
    """Checks every parsed frame against the QP and MR tables.

    Interface
    ---------
    ``hdr``       In(stream.Signature(ParsedHeader(sack_bits))): from the parser.
    ``req``       Out(stream.Signature(WindowReq)): one per frame that is not
                  a peer frame or that has a payload to drain (see below).
    ``peer_ack``  Out(stream.Signature(ParsedHeader(sack_bits))): ACK/NAK
                  frames and probe responses (the requester's business),
                  untouched; they take no QP check here.
    ``cfg_addr`` / ``cfg``: 1-cycle lookup into the QP configuration.
    ``mrs``       In(ArrayLayout(MrEntry, num_mrs)): the region table.
    ``own_ip``    In(32).
    ``counters``  Out: a one-cycle strobe per ``VALIDATOR_COUNTERS`` event.

    Checks, in order (the first failure decides; all are silent drops except
    the MR checks, which NAK with *remote access error* 0x62 as RoCE does):

    1. ``bad_qpn``: BTH DestQP >= num_qps.
    2. ``not_for_us``: IPv4 destination != ``own_ip``.
    3. ``qp_state``: the QP is not in RTR or RTS.
    4. ``bad_source``: IPv4 source != the QP's ``peer_ip``. The BTH of a
       request carries only the destination QPN, so the peer is bound by its
       IP address; ACKs go to the QP's configured ``peer_qpn``.
    5. a trimmed WRITE goes on as ``TRIM``, a probe request as ``PROBE``;
    6. ``bad_rkey``: no MR entry with ``access`` VALID and WRITE and this
       R_Key (the lowest-numbered match is used);
    7. ``bad_bounds``: not ``base <= VA`` and ``VA + payload_len <= base + length``
       (computed without overflow: ``VA - base`` must not borrow and
       ``(VA - base) + payload_len <= length``).

    Latency: 3 cycles from ``hdr`` valid to ``req`` valid. Throughput: one
    frame per 3 cycles.
    """

    def __init__(self, *, num_qps=16, num_mrs=16, sack_bits=64):
        self.num_qps, self.num_mrs, self.sack_bits = num_qps, num_mrs, sack_bits
        self.qp_bits = exact_log2(num_qps)
        super().__init__(
            {
                "hdr": In(stream.Signature(ParsedHeader(sack_bits))),
                "req": Out(stream.Signature(WindowReq(self.qp_bits))),
                "peer_ack": Out(stream.Signature(ParsedHeader(sack_bits))),
                "cfg_addr": Out(self.qp_bits),
                "cfg": In(QpConfig()),
                "mrs": In(data.ArrayLayout(MrEntry(), num_mrs)),
                "own_ip": In(32),
                "counters": Out(data.StructLayout({n: unsigned(1) for n in VALIDATOR_COUNTERS})),
            }
        )

    def elaborate(self, platform):
        m = Module()
        cnt = self.counters
        h = Signal(ParsedHeader(self.sack_bits))
        m.d.comb += self.cfg_addr.eq(h.bth.dqpn[: self.qp_bits])

        req = Signal(WindowReq(self.qp_bits))
        req_valid = Signal()
        m.d.comb += [self.req.valid.eq(req_valid), self.req.payload.eq(req)]
        with m.If(self.req.ready):
            m.d.sync += req_valid.eq(0)
        peer_valid = Signal()
        m.d.comb += [self.peer_ack.valid.eq(peer_valid), self.peer_ack.payload.eq(h)]
        with m.If(self.peer_ack.ready):
            m.d.sync += peer_valid.eq(0)

        # MR match: the lowest-numbered valid writable entry with this R_Key.
        mr_hit = Signal()
        mr = Signal(MrEntry())
        for i in reversed(range(self.num_mrs)):
            e = self.mrs[i]
            ok = (e.rkey == h.reth.rkey) & e.access[0] & e.access[1]
            with m.If(ok):
                m.d.comb += [mr_hit.eq(1), mr.eq(e)]
        offset = Signal(65)
        m.d.comb += offset.eq(h.reth.va - mr.base)
        in_bounds = ~offset[64] & (offset[:64] + h.payload_len <= mr.length)

        op = h.bth.opcode
        is_write = Cat(*[op == o for o in Opcode.WRITES]).any()
        is_peer = (op == Opcode.ACKNOWLEDGE) | (op == Opcode.PROBE_RESP)

        with m.FSM(name="validate"):
            with m.State("IDLE"):
                # Wait until both outputs are free, so a frame never waits half-sent.
                m.d.comb += self.hdr.ready.eq(~req_valid & ~peer_valid)
                with m.If(self.hdr.valid & ~req_valid & ~peer_valid):
                    m.d.sync += h.eq(self.hdr.payload)
                    m.next = "LOOKUP"
            with m.State("LOOKUP"):
                m.next = "DECIDE"
            with m.State("DECIDE"):
                kind = Signal(ReqKind)
                m.d.comb += kind.eq(ReqKind.DROP)
                m.d.sync += [
                    req.syndrome.eq(NAK_REMOTE_ACCESS),
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
                    req.mac.eq(h.eth_src),
                    req.probe_id.eq(h.probe.probe_id),
                    req.probe_ev.eq(h.probe.ev),
                    req.timestamp.eq(h.probe.timestamp),
                ]
                state = self.cfg.state
                with m.If(is_peer):
                    m.d.comb += cnt.peer_frames.eq(1)
                    m.d.sync += peer_valid.eq(1)
                with m.Elif(h.bth.dqpn >= self.num_qps):
                    m.d.comb += cnt.bad_qpn.eq(1)
                with m.Elif(h.ip_dst != self.own_ip):
                    m.d.comb += cnt.not_for_us.eq(1)
                with m.Elif((state != QpState.RTR) & (state != QpState.RTS)):
                    m.d.comb += cnt.qp_state.eq(1)
                with m.Elif(h.ip_src != self.cfg.peer_ip):
                    m.d.comb += cnt.bad_source.eq(1)
                with m.Elif(op == Opcode.PROBE_REQ):
                    m.d.comb += [cnt.probe_requests.eq(1), kind.eq(ReqKind.PROBE)]
                with m.Elif(~is_write):
                    pass  # the parser passes no other opcode; drop defensively
                with m.Elif(h.trimmed):
                    m.d.comb += kind.eq(ReqKind.TRIM)
                with m.Elif(~mr_hit):
                    m.d.comb += [cnt.bad_rkey.eq(1), kind.eq(ReqKind.NAK)]
                with m.Elif(~in_bounds):
                    m.d.comb += [cnt.bad_bounds.eq(1), kind.eq(ReqKind.NAK)]
                with m.Else():
                    m.d.comb += kind.eq(ReqKind.DATA)
                m.d.sync += req.kind.eq(kind)
                # A peer frame only needs the window engine to drain its payload.
                m.d.sync += req_valid.eq(~is_peer | (h.payload_len != 0))
                m.next = "IDLE"
        return m


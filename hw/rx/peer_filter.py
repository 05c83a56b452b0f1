"""The peer-frame filter: ACK/NAK and probe-response records reach reliability
only when they are addressed to us and come from the QP's bound peer."""

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from hw.headers import Opcode
from hw.pipeline import OneHotFSM, load_in_groups, state_copy
from hw.protocol import PSN_BITS

from .first_fail import first_failing
from .layouts import ParsedHeader, QpConfig, QpState

__all__ = ["PEER_FILTER_COUNTERS", "RxPeerFilter"]

# In check order: a record fails the first check that is true of it.
PEER_FILTER_COUNTERS = (
    "peer_bad_qpn",  # BTH DestQP >= num_qps
    "peer_not_for_us",  # IP destination is not OWN_IP (over IPv6: OWN_IP6)
    "peer_bad_mac",  # Ethernet destination is not OWN_MAC
    "peer_qp_state",  # the QP is not in RTS
    "peer_bad_source",  # IP source is not the QP's peer address, or not its family
    "peer_bad_sack",  # an ACK/NAK whose sack_base is not cum_psn + 1
)


class RxPeerFilter(wiring.Component):
    """Drops the peer frames (ACKNOWLEDGE, PROBE_RESPONSE) that are not from
    the bound peer of a QP in RTS, and counts each reason.

    Interface
    ---------
    ``i``        In(stream.Signature(ParsedHeader(sack_bits))): the validator's
                 ``peer_ack`` (peer frames only, untouched).
    ``o``        Out(stream.Signature(ParsedHeader(sack_bits))): the records
                 that pass, unchanged, for reliability.
    ``cfg_addr`` / ``cfg``: a 1-cycle lookup into the QP configuration (only
                 ``state`` and ``peer_ip`` are read).
    ``own_ip``, ``own_mac``: In, the NIC's addresses (RX ``OWN_IP``, ``OWN_MAC``);
                 with ``ipv6`` (a build parameter) also ``own_ip6``, and the
                 records and the configuration carry 128-bit addresses and
                 their family (``v6``, ``peer_v6``).
    ``counters`` Out: a one-cycle strobe per ``PEER_FILTER_COUNTERS`` drop.

    Checks, in order (the first failure decides; every failure is a silent
    drop counted by its own strobe):

    1. ``peer_bad_qpn``: BTH DestQP >= ``num_qps``.
    2. ``peer_not_for_us``: IPv4 destination != ``own_ip`` (over IPv6:
       != ``own_ip6``).
    3. ``peer_bad_mac``: Ethernet destination != ``own_mac``.
    4. ``peer_qp_state``: the QP's ``state`` is not RTS (only a requester
       takes ACKs and probe answers).
    5. ``peer_bad_source``: IP source != the QP's ``peer_ip``, or the frame's
       family not the peer's (``peer_v6``, with ``ipv6``). No header of
       these frames names the sender's QPN, so the peer is bound by its IP
       address, as for data frames.
    6. ``peer_bad_sack``: an ACKNOWLEDGE whose SACK ``sack_base`` is not
       ``cum_psn + 1`` (mod 2^24; docs/protocol.md: such an ACK is ignored).

    Latency: 3 cycles from a record taken to ``o`` valid (LOOKUP: the
    header-only checks registered, the configuration read; CHECK: the QP
    checks and the SACK check registered; DECIDE: the first failure).
    Throughput: one record per 4 cycles, the next taken once ``o`` has been
    (the validator needs 4 cycles per frame too). Every check is one compare
    from registers (the SACK check's cum_psn + 1 registered in LOOKUP,
    compared in CHECK).
    """

    def __init__(self, *, num_qps=16, sack_bits=64, addr_width=64, ipv6=False):
        self.num_qps, self.sack_bits = num_qps, sack_bits
        self.ipv6 = ipv6
        self.qp_bits = exact_log2(num_qps)
        super().__init__(
            {
                "i": In(stream.Signature(ParsedHeader(sack_bits, ipv6=ipv6))),
                "o": Out(stream.Signature(ParsedHeader(sack_bits, ipv6=ipv6))),
                "cfg_addr": Out(self.qp_bits),
                "cfg": In(QpConfig(addr_width, ipv6)),
                "own_ip": In(32),
                **({"own_ip6": In(128)} if ipv6 else {}),
                "own_mac": In(48),
                "counters": Out(data.StructLayout(
                    {n: unsigned(1) for n in PEER_FILTER_COUNTERS})),
            }
        )

    def elaborate(self, platform):
        m = Module()
        h = Signal(ParsedHeader(self.sack_bits, ipv6=self.ipv6))
        m.d.comb += [self.cfg_addr.eq(h.bth.dqpn[: self.qp_bits]), self.o.payload.eq(h)]
        fail = {n: Signal(name=f"fail_{n}") for n in PEER_FILTER_COUNTERS}
        is_ack = h.bth.opcode == Opcode.ACKNOWLEDGE
        # an IPv4 frame's addresses are zero above their 32 bits, as the peer's
        not_for_us = h.ip_dst != self.own_ip
        bad_source = h.ip_src != self.cfg.peer_ip
        if self.ipv6:
            not_for_us = Mux(h.v6, h.ip_dst != self.own_ip6, h.ip_dst != self.own_ip)
            bad_source = bad_source | (h.v6 != self.cfg.peer_v6)
        # the SACK check in two registered steps: cum_psn + 1 (a carry chain)
        # in LOOKUP, its compare with sack_base in CHECK
        sack_next = Signal(PSN_BITS)
        header_checks = [
            fail["peer_bad_qpn"].eq(h.bth.dqpn >= self.num_qps),
            fail["peer_not_for_us"].eq(not_for_us),
            fail["peer_bad_mac"].eq(h.eth_dst != self.own_mac),
            sack_next.eq(h.sack.cum_psn + 1),
        ]
        qp_checks = [
            fail["peer_qp_state"].eq(self.cfg.state != QpState.RTS),
            fail["peer_bad_source"].eq(bad_source),
            fail["peer_bad_sack"].eq(is_ack & (h.sack.sack_base != sack_next)),
        ]

        fsm = OneHotFSM(m, ("IDLE", "LOOKUP", "CHECK", "DECIDE", "SEND"), "IDLE",
                        name="filter_st")
        m.d.comb += self.o.valid.eq(fsm.st.SEND)
        # The header register follows the input in every IDLE cycle and holds
        # from LOOKUP on; its enables are copies of IDLE's flip-flop, each on at
        # most 64 bits (as the validator's), not one net over all its bits.
        take = Signal()
        failed = Signal()
        m.d.comb += failed.eq(Cat(*fail.values()).any())
        to_idle = (fsm.st.DECIDE & failed) | (fsm.st.SEND & self.o.ready)

        load_in_groups(m, [(h, self.i.payload)],
                       lambda k: state_copy(m, to_idle, take, f"h_load{k}", init=1))
        with fsm.State("IDLE"):
            m.d.comb += [self.i.ready.eq(1), take.eq(self.i.valid)]
            with m.If(take):
                fsm.next = "LOOKUP"
        with fsm.State("LOOKUP"):  # cfg_addr from h: the configuration arrives in CHECK
            m.d.sync += header_checks
            fsm.next = "CHECK"
        with fsm.State("CHECK"):
            m.d.sync += qp_checks
            fsm.next = "DECIDE"
        with fsm.State("DECIDE"):
            first = first_failing(m, [(n, fail[n]) for n in PEER_FILTER_COUNTERS])
            m.d.comb += [getattr(self.counters, n).eq(first[n]) for n in PEER_FILTER_COUNTERS]
            with m.If(failed):
                fsm.next = "IDLE"
            with m.Else():
                fsm.next = "SEND"
        with fsm.State("SEND"):
            with m.If(self.o.ready):
                fsm.next = "IDLE"
        return m

"""The PSN window's ACK reader: the receive bitmap from the expected PSN on,
and the ACK, NAK or probe-response job built from registers (``AckReader``);
and the engine's states that read the bitmap and send the ACK
(``ack_states``)."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from hw.protocol import PSN_BITS, SVC_TIME_MAX, SVC_TIME_UNIT_NS, Syndrome

from .layouts import AckJob, QpConfig, QpRxState, WindowReq

__all__ = ["AckReader", "ack_states"]


class AckReader(wiring.Component):
    """The job register of ``RxPsnWindow``'s ``ack`` stream and the bitmap it
    carries.

    The service time (``svc_time``, docs/protocol.md) is ``now - svc_from``
    cycles (the time since the window took the newest packet placed) times
    ``ns_per_cycle``, in units of ``SVC_TIME_UNIT_NS`` rounded down, saturating
    at ``SVC_TIME_MAX``; the difference is registered every cycle, so the job
    has it as of a cycle before ``send``.

    Interface
    ---------
    ``word``       In(sack_bits): the bitmap word the window's memory reads.
    ``load_first`` In(1): ``word`` is the word of the expected PSN (the
                   engine's ACK1): registered as the first word.
    ``load_second`` In(1): ``word`` is the word after it (ACK2).
    ``qp_state``   In(QpRxState): the QP's row (``epsn``, ``msn``, ``ece``,
                   ``ce_count``, ``ev``, ``mac``, ``svc_from``).
    ``now``        In(24): the window's time in cycles (``TimerScan.now``).
    ``cfg``        In(QpConfig): the QP's configuration (``peer_qpn``, ``peer_ip``;
                   with ``ipv6``, ``peer_v6``: the job's family).
    ``request``    In(WindowReq): the request being handled (a NAK's PSN, a
                   probe's ``probe_id``, ``probe_ev``, ``timestamp``).
    ``probe``      In(1): the job is a probe response (the engine's PROBE state).
    ``syndrome``   In(8): the AETH syndrome of the ACK or NAK.
    ``is_ack``     Out(1): ``syndrome`` is an ACK, registered (a cycle behind).
    ``send``       In(1): set ``ack.valid`` next cycle (only while it is clear).
    ``ack``        Out(stream.Signature(AckJob)): the job, a register.

    The job register follows what it would send (every field from its
    source, whatever the kind of job: the builder reads a probe's fields only
    for a probe and the ACK fields only for an ACK or NAK) while ``ack.valid``
    is clear, and holds from the cycle ``send`` sets it until ``ack.ready``:
    the hold flag is its only enable. An ACK carries ``cum_psn = epsn - 1``
    as its PSN, a NAK the request's PSN. The bitmap is ``sack_bits`` bits of
    the two words from ``epsn``'s bit on: the words are shifted by whole
    bytes towards ``epsn`` into a register in every cycle, then by the last
    0..7 bits into the job.

    Latency: the job sent by ``send`` carries the words loaded at least two
    cycles before it (one to register the word, one for the byte shift) and
    ``is_ack`` of the cycle before. Throughput: one job per two cycles (the
    consumer empties the register).
    """

    def __init__(self, *, sack_bits=64, qp_bits=4, addr_width=64, plane_bits=0,
                 ns_per_cycle=8, ipv6=False):
        self.sack_bits, self.plane_bits = sack_bits, plane_bits
        self.ipv6 = ipv6
        self.ns_per_cycle = ns_per_cycle
        super().__init__({
            "word": In(sack_bits),
            "load_first": In(1),
            "load_second": In(1),
            "qp_state": In(QpRxState(plane_bits, ipv6)),
            "now": In(PSN_BITS),
            "cfg": In(QpConfig(addr_width, ipv6)),
            "request": In(WindowReq(qp_bits, addr_width, plane_bits, ipv6)),
            "probe": In(1),
            "syndrome": In(8),
            "is_ack": Out(1),
            "send": In(1),
            "ack": Out(stream.Signature(AckJob(sack_bits, plane_bits, ipv6))),
        })

    def elaborate(self, platform):
        m = Module()
        W = self.sack_bits
        word_bits = exact_log2(W)
        qs, cfg, rq = self.qp_state, self.cfg, self.request

        m.d.sync += self.is_ack.eq(self.syndrome == Syndrome.ACK)

        ack_valid = Signal()
        ack_job = Signal(AckJob(W, self.plane_bits, self.ipv6), reset_less=True)
        m.d.comb += [self.ack.valid.eq(ack_valid), self.ack.payload.eq(ack_job)]
        with m.If(self.ack.ready):
            m.d.sync += ack_valid.eq(0)
        with m.If(self.send):
            m.d.sync += ack_valid.eq(1)

        first_word = Signal(W)  # the bitmap word of epsn
        second_word = Signal(W)  # the next one
        with m.If(self.load_first):
            m.d.sync += first_word.eq(self.word)
        with m.If(self.load_second):
            m.d.sync += second_word.eq(self.word)

        # The two words from epsn's byte on, registered in every cycle (the
        # words and epsn hold from the engine's ACK_SH until the ACK is sent):
        # the selection of each bitmap bit in two registered steps.
        byte_shifted = Signal(W + 7)
        words = Cat(first_word, second_word)
        for k in reversed(range(3, word_bits)):
            keep = W + (1 << k) - 1  # the bits later stages still need
            words = Mux(qs.epsn[k], words[1 << k:], words)[:keep]
        m.d.sync += byte_shifted.eq(words)
        bitmap = byte_shifted
        for k in reversed(range(3)):
            keep = W + (1 << k) - 1  # the bits later stages still need
            bitmap = Mux(qs.epsn[k], bitmap[1 << k:], bitmap)[:keep]

        # The service time: the cycles since svc_from, registered, then in units.
        svc_cycles = Signal(PSN_BITS)
        m.d.sync += svc_cycles.eq(self.now - qs.svc_from)
        unit_shift = exact_log2(SVC_TIME_UNIT_NS)
        # the cycles that saturate: (cycles x ns_per_cycle) >> unit_shift > SVC_TIME_MAX
        svc_sat = -(-((SVC_TIME_MAX + 1) << unit_shift) // self.ns_per_cycle)
        svc_units = (svc_cycles[: svc_sat.bit_length()] * self.ns_per_cycle)[unit_shift:]
        svc = Mux(svc_cycles >= svc_sat, SVC_TIME_MAX, svc_units)

        # Every field loads the same value whatever the job: ``probe`` is only
        # the job's probe bit, not a select of its data (a select by it gives
        # the job bits synchronous resets driven by one LUT; docs/timing.md#rx-window).
        ack_next = Signal(AckJob(W, self.plane_bits, self.ipv6))
        m.d.comb += [
            ack_next.dqpn.eq(cfg.peer_qpn),
            ack_next.ev.eq(qs.ev),
            *([ack_next.plane.eq(qs.plane)] if self.plane_bits else []),
            ack_next.dst_mac.eq(qs.mac),
            ack_next.dst_ip.eq(cfg.peer_ip),
            *([ack_next.v6.eq(cfg.peer_v6), ack_next.flow.eq(qs.flow)] if self.ipv6 else []),
            ack_next.probe.eq(self.probe),
            ack_next.probe_id.eq(rq.probe_id),
            ack_next.probe_ev.eq(rq.probe_ev),
            ack_next.timestamp.eq(rq.timestamp),
            ack_next.syndrome.eq(self.syndrome),
            ack_next.psn.eq(Mux(self.is_ack, qs.epsn - 1, rq.psn)),
            ack_next.msn.eq(qs.msn),
            ack_next.cum_psn.eq(qs.epsn - 1),
            ack_next.sack_base.eq(qs.epsn),
            ack_next.bitmap.eq(bitmap[:W]),
            ack_next.ece.eq(qs.ece),
            ack_next.ce_count.eq(qs.ce_count),
            ack_next.svc_time.eq(svc),
        ]
        with m.If(~ack_valid):
            m.d.sync += ack_job.eq(ack_next)
        return m


def ack_states(c):
    """The ACK/NAK of ``RxPsnWindow``'s state machine (a ``WindowContext``
    ``c``): read the two bitmap words from the expected PSN on (the states
    that go to ACK0, CHECK_X, COALESCE and SCAN_X, address the first: they
    have the QP's final epsn and read no bitmap word), register both (ACK1,
    ACK2), shift them by whole bytes towards epsn in ACK_SH (``AckReader``),
    and send the ACK from registers in ACK3, which resets the QP's
    coalescing state (no logic after the block RAM, and the selection of
    each bitmap bit in two registered steps). ``AckReader.probe`` is the
    PROBE state."""
    m, fsm, cnt, qs, ack_reader = c.m, c.fsm, c.cnt, c.qs, c.ack_reader
    with fsm.State("ACK0"):
        m.d.sync += c.bm_word.eq(c.bm_word + 1)
        fsm.next = "ACK1"
    with fsm.State("ACK1"):
        m.d.comb += ack_reader.load_first.eq(1)
        fsm.next = "ACK2"
    with fsm.State("ACK2"):
        m.d.comb += ack_reader.load_second.eq(1)
        fsm.next = "ACK_SH"
    with fsm.State("ACK_SH"):
        fsm.next = "ACK3"
    with fsm.State("ACK3"):
        with m.If(~c.win.ack.valid):
            # (ack_job follows the ACK while ack_valid is clear)
            m.d.comb += [
                cnt.acks_sent.eq(ack_reader.is_ack),
                cnt.naks_sent.eq(~ack_reader.is_ack),
                ack_reader.send.eq(1),
            ]
            m.d.sync += [
                qs.unacked.eq(0),
                qs.ece.eq(0),
                qs.ce_count.eq(0),
                qs.armed.eq(0),
            ]
            fsm.next = "WRITEBACK"

    m.d.comb += ack_reader.probe.eq(c.st.PROBE)

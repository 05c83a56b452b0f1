"""The per-QP reliability state machine: one event (sent packet, ACK/NAK, probe answer,
timer expiry, controller command, probe round) at a time, on a working copy of the QP's
record. See ``ReliabilityCore``."""

from amaranth.hdl import Module
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.rx.parser import ParsedHeader

from . import (
    core_ack,
    core_cc,
    core_cmd,
    core_datapath,
    core_flush,
    core_intake,
    core_io,
    core_probe,
    core_state,
    core_walk,
)
from .cc_defaults import svc_scale
from .completion import CompletionRequest
from .core_ctx import CoreContext
from .core_layouts import (
    CORE_COUNTERS,
    GEN_BITS,
    RTT_SHIFT,
    CcEvent,
    Command,
    EvEvent,
    GlobalParams,
    RelConfig,
    qp_record,
)
from .deadline import TimerArm
from .layouts import (
    AckUpdate,
    CwndUpdate,
    EvUpdate,
    QpStateUpdate,
    RetxRequest,
    SentRecord,
    SqProducer,
)
from .probe import ProbeRequest
from .registers import RTT_NS_BITS
from .timer import DEADLINE_BITS

__all__ = [
    "Command",
    "EvEvent",
    "GlobalParams",
    "RelConfig",
    "ReliabilityCore",
    "RTT_SHIFT",
    "qp_record",
]


class ReliabilityCore(wiring.Component):
    """Per-QP ACK/SACK/NAK processing, retransmit decisions, EV health and window.

    One event is processed at a time: the QP's record is read from a memory into a
    working copy (2 cycles), updated over one or more cycles, and written back (1 cycle).
    Per-PSN work walks the PSNs concerned at 2 cycles per PSN (read the per-PSN entry,
    act; 3 in the SACK loss walk), after 1 cycle to register the first pick; see
    docs/reliability.md for the cycle counts of each event (an ACK of one PSN: 25).
    Pipelined for 125 MHz on the ECP5: the state machine is one-hot, long
    computations are split over states or registered a cycle early (see the comments
    at each; the RTT sample is measured 2 cycles before the window step; the record's
    write enables and USE's actions by walk kind are flip-flops set the cycle before,
    at no cycle's cost; a sent record's per-PSN entries are written the cycle after
    SENT, from registers), a timer
    write reaches ``timer_arm`` 4 cycles after the write-back (with
    the deadline of the write-back cycle), an EV update and an EV event reach their
    FIFOs the cycle after the step that makes them, counter strobes come the cycle after
    their event (the ACK count the cycle after WALK, a sent record's dropped in SENT 2 cycles
    after SENT), and the core waits for 3 free entries in an output FIFO (registered)
    rather than 1 (a command or probe answer that pushes waits for it before it acts).
    The next input to take is chosen by priority a cycle before the core takes it (the
    record's read address is a register): an input that becomes valid while the core
    is idle is taken 1 cycle later, one that waits while an event is processed as soon
    as the core is done (a `sent` record dropped for its QP: 1 idle cycle after it).

    Sub-components, each in a file of its own with its own test (the state machine
    strobes them; their registers are the core's): ``EventPicker`` (intake.py: the
    next input and its QP), ``SentPsns`` (sent_psns.py: the per-PSN entries),
    ``SackAlign`` (sack_align.py: the SACK bitmap and NAK PSN against the new una),
    ``CwndUnit`` (cwnd.py: the window step), ``ProbeSweep`` (probe_sweep.py: the
    probe rounds), ``EvEvidence`` (ev_evidence.py: what a loss does to each EV),
    ``TimerDeadline`` (deadline.py: the timer writes' deadlines).

    ``elaborate`` calls builders, one per state family or datapath part, in a fixed
    order (the order of the statements is part of the netlist: a later assignment
    wins), sharing signals through a ``CoreContext`` (core_ctx.py): the output FIFOs,
    counters and memories (core_io.py), the working copy and the one-hot state
    machine of 34 states (core_state.py), the datapath around it (core_datapath.py),
    then the states: intake and write back (core_intake.py), ACK/SACK/NAK
    (core_ack.py), the per-PSN walk and USE's actions (core_walk.py), the window
    (core_cc.py), probes (core_probe.py), timeout and flush (core_flush.py),
    controller commands (core_cmd.py).

    Interface (every output stream is a FIFO; the core waits for room, never drops, except
    the EV event queue, which counts what it cannot hold in ``events_lost``):

    ``sent``          In: TX's record of each data packet on the wire.
    ``sq_producer``   In: the send queue's producer index of a QP, from every doorbell
                      write (``ready`` is always 1; kept in a per-QP memory), so that
                      an ERROR completes the WQEs TX has not begun too; a doorbell also
                      marks its QP (one pending bit per QP, taken last by priority), and
                      a QP in ERROR then completes the WQEs posted since FLUSHED.
    ``peer_ack``      In: parsed ACK / NAK / probe response frames from RX.
    ``probe_rtt_ns``  In(RTT_NS_BITS): a probe response's round trip, valid with
                      ``peer_ack`` (``ProbeReplyCheck.rtt_ns``); it goes into the EV
                      event the answer makes.
    ``expired``       In: timer reports ``{qpn, gen}`` (``RetransmitTimers.expired``).
    ``cmd``           In: controller commands (QP state, EV state) from the CSR block.
    ``probe_tick``    In(1): start a probe round over all QPs (registered: the round
                      starts a cycle later).
    ``timer_arm``     Out: writes to ``RetransmitTimers.arm``.
    ``retx``, ``ack_update``, ``ev_update``, ``cwnd_update``, ``qp_state_update``: to TX.
    ``cc_event``      Out(stream(CcEvent)): each ACK, timeout and RTS entry of a QP, for
                      its congestion control (``NsccPath``), pushed with the write-back.
    ``cpl``           Out: completion requests for ``CompletionWriter``.
    ``probe_req``     Out: probe requests for ``ProbeBuilder``.
    ``event``         Out: EV transitions for the controller's event queue.
    ``rel_addr``/``rel_data``, ``evv_addr``/``evv_data``: synchronous read ports on the
                      per-QP ``RelConfig`` and the EV values.
    ``rec_addr``/``rec_data``: a read port on the QP records for the CSR block.
    ``params``        In(GlobalParams); ``now``: the timer's cycle counter.
                      ``clk_freq_hz`` converts an ACK's service time (64 ns units) into the
                      RTT sample's units (``svc_units``, hw/reliability/cc_defaults.py).
    ``counter_strobes`` Out: one flip-flop per event counter (``CORE_COUNTERS``),
                      high for one cycle per event; ``ReliabilityEngine``'s
                      counter bank counts them.
    ``probe_round``   Out(24): the number of the probe round being sent or last sent
                      (every probe of a round carries it as ``probe_id`` >> 8; it
                      moves one cycle after ``probe_tick``), for ``ProbeReplyCheck``.
    ``probe_sweeping`` Out(1): a probe round is being sent (from the cycle after
                      ``probe_tick`` to the last QP's probe requests queued): QPs not
                      yet swept still have the round before outstanding.
    """

    def __init__(self, *, num_qps, evs_per_qp, sack_bits, window, timeout_unit,
                 clk_freq_hz=125_000_000):
        self.num_qps, self.evs, self.sack_bits = num_qps, evs_per_qp, sack_bits
        self.window, self.timeout_unit = window, timeout_unit
        self.svc_scale = svc_scale(clk_freq_hz)
        self.rec_layout = qp_record(window, evs_per_qp)
        super().__init__(
            {
                "sent": In(stream.Signature(SentRecord)),
                "sq_producer": In(stream.Signature(SqProducer)),
                "peer_ack": In(stream.Signature(ParsedHeader(sack_bits))),
                "probe_rtt_ns": In(RTT_NS_BITS),
                "expired": In(stream.Signature(data.StructLayout(
                    {"qpn": range(num_qps), "gen": GEN_BITS}))),
                "cmd": In(stream.Signature(Command(num_qps, evs_per_qp))),
                "probe_tick": In(1),
                "timer_arm": Out(stream.Signature(TimerArm(num_qps, GEN_BITS))),
                "retx": Out(stream.Signature(RetxRequest)),
                "ack_update": Out(stream.Signature(AckUpdate)),
                "ev_update": Out(stream.Signature(EvUpdate)),
                "cwnd_update": Out(stream.Signature(CwndUpdate)),
                "cc_event": Out(stream.Signature(CcEvent(num_qps, window))),
                "qp_state_update": Out(stream.Signature(QpStateUpdate)),
                "cpl": Out(stream.Signature(CompletionRequest(num_qps))),
                "probe_req": Out(stream.Signature(ProbeRequest(num_qps, evs_per_qp))),
                "event": Out(stream.Signature(EvEvent)),
                "event_count": Out(range(33)),
                "rel_addr": Out(range(num_qps)),
                "rel_data": In(RelConfig),
                "evv_addr": Out(range(num_qps * evs_per_qp)),
                "evv_data": In(16),
                "rec_addr": In(range(num_qps)),
                "rec_data": Out(self.rec_layout),
                "params": In(GlobalParams),
                "now": In(DEADLINE_BITS),
                "counter_strobes": Out(data.StructLayout({n: 1 for n in CORE_COUNTERS})),
                "probe_round": Out(24),
                "probe_sweeping": Out(1),
            }
        )

    def elaborate(self, platform):
        m = Module()
        W, E, nq = self.window, self.evs, self.num_qps
        wbits = (W - 1).bit_length()
        ebits = (E - 1).bit_length()
        P = self.params
        Rec = self.rec_layout
        ctx = CoreContext(core=self, m=m, W=W, E=E, nq=nq, wbits=wbits, ebits=ebits, P=P,
                          Rec=Rec)
        core_io.fifos_counters_memories(ctx)
        core_state.working_state(ctx)
        core_io.pushes_and_room(ctx)
        core_state.state_machine(ctx)
        core_datapath.datapath(ctx)
        core_intake.intake_states(ctx)
        core_ack.ack_states(ctx)
        core_walk.walk_states(ctx)
        core_ack.sack_nak_states(ctx)
        core_cc.cwnd_states(ctx)
        core_probe.probe_states(ctx)
        core_flush.timeout_flush_states(ctx)
        core_cmd.command_states(ctx)
        core_probe.sweep_states(ctx)
        core_intake.write_back_states(ctx)
        core_walk.sent_and_use_actions(ctx)
        core_cmd.command_entry(ctx)
        core_cc.cc_events(ctx)
        m.d.comb += self.event_count.eq(ctx.f_evq.level)
        return m

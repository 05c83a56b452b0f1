"""The per-QP reliability state machine: one event (sent packet, ACK/NAK, probe answer,
timer expiry, controller command, probe round) at a time, on a working copy of the QP's
record. See ``ReliabilityCore``."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.bits import (
    all_below,
    below_const,
    bit_at,
    greater_than_const,
    index_select,
    lowest_index,
    one_hot_select,
    onehot,
    popcount,
)
from hw.headers import Opcode
from hw.pipeline import BlockRamFIFO, OneHotFSM, load_in_groups, saturating_increment
from hw.rx.parser import ParsedHeader

from .completion import CompletionRequest
from .cwnd import CwndUnit
from .deadline import TimerArm, TimerDeadline
from .ev_evidence import EvEvidence
from .intake import EventPicker
from .layouts import (
    AETH_ACK,
    NAK_INVALID_REQUEST,
    NAK_REMOTE_ACCESS,
    NAK_TRIMMED,
    AckUpdate,
    CqeStatus,
    CwndUpdate,
    EvState,
    EvUpdate,
    QpState,
    QpStateUpdate,
    RetxReason,
    RetxRequest,
    SentRecord,
    SqProducer,
)
from .probe import ProbeRequest
from .probe_sweep import ProbeSweep
from .registers import COUNTER_NAMES
from .sack_align import SackAlign
from .sent_psns import SentPsns
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

RTT_SHIFT = 4  # RTT timestamps count 16-cycle units, 16 bits wide
EXP_FOREVER = 25
GEN_BITS = 4
CORE_COUNTERS = tuple(n for n in COUNTER_NAMES
                      if n not in ("cmds_lost", "cqes", "dma_errors", "probes_stale"))

RelConfig = data.StructLayout(
    {"t": 5, "linear_cnt": 3, "exp_cnt": 5, "_r": 3, "ev_min_active": 8, "sack_threshold": 8}
)
GlobalParams = data.StructLayout(
    {
        "ev_loss_threshold": 4,
        "cwnd_min": 16,
        "cwnd_max": 16,
        "cwnd_init": 16,
        "cwnd_ai": 16,
        "cwnd_ai_fast": 16,
        "cwnd_md_shift": 4,
        "cwnd_trim_dec": 16,
        "target_rtt": 16,
    }
)


def Command(num_qps, evs_per_qp):
    # ev = 0: set the QP's state; ev = 1: set EV ev_index's state (GOOD or DENIED)
    return data.StructLayout(
        {"ev": 1, "qpn": range(num_qps), "ev_index": range(evs_per_qp), "state": 3}
    )


EvEvent = data.StructLayout({"qpn": 24, "ev_index": 8, "old": 2, "new": 2, "drops": 16})


def qp_record(window, evs):
    return data.StructLayout(
        {
            "state": 3,
            "fresh": 1,  # RTS and nothing sent yet: the first sent PSN sets una/nxt
            "armed": 1,
            "timer_gen": GEN_BITS,
            "retries": 5,
            "md_active": 1,
            "delay_high": 1,
            "una": 24,
            "nxt": 24,
            "md_recover": 24,
            "wqe_cpl": 16,
            "wqe_sent": 16,
            # TX refused WQE wqe_sent - 1 (unknown opcode): once nothing is in flight it
            # completes LOC_QP_OP_ERR, the rest FLUSHED, and the QP goes to ERROR
            "op_err": 1,
            "cwnd": 16,
            "cwnd_acc": 24,
            "sacked": window,
            "fast_done": window,
            "ev_state": data.ArrayLayout(2, evs),
            "ev_loss": data.ArrayLayout(4, evs),
            "ev_drops": data.ArrayLayout(16, evs),
        }
    )


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
    FIFOs the cycle after the step that makes them, counters move the cycle after
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

    Interface (every output stream is a FIFO; the core waits for room, never drops, except
    the EV event queue, which counts what it cannot hold in ``events_lost``):

    ``sent``          In: TX's record of each data packet on the wire.
    ``sq_producer``   In: the send queue's producer index of a QP, from every doorbell
                      write (``ready`` is always 1; kept in a per-QP memory), so that
                      an ERROR completes the WQEs TX has not begun too; a doorbell also
                      marks its QP (one pending bit per QP, taken last by priority), and
                      a QP in ERROR then completes the WQEs posted since FLUSHED.
    ``peer_ack``      In: parsed ACK / NAK / probe response frames from RX.
    ``expired``       In: timer reports ``{qpn, gen}`` (``RetransmitTimers.expired``).
    ``cmd``           In: controller commands (QP state, EV state) from the CSR block.
    ``probe_tick``    In(1): start a probe round over all QPs (registered: the round
                      starts a cycle later).
    ``timer_arm``     Out: writes to ``RetransmitTimers.arm``.
    ``retx``, ``ack_update``, ``ev_update``, ``cwnd_update``, ``qp_state_update``: to TX.
    ``cpl``           Out: completion requests for ``CompletionWriter``.
    ``probe_req``     Out: probe requests for ``ProbeBuilder``.
    ``event``         Out: EV transitions for the controller's event queue.
    ``rel_addr``/``rel_data``, ``evv_addr``/``evv_data``: synchronous read ports on the
                      per-QP ``RelConfig`` and the EV values.
    ``rec_addr``/``rec_data``: a read port on the QP records for the CSR block.
    ``params``        In(GlobalParams); ``now``: the timer's cycle counter.
    ``counters``      Out: saturating 32-bit event counters (``CORE_COUNTERS``).
    ``probe_round``   Out(24): the number of the probe round being sent or last sent
                      (every probe of a round carries it as ``probe_id`` >> 8; it
                      moves one cycle after ``probe_tick``), for ``ProbeReplyCheck``.
    ``probe_sweeping`` Out(1): a probe round is being sent (from the cycle after
                      ``probe_tick`` to the last QP's probe requests queued): QPs not
                      yet swept still have the round before outstanding.
    """

    def __init__(self, *, num_qps, evs_per_qp, sack_bits, window, timeout_unit):
        self.num_qps, self.evs, self.sack_bits = num_qps, evs_per_qp, sack_bits
        self.window, self.timeout_unit = window, timeout_unit
        self.rec_layout = qp_record(window, evs_per_qp)
        super().__init__(
            {
                "sent": In(stream.Signature(SentRecord)),
                "sq_producer": In(stream.Signature(SqProducer)),
                "peer_ack": In(stream.Signature(ParsedHeader(sack_bits))),
                "expired": In(stream.Signature(data.StructLayout(
                    {"qpn": range(num_qps), "gen": GEN_BITS}))),
                "cmd": In(stream.Signature(Command(num_qps, evs_per_qp))),
                "probe_tick": In(1),
                "timer_arm": Out(stream.Signature(TimerArm(num_qps, GEN_BITS))),
                "retx": Out(stream.Signature(RetxRequest)),
                "ack_update": Out(stream.Signature(AckUpdate)),
                "ev_update": Out(stream.Signature(EvUpdate)),
                "cwnd_update": Out(stream.Signature(CwndUpdate)),
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
                "counters": Out(data.StructLayout({n: 32 for n in CORE_COUNTERS})),
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

        # --- output FIFOs -------------------------------------------------------
        # The wider or deeper ones in block RAM (hw/pipeline.py BlockRamFIFO).
        def out_fifo(name, port, depth, ram_style="distributed"):
            fifo = BlockRamFIFO(width=len(port.payload.as_value()), depth=depth,
                                ram_style=ram_style)
            m.submodules[name] = fifo
            m.d.comb += [
                port.payload.eq(fifo.r_data),
                port.valid.eq(fifo.r_rdy),
                fifo.r_en.eq(port.ready),
            ]
            return fifo

        f_retx = out_fifo("retx_fifo", self.retx, 16, "block")
        f_ack = out_fifo("ack_fifo", self.ack_update, 4, "block")
        f_evu = out_fifo("ev_update_fifo", self.ev_update, 8)
        f_cwnd = out_fifo("cwnd_fifo", self.cwnd_update, 4)
        f_qps = out_fifo("qp_state_fifo", self.qp_state_update, 4)
        f_cpl = out_fifo("cpl_fifo", self.cpl, 16)
        f_probe = out_fifo("probe_fifo", self.probe_req, 8)
        f_evq = out_fifo("event_fifo", self.event, 32, "block")

        # --- counters -------------------------------------------------------------
        # the event's strobe is registered first: a counter moves the cycle after its
        # event (its increment and saturation check then start from flip-flops)
        pulse = {n: Signal(name=f"cnt_{n}") for n in CORE_COUNTERS}
        for n in CORE_COUNTERS:
            c = self.counters[n]
            pulse_q = Signal(name=f"cnt_{n}_q")
            m.d.sync += pulse_q.eq(pulse[n])
            saturating_increment(m, c, pulse_q)

        def count(name):
            m.d.comb += pulse[name].eq(1)

        # --- memories ---------------------------------------------------------------
        # The record memory's write enable per column group of at most 64 bits
        # (granularity; the row padded to a multiple of it), each group's enable a
        # flip-flop of its own (rec_wen, below): at few QPs the memory is flip-flops,
        # whose row enables are those bits ANDed with the row's address decode.
        rec_groups = -(-Rec.size // 64)
        rec_gran = -(-Rec.size // rec_groups)
        m.submodules.rec_mem = rec_mem = Memory(
            shape=rec_groups * rec_gran, depth=nq, init=[])
        rec_rd = rec_mem.read_port()
        rec_csr = rec_mem.read_port()
        rec_wr = rec_mem.write_port(granularity=rec_gran)
        rec_rd_data = Signal(Rec)
        m.d.comb += [rec_csr.addr.eq(self.rec_addr),
                     self.rec_data.eq(rec_csr.data[: Rec.size]),
                     rec_rd_data.eq(rec_rd.data[: Rec.size])]

        # per QP: the send queue's producer index (WQEs the host has posted) and
        # whether a doorbell has set it since reset; read with the record
        m.submodules.sq_pi_mem = sq_pi_mem = Memory(shape=17, depth=nq, init=[])
        sq_pi_rd, sq_pi_wr = sq_pi_mem.read_port(), sq_pi_mem.write_port()
        sqp = self.sq_producer.payload
        m.d.comb += [
            self.sq_producer.ready.eq(1),
            sq_pi_wr.addr.eq(sqp.qpn), sq_pi_wr.data.eq(Cat(sqp.producer, Const(1, 1))),
            sq_pi_wr.en.eq(self.sq_producer.valid & (sqp.qpn < nq)),
            sq_pi_rd.addr.eq(rec_rd.addr),
        ]

        # --- working state ------------------------------------------------------------
        # reset to the record CLEAR writes, so that the write port always takes ``out``
        cur = Signal(Rec, init={"fresh": 1})
        cfg = Signal(RelConfig)
        q = Signal(range(nq))
        una0 = Signal(24)
        cwnd0 = Signal(16)
        state0 = Signal(3)
        # the end of a flush: the producer index, but never before wqe_sent (also the
        # first WQE index of a QP entering RTS). Over two cycles: LOAD registers the
        # producer index (sq_pi) and the distances of it and of wqe_sent from wqe_cpl
        # (pi_ahead, sent_ahead: subtractions behind the read registers), the cycle
        # after it registers their compare and the choice (sq_end, then registered
        # every cycle from them and wqe_sent): valid from the second cycle after LOAD
        # on, which its readers (FLUSH, CMD) are
        sq_end = Signal(16)
        sq_pi = Signal(17)
        pi_ahead = Signal(16)
        sent_ahead = Signal(16)

        K_SENT, K_ACK, K_PROBE, K_TMO, K_CMD, K_SWEEP, K_DB = range(7)
        kind = Signal(3)
        s = Signal(SentRecord)
        a_trim = Signal()  # syndrome NAK TRIMMED
        # syndrome NAK invalid request or remote access error: the ACK's part is
        # taken, then the QP goes to ERROR (a_inv: invalid request)
        a_fatal = Signal()
        a_inv = Signal()
        a_use = Signal()  # an ACK or NAK TRIMMED of a valid QP
        a_probe = Signal()  # a probe response of a valid QP
        a_psn = Signal(24)
        a_cum = Signal(24)  # cum_psn
        a_cum_next = Signal(24)  # cum_psn + 1, registered every cycle (valid from ACK_IN on)
        m.d.sync += a_cum_next.eq(a_cum + 1)
        a_base = Signal(24)
        a_ece = Signal()
        a_bitmap = Signal(self.sack_bits)
        a_probe_id = Signal(32)
        a_probe_ev = Signal(16)
        t_gen = Signal(GEN_BITS)
        cmd = Signal(Command(nq, E))

        # the walk's kind, one-hot (bit W_ADV .. W_TMO): each kind's actions sit under
        # their bit alone (an If per bit, not a Switch, whose cases would decode all
        # four bits by priority), so the selects in front of cur are ANDs of flip-flops
        W_ADV, W_SACK, W_LOSS, W_TMO = range(4)
        walk_kind = Signal(4)
        walk_mask = Signal(W)
        walk_psn = Signal(24)  # the PSN in use, una + its offset (set in PICK)
        blamed = Signal(E)
        adv = Signal(range(W + 1))
        adv_raw = Signal(24)  # cum_psn + 1 - una
        # the loss walk's test (LCNT): at least sack_threshold SACKed PSNs above the
        # hole, compared on the low bits of the threshold that can hold a count of W (a
        # threshold with a higher bit set, thr_high, registered every cycle from cfg, is
        # never met)
        loss_hole = Signal()
        thr_high = Signal()
        m.d.sync += thr_high.eq(cfg.sack_threshold[(W + 1).bit_length():] != 0)
        # the sent record against the record as read (LOAD): a new PSN to record (RTS,
        # not a retransmission, fresh or psn == nxt with nxt - una < window; fresh: una
        # = nxt = psn), psn - una (sent_d) and psn != una (sent_moves: una moves).
        # nxt - una is tested on its low bits, those infl takes (a subtraction of that
        # width, no zero test of the bits above): in RTS, not fresh, it is at most the
        # window (una never passes nxt, an ACK beyond nxt is dropped; nxt moves only
        # from below una + window; RTS is entered with una = nxt), so the bits above
        # are 0.
        sent_new = Signal()
        sent_moves = Signal()
        sent_operr = Signal()  # a record of a WQE TX refused, for a QP in RTS
        # a timer report against the record as read (LOAD): stale (not RTS, disarmed or
        # another generation), or the retry that exceeds the limit
        tmo_stale = Signal()
        tmo_exhaust = Signal()
        # what FINAL reports to TX, registered every cycle (see FINAL)
        una_chg = Signal()
        cwnd_chg = Signal()
        state_chg = Signal()
        sent_d = Signal(24)
        newly = Signal(range(W + 1))
        rtt_ts = Signal(16)
        rtt_valid = Signal()
        progress = Signal()
        nak_cut = Signal()
        want_arm = Signal()
        want_disarm = Signal()
        flush_status = Signal(8)
        # probe rounds: the round's number, the QP to sweep next (hw/reliability/
        # probe_sweep.py)
        m.submodules.sweep = sweep = ProbeSweep(num_qps=nq, evs=E)
        sweep_pending = sweep.pending
        m.d.comb += [sweep.tick.eq(self.probe_tick),
                     self.probe_round.eq(sweep.round), self.probe_sweeping.eq(sweep.sweeping)]

        now = self.now
        now_ts = now[RTT_SHIFT : RTT_SHIFT + 16]

        # --- derived from the working copy ---------------------------------------------
        # nxt - una: set in LOAD, kept up to date when una advances
        infl = Signal(range(W + 1))
        infl_mask = Signal(W)
        m.d.comb += infl_mask.eq(all_below(infl, W))

        # per PSN: the EV it last went out on, whether that was a retransmission, whether
        # it ends its WQE and its send time (hw/reliability/sent_psns.py)
        m.submodules.sent_psns = sent_psns = SentPsns(num_qps=nq, window=W, evs=E)

        def slot(off):
            # an adder of wbits bits of its own (the sum's low bits; not the low bits of
            # walk_psn's una + pick_off, which synthesis would share), placed for the
            # per-PSN memories' read address
            return (cur.una[:wbits] + off)[:wbits] if wbits else Const(0, 0)

        # timer writes (FINAL, CLEAR): their deadlines from the retry count and the
        # configuration of the cycle of the write (hw/reliability/deadline.py)
        m.submodules.deadline = deadline = TimerDeadline(
            num_qps=nq, gen_bits=GEN_BITS, timeout_unit=self.timeout_unit)
        wiring.connect(m, deadline.timer_arm, wiring.flipped(self.timer_arm))
        arm_v = deadline.write.valid
        arm_req = deadline.write.payload
        m.d.comb += [deadline.now.eq(self.now), arm_req.retries.eq(cur.retries),
                     arm_req.t.eq(cfg.t), arm_req.linear_cnt.eq(cfg.linear_cnt)]


        # --- pushes -----------------------------------------------------------------------
        # The FIFOs' data hold a default in every cycle (the values of the walks' pushes,
        # set where those are known); a push sets the enable and what differs from it,
        # so that the data need no zero leg for the states that do not push.
        retx_req = Signal(RetxRequest)
        cpl_req = Signal(CompletionRequest(nq))
        evu = Signal(EvUpdate)
        evt = Signal(EvEvent)
        # the EV FIFOs' writes go through a register (their pushes are decided late in
        # USE, from the per-PSN entry read): a push reaches them the cycle after, which
        # the room check (3 free entries a cycle before the push) allows for; the
        # event queue drops (and counts) an event there when it is full
        ev_push = Signal()
        ev_push_q = Signal()
        evu_q = Signal(EvUpdate)
        evt_q = Signal(EvEvent)
        m.d.sync += [ev_push_q.eq(ev_push), evu_q.eq(evu), evt_q.eq(evt)]
        m.d.comb += [
            f_evu.w_data.eq(evu_q), f_evq.w_data.eq(evt_q),
            f_evu.w_en.eq(ev_push_q), f_evq.w_en.eq(ev_push_q),
        ]
        with m.If(ev_push_q & ~f_evq.w_rdy):
            count("events_lost")
        m.d.comb += [
            f_retx.w_data.eq(retx_req), f_cpl.w_data.eq(cpl_req),
            retx_req.qpn.eq(q), cpl_req.qpn.eq(q), evu.qpn.eq(q), evt.qpn.eq(q),
            cpl_req.wqe_index.eq(cur.wqe_cpl),
        ]

        def push_retx(reason):  # the data: below, by state
            m.d.comb += f_retx.w_en.eq(1)
            count({RetxReason.TIMEOUT: "retx_timeout", RetxReason.SACK_HOLE: "retx_sack",
                   RetxReason.NAK_TRIMMED: "retx_nak"}[reason])

        def push_cpl(wqe_index, status, clear=0):
            m.d.comb += [
                cpl_req.wqe_index.eq(wqe_index), cpl_req.status.eq(status),
                cpl_req.clear.eq(clear), f_cpl.w_en.eq(1),
            ]

        def push_ev():  # the data: below, by state
            m.d.comb += ev_push.eq(1)

        # What loss evidence would do to each EV, registered from the working copy
        # every cycle (hw/reliability/ev_evidence.py). Read only in USE, whose previous
        # cycle (PICK or LCNT) changes no EV field, so the values are those of the
        # working copy in USE.
        m.submodules.ev_evidence = evidence = EvEvidence(evs=E)
        m.d.comb += [evidence.ev_state.eq(cur.ev_state), evidence.ev_loss.eq(cur.ev_loss),
                     evidence.ev_drops.eq(cur.ev_drops),
                     evidence.threshold.eq(P.ev_loss_threshold),
                     evidence.min_active.eq(cfg.ev_min_active)]
        loss_inc = evidence.loss_inc
        drops_inc = evidence.drops_inc
        to_bad = evidence.to_bad  # the EV would turn ASSUMED_BAD
        bad_ok = evidence.bad_ok  # and the floor allows it

        # --- event intake -----------------------------------------------------------------
        ack = self.peer_ack.payload
        ack_ok = ack.bth.dqpn < nq
        is_ack = ack.bth.opcode == Opcode.ACKNOWLEDGE
        is_probe = ack.bth.opcode == Opcode.PROBE_RESP

        # room in the output FIFOs, registered: at least 3 free entries a cycle ago leaves
        # at least 1 now (one write per cycle; the buffered FIFO's output register
        # counts in its level). The event queue alone keeps its own w_rdy (it drops).
        def room(fifo):
            return fifo.level + 3 <= fifo.depth

        def has_room(fifo, name):
            r = Signal(name=f"room_{name}")
            m.d.sync += r.eq(room(fifo))
            return r

        r_retx, r_cpl, r_evu = (
            has_room(f, n) for f, n in ((f_retx, "retx"), (f_cpl, "cpl"), (f_evu, "evu")))
        room_walk = Signal()  # the walks' FIFOs together, registered on its own
        # FINAL's three FIFOs together (FINAL's write waits for it; the record memory's
        # write enables, flip-flops, are set from what it registers: rec_wen below)
        room_final = Signal()
        room_final_d = Signal()  # what room_final registers
        m.d.comb += room_final_d.eq(room(f_ack) & room(f_cwnd) & room(f_qps))
        m.d.sync += [room_walk.eq(room(f_retx) & room(f_cpl) & room(f_evu)),
                     room_final.eq(room_final_d)]

        # --- the state machine ------------------------------------------------------------
        # One-hot, one flip-flop per state (hw/pipeline.py OneHotFSM): a state's actions
        # and transitions are gated by its flip-flop rather than by a decode of a binary
        # state (two LUT levels in front of every mux of the working copy). A state's
        # transitions exclude each other (checked at elaboration; ``OneOf`` where a
        # one-hot condition makes them exclusive). The states' blocks are plain
        # ``m.If``s in order: an assignment made in every cycle comes before the states
        # that also assign its signal.
        STATES = ("CLEAR", "IDLE", "ACK_IN", "LOAD", "SENT", "ACK", "ACK_ADV", "PICK",
                  "LCNT", "WALK", "USE", "SACK", "SACK_ALIGN", "NAK", "CC", "CC_STEP",
                  "CC_SUM", "CC_NEW", "CC_CLAMP", "PROBE_RESP", "PROBE_CHECK", "PROBE_ACT",
                  "TIMEOUT", "FLUSH_WAIT", "FLUSH", "CMD_DEC", "CMD", "SWEEP", "SWEEP_EMIT",
                  "SETTLE", "CC_SET", "FINAL", "DOORBELL", "OP_ERR")
        # IDLE and LOAD are the enables and selects of the wide registers they load (the
        # inputs', the working copy's): those loads are split into groups of at most 64
        # bits (40 for LOAD), each under its own copy of the state's flip-flop
        # (fsm.copy), which follows the transitions into and out of the state (FINAL's
        # and USE's transitions are tracked too: the record's write enables and the
        # walk's strobes below are decided from them a cycle early)
        fsm = OneHotFSM(m, STATES, "CLEAR", track=("IDLE", "LOAD", "FINAL", "USE"))
        st = fsm.st

        def copy_of(name):
            return lambda k: fsm.copy(name, k)

        # The record memory's write enables (rec_wen_k, one per column group): 1 in
        # every cycle of CLEAR and in the cycle of FINAL that writes (FINAL with
        # room_final), registered from the transitions into FINAL (or FINAL waiting)
        # and the room that room_final registers. Each its own flip-flop, whose next
        # value is a function of itself (0 after a write: FINAL leaves), so that
        # synthesis keeps them apart (as state_copy).
        will_write = (fsm.entering("FINAL") | (st.FINAL & ~room_final)) & room_final_d
        stay_clear = st.CLEAR & (q != nq - 1)
        rec_wen = [Signal(init=1, name=f"rec_wen_{k}") for k in range(rec_groups)]
        for wen in rec_wen:
            m.d.sync += wen.eq(Mux(wen, stay_clear, will_write))
        m.d.comb += rec_wr.en.eq(Cat(*rec_wen))

        # The walk's step (USE) by kind, one-hot strobes registered from the
        # transitions into USE and walk_kind (unchanged from PICK or LCNT to USE):
        # use_of(kind, tag) is 1 exactly in USE of a walk of that kind. A copy per
        # tag (the working copy's fields, the pushes, a delivery, the EVs' loss
        # evidence), each a function of itself (0 after USE: USE never follows
        # itself), so that synthesis keeps them apart.
        use_strobes = {}

        def use_of(kind, tag):
            if (kind, tag) not in use_strobes:
                u = Signal(name=f"use_{('adv', 'sack', 'loss', 'tmo')[kind]}_{tag}")
                m.d.sync += u.eq(Mux(u, 0, fsm.entering("USE") & walk_kind[kind]))
                use_strobes[kind, tag] = u
            return use_strobes[kind, tag]

        def start(k):  # q set by IDLE
            m.d.sync += kind.eq(k)
            fsm.next = "LOAD"

        # generic per-PSN walk over walk_mask: PICK reads the entry of the lowest PSN
        # left, USE acts (the loss walk counts the SACKed PSNs above it in LCNT first)
        # registered every cycle: infl_mask_q in SACK_ALIGN (infl set two cycles
        # before), lost_cand in NAK (its previous cycle, PICK, changes neither sacked,
        # fast_done nor infl)
        infl_mask_q = Signal(W)
        lost_cand = Signal(W)
        m.d.sync += [
            infl_mask_q.eq(infl_mask),
            lost_cand.eq(Mux(cfg.sack_threshold != 0,
                             infl_mask & ~cur.sacked & ~cur.fast_done, 0)),
        ]
        # The input IDLE takes is chosen the cycle before (hw/reliability/intake.py:
        # ``take``, one-hot by priority; none: IDLE waits), with the QP to read at
        # (``rd_q``): the record, its configuration and the producer index are read for
        # LOAD alone, in the state before it (IDLE, or ACK_IN at the ACK's QP, which
        # rd_q keeps: no choice is made in a cycle in which IDLE takes one). A valid
        # input keeps its payload until taken. Doorbells: a pending bit per QP, taken
        # last by priority.
        m.submodules.picker = picker = EventPicker(num_qps=nq)
        T_CMD, T_SENT, T_ACK, T_TMO, T_SWEEP, T_DB = range(6)
        take = picker.take
        rd_q = picker.qpn
        sent_ok_q = picker.sent_ok  # the sent record's QP in range, with the choice
        inputs = [self.cmd, self.sent, self.peer_ack, self.expired]
        db_take = Signal()
        m.d.comb += [
            picker.valid.eq(Cat(*[i.valid for i in inputs], sweep_pending)),
            picker.cmd_qpn.eq(self.cmd.payload.qpn), picker.sent_qpn.eq(self.sent.payload.qpn),
            picker.ack_qpn.eq(ack.bth.dqpn), picker.tmo_qpn.eq(self.expired.payload.qpn),
            picker.sweep_qpn.eq(sweep.qpn),
            picker.doorbell.eq(self.sq_producer.valid), picker.doorbell_qpn.eq(sqp.qpn),
            picker.idle.eq(st.IDLE), picker.doorbell_taken.eq(db_take),
        ]
        m.d.comb += [rec_rd.addr.eq(rd_q), self.rel_addr.eq(rd_q)]
        # the walk's next PSN, registered: the lowest bit of walk_mask without the PSN
        # in use (off_bit). PICK follows USE or WALK, so walk_mask has not changed
        # since: the values are those of walk_mask in PICK.
        pick_off = Signal(range(max(W, 2)))
        pick_any = Signal()
        # the PSN in use as one bit, registered with walk_psn: its one-hot in LCNT and
        # USE (set in PICK, kept while they last), 0 in the other states (WALK)
        off_bit = Signal(W)
        m.d.sync += off_bit.eq(0)
        use_mask = Signal(W)
        m.d.comb += use_mask.eq(walk_mask & ~off_bit)
        m.d.sync += [
            pick_off.eq(lowest_index(m, use_mask, W, "pick")),
            pick_any.eq(use_mask != 0),
        ]
        # pick_off's copy for the per-PSN memories' read address (pick_off has sinks
        # all over the walk's logic), loaded in every state but LCNT: equal to pick_off
        # in PICK, the one state whose read is used (PICK follows USE, WALK or PICK);
        # the enable keeps synthesis from merging it with pick_off
        pick_off_rd = Signal.like(pick_off)
        with m.If(~st.LCNT):
            m.d.sync += pick_off_rd.eq(lowest_index(m, use_mask, W, "pick_rd"))
        e_ev = sent_psns.ev
        e_retx = sent_psns.retx
        e_last = sent_psns.last
        e_ts = sent_psns.ts

        # the entry's EV's drop count after loss evidence (an EV transition's drops, USE)
        blame_drops = Signal(16)
        m.d.comb += blame_drops.eq(index_select([drops_inc[i] for i in range(E)], e_ev))

        # the EV of a command or probe answer (set in IDLE), its state and drop count,
        # registered every cycle: valid in CMD and PROBE_ACT (CMD_DEC and PROBE_CHECK
        # before them change no EV field)
        ev_idx = Signal(range(E))
        ev_old = Signal(2)
        c_old = Signal(2)
        c_drops = Signal(16)
        m.d.comb += ev_old.eq(index_select([cur.ev_state[i] for i in range(E)], ev_idx))
        m.d.sync += [c_old.eq(ev_old),
                     c_drops.eq(index_select([cur.ev_drops[i] for i in range(E)], ev_idx))]

        # The pushes' data, chosen by the state flip-flops alone (the push conditions
        # set only the enables): the retransmit FIFO's (block RAM, no register in
        # front) the NAK's PSN in NAK, else the walk's; the EV FIFOs' the event of a
        # command (CMD: GOOD or DENIED, the command's state) or probe answer
        # (PROBE_ACT: to GOOD) on ev_idx, else blame's (GOOD to ASSUMED_BAD on e_ev)
        ev_own = st.CMD | st.PROBE_ACT
        ev_new = Mux(st.CMD, cmd.state[:2], Mux(st.PROBE_ACT, EvState.GOOD,
                                                 EvState.ASSUMED_BAD))
        m.d.comb += [
            retx_req.psn.eq(Mux(st.NAK, a_psn, walk_psn)),
            retx_req.reason.eq(Mux(st.NAK, RetxReason.NAK_TRIMMED,
                                   Mux(walk_kind[W_TMO], RetxReason.TIMEOUT,
                                       RetxReason.SACK_HOLE))),
            evu.ev_index.eq(Mux(ev_own, ev_idx, e_ev)), evu.state.eq(ev_new),
            evt.ev_index.eq(Mux(ev_own, ev_idx, e_ev)), evt.new.eq(ev_new),
            evt.old.eq(Mux(ev_own, c_old, EvState.GOOD)),
            evt.drops.eq(Mux(ev_own, c_drops, blame_drops)),
        ]
        bad = Signal(E)
        m.d.comb += bad.eq(Cat(*[cur.ev_state[i] == EvState.ASSUMED_BAD for i in range(E)]))


        # the record written back (FINAL): the working copy with the timer generation of
        # the arm or disarm. The write port and the timer write take it, and q, in every
        # state; only their enables depend on the state.
        out = Signal(Rec)
        m.d.comb += out.eq(cur)
        with m.If(want_arm | want_disarm):
            m.d.comb += [out.timer_gen.eq(cur.timer_gen + 1), out.armed.eq(want_arm)]
        m.d.comb += [
            rec_wr.addr.eq(q), rec_wr.data.eq(out),
            arm_req.qpn.eq(q), arm_req.armed.eq(want_arm), arm_req.gen.eq(out.timer_gen),
            f_ack.w_data.eq(Cat(Const(0, 24) | q, cur.una)),
            f_cwnd.w_data.eq(Cat(Const(0, 24) | q, cur.cwnd)),
            f_qps.w_data.eq(Cat(Const(0, 24) | q, cur.state)),
        ]

        # una, cwnd, state against their values at LOAD, registered every cycle: valid
        # in FINAL when the cycle before changed none of them, else set there (SENT,
        # FLUSH, CC_SET; their assignments come after this one); CMD goes through
        # SETTLE
        m.d.sync += [una_chg.eq(cur.una != una0), cwnd_chg.eq(cur.cwnd != cwnd0),
                     state_chg.eq(cur.state != state0)]

        # after reset: every QP record to RESET, every timer disarmed; q counts the QPs
        # and the working copy holds its reset value (the RESET record, timer disarmed)
        with fsm.State("CLEAR"):
            m.d.comb += [
                arm_v.eq(1),
                sq_pi_wr.addr.eq(q), sq_pi_wr.data.eq(0), sq_pi_wr.en.eq(1),
            ]
            m.d.sync += q.eq(q + 1)
            with m.If(q == nq - 1):
                fsm.next = "IDLE"

        # IDLE takes the input chosen in the cycle before (take); the registers of all
        # the inputs load in every IDLE cycle (copies of the state flip-flop are their
        # enables, below), as nothing reads them in IDLE; q takes the QP read (rd_q),
        # the ACK's too. The inputs' readies come from a copy of IDLE's flip-flop of
        # their own: they are the enables of the input stages' registers, hundreds of
        # flip-flops outside.
        ready_idle = copy_of("IDLE")("ready")
        m.d.comb += [i.ready.eq(ready_idle & take[k]) for k, i in enumerate(inputs)]
        with fsm.State("IDLE"):
            m.d.sync += [want_arm.eq(0), want_disarm.eq(0), progress.eq(0), nak_cut.eq(0),
                         newly.eq(0), rtt_valid.eq(0), q.eq(rd_q)]
            syn = ack.aeth.syndrome
            known_syndrome = ((syn == AETH_ACK) | (syn == NAK_TRIMMED)
                              | (syn == NAK_INVALID_REQUEST) | (syn == NAK_REMOTE_ACCESS))
            m.d.sync += [a_use.eq(ack_ok & is_ack & known_syndrome),
                         a_probe.eq(ack_ok & is_probe)]
            with fsm.OneOf() as when:  # take is one-hot (or 0)
                with when(take[T_CMD]):
                    start(K_CMD)
                with when(take[T_SENT]):
                    # the kind is taken whatever the QP, so that it does not wait for
                    # the range check
                    m.d.sync += kind.eq(K_SENT)
                    with m.If(sent_ok_q):
                        fsm.next = "LOAD"
                    with m.Else():
                        count("sent_dropped")
                with when(take[T_ACK]):
                    fsm.next = "ACK_IN"
                with when(take[T_TMO]):
                    start(K_TMO)
                with when(take[T_SWEEP]):
                    m.d.comb += sweep.taken.eq(1)
                    start(K_SWEEP)
                with when(take[T_DB]):
                    m.d.comb += db_take.eq(1)
                    start(K_DB)

        load_in_groups(m, [
            (cmd, self.cmd.payload), (s, self.sent.payload), (t_gen, self.expired.payload.gen),
            (ev_idx, Mux(take[T_CMD], self.cmd.payload.ev_index, ack.probe.probe_id[:ebits])),
            (a_trim, ack.aeth.syndrome == NAK_TRIMMED), (a_psn, ack.bth.psn),
            (a_fatal, (ack.aeth.syndrome == NAK_INVALID_REQUEST)
             | (ack.aeth.syndrome == NAK_REMOTE_ACCESS)),
            (a_inv, ack.aeth.syndrome == NAK_INVALID_REQUEST),
            (a_cum, ack.sack.cum_psn), (a_base, ack.sack.sack_base), (a_ece, ack.sack.ece),
            (a_bitmap, ack.sack_bitmap), (a_probe_id, ack.probe.probe_id),
            (a_probe_ev, ack.probe.ev),
        ], copy_of("IDLE"))

        with fsm.State("ACK_IN"):  # the record's kind, from registers
            with m.If(a_use):
                start(K_ACK)
            with m.Elif(a_probe):
                start(K_PROBE)
            with m.Else():
                count("acks_ignored")
                fsm.next = "IDLE"

        with fsm.State("LOAD"):
            r = rec_rd_data
            r_span = (r.nxt - r.una)[:24]
            rc = self.rel_data
            # this timeout exceeds the limit when the retries already taken (at most
            # linear_cnt + exp_cnt <= 31, the count's saturation) reach it; exp_cnt
            # 25..31 retries forever
            limit = rc.linear_cnt + rc.exp_cnt
            m.d.sync += [
                tmo_stale.eq((r.state != QpState.RTS) | ~r.armed | (r.timer_gen != t_gen)),
                tmo_exhaust.eq((rc.exp_cnt < EXP_FOREVER) & (limit <= r.retries)),
                sent_new.eq((r.state == QpState.RTS) & ~s.retx & ~s.op_err
                            & (r.fresh | ((s.psn == r.nxt) & (r_span[: len(infl)] < W)))),
                sent_operr.eq((r.state == QpState.RTS) & s.op_err),
                sent_moves.eq(s.psn != r.una),
            ]
            with m.Switch(kind):
                with m.Case(K_SENT):
                    fsm.next = "SENT"
                with m.Case(K_ACK):
                    fsm.next = "ACK"
                with m.Case(K_PROBE):
                    fsm.next = "PROBE_RESP"
                with m.Case(K_TMO):
                    fsm.next = "TIMEOUT"
                with m.Case(K_CMD):
                    fsm.next = "CMD_DEC"
                with m.Case(K_SWEEP):
                    fsm.next = "SWEEP"
                with m.Case(K_DB):
                    fsm.next = "DOORBELL"

        load_in_groups(m, [
            (cur, rec_rd_data), (cfg, self.rel_data), (una0, rec_rd_data.una),
            (cwnd0, rec_rd_data.cwnd), (state0, rec_rd_data.state),
            (sq_pi, sq_pi_rd.data),
            (pi_ahead, sq_pi_rd.data[:16] - rec_rd_data.wqe_cpl),
            (sent_ahead, rec_rd_data.wqe_sent - rec_rd_data.wqe_cpl),
            (sent_d, s.psn - rec_rd_data.una), (infl, r_span[: wbits + 1]),
        ], copy_of("LOAD"), bits=40)  # cur's bits have selects in other states too

        # ---- a data packet went on the wire --------------------------------------
        with fsm.State("SENT"):  # actions below, under st.SENT
            with m.If(sent_operr):
                # TX refused WQE wqe_index (it sends nothing more from the QP): it is
                # TX's last WQE begun; with nothing in flight every WQE before it has
                # completed, so it completes now, else once the last PSN is ACKed
                # (CC_SET)
                m.d.sync += cur.wqe_sent.eq(s.wqe_index + 1)
                with m.If(cur.fresh):
                    m.d.sync += cur.wqe_cpl.eq(s.wqe_index)
                with m.If(cur.fresh | (infl == 0)):
                    m.d.sync += flush_status.eq(CqeStatus.LOC_QP_OP_ERR)
                    fsm.next = "OP_ERR"
                with m.Else():
                    m.d.sync += cur.op_err.eq(1)
                    fsm.next = "FINAL"
            with m.Elif(sent_new):
                fsm.next = "FINAL"
            with m.Else():
                fsm.next = "IDLE"

        # ---- ACK / NAK ------------------------------------------------------------
        adv_below = Signal(W)
        with fsm.State("ACK"):
            # the advance, and the walk's mask from the low bits alone (ACK_ADV applies
            # the sign), loaded in ACK whether the ACK is ignored or not (ACK's
            # flip-flop is their enable): only ACK_ADV and SACK read them
            low = wbits + 1
            m.d.sync += [adv_raw.eq(a_cum_next - cur.una),
                         adv_below.eq(all_below((a_cum_next[:low] - cur.una[:low])[:low], W))]
            with m.If((cur.state != QpState.RTS) | cur.fresh):
                count("acks_ignored")
                fsm.next = "IDLE"
            with m.Else():
                fsm.next = "ACK_ADV"

        adv_n = Mux(adv_raw[23], 0, adv_raw[: wbits + 1])  # PSNs acknowledged (ACK_ADV)
        # an ACK of PSNs not sent yet: registered in ACK_ADV (0 in other states), it
        # ends the event in WALK (which counts the other ACKs: the count is not in
        # ACK_ADV, behind the window test)
        adv_unsent = Signal()
        beyond = (adv_raw[len(infl):] != 0) | (adv_raw[: len(infl)] > infl)
        unsent = ~adv_raw[23] & beyond
        m.d.sync += adv_unsent.eq(st.ACK_ADV & unsent)
        with fsm.State("ACK_ADV"):  # the ACK counted in WALK, from adv_unsent
            m.d.sync += [adv.eq(adv_n), walk_kind.eq(1 << W_ADV)]
            fsm.next = "WALK"

        # the walk's per-PSN entry: read in PICK at the PSN it picks, held through LCNT
        # and USE (the read address is pick_off_rd's, pick_off's in PICK)
        m.d.comb += [sent_psns.read_qp.eq(q), sent_psns.read_slot.eq(slot(pick_off_rd)),
                     sent_psns.hold.eq(st.LCNT | st.USE)]
        with fsm.State("PICK"):
            # PICK's flip-flop its enable: in the last cycle of PICK before USE or LCNT,
            # pick_off is the PSN's (una changes in PICK only when no PSN is left)
            m.d.sync += walk_psn.eq(cur.una + pick_off)
            with m.If(pick_any):
                # the room for USE's pushes is awaited here: PICK and LCNT push
                # nothing, and PICK's values hold while it waits
                with m.If(room_walk):
                    m.d.sync += off_bit.eq(onehot(pick_off, W))
                    with m.If(walk_kind[W_SACK]):
                        m.d.sync += progress.eq(1)  # a new SACK bit
                    with m.If(walk_kind[W_LOSS]):
                        fsm.next = "LCNT"
                    with m.Else():
                        fsm.next = "USE"
            with m.Else(), fsm.OneOf() as when:  # walk_kind is one-hot
                with when(walk_kind[W_ADV]):
                    m.d.sync += [
                        infl.eq(infl - adv),
                        cur.una.eq(cur.una + adv),  # sacked, fast_done: in USE
                    ]
                    with m.If(adv != 0):
                        m.d.sync += progress.eq(1)
                    fsm.next = "SACK"
                with when(walk_kind[W_SACK]):
                    fsm.next = "NAK"
                with when(walk_kind[W_LOSS]):
                    fsm.next = "CC"
                with when(walk_kind[W_TMO]):
                    fsm.next = "FINAL"

        def deliver():
            m.d.sync += [cur.ev_loss[e_ev].eq(0), newly.eq(newly + 1)]
            with m.If(~e_retx):
                m.d.sync += [rtt_ts.eq(e_ts), rtt_valid.eq(1)]

        # registered every cycle: in LCNT, the SACKed PSNs above the PSN in use (pick_off in
        # PICK, which leaves sacked as it is) counted per group of 4 PSNs
        sacked_above_4 = []
        for g in range(0, W, 4):
            # bit i: SACKed and above pick_off (pick_off < i, not pick_off > i - 1)
            above = Cat(*[cur.sacked[i] & ~greater_than_const(pick_off, i - 1) if i else Const(0, 1)
                          for i in range(g, min(g + 4, W))])
            count_4 = Signal(3, name=f"sacked_above_{g}")
            m.d.sync += count_4.eq(popcount(above))
            sacked_above_4.append(count_4)
        with fsm.State("LCNT"):
            m.d.sync += off_bit.eq(off_bit)
            m.d.sync += loss_hole.eq(~thr_high & (sum(sacked_above_4)
                                                  >= cfg.sack_threshold[: (W + 1).bit_length()]))
            fsm.next = "USE"

        with fsm.State("WALK"):  # walk_mask set: the first pick is registered
            with m.If(adv_unsent):
                count("acks_unsent")
                fsm.next = "IDLE"
            with m.Else():
                # the ADV walk's WALK follows ACK_ADV (the other walks set walk_kind)
                with m.If(walk_kind[W_ADV]):
                    count("acks")
                fsm.next = "PICK"

        with fsm.State("USE"):  # actions below, under st.USE
            with m.If(walk_kind[W_LOSS] & ~loss_hole):
                fsm.next = "CC"
            with m.Else():
                fsm.next = "PICK"

        # The SACK bitmap and the NAK's PSN against the new una (hw/reliability/
        # sack_align.py), captured in SACK: a_base, a_psn and a_cum_next are set from IDLE
        # on, and una and infl change only at the end of PICK, the cycle before SACK
        # (the una before it is the ACK's when the ACK is behind it: adv_back)
        m.submodules.sack_align = sack_align = SackAlign(window=W, sack_bits=self.sack_bits)
        adv_back = adv_raw[23]  # set in ACK
        m.d.comb += [
            sack_align.una.eq(cur.una), sack_align.cum_next.eq(a_cum_next),
            sack_align.behind.eq(adv_back), sack_align.sack_base.eq(a_base),
            sack_align.nak_psn.eq(a_psn), sack_align.bitmap.eq(a_bitmap),
            sack_align.infl.eq(infl), sack_align.capture.eq(st.SACK),
        ]
        # the SACKed PSNs against una (SACK_ALIGN); the NAK's PSN: in flight (nak_in),
        # at offset nak_off (NAK)
        sack_rel = sack_align.sacked
        nak_in = sack_align.nak_in
        nak_off = sack_align.nak_off
        with fsm.State("SACK"):
            fsm.next = "SACK_ALIGN"
        with fsm.State("SACK_ALIGN"):
            m.d.sync += walk_kind.eq(1 << W_SACK)
            fsm.next = "WALK"

        # registered every cycle: valid in NAK, whose previous cycle (PICK) changes
        # neither sacked nor the NAK's offset
        nak_hit = Signal()
        m.d.sync += nak_hit.eq(nak_in & ~bit_at(cur.sacked, nak_off))
        # the NAK's PSN already retransmitted by a NAK or a SACK hole since the last
        # timeout (fast_done): the NAK is refused and counted, no retransmission and no
        # window cut (one of each per PSN between timeouts; the timer resends a copy
        # lost again). Registered outside NAK and held in it: NAK marks the PSN in
        # fast_done while it waits for room, which must not refuse its own request.
        nak_again = Signal()
        with m.If(~st.NAK):
            m.d.sync += nak_again.eq(bit_at(cur.fast_done, nak_off))
        nak_go = Signal()
        m.d.comb += nak_go.eq(nak_hit & ~nak_again)

        # the loss walk's holes (NAK): in flight, not SACKed, not yet retransmitted,
        # nor the PSN that the NAK retransmits
        nak_retx = Signal()
        m.d.comb += nak_retx.eq(a_trim & r_retx & nak_go)
        nak_bit = Signal(W)  # registered every cycle: valid in NAK, as nak_hit
        m.d.sync += nak_bit.eq(onehot(nak_off, W))
        nak_mask = lost_cand & ~Mux(nak_retx, nak_bit, 0)
        with fsm.State("NAK"):
            m.d.sync += walk_kind.eq(1 << W_LOSS)
            # the NAK's PSN is marked retransmitted while its request waits for room
            # too (the walk's holes leave it out either way)
            with m.If(a_trim & nak_hit):
                m.d.sync += cur.fast_done.eq(cur.fast_done | nak_bit)
            with m.If(a_trim):
                with m.If(r_retx):
                    count("naks_trimmed")
                    with m.If(nak_go):
                        push_retx(RetxReason.NAK_TRIMMED)
                        m.d.sync += nak_cut.eq(1)
                    with m.Elif(nak_hit):
                        count("naks_trim_repeat")
                    fsm.next = "WALK"
            with m.Elif(a_fatal):
                fsm.next = "CC"  # no loss walk: nothing is sent again, CC goes on to FLUSH
            with m.Else():
                fsm.next = "WALK"

        # ---- congestion window ---------------------------------------------------------
        # over six cycles (hw/reliability/cwnd.py, CwndUnit): CC starts the step from
        # the working copy (RTT and recovery tests, the trimmed window), CC_STEP and
        # CC_SUM wait for its stages, CC_NEW writes the accumulator and the decrease's
        # state and registers the new window, CC_CLAMP waits for its bounds, CC_SET
        # writes it (with the change flag: CC_SET is the path's SETTLE). The fields the
        # unit reads hold from CC to CC_NEW; the RTT is measured 2 cycles before CC.
        m.submodules.cwnd = cwnd = CwndUnit(window=W, layout=GlobalParams)
        m.d.comb += [
            cwnd.params.eq(P), cwnd.now_ts.eq(now_ts),
            cwnd.cwnd.eq(cur.cwnd), cwnd.cwnd_acc.eq(cur.cwnd_acc),
            cwnd.md_active.eq(cur.md_active), cwnd.md_recover.eq(cur.md_recover),
            cwnd.una.eq(cur.una), cwnd.delay_high.eq(cur.delay_high), cwnd.newly.eq(newly),
            cwnd.rtt_ts.eq(rtt_ts), cwnd.rtt_valid.eq(rtt_valid), cwnd.nak_cut.eq(nak_cut),
            cwnd.ece.eq(a_ece),
            cwnd.start.eq(st.CC), cwnd.update.eq(st.CC_NEW),
            cwnd.init.eq(st.LOAD),  # cwnd_init for a command's RTS entry
        ]
        # the clamped window: valid in CC_SET (CC_NEW two cycles before) and in CMD
        # (LOAD, before CMD_DEC)
        cwnd_clamped = cwnd.new_cwnd
        cwnd_floor = cwnd.cwnd_floor
        # registered every cycle: valid in CC (PICK and USE of the loss walk before it
        # leave una and nxt as they are)
        unacked = Signal()
        m.d.sync += unacked.eq(cur.nxt != cur.una)
        with fsm.State("CC"):
            m.d.sync += cur.delay_high.eq(cwnd.high)
            with m.If(~progress & ~nak_cut & ~a_ece & ~a_fatal):
                count("acks_stale")
            with m.If(progress):
                m.d.sync += cur.retries.eq(0)
                with m.If(unacked):
                    m.d.sync += want_arm.eq(1)
                with m.Else():
                    m.d.sync += want_disarm.eq(1)
            with m.If(a_fatal):
                # a NAK 0x61/0x62 (verbs: the responder refused the request): the
                # WQEs its cumulative PSN and SACK bitmap completed have completed
                # (in USE); the oldest other one completes with the error, the rest
                # FLUSHED, and the QP goes to ERROR (FLUSH_WAIT: wqe_cpl settles).
                # una goes back to LOAD's, so FINAL sends TX no ack_update that
                # could open its window before the qp_state_update stops the QP.
                count("naks_fatal")
                m.d.sync += [flush_status.eq(Mux(a_inv, CqeStatus.REM_INV_REQ,
                                                 CqeStatus.REM_ACCESS)),
                             cur.una.eq(una0), want_arm.eq(0)]
                fsm.next = "FLUSH_WAIT"
            with m.Else():
                fsm.next = "CC_STEP"

        with fsm.State("CC_STEP"):
            fsm.next = "CC_SUM"

        with fsm.State("CC_SUM"):
            fsm.next = "CC_NEW"

        with fsm.State("CC_NEW"):
            m.d.sync += cur.cwnd_acc.eq(cwnd.new_acc)
            with m.If(cwnd.md_start):
                m.d.sync += [cur.md_active.eq(1), cur.md_recover.eq(cur.nxt)]
            with m.If(cwnd.md_end):
                m.d.sync += cur.md_active.eq(0)
            fsm.next = "CC_CLAMP"

        with fsm.State("CC_CLAMP"):  # the window's bounds registered
            fsm.next = "CC_SET"

        with fsm.State("CC_SET"):  # SETTLE for the window: its change flag set here
            m.d.sync += [cur.cwnd.eq(cwnd_clamped), cwnd_chg.eq(cwnd_clamped != cwnd0)]
            # a refused WQE waiting for the PSNs before it: none left in flight now
            with m.If(cur.op_err & ~unacked):
                m.d.sync += flush_status.eq(CqeStatus.LOC_QP_OP_ERR)
                fsm.next = "OP_ERR"
            with m.Else():
                fsm.next = "FINAL"

        # ---- probe answer ----------------------------------------------------------
        # the room for PROBE_ACT's push is awaited here: nothing is pushed in between
        with fsm.State("PROBE_RESP"):
            m.d.comb += self.evv_addr.eq(Cat(ev_idx, q) if ebits else q)
            with m.If(r_evu):
                fsm.next = "PROBE_CHECK"
        probe_ok = Signal()
        with fsm.State("PROBE_CHECK"):
            m.d.sync += probe_ok.eq(
                (a_probe_id[ebits:8] == 0) & (self.evv_data == a_probe_ev)
                & (ev_old == EvState.ASSUMED_BAD))
            fsm.next = "PROBE_ACT"
        with fsm.State("PROBE_ACT"):
            count("probe_resps")
            with m.If(probe_ok):
                m.d.sync += [cur.ev_state[ev_idx].eq(EvState.GOOD),
                             cur.ev_loss[ev_idx].eq(0)]
                push_ev()  # c_old: ASSUMED_BAD
                count("ev_to_good")
            fsm.next = "FINAL"

        # ---- retransmit timer expired ------------------------------------------------
        with fsm.State("TIMEOUT"):
            retries_new = Signal(5)
            m.d.comb += retries_new.eq(Mux(cur.retries == 31, 31, cur.retries + 1))
            # the walk's start, whether it follows or not: a stale report writes
            # nothing back, a flush clears fast_done itself
            m.d.sync += [walk_kind.eq(1 << W_TMO), blamed.eq(0), cur.fast_done.eq(0)]
            with m.If(tmo_stale):
                fsm.next = "IDLE"  # stale report
            with m.Else():
                count("timeouts")
                m.d.sync += cur.retries.eq(retries_new)
                with m.If(tmo_exhaust):
                    count("retry_exhausted")
                    m.d.sync += flush_status.eq(CqeStatus.RETRY_EXCEEDED)
                    fsm.next = "FLUSH"
                with m.Else():
                    half = cur.cwnd >> 1
                    m.d.sync += [
                        cur.cwnd.eq(Mux(half < cwnd_floor, cwnd_floor, half)),
                        want_arm.eq(1),
                    ]
                    fsm.next = "WALK"

        # ---- every outstanding WQE completes with an error; QP to ERROR --------------------
        # From the oldest uncompleted WQE up to the producer index: the WQEs TX
        # has begun and those it has not (posted, not yet fetched or sent). The
        # end is never before wqe_sent (a doorbell cannot lag what TX sent).
        # una stays: an ack_update would open TX's window before the
        # qp_state_update has disabled the QP in TX.
        # registered every cycle: valid in FLUSH (entered from TIMEOUT or CMD, or
        # from FLUSH_WAIT after a completion: wqe_cpl unchanged the cycle before)
        # (TIMEOUT, LOAD's next cycle, precedes sq_end: there wqe_cpl is LOAD's, and
        # wqe_cpl != sq_end is the zero test of the distance that sq_end chooses)
        flush_more = Signal()
        sq_use_pi = Signal()  # sq_end's choice: the producer index (valid after LOAD)
        m.d.comb += sq_use_pi.eq(sq_pi[16] & (pi_ahead >= sent_ahead))
        m.d.sync += [
            sq_end.eq(Mux(sq_use_pi, sq_pi[:16], cur.wqe_sent)),
            flush_more.eq(Mux(st.TIMEOUT, Mux(sq_use_pi, pi_ahead != 0, sent_ahead != 0),
                              cur.wqe_cpl != sq_end)),
        ]
        # the next WQE to complete, registered every cycle: valid in FLUSH (as above)
        # and in USE (PICK or LCNT before it leave wqe_cpl as it is)
        wqe_cpl_inc = Signal(16)
        m.d.sync += wqe_cpl_inc.eq(cur.wqe_cpl + 1)
        with fsm.State("FLUSH_WAIT"):
            fsm.next = "FLUSH"
        # a refused WQE's flush (from SENT or CC_SET, which set wqe_sent or leave it):
        # a cycle more before FLUSH_WAIT, so that sq_end (registered every cycle from
        # wqe_sent) and flush_more after it hold the wqe_sent SENT set
        with fsm.State("OP_ERR"):
            fsm.next = "FLUSH_WAIT"
        # a doorbell (LOAD reads the producer index): a QP in ERROR completes what was
        # posted since its flush FLUSHED (FLUSH two cycles later, when sq_end and
        # flush_more hold LOAD's producer index, as after CMD)
        with fsm.State("DOORBELL"):
            with m.If(cur.state == QpState.ERROR):
                m.d.sync += flush_status.eq(CqeStatus.FLUSHED)
                fsm.next = "FLUSH_WAIT"
            with m.Else():
                fsm.next = "IDLE"
        with fsm.State("FLUSH"):
            # sacked and fast_done cleared in every cycle of the flush (none reads them)
            m.d.sync += [cur.sacked.eq(0), cur.fast_done.eq(0)]
            with m.If(flush_more):
                with m.If(r_cpl):
                    push_cpl(cur.wqe_cpl, flush_status)
                    m.d.sync += [cur.wqe_cpl.eq(wqe_cpl_inc),
                                 flush_status.eq(CqeStatus.FLUSHED)]
                    fsm.next = "FLUSH_WAIT"
            with m.Else():
                m.d.sync += [
                    cur.state.eq(QpState.ERROR), cur.wqe_sent.eq(sq_end),
                    state_chg.eq(state0 != QpState.ERROR), want_disarm.eq(1),
                ]
                fsm.next = "FINAL"

        # ---- controller commands ------------------------------------------------------
        # the command decoded against the record first (registered in CMD_DEC)
        c_ev_good = Signal()
        c_ev_denied = Signal()
        # a QP state command, one of: to ERROR from RTS (flush), to RESET, to RTS from
        # another state, any other (RTS from RTS: unchanged)
        c_flush = Signal()
        c_reset = Signal()
        c_to_rts = Signal()
        c_other = Signal()
        # CMD's reset and RTS entry of the working copy (below), as flip-flops
        # set for the one cycle of CMD: the clears of the record's flip-flops
        # (their LSR pins, a few hundred) are these flags, not a LUT of st.CMD
        # and c_reset/c_to_rts (docs/timing.md#reliability-core). clear_go is
        # either of the two, for the fields
        # both set alike.
        reset_go = Signal()
        rts_go = Signal()
        clear_go = Signal()
        m.d.sync += [reset_go.eq(0), rts_go.eq(0), clear_go.eq(0)]
        with fsm.State("CMD_DEC"):
            flush = (cmd.state == QpState.ERROR) & (cur.state == QpState.RTS)
            reset = cmd.state == QpState.RESET
            to_rts = (cmd.state == QpState.RTS) & (cur.state != QpState.RTS)
            with m.If(~cmd.ev & (~reset | r_cpl)):  # (CMD is next: see below)
                m.d.sync += [reset_go.eq(reset), rts_go.eq(to_rts), clear_go.eq(reset | to_rts)]
            m.d.sync += [
                c_ev_good.eq(cmd.ev & (cmd.state == EvState.GOOD) & (ev_old != EvState.GOOD)),
                c_ev_denied.eq(cmd.ev & (cmd.state == EvState.DENIED)
                               & (ev_old != EvState.DENIED)),
                c_flush.eq(~cmd.ev & flush),
                c_reset.eq(~cmd.ev & reset),
                c_to_rts.eq(~cmd.ev & to_rts),
                c_other.eq(~cmd.ev & ~flush & ~reset & ~to_rts),
            ]
            # the room for CMD's push is awaited here: nothing is pushed in between
            with m.If(Mux(cmd.ev, r_evu, ~reset | r_cpl)):
                fsm.next = "CMD"
        with fsm.State("CMD"):
            ce = ev_idx
            old = c_old
            # the QP-state flags exclude each other and cmd.ev (they are registered
            # under ~cmd.ev): no priority between them; an EV command's flags hold
            # with cmd.ev and make no transition
            with fsm.OneOf() as when:
                with when(cmd.ev):
                    fsm.next = "SETTLE"
                with m.If(c_ev_good):
                    m.d.sync += [cur.ev_state[ce].eq(EvState.GOOD), cur.ev_loss[ce].eq(0)]
                    push_ev()
                    with m.If(old == EvState.ASSUMED_BAD):
                        count("ev_to_good")
                with m.If(c_ev_denied):
                    m.d.sync += cur.ev_state[ce].eq(EvState.DENIED)
                    push_ev()
                with when(c_flush):
                    m.d.sync += flush_status.eq(CqeStatus.FLUSHED)
                    fsm.next = "FLUSH"
                with when(c_reset):  # the working copy: below
                    push_cpl(0, 0, clear=1)
                    m.d.sync += want_disarm.eq(1)
                    fsm.next = "SETTLE"
                with when(c_to_rts):  # the working copy: below
                    m.d.sync += want_disarm.eq(cur.armed)
                    fsm.next = "SETTLE"
                with when(c_other):
                    m.d.sync += cur.state.eq(cmd.state)
                    fsm.next = "SETTLE"

        # ---- probe round: one request per ASSUMED_BAD EV of this QP --------------------
        # SWEEP loads the QP's EVs to probe, SWEEP_EMIT pushes one per cycle with room
        # (3 free entries the cycle before, as for the other FIFOs: the FIFO's write
        # enable is a flip-flop) until none is left
        m.d.comb += [
            sweep.qp.eq(q), sweep.evs.eq(Mux(cur.state == QpState.RTS, bad, 0)),
            sweep.room.eq(room(f_probe)), sweep.load.eq(st.SWEEP), sweep.emit.eq(st.SWEEP_EMIT),
            f_probe.w_data.eq(sweep.req), f_probe.w_en.eq(sweep.push),
        ]
        with m.If(sweep.push):
            count("probes_sent")
        with fsm.State("SWEEP"):
            fsm.next = "SWEEP_EMIT"
        with fsm.State("SWEEP_EMIT"):
            with m.If(sweep.done):
                fsm.next = "IDLE"

        # ---- write back ------------------------------------------------------------------
        with fsm.State("SETTLE"):
            fsm.next = "FINAL"
        with fsm.State("FINAL"):
            with m.If(room_final):
                m.d.comb += [arm_v.eq(want_arm | want_disarm),
                             f_ack.w_en.eq(una_chg), f_cwnd.w_en.eq(cwnd_chg),
                             f_qps.w_en.eq(state_chg)]
                fsm.next = "IDLE"

        # ---- SENT's and USE's actions ------------------------------------------------
        # The per-PSN writes are SENT's, made the cycle after it (FINAL or IDLE) from
        # flip-flops (SentPsns), so that the retransmission's window test (a carry
        # chain) is not in front of the LUT RAM's write enables. The next read of the
        # entries is PICK's, at least 5 cycles later (after LOAD of another event).
        m.d.comb += [
            sent_psns.write_qp.eq(q), sent_psns.write_slot.eq(s.psn[:wbits] if wbits else 0),
            sent_psns.write_ev.eq(s.ev_index[:ebits]), sent_psns.write_retx.eq(s.retx),
            sent_psns.write_last.eq(s.last), sent_psns.write_ts.eq(now_ts),
        ]
        with m.If(st.SENT):
            with m.If(sent_new):
                m.d.comb += sent_psns.record.eq(1)
                m.d.sync += [
                    cur.nxt.eq(s.psn + 1),
                    cur.fresh.eq(0),
                    cur.wqe_sent.eq(s.wqe_index + 1),
                ]
                # una (= una0 here) moves only for the first PSN (una_chg is set
                # here: FINAL follows)
                with m.If(cur.fresh):
                    m.d.sync += [cur.una.eq(s.psn), una_chg.eq(sent_moves),
                                 cur.wqe_cpl.eq(s.wqe_index)]
                with m.If(~cur.armed):
                    m.d.sync += want_arm.eq(1)
            # a retransmission (RTS, in flight) rewrites its PSN's EV
            with m.Elif((cur.state == QpState.RTS) & s.retx & ~cur.fresh
                        & below_const(sent_d, infl, len(infl))):
                m.d.comb += sent_psns.rewrite.eq(1)
        # a sent record neither tracked nor a retransmission in flight: counted the
        # cycle after SENT, from flip-flops (SENT's, registered, and no per-PSN write)
        after_sent = Signal()
        after_operr = Signal()
        m.d.sync += [after_sent.eq(st.SENT), after_operr.eq(sent_operr)]
        with m.If(after_sent & ~sent_psns.ev_written & ~after_operr):
            count("sent_dropped")

        # the walk's PSNs: set by the state that starts a walk, then USE takes one PSN
        # off at each step; an AND-OR of the (exclusive) states rather than a chain of
        # muxes. TIMEOUT sets it whether it starts a walk or not (read only in walks).
        walk_set = [(st.ACK_ADV, Mux(adv_raw[23], 0, adv_below)),
                    (st.SACK_ALIGN, sack_rel & infl_mask_q & ~cur.sacked),
                    (st.NAK, nak_mask),
                    (st.TIMEOUT, infl_mask & ~cur.sacked),
                    (st.USE, use_mask)]
        walk_sel = Cat(*[sel for sel, _ in walk_set])
        with m.If(walk_sel.any()):
            m.d.sync += walk_mask.eq(one_hot_select(walk_sel, [v for _, v in walk_set]))

        # USE's actions by walk kind, each under its strobe (use_of: the kind's
        # step, a flip-flop), one copy for the working copy's fields (cur), one for
        # the pushes (push), one for a delivery (dlv), one for the EVs' loss evidence
        with m.If(use_of(W_ADV, "cur")):
            # the walk takes the PSNs from una up in order: each step shifts
            # sacked and fast_done down by one, so bit 0 is this PSN's
            m.d.sync += [cur.sacked.eq(cur.sacked[1:]),
                         cur.fast_done.eq(cur.fast_done[1:])]
            with m.If(e_last):
                m.d.sync += cur.wqe_cpl.eq(wqe_cpl_inc)
        with m.If(use_of(W_ADV, "push") & e_last):
            push_cpl(cur.wqe_cpl, CqeStatus.SUCCESS)
        with m.If(use_of(W_SACK, "cur")):
            m.d.sync += cur.sacked.eq(cur.sacked | off_bit)
        # a PSN delivered: by the ADV walk unless SACKed before, by every SACK walk step
        with m.If((use_of(W_ADV, "dlv") & ~cur.sacked[0]) | use_of(W_SACK, "dlv")):
            deliver()
        with m.If(use_of(W_LOSS, "push") & loss_hole):
            push_retx(RetxReason.SACK_HOLE)
        with m.If(use_of(W_LOSS, "cur") & loss_hole):
            m.d.sync += cur.fast_done.eq(cur.fast_done | off_bit)
        with m.If(use_of(W_TMO, "push")):
            push_retx(RetxReason.TIMEOUT)
            m.d.sync += blamed.eq(blamed | onehot(e_ev, E))
        # Loss evidence (USE): each hole of the loss walk, and the timeout walk's first
        # PSN on each EV (blamed: the EVs blamed in this walk so far); the EV may become
        # ASSUMED_BAD (never below the floor). Written per EV, an AND of e_ev's decode
        # and that EV's own flip-flops, rather than through selects on e_ev, which put
        # a select of the EVs' flags behind the block RAM's output.
        def blame_on(ev_new, tag):  # ev_new: the EV not yet blamed in this walk
            return (use_of(W_LOSS, tag) & loss_hole) | (use_of(W_TMO, tag) & ev_new)
        for i in range(E):
            hit = Signal(name=f"blame_{i}")
            m.d.comb += hit.eq(blame_on(~blamed[i], "ev") & (e_ev == i))
            with m.If(hit):
                m.d.sync += [cur.ev_drops[i].eq(drops_inc[i]), cur.ev_loss[i].eq(loss_inc[i])]
                with m.If(bad_ok[i]):
                    m.d.sync += cur.ev_state[i].eq(EvState.ASSUMED_BAD)
        with m.If(blame_on(~bit_at(blamed, e_ev), "push")):
            with m.If(bit_at(bad_ok, e_ev)):
                push_ev()
                count("ev_to_bad")
            with m.Elif(bit_at(to_bad, e_ev)):
                count("floor_blocked")

        # ---- CMD's reset and RTS entry of the working copy ---------------------------------
        # last, as the outermost muxes of the bits they clear (flip-flop resets),
        # each field under one flag (reset_go, rts_go, clear_go: above): a reset
        # clears the record but timer_gen (kept) and fresh (set), an RTS entry
        # clears the fields both clear and sets its own.
        both = ("una", "nxt", "sacked", "fast_done", "retries", "md_active", "cwnd_acc",
                "delay_high", "ev_loss", "op_err")
        with m.If(clear_go):
            m.d.sync += [cur[f].eq(0) for f in both]
            m.d.sync += cur.fresh.eq(1)
        with m.If(reset_go):
            m.d.sync += [cur[f].eq(0) for f, _ in Rec if f not in both + ("fresh", "timer_gen")]
            # every WQE posted so far is done with: a doorbell in ERROR after this
            # flushes from the producer index of the reset on
            m.d.sync += [cur.timer_gen.eq(cur.timer_gen), cur.wqe_cpl.eq(sq_end),
                         cur.wqe_sent.eq(sq_end)]
        with m.If(rts_go):
            m.d.sync += [
                cur.state.eq(QpState.RTS), cur.wqe_cpl.eq(sq_end), cur.wqe_sent.eq(sq_end),
                cur.cwnd.eq(cwnd_clamped),
            ]

        m.d.comb += self.event_count.eq(f_evq.level)
        return m

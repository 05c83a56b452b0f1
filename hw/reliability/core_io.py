"""The reliability core's output FIFOs, event counter strobes, memories (QP records, producer
indices), pushes and FIFO room. Builders of ``ReliabilityCore`` (hw/reliability/core.py);
see hw/reliability/core_ctx.py for how they share signals."""

from amaranth.hdl import Cat, Const, Signal
from amaranth.lib.memory import Memory

from hw.headers import Opcode
from hw.pipeline import BlockRamFIFO

from .completion import CompletionRequest
from .core_layouts import CORE_COUNTERS, EvEvent
from .ev_evidence import EvEvidence
from .layouts import EvUpdate, RetxReason, RetxRequest


def fifos_counters_memories(ctx):
    """The output FIFOs, the event counters' strobes (``counter_strobes``, registered), the
    record and producer-index memories."""
    m, core, Rec, nq = ctx.m, ctx.core, ctx.Rec, ctx.nq

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

    f_retx = out_fifo("retx_fifo", core.retx, 16, "block")
    f_ack = out_fifo("ack_fifo", core.ack_update, 4, "block")
    f_evu = out_fifo("ev_update_fifo", core.ev_update, 8)
    f_cwnd = out_fifo("cwnd_fifo", core.cwnd_update, 4)
    f_cc = out_fifo("cc_fifo", core.cc_event, 16)
    f_qps = out_fifo("qp_state_fifo", core.qp_state_update, 4)
    f_cpl = out_fifo("cpl_fifo", core.cpl, 16)
    f_probe = out_fifo("probe_fifo", core.probe_req, 8)
    f_evq = out_fifo("event_fifo", core.event, 32, "block")

    # --- counters -------------------------------------------------------------
    # the event's strobe, registered: the engine's counter bank counts it
    pulse = {n: Signal(name=f"cnt_{n}") for n in CORE_COUNTERS}
    for n in CORE_COUNTERS:
        m.d.sync += core.counter_strobes[n].eq(pulse[n])

    def count(name):
        m.d.comb += pulse[name].eq(1)

    # --- memories ---------------------------------------------------------------
    # The record memory's write enable per column group of at most 64 bits
    # (granularity; the row padded to a multiple of it), each group's enable a
    # flip-flop of its own (rec_wen, core_state.py): at few QPs the memory is flip-flops,
    # whose row enables are those bits ANDed with the row's address decode.
    rec_groups = -(-Rec.size // 64)
    rec_gran = -(-Rec.size // rec_groups)
    m.submodules.rec_mem = rec_mem = Memory(
        shape=rec_groups * rec_gran, depth=nq, init=[])
    rec_rd = rec_mem.read_port()
    rec_csr = rec_mem.read_port()
    rec_wr = rec_mem.write_port(granularity=rec_gran)
    rec_rd_data = Signal(Rec)
    m.d.comb += [rec_csr.addr.eq(core.rec_addr),
                 core.rec_data.eq(rec_csr.data[: Rec.size]),
                 rec_rd_data.eq(rec_rd.data[: Rec.size])]

    # per QP: the send queue's producer index (WQEs the host has posted) and
    # whether a doorbell has set it since reset; read with the record
    m.submodules.sq_pi_mem = sq_pi_mem = Memory(shape=17, depth=nq, init=[])
    sq_pi_rd, sq_pi_wr = sq_pi_mem.read_port(), sq_pi_mem.write_port()
    sqp = core.sq_producer.payload
    m.d.comb += [
        core.sq_producer.ready.eq(1),
        sq_pi_wr.addr.eq(sqp.qpn), sq_pi_wr.data.eq(Cat(sqp.producer, Const(1, 1))),
        sq_pi_wr.en.eq(core.sq_producer.valid & (sqp.qpn < nq)),
        sq_pi_rd.addr.eq(rec_rd.addr),
    ]
    ctx.export(f_retx=f_retx, f_ack=f_ack, f_evu=f_evu, f_cwnd=f_cwnd, f_cc=f_cc, f_qps=f_qps,
               f_cpl=f_cpl,
               f_probe=f_probe, f_evq=f_evq, count=count, rec_groups=rec_groups, rec_rd=rec_rd,
               rec_wr=rec_wr, rec_rd_data=rec_rd_data, sq_pi_rd=sq_pi_rd, sq_pi_wr=sq_pi_wr,
               sqp=sqp)


def pushes_and_room(ctx):
    """The FIFOs' pushes, the loss evidence per EV, and the room in the output FIFOs."""
    m, core, q, nq, E, P, count = ctx.m, ctx.core, ctx.q, ctx.nq, ctx.E, ctx.P, ctx.count
    f_evu, f_evq, f_retx, f_cpl, cur = ctx.f_evu, ctx.f_evq, ctx.f_retx, ctx.f_cpl, ctx.cur
    cfg, f_ack, f_cwnd, f_qps, f_cc = ctx.cfg, ctx.f_ack, ctx.f_cwnd, ctx.f_qps, ctx.f_cc

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

    def push_retx(reason):  # the data: core_datapath.py, by state
        m.d.comb += f_retx.w_en.eq(1)
        count({RetxReason.TIMEOUT: "retx_timeout", RetxReason.SACK_HOLE: "retx_sack",
               RetxReason.NAK_TRIMMED: "retx_nak"}[reason])

    def push_cpl(wqe_index, status, clear=0):
        m.d.comb += [
            cpl_req.wqe_index.eq(wqe_index), cpl_req.status.eq(status),
            cpl_req.clear.eq(clear), f_cpl.w_en.eq(1),
        ]

    def push_ev():  # the data: core_datapath.py, by state
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
    ack = core.peer_ack.payload
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
    # FINAL's four FIFOs together (FINAL's write waits for it; the record memory's
    # write enables, flip-flops, are set from what it registers: rec_wen, core_state.py)
    room_final = Signal()
    room_final_d = Signal()  # what room_final registers
    m.d.comb += room_final_d.eq(room(f_ack) & room(f_cwnd) & room(f_qps) & room(f_cc))
    m.d.sync += [room_walk.eq(room(f_retx) & room(f_cpl) & room(f_evu)),
                 room_final.eq(room_final_d)]
    ctx.export(retx_req=retx_req, evu=evu, evt=evt, room=room, push_retx=push_retx, ack=ack,
               push_cpl=push_cpl, push_ev=push_ev, loss_inc=loss_inc, drops_inc=drops_inc,
               to_bad=to_bad, bad_ok=bad_ok, ack_ok=ack_ok, is_ack=is_ack, is_probe=is_probe,
               r_retx=r_retx, r_cpl=r_cpl, r_evu=r_evu, room_walk=room_walk, room_final=room_final,
               room_final_d=room_final_d)

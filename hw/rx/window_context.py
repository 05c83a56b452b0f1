"""What the state families of ``RxPsnWindow``'s one state machine share: the
machine, the memories' ports, the sub-components and the registers of the
operation being worked on. ``RxPsnWindow.elaborate`` makes them and passes
one ``WindowContext`` to each family's builder (window_start.py,
window_check.py, window_mark.py, window_scan.py, window_ack.py)."""

from dataclasses import dataclass

from amaranth.hdl import Module, Signal

from hw.pipeline import OneHotFSM

__all__ = ["WindowContext"]


@dataclass
class WindowContext:
    """The shared state of one ``RxPsnWindow``. A builder reads what it needs
    of it and drives only what its states own: a register loaded in two
    families (``qs``, ``bm_word``, ``ack_syn``) is written in
    states of each, never in one cycle by two."""

    m: Module
    win: object  # the RxPsnWindow: parameters and ports
    fsm: OneHotFSM
    W: int  # sack_bits: the bitmap word
    lw: int  # log2 of W: a PSN's position in its word
    lr: int  # log2 of ring_words: the word index in the QP's ring
    # the memories' ports: the QP rows (q_*) and the bitmap (b_*)
    q_rd: object
    q_wr: object
    b_rd: object
    b_wr: object
    # the sub-components
    scan: object  # TimerScan
    flight: object  # InFlightTable
    pending: object  # PendingTable
    ack_reader: object  # AckReader
    # the operation being worked on
    qp: Signal  # the QP, loaded in IDLE
    rq: Signal  # the request (a B verdict's PSN), loaded in IDLE
    qs: Signal  # the QP's row, loaded as it arrives (qs_load), written in WRITEBACK/INIT
    cfg: Signal  # the QP's configuration, loaded with qs
    qs_load: Signal  # the QP's row arrives in the next cycle
    bm_word: Signal  # the bitmap word index being read (written in MARK, ADV)
    rq_bit: Signal  # rq.psn's position in its word, one-hot, registered
    done_tag: Signal  # the in-flight slot of the B verdict being handled
    mark_ackreq: Signal  # the verdict's packet asked for an ACK (from its slot)
    mark_ce: Signal  # the verdict's packet was CE-marked (from its slot)
    rq_arrival: Signal  # the time IDLE took the request (its in-flight row's)
    # IDLE started the check of a WITH_IMMEDIATE packet while writes were in
    # flight without taking it: CHECK_X takes it (req.ready) unless it retries
    peek: Signal
    mark_arrival: Signal  # the time the verdict's packet was taken (from its slot)
    # CHECK_X accepted the packet: WRITEBACK enters it at these one-hot positions
    accept: Signal
    flight_enter: Signal
    pend_enter: Signal
    # the outputs' registers
    place_valid: Signal
    place_cmd: Signal
    cqe_valid: Signal
    cqe_job: Signal
    cqe_free_q: Signal  # ~cqe_valid a cycle late
    ack_syn: Signal  # the syndrome of the ACK/NAK to send

    @property
    def st(self):
        """The state flip-flops, one per state."""
        return self.fsm.st

    @property
    def cnt(self):
        """The counter strobes."""
        return self.win.counters

    def widx(self, psn):
        """The index in the QP's ring of the bitmap word that holds ``psn``."""
        return psn[self.lw : self.lw + self.lr]

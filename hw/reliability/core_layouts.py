"""The reliability core's layouts and constants: the QP record, the per-QP
configuration, the global parameters, the controller command and the EV event."""

from amaranth.lib import data

from hw.protocol import PSN_BITS

from .intake import SOURCES
from .registers import COUNTER_NAMES, RTT_NS_BITS

__all__ = ["CORE_COUNTERS", "EXP_FOREVER", "GEN_BITS", "K_ACK", "K_CMD", "K_DB", "K_PROBE",
           "K_SENT", "K_SWEEP", "K_TMO", "RTT_SHIFT", "T_ACK", "T_CMD", "T_DB", "T_SENT",
           "T_SWEEP", "T_TMO", "W_ADV", "W_LOSS", "W_SACK", "W_TMO", "CcEvent", "Command",
           "EvEvent", "GlobalParams", "RelConfig", "qp_record"]

RTT_SHIFT = 4  # RTT timestamps count 16-cycle units, 16 bits wide
EXP_FOREVER = 25
GEN_BITS = 4
# the event in the working copy (the ``kind`` register; LOAD goes on by it)
K_SENT, K_ACK, K_PROBE, K_TMO, K_CMD, K_SWEEP, K_DB = range(7)
# the walk's kind: the bits of the one-hot ``walk_kind``
W_ADV, W_SACK, W_LOSS, W_TMO = range(4)
# the bits of EventPicker's ``take`` (hw/reliability/intake.py SOURCES, in its order)
T_CMD, T_SENT, T_ACK, T_TMO, T_SWEEP, T_DB = range(len(SOURCES))
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


# rtt_ns: a probe answer's round trip (ProbeReplyCheck), 0 for other events. 72 bits:
# the event queue stays two DP16KD (36 bits each) wide
EvEvent = data.StructLayout({"qpn": 24, "ev_index": 8, "old": 2, "new": 2, "drops": 16,
                             "rtt_ns": RTT_NS_BITS})


def CcEvent(num_qps, window):
    """An event of a QP for its congestion control (``NsccPath``): ``kind`` ACK (an
    ACK or NAK TRIMMED of a QP in RTS; ``trim`` for the latter), TIMEOUT (a
    retransmit timeout acted on) or START (the QP entered RTS), as
    ``hw.reliability.nscc.NsccKind`` numbers them; ``newly``, the PSNs the ACK newly
    acknowledged; ``rtt``, its RTT sample, and ``now``, both in 16-cycle units."""
    return data.StructLayout({"qpn": range(num_qps), "kind": 2, "trim": 1,
                              "newly": range(window + 1), "ece": 1, "rtt_valid": 1,
                              "rtt": 16, "now": 16})


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
            "una": PSN_BITS,
            "nxt": PSN_BITS,
            "md_recover": PSN_BITS,
            "wqe_cpl": 16,
            "wqe_sent": 16,
            # TX refused WQE wqe_sent - 1 (unknown opcode): once nothing is in flight it
            # completes LOC_QP_OP_ERR, the rest FLUSHED, and the QP goes to ERROR
            "op_err": 1,
            "cwnd": 16,
            "cwnd_acc": 24,
            "sacked": window,
            # the count of sacked's bits, kept with it (ack_update gives it to TX)
            "sacked_n": range(window + 1),
            "fast_done": window,
            "ev_state": data.ArrayLayout(2, evs),
            "ev_loss": data.ArrayLayout(4, evs),
            "ev_drops": data.ArrayLayout(16, evs),
        }
    )

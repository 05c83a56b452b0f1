"""Record layouts and codes shared by the reliability blocks and their users (TX, RX)."""

from amaranth.lib import data

from ..protocol import PSN_BITS, CqeStatus, EvState, QpState, Syndrome

__all__ = [
    "AckUpdate",
    "CqeStatus",
    "CwndUpdate",
    "EvState",
    "EvUpdate",
    "QpState",
    "QpStateUpdate",
    "RetxReason",
    "RetxRequest",
    "SentRecord",
    "SqProducer",
    "WimmDone",
    "WqeFlags",
    "WqeOpcode",
    "NAK_INVALID_REQUEST",
    "NAK_REMOTE_ACCESS",
    "NAK_TRIMMED",
    "AETH_ACK",
    "PSN_BITS",
]

AETH_ACK = Syndrome.ACK
NAK_INVALID_REQUEST = Syndrome.NAK_INVALID_REQUEST
NAK_REMOTE_ACCESS = Syndrome.NAK_REMOTE_ACCESS
NAK_TRIMMED = Syndrome.NAK_TRIMMED


class WqeOpcode:
    """WQE byte 0x00 (the WQE format: hw/tx/layouts.py ``WQE_LAYOUT``). Any other value
    is refused: the WQE completes with LOC_QP_OP_ERR and the QP goes to ERROR."""

    WRITE = 0
    WRITE_WITH_IMM = 1
    KNOWN = (WRITE, WRITE_WITH_IMM)


class WqeFlags:
    """WQE byte 0x01: SIGNALED asks for a send CQE on success (errors always get one)."""

    SIGNALED = 1 << 0


class RetxReason:
    TIMEOUT, SACK_HOLE, NAK_TRIMMED = 0, 1, 2


# TX -> reliability: one record per data packet put on the wire, or (op_err = 1) for
# a WQE that TX fetched and refused (unknown opcode): no packet, psn and ev_index
# carry nothing, and TX sends nothing more from the QP until its qp_ctrl is written.
SentRecord = data.StructLayout(
    {"qpn": 24, "psn": PSN_BITS, "ev_index": 8, "retx": 1, "last": 1, "wqe_index": 16,
     "op_err": 1}
)
# host -> TX doorbell, seen by reliability: the send queue's producer index (WQEs posted),
# so that an ERROR completes every posted WQE, begun by TX or not.
SqProducer = data.StructLayout({"qpn": 24, "producer": 16})
# reliability -> TX
RetxRequest = data.StructLayout({"qpn": 24, "psn": PSN_BITS, "reason": 2})
# sacked: how many PSNs from una_psn up to the last sent are SACKed (TX's window
# holds the others)
AckUpdate = data.StructLayout({"qpn": 24, "una_psn": PSN_BITS, "sacked": 16})
EvUpdate = data.StructLayout({"qpn": 24, "ev_index": 8, "state": 2})
CwndUpdate = data.StructLayout({"qpn": 24, "cwnd": 16})
# a WRITE_WITH_IMM WQE of the QP completed SUCCESS (its count against max_wimm goes down)
WimmDone = data.StructLayout({"qpn": 24})
QpStateUpdate = data.StructLayout({"qpn": 24, "state": 3})

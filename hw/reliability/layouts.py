"""Record layouts and codes shared by the reliability blocks and their users (TX, RX)."""

from amaranth.lib import data

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
    "NAK_TRIMMED",
    "AETH_ACK",
    "PSN_BITS",
]

PSN_BITS = 24
AETH_ACK = 0x1F
NAK_TRIMMED = 0x70


class QpState:
    RESET, INIT, RTR, RTS, ERROR = 0, 1, 2, 3, 4


class EvState:
    GOOD, ASSUMED_BAD, DENIED = 0, 1, 2


class RetxReason:
    TIMEOUT, SACK_HOLE, NAK_TRIMMED = 0, 1, 2


class CqeStatus:
    SUCCESS, RETRY_EXCEEDED, FLUSHED = 0, 1, 5


# TX -> reliability: one record per data packet put on the wire.
SentRecord = data.StructLayout(
    {"qpn": 24, "psn": 24, "ev_index": 8, "retx": 1, "last": 1, "wqe_index": 16}
)
# host -> TX doorbell, seen by reliability: the send queue's producer index (WQEs posted),
# so that an ERROR completes every posted WQE, begun by TX or not.
SqProducer = data.StructLayout({"qpn": 24, "producer": 16})
# reliability -> TX
RetxRequest = data.StructLayout({"qpn": 24, "psn": 24, "reason": 2})
AckUpdate = data.StructLayout({"qpn": 24, "una_psn": 24})
EvUpdate = data.StructLayout({"qpn": 24, "ev_index": 8, "state": 2})
CwndUpdate = data.StructLayout({"qpn": 24, "cwnd": 16})
QpStateUpdate = data.StructLayout({"qpn": 24, "state": 3})

"""Records passed between the blocks of the receive pipeline."""

from amaranth.hdl import unsigned
from amaranth.lib import data, enum

from hw.headers import AETH, BTH, IPV6, PROBE, RETH, SACK, sack_bitmap

from ..protocol import PSN_BITS, SVC_TIME_BITS, CqeStatus, QpState

__all__ = [
    "COUNTER_NAMES",
    "ParsedHeader",
    "ParserRecord",
    "Verdict",
    "AckJob",
    "CqeJob",
    "QpConfig",
    "QpState",
    "ReqKind",
    "WindowReq",
    "QpRxState",
    "MAX_PENDING",
    "PendingEntry",
    "PendingCqe",
    "InFlightRow",
    "CQE_STATUS_SUCCESS",
    "CQE_FLAG_PHASE",
    "plane_field",
]

def plane_field(plane_bits):
    """A record's ``plane`` field: ``plane_bits`` wide, or no field at all with
    one plane (0 bits: a zero-width field would reach the Verilog as an
    undriven ``[-1:0]`` wire)."""
    return {"plane": unsigned(plane_bits)} if plane_bits else {}


# an IPv6 frame's flow label, as RX keeps it for the ACKs it echoes into
FLOW_LABEL_BITS = next(width for name, _, width in IPV6.fields if name == "flow_label")


def flow_field(ipv6):
    """A record's ``flow`` field (the flow label) in a build with ``ipv6``, or none."""
    return {"flow": unsigned(FLOW_LABEL_BITS)} if ipv6 else {}


CQE_STATUS_SUCCESS = CqeStatus.SUCCESS
CQE_FLAG_PHASE = 0x80

COUNTER_NAMES = (
    "accepted",
    "bad_frame",
    "truncated",
    "not_ipv4",
    "ipv4_options",
    "ipv4_checksum",
    "not_roce",
    "unknown_opcode",
    "length_mismatch",
    "bad_icrc",
)


class Verdict(enum.Enum, shape=4):
    """What the parser did with a frame, in the order of ``COUNTER_NAMES``."""

    ACCEPTED = 0
    BAD_FRAME = 1
    TRUNCATED = 2
    NOT_IPV4 = 3
    IPV4_OPTIONS = 4
    IPV4_CHECKSUM = 5
    NOT_ROCE = 6
    UNKNOWN_OPCODE = 7
    LENGTH_MISMATCH = 8
    BAD_ICRC = 9


class ParsedHeader(data.StructLayout):
    """One accepted frame's header fields; fields its opcode does not carry are 0.
    ``plane`` (``plane_bits`` wide; no field with one plane; the last field, so
    that the layout without it is a prefix) is the plane the frame arrived on.
    With ``ipv6`` the addresses are 128 bits (an IPv4 one in the low 32),
    ``v6`` says the frame came over IPv6 and ``flow`` is its flow label (0
    over IPv4; STEV's EV bits 31..16 ride there)."""

    def __init__(self, sack_bits: int = 64, plane_bits: int = 0, ipv6: bool = False):
        sack_bitmap(sack_bits)  # checks the width
        ip_bits = 128 if ipv6 else 32
        super().__init__(
            {
                "eth_src": unsigned(48),
                "eth_dst": unsigned(48),
                "ip_src": unsigned(ip_bits),
                "ip_dst": unsigned(ip_bits),
                **({"v6": unsigned(1)} if ipv6 else {}),
                **flow_field(ipv6),
                "dscp": unsigned(6),
                "ecn": unsigned(2),
                "ev": unsigned(16),
                "bth": BTH.layout,
                "reth": RETH.layout,
                "imm": unsigned(32),
                "aeth": AETH.layout,
                "sack": SACK.layout,
                "sack_bitmap": unsigned(sack_bits),
                "probe": PROBE.layout,
                "payload_len": unsigned(16),
                "trimmed": unsigned(1),
                **plane_field(plane_bits),
            }
        )


class ParserRecord(data.StructLayout):
    """An accepted frame's header as the RX parser's header FIFO holds it:
    the fields of ``ParsedHeader`` but its extension headers (``EXTENSIONS``),
    which no opcode has two of and which share their bytes here, as the raw
    ``ext_bytes`` bytes after the BTH and the opcode class; and ``beats``, the
    payload's beats in the frame FIFO."""

    EXTENSIONS = ("reth", "imm", "aeth", "sack", "sack_bitmap", "probe")

    def __init__(self, sack_bits, ext_bytes, max_payload_beats, plane_bits=0, ipv6=False):
        out_layout = ParsedHeader(sack_bits, plane_bits, ipv6)
        super().__init__(
            {
                **{name: field.shape for name, field in out_layout
                   if name not in self.EXTENSIONS},
                "ext": unsigned(8 * ext_bytes),
                "is_write": unsigned(1),
                "is_imm": unsigned(1),
                "is_ack": unsigned(1),
                "is_probe": unsigned(1),
                # the payload's beats in the frame FIFO, counted here so that the
                # output stage adds them to rel_ptr straight from the memory
                "beats": range(max_payload_beats + 1),
            }
        )




class ReqKind(enum.Enum, shape=3):
    """What the validator decided about a frame, for the PSN window engine."""

    DATA = 0  # a WRITE from the bound peer into a registered region: window check next
    TRIM = 1  # a trimmed WRITE from the bound peer: NAK TRIMMED if enabled
    NAK = 2  # a WRITE from the bound peer that fails the MR check: NAK ``syndrome``
    DROP = 3  # nothing to do but drain its payload
    PROBE = 4  # an EV probe request from the bound peer: answer it


class QpConfig(data.StructLayout):
    """The host-written attributes of one QP (the ``QP_*`` registers); the CQ
    base is an ``addr_width``-bit DMA address. With ``ipv6``, ``peer_ip`` is
    128 bits (an IPv4 address in the low 32) and ``peer_v6`` the peer's family."""

    def __init__(self, addr_width=64, ipv6=False):
        v6 = {"peer_ip": unsigned(128), "peer_v6": unsigned(1)} if ipv6 else {}
        super().__init__(
            {
                "state": QpState,
                "trim_nack": unsigned(1),
                "mtu": unsigned(3),
                "mpr": unsigned(8),
                "pd": unsigned(8),
                "ack_n": unsigned(8),
                "ack_t": unsigned(16),
                "peer_ip": unsigned(32),
                "peer_qpn": unsigned(24),
                "cq_base": unsigned(addr_width),
                "cq_log2": unsigned(5),
                "cq_enable": unsigned(1),
                "cq_cons": unsigned(16),
                **v6,
            }
        )


class WindowReq(data.StructLayout):
    """One parsed and validated frame, from the validator to the window engine.

    ``va`` is the RETH VA as a DMA address: its low ``addr_width`` bits, all
    of it for a ``DATA`` request (the validator checked that it fits);
    ``plane`` the plane it arrived on (``plane_bits``, none with one plane);
    ``flow`` (``ipv6``) its flow label, which the QP's ACKs echo with ``ev``."""

    def __init__(self, qp_bits, addr_width=64, plane_bits=0, ipv6=False):
        super().__init__(
            {
                "kind": ReqKind,
                "syndrome": unsigned(8),
                "qp": unsigned(qp_bits),
                "psn": unsigned(PSN_BITS),
                "opcode": unsigned(8),
                "ackreq": unsigned(1),
                "ce": unsigned(1),
                "va": unsigned(addr_width),
                "payload_len": unsigned(16),
                "dma_len": unsigned(32),
                "imm": unsigned(32),
                "ev": unsigned(16),
                "mac": unsigned(48),
                "probe_id": unsigned(32),
                "probe_ev": unsigned(16),
                "timestamp": unsigned(64),
                **flow_field(ipv6),
                **plane_field(plane_bits),
            }
        )


class AckJob(data.StructLayout):
    """An ACK, NAK or probe response for the frame builder; ``plane``
    (``plane_bits``, none with one plane) is the plane it leaves on. With
    ``ipv6``, ``dst_ip`` is 128 bits (an IPv4 address in its low 32), ``v6``
    says the frame goes over IPv6 and ``flow`` is its flow label (the last
    data frame's, with ``ev`` its source port: the EV, STEV's too, echoed)."""

    def __init__(self, sack_bits, plane_bits=0, ipv6=False):
        v6 = {"dst_ip": unsigned(128), "v6": unsigned(1)} if ipv6 else {}
        super().__init__(
            {
                "probe": unsigned(1),
                "syndrome": unsigned(8),
                "psn": unsigned(PSN_BITS),
                "dqpn": unsigned(24),
                "msn": unsigned(24),
                "cum_psn": unsigned(PSN_BITS),
                "sack_base": unsigned(PSN_BITS),
                "bitmap": unsigned(sack_bits),
                "ece": unsigned(1),
                "ce_count": unsigned(16),
                "svc_time": unsigned(SVC_TIME_BITS),
                "ev": unsigned(16),
                "dst_mac": unsigned(48),
                "dst_ip": unsigned(32),
                "probe_id": unsigned(32),
                "probe_ev": unsigned(16),
                "timestamp": unsigned(64),
                **plane_field(plane_bits),
                **v6,
                **flow_field(ipv6),
            }
        )


class CqeJob(data.StructLayout):
    """A receive completion and where it goes (an ``addr_width``-bit DMA address)."""

    def __init__(self, addr_width=64):
        super().__init__(
            {
                "addr": unsigned(addr_width),
                "msn": unsigned(24),
                "byte_len": unsigned(32),
                "imm": unsigned(32),
                "qpn": unsigned(24),
                "status": unsigned(8),
                "opcode": unsigned(8),
                "phase": unsigned(1),
            }
        )


# ---- the PSN window engine's state (hw/rx/window.py and its tables)

class QpRxState(data.StructLayout):
    """What the window engine keeps per QP (one memory row); ``plane``
    (``plane_bits``, none with one plane) is the plane of the last frame from
    the peer, which its ACKs take, and ``flow`` (``ipv6``) its flow label."""

    def __init__(self, plane_bits=0, ipv6=False):
        super().__init__(
            {
                "epsn": unsigned(PSN_BITS),  # expected PSN = cum_psn + 1
                "msn": unsigned(24),  # messages completed
                "unacked": unsigned(8),  # packets placed since the last ACK
                "ece": unsigned(1),
                "ce_count": unsigned(16),
                "armed": unsigned(1),  # ACK timer running
                "deadline": unsigned(24),
                "ev": unsigned(16),  # EV and MAC of the last frame from the peer
                "mac": unsigned(48),
                "cq_prod": unsigned(16),
                # the window's time (cycles) when it took the newest packet placed
                "svc_from": unsigned(PSN_BITS),
                **flow_field(ipv6),
                **plane_field(plane_bits),
            }
        )


# The pending-completion table's entries (LAST packets from acceptance until the
# cumulative PSN passes them), one table for all QPs (docs/rx.md).
MAX_PENDING = 8


class PendingEntry(data.StructLayout):
    """A LAST packet accepted but not yet passed by the cumulative PSN: the
    fields matched in every entry at once (registers; what its completion
    reports is a ``PendingCqe`` row)."""

    def __init__(self, qp_bits, tag_bits):
        super().__init__(
            {
                "valid": unsigned(1),
                "qp": unsigned(qp_bits),
                "psn": unsigned(PSN_BITS),
                "in_flight": unsigned(1),  # its write has no B verdict yet
                "imm": unsigned(1),  # WITH_IMMEDIATE: holds a slot of its QP's CQ
                "tag": unsigned(tag_bits),  # its in-flight slot while in_flight
            }
        )


class PendingCqe(data.StructLayout):
    """What a pending entry's completion reports (a LUT RAM row, read by entry)."""

    def __init__(self):
        super().__init__(
            {
                "imm_flag": unsigned(1),
                "opcode": unsigned(8),
                "imm": unsigned(32),
                "dma_len": unsigned(32),
            }
        )


class InFlightRow(data.StructLayout):
    """A packet accepted and being written, not yet marked in the bitmap (a LUT
    RAM row, read by tag; its qp and psn are also kept in registers, with
    the slot's valid bit, for the duplicate check)."""

    def __init__(self, qp_bits):
        super().__init__(
            {
                "qp": unsigned(qp_bits),
                "psn": unsigned(PSN_BITS),
                "ackreq": unsigned(1),
                "ce": unsigned(1),
                "arrival": unsigned(PSN_BITS),  # the window's time (cycles) when taken
            }
        )

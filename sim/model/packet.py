"""The model's in-memory packet and the wire sizes of docs/protocol.md.

One ``Packet`` object per frame on the wire; fields are the protocol fields
the transport needs (not the bytes). ``sim.mrcsim`` turns a sample of them
into real frames with ``host_driver.layers`` for the pcap.
"""

from __future__ import annotations

from hw.protocol import PSN_BITS, PSN_HALF, PSN_MASK  # noqa: F401  (re-exported for the model)

# Packet kinds (the model's own classification of a frame)
DATA = 0
ACK = 1  # ACKNOWLEDGE: ACK or NAK, see syndrome
PROBE_REQ = 2
PROBE_RESP = 3

# Opcodes: the wire format's own constants (docs/protocol.md, host_driver/layers.py)
from host_driver.layers import (  # noqa: E402, F401  (re-exported for the model)
    OP_ACKNOWLEDGE,
    OP_PROBE_REQ,
    OP_PROBE_RESP,
    OP_WRITE_FIRST,
    OP_WRITE_LAST,
    OP_WRITE_LAST_IMM,
    OP_WRITE_MIDDLE,
    OP_WRITE_ONLY,
    OP_WRITE_ONLY_IMM,
)

LAST_OPCODES = frozenset((OP_WRITE_LAST, OP_WRITE_LAST_IMM, OP_WRITE_ONLY, OP_WRITE_ONLY_IMM))
IMM_OPCODES = frozenset((OP_WRITE_LAST_IMM, OP_WRITE_ONLY_IMM))

# AETH syndromes
from host_driver.layers import (  # noqa: E402, F401  (re-exported for the model)
    AETH_ACK,
    NAK_INVALID_REQUEST,
    NAK_PSN_SEQ_ERROR,
    NAK_REMOTE_ACCESS,
    NAK_TRIMMED,
)
from hw.headers import PATH_MTU  # noqa: E402


def length_check(opcode: int, payload_len: int, dma_len: int, mtu: int | None) -> str | None:
    """The responder's length rules (docs/rx.md, "Validation"): None, or the
    RX counter of the first that fails, both NAK 0x61 (invalid request).
    ``mtu`` is the QP's path MTU in bytes (None: not a valid one).

    ``bad_length``: the payload is above the MTU, or a FIRST/MIDDLE payload
    is not the MTU. ``bad_reth``: the RETH DMA length L is above 2^31 or not
    that of a message this packet can belong to: ONLY carries L; FIRST needs
    L > MTU and MIDDLE L > 2 MTU (packets follow); LAST needs L > MTU and
    carries the rest after whole MTUs (1 <= payload, payload = L mod MTU)."""
    if mtu not in PATH_MTU.values() or payload_len > mtu or (
            opcode in (OP_WRITE_FIRST, OP_WRITE_MIDDLE) and payload_len != mtu):
        return "bad_length"
    if dma_len > 1 << 31:
        return "bad_reth"
    if opcode in (OP_WRITE_ONLY, OP_WRITE_ONLY_IMM):
        ok = payload_len == dma_len
    elif opcode == OP_WRITE_FIRST:
        ok = dma_len > mtu
    elif opcode == OP_WRITE_MIDDLE:
        ok = dma_len > 2 * mtu
    else:
        ok = dma_len > mtu and payload_len >= 1 and payload_len % mtu == dma_len % mtu
    return None if ok else "bad_reth"


def message_extent(opcode: int, va: int, payload_len: int, dma_len: int) -> tuple[int, int]:
    """[lo, hi): the bytes the region check covers for this packet: a FIRST
    packet's whole message (it starts at its VA), a LAST packet's whole
    message (it ends with it: L - payload bytes before), else the packet's own."""
    if opcode == OP_WRITE_FIRST:
        return va, va + dma_len
    if opcode in (OP_WRITE_LAST, OP_WRITE_LAST_IMM):
        return va - (dma_len - payload_len), va + payload_len
    return va, va + payload_len

# Header sizes in bytes (frame without preamble/FCS), docs/protocol.md
HDR_ETH, HDR_IPV4, HDR_IPV6, HDR_UDP, HDR_BTH = 14, 20, 40, 8, 12
HDR_RETH, HDR_IMMDT, HDR_AETH, HDR_SACK_FIXED, HDR_PROBE, ICRC = 16, 4, 4, 12, 16, 4
L2_WIRE_EXTRA = 4 + 8 + 12  # FCS, preamble, inter-frame gap
DATA_HDR = HDR_ETH + HDR_IPV4 + HDR_UDP + HDR_BTH + HDR_RETH  # 70
# A frame over IPv6 (a QP whose peer is IPv6: ``QpConfig.ipv6``) is this much longer.
IPV6_EXTRA = HDR_IPV6 - HDR_IPV4


def _ip(ipv6: bool) -> int:
    return IPV6_EXTRA if ipv6 else 0


def data_wire_len(payload_len: int, imm: bool, ipv6: bool = False) -> int:
    """Bytes a data packet occupies on the wire (incl. FCS, preamble, IFG)."""
    pad = (-payload_len) & 3
    return (DATA_HDR + _ip(ipv6) + (HDR_IMMDT if imm else 0) + payload_len + pad + ICRC
            + L2_WIRE_EXTRA)


def trimmed_wire_len(imm: bool, ipv6: bool = False) -> int:
    return DATA_HDR + _ip(ipv6) + (HDR_IMMDT if imm else 0) + L2_WIRE_EXTRA


def ack_wire_len(sack_bits: int, ipv6: bool = False) -> int:
    return (HDR_ETH + HDR_IPV4 + _ip(ipv6) + HDR_UDP + HDR_BTH + HDR_AETH + HDR_SACK_FIXED
            + sack_bits // 8 + ICRC + L2_WIRE_EXTRA)


PROBE_WIRE_LEN = HDR_ETH + HDR_IPV4 + HDR_UDP + HDR_BTH + HDR_PROBE + ICRC + L2_WIRE_EXTRA


def probe_wire_len(ipv6: bool = False) -> int:
    """A probe request's or response's bytes on the wire."""
    return PROBE_WIRE_LEN + _ip(ipv6)


class Forged:
    """The addresses a frame injected by an attacker claims (any of them None:
    the real host's). ``Packet.forged`` holds one."""

    __slots__ = ("src_ip", "dst_ip", "dst_mac")

    def __init__(self, *, src_ip=None, dst_ip=None, dst_mac=None):
        self.src_ip, self.dst_ip, self.dst_mac = src_ip, dst_ip, dst_mac


def psn_add(psn: int, n: int) -> int:
    return (psn + n) & PSN_MASK


def psn_diff(a: int, b: int) -> int:
    """a - b in serial-number arithmetic (RFC 1982), in -2^23 .. 2^23-1."""
    d = (a - b) & PSN_MASK
    return d - (1 << PSN_BITS) if d >= PSN_HALF else d


class Packet:
    """A frame in flight. ``src``/``dst`` are fabric hosts; ``plane`` and ``ev``
    select its path. Data fields follow BTH/RETH/ImmDt, ACK fields AETH and
    the MRC SACK extension, probe fields MRC PROBE."""

    __slots__ = (
        "kind", "src", "dst", "plane", "ev", "path", "route", "hop", "wire_len",
        "dqpn", "psn", "opcode", "ackreq", "va", "rkey", "dma_len", "imm", "payload_len",
        "data", "ce", "trimmed", "send_time", "retx",
        "syndrome", "msn", "cum_psn", "sack_base", "sack_bitmap", "sack_bits", "ece",
        "ce_count", "svc_time", "probe_id", "timestamp", "forged", "ipv6",
    )

    def __init__(self, kind: int, src, dst, plane: int, ev: int, dqpn: int) -> None:
        self.kind = kind
        self.src = src
        self.dst = dst
        self.plane = plane
        self.ev = ev
        self.dqpn = dqpn
        self.path = -1
        self.route = None
        self.hop = 0
        self.psn = 0
        self.opcode = 0
        self.ackreq = False
        self.ce = False
        self.trimmed = False
        self.retx = False
        self.send_time = 0.0
        self.svc_time = 0  # an ACK's service time, units of SVC_TIME_UNIT_NS
        self.data = None
        # the addresses a forged frame claims (``Forged``), None for a real one:
        # its addresses are then those of ``src`` and ``dst``
        self.forged = None
        self.ipv6 = False  # over IPv6: its wire length counts it (and a trim keeps it)

    @classmethod
    def data_packet(cls, src, dst, plane, ev, dqpn, psn, opcode, va, rkey, dma_len,
                    payload_len, imm, ackreq=False, data=None, ipv6=False):
        pkt = cls(DATA, src, dst, plane, ev, dqpn)
        pkt.ipv6 = ipv6
        pkt.psn = psn
        pkt.opcode = opcode
        pkt.va = va
        pkt.rkey = rkey
        pkt.dma_len = dma_len
        pkt.payload_len = payload_len
        pkt.imm = imm
        pkt.ackreq = ackreq
        pkt.data = data
        pkt.wire_len = data_wire_len(payload_len, opcode in IMM_OPCODES, ipv6)
        return pkt

    def copy(self) -> Packet:
        """A duplicate (what a misbehaving link delivers twice)."""
        dup = Packet.__new__(Packet)
        for name in Packet.__slots__:
            if hasattr(self, name):
                setattr(dup, name, getattr(self, name))
        return dup

    def trim(self) -> None:
        """What a trimming switch does: drop the payload, keep the headers."""
        self.trimmed = True
        self.data = None
        self.wire_len = trimmed_wire_len(self.opcode in IMM_OPCODES, self.ipv6)

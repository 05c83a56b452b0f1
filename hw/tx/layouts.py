"""Records passed between the TX blocks, and the host-memory WQE format."""

from amaranth.hdl import unsigned
from amaranth.lib import data

from hw.headers import IMMDT, IPV6_SHIFT
from hw.protocol import PSN_BITS

# The records TX exchanges with reliability and the WQE's codes: one definition each,
# in reliability's layouts (which imports nothing of TX).
from hw.reliability.layouts import (
    AckUpdate,
    EvState,
    EvUpdate,
    RetxRequest,
    SentRecord,
    WimmDone,
    WqeFlags,
    WqeOpcode,
)
from hw.stream import Beat

__all__ = [
    "WQE_BYTES",
    "WqeOpcode",
    "WqeFlags",
    "PacketDesc",
    "PayloadDesc",
    "FrameHeader",
    "RetxRequest",
    "AckUpdate",
    "EvUpdate",
    "SentRecord",
    "WimmDone",
    "EvState",
    "MAX_HEADER_BYTES",
    "MAX_HEADER_BYTES_V6",
    "header_lengths",
    "TxBeat",
]

WQE_BYTES = 64
# Eth 14 + IPv4 20 + UDP 8 + BTH 12 + RETH 16 + ImmDt 4
MAX_HEADER_BYTES = 74
# the same over IPv6 (40 bytes for IPv4's 20)
MAX_HEADER_BYTES_V6 = MAX_HEADER_BYTES + IPV6_SHIFT


def header_lengths(ipv6: bool = False) -> tuple[int, ...]:
    """A WRITE packet's header bytes, indexed by ``2 * v6 + imm`` (v6 only in
    a build with ``ipv6``): 70 and 74 (ImmDt) over IPv4, 90 and 94 over IPv6."""
    v4 = (MAX_HEADER_BYTES - IMMDT.size, MAX_HEADER_BYTES)
    return v4 + tuple(n + IPV6_SHIFT for n in v4) if ipv6 else v4


# (name, byte offset, bytes) of the 64-byte little-endian WQE in host memory.
WQE_LAYOUT = [
    ("opcode", 0x00, 1),
    ("flags", 0x01, 1),
    ("imm", 0x04, 4),
    ("wr_id", 0x08, 8),
    ("laddr", 0x10, 8),
    ("raddr", 0x18, 8),
    ("length", 0x20, 4),
    ("rkey", 0x24, 4),
]


# The WQE's fields TX reads (all but flags and wr_id), in this order: what the
# WQE read-ahead keeps of each QP's next WQE (``PrefetchedWqe``).
WQE_KEPT_FIELDS = tuple(f for f in WQE_LAYOUT if f[0] not in ("flags", "wr_id"))


def PrefetchedWqe():
    """A WQE as ``WqePrefetch`` keeps it: the fields of ``WQE_KEPT_FIELDS``,
    packed, each as wide as in the WQE."""
    return data.StructLayout({name: unsigned(8 * size) for name, _, size in WQE_KEPT_FIELDS})


def PacketDesc(ipv6: bool = False, ev_width: int = 16):
    """One packet to put on the wire, from the sequencer to the header path.
    With ``ipv6``, ``dst_ip`` is the peer's 128-bit IPv6 address when ``v6``
    is set, else an IPv4 address in its low 32 bits. ``ev`` is the EV entry's
    ``ev_width`` bits; above 16, ``ev_format`` (``EvFormat``) says where they
    ride."""
    v6 = {"dst_ip": unsigned(128), "v6": unsigned(1)} if ipv6 else {}
    if ev_width > 16:
        v6["ev_format"] = unsigned(2)
    return data.StructLayout(
        {
            "opcode": unsigned(8),
            "se": unsigned(1),
            "ackreq": unsigned(1),
            "dqpn": unsigned(24),
            "psn": unsigned(PSN_BITS),
            "va": unsigned(64),
            "rkey": unsigned(32),
            "dma_len": unsigned(32),
            "imm": unsigned(32),
            "length": unsigned(13),
            "ev": unsigned(ev_width),
            "dst_mac": unsigned(48),
            "dst_ip": unsigned(32),
            "dscp": unsigned(6),
            **v6,
        }
    )


def TxBeat(data_width: int = 64, ipv6: bool = False):
    """A beat of a TX frame from the framer to the ICRC inserter: ``Beat``,
    and with ``ipv6`` its frame's ``v6`` on every beat."""
    if not ipv6:
        return Beat(data_width)
    return data.StructLayout({"data": unsigned(data_width), "keep": unsigned(data_width // 8),
                              "last": unsigned(1), "v6": unsigned(1)})


def PayloadDesc(addr_width=64):
    """Payload bytes to read from host memory for one packet (``laddr`` an
    ``addr_width``-bit DMA address)."""
    return data.StructLayout({"laddr": unsigned(addr_width), "length": unsigned(13)})


def FrameHeader(ipv6: bool = False):
    """Built header bytes (lane order) for the framer; with ``ipv6``, ``v6``
    says the header is IPv6's (``header_lengths``)."""
    v6 = {"v6": unsigned(1)} if ipv6 else {}
    return data.StructLayout(
        {
            "bytes": unsigned(8 * max(header_lengths(ipv6))),
            "imm": unsigned(1),  # header is 74 bytes (ImmDt) rather than 70
            "length": unsigned(13),  # payload bytes
            "pad": unsigned(2),
            **v6,
        }
    )



"""How a fabric picks a packet's path inside its plane from the EV
(``select_path``).

One set of rules for the golden model's fabric (``topology.Fabric``) and the
cocotb fabrics (sim/system/fabric.py, sim/system/switch.py), so that a run
takes the same paths on either. ``routing`` is one of ``ROUTINGS``:

- ``explicit``: path = the EV as the frame carries it, mod paths (its low
  bits select the spine);
- ``hash``: an ECMP switch's CRC-32 of (source host, destination host,
  plane, the EV as the frame carries it) mod paths (``hash_path``);
- ``srv6``: an SRv6 fabric. Spine ``k`` of a plane has the uSID
  ``SPINE_USID_BASE + k``; the uSIDs ``SPINE_USID_BASE`` ..
  ``SPINE_USID_BASE + SPINE_USID_SPAN - 1`` are the spines' (no NIC's).
  A packet whose first uSID is in that block is source-routed: it takes
  the spine its first uSID names, and that spine consumes the uSID; a
  first uSID in the block that names no spine of the fabric has no route
  (the packet is dropped and counted). Any other packet (an IPv4 or a
  plain IPv6 destination, an ACK) is routed by ``hash``.

"The EV as the frame carries it" (``carried_ev``) is the integer
``flow label << 16 | UDP source port``: a UDP-format EV (flow label 0) is
itself, a STEV EV is itself (its flow label bits are EV bits 31..16), an
SRv6 EV (wider than 32 bits) is its source port ``srv6_sport``. The hash
takes it big-endian in as few bytes as hold it, at least two, so a 16-bit
EV hashes as the 5 bytes (source, destination, plane, EV high byte, EV low
byte).
"""

from __future__ import annotations

import zlib

from hw.protocol import SRV6_USID_BITS, SRV6_USIDS, srv6_sport

__all__ = ["ROUTINGS", "SPINE_USID_BASE", "SPINE_USID_SPAN", "carried_ev",
           "check_routing", "ev_first_usid", "hash_path", "is_spine_usid", "select_path",
           "spine_path"]

ROUTINGS = ("explicit", "hash", "srv6")
# The uSID of spine 0 of every plane on an SRv6 fabric; spine k's is
# SPINE_USID_BASE + k, for k below SPINE_USID_SPAN.
SPINE_USID_BASE = 0x0E00
SPINE_USID_SPAN = 0x100
_STEV_BITS = 32
_USID_MASK = (1 << SRV6_USID_BITS) - 1


def check_routing(routing: str, num_paths: int) -> None:
    """Raise ValueError unless ``routing`` is one of ``ROUTINGS`` and, for
    ``srv6``, every one of ``num_paths`` spines has a uSID in the block."""
    if routing not in ROUTINGS:
        raise ValueError(f"routing must be one of {', '.join(map(repr, ROUTINGS))}, "
                         f"not {routing!r}")
    if routing == "srv6" and num_paths > SPINE_USID_SPAN:
        raise ValueError(f"srv6 routing names at most {SPINE_USID_SPAN} spines, not "
                         f"{num_paths} paths")


def carried_ev(ev: int) -> int:
    """The EV as a frame carries it (flow label << 16 | source port): a UDP or
    STEV EV itself, an SRv6 EV (above 32 bits) its source port."""
    return srv6_sport(ev) if ev >> _STEV_BITS else ev


def hash_path(src: int, dst: int, plane: int, ev: int, num_paths: int) -> int:
    """``hash`` routing's path of ``ev`` (as the frame carries it) from host
    ``src`` to host ``dst`` on ``plane``."""
    key = ev.to_bytes(max(2, (ev.bit_length() + 7) // 8), "big")
    return zlib.crc32(bytes((src & 0xFF, dst & 0xFF, plane & 0xFF)) + key) % num_paths


def ev_first_usid(ev: int) -> int:
    """The first uSID of an SRv6 EV (its top ``SRV6_USID_BITS``)."""
    return (ev >> (SRV6_USID_BITS * (SRV6_USIDS - 1))) & _USID_MASK


def is_spine_usid(usid: int) -> bool:
    """``usid`` is in the spines' block: a packet it leads is source-routed."""
    return SPINE_USID_BASE <= usid < SPINE_USID_BASE + SPINE_USID_SPAN


def spine_path(usid: int, num_paths: int) -> int | None:
    """The path of the spine whose uSID is ``usid``, None if no spine of
    ``num_paths`` has it."""
    k = usid - SPINE_USID_BASE
    return k if 0 <= k < num_paths else None


def select_path(routing: str, ev: int, num_paths: int, src: int, dst: int,
                plane: int) -> int | None:
    """The path ``routing`` gives a packet from host ``src`` to host ``dst`` on
    ``plane`` whose EV is ``ev``: an SRv6 uSID list, or the EV as the frame
    carries it (``carried_ev``). None: no route."""
    if routing == "srv6" and is_spine_usid(ev_first_usid(ev)):
        return spine_path(ev_first_usid(ev), num_paths)
    if routing == "explicit":
        return ev % num_paths
    return hash_path(src, dst, plane, ev, num_paths)

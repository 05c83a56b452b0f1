"""A fabric's fate trace: which frame the RTL fabric dropped or trimmed, replayed
into the model fabric, so that the two NICs and the two model NICs meet the
same loss and an RTL run compares with the model's exactly under loss.

A frame is named by what the NICs put in it, not by when it left: its kind
(``data`` or ``ack``), DestQP and BTH PSN, and its occurrence (the n-th frame
of that name in its direction: the first transmission of a PSN is 0, its
retransmissions 1, 2...; an ACK repeated for the same PSN likewise). Probes
are not named (they go through unchanged).

``FateTrace.from_capture(frames)`` takes sim/system/fabric.py's ``capture``
(``Fabric(capture=True)``). ``trace.replay(control)`` installs it on a
``ModelFabricControl`` (sim/system/model_harness.py): every frame on the model
fabric's core links is named alike; one the RTL dropped is dropped, one it
trimmed is trimmed, any other goes through (``extra`` lists the model's frames
the RTL never sent). ``Replay.sent(direction, kind)`` and
``FateTrace.sent(direction, kind)`` count the frames of each name, so a test
compares the two runs' frames, and with them every retransmission.
"""

from __future__ import annotations

from collections import Counter

from host_driver import layers as L
from sim.model.packet import ACK, DATA

from .fabric import DROPPED, TRIMMED

__all__ = ["frame_name", "packet_name", "FateTrace", "Replay"]

_WRITE = frozenset(L.WRITE_OPCODES)


def frame_name(frame: bytes) -> tuple | None:
    """``(kind, dqpn, psn)`` of an RTL frame (Ethernet / IPv4 or IPv6 / UDP 4791 /
    BTH), or None."""
    off = L.bth_offset(frame)
    if off is None:
        return None
    bth = frame[off:off + 12]
    kind = ("data" if bth[0] in _WRITE else
            "ack" if bth[0] == L.OP_ACKNOWLEDGE else None)
    if kind is None:
        return None
    return kind, int.from_bytes(bth[5:8], "big"), int.from_bytes(bth[9:12], "big")


def packet_name(pkt) -> tuple | None:
    """The same for a model ``Packet``."""
    kind = {DATA: "data", ACK: "ack"}.get(pkt.kind)
    return None if kind is None else (kind, pkt.dqpn, pkt.psn)


class FateTrace:
    """Per direction, each named frame's fate: ``fates[d][(name, n)]``."""

    def __init__(self):
        self.fates: list[dict] = [{}, {}]

    @classmethod
    def from_capture(cls, frames) -> FateTrace:
        trace = cls()
        seen = [Counter(), Counter()]
        for f in frames:
            name = frame_name(f.sent)
            if name is None:
                continue
            n = seen[f.direction][name]
            seen[f.direction][name] += 1
            trace.fates[f.direction][name, n] = f.fate
        return trace

    def sent(self, direction: int, kind: str) -> Counter:
        """How many frames of each name of ``kind`` went ``direction``."""
        return Counter(name for name, _ in self.fates[direction] if name[0] == kind)

    def count(self, direction: int, kind: str, fate: str) -> int:
        return sum(1 for (name, _), f in self.fates[direction].items()
                   if name[0] == kind and f == fate)

    def replay(self, control) -> Replay:
        return Replay(self, control)


class Replay:
    """A ``FateTrace`` applied to a ``ModelFabricControl``'s core links; what the
    model sent and which fates it met."""

    def __init__(self, trace: FateTrace, control):
        self.trace = trace
        self.seen = [Counter(), Counter()]
        self.applied = [Counter(), Counter()]  # (kind, fate) -> frames
        self.extra: list[list] = [[], []]  # (name, n) the RTL never sent
        for d, direction in enumerate(control.directions):
            for path in direction.paths:
                path.drop_fn = self._decider(d)

    def _decider(self, d):
        def decide(pkt, now) -> bool:
            name = packet_name(pkt)
            if name is None:
                return False
            n = self.seen[d][name]
            self.seen[d][name] += 1
            fate = self.trace.fates[d].get((name, n))
            if fate is None:
                self.extra[d].append((name, n))
                return False
            self.applied[d][name[0], fate] += 1
            if fate == TRIMMED and pkt.kind == DATA:
                pkt.trim()
            return fate == DROPPED
        return decide

    def sent(self, direction: int, kind: str) -> Counter:
        return Counter({name: n for name, n in self.seen[direction].items() if name[0] == kind})

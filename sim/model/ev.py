"""Entropy values (EVs) of a QP: their states, the spraying policy, health.

Spraying policy (documented in docs/model.md): every plane keeps a list of
its GOOD EVs in table order and a round-robin pointer; each new data packet
for that plane takes the next GOOD EV, so a QP's packets spread evenly, one
per EV in turn, over the GOOD EVs. A retransmission takes the next GOOD EV
that differs from the EV the packet was lost on (when the plane has another).

EV health (reasons are the strings in ``EvTransition.reason``):

- ``loss``:   a packet sent on the EV was declared lost by SACK evidence
  (a packet sent ``reo_wnd`` later on any EV was delivered) and the EV has now
  ``bad_threshold`` losses in a row with no delivery in between -> ASSUMED_BAD.
- ``timeout``: the retransmit timer fired with packets outstanding on the EV,
  counted like a loss.
- ``probe``:  a probe response came back on an ASSUMED_BAD EV -> GOOD.
- ``controller``: the controller set DENIED, or released a DENIED EV to GOOD.

The ``ev_min_active`` floor: an EV is not marked ASSUMED_BAD if fewer than
``ev_min_active`` GOOD EVs would remain; the evidence is counted
(``floor_blocked``) and the EV stays GOOD. Trims and ECN are congestion
signals and never count against an EV.
"""

from __future__ import annotations

from typing import NamedTuple

from hw.protocol import EvState

# The model names EV states by their names in the one definition (hw/protocol.py).
GOOD = EvState.GOOD.name
ASSUMED_BAD = EvState.ASSUMED_BAD.name
DENIED = EvState.DENIED.name
EV_STATES = (GOOD, ASSUMED_BAD, DENIED)


class EvTransition(NamedTuple):
    """An event the NIC raises to the controller."""

    time_ns: float
    qpn: int
    ev: int
    old: str
    new: str
    reason: str
    drops: int  # packets declared lost on this EV so far
    rtt_ns: float | None = None  # a probe answer's round trip ("probe"), else None


class Ev:
    __slots__ = ("value", "plane", "state", "drops", "loss_run", "tx_packets", "probe_id",
                 "probe_rtt_ns", "index")

    def __init__(self, value: int, plane: int, index: int) -> None:
        if not 0 <= value <= 0xFFFF:
            raise ValueError(f"EV {value:#x} does not fit the 16-bit UDP source port")
        self.value = value
        self.plane = plane
        self.index = index
        self.state = GOOD
        self.drops = 0
        self.loss_run = 0
        self.tx_packets = 0
        self.probe_id = None
        self.probe_rtt_ns = None

    def __repr__(self) -> str:
        return f"Ev({self.value:#06x}, plane={self.plane}, {self.state})"


def explicit_evs(values: list, planes: int = 1) -> list[tuple[int, int]]:
    """EXPLICIT profile: the controller's list, as values (plane = i % planes)
    or as (value, plane) pairs."""
    out = []
    for i, item in enumerate(values):
        if isinstance(item, (list, tuple)):
            out.append((int(item[0]), int(item[1])))
        else:
            out.append((int(item), i % planes))
    return out


def generated_evs(*, width: int = 16, init: int = 0, min_ev: int = 0,
                  max_ev: int | None = None, mask: int | None = None, count: int = 8,
                  planes: int = 1) -> list[tuple[int, int]]:
    """GENERATED profile (the project's reading of mrc.h; see docs/model.md).

    Candidate i (i = 0, 1, ...) is ``min_ev + (((init + i) & mask) % (max_ev - min_ev + 1))``;
    repeats are skipped until ``count`` EVs are found. EV i is bound to plane
    ``i % planes``. ``width`` bounds the EV field (16 for the UDP profile).
    """
    if max_ev is None:
        max_ev = (1 << width) - 1
    if mask is None:
        mask = (1 << width) - 1
    if not 0 <= min_ev <= max_ev < (1 << width):
        raise ValueError("need 0 <= min <= max < 2^width")
    span = max_ev - min_ev + 1
    seen: set[int] = set()
    out = []
    for i in range(1 << width):
        value = min_ev + (((init + i) & mask) % span)
        if value in seen:
            continue
        seen.add(value)
        out.append((value, len(out) % planes))
        if len(out) == count:
            return out
    raise ValueError(f"profile yields only {len(out)} distinct EVs, {count} asked")


class EvTable:
    """The EVs of one QP, their states, the per-plane spraying pointers."""

    def __init__(self, evs: list[tuple[int, int]], planes: int, *, min_active: int = 1,
                 bad_threshold: int = 2, qpn: int = 0, clock=None, on_event=None) -> None:
        if not evs:
            raise ValueError("a QP needs at least one EV")
        values = [v for v, _ in evs]
        if len(set(values)) != len(values):
            raise ValueError("EV values must be distinct")
        for _, plane in evs:
            if not 0 <= plane < planes:
                raise ValueError(f"EV bound to plane {plane}, NIC has {planes}")
        self.evs = [Ev(v, p, i) for i, (v, p) in enumerate(evs)]
        self.by_value = {ev.value: ev for ev in self.evs}
        self.planes = planes
        self.min_active = min_active
        self.bad_threshold = bad_threshold
        self.qpn = qpn
        self.clock = clock or (lambda: 0.0)
        self.on_event = on_event
        self.events: list[EvTransition] = []
        self.floor_blocked = 0
        self._rr = [0] * planes
        self._good: list[list[Ev]] = [[] for _ in range(planes)]
        self._rebuild()

    def _rebuild(self) -> None:
        # an EV bound to a plane the NIC lacks (a register model may rebind one) is
        # never given data
        self._good = [[] for _ in range(self.planes)]
        for ev in self.evs:
            if ev.state == GOOD and ev.plane < self.planes:
                self._good[ev.plane].append(ev)

    def good_count(self) -> int:
        return sum(len(g) for g in self._good)

    def good(self, plane: int) -> list[Ev]:
        return self._good[plane]

    def bad(self) -> list[Ev]:
        return [ev for ev in self.evs if ev.state == ASSUMED_BAD]

    def pick(self, plane: int, avoid: Ev | None = None) -> Ev | None:
        """Next GOOD EV of ``plane`` in round-robin order, not ``avoid`` if possible."""
        good = self._good[plane]
        n = len(good)
        if n == 0:
            return None
        i = self._rr[plane] % n
        ev = good[i]
        if ev is avoid and n > 1:
            i = (i + 1) % n
            ev = good[i]
        self._rr[plane] = i + 1
        return ev

    def _transition(self, ev: Ev, new: str, reason: str) -> None:
        old = ev.state
        ev.state = new
        self._rebuild()
        rtt = ev.probe_rtt_ns if reason == "probe" else None
        event = EvTransition(self.clock(), self.qpn, ev.value, old, new, reason, ev.drops, rtt)
        self.events.append(event)
        if self.on_event is not None:
            self.on_event(event)

    def loss(self, ev: Ev, reason: str = "loss") -> bool:
        """Evidence that a packet sent on ``ev`` was lost. True if it went bad."""
        ev.drops += 1
        ev.loss_run += 1
        if ev.state != GOOD or ev.loss_run < self.bad_threshold:
            return False
        if self.good_count() - 1 < self.min_active:
            self.floor_blocked += 1
            return False
        self._transition(ev, ASSUMED_BAD, reason)
        return True

    def delivered(self, ev: Ev) -> None:
        ev.loss_run = 0

    def probe_response(self, ev: Ev) -> bool:
        if ev.state != ASSUMED_BAD:
            return False
        ev.loss_run = 0
        self._transition(ev, GOOD, "probe")
        return True

    def set_state(self, value: int, state: str) -> None:
        """Controller API: DENY an EV, or release it (to GOOD)."""
        if state not in (GOOD, DENIED):
            raise ValueError("the controller sets DENIED or GOOD only")
        ev = self.by_value[value]
        if ev.state == state:
            return
        ev.loss_run = 0
        self._transition(ev, state, "controller")

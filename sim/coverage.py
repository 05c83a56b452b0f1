"""Functional coverage of the cocotb regression (cocotb-coverage): the bins,
defined once, and the sampling calls the harnesses make.

Every bin below is a cocotb-coverage ``CoverPoint`` created when this module
is imported, so each run's database holds every bin (hit or not) and runs
merge bin by bin. The harnesses sample what their checks already observe:

- ``sample_rx_frame``: each frame ``RxModel`` (tests/hw/rx_tb.py) judges, its
  opcode, its outcome, the counters it moved (the RTL's counters are held equal
  to these by ``RxTB.check_counters``), the NAKs it sent, its PSN offset in the
  window and whether the expected PSN wrapped;
- ``sample_parser_verdict``: each frame the parser bench checks (tests/hw/parser_tb.py);
- ``sample_retx``, ``EvTracker``, ``sample_backoff``, ``SackShiftTracker``,
  ``UnaTracker``: the reliability bench's retransmit requests, EV updates,
  timeout intervals and ACKs (tests/hw/test_reliability.py);
- ``sample_forged``: each forged-frame case of tests/system/test_attacker.py,
  once the counter it names has counted it.

Sampling is always on (about ten microseconds a frame); a run writes its database
only when ``MRC_FCOV_FILE`` is set (``make coverage``, via sim/cocotb_runner.py),
at the simulator's exit. ``merge`` and ``summary`` read the databases back
(sim/coverage_report.py).
"""

from __future__ import annotations

import atexit
import os
from collections import Counter

from cocotb_coverage import coverage as cc

from hw.protocol import PSN_HALF, PSN_MASK, EvState, Opcode
from hw.rx.layouts import COUNTER_NAMES as PARSER_COUNTERS

__all__ = ["BINS", "EvTracker", "SackShiftTracker", "UnaTracker", "flush", "hits", "merge",
           "sample_backoff", "sample_forged", "sample_parser_verdict", "sample_retx",
           "sample_rx_frame", "sample_una_wrap", "summary", "write"]

HALF = PSN_HALF

OP_NAMES = {Opcode.WRITE_FIRST: "WRITE_FIRST", Opcode.WRITE_MIDDLE: "WRITE_MIDDLE",
            Opcode.WRITE_LAST: "WRITE_LAST", Opcode.WRITE_LAST_IMM: "WRITE_LAST_IMM",
            Opcode.WRITE_ONLY: "WRITE_ONLY", Opcode.WRITE_ONLY_IMM: "WRITE_ONLY_IMM",
            Opcode.ACKNOWLEDGE: "ACK", Opcode.PROBE_REQ: "PROBE_REQ",
            Opcode.PROBE_RESP: "PROBE_RESP"}
_LAST = ("WRITE_LAST", "WRITE_LAST_IMM", "WRITE_ONLY", "WRITE_ONLY_IMM")
_IMM = ("WRITE_LAST_IMM", "WRITE_ONLY_IMM")
_WRITES = ("WRITE_FIRST", "WRITE_MIDDLE") + _LAST

# opcode x outcome, the combinations that can happen (RxModel.frame's outcomes):
# every WRITE can be placed, duplicate, out of window, NAKed, trimmed or dropped
# (QP / address checks); only a LAST or ONLY can find the pending table full,
# only one WITH_IMMEDIATE the CQ full; probes are answered or dropped, ACKs
# and probe responses go to reliability ("peer") or are dropped.
OPCODE_OUTCOME = (
    [(op, out) for op in _WRITES for out in ("placed", "dup", "oow", "nak", "trimmed", "drop")]
    + [(op, "wimm_full") for op in _LAST] + [(op, "cq_full") for op in _IMM]
    + [("PROBE_REQ", "probe"), ("PROBE_REQ", "drop"), ("ACK", "peer"), ("ACK", "drop"),
       ("PROBE_RESP", "peer"), ("PROBE_RESP", "drop")])

# RX drop reasons: the RX counters that count a frame dropped (hw/rx/regs.py COUNTERS)
RX_DROPS = ("bad_qpn", "not_for_us", "qp_state", "bad_source", "trim_stale", "duplicate",
            "out_of_window", "wimm_full", "cq_full", "peer_bad_qpn", "peer_not_for_us",
            "peer_bad_mac", "peer_qp_state", "peer_bad_source", "peer_bad_sack")
# the parser's verdicts other than accepted (hw/rx/layouts.py Verdict)
PARSER_DROPS = tuple(n for n in PARSER_COUNTERS if n != "accepted")
# the NAKs RX sends, by syndrome and the check that failed
NAKS = (("NAK_INVALID_REQUEST", "bad_length"), ("NAK_INVALID_REQUEST", "bad_reth"),
        ("NAK_REMOTE_ACCESS", "bad_rkey"),
        ("NAK_REMOTE_ACCESS", "bad_pd"), ("NAK_REMOTE_ACCESS", "bad_bounds"),
        ("NAK_TRIMMED", "trimmed"))
# EV transitions (docs/model.md, "EV health"): loss and probe, and the controller's
EV_TRANSITIONS = (("GOOD", "ASSUMED_BAD"), ("ASSUMED_BAD", "GOOD"), ("GOOD", "DENIED"),
                  ("ASSUMED_BAD", "DENIED"), ("DENIED", "GOOD"))
RETX_CAUSES = ("timeout", "sack", "nak_trimmed")  # RetxRequest.reason 0, 1, 2
# back-off: the timeout interval as base << level, then retry exhaustion
BACKOFF_LEVELS = (0, 1, 2, 3, "exhausted")
# a frame's PSN offset from the expected PSN (the window has W entries)
WINDOW_EDGES = ("0", "W-1", "W", "2^23-1", "2^23", "2^23+1")
# how far a QP's SACK base (bitmap bit 0, cum_psn + 1) moves from one ACK to the
# next, as the requester sees them: not at all (new SACK bits, a repeated ACK),
# by one PSN, by more within the window W, by W or more, or back (an ACK older
# than the one before it: reordered)
SACK_SHIFTS = ("same", "1", "2..W-1", ">=W", "back")
# tests/system/test_attacker.py's forged frames (docs/security.md): the ten
# injected during a transfer, and the two directed cases
FORGED = ("ack_forged_source", "nak_forged_source", "ack_not_for_us", "ack_bad_mac",
          "ack_idle_qp", "ack_bad_sack_base", "probe_resp_forged_source", "probe_resp_stale",
          "trimmed_write_forged_source", "trimmed_write_idle_qp", "ack_every_path_down",
          "naks_one_retransmit")

# name -> bins, the whole functional model (the tests and docs read it from here)
BINS = {
    "mrc.rx.opcode_outcome": OPCODE_OUTCOME,
    "mrc.rx.drop_reason": RX_DROPS,
    "mrc.rx.parser_drop": PARSER_DROPS,
    "mrc.rx.nak": NAKS,
    "mrc.rx.window_edge": WINDOW_EDGES,
    "mrc.rx.psn_wrap": ("epsn_wrapped",),
    "mrc.rx.table_full": ("cq_full", "pending_full"),
    "mrc.rel.ev_transition": EV_TRANSITIONS,
    "mrc.rel.retx_cause": RETX_CAUSES,
    "mrc.rel.backoff_level": BACKOFF_LEVELS,
    "mrc.rel.sack_shift": SACK_SHIFTS,
    "mrc.rel.una_wrap": ("una_wrapped",),
    "mrc.system.forged": FORGED,
}


def _point(name):
    bins = list(BINS[name])

    @cc.CoverPoint(name, bins=bins)
    def sample(value):
        pass

    return sample


_SAMPLE = {name: _point(name) for name in BINS}
_LEGAL = {name: frozenset(bins) for name, bins in BINS.items()}
# Hits are counted here and handed to cocotb-coverage (one call per hit, its
# CoverPoint walks every bin) only when a database is read or written, so that
# sampling costs the plain regression about a microsecond a hit.
_pending: Counter = Counter()


def _hit(name, value):
    if value not in _LEGAL[name]:
        raise ValueError(f"{value!r} is no bin of {name}")
    _pending[name, value] += 1


def flush():
    """Hand the hits counted so far to cocotb-coverage's database."""
    for (name, value), n in _pending.items():
        for _ in range(n):
            _SAMPLE[name](value)
    _pending.clear()


def hits(name) -> dict:
    """{bin: hits} of one coverpoint in this process."""
    flush()
    return dict(cc.coverage_db[name].detailed_coverage)


# ---- the sampling calls ---------------------------------------------------------------

_NAK_NAMES = {0x61: "NAK_INVALID_REQUEST", 0x62: "NAK_REMOTE_ACCESS", 0x70: "NAK_TRIMMED"}
_NAK_CAUSES = {"NAK_INVALID_REQUEST": ("bad_length", "bad_reth"),
               "NAK_REMOTE_ACCESS": ("bad_rkey", "bad_pd", "bad_bounds"),
               "NAK_TRIMMED": ("trimmed",)}


def window_edge(offset: int, window: int) -> str | None:
    """The WINDOW_EDGES bin of a PSN offset (psn - expected mod 2^24), if any."""
    edges = {0: "0", window - 1: "W-1", window: "W", HALF - 1: "2^23-1", HALF: "2^23",
             HALF + 1: "2^23+1"}
    return edges.get(offset & PSN_MASK)


def sample_rx_frame(opcode: int, outcome: str, counted, naks, *, offset=None, window=None,
                    wrapped=False):
    """One frame RxModel judged: ``counted`` the counter names it moved, ``naks``
    the syndromes it sent, ``offset`` its PSN minus the expected PSN (a WRITE)."""
    op = OP_NAMES.get(opcode)
    if op is not None and (op, outcome) in BINS["mrc.rx.opcode_outcome"]:
        _hit("mrc.rx.opcode_outcome", (op, outcome))
    for name in counted:
        if name in RX_DROPS:
            _hit("mrc.rx.drop_reason", name)
        if name in ("cq_full", "wimm_full"):
            _hit("mrc.rx.table_full", "cq_full" if name == "cq_full" else "pending_full")
    for syndrome in naks:
        kind = _NAK_NAMES.get(syndrome)
        cause = next((c for c in _NAK_CAUSES.get(kind, ()) if c in counted), None)
        if cause:
            _hit("mrc.rx.nak", (kind, cause))
    if offset is not None and window is not None:
        edge = window_edge(offset, window)
        if edge is not None:
            _hit("mrc.rx.window_edge", edge)
    if wrapped:
        _hit("mrc.rx.psn_wrap", "epsn_wrapped")


def sample_parser_verdict(verdict: str):
    """A frame the parser dropped, by its verdict's counter name."""
    if verdict in PARSER_DROPS:
        _hit("mrc.rx.parser_drop", verdict)


def sample_retx(reason: int):
    """A retransmit request from reliability (RetxRequest.reason)."""
    if reason < len(RETX_CAUSES):
        _hit("mrc.rel.retx_cause", RETX_CAUSES[reason])


def sample_backoff(level):
    """A retransmit timeout ``base << level`` after the one before, or "exhausted"."""
    _hit("mrc.rel.backoff_level", level)


class SackShiftTracker:
    """SACK base shifts between consecutive ACKs of each QP (a window of ``window``)."""

    def __init__(self, window: int):
        self.window = window
        self.base = {}

    def __call__(self, qpn: int, sack_base: int):
        last = self.base.get(qpn)
        self.base[qpn] = sack_base
        if last is None:
            return
        d = (sack_base - last) & PSN_MASK
        if d == 0:
            kind = "same"
        elif d >= HALF:
            kind = "back"
        else:
            kind = "1" if d == 1 else "2..W-1" if d < self.window else ">=W"
        _hit("mrc.rel.sack_shift", kind)


def sample_una_wrap():
    _hit("mrc.rel.una_wrap", "una_wrapped")


def sample_forged(case: str):
    _hit("mrc.system.forged", case)


class EvTracker:
    """EV state transitions from reliability's EvUpdate stream (each EV starts GOOD)."""

    def __init__(self):
        self.state = {}

    def __call__(self, rec):
        key = (rec["qpn"], rec["ev_index"])
        old = self.state.get(key, EvState.GOOD)
        new = EvState(rec["state"])
        self.state[key] = new
        if (old.name, new.name) in EV_TRANSITIONS:
            _hit("mrc.rel.ev_transition", (old.name, new.name))


class UnaTracker:
    """una wraps: an AckUpdate whose una is below the QP's last (mod 2^24, forward)."""

    def __init__(self):
        self.una = {}

    def __call__(self, rec):
        q, una = rec["qpn"], rec["una_psn"]
        last = self.una.get(q)
        self.una[q] = una
        if last is not None and una < last and (una - last) & PSN_MASK < HALF:
            sample_una_wrap()


# ---- databases ----------------------------------------------------------------------

def write(path: str | None = None):
    """Export this process's database (YAML) to ``path`` or $MRC_FCOV_FILE."""
    path = path or os.environ.get("MRC_FCOV_FILE")
    if path:
        flush()
        cc.coverage_db.export_to_yaml(path)


if os.environ.get("MRC_FCOV_FILE"):
    atexit.register(write)


def merge(paths, out: str) -> dict:
    """Merge run databases into ``out``; returns ``summary(out)``. Every
    database must have this module's bins (ValueError names one that has not:
    a run from before the bins changed)."""
    paths = [str(p) for p in paths]
    want = {name: {str(b) for b in bins} for name, bins in BINS.items()}
    for p in paths:
        got = {name: {str(b) for b in bins} for name, bins in summary(p).items()}
        if got != want:
            raise ValueError(f"{p}: not the bins of sim/coverage.py (an older run?)")
    cc.merge_coverage(lambda *_: None, out, *paths)
    return summary(out)


def summary(path) -> dict:
    """{coverpoint: {bin (as exported): hits}} of a database, the coverpoints of BINS only."""
    import yaml

    with open(path) as f:
        db = yaml.safe_load(f)
    return {name: dict(db[name]["bins:_hits"]) for name in BINS if name in db}

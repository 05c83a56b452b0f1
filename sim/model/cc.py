"""NSCC-style congestion window (after UET 1.0 NSCC; parameters as in mrc.h).

The window is in wire bytes. Signals per ACK: the ECN echo (ECE), the delay
``rtt - base_rtt`` of the newest packet it acknowledges that was sent once,
and the bytes it newly acknowledges; per NAK TRIMMED, the trimmed packet.

Quadrants (UET NSCC), with ``delay`` against ``target_delay``:

=============  ====================  =========================================
ECE            delay                 action
=============  ====================  =========================================
no             < target              proportional increase
                                     ``cwnd += eta * acked * (target - delay) / target``
                                     plus fair increase
no             >= target             fair increase ``cwnd += fi * mtu * acked / cwnd``
yes            < target              none (queue building elsewhere, transient)
yes            >= target             multiplicative decrease, at most once per
                                     base RTT: ``cwnd *= 1 - min(max_md_jump,
                                     gamma * (avg_delay - target) / avg_delay)``
=============  ====================  =========================================

Trim (NAK TRIMMED): ``cwnd -= trimmed packet's wire size`` and arm quick adapt.
Quick adapt: at the end of each window of ``base_rtt + target_delay``, if a
trim was seen or the average delay exceeded ``qa_threshold * target_delay``,
and the bytes acknowledged in the window are below ``qa_gate * cwnd``, the
window drops to those bytes. Retransmit timeout: ``cwnd /= 2``. Packet loss
is a path signal in MRC (the EV goes ASSUMED_BAD), not a congestion signal.
The window stays in ``[min_cwnd, max_cwnd]``.
"""

from __future__ import annotations

from dataclasses import dataclass

from hw.reliability.cc_defaults import (
    DEFAULT_BASE_RTT_NS,
    NSCC_GAINS,
    nscc_resolved,
)


@dataclass
class NsccParams:
    base_rtt_ns: float = DEFAULT_BASE_RTT_NS
    target_delay_ns: float = 0.0  # 0: TARGET_DELAY_FRACTION (0.75) * base_rtt
    eta: float = NSCC_GAINS["eta"]
    fi: float = NSCC_GAINS["fi"]  # MTUs per RTT
    gamma: float = NSCC_GAINS["gamma"]
    max_md_jump: float = NSCC_GAINS["max_md_jump"]
    qa_gate: float = NSCC_GAINS["qa_gate"]
    qa_threshold: float = NSCC_GAINS["qa_threshold"]
    max_cwnd: float = 0.0  # 0: START_CWND_BDP (1.5) x BDP, also the first window
    min_cwnd: float = 0.0  # 0: one MTU packet
    ewma: float = NSCC_GAINS["ewma"]
    enabled: bool = True

    def resolved(self, bdp_bytes: float, mtu_wire: int) -> NsccParams:
        return NsccParams(**nscc_resolved(self.__dict__, bdp_bytes, mtu_wire))


class Nscc:
    __slots__ = ("p", "cwnd", "mtu", "avg_delay", "last_md", "qa_start", "qa_bytes",
                 "qa_trigger", "md_count", "qa_count", "trim_count")

    def __init__(self, params: NsccParams, mtu_wire: int) -> None:
        self.p = params
        self.mtu = mtu_wire
        self.cwnd = params.max_cwnd
        self.avg_delay = 0.0
        self.last_md = -1e18
        self.qa_start = 0.0
        self.qa_bytes = 0
        self.qa_trigger = False
        self.md_count = 0
        self.qa_count = 0
        self.trim_count = 0

    def _clamp(self) -> None:
        p = self.p
        if self.cwnd < p.min_cwnd:
            self.cwnd = p.min_cwnd
        elif self.cwnd > p.max_cwnd:
            self.cwnd = p.max_cwnd

    def on_ack(self, now: float, acked_bytes: int, ece: bool, rtt_ns: float | None) -> None:
        p = self.p
        if not p.enabled:
            return
        self.qa_bytes += acked_bytes
        if rtt_ns is not None:
            delay = rtt_ns - p.base_rtt_ns
            if delay < 0:
                delay = 0.0
            self.avg_delay += p.ewma * (delay - self.avg_delay)
        else:
            delay = self.avg_delay
        target = p.target_delay_ns
        if acked_bytes:
            if not ece:
                if delay < target:
                    self.cwnd += p.eta * acked_bytes * (target - delay) / target
                self.cwnd += p.fi * self.mtu * acked_bytes / self.cwnd
            elif delay >= target and now - self.last_md >= p.base_rtt_ns:
                avg = max(self.avg_delay, delay)
                cut = min(p.max_md_jump, p.gamma * (avg - target) / avg) if avg > 0 else 0.0
                self.cwnd *= 1.0 - cut
                self.last_md = now
                self.md_count += 1
        if delay > p.qa_threshold * target:
            self.qa_trigger = True
        self._quick_adapt(now)
        self._clamp()

    def _quick_adapt(self, now: float) -> None:
        p = self.p
        if now - self.qa_start < p.base_rtt_ns + p.target_delay_ns:
            return
        if self.qa_trigger and self.qa_bytes < p.qa_gate * self.cwnd:
            self.cwnd = max(float(self.qa_bytes), p.min_cwnd)
            self.qa_count += 1
        self.qa_start = now
        self.qa_bytes = 0
        self.qa_trigger = False

    def on_trim(self, now: float, wire_bytes: int) -> None:
        if not self.p.enabled:
            return
        self.trim_count += 1
        self.cwnd -= wire_bytes
        self.qa_trigger = True
        self._clamp()

    def on_timeout(self, now: float) -> None:
        if not self.p.enabled:
            return
        self.cwnd /= 2
        self._clamp()

"""Reliability gateware: ACK/SACK/NAK processing, retransmit timers, EV health,
congestion window and send completions (issue 6). See docs/reliability.md."""

from .engine import ReliabilityEngine

__all__ = ["ReliabilityEngine"]

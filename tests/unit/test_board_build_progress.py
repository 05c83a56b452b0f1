"""``make bitstream``'s progress lines (hw/board/build.py): the stage and the
router's iteration, read from nextpnr's log as the build writes it. Needs
no board tools."""

import os
import re

from hw.board.build import build_progress, run_watched

# A nextpnr-ecp5 log (``--log versa_top.tim``) as the build writes it, cut to a
# few lines of each stage.
_NEXTPNR_LOG = """\
Info: Logic utilisation before packing:
Info:     Total LUT4s:      31012/43848    70%
Info: Packing IOs..
Info: Packing constants..
Info: Checksum: 0x6c2b9f3e
Info: Device utilisation:
Info: Creating initial analytic placement for 29874 cells, random placement wirelen = 3210440.
Info:     at initial placer iter 0, wirelen = 1240
Info: Running main analytical placer, max placement attempts per cell = 10000000.
Info:     at iteration #1, type ALL: wirelen solved = 118350, spread = 960410, legal = 1012366; \
time = 6.12s
Info:     at iteration #2, type ALL: wirelen solved = 164872, spread = 701553, legal = 745012; \
time = 11.94s
Info: HeAP Placer Time: 162.31s
Info: Running simulated annealing placer for refinement.
Info:   at iteration #1: temp = 0.000000, timing cost = 14210, wirelen = 430117
Info: SA placement time 41.77s
Info: Max frequency for clock '$glbnet$clocks.core': 101.40 MHz (PASS at 125.00 MHz)
Info: Routing globals...
Info: Running router2...
Info: Setting up routing resources...
Info: Running main router loop...
Info:     iter=1 wires=701104 overused=16730 overuse=19921 tmgfail=0 archfail=NA
Info:     iter=2 wires=702201 overused=5113 overuse=5630 tmgfail=0 archfail=NA
Info:     iter=3 wires=702981 overused=924 overuse=947 tmgfail=12 archfail=NA
Info: Router2 time 301.52s
Info: Running router1 to check that route is legal...
Info: Critical path report for clock '$glbnet$clocks.core' (posedge -> posedge):
Info: Program finished normally.
"""


def _cut(log, line):
    """``log`` as written up to and including the line that starts with ``line``."""
    return log[:log.index("\n", log.index(line)) + 1]


def test_build_progress_stages():
    """Each cut of the log names the stage it has reached, with HeAP's and
    router2's latest iteration; before the log exists, yosys is running."""
    def at(line):
        return _cut(_NEXTPNR_LOG, line)

    assert build_progress(None).startswith("synthesis (yosys)")
    assert build_progress("") == "nextpnr: reading the netlist"
    assert build_progress(at("Info: Packing IOs")) == "packing"
    assert build_progress(at("Info: Creating initial")) == "placement (HeAP, analytic)"
    assert build_progress(at("Info:     at iteration #2")) == (
        "placement (HeAP, analytic): iteration 2, wirelength 164872")
    assert build_progress(at("Info:   at iteration #1: temp")) == (
        "placement refinement (simulated annealing)")
    assert build_progress(at("Info: Routing globals")) == "routing the global clocks"
    assert build_progress(at("Info: Running main router loop")) == "routing (router2)"
    assert build_progress(at("Info:     iter=1 ")) == (
        "routing (router2): iteration 1, 16730 overused wires")
    assert build_progress(at("Info:     iter=3 ")) == (
        "routing (router2): iteration 3, 924 overused wires")
    assert build_progress(at("Info: Running router1")) == "routing: legality check"
    assert build_progress(at("Info: Critical path")) == "timing analysis and reports"
    assert build_progress(_NEXTPNR_LOG) == "nextpnr done; bitstream (ecppack)"
    # router2's format without tmgfail (nextpnr without --tmg-ripup)
    assert build_progress(at("Info: Running main router loop") +
                          "Info:     iter=7 wires=9 overused=42 overuse=50 archfail=NA\n") == (
        "routing (router2): iteration 7, 42 overused wires")


# The static (electrostatic) placer's lines, cut likewise.
_STATIC_LOG = """\
Info: Packing IOs..
Info: Running Static placer...
Info: \u2301 bel grid 91x72, placer grid 91x71...
Info: iter=1 steplen=0.010000 a=1.530121 penalty=[0.00, 0.00, 0.00, 0.00]
Info:    system potential: 4039.506104 hpwl: 217277.640625
Info: overlap: COMB=99.4%, FF=97.0%, RAM=90.0%, MUL=0.0%
Info: iter=539 steplen=1.686674 a=271.897766 penalty=[10.10, 10.10, 10.10, 10.10]
Info:    update_chains distance 3388.72
Info:    system potential: 4090.539062 hpwl: 217474.968750
Info: overlap: COMB=10.0%, FF=3.7%, RAM=0.0%, MUL=0.0%
Info: Strict legalising 36678 cells...
Info: Running simulated annealing placer for refinement.
"""


def test_build_progress_static_placer():
    """With ``--placer static`` the stage names it, with its latest iteration
    and how much its LUTs still overlap."""
    def upto(line):
        return _cut(_STATIC_LOG, line)

    assert build_progress(upto("Info: Running Static")) == "placement (static, electrostatic)"
    assert build_progress(upto("Info: overlap: COMB=99.4")) == (
        "placement (static, electrostatic): iteration 1, LUT overlap 99.4 %")
    assert build_progress(upto("Info: overlap: COMB=10.0")) == (
        "placement (static, electrostatic): iteration 539, LUT overlap 10.0 %")
    assert build_progress(_STATIC_LOG) == "placement refinement (simulated annealing)"


# router1's lines (the default router), cut likewise.
_ROUTER1_LOG = """\
Info: Routing globals...
Info: Routing..
Info: Setting up routing queue.
Info: Routing 152203 arcs.
Info:            |   (re-)routed arcs  |   delta    | remaining|       time spent     |
Info:    IterCnt |  w/ripup   wo/ripup |  w/r  wo/r |      arcs| batch(sec) total(sec)|
Info:       1000 |       89        910 |   89   910 |    151414|       3.26       3.26|
Info:     231000 |    47663     178400 |   66   844 |       561|       1.87     311.78|
Info:     0 arcs ripped up due to negative slack WNS=0.00ns TNS=0.00ns.
Info:          0 |    47733     178951 |   70   551 |         0|       2.75     314.54|
Info: Routing complete.
Info: Router1 time 314.54s
"""


def test_build_progress_router1():
    """With router1 the stage names it, with its count of arcs routed and the
    arcs left, until it reports its time."""
    def upto(line):
        return _cut(_ROUTER1_LOG, line)

    assert build_progress(upto("Info: Routing globals")) == "routing the global clocks"
    assert build_progress(upto("Info: Setting up routing queue")) == "routing (router1)"
    assert build_progress(upto("Info:       1000 |")) == (
        "routing (router1): 1000 arcs routed or ripped up, 151414 left")
    assert build_progress(upto("Info:     231000 |")) == (
        "routing (router1): 231000 arcs routed or ripped up, 561 left")
    assert build_progress(_ROUTER1_LOG) == "routing: done"


def test_run_watched_shows_progress(tmp_path):
    """The build prints each stage as the log reaches it, with the elapsed
    time, and each router iteration it sees; a repeated state is not
    printed again. The script writes the log a part at a time and waits
    until the watchdog has shown that part's stage (no timing assumed)."""
    log = tmp_path / "versa_top.tim"
    steps = [("Info: Creating initial", "packing"),
             ("Info: Running main router", "routing (router2): setting up"),
             ("Info:     iter=3 ", "routing (router2): iteration 2, 5113 overused wires"),
             ("Info: Router2 time", "routing (router2): iteration 3, 924 overused wires"),
             ("Info: Program finished", "timing analysis and reports"),
             (None, "nextpnr done; bitstream (ecppack)")]
    script, start = "", 0
    for until, stage in steps:
        end = _NEXTPNR_LOG.index(until) if until else len(_NEXTPNR_LOG)
        script += (f"cat >> versa_top.tim <<'END'\n{_NEXTPNR_LOG[start:end]}END\n"
                   f"until grep -qxF '{stage}' shown; do sleep 0.05; done\n")
        start = end
    (tmp_path / "build.sh").write_text(script)
    shown = []

    def show(line):
        shown.append(line)
        with open(tmp_path / "shown", "a") as f:
            f.write(line.split("] ", 1)[1] + "\n")

    assert run_watched("build.sh", tmp_path, dict(os.environ), log, poll=0.05, show=show) is None
    assert all(re.match(r"\[ ?\d+:\d\d\] ", line) for line in shown)
    stages = [line.split("] ", 1)[1] for line in shown]
    assert stages[0].startswith("synthesis (yosys)")
    for _, stage in steps:
        assert stage in stages
    assert stages[-1] == "nextpnr done; bitstream (ecppack)"
    assert len(stages) == len(set(stages))


def test_synthesis_shows_yosys_step(tmp_path):
    """While yosys synthesises, the progress line names synth_ecp5's step (the
    two-deep numbered ``Executing`` lines of its log, not the passes inside
    them), read from the log a piece at a time; a line half written waits."""
    from hw.board.build import YosysSteps

    rpt = tmp_path / "versa_top.rpt"
    steps = YosysSteps(rpt)
    assert steps.step() is None and build_progress(None, None).startswith("synthesis (yosys)")
    rpt.write_text("2.1. Executing HIERARCHY pass (managing design hierarchy).\n"
                   "2.1.1. Finding top of design hierarchy..\n")
    assert steps.step() == "HIERARCHY pass (managing design hierarchy)"
    with open(rpt, "a") as f:
        f.write("2.46. Executing ABC9 pass.\n2.46.3. Executing ABC9_OPS pass.\n2.47. Exec")
    assert steps.step() == "ABC9 pass"
    assert build_progress(None, steps.step()) == "synthesis (yosys): ABC9 pass"
    with open(rpt, "a") as f:
        f.write("uting TECHMAP pass (map to technology primitives).\n")
    assert steps.step() == "TECHMAP pass (map to technology primitives)"
    # once nextpnr writes its log, that decides the line
    assert build_progress("", steps.step()) == "nextpnr: reading the netlist"

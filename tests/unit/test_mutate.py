"""sim/mutate (``make mutate``): the mutator finds the hardware sites of a small
Amaranth source and leaves its parameter checks, shapes and names alone; a
mutation changes just its own span; and in a scratch tree a comparison flipped
in SackAlign is killed by SackAlign's own test, a mutant that cannot elaborate
counts as stillborn, and the checkout is never written."""

from pathlib import Path

from sim.mutate.blocks import BLOCKS, by_name
from sim.mutate.run import ROOT, Mutant, Runner
from sim.mutate.sites import Site, apply, find_sites

SOURCE = '''
from amaranth.hdl import Module, Mux, Signal


def helper_py(n):
    return n + 1


class Block:
    """Docstring: a == b, 3 + 4."""

    def __init__(self, width):
        assert width > 2, "too narrow"
        self.width = width

    def elaborate(self, platform):
        m = Module()
        assert self.width > 2, "too narrow"
        a = Signal(8, name="a")
        b = Signal(8)
        if self.width < 4:
            raise ValueError("width")
        with m.If(a == b):
            m.d.sync += b.eq(Mux(a[0], a + 1, ~b & a))
        return m
'''


def test_sites_are_hardware_only():
    sites = find_sites(SOURCE)
    lines = SOURCE.splitlines()
    touched = {lines[s.line - 1].strip() for s in sites}
    assert touched == {"with m.If(a == b):", "m.d.sync += b.eq(Mux(a[0], a + 1, ~b & a))"}
    assert {s.op for s in sites} == {"if", "cmp", "mux", "addsub", "const", "invert", "term",
                                     "andor"}
    by_what = {s.what for s in sites}
    assert {"== -> !=", "If(a == b) -> 1", "If(a == b) -> 0", "+ -> -", "1 -> 2", "1 -> 0",
            "0 -> 1", "& -> |", "& a dropped", "& ~b dropped"} <= by_what


def test_apply_changes_only_its_span():
    site = next(s for s in find_sites(SOURCE) if s.op == "mux")
    out = apply(SOURCE, site)
    assert "b.eq(Mux(a[0], ~b & a, a + 1))" in out
    changed = [(x, y) for x, y in zip(SOURCE.splitlines(), out.splitlines(), strict=True)
               if x != y]
    assert len(changed) == 1
    cmp = next(s for s in find_sites(SOURCE) if s.op == "cmp")
    assert "with m.If(a != b):" in apply(SOURCE, cmp)


def test_every_block_file_exists_and_has_tests():
    for b in BLOCKS:
        assert b.unit or b.cocotb, b.name
        for f in b.files:
            assert (ROOT / f).is_file(), f
        for entry in b.unit + b.cocotb:
            assert (ROOT / entry.split()[0].split("::")[0]).is_file(), entry


def test_killed_and_stillborn_in_a_scratch_tree(tmp_path):
    path = "hw/reliability/sack_align.py"
    source = (ROOT / path).read_text()
    block = by_name()["rel.sack_align"]
    # the verdicts are under test, not the time: a limit far above the ~2 s these
    # runs take, which a loaded 2-core machine must not reach (a real hang still ends)
    runner = Runner(tmp_path, jobs=1, min_timeout=1200.0)
    flip = next(s for s in find_sites(source, path) if s.op == "cmp" and s.what == "!= -> ==")
    # a comparison against a string: Amaranth refuses it while elaborating
    start = source.index("!= 0", source.index("def elaborate"))
    bad = Site(path, source.count("\n", 0, start) + 1, "test", "elaboration error",
               ((start + 3, start + 4, '"x"'),))
    results = {}
    for site in (flip, bad):
        m = Mutant(site.op, block.name, path, site.line, site.op, site.what, site.key, "")
        results[site.op] = runner.run_mutant(m, block, site=site)
    assert results["cmp"].result == "killed", results["cmp"]
    assert "test_rel_sack_align.py" in results["cmp"].by
    assert results["test"].result == "stillborn", results["test"]
    assert (ROOT / path).read_text() == source
    assert Path(tmp_path, "w0", path).read_text() == source


def test_a_key_names_one_site():
    """Two sites of one line alike in operator and change (two constants 0, two
    terms of one ``&`` dropped) have keys of their own, in every file under hw/:
    a report's key reruns the mutant it names (``--rerun``)."""
    src = SOURCE.replace("m.d.sync += b.eq(Mux(a[0], a + 1, ~b & a))",
                         "m.d.sync += [a.eq(0), b.eq(0 & a & b & a[1])]")
    sites = find_sites(src)
    consts = [s for s in sites if s.op == "const" and s.what == "0 -> 1"]
    assert len(consts) == 2 and consts[0].key != consts[1].key
    assert len({apply(src, s) for s in consts}) == 2
    assert len({s.key for s in sites}) == len(sites)
    for path in sorted(ROOT.glob("hw/**/*.py")):
        rel = str(path.relative_to(ROOT))
        keys = [s.key for s in find_sites(path.read_text(), rel)]
        assert len(set(keys)) == len(keys), rel

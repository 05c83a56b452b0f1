"""hw/comment_lint.py, ``make lint``'s rule that comments under hw/ carry no build
notes: it finds build tags, negative slack figures and seed numbers in comments
and docstrings, passes rules and code, and the tree passes it."""

from pathlib import Path

from hw.comment_lint import check_paths, check_source, main

REPO = Path(__file__).resolve().parents[2]

NOTES = '''\
"""A block.

Placed with seed 2 it met timing.
"""
x = 1  # registered (b41: tdata -> ovh_beats)


def f():
    # one LUT behind the enable, -0.88 ns at 7 ns
    return 2  # b49s4 took 4.6 ns of routing


class C:
    """Among b44's worst (-1.18); r5rip6 met it; --seed 5 did not converge."""
'''

CLEAN = '''\
"""A block: registered, so the enable fans out to ~300 flip-flops from a
flip-flop (docs/timing.md#rx-parser). The block RAM's clock-to-output is
4.1-4.4 ns; an 8 ns period at 125 MHz."""
b1, b2 = 1, 2  # two nodes of the tree: code and its names are not read
tag = "b41"  # nor string literals that are not docstrings
mask = 0xb1 - 3  # (a - b) / 2, bits 0..7 of the seed register, seeds taken from the PRNG
'''


def test_finds_build_notes():
    found = check_source(NOTES, "x.py")
    by_line = {}
    for f in found:
        name, line, rest = f.split(":", 2)
        assert name == "x.py"
        by_line.setdefault(int(line), []).append(rest.strip().split(" '")[0])
    assert by_line == {
        3: ["seed number"],
        5: ["build tag"],
        9: ["negative slack figure"],
        10: ["build tag"],
        14: ["build tag", "negative slack figure", "seed number"],
    }
    assert "'b41'" in next(f for f in found if f.startswith("x.py:5:"))
    assert "'-0.88 ns'" in next(f for f in found if f.startswith("x.py:9:"))


def test_passes_rules_and_code():
    assert check_source(CLEAN) == []


def test_main_exit_status(tmp_path, capsys):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "ok.py").write_text(CLEAN)
    assert main([str(tmp_path)]) == 0
    (tmp_path / "pkg" / "notes.py").write_text(NOTES)
    assert main([str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "notes.py:5: build tag 'b41'" in out and "ok.py" not in out


def test_hw_tree_is_clean():
    """The gateware as it is: no build notes left in its comments."""
    assert check_paths([REPO / "hw"]) == []

"""docs/architecture.md's block table names every Python file under hw/ (its
file column: ``hw/pkg/name.py``, or ``name.py`` after a name of the same
package in the same cell) and names no file that does not exist."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
# a path under hw/ (a file, or a package's folder that the bare names after it
# are in), or a bare file name
TOKEN = re.compile(r"\bhw/(?:\w+/)*(?:\w+\.py)?|(?<![\w/.])\w+\.py\b")


def named_files(text: str) -> set[str]:
    """The files the table's file column names, as paths from the root."""
    found = set()
    for line in text.splitlines():
        cells = line.split("|")
        if len(cells) < 4 or not line.startswith("|"):
            continue
        folder = None
        for token in TOKEN.findall(cells[2]):
            if token.startswith("hw/"):
                folder, _, name = token.rpartition("/")
                if name:
                    found.add(token)
            elif folder is not None:
                found.add(f"{folder}/{token}")
    return found


def test_named_files_resolves_bare_names_in_their_package():
    text = ("| a | hw/rx/window.py (x), window_ack.py (`AckReader`) | y | |\n"
            "| b | hw/board/: soc.py, top.py; hw/axi.py, crc.py | z | docs/board.md |\n"
            "| c | the doc's prose, not.py | hw/not_a_file_column.py | |\n")
    assert named_files(text) == {"hw/rx/window.py", "hw/rx/window_ack.py", "hw/board/soc.py",
                                 "hw/board/top.py", "hw/axi.py", "hw/crc.py"}


def test_every_hw_file_is_in_the_table():
    named = named_files(DOC.read_text())
    files = {p.relative_to(ROOT).as_posix() for p in (ROOT / "hw").rglob("*.py")
             if p.name != "__init__.py"}
    assert not files - named, (
        "docs/architecture.md's block table does not name these files of hw/ (add each with "
        "what it holds): " + ", ".join(sorted(files - named)))
    assert not named - files, (
        "docs/architecture.md's block table names files that do not exist: "
        + ", ".join(sorted(named - files)))

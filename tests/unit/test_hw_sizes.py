"""The size limits of hw/ (docs/architecture.md, "The blocks"): a Python
file is at most 700 lines and an ``elaborate()`` at most 300, so that each
block reads on its own. Checked for the packages that keep them (hw/rx); a
package joins ``LIMITED`` once it does."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIMITED = ("hw/rx",)
MAX_FILE_LINES = 700
MAX_ELABORATE_LINES = 300


def _files():
    return sorted(p for pkg in LIMITED for p in (ROOT / pkg).rglob("*.py"))


@pytest.mark.parametrize("path", _files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_file_and_elaborate_within_limits(path):
    text = path.read_text()
    lines = len(text.splitlines())
    assert lines <= MAX_FILE_LINES, (
        f"{path.relative_to(ROOT)} has {lines} lines, more than {MAX_FILE_LINES}: split it "
        f"into components or builder modules")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef) and node.name == "elaborate":
            length = node.end_lineno - node.lineno + 1
            assert length <= MAX_ELABORATE_LINES, (
                f"{path.relative_to(ROOT)}:{node.lineno}: elaborate() has {length} lines, more "
                f"than {MAX_ELABORATE_LINES}")

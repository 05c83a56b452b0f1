"""The size limits of hw/ (docs/architecture.md, "The blocks"): every Python
file under hw/ is at most 700 lines and every ``elaborate()`` in it at most
300, so that each block reads on its own. A failure names the file (and the
``elaborate()``'s line), its size and the limit."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_FILE_LINES = 700
MAX_ELABORATE_LINES = 300


def _files():
    return sorted((ROOT / "hw").rglob("*.py"))


def size_violations(text: str, name: str) -> list[str]:
    """What of ``text`` (the file ``name``) breaks the limits: one message
    per oversized file or ``elaborate()``; none when it keeps them."""
    found = []
    lines = len(text.splitlines())
    if lines > MAX_FILE_LINES:
        found.append(f"{name} has {lines} lines, more than the limit of {MAX_FILE_LINES}: split "
                     f"it into components or builder modules")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "elaborate":
            length = node.end_lineno - node.lineno + 1
            if length > MAX_ELABORATE_LINES:
                found.append(f"{name}:{node.lineno}: elaborate() has {length} lines, more than "
                             f"the limit of {MAX_ELABORATE_LINES}: move its parts into builders")
    return found


def test_every_hw_package_is_checked():
    # the walk reaches every package, so a new one is under the limits at once
    packages = {p.parent.relative_to(ROOT).as_posix() for p in _files()}
    assert {"hw", "hw/board", "hw/nic", "hw/reliability", "hw/rx", "hw/tx"} <= packages


@pytest.mark.parametrize("path", _files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_file_and_elaborate_within_limits(path):
    problems = size_violations(path.read_text(), str(path.relative_to(ROOT)))
    assert not problems, "\n".join(problems)


def test_oversized_file_and_elaborate_are_named():
    body = "\n".join(f"        x = {k}" for k in range(MAX_ELABORATE_LINES))
    text = f"class A:\n    def elaborate(self, platform):\n{body}\n"
    text += "\n" * (MAX_FILE_LINES + 1 - len(text.splitlines()))
    problems = size_violations(text, "hw/big.py")
    assert problems == [
        f"hw/big.py has {MAX_FILE_LINES + 1} lines, more than the limit of {MAX_FILE_LINES}: "
        f"split it into components or builder modules",
        f"hw/big.py:2: elaborate() has {MAX_ELABORATE_LINES + 1} lines, more than the limit of "
        f"{MAX_ELABORATE_LINES}: move its parts into builders"]
    assert size_violations("def elaborate(self, platform):\n    return 1\n", "hw/small.py") == []

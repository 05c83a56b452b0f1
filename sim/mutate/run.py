"""Sampling mutants and running each one's block tests in a scratch tree.

Each worker owns a scratch copy of the source tree (build/mutate/scratch/wN:
hw, sim, tests, host_driver, docs and the top-level files, never the
checkout); a mutant is written into it, the block's tests run there with
PYTHONPATH pointing at it and bytecode caching off (a restored file of the
same size and second must not reuse the mutant's .pyc), and the original file
is put back."""

import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .sites import apply, diff, find_sites

ROOT = Path(__file__).resolve().parents[2]
TREE = ("hw", "sim", "tests", "host_driver", "docs", "constraints", "pyproject.toml", "Makefile",
        "README.md")
IGNORE = shutil.ignore_patterns("__pycache__", "sim_build", "build", ".hypothesis", "*.pyc")


@dataclass
class Mutant:
    ident: str
    block: str
    path: str
    line: int
    op: str
    what: str
    key: str
    diff: str
    result: str = ""
    by: str = ""
    seconds: float = 0.0
    notes: list = field(default_factory=list)


def sample(blocks, n, seed, root=ROOT):
    """``n`` mutants stratified over ``blocks``: each block at least one, the rest in
    proportion to its sites (largest remainders first, ties drawn at random); inside
    a block an operator kind first, then a site of that kind, both uniformly, so
    that the many integer constants do not crowd out the rest."""
    rng = random.Random(seed)
    sites = {}
    for b in blocks:
        found = []
        for f in b.files:
            found += find_sites((root / f).read_text(), f)
        if found:
            sites[b.name] = found
    names = sorted(sites)
    n = min(n, sum(len(s) for s in sites.values()))
    quota = {name: min(1, n) for name in names} if n >= len(names) else \
        {name: 1 for name in rng.sample(names, n)}
    rest = n - sum(quota.values())
    total = sum(len(sites[name]) for name in names)
    share = {name: rest * len(sites[name]) / total for name in names}
    for name in names:
        quota[name] = quota.get(name, 0) + int(share[name])
    order = sorted(names, key=lambda name: (share[name] - int(share[name]), rng.random()),
                   reverse=True)
    for name in order[:n - sum(quota.values())]:
        quota[name] += 1
    chosen = []
    for name in names:
        pool = list(sites[name])
        for _ in range(min(quota[name], len(pool))):
            ops = sorted({s.op for s in pool})
            op = rng.choice(ops)
            site = rng.choice([s for s in pool if s.op == op])
            pool.remove(site)
            chosen.append((name, site))
    return chosen, {name: len(s) for name, s in sites.items()}


def make_mutants(chosen, root=ROOT):
    out = []
    for i, (block, site) in enumerate(chosen, 1):
        src = (root / site.path).read_text()
        out.append(Mutant(f"M{i:03d}", block, site.path, site.line, site.op, site.what, site.key,
                          diff(src, apply(src, site), site.path)))
    return out


def find_site(key, root=ROOT):
    path = key.split(":", 1)[0]
    for s in find_sites((root / path).read_text(), path):
        if s.key == key:
            return s
    raise KeyError(f"no mutation site {key} in {path} (the file changed since the report?)")


def scratch_tree(dest, root=ROOT):
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name in TREE:
        src = root / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=IGNORE)
        elif src.exists():
            shutil.copy2(src, dest / name)
    return dest


class Runner:
    """Runs test entries (``path[::test] [-k expr]``) in scratch trees."""

    def __init__(self, scratch, jobs, timeout_factor=3.0, min_timeout=90.0, log=print):
        self.trees = [scratch_tree(Path(scratch).resolve() / f"w{i}") for i in range(jobs)]
        self.free = list(self.trees)
        self.lock = threading.Lock()
        self.jobs = jobs
        self.baseline = {}
        self.timeout_factor = timeout_factor
        self.min_timeout = min_timeout
        self.log = log

    def _take(self):
        with self.lock:
            return self.free.pop()

    def _give(self, tree):
        with self.lock:
            self.free.append(tree)

    def run_entry(self, tree, entry, timeout):
        """(verdict, detail, seconds): verdict is pass, killed, stillborn, hang or error."""
        import json

        result = tree / ".mutate_result.json"
        result.unlink(missing_ok=True)
        shutil.rmtree(tree / ".hypothesis", ignore_errors=True)
        args = entry.split()
        env = dict(os.environ, PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1",
                   MUTATE_RESULT=str(result))
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
               "-p", "sim.mutate.plugin", "-o", "addopts=", "-m", "not long", *args]
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return "hang", f"{entry}: no result within {timeout:.0f} s", time.monotonic() - t0
        secs = time.monotonic() - t0
        if not result.exists():
            return "error", f"{entry}: exit {proc.returncode}: {out.decode()[-400:]}", secs
        r = json.loads(result.read_text())
        if r["hw"] and not r["hw"].startswith(str(tree)):
            return "error", f"{entry}: imported {r['hw']}, not the scratch tree's hw", secs
        if r["killed"]:
            return "killed", r["killed"][0], secs
        if r["collect"]:
            return "stillborn", r["collect"][0], secs
        if r["elab"]:
            return "stillborn", r["elab"][0], secs
        if proc.returncode == 5 or r["passed"] == 0:
            return "error", f"{entry}: no test ran", secs
        if proc.returncode != 0:
            return "error", f"{entry}: exit {proc.returncode}: {out.decode()[-400:]}", secs
        return "pass", "", secs

    def check_baseline(self, entries):
        """Every entry passes on the unmutated tree; its time sets the mutants' limit."""
        def one(entry):
            tree = self._take()
            try:
                verdict, detail, secs = self.run_entry(tree, entry, timeout=3600)
            finally:
                self._give(tree)
            self.log(f"  baseline {entry}: {verdict} in {secs:.1f} s")
            if verdict != "pass":
                raise SystemExit(f"baseline fails, fix the block map or the tree: {detail}")
            self.baseline[entry] = secs

        with ThreadPoolExecutor(self.jobs) as pool:
            list(pool.map(one, sorted(entries)))

    def timeout(self, entry):
        return max(self.min_timeout, self.timeout_factor * self.baseline.get(entry, 60.0))

    def run_mutant(self, mutant, block, root=ROOT, site=None):
        """Runs ``mutant`` (its ``site``, or the one its key names) on ``block``'s tests."""
        site = site or find_site(mutant.key, root)
        tree = self._take()
        target = tree / mutant.path
        original = (root / mutant.path).read_text()
        t0 = time.monotonic()
        try:
            target.write_text(apply(original, site))
            verdict, detail = "pass", ""
            stillborn = ""
            for tier in (block.unit, block.cocotb):
                if verdict != "pass" or stillborn:
                    break   # the slow tier only for mutants the unit tests let live
                for entry in tier:
                    verdict, detail, _ = self.run_entry(tree, entry, self.timeout(entry))
                    if verdict == "stillborn":
                        stillborn, verdict = stillborn or detail, "pass"
                    elif verdict != "pass":
                        break
            if verdict == "pass" and stillborn:
                verdict, detail = "stillborn", stillborn
        finally:
            target.write_text(original)
            self._give(tree)
        mutant.result = {"pass": "survived"}.get(verdict, verdict)
        mutant.by = detail
        mutant.seconds = round(time.monotonic() - t0, 1)
        return mutant


def run_all(mutants, blocks, runner, log=print):
    by_name = {b.name: b for b in blocks}
    entries = {e for m in mutants for e in by_name[m.block].unit + by_name[m.block].cocotb}
    log(f"baseline: {len(entries)} test entries on the unmutated tree")
    runner.check_baseline(entries)
    done = [0]
    lock = threading.Lock()

    def one(m):
        runner.run_mutant(m, by_name[m.block])
        with lock:
            done[0] += 1
            log(f"[{done[0]}/{len(mutants)}] {m.ident} {m.block} {m.path}:{m.line} {m.op} "
                f"{m.what} -> {m.result} ({m.seconds:.0f} s){': ' + m.by[:120] if m.by else ''}")
        return m

    with ThreadPoolExecutor(runner.jobs) as pool:
        return list(pool.map(one, mutants))


def as_dict(m):
    return asdict(m)

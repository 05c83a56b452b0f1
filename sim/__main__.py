"""``make sim``: the project's main demo.

Today it runs, in order:

1. the RX header parser demo: scapy traffic, valid and malformed, through the
   Verilated parser (``sim.parser_demo``), into ``build/sim/parser/``;
2. a golden-model scenario of the MRC transport over a faulty multipath
   fabric (one of 8 paths blackholed mid-transfer), side by side with
   go-back-N RoCE and oblivious spraying (``sim.mrcsim``), into
   ``build/sim/<scenario>/``.

Then it writes ``build/sim/report.md`` and ``report.json`` (every step's
summary) and ``build/sim/traffic.pcap`` (every step's frames). ``--model-only``
(``make sim MODEL=1``) runs just the model scenario.
"""

import argparse
import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _parser_step(out: Path) -> dict:
    from sim import parser_demo

    return parser_demo.run(out / "parser")


def _model_step(out: Path) -> dict:
    from sim import mrcsim

    return mrcsim.demo(out)


# (key, title, function(outdir) -> summary with files under it)
STEPS = [("parser", "RX header parser on Verilator", _parser_step)]
MODEL_STEPS = [("model", "MRC golden model: one of 8 paths blackholed", _model_step)]


def _step_dir(out: Path, summary: dict) -> Path:
    return Path(summary.get("outdir") or out / "parser")


def _merge_pcaps(out: Path, dirs: list[Path]) -> int:
    """Concatenate every step's pcap (raw Ethernet frames, malformed ones included)."""
    from scapy.utils import RawPcapReader, RawPcapWriter

    frames = []
    for d in dirs:
        for pcap in sorted(d.glob("*.pcap")):
            frames.extend(data for data, _ in RawPcapReader(str(pcap)))
    with RawPcapWriter(str(out / "traffic.pcap"), linktype=1) as writer:
        for data in frames:
            writer.write(data)
    return len(frames)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m sim", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "sim")
    parser.add_argument("--model-only", action="store_true", help="skip the RTL demo")
    args = parser.parse_args(argv)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    steps = MODEL_STEPS if args.model_only else STEPS + MODEL_STEPS
    summaries, dirs, sections = {}, [], []
    for key, title, func in steps:
        print(f"\n=== {title} ===", flush=True)
        t0 = time.monotonic()
        summary = func(out)
        d = _step_dir(out, summary)
        summaries[key] = summary
        dirs.append(d)
        report = d / "report.md"
        body = report.read_text() if report.exists() else ""
        rel = d.relative_to(out)
        sections.append(f"## {title}\n\nFiles in `{rel}/`; step took "
                        f"{time.monotonic() - t0:.0f} s of wall time.\n\n{body}")
    frames = _merge_pcaps(out, dirs)
    (out / "report.md").write_text("# make sim\n\n" + "\n\n".join(sections))
    (out / "report.json").write_text(json.dumps(summaries, indent=1, default=str))
    print(f"\nWrote {out}/report.md, report.json and traffic.pcap ({frames} frames); "
          f"per-step outputs in {', '.join(str(d.relative_to(out)) + '/' for d in dirs)}")


if __name__ == "__main__":
    main()

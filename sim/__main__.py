"""``make sim``: the project's main demo.

Today it runs, in order:

1. the RX header parser demo: scapy traffic, valid and malformed, through the
   Verilated parser (``sim.parser_demo``);
2. a golden-model scenario of the MRC transport over a faulty multipath
   fabric, side by side with go-back-N RoCE (``sim.mrcsim``).

Everything is written under ``build/sim/`` (see README.md). ``--model-only``
(``make sim MODEL=1``) runs just the model scenario.
"""

import argparse
import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (title, module, function(outdir) -> dict); a step is listed once its module lands.
STEPS = []
MODEL_STEPS = []


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m sim", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "sim")
    parser.add_argument("--model-only", action="store_true", help="skip the RTL demo")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    steps = MODEL_STEPS if args.model_only else STEPS + MODEL_STEPS
    if not steps:
        raise SystemExit("no demo steps are available yet")
    for title, module, func in steps:
        print(f"\n=== {title} ===", flush=True)
        getattr(importlib.import_module(module), func)(args.out)
    print(f"\nOutputs are in {args.out}/")


if __name__ == "__main__":
    main()

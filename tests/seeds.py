"""The seed of a test run, in one place (docs/verification.md, "Seeds").

A run has one seed, pytest-randomly's ``--randomly-seed`` (``make test
SEED=n``; a new one each run by default). tests/conftest.py puts it in the
environment variable ``MRC_TEST_SEED``, which the cocotb simulators that
``sim.cocotb_runner`` starts inherit, so a test and its Verilator subprocess
draw from the same seed.

A randomised test takes its stimulus from ``rng(salt)`` (a ``random.Random``)
or passes ``of(salt)`` to a bench that takes a seed: ``salt`` is the number
(or any hashable text) the test used as its fixed seed before, so that two
streams of one test stay distinct. With ``MRC_TEST_SEED`` unset (a script run
outside pytest) ``of(salt)`` is ``salt`` itself: the stimulus the test had
when its seed was fixed.
"""

from __future__ import annotations

import hashlib
import os
import random
import shlex

__all__ = ["ENV", "run_seed", "of", "rng", "replay_commands"]

ENV = "MRC_TEST_SEED"


def run_seed() -> int | None:
    """The run's seed, or None outside a seeded run."""
    value = os.environ.get(ENV)
    return None if value in (None, "") else int(value)


def of(salt=0):
    """The seed for stream ``salt`` of this run: a 64-bit number drawn from the
    run's seed and ``salt``; ``salt`` itself outside a seeded run."""
    base = run_seed()
    if base is None:
        return salt
    digest = hashlib.sha256(f"{base}:{salt!r}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def rng(salt=0) -> random.Random:
    """A ``random.Random`` seeded with ``of(salt)``."""
    return random.Random(of(salt))


def replay_commands(seed: int, failed: dict[str, bool]) -> list[str]:
    """The commands that replay the ``failed`` tests (node id -> marked
    ``long``) with ``seed``: each failed test on its own, then the whole run."""
    target = {False: "test", True: "test-long"}
    lines = [f"make {target[long]} SEED={seed} TESTS={shlex.quote(nodeid)}"
             for nodeid, long in sorted(failed.items())]
    return lines + [f"make {t} SEED={seed}" for t in sorted({target[v] for v in failed.values()})]

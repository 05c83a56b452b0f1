"""The run's seed (docs/verification.md, "Seeds"): pytest-randomly's
``--randomly-seed``, new each run unless given (``make test SEED=n``), goes
to ``tests.seeds`` (and through the environment to the cocotb simulators) and
to hypothesis; the header prints it, and a run with failures ends with the
commands that replay them.

The tests run in collection order (pytest-randomly's shuffle is off): every
pytest-xdist worker and every pytest-split group sees one order, so
``--splits N --group i`` shards the suite the same way on every machine."""

from __future__ import annotations

import os

import pytest

from tests import seeds


def _run_seed(config) -> int | None:
    if config.pluginmanager.hasplugin("randomly"):
        return int(config.getoption("randomly_seed"))
    return seeds.run_seed()


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    if config.pluginmanager.hasplugin("randomly"):
        config.option.randomly_reorganize = False
    seed = _run_seed(config)
    if seed is None:
        return
    os.environ[seeds.ENV] = str(seed)
    if config.pluginmanager.hasplugin("hypothesispytest") and \
            config.getoption("hypothesis_seed", None) is None:
        from hypothesis import core

        core.global_force_seed = seed


def pytest_report_header(config):
    seed = _run_seed(config)
    if seed is None:
        return "MRC seed: none (fixed stimulus; pytest-randomly is not installed)"
    return f"MRC seed: {seed} (replay the run: make test SEED={seed})"


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    seed = _run_seed(config)
    failed = {r.nodeid: "long" in getattr(r, "keywords", {})
              for kind in ("failed", "error")
              for r in terminalreporter.stats.get(kind, []) if getattr(r, "nodeid", "")}
    if seed is None or not failed:
        return
    terminalreporter.section("replay with the same seed")
    for line in seeds.replay_commands(seed, failed):
        terminalreporter.write_line(line)

"""tests/seeds.py: one seed per run, a distinct stream per salt, the fixed
stimulus outside a seeded run, and the replay commands a failed run prints."""

import pytest

from tests import seeds


def test_streams_follow_the_run_seed(monkeypatch):
    monkeypatch.setenv(seeds.ENV, "1234")
    a = [seeds.of(s) for s in (5, 6, "hold1.00.5")]
    assert len(set(a)) == 3 and all(0 <= x < 1 << 64 for x in a)
    assert seeds.rng(5).random() == seeds.rng(5).random()
    monkeypatch.setenv(seeds.ENV, "1235")
    assert [seeds.of(s) for s in (5, 6, "hold1.00.5")] != a
    monkeypatch.setenv(seeds.ENV, "1234")
    assert [seeds.of(s) for s in (5, 6, "hold1.00.5")] == a


def test_unseeded_is_the_fixed_stimulus(monkeypatch):
    monkeypatch.delenv(seeds.ENV, raising=False)
    assert seeds.run_seed() is None and seeds.of(5) == 5 and seeds.of("x") == "x"


def test_this_run_is_seeded(pytestconfig):
    """Under pytest with pytest-randomly the conftest has exported the run's seed
    and handed it to hypothesis."""
    from hypothesis import core

    if not pytestconfig.pluginmanager.hasplugin("randomly"):
        pytest.skip("pytest-randomly is not installed")
    assert seeds.run_seed() == pytestconfig.getoption("randomly_seed")
    if pytestconfig.getoption("hypothesis_seed", None) is None:
        assert core.global_force_seed == seeds.run_seed()


def test_replay_commands():
    assert seeds.replay_commands(7, {"tests/a.py::t[x y]": False, "tests/s.py::soak": True}) == [
        "make test SEED=7 TESTS='tests/a.py::t[x y]'",
        "make test-long SEED=7 TESTS=tests/s.py::soak",
        "make test SEED=7", "make test-long SEED=7"]

"""``one_hot_checks``: a test module that simulates hw.pipeline.OneHotFSM
machines takes it (``pytestmark = pytest.mark.usefixtures("one_hot_checks")``)
so the simulator checks, each cycle, that each machine's state vector stays
one-hot (an ``Assert``; none reaches a netlist)."""

import pytest

from hw.pipeline import one_hot_assertions


@pytest.fixture
def one_hot_checks():
    with one_hot_assertions():
        yield

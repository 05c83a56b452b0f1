"""``invariant_checks``: a test module that simulates blocks takes it
(``pytestmark = pytest.mark.usefixtures("invariant_checks")``) so the
simulator checks, each cycle, every invariant the blocks state with
``hw.formal.invariant`` (that a OneHotFSM's state vector stays one-hot, that
copies of a replicated flag agree, a counter bank's pending bound): an
``Assert`` each, none of which reaches a netlist."""

import pytest

from hw.formal import block_invariants


@pytest.fixture
def invariant_checks():
    with block_invariants():
        yield

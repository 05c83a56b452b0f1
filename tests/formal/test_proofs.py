"""Every registered formal proof (hw/*_props.py) passes, and the flow catches a broken block.

Each proof runs its property task (k-induction or bounded) and its cover task
through ``sim.formal.run_proof``; the long ones run under ``-m long``.
"""

from pathlib import Path

import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hw.formal import Proof
from hw.pipeline_props import StreamStageHarness
from sim.formal import all_proofs, run_proof

PROOFS = all_proofs(long=True)


@pytest.mark.parametrize(
    "proof", [pytest.param(p, id=p.name, marks=[pytest.mark.long] if p.long else [])
              for p in PROOFS])
def test_proof(proof, tmp_path):
    result = run_proof(proof, tmp_path, log=lambda *a, **k: None)
    assert result.passed, f"{proof.name}: {result.status}\n" + "\n".join(result.details)


class OverwritingStage(wiring.Component):
    """A broken stage: always ready, it overwrites a beat the sink has not taken."""

    def __init__(self, width):
        super().__init__({"i": In(stream.Signature(width)), "o": Out(stream.Signature(width))})

    def elaborate(self, platform):
        m = Module()
        full = Signal()
        m.d.comb += [self.i.ready.eq(1), self.o.valid.eq(full)]
        with m.If(self.i.valid):
            m.d.sync += [self.o.payload.eq(self.i.payload), full.eq(1)]
        with m.Elif(self.o.ready):
            m.d.sync += full.eq(0)
        return m


@pytest.mark.parametrize("check_data, mode", [(False, "prove"), (True, "bmc")])
def test_a_broken_stage_fails(check_data, mode, tmp_path):
    def build():
        h = StreamStageHarness(OverwritingStage, capacity=1, bubble_free=False,
                               check_data=check_data, fair_sink=not check_data)
        return h, h.inputs

    result = run_proof(Proof("broken_stage", build, mode=mode, depth=12, cover_depth=12),
                       tmp_path, log=lambda *a, **k: None)
    assert result.status[mode] == "FAIL", result.status
    assert any("Assert failed" in line or "failed assertion" in line for line in result.details)


def test_every_proof_is_documented():
    """docs/verification.md's table names every registered proof."""
    doc = (Path(__file__).parents[2] / "docs" / "verification.md").read_text()
    missing = [p.name for p in PROOFS if f"| `{p.name}` |" not in doc]
    assert not missing, f"add these proofs to docs/verification.md's table: {missing}"

"""The golden model (sim/mrcsim.py ``scoreboard_run``) as the scoreboard of a
system test: the same flow (one QP, ``messages`` WRITEs of ``size`` bytes,
wr_id i, immediate ``i`` for flow 0) over the same number of paths, MTU and
loss, run through the model; the RTL's completions must match its, field for
field, in order (times excepted)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from sim.mrcsim import load_scenario, scoreboard_run

__all__ = ["model_completions", "normalise_model", "normalise_rtl"]

STATUS = {"SUCCESS": 0, "RETRY_EXCEEDED": 1, "FLUSHED": 5}


def model_completions(*, messages: int, size: int, imm: bool, paths: int = 8, mtu: int = 1024,
                      loss: float = 0.0, seed: int = 1, depth: int = 16) -> dict:
    scn = load_scenario("lossless")
    scn.update(name="system_scoreboard", seed=seed, faults=[])
    scn["fabric"]["paths_per_plane"] = paths
    scn["qp"]["mtu"] = mtu
    scn["evs"] = {"mode": "explicit", "values": list(range(0xC000, 0xC000 + paths))}
    scn["flows"] = [{"src": "a", "dst": "b", "messages": messages, "size": size, "imm": imm,
                     "depth": depth}]
    if loss:
        scn["faults"] = [{"type": "loss", "target": {"kind": "core", "plane": "*", "path": "*",
                                                      "to": "*"}, "rate": loss}]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scenario.json"
        path.write_text(json.dumps(scn))
        result = scoreboard_run(path)
    if not result["finished"]:
        raise AssertionError("the golden model did not finish the scenario")
    return normalise_model(result["qps"][0])


def normalise_model(qp: dict) -> dict:
    return {
        "send": [(c["wr_id"], STATUS[c["status"]], c["byte_len"], c["imm"])
                 for c in qp["send_cq"]],
        "recv": [(c["wr_id"], STATUS[c["status"]], c["byte_len"], c["imm"])
                 for c in qp["recv_cq"]],
    }


def normalise_rtl(send_cqes, recv_cqes, *, imm: bool) -> dict:
    # The model reports imm only where the opcode carries one; a send CQE of
    # the RTL copies the WQE's imm field, which is 0 for a plain WRITE.
    return {
        "send": [(c.wr_id, c.status, c.byte_len, c.imm if imm else None) for c in send_cqes],
        "recv": [(c.wr_id, c.status, c.byte_len, c.imm) for c in recv_cqes],
    }

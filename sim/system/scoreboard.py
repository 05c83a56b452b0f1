"""The golden model (sim/mrcsim.py ``scoreboard_run``) as the scoreboard of a
system test: the same flows (QPs) over the same number of paths, MTU, loss
and outage, run through the model; the RTL's completions must match its,
field for field, in order, per QP (times excepted).

A flow is ``{"src": "a"|"b", "dst": "b"|"a", "messages": n, "size": bytes,
"imm": bool, "depth": outstanding WQEs}``; host "a" is NIC 0, "b" NIC 1. The
model posts wr_id 0..n-1 on each flow, with immediate ``(flow index << 24) |
wr_id`` when ``imm``; the RTL test must post the same (``flow_imm``).

What the model and the RTL share is the outcome, not the timing: both run
their own fabric randomness (loss draws), so a comparison is exact only for
outcomes that do not depend on timing: every WQE of a lossy run completes
SUCCESS in order; an outage that starts before the first completion ends in
RETRY_EXCEEDED for the oldest WQE and FLUSHED for every other posted one.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hw.reliability.layouts import CqeStatus
from sim.mrcsim import load_scenario, scoreboard_run

__all__ = ["flow_imm", "model_completions", "model_flows", "normalise_model", "normalise_rtl"]

# the model's verbs names (and the CQE status names of docs/reliability.md) -> CQE status
# send-CQE status codes by the model's (verbs) and the CQE's names (hw CqeStatus)
STATUS = {"SUCCESS": CqeStatus.SUCCESS, "RETRY_EXCEEDED": CqeStatus.RETRY_EXCEEDED,
          "RETRY_EXC_ERR": CqeStatus.RETRY_EXCEEDED, "LOC_QP_OP_ERR": CqeStatus.LOC_QP_OP_ERR,
          "FLUSHED": CqeStatus.FLUSHED, "WR_FLUSH_ERR": CqeStatus.FLUSHED,
          "REM_INV_REQ_ERR": CqeStatus.REM_INV_REQ, "REM_ACCESS_ERR": CqeStatus.REM_ACCESS}
HOSTS = ("a", "b")


def flow_imm(flow_index: int, wr_id: int) -> int:
    """The immediate the model puts on WRITE_WITH_IMM ``wr_id`` of flow ``flow_index``."""
    return (flow_index << 24 | wr_id) & 0xFFFFFFFF


def model_flows(flows: list[dict], *, paths: int = 8, mtu: int = 1024, loss: float = 0.0,
                loss_to: str = "*", outage_ns: float | None = None,
                path_down: tuple[int, str, float] | None = None, seed: int = 1,
                qp: dict | None = None) -> list[dict]:
    """Run ``flows`` through the golden model; one normalised completion record
    per flow (``normalise_model``), in flow order.

    ``loss``: the loss rate of every core link towards ``loss_to`` ("*", "a" or
    "b": the links into that host, i.e. one direction). ``outage_ns``: every
    core link of both directions goes down at that time and stays down.
    ``path_down``: ``(path, to, at_ns)``: path ``path`` towards host ``to``
    goes down at ``at_ns`` and stays down.
    ``qp``: QpConfig fields (sim/model/qp.py) to override, e.g. the retry counts.
    """
    if not flows:
        raise ValueError("model_flows needs at least one flow")
    for f in flows:
        if f.get("src") not in HOSTS or f.get("dst") not in HOSTS or f["src"] == f["dst"]:
            raise ValueError(f"a flow goes from host 'a' to 'b' or back, not {f!r}")
    if loss_to not in ("*", *HOSTS):
        raise ValueError(f"loss_to must be '*', 'a' or 'b', not {loss_to!r}")
    scn = load_scenario("lossless")
    scn.update(name="system_scoreboard", seed=seed, faults=[])
    scn["fabric"]["paths_per_plane"] = paths
    scn["qp"]["mtu"] = mtu
    scn["qp"].update(qp or {})
    scn["evs"] = {"mode": "explicit", "values": list(range(0xC000, 0xC000 + paths))}
    scn["flows"] = [dict(f) for f in flows]
    if loss:
        scn["faults"].append({"type": "loss", "rate": loss,
                              "target": {"kind": "core", "plane": "*", "path": "*",
                                         "to": loss_to}})
    if outage_ns is not None:
        scn["faults"].append({"type": "down", "at_ns": outage_ns,
                              "target": {"kind": "core", "plane": "*", "path": "*",
                                         "to": "*"}})
    if path_down is not None:
        path, to, at_ns = path_down
        scn["faults"].append({"type": "down", "at_ns": at_ns,
                              "target": {"kind": "core", "plane": 0, "path": path, "to": to}})
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scenario.json"
        path.write_text(json.dumps(scn))
        result = scoreboard_run(path)
    if not result["finished"]:
        raise AssertionError("the golden model did not finish the scenario")
    return [normalise_model(q) for q in result["qps"]]


def model_completions(*, messages: int, size: int, imm: bool, paths: int = 8, mtu: int = 1024,
                      loss: float = 0.0, seed: int = 1, depth: int = 16) -> dict:
    """One flow NIC 0 -> NIC 1 (wr_id i, immediate i): the model's completions."""
    return model_flows([{"src": "a", "dst": "b", "messages": messages, "size": size,
                         "imm": imm, "depth": depth}],
                       paths=paths, mtu=mtu, loss=loss, seed=seed)[0]


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
        "send": [(c.wr_id, c.status, c.byte_len, c.imm if imm else None)
                 for c in send_cqes],
        "recv": [(c.wr_id, c.status, c.byte_len, c.imm) for c in recv_cqes],
    }

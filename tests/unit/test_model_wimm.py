"""The requester's max_wimm bound in the golden model (MrcQp): a QP has at most
max_wimm WRITE_WITH_IMM messages started and not yet completed; the next one,
and the QP's WQEs behind it (WQEs of a QP go in order), wait until one completes."""

from __future__ import annotations

import pytest

from sim.model import QpConfig, World, explicit_evs
from sim.model.packet import DATA, OP_WRITE_FIRST, OP_WRITE_ONLY_IMM


def run(max_wimm, posts):
    """Post ``posts`` ((length, imm) pairs) on one QP; return the new data packets in
    wire order as (opcode, WITH_IMM messages started and not completed after it, send
    completions so far) and the connection."""
    cfg = QpConfig(mtu=256, ack_every=1, ack_delay_ns=500.0, max_wimm=max_wimm)
    w = World(seed=3, planes=1, paths_per_plane=4)
    w.add_host("a")
    w.add_host("b")
    conn = w.connect("a", "b", cfg=cfg, evs=explicit_evs([0xC000 + i for i in range(4)]),
                     mr_length=1 << 20)
    req = conn.requester
    seen = []

    def tap(p, now):
        if p.kind == DATA and not p.retx and p.src is w.nics["a"].host:
            seen.append((p.opcode, req.wimm_outstanding, len(req.send_cq)))

    w.fabric.taps.append(tap)
    for i, (length, imm) in enumerate(posts):
        req.post_write(i, conn.mr.va + i * 4096, conn.rkey, length, imm)
    assert w.run_until_idle(1e9)
    return seen, conn


POSTS = [(100, 1), (600, 2), (50, None), (100, 3), (300, 4), (0, 5), (700, None), (10, 6)]


@pytest.mark.parametrize("max_wimm", [1, 2, 3])
def test_outstanding_with_imm_never_exceeds_max_wimm(max_wimm):
    seen, conn = run(max_wimm, POSTS)
    req = conn.requester
    assert max(n for _, n, _ in seen) == max_wimm  # the bound is reached, never passed
    assert len(req.send_cq) == len(POSTS) and all(c.status == "SUCCESS" for c in req.send_cq)
    assert [c.wr_id for c in req.send_cq] == list(range(len(POSTS)))
    assert [c.imm for c in conn.responder.recv_cq] == [imm for _, imm in POSTS if imm]
    assert req.wimm_outstanding == 0 and req.stats["tx_retx"] == 0


def test_qp_waits_in_order_behind_a_blocked_with_imm():
    """max_wimm 1: WITH_IMM 0 (3 packets) is outstanding, WITH_IMM 1 waits, and the
    plain WRITE 2 posted after it waits too: the first packet of WQE 1 leaves
    only after WQE 0 completed, and WQE 2's after WQE 1's."""
    seen, conn = run(1, [(600, 1), (100, 2), (300, None)])
    assert [op for op, _, _ in seen][3:5] == [OP_WRITE_ONLY_IMM, OP_WRITE_FIRST], seen
    # WQE 1 starts once WQE 0 has completed, WQE 2 behind it
    assert [n for _, n, _ in seen] == [1, 1, 1, 1, 1, 1]
    assert [c for _, _, c in seen][:4] == [0, 0, 0, 1] and seen[4][2] >= 1, seen


def test_unbounded_reference_would_exceed():
    """The same posts with the default max_wimm (1024): more than three WITH_IMM
    messages are outstanding at once, so the bounds above are what limits them."""
    seen, _ = run(1024, POSTS)
    assert max(n for _, n, _ in seen) > 3


def test_max_wimm_must_be_positive():
    with pytest.raises(ValueError, match="max_wimm"):
        QpConfig(max_wimm=0).validate()

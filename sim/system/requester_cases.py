"""Requester corner cases, written once against the host driver and run on
both backends: two model NICs (tests/unit/test_driver_model.py, through
sim/system/model_harness.py) and two RTL NICs (tests/system/test_two_nic.py,
through sim/system/harness.py).

Each case takes two connection ends ``a`` (the requester) and ``b`` (its
peer), objects with ``dev``, ``qp``, ``mr``, ``recv_buf`` and ``send_buf``
(the model harness's ``Endpoint``, the RTL harness's ``Connection`` with its
``dev``), and checks completions, placed bytes and QP states:

``unsignaled``       verbs' signaled rule: a CQE only for signaled WQEs on
                     success, the ring slots of the others freed by it
``unknown_opcode``   a WQE with an opcode the NIC does not know completes
                     LOC_QP_OP_ERR after the WQEs before it (SUCCESS), the
                     rest FLUSHED, nothing of it on the wire, QP in ERROR
``post_in_error``    a WQE posted to a QP in ERROR completes FLUSHED
``reset_and_reuse``  ERROR -> RESET -> INIT -> RTR -> RTS on both ends, then
                     WRITE_WITH_IMMs both ways, byte-exact with the right
                     send and receive completions
``wimm_burst``       a burst of WRITE_WITH_IMMs into a small receive CQ that
                     the peer's host polls: byte-exact, every completion on
                     both sides; returns the WRITE_WITH_IMMs the requester
                     had outstanding at most, the peer's ``cq_full`` and
                     ``wimm_full`` drops and the requester's retransmissions
                     (with ``max_wimm`` at most the CQ's entries: none)
"""

from __future__ import annotations

import random

from host_driver.driver import Completion, QpState, WrOpcode
from hw.reliability.layouts import WqeOpcode

__all__ = ["post_in_error", "reconnect", "reset_and_reuse", "unknown_opcode", "unsignaled",
           "wimm_burst", "BAD_OPCODE", "WIMM_BURST_SIZES"]

BAD_OPCODE = 0x07  # not a WqeOpcode
assert BAD_OPCODE not in WqeOpcode.KNOWN


def _bytes(seed: int, n: int) -> bytes:
    return random.Random(seed).randbytes(n)


async def _post(a, b, offset, length, *, opcode=WrOpcode.WRITE, imm=0, signaled=True,
                ring=True):
    return await a.qp.post_send(opcode, local_addr=a.send_buf + offset, length=length,
                                remote_addr=b.recv_buf + offset, rkey=b.mr.rkey, imm=imm,
                                signaled=signaled, ring=ring)


def _placed(b, offset, data: bytes) -> bool:
    return b.dev.mem.read(b.recv_buf + offset, len(data)) == data


async def unsignaled(a, b, *, timeout_cycles=2_000_000):
    """Five WRITEs, signaled F F T F T: two CQEs (WQEs 2 and 4, their ring
    indices), every byte placed, nothing outstanding after the second."""
    sizes = [3000, 100, 2048, 1, 5000]
    signaled = [False, False, True, False, True]
    data = _bytes(1, sum(sizes))
    a.dev.mem.write(a.send_buf, data)
    first = a.qp.producer
    ids, offset = [], 0
    for n, sig in zip(sizes, signaled, strict=True):
        ids.append(await _post(a, b, offset, n, signaled=sig))
        offset += n
    cqes = await a.qp.send_cq.wait(2, timeout_cycles=timeout_cycles)
    assert [(c.wr_id, c.status, c.byte_len, c.wqe_index) for c in cqes] == [
        (ids[2], Completion.SUCCESS, sizes[2], (first + 2) & 0xFFFF),
        (ids[4], Completion.SUCCESS, sizes[4], (first + 4) & 0xFFFF)], cqes
    assert a.qp.outstanding == 0
    await a.dev.transport.idle(2000)
    assert await a.qp.send_cq.poll() == [], "a CQE for an unsignaled WQE"
    assert _placed(b, 0, data)
    return cqes


async def unknown_opcode(a, b, *, base=0, timeout_cycles=2_000_000):
    """WRITE (8 KiB), a WQE with opcode BAD_OPCODE, WRITE (1 KiB): SUCCESS,
    LOC_QP_OP_ERR (byte_len 0), FLUSHED; the first WRITE placed, nothing
    of the others; the QP in ERROR in reliability, stopped in TX."""
    sizes = [8192, 512, 1024]
    data = _bytes(2, sum(sizes))
    a.dev.mem.write(a.send_buf + base, data)
    w0 = await _post(a, b, base, sizes[0])
    slot = a.qp.sq_addr + (a.qp.producer % a.qp.sq_size) * 64
    w1 = await _post(a, b, base + sizes[0], sizes[1], ring=False)
    a.dev.mem.write(slot, bytes([BAD_OPCODE]))  # the WQE's opcode byte
    w2 = await _post(a, b, base + sizes[0] + sizes[1], sizes[2])
    cqes = await a.qp.send_cq.wait(3, timeout_cycles=timeout_cycles)
    assert [(c.wr_id, c.status, c.byte_len) for c in cqes] == [
        (w0, Completion.SUCCESS, sizes[0]), (w1, Completion.LOC_QP_OP_ERR, 0),
        (w2, Completion.FLUSHED, 0)], cqes
    assert cqes[1].opcode == BAD_OPCODE
    await a.dev.transport.idle(5000)
    assert _placed(b, base, data[:sizes[0]])
    assert _placed(b, base + sizes[0], bytes(sizes[1] + sizes[2])), "the refused WQE or " \
        "the one after it reached the peer"
    assert (await a.dev.rel.read_fields("qp_ctrl", a.qp.qpn))["state"] == QpState.ERROR
    assert (await a.dev.tx.read_fields("qp_ctrl", a.qp.qpn))["enable"] == 0
    a.qp.state = QpState.ERROR  # what the application learns from the error CQE
    return cqes


async def post_in_error(a, b, *, timeout_cycles=200_000):
    """Two WRITEs posted to a QP in ERROR: both FLUSHED, nothing sent."""
    assert (await a.dev.rel.read_fields("qp_ctrl", a.qp.qpn))["state"] == QpState.ERROR
    sent = await a.dev.tx.read("qp_tx_packets", a.qp.qpn)
    ids = [await _post(a, b, 0, 64) for _ in range(2)]
    cqes = await a.qp.send_cq.wait(2, timeout_cycles=timeout_cycles)
    assert [(c.wr_id, c.status, c.byte_len) for c in cqes] == [
        (w, Completion.FLUSHED, 0) for w in ids], cqes
    assert a.qp.outstanding == 0
    await a.dev.transport.idle(2000)
    assert await a.dev.tx.read("qp_tx_packets", a.qp.qpn) == sent
    return cqes


async def reconnect(a, b, *, psns=(0x200, 0xFFFFE0), mtu=1024, timeout=10):
    """ERROR (or any state) -> RESET -> INIT -> RTR -> RTS on both ends, each
    to the same peer as before, with new start PSNs (``psns``: a's, b's)."""
    ends = (a, b)
    for x in ends:
        await x.qp.to_reset()
        await x.qp.to_init()
    for i, x in enumerate(ends):
        q = x.qp
        await q.to_rtr(dest_qpn=q.dest_qpn, peer_mac=q.peer_mac, peer_ip=q.peer_ip,
                       rq_psn=psns[1 - i], mpr=q.mpr, trim_nack=q.trim_nack)
    for i, x in enumerate(ends):
        await x.qp.to_rts(evs=x.qp.evs, sq_psn=psns[i], mtu=mtu, timeout=timeout)


async def reset_and_reuse(a, b, *, mtu=1024, timeout=10, timeout_cycles=2_000_000):
    """After ``reconnect``: WRITE_WITH_IMMs a -> b and b -> a, every byte
    placed, one SUCCESS send CQE per WQE (wr_id, length, ring index in order)
    and one receive CQE per message on the peer, each ring from its start."""
    await reconnect(a, b, mtu=mtu, timeout=timeout)
    for src, dst, seed in ((a, b, 3), (b, a, 4)):
        assert src.qp.outstanding == 0 and src.qp.send_cq.consumer == 0
        sizes = [5000, 100, 2048, 1]
        data = _bytes(seed, sum(sizes))
        src.dev.mem.write(src.send_buf, data)
        dst.dev.mem.write(dst.recv_buf, bytes(sum(sizes)))
        first, ids, offset = src.qp.producer, [], 0
        for k, n in enumerate(sizes):
            ids.append(await _post(src, dst, offset, n, opcode=WrOpcode.WRITE_WITH_IMM,
                                   imm=0x5E000000 | k))
            offset += n
        cqes = await src.qp.send_cq.wait(len(sizes), timeout_cycles=timeout_cycles)
        assert [(c.wr_id, c.status, c.byte_len, c.wqe_index, c.opcode) for c in cqes] == [
            (w, Completion.SUCCESS, n, (first + k) & 0xFFFF, WrOpcode.WRITE_WITH_IMM)
            for k, (w, n) in enumerate(zip(ids, sizes, strict=True))], cqes
        recv = await dst.qp.recv_cq.wait(len(sizes), timeout_cycles=timeout_cycles)
        assert [(c.wr_id, c.status, c.byte_len, c.imm) for c in recv] == [
            (k + 1, 0, n, 0x5E000000 | k) for k, n in enumerate(sizes)], recv  # MSN from 1
        assert _placed(dst, 0, data)


# 12 WRITE_WITH_IMMs of one packet at a 1 KiB MTU but one of two
WIMM_BURST_SIZES = [64, 100, 1, 700, 1024, 2000, 64, 8, 512, 300, 1000, 64]


async def wimm_burst(a, b, *, poll_cycles, timeout_cycles=2_000_000):
    """WIMM_BURST_SIZES as WRITE_WITH_IMMs a -> b, posted at once (a's send
    queue must hold them), while b's host polls its receive CQ every
    ``poll_cycles`` cycles and a's host samples TX's ``qp_wimm_outstanding``.
    Checks every byte placed, the receive CQEs in order with their immediates
    and one SUCCESS send CQE per WQE; returns {"max_outstanding", "cq_full",
    "wimm_full", "retx"} (b's RX drops, a's retransmitted packets)."""
    sizes = WIMM_BURST_SIZES
    data = _bytes(5, sum(sizes))
    a.dev.mem.write(a.send_buf, data)
    b.dev.mem.write(b.recv_buf, bytes(sum(sizes)))
    before = await b.dev.counters()
    retx_before = await a.dev.tx.read("qp_retx_packets", a.qp.qpn)
    ids, offset = [], 0
    for k, n in enumerate(sizes):
        ids.append(await _post(a, b, offset, n, opcode=WrOpcode.WRITE_WITH_IMM,
                               imm=0x3A000000 | k, ring=k == len(sizes) - 1))
        offset += n
    recv, most, waited = [], 0, 0
    while len(recv) < len(sizes):
        recv += await b.qp.recv_cq.poll()
        most = max(most, await a.dev.tx.read("qp_wimm_outstanding", a.qp.qpn))
        assert waited < timeout_cycles, f"{len(recv)} of {len(sizes)} receive CQEs"
        await b.dev.transport.idle(poll_cycles)
        waited += poll_cycles
    msn = recv[0].wr_id
    assert [(c.wr_id, c.status, c.byte_len, c.imm) for c in recv] == [
        ((msn + k) & 0xFFFFFF, 0, n, 0x3A000000 | k) for k, n in enumerate(sizes)], recv
    cqes = await a.qp.send_cq.wait(len(sizes), timeout_cycles=timeout_cycles)
    assert [(c.wr_id, c.status, c.byte_len) for c in cqes] == [
        (w, Completion.SUCCESS, n) for w, n in zip(ids, sizes, strict=True)], cqes
    assert _placed(b, 0, data)
    after = await b.dev.counters()
    return {"max_outstanding": most,
            "cq_full": after["rx.cq_full"] - before["rx.cq_full"],
            "wimm_full": after["rx.wimm_full"] - before["rx.wimm_full"],
            "retx": await a.dev.tx.read("qp_retx_packets", a.qp.qpn) - retx_before}

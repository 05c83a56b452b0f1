"""What system tests do with two NICs: post WRITEs and wait for them, check
the receiver's memory, log a case's figures (the cocotb tests of
tests/system/ share these)."""

from __future__ import annotations

from cocotb.utils import get_sim_time

from host_driver.driver import Completion, WrOpcode
from sim.system.harness import SystemTB
from sim.system.scoreboard import flow_imm, model_flows, normalise_rtl

__all__ = ["transfer", "complete_all", "check_memory", "packets_of", "log_case", "wait_ev_state",
           "every_qp_both_ways"]


async def transfer(tb: SystemTB, src: int, sizes: list[int], *, opcode=WrOpcode.WRITE,
                   timeout_cycles=2_000_000, conn: int = 0, model_ids: int | None = None,
                   payload: bytes | None = None):
    """Post WRITEs of ``sizes`` bytes from connection ``conn`` of NIC ``src``
    into its peer's MR, back to back in the peer's buffer, flow-controlled by
    the send queue's size. Returns (posted, payload, early) with ``early`` the
    send completions taken while waiting for a free slot. ``model_ids``: post
    wr_id i and the golden model's immediate for flow ``model_ids``
    (``flow_imm``), so the completions compare with the model's. ``payload``:
    the bytes to send (default: random)."""
    a = tb.ends[src].conns[conn]
    b = tb.ends[1 - src].conns[a.peer]
    payload = tb.random_bytes(sum(sizes)) if payload is None else payload
    tb.ends[src].dev.mem.write(a.send_buf, payload)
    posted, early, offset = [], [], 0
    for n in sizes:
        if a.qp.outstanding >= a.qp.sq_size:
            early += await a.qp.send_cq.wait(1, timeout_cycles=timeout_cycles)
        if model_ids is None:
            wr_id, imm = None, 0xA5000000 | len(posted)
        else:
            wr_id = len(posted)
            imm = flow_imm(model_ids, wr_id) if opcode == WrOpcode.WRITE_WITH_IMM else 0
        wr_id = await a.qp.post_send(opcode, local_addr=a.send_buf + offset, length=n,
                                     remote_addr=b.recv_buf + offset, rkey=b.mr.rkey, imm=imm,
                                     wr_id=wr_id)
        posted.append((wr_id, n, imm))
        offset += n
    return posted, payload, early


async def complete_all(end, posted, already=(), conn: int = 0, timeout_cycles=4_000_000):
    qp = end.conns[conn].qp
    cqes = list(already)
    cqes += await qp.send_cq.wait(len(posted) - len(cqes), timeout_cycles=timeout_cycles)
    return cqes


async def wait_ev_state(end, index: int, state, *, rounds: int = 100, cycles: int = 1000,
                        conn: int = 0) -> bool:
    """Poll EV ``index`` of connection ``conn`` of ``end`` every ``cycles``
    cycles, at most ``rounds`` times, until it is in ``state``; whether it got
    there."""
    qp = end.conns[conn].qp
    for _ in range(rounds):
        await end.dev.transport.idle(cycles)
        if (await end.dev.ev_states(qp))[index] == state:
            return True
    return False


def check_memory(tb, dst, payload, conn: int = 0):
    end = tb.ends[dst]
    got = end.dev.mem.read(end.conns[conn].recv_buf, len(payload))
    if got != payload:
        first = next(i for i in range(len(payload)) if got[i] != payload[i])
        raise AssertionError(f"NIC {dst} connection {conn} memory differs from byte {first} "
                             f"of {len(payload)}")


def packets_of(sizes, mtu=1024):
    return sum(max(1, -(-n // mtu)) for n in sizes)


def log_case(dut, name, start_ns, **figures):
    """One line per case: simulated time, and what the case measured."""
    sim_us = (get_sim_time(unit="ns") - start_ns) / 1e3
    dut._log.info("%s: %.1f us simulated; %s", name, sim_us,
                  ", ".join(f"{k}={v}" for k, v in figures.items()))


async def every_qp_both_ways(tb: SystemTB, dut, name: str, *, messages: int,
                             sizes: list[int]) -> None:
    """Every connection of both NICs at once (``tb.connect`` made them):
    ``messages`` WRITE_WITH_IMM per connection and direction, connection k's
    of ``sizes[k]`` bytes, all posted before the first doorbell rings. Per
    connection: the receiver's buffer is byte exact, the send CQEs come in
    posting order, the receive CQEs in message order with the QP's own QPN;
    every connection's completions equal the golden model's for the same
    flows; the counter equations hold in both directions, and every QP's TX
    counted its packets."""
    qps = len(tb.ends[0].conns)
    flows, runs = [], {}
    start = get_sim_time(unit="ns")
    for src in (0, 1):
        end = tb.ends[src]
        for k, conn in enumerate(end.conns):
            index = len(flows)
            flows.append({"src": "ab"[src], "dst": "ab"[1 - src], "messages": messages,
                          "size": sizes[k], "imm": True, "depth": messages})
            peer = tb.ends[1 - src].conns[conn.peer]
            payload = tb.random_bytes(messages * sizes[k])
            end.dev.mem.write(conn.send_buf, payload)
            for i in range(messages):
                await conn.qp.post_send(WrOpcode.WRITE_WITH_IMM,
                                        local_addr=conn.send_buf + i * sizes[k],
                                        length=sizes[k],
                                        remote_addr=peer.recv_buf + i * sizes[k],
                                        rkey=peer.mr.rkey, imm=flow_imm(index, i), wr_id=i,
                                        ring=False)
            runs[src, k] = (index, payload)
    for src in (0, 1):  # every doorbell at once
        for conn in tb.ends[src].conns:
            await conn.qp.ring_doorbell()
    model = model_flows(flows)
    for (src, k), (index, payload) in runs.items():
        conn = tb.ends[src].conns[k]
        receiver = tb.ends[1 - src].conns[conn.peer]
        send = await conn.qp.send_cq.wait(messages, timeout_cycles=2_000_000)
        recv = await receiver.qp.recv_cq.wait(messages, timeout_cycles=200_000)
        assert [(c.wr_id, c.status, c.byte_len, c.qpn) for c in send] == [
            (i, Completion.SUCCESS, sizes[k], conn.qp.qpn) for i in range(messages)], (src, k)
        assert [(c.wr_id, c.imm, c.qpn) for c in recv] == [
            (msn, flow_imm(index, msn - 1), receiver.qp.qpn) for msn in range(1, messages + 1)]
        assert normalise_rtl(send, recv, imm=True) == model[index], (src, k)
        check_memory(tb, 1 - src, payload, conn=conn.peer)
    await tb.quiesce()
    packets = messages * packets_of(sizes)
    for src in (0, 1):
        got = await tb.check_counters(src, packets=packets, messages=qps * messages,
                                      imm_messages=qps * messages)
        assert got["A.tx.retx_packets"] == 0
    dev = tb.ends[0].dev
    busy = [k for k in range(qps) if await dev.tx.read(
        "qp_tx_packets", tb.ends[0].conns[k].qp.qpn) == messages * packets_of([sizes[k]])]
    assert len(busy) == qps
    log_case(dut, name, start, qps=qps, bytes_each_way=messages * sum(sizes))

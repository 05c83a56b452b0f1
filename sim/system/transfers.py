"""What system tests do with two NICs: post WRITEs and wait for them, check
the receiver's memory, log a case's figures (the cocotb tests of
tests/system/ share these)."""

from __future__ import annotations

from cocotb.utils import get_sim_time

from host_driver.driver import WrOpcode
from sim.system.harness import SystemTB
from sim.system.scoreboard import flow_imm

__all__ = ["transfer", "complete_all", "check_memory", "packets_of", "log_case", "wait_ev_state"]


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

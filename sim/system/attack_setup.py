"""The set-up the attacker tests share, written once against the host driver
and run on both backends (two model NICs, tests/unit/test_model_peer_checks.py;
two RTL NICs, tests/system/test_attacker.py).

``write_into_dead_paths(tb, length=4096, mtu=1024)``
    every path NIC 0 -> NIC 1 down, a WRITE of ``length`` random bytes posted
    on NIC 0 (``tb.ends[0]``) to NIC 1's receive buffer; returns ``(payload,
    una)`` once reliability holds all of the WRITE's packets in flight (sent,
    and lost on the dead paths), ``una`` its first PSN. ``tb`` is a
    ``SystemTB`` (sim/system/harness.py) or a ``ModelSystem``
    (sim/system/model_harness.py) after ``connect``.
"""

from __future__ import annotations

from host_driver.driver import WrOpcode
from hw.protocol import PSN_MASK

__all__ = ["write_into_dead_paths"]



async def write_into_dead_paths(tb, length: int = 4096, mtu: int = 1024):
    a, b = tb.ends
    for p in range(tb.fabric.num_paths):
        tb.fabric.set_path_up(p, False, direction=0)
    payload = tb.random_bytes(length)
    a.dev.mem.write(a.send_buf, payload)
    await a.qp.post_send(WrOpcode.WRITE, local_addr=a.send_buf, length=length,
                         remote_addr=b.recv_buf, rkey=b.mr.rkey)
    packets = max(1, -(-length // mtu))
    q = a.qp.qpn
    # a fresh QP reads una = nxt = 0 until its first packet is sent (reliability
    # learns the start PSN from it): wait for nxt - una to hold the whole WRITE
    for _ in range(200):
        una = await a.dev.rel.read("una_psn", q)
        if (await a.dev.rel.read("nxt_psn", q) - una) & PSN_MASK == packets:
            return payload, una
        await a.dev.transport.idle(16)
    raise AssertionError(f"reliability never held the WRITE's {packets} packets in flight")

"""The model NIC's RX rules that are the gateware's rather than the golden
model's (docs/model.md, "Where the model NIC follows the hardware")."""

import asyncio

from sim.model.packet import OP_WRITE_ONLY, Packet
from sim.system.model_harness import ModelSystem

EPSN = 0x10  # NIC 1 expects NIC 0's PSNs from here (ModelSystem.connect_qps)


def test_pending_completion_table_is_shared():
    """RX's pending-completion table has MAX_PENDING (8) entries for all QPs,
    one kept for a LAST packet at a QP's expected PSN. Out-of-order WRITE_ONLY
    packets to QP 0 of NIC 1 fill 7 entries; then an out-of-order one to QP 1
    is dropped (wimm_full, not acknowledged), while QP 1's packet at its
    expected PSN is still taken; once QP 0's hole is filled its 8 messages
    complete, the table empties, and QP 1's packet is taken when it comes
    again."""
    async def body():
        tb = ModelSystem(seed=3)
        await tb.init()
        pairs = await tb.connect_qps(2)
        a, b = tb.ends
        nic0, nic1 = a.nic.host, b.nic.host

        def write(j, k):
            """WRITE_ONLY of 16 bytes, PSN EPSN + k, to NIC 1's QP j."""
            off = 4096 * j + 16 * k
            return Packet.data_packet(nic0, nic1, 0, 0xC000, pairs[j][1].qpn,
                                      (EPSN + k) & 0xFFFFFF, OP_WRITE_ONLY,
                                      b.recv_buf + off, b.mr.rkey, 16, 16, None,
                                      data=bytes([j * 16 + k]) * 16)

        async def inject(*pkts):
            for pkt in pkts:
                tb.fabric.inject(1, pkt)
            await b.dev.transport.idle(200)
            return await b.dev.counters()

        c0 = await inject(*[write(0, k) for k in range(1, 8)])
        assert c0["rx.placed"] == 7 and c0["rx.wimm_full"] == 0, c0
        c1 = await inject(write(1, 1))  # out of order, one entry free: dropped
        assert (c1["rx.wimm_full"], c1["rx.placed"]) == (1, 7), c1
        c2 = await inject(write(1, 0))  # QP 1's expected PSN: the kept entry
        assert (c2["rx.wimm_full"], c2["rx.placed"]) == (1, 8), c2
        c3 = await inject(write(0, 0), write(1, 1))  # QP 0 completes, then QP 1's again
        assert (c3["rx.wimm_full"], c3["rx.placed"]) == (1, 10), c3
        assert b.nic.pending_total() == 0
        for j, n in ((0, 8), (1, 2)):
            for k in range(n):
                assert b.dev.mem.read(b.recv_buf + 4096 * j + 16 * k, 16) == \
                    bytes([j * 16 + k]) * 16, (j, k)
    asyncio.run(body())

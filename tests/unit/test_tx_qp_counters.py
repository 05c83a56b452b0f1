"""hw/tx/qp_counters.py ``QpCounters``: checked every cycle against a Python
model of its pipeline -- the row of the QP of the cycle before registered,
the next row (packets + 1, retransmissions + retx; zero before ``ready``)
registered after it, written at ``emit`` to the row of the QP of the cycle
before or at ``init`` to ``init_q``'s, and CSR reads of the QP of the cycle before -- and, with a
QP held as the sequencer holds it, counting packets and retransmissions."""


import pytest
from amaranth.sim import Simulator

from hw.tx.qp_counters import QpCounters
from tests import seeds

M32 = (1 << 32) - 1


@pytest.mark.parametrize("nq", [2, 5])
def test_qp_counters(nq):
    dut = QpCounters(nq)
    rng = seeds.rng(nq)
    log = {"emits": 0}

    async def bench(ctx):
        mem = [0] * nq
        q_reg = csr_reg = 0  # the read ports' registered addresses
        w_reg = 0  # the write's: the QP of the cycle before
        row = nxt = 0  # cnt_row, cnt_next
        q = 0
        for cycle in range(3000):
            if rng.random() < 0.2:
                q = rng.randrange(nq)
            ready = 50 < cycle and not 1500 <= cycle < 1600  # a second INIT at 1500
            retx, emit = rng.getrandbits(1), int(rng.random() < 0.3)
            init = int(not ready and rng.random() < 0.5)
            init_q, csr_q = rng.randrange(nq), rng.randrange(nq)
            for name, value in (("q", q), ("retx", retx), ("emit", emit), ("init", init),
                                ("init_q", init_q), ("ready", ready), ("csr_q", csr_q)):
                ctx.set(getattr(dut, name), value)
            assert ctx.get(dut.csr_data) == mem[csr_reg]
            await ctx.tick()
            new_row = mem[q_reg]
            new_nxt = ((row & M32) + 1 & M32 | (((row >> 32) + retx) & M32) << 32) if ready else 0
            if init or emit:
                mem[init_q if init else w_reg] = nxt
                log["emits"] += emit and not init
            row, nxt = new_row, new_nxt
            q_reg, csr_reg, w_reg = q, csr_q, q

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert log["emits"] > 500


def test_qp_counters_count_packets():
    """As the sequencer drives it (the QP held from 3 cycles before each emit,
    the next packet's given in the cycle of the emit),
    a QP's row counts its packets and, in the upper word, its retransmissions."""
    dut = QpCounters(4)
    got = {}

    async def bench(ctx):
        for i in range(4):  # INIT
            ctx.set(dut.init, 1)
            ctx.set(dut.init_q, i)
            await ctx.tick()
        ctx.set(dut.init, 0)
        ctx.set(dut.ready, 1)
        await ctx.tick()
        sends = [(2, 0), (2, 1), (1, 0), (2, 0), (1, 1), (2, 1), (2, 0)]
        # back to back: each emit in the cycle the next packet's QP is given
        for i, (q, retx) in enumerate(sends + [(0, 0)]):
            ctx.set(dut.q, q)
            ctx.set(dut.retx, retx)
            ctx.set(dut.emit, i > 0)
            await ctx.tick()
            ctx.set(dut.emit, 0)
            for _ in range(2):
                await ctx.tick()
        for q in range(4):
            ctx.set(dut.csr_q, q)
            await ctx.tick()
            data = ctx.get(dut.csr_data)
            got[q] = (data & M32, data >> 32)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert got == {0: (0, 0), 1: (2, 1), 2: (5, 2), 3: (0, 0)}

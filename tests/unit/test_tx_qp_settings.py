"""hw/tx/qp_settings.py ``QpSettings``: every QP's settings row starts at its
defaults, takes the lanes a write's strobes select (per row at up to
CFG_FLOP_QPS QPs, at ``w.q`` above), with the MTU lane's own data and INIT's
defaults, and the three read ports give the row of the QP of the cycle
before, that cycle's write included (the ring port the ``ctl`` group's lanes
alone) -- checked every cycle against a Python model, in both storages:
LUT RAM at a registered address and block RAM (synchronous ports, above
BRAM_QPS QPs)."""


import pytest
from amaranth.sim import Simulator

from hw.tx.qp_settings import (
    BRAM_QPS,
    CFG_FLOP_QPS,
    CFG_GROUPS,
    CFG_LANES,
    QpSettings,
    lane_index,
    settings_defaults,
)
from tests import seeds


@pytest.mark.parametrize("nq", [2, 3, 8, BRAM_QPS + 3])
@pytest.mark.parametrize("block_ram", [None, True])
def test_qp_settings(nq, block_ram):
    max_mtu, depth = 4096, 64
    dut = QpSettings(num_qps=nq, max_mtu=max_mtu, inflight_depth=depth, block_ram=block_ram)
    assert dut.flop_rows == (nq <= CFG_FLOP_QPS)
    assert dut.block_ram == (nq > BRAM_QPS if block_ram is None else block_ram)
    nl = len(CFG_LANES)
    defaults = settings_defaults(max_mtu, depth)
    assert defaults[0] == 2 and defaults[1] == 1 and defaults[2] == depth  # MTU 1024, MPR, cwnd
    rows = [list(defaults) for _ in range(nq)]
    rng = seeds.rng(nq)
    log = {"writes": 0, "init": 0}

    def packed(row):
        return sum(v << (32 * i) for i, v in enumerate(row))

    ctl = {lane_index[name] for name in dict(CFG_GROUPS)["ctl"]}

    def ring_packed(row):
        return packed([v if i in ctl else 0 for i, v in enumerate(row)])

    async def bench(ctx):
        fsm_q = csr_q = ring_q = 0  # the addresses of the cycle before (reset: 0)
        for cycle in range(2000):
            if cycle == 0 and dut.block_ram and not dut.flop_rows:
                await ctx.tick()  # a synchronous port's data is 0 until the first edge
            assert ctx.get(dut.fsm_row) == packed(rows[fsm_q])
            assert ctx.get(dut.csr_row) == packed(rows[csr_q])
            assert ctx.get(dut.ring_row) == ring_packed(rows[ring_q])
            init = int(rng.random() < 0.05)
            q = rng.randrange(nq)
            data = 0 if init else rng.getrandbits(32)
            mtu_shift = rng.getrandbits(3)
            if rng.random() < 0.5:
                lanes = 0
            elif init:
                lanes = (1 << nl) - 1
            else:
                lanes = 1 << rng.randrange(nl)
            row_strobes = lanes << (nl * q) if dut.flop_rows else 0
            for name, value in (("q", q), ("data", data), ("lanes", lanes), ("init", init),
                                ("rows", row_strobes), ("mtu_shift", mtu_shift)):
                ctx.set(getattr(dut.w, name), value)
            new_fsm_q, new_csr_q = rng.randrange(nq), rng.randrange(nq)
            ctx.set(dut.fsm_q, new_fsm_q)
            ctx.set(dut.csr_q, new_csr_q)
            new_ring_q = rng.randrange(nq)
            ctx.set(dut.ring_q, new_ring_q)
            await ctx.tick()
            for i in range(nl):
                if lanes >> i & 1:
                    value = mtu_shift if i == 0 else data
                    rows[q][i] = defaults[i] if init and defaults[i] else value
            log["writes"] += bool(lanes)
            log["init"] += init and bool(lanes)
            fsm_q, csr_q, ring_q = new_fsm_q, new_csr_q, new_ring_q

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert log["writes"] > 500 and log["init"] > 10

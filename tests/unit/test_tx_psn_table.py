"""hw/tx/psn_table.py ``PsnTable``: checked every cycle against a Python model
of the rules -- an ack moves its QP's una_psn the cycle after it is taken,
only to a PSN within [una_psn, next_psn] across the wrap, and with it the
window's base to una_psn + the ack's SACKed count (``unsacked`` is next_psn
less the base); acks are taken at most every other cycle; a qp_next_psn
write sets both PSNs and the base and drops an ack of the QP taken with it;
an advance moves next_psn past the PSN sent -- at 2 QPs (compares per QP)
and at 8 (behind a mux of the ack's QP)."""

import pytest
from amaranth.sim import Simulator

from hw.tx.psn_table import ACK_PER_QP_QPS, PsnTable
from tests import seeds

MASK = (1 << 24) - 1


@pytest.mark.parametrize("nq", [2, 8])
def test_psn_table(nq):
    assert (nq <= ACK_PER_QP_QPS) == (nq == 2)
    dut = PsnTable(nq)
    rng = seeds.rng(nq)
    log = {"applied": 0, "refused": 0, "dropped_by_write": 0}

    async def bench(ctx):
        nxt, una, base = [0] * nq, [0] * nq, [0] * nq
        ready = 1
        pending = None  # (qp, una_psn, base, in range) of the ack taken the cycle before
        # at least 4000 cycles, and on until a write has met an ACK twice (about one
        # cycle in a thousand at 8 QPs)
        for cycle in range(40000):
            if cycle >= 4000 and log["dropped_by_write"] >= 2:
                break
            cur_q = rng.randrange(nq)
            retx_psn = (una[cur_q] + rng.randrange(-2, 6)) & MASK
            write = 1 << rng.randrange(nq) if rng.random() < 0.03 else 0
            write_data = rng.choice([rng.getrandbits(24), MASK - 2])
            advance = int(rng.random() < 0.3)
            advance_psn = nxt[cur_q]
            valid = int(rng.random() < 0.4)
            ack_q = rng.randrange(nq + 1)
            una_q = una[ack_q] if ack_q < nq else 0
            ack_una = (una_q + rng.choice([-1, 0, 1, 2, 3, 5, 9])) & MASK
            ack_sacked = rng.choice([0, 1, rng.randrange(64), 0xFFFF])
            for name, value in (("cur_q", cur_q), ("retx_psn", retx_psn), ("write", write),
                                ("write_data", write_data), ("advance", advance),
                                ("advance_psn", advance_psn)):
                ctx.set(getattr(dut, name), value)
            ctx.set(dut.ack.valid, valid)
            ctx.set(dut.ack.payload, {"qpn": ack_q, "una_psn": ack_una, "sacked": ack_sacked})
            # outputs of this cycle
            apply = 0
            if pending is not None and pending[3]:
                apply = 1 << pending[0]
            assert ctx.get(dut.ack.ready) == ready
            assert ctx.get(dut.ack_apply) == apply
            assert ctx.get(dut.cur_next) == nxt[cur_q]
            assert ctx.get(dut.inflight) == (nxt[cur_q] - una[cur_q]) & MASK
            assert ctx.get(dut.unsacked) == (nxt[cur_q] - base[cur_q]) & MASK
            assert ctx.get(dut.psn_offset) == (retx_psn - una[cur_q]) & MASK
            assert ctx.get(dut.next_psn) == sum(v << (24 * i) for i, v in enumerate(nxt))
            assert ctx.get(dut.una_psn) == sum(v << (24 * i) for i, v in enumerate(una))
            await ctx.tick()
            # the model's next state
            taken = valid and ready
            new_pending = None
            if taken and ack_q < nq:
                if write >> ack_q & 1:
                    log["dropped_by_write"] += 1
                else:
                    adv = (ack_una - una[ack_q]) & MASK
                    out = (nxt[ack_q] - una[ack_q]) & MASK
                    new_pending = (ack_q, ack_una, (ack_una + ack_sacked) & MASK, adv <= out)
                    log["applied" if adv <= out else "refused"] += 1
            for i in range(nq):
                if write >> i & 1:
                    nxt[i] = una[i] = base[i] = write_data
                    continue
                if advance and cur_q == i:
                    nxt[i] = (advance_psn + 1) & MASK
                if apply >> i & 1:
                    una[i], base[i] = pending[1], pending[2]
            ready = int(not taken)
            pending = new_pending

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert log["applied"] > 100 and log["refused"] > 100 and log["dropped_by_write"] > 0

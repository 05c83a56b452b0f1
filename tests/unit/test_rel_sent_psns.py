"""SentPsns (hw/reliability/sent_psns.py) in Amaranth's simulator: random records,
retransmission rewrites and reads, against a dictionary of the entries: a record
writes all four fields, a rewrite the EV and retransmission flag alone, each reaches
the memory the cycle after its strobe (``ev_written`` then), a read gives the entry
the cycle after its address and ``hold`` keeps it."""


from amaranth.sim import Simulator

from hw.reliability.sent_psns import SentPsns
from tests import seeds

NQ, W, E = 3, 16, 4


def test_entries_match_dictionary():
    dut = SentPsns(num_qps=NQ, window=W, evs=E)
    rng = seeds.rng(11)
    # (qp, slot) -> [ev, retx, last, ts]; the memories start at 0
    entries = {(q, k): [0, 0, 0, 0] for q in range(NQ) for k in range(W)}
    counts = {"reads": 0, "holds": 0, "rewrites": 0}

    async def bench(ctx):
        pending = None  # the write the strobe of the cycle before makes at this edge
        shown = None  # the entry on the read port (None: nothing read yet)
        for _ in range(3000):
            if shown is not None:
                got = [ctx.get(dut.ev), ctx.get(dut.retx), ctx.get(dut.last), ctx.get(dut.ts)]
                assert got == shown
                counts["reads"] += 1
            assert ctx.get(dut.ev_written) == int(pending is not None)
            kind = rng.choice(["record", "record", "rewrite", None, None])
            qp, slot = rng.randrange(NQ), rng.randrange(W)
            data = [rng.randrange(E), rng.randrange(2), rng.randrange(2), rng.randrange(1 << 16)]
            ctx.set(dut.record, kind == "record")
            ctx.set(dut.rewrite, kind == "rewrite")
            for name, value in zip(("write_qp", "write_slot", "write_ev", "write_retx",
                                    "write_last", "write_ts"), (qp, slot, *data), strict=True):
                ctx.set(getattr(dut, name), value)
            hold = int(rng.random() < 0.3)
            rq, rs = rng.randrange(NQ), rng.randrange(W)
            ctx.set(dut.read_qp, rq)
            ctx.set(dut.read_slot, rs)
            ctx.set(dut.hold, hold)
            # at the edge: the read (of the memory before this edge's write), then the
            # write of the strobe of the cycle before
            if hold:
                counts["holds"] += 1
            else:
                shown = list(entries[rq, rs])
            if pending is not None:
                pk, pq, ps, pdata = pending
                if pk == "record":
                    entries[pq, ps] = list(pdata)
                else:
                    entries[pq, ps][:2] = pdata[:2]
                    counts["rewrites"] += 1
            pending = (kind, qp, slot, data) if kind else None
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert counts["reads"] > 1000 and counts["holds"] > 300 and counts["rewrites"] > 100, counts

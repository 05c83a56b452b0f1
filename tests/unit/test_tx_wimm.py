"""hw/tx/wimm.py ``WimmBound``: checked every cycle against a Python model of
each build -- the count of a QP goes up at a start, down at a done (not
below 0, not above its width's maximum), to 0 at a clear; a bound written
above ``inflight_depth`` is kept as ``inflight_depth``, 0 is no bound;
``at_bound`` is count >= bound; ``rd_count`` is the count of ``rd_q`` of the
cycle before. At 2 QPs flip-flops (inputs registered, counts the cycle after,
``at_bound`` registered from them); at 8 and 64 RAM rows (one row changed a
cycle: clears and bound writes first, then starts, then dones, the others
waiting; INIT's clears on consecutive cycles)."""

import pytest
from amaranth.sim import Simulator

from hw.tx.psn_table import RAM_QPS
from hw.tx.wimm import WimmBound, wimm_widths
from tests import seeds

DEPTH = 16


class Model:
    def __init__(self, nq, ram):
        self.nq, self.ram = nq, ram
        lw, cw = wimm_widths(DEPTH)
        self.top = (1 << cw) - 1
        self.count, self.limit = [0] * nq, [0] * nq
        self.at_bound = [0] * nq
        self.rd_count = 0
        self.regs = None  # flops: the inputs registered
        self.change = None  # RAM: the change read this cycle, written the next
        self.s_wait = self.d_wait = None  # RAM: the QP of a waiting start, done
        self.log = {"bound_on": 0, "bound_off": 0, "waited": 0, "saturated": 0}

    @staticmethod
    def bound(value):
        return DEPTH if value > DEPTH else value

    def changed(self, q, clear, limit, inc, dec, bound):
        c = self.count[q]
        if clear:
            c = 0
        elif inc and not dec and c != self.top:
            c += 1
        elif dec and not inc and c != 0:
            c -= 1
        elif inc and not dec:
            self.log["saturated"] += 1
        self.count[q] = c
        if limit:
            self.limit[q] = bound

    def flag(self, q):
        return int(self.limit[q] != 0 and self.count[q] >= self.limit[q])

    def step(self, i):
        nq = self.nq
        done_ok = i["done"] is not None and i["done"] < nq
        if not self.ram:
            new_at = [self.flag(q) for q in range(nq)]
            new_rd = self.count[i["rd_q"]]
            if self.regs is not None:
                r = self.regs
                for q in range(nq):
                    self.changed(q, r["clear"] >> q & 1, r["limit_q"] == q and r["limit_we"],
                                 r["start"] and r["start_qp"] == q, r["done_ok"] and r["done"] == q,
                                 r["bound"])
            self.regs = dict(i, done_ok=done_ok, bound=self.bound(i["limit_data"]))
            self._set_flags(new_at)
            self.rd_count = new_rd
            return
        if self.change is not None:
            q, kw = self.change
            self.changed(q, **kw)
            old = self.at_bound[q]
            self.at_bound[q] = self.flag(q)
            self.log["bound_on" if self.at_bound[q] > old else "bound_off"] += \
                self.at_bound[q] != old
        self.rd_count = self.count[i["rd_q"]]  # the port reads with this cycle's write
        csr = i["clear_stb"] or i["limit_we"]
        start = i["start"] or self.s_wait is not None
        s_q = self.s_wait if self.s_wait is not None else i["start_qp"]
        dn = done_ok or self.d_wait is not None
        d_q = self.d_wait if self.d_wait is not None else i["done"]
        if csr or start or dn:
            q = ((i["clear_q"] if i["clear_stb"] else i["limit_q"]) if csr
                 else s_q if start else d_q)
            self.change = (q, dict(clear=i["clear_stb"], limit=i["limit_we"],
                                   inc=not csr and start, dec=not csr and not start and dn,
                                   bound=self.bound(i["limit_data"])))
        else:
            self.change = None
        waits = (s_q if start and csr else None, d_q if dn and (csr or start) else None)
        self.log["waited"] += sum(x is not None for x in waits)
        self.s_wait, self.d_wait = waits

    def _set_flags(self, new):
        for q in range(self.nq):
            if new[q] != self.at_bound[q]:
                self.log["bound_on" if new[q] else "bound_off"] += 1
        self.at_bound = new


@pytest.mark.parametrize("nq", [2, 8, 64])
def test_wimm_bound(nq):
    ram = nq > RAM_QPS
    assert ram == (nq != 2)
    dut = WimmBound(nq, DEPTH)
    rng = seeds.rng(nq)
    model = Model(nq, ram)
    bus = dut.bus

    async def bench(ctx):
        last = {"start": -9, "done": -9, "csr": -9}
        init = list(range(nq))
        hot = rng.sample(range(nq), min(nq, 3))  # most events on a few QPs
        for cycle in range(8000):
            i = dict(start=0, start_qp=0, done=None, clear=0, clear_stb=0, clear_q=0,
                     limit_we=0, limit_q=0, limit_data=0, rd_q=rng.randrange(nq))
            if init:  # INIT: every row cleared, its bound written 0
                q = init.pop(0)
                i.update(clear=(1 << nq) - 1, clear_stb=1, clear_q=q, limit_we=1, limit_q=q)
            else:
                if cycle - last["csr"] >= 3 and rng.random() < 0.08:
                    q = rng.choice(hot)
                    last["csr"] = cycle
                    if rng.random() < 0.3:
                        i.update(clear=1 << q, clear_stb=1, clear_q=q)
                    else:
                        i.update(limit_we=1, limit_q=q,
                                 limit_data=rng.choice([0, 1, 2, 3, 5, DEPTH, 40, 0xFFFF]))
                if cycle - last["start"] >= 2 and rng.random() < 0.35:
                    last["start"] = cycle
                    i.update(start=1, start_qp=rng.choice(hot))
                if cycle - last["done"] >= 3 and rng.random() < 0.3:
                    last["done"] = cycle
                    # and one out of range, whose low bits name a QP in use
                    i["done"] = rng.choice(hot + [nq + hot[0]])
            for name in ("start", "start_qp", "clear", "clear_stb", "clear_q", "limit_we",
                         "limit_q", "limit_data", "rd_q"):
                ctx.set(getattr(bus, name), i[name])
            ctx.set(dut.done.valid, i["done"] is not None)
            ctx.set(dut.done.payload.qpn, i["done"] or 0)
            assert ctx.get(dut.done.ready) == 1
            assert ctx.get(bus.at_bound) == sum(b << q for q, b in enumerate(model.at_bound)), \
                cycle
            if cycle:
                assert ctx.get(bus.rd_count) == model.rd_count, cycle
            await ctx.tick()
            model.step(i)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    log = model.log
    assert log["bound_on"] > 20 and log["bound_off"] > 20, log
    if ram:
        assert log["waited"] > 20, log

"""hw/tx/psn_table.py ``PsnTable``: checked every cycle against a Python model
of the rules -- an ack moves its QP's una_psn only to a PSN within [una_psn,
next_psn] across the wrap, and with it the window's base to una_psn + the
ack's SACKed count (``unsacked`` is next_psn less the base); a qp_next_psn
write sets both PSNs and the base, overrides an advance or an ack of its QP
and drops an ack of its QP that read its rows before the write landed; an
advance moves next_psn of its QP (``advance_q``, ``cur_q`` too) past
the PSN sent, and ``cur_wait`` says when one of ``cur_q`` given before is not
in the figures yet (RAM: it met a write); the CSR port reads the QP of the
cycle before. Both builds: at 2 QPs the PSNs are flip-flops (an ack applied
the cycle after it is taken, one every other cycle); at 8 and 64, RAM rows
(an ack applied two cycles after it is taken, or later while CSR writes of
other QPs have the write port; one every third cycle; an advance that meets
a write waits a cycle; INIT's writes on consecutive cycles; ``ack_busy``
while an ack is between its taking and its apply)."""

import pytest
from amaranth.sim import Simulator

from hw.tx.psn_table import RAM_QPS, PsnTable
from tests import seeds

MASK = (1 << 24) - 1


class Model:
    """The table's state and its next state, cycle by cycle, for either build."""

    def __init__(self, nq, ram):
        self.nq, self.ram = nq, ram
        self.nxt, self.una, self.base = [0] * nq, [0] * nq, [0] * nq
        self.ready = 1
        self.stage = None  # flops: the ack taken the cycle before; RAM: see step
        self.waiting = None  # RAM: the ack past its compare, waiting to apply
        self.adv_wait = None  # RAM: (qp, next_psn) of an advance that met a write
        self.csr_inflight = 0  # flops: registered from the cycle before
        self.log = {"applied": 0, "refused": 0, "dropped_by_write": 0, "apply_waited": 0,
                    "advance_waited": 0, "cur_waited": 0}

    def apply_mask(self, write_stb, write_q):
        """ack_apply this cycle (one-hot), and the ack it applies."""
        if not self.ram:
            if self.stage is not None and self.stage[3]:
                return 1 << self.stage[0], self.stage
            return 0, None
        w = self.waiting
        if w is not None and w[3] and not write_stb:
            return 1 << w[0], w
        return 0, None

    def step(self, i):
        """The state after a cycle with inputs ``i`` (a dict)."""
        nq = self.nq
        apply, applied = self.apply_mask(i["write_stb"], i["write_q"])
        taken = i["valid"] and self.ready
        s_next, s_una = self.nxt[i["csr_q"]], self.una[i["csr_q"]]
        if not self.ram:
            new_stage = None
            if taken and i["ack_q"] < nq:
                q = i["ack_q"]
                if i["write"] >> q & 1:
                    self.log["dropped_by_write"] += 1
                else:
                    adv = (i["ack_una"] - self.una[q]) & MASK
                    out = (self.nxt[q] - self.una[q]) & MASK
                    new_stage = (q, i["ack_una"], (i["ack_una"] + i["ack_sacked"]) & MASK,
                                 adv <= out)
                    self.log["applied" if adv <= out else "refused"] += 1
            for q in range(nq):
                if i["write"] >> q & 1:
                    self.nxt[q] = self.una[q] = self.base[q] = i["write_data"]
                    continue
                if i["advance"] and i["advance_q"] == q:
                    self.nxt[q] = (i["advance_psn"] + 1) & MASK
                if apply >> q & 1:
                    self.una[q], self.base[q] = applied[1], applied[2]
            self.ready = int(not taken)
            self.stage = new_stage
            self.csr_inflight = (s_next - s_una) & MASK
            return
        # RAM: the write port this cycle
        stb, wq = i["write_stb"], i["write_q"]
        adv = (i["advance_q"], (i["advance_psn"] + 1) & MASK) if i["advance"] else self.adv_wait
        # the ack stages before this cycle's writes
        stage, waiting = self.stage, self.waiting
        new_waiting = None
        if waiting is not None:
            if stb and wq == waiting[0]:
                self.log["dropped_by_write"] += 1
            elif stb:
                new_waiting = waiting
                self.log["apply_waited"] += 1
        if stage is not None:  # its compare registered this cycle
            if stb and wq == stage[0]:
                self.log["dropped_by_write"] += 1
            else:
                assert new_waiting is None
                new_waiting = stage
        new_stage = None
        if taken and i["ack_q"] < nq:
            if stb and wq == i["ack_q"]:
                self.log["dropped_by_write"] += 1
            else:
                new_stage = [i["ack_q"], i["ack_una"], (i["ack_una"] + i["ack_sacked"]) & MASK]
        self.ready = int(not taken and stage is None and not (waiting is not None and stb
                                                              and wq != waiting[0]))
        new_adv_wait = None
        if stb:
            self.nxt[wq] = self.una[wq] = self.base[wq] = i["write_data"]
            if adv is not None and adv[0] != wq:
                new_adv_wait = adv
                self.log["advance_waited"] += 1
        else:
            if adv is not None:
                self.nxt[adv[0]] = adv[1]
            if apply:
                self.una[applied[0]], self.base[applied[0]] = applied[1], applied[2]
        if new_stage is not None:  # its rows read with this cycle's writes
            q = new_stage[0]
            ok = ((new_stage[1] - self.una[q]) & MASK) <= ((self.nxt[q] - self.una[q]) & MASK)
            new_stage.append(ok)
            self.log["applied" if ok else "refused"] += 1
        self.stage, self.waiting, self.adv_wait = new_stage, new_waiting, new_adv_wait


@pytest.mark.parametrize("nq", [2, 8, 64])
def test_psn_table(nq):
    ram = nq > RAM_QPS
    assert ram == (nq != 2)
    dut = PsnTable(nq, cur_wait=True)
    rng = seeds.rng(nq)
    model = Model(nq, ram)
    log = model.log

    async def bench(ctx):
        cur_q = rng.randrange(nq)
        since_write, last_advance = 99, False
        # INIT's sweep: a write of 0 to every row on consecutive cycles (the RAM
        # build's write_stb; the flip-flop build starts at 0 from reset)
        init = [(q, 0) for q in range(nq)] if ram else []
        prev_csr_q = 0
        for cycle in range(60000):
            if cycle >= 6000 and log["dropped_by_write"] >= 4 and (
                    not ram or (log["apply_waited"] >= 2 and log["advance_waited"] >= 2
                                and log["cur_waited"] >= 1)):
                break
            next_q = rng.randrange(nq)
            retx_psn = (model.una[cur_q] + rng.randrange(-2, 6)) & MASK
            if init:
                write_q, write_data = init.pop(0)
                write_stb, write = 1, 0
            else:
                write_stb = int(since_write >= 3 and rng.random() < 0.05)
                write_q = rng.randrange(nq)
                write_data = rng.choice([rng.getrandbits(24), MASK - 2])
                write = write_stb << write_q
            since_write = 0 if write_stb else since_write + 1
            advance = int(not init and not last_advance and rng.random() < 0.3)
            last_advance = bool(advance)
            # the back half's QP, cur_q at times (the front half checking the
            # back half's QP, reading several WQEs ahead)
            advance_q = rng.randrange(nq)
            if advance and rng.random() < 0.3:
                next_q = advance_q  # the front half reads the QP just advanced (a chain)
            ack_q = rng.randrange(nq + 1)
            base = model.una[ack_q] if ack_q < nq else 0
            inputs = dict(
                cur_q=cur_q, cur_q_next=next_q, retx_psn=retx_psn, write=write,
                write_stb=write_stb, write_q=write_q, write_data=write_data, advance=advance,
                advance_q=advance_q, advance_psn=model.nxt[advance_q], csr_q=rng.randrange(nq),
                valid=int(rng.random() < 0.4), ack_q=ack_q,
                ack_una=(base + rng.choice([-1, 0, 1, 2, 3, 5, 9])) & MASK,
                ack_sacked=rng.choice([0, 1, rng.randrange(64), 0xFFFF]))
            for name in ("cur_q", "cur_q_next", "retx_psn", "write", "write_stb", "write_q",
                         "write_data", "advance", "advance_q", "advance_psn", "csr_q"):
                ctx.set(getattr(dut, name), inputs[name])
            ctx.set(dut.ack.valid, inputs["valid"])
            ctx.set(dut.ack.payload, {"qpn": ack_q, "una_psn": inputs["ack_una"],
                                      "sacked": inputs["ack_sacked"]})
            # outputs of this cycle: the state at its start
            nxt, una = model.nxt, model.una
            assert ctx.get(dut.ack.ready) == model.ready
            busy = model.ram and (model.stage is not None or model.waiting is not None)
            assert ctx.get(dut.ack_busy) == busy
            assert ctx.get(dut.ack_apply) == model.apply_mask(write_stb, write_q)[0]
            assert ctx.get(dut.cur_next) == nxt[cur_q]
            assert ctx.get(dut.inflight) == (nxt[cur_q] - una[cur_q]) & MASK
            assert ctx.get(dut.unsacked) == (nxt[cur_q] - model.base[cur_q]) & MASK
            assert ctx.get(dut.psn_offset) == (retx_psn - una[cur_q]) & MASK
            waits = model.adv_wait is not None and model.adv_wait[0] == cur_q
            assert ctx.get(dut.cur_wait) == waits
            log["cur_waited"] += waits
            if cycle:  # the CSR port: the QP given the cycle before
                cq = prev_csr_q
                assert ctx.get(dut.csr_next) == nxt[cq]
                assert ctx.get(dut.csr_una) == una[cq]
                want = model.csr_inflight if not ram else (nxt[cq] - una[cq]) & MASK
                assert ctx.get(dut.csr_inflight) == want
            prev_csr_q = inputs["csr_q"]
            await ctx.tick()
            model.step(inputs)
            cur_q = next_q

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert log["applied"] > 100 and log["refused"] > 100 and log["dropped_by_write"] >= 4
    if ram:
        assert log["apply_waited"] >= 2 and log["advance_waited"] >= 2
        assert log["cur_waited"] >= 1, log

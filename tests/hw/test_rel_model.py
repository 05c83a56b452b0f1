"""The reliability engine against the golden model's requester, ACK by ACK.

Both tests run QP 0 of the ``rel_q4`` bench (tests/hw/rel_tb.py) beside a model
requester (tests/model_requester.py) and hand both the same packets and the
same ACKs (``Pair``). The model decides what is sent next (retransmissions
first), and after every ACK the two must agree exactly on the PSNs
retransmitted and why (SACK hole or NAK TRIMMED), in order, on the CQEs written
(one per WQE the model completed, never more) and on ``una``; at the end on
every EV transition with its drop count and on the counters of ACKs naming
PSNs never sent and of NAKs refused.

- ``test_model_compare``: the golden model's own loss rule (RACK, no
  reordering window) against the engine's count rule at ``sack_threshold`` 1,
  on a scenario where the two must agree (docs/reliability.md, "Deviations"):
  a black-holed EV and random loss and trims, an ACK after each group of
  packets that ends with a new PSN delivered.
- ``test_ack_differential``: the model with the engine's count rule
  (``QpConfig.sack_threshold``, 1 to 4) on ACK streams that hypothesis draws:
  current ACKs, old ones again (reordered or duplicated), ACKs whose
  ``sack_base`` is anywhere near ``una`` (RX drops those, docs/protocol.md,
  but the engine must still be right), SACK bits beyond ``nxt``, cumulative
  PSNs beyond ``nxt``, and NAK TRIMMED for PSNs in flight, delivered, acked or
  never sent, between packets delivered, lost or trimmed. A retransmission is
  delivered (a lost one waits for the timer, and there are no timeouts here).
"""

from __future__ import annotations

import warnings
from collections import Counter

import cocotb
from cocotb.task import bridge, resume
from cocotb.triggers import ClockCycles
from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from hypothesis.errors import HypothesisSideeffectWarning

from sim.model.packet import ACK, AETH_ACK, NAK_TRIMMED, PSN_MASK
from sim.model.packet import Packet as MPacket
from tests import seeds
from tests.hw.rel_tb import CONFIG, EV_BASE_VALUE, RING_LOG2, TB, ev_value, pop_events, run
from tests.model_requester import requester

# hypothesis runs outside pytest here, and takes the strategies' first use for
# a plugin's import-time work
warnings.filterwarnings("ignore", category=HypothesisSideeffectWarning)

SACK_BITS = 64
REASON = {"sack": 1, "trim": 2}  # RetxReason: SACK_HOLE, NAK_TRIMMED
STATE = {"GOOD": 0, "ASSUMED_BAD": 1}


class Pair:
    """QP 0 of the engine and a model requester ``qp``, fed alike."""

    def __init__(self, dut, tb, qp, window=32):
        self.dut, self.tb, self.qp, self.window = dut, tb, qp, window
        self.received = set()  # the responder's PSNs
        self.cum = -1  # its last PSN received in order
        self.history = []  # every ACK given: (cum, sack_base, bitmap, syndrome, psn)
        self.retx_seen = len(tb.retx.records())  # the engine's requests before this pair
        self.checked = 0

    def send(self):
        """The model's next packet, also as TX's sent record; None if it has none."""
        qp = self.qp
        if qp.nxt_idx - qp.una_idx >= self.window:
            return None
        qp.nic.engine.now += 1.0
        pkt = qp.pull(0)
        if pkt is not None:
            self.tb.send(0, pkt.psn, ev=self.ev_index(pkt), retx=int(pkt.retx), wqe=pkt.psn)
        return pkt

    def ev_index(self, pkt):
        return self.qp.evs.by_value[pkt.ev].index

    def state(self, base=None):
        """The responder's cumulative PSN, and its bitmap from ``base`` (cum + 1)."""
        while self.cum + 1 in self.received:
            self.cum += 1
        base = self.cum + 1 if base is None else base
        bitmap = sum(1 << i for i in range(SACK_BITS) if base + i in self.received)
        return self.cum, base, bitmap

    def ack(self, cum, base, bitmap, syndrome=AETH_ACK, psn=None):
        """One ACK (or NAK) to both."""
        psn = (cum if psn is None else psn) & PSN_MASK
        self.history.append((cum, base, bitmap, syndrome, psn))
        pkt = MPacket(ACK, "b", "a", 0, ev_value(0, 0), 0x10)
        pkt.syndrome, pkt.msn, pkt.psn = syndrome, 0, psn
        pkt.cum_psn, pkt.sack_base = cum & PSN_MASK, base & PSN_MASK
        pkt.sack_bitmap, pkt.ece, pkt.ce_count, pkt.sack_bits = bitmap, False, 0, SACK_BITS
        self.qp.on_ack(pkt)
        self.tb.ack(0, cum, bitmap, sack_base=base & PSN_MASK, syndrome=syndrome, psn=psn)

    def respond(self, trimmed=None):
        """The responder's ACK, or its NAK TRIMMED for ``trimmed``."""
        cum, base, bitmap = self.state()
        if trimmed is None:
            self.ack(cum, base, bitmap)
        else:
            self.ack(cum, base, bitmap, NAK_TRIMMED, trimmed)

    async def compare(self):
        """The retransmissions, the CQEs and una, once the engine is done."""
        tb, qp = self.tb, self.qp
        await tb.settle(40)
        # The core's walk waits for room in every output FIFO before each step, so
        # behind a run of CQE writes (one WQE per packet here, about 12 cycles each
        # against the AxiRam) its loss walk may not have run yet: wait until the RTL
        # has written a CQE for every WQE the model completed, never more, and then
        # for the walk.
        done = len(qp.send_cq)
        for _ in range(50):
            cqes = await tb.read("cnt_cqes")
            if cqes >= done:
                break
            await ClockCycles(self.dut.clk, 20)
        assert cqes == done, f"RTL wrote {cqes} CQEs, the model completed {done}"
        await tb.settle(40)
        want = [(p, REASON[why]) for _, p, _, why in qp.retx_log]
        got = [(r["psn"], r["reason"]) for r in tb.retx.records()[self.retx_seen:]]
        assert got == want, (got[self.checked:], want[self.checked:], self.history[-3:])
        self.checked = len(want)
        if qp.nxt_idx:  # reliability learns the PSNs from the first sent record
            assert await tb.read("una_psn", 0) == qp.una_psn

    async def finish(self, counters_before):
        """The EV events and the counters the model keeps too."""
        qp = self.qp
        model_events = [(e.ev - EV_BASE_VALUE, STATE[e.old], STATE[e.new], e.drops)
                        for e in qp.evs.events]
        events = await pop_events(self.tb)
        assert [(e["ev"], e["old"], e["new"], e["drops"]) for e in events] == model_events
        cnt = await self.tb.counters()
        for rtl, model in (("acks_unsent", "invalid_acks"),
                           ("naks_trim_repeat", "naks_trim_repeat")):
            assert cnt[rtl] - counters_before[rtl] == qp.stats[model], (rtl, cnt[rtl])
        return model_events, cnt


async def start(dut, tb, *, sack_thr, ev_thr=2, min_active=4, packets=300, **cfg):
    """The engine reset and set up with QP 0 in RTS, its ring of signaled WQEs (one
    CQE per WQE, WQE index = PSN), and a Pair with the model's QP."""
    await tb.reset()
    await tb.setup(t=20, sack_thr=sack_thr, ev_thr=ev_thr, min_active=min_active)
    for w in range(1 << RING_LOG2):
        tb.post_wqe(0, w, wr_id=w, length=64)
    qp = requester([ev_value(0, e) for e in range(8)], ev_thr=ev_thr, min_active=min_active,
                   **cfg)
    for w in range(packets):
        qp.post_write(wr_id=w, remote_va=0, rkey=1, length=512)
    return Pair(dut, tb, qp)


@cocotb.test(skip=CONFIG != "rel_q4")
async def test_model_compare(dut):
    """Black-holed EV 2 and random loss elsewhere; retransmits and EV events vs the model."""
    tb = TB(dut)
    ev_thr, packets = 2, 300
    pair = await start(dut, tb, sack_thr=1, ev_thr=ev_thr, packets=packets)
    before = await tb.counters()
    qp = pair.qp
    rng = seeds.rng(7)
    # ACK after a group of at least 4 packets ending with a new PSN that got through:
    # every packet lost in the group then has a SACKed PSN above it (the block's rule,
    # sack_threshold 1) and was sent before a delivered one (the model's RACK, reo_wnd 0),
    # so both see the loss on the same ACK.
    group = 0
    idle = 0
    trims = 0
    while (qp.has_work() or qp.outstanding()) and idle < 3:
        pkt = pair.send()
        delivered_new = False
        if pkt is not None:
            group += 1
            fresh = not pkt.retx and pkt.psn < packets - 8 and group < 4
            lost = fresh and (pair.ev_index(pkt) == 2 or rng.random() < 0.05)
            # a trim at random (5 %), and one whenever the trims fall behind one per
            # 40 PSNs, so that every seed trims at least 7 times
            if not lost and fresh and (rng.random() < 0.05 or trims < pkt.psn // 40):
                # trimmed by a switch: the responder answers NAK TRIMMED at once
                trims += 1
                pair.respond(trimmed=pkt.psn)
                await pair.compare()
            elif not lost:
                pair.received.add(pkt.psn)
                delivered_new = not pkt.retx
        if (group >= 4 and delivered_new) or pkt is None:
            idle = idle + 1 if pkt is None else 0
            group = 0
            pair.respond()
            await pair.compare()
    await tb.settle()
    assert pair.checked > 10 and trims > 5
    assert sum(r["reason"] == 2 for r in tb.retx.records()) == trims
    model_events, cnt = await pair.finish(before)
    # The black hole went bad. ``drops`` counts every loss so far, and a delivered
    # retransmission on EV 2 restarts its run, so it may exceed the threshold.
    assert any(e[:3] == (2, 0, 1) and e[3] >= ev_thr for e in model_events), model_events
    assert cnt["cqes"] == packets  # one WQE per packet, all SUCCESS
    dut._log.info("model compare: %d retransmits (%d trims), events %s", pair.checked, trims,
                  model_events)


# One step of an ACK-stream scenario: packets sent (each delivered, lost or trimmed;
# a retransmission is always delivered), or one ACK of a kind.
OUTCOME = st.sampled_from(("ok", "ok", "ok", "lost", "trim"))
STEP = st.one_of(
    st.tuples(st.just("send"), st.lists(OUTCOME, min_size=1, max_size=6)),
    st.tuples(st.just("ack")),  # the responder's current ACK
    st.tuples(st.just("old"), st.integers(1, 8)),  # an earlier ACK again
    st.tuples(st.just("base"), st.integers(-70, 70)),  # sack_base moved from cum + 1
    st.tuples(st.just("beyond"), st.integers(1, (1 << SACK_BITS) - 1)),  # bits past nxt
    st.tuples(st.just("unsent"), st.integers(1, 40)),  # a cumulative PSN past nxt
    st.tuples(st.just("nak"), st.integers(-4, 40)),  # NAK TRIMMED of una + k
)
SCENARIO = st.tuples(st.integers(1, 4), st.lists(STEP, min_size=10, max_size=40))


async def _run_scenario(dut, tb, sack_thr, steps, log):
    pair = await start(dut, tb, sack_thr=sack_thr, sack_threshold=sack_thr, packets=200)
    before = await tb.counters()
    qp = pair.qp
    for step in steps:
        kind = step[0]
        if kind == "send":
            for outcome in step[1]:
                pkt = pair.send()
                if pkt is None:
                    break
                if pkt.retx or outcome == "ok":
                    pair.received.add(pkt.psn)
                elif outcome == "trim":
                    pair.respond(trimmed=pkt.psn)
                    await pair.compare()
            continue
        if not qp.nxt_idx:
            continue  # nothing sent: the responder has nothing to answer
        cum, base, bitmap = pair.state()
        nxt = qp.nxt_idx  # PSN = index here (from 0, no wrap)
        if kind in ("ack", "old") and not (kind == "old" and pair.history):
            pair.ack(cum, base, bitmap)
        elif kind == "old" and pair.history:
            pair.ack(*pair.history[-min(step[1], len(pair.history))])
        elif kind == "base":
            pair.ack(cum, *pair.state(base=cum + 1 + step[1])[1:])
        elif kind == "beyond":
            pair.ack(cum, base, (bitmap | step[1] << (nxt - base)) & ((1 << SACK_BITS) - 1))
        elif kind == "unsent":
            pair.ack(nxt - 1 + step[1], nxt + step[1], 0)
        elif kind == "nak":
            pair.ack(cum, base, bitmap, NAK_TRIMMED, qp.una_psn + step[1])
        await pair.compare()
    await pair.finish(before)
    log.append((sack_thr, len(steps), [why for _, _, _, why in qp.retx_log], qp.una_psn))


@cocotb.test(skip=CONFIG != "rel_q4")
async def test_ack_differential(dut):
    """hypothesis-drawn ACK streams: the engine and the model with its count rule."""
    tb = TB(dut)
    log = []
    run_scenario = resume(_run_scenario)

    @settings(max_examples=60, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @hypothesis_seed(seeds.of(2912))
    @given(SCENARIO)
    def check(scenario):
        run_scenario(dut, tb, *scenario, log)

    await bridge(check)()
    why = Counter(w for _, _, retx, _ in log for w in retx)
    dut._log.info("ACK differential: %d scenarios, %d steps, retransmissions %s, "
                  "thresholds %s, PSNs acknowledged %d", len(log),
                  sum(s for _, s, _, _ in log), dict(why), sorted({t for t, _, _, _ in log}),
                  sum(u for _, _, _, u in log))
    # not vacuous: hypothesis drew SACK holes and trims the engine had to find
    assert why["sack"] > 0 and why["trim"] > 0, why


def test_rel_model():
    run("rel_q4", test_module="tests.hw.test_rel_model")

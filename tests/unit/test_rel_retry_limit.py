"""The retry limit of every boundary setting, ReliabilityCore in Amaranth's simulator
against the golden model (``sim.model``).

docs/protocol.md: ``linear_cnt`` (0..7) retries at the base timeout, then ``exp_cnt``
(0..24) doubling, so exactly ``linear_cnt + exp_cnt`` retries; timeout number
``linear_cnt + exp_cnt + 1`` puts the QP in ERROR. ``exp_cnt`` = 25 retries forever.

The core alone: the test stands in for ``RetransmitTimers`` (it answers each armed
timer write with the expiry report of its generation at once), so that the doubled
timeouts up to 2^24 units cost a few cycles each. ``now`` stays 0, so each armed
deadline is the timeout itself. The model QP runs over a fabric whose paths are all
down, in its own simulated time.
"""

import pytest
from amaranth.sim import Simulator

from hw.reliability.core import ReliabilityCore
from hw.reliability.layouts import CqeStatus, QpState
from sim.model import ERROR, RETRY_EXC_ERR, QpConfig, World, explicit_evs
from sim.model.qp import RTO_UNIT_NS

# the simulator checks each OneHotFSM's vector stays one-hot (tests/unit/conftest.py)
pytestmark = pytest.mark.usefixtures("invariant_checks")

UNIT = 4  # cycles per 1.024 us in the core under test
FOREVER_TIMEOUTS = 40  # past the 5-bit retry count's saturation at 31


def model_timeouts(linear, exp, t=0):
    """The golden model's timeouts with every path down: the timer values (in
    units of 1.024 us) of each timeout it takes, and whether it ends in ERROR."""
    w = World(seed=1, planes=1, paths_per_plane=2)
    w.add_host("a")
    w.add_host("b")
    cfg = QpConfig(rto_exp=t, linear_cnt=linear, exp_cnt=exp, ev_min_active=2,
                   probe_interval_ns=1e15)
    conn = w.connect("a", "b", transport="mrc", cfg=cfg,
                     evs=explicit_evs(range(0xC000, 0xC002)), backed=True, mr_length=1 << 16)
    w.fabric.schedule_down({"kind": "core"}, 0.0)
    req = conn.requester
    req.tx_log = []
    req.post_write(1, conn.mr.va, conn.rkey, 64, data=bytes(64))
    # past the end of every finite setting; forever: at least FOREVER_TIMEOUTS
    limit_ns = RTO_UNIT_NS * (1 << min(24, t + 24)) * (FOREVER_TIMEOUTS + 1)
    w.run_until_idle(max_time_ns=limit_ns)
    sends = [time for time, _psn, _ev, _retx in req.tx_log]
    ends = sends[1:] + ([req.send_cq[0].time_ns] if req.state == ERROR else [])
    waits = [round((b - a) / RTO_UNIT_NS) for a, b in zip(sends, ends, strict=False)]
    if req.state == ERROR:
        assert req.send_cq[0].status == RETRY_EXC_ERR
        assert req.stats["timeouts"] == len(waits)
    return waits, req.state == ERROR


def core_timeouts(linear, exp, t=0, most=FOREVER_TIMEOUTS):
    """ReliabilityCore's timeouts for one QP with one PSN in flight: the timer value
    (in units) armed before each timeout it takes, and whether it ends in ERROR."""
    dut = ReliabilityCore(num_qps=2, evs_per_qp=2, sack_bits=32, window=16,
                          timeout_unit=UNIT)
    arms, errors, retry_cqes = [], [], []

    async def sinks(ctx):
        for port in (dut.cpl, dut.ack_update, dut.retx, dut.ev_update, dut.cwnd_update,
                     dut.cc_event,
                     dut.qp_state_update, dut.probe_req, dut.event):
            ctx.set(port.ready, 1)
        async for _clk, _rst, t_valid, arm, s_valid, s, c_valid, c in ctx.tick().sample(
                dut.timer_arm.valid, dut.timer_arm.payload, dut.qp_state_update.valid,
                dut.qp_state_update.payload, dut.cpl.valid, dut.cpl.payload):
            if t_valid and arm.armed:
                arms.append((arm.gen, arm.deadline))
            if s_valid and s.state == QpState.ERROR:
                errors.append(s.qpn)
            if c_valid and not c.clear and c.status == CqeStatus.RETRY_EXCEEDED:
                retry_cqes.append(c.wqe_index)

    async def put(ctx, port, **fields):
        ctx.set(port.payload, fields)
        ctx.set(port.valid, 1)
        await ctx.tick().until(port.ready)
        ctx.set(port.valid, 0)
        await ctx.tick().repeat(16)  # the event and the timer write it makes

    waits = []

    async def bench(ctx):
        ctx.set(dut.rel_data, {"t": t, "linear_cnt": linear, "exp_cnt": exp,
                               "ev_min_active": 2})
        ctx.set(dut.params, {"cwnd_min": 1, "cwnd_max": 16, "cwnd_init": 16})
        await ctx.tick().repeat(8)  # the records' clear after reset
        await put(ctx, dut.sq_producer, qpn=1, producer=1)
        await put(ctx, dut.cmd, qpn=1, state=QpState.RTS)
        await put(ctx, dut.sent, qpn=1, psn=100, ev_index=0, last=1, wqe_index=0)
        while not errors and len(waits) < most:
            assert arms, "no timer armed"
            gen, deadline = arms.pop()
            assert not arms
            waits.append(deadline // UNIT)
            await put(ctx, dut.expired, qpn=1, gen=gen)
            await ctx.tick().repeat(8)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_process(sinks)
    sim.add_testbench(bench)
    sim.run()
    assert errors in ([], [1]) and retry_cqes == ([0] if errors else [])
    return waits, bool(errors)


@pytest.mark.parametrize("linear, exp", [(0, 0), (7, 0), (0, 24), (7, 24), (3, 5),
                                         (0, 25), (7, 25), (0, 26), (7, 31)])
def test_retry_limit_matches_model(linear, exp):
    """Each boundary setting: the core takes exactly the timeouts the model takes, with
    the same timer values; ``linear_cnt + exp_cnt`` retries then ERROR, or, with
    ``exp_cnt`` = 25, no ERROR however many timeouts. The field's values above 25,
    which the driver refuses, retry forever too, as the model NIC reads them."""
    want, want_error = model_timeouts(linear, min(exp, 25))  # as sim/nicmodel/
    got, got_error = core_timeouts(linear, exp)
    if exp >= 25:
        assert not want_error and not got_error
        assert len(got) == FOREVER_TIMEOUTS and len(want) >= FOREVER_TIMEOUTS
        want = want[:FOREVER_TIMEOUTS]
    else:
        assert want_error and got_error
        assert len(got) == linear + exp + 1  # the retries, then the one that errors
    assert got == want
    # the documented schedule: linear_cnt + 1 waits at the base, then doubling
    assert got[: linear + 1] == [1] * (linear + 1)
    assert got[linear + 1 : linear + 25] == [2 << k for k in range(len(got[linear + 1:]))][:24]

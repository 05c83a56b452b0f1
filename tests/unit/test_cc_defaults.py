"""NSCC's defaults (hw/reliability/cc_defaults.py): the gateware's reset values, the
model NIC's registers, the driver's defaults and the golden model's NSCC agree, and
they react (a finite target, a start window below the ceiling where the BDP is)."""

import pytest

from hw.reliability.cc_defaults import (
    DATA_WIRE_OVERHEAD,
    DEFAULT_BASE_RTT_NS,
    START_CWND_BDP,
    TARGET_DELAY_FRACTION,
    line_rate_bps,
    start_cwnd_packets,
    target_rtt_units,
)
from hw.reliability.engine import ReliabilityEngine
from sim.model.cc import Nscc, NsccParams
from sim.model.packet import data_wire_len

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")


@pytest.mark.parametrize("mtu", [256, 512, 1024, 2048, 4096])
def test_wire_overhead_is_the_models(mtu):
    assert mtu + DATA_WIRE_OVERHEAD == data_wire_len(mtu, False)


def test_model_nscc_uses_the_same_fractions():
    p = NsccParams(base_rtt_ns=4000.0).resolved(bdp_bytes=50_000, mtu_wire=1122)
    assert p.target_delay_ns == TARGET_DELAY_FRACTION * 4000.0
    assert Nscc(p, 1122).cwnd == p.max_cwnd == START_CWND_BDP * 50_000  # the first window
    assert NsccParams().base_rtt_ns == DEFAULT_BASE_RTT_NS


@pytest.mark.parametrize("clk, width, mtu, target, start", [
    (125_000_000, 64, 4096, 68, 2),  # 8 Gb/s, 5 us: 5000 B BDP, 7500 B / 4194 B
    (125_000_000, 64, 1024, 68, 7),
    (15_625_000, 64, 1024, 9, 1),  # the system simulation's nominal clock
    (250_000_000, 512, 1024, 137, 64),  # 128 Gb/s: 1.5 x BDP beyond the window
])
def test_engine_resets_to_nscc_defaults(clk, width, mtu, target, start):
    eng = ReliabilityEngine(num_qps=2, evs_per_qp=2, window=64, clk_freq_hz=clk,
                            data_width=width, max_mtu=mtu)
    assert eng.target_rtt_reset == target_rtt_units(DEFAULT_BASE_RTT_NS, clk) == target
    assert eng.cwnd_init_reset == start_cwnd_packets(
        DEFAULT_BASE_RTT_NS, line_rate_bps(width, clk), mtu, 64) == start
    # the target is the RTT at NSCC's target delay, within a unit's rounding
    unit_ns = 16e9 / clk
    assert abs(target * unit_ns - 1.75 * DEFAULT_BASE_RTT_NS) <= unit_ns / 2


def test_bad_base_rtt_is_named():
    with pytest.raises(ValueError, match="base_rtt_ns must be in"):
        target_rtt_units(0.0, 125_000_000)
    with pytest.raises(ValueError, match="base_rtt_ns must be in"):
        target_rtt_units(1e9, 125_000_000)  # beyond 16 bits of 128 ns units
    with pytest.raises(ValueError, match="max_mtu must be"):
        ReliabilityEngine(max_mtu=1500)


def test_model_nic_and_driver_defaults_are_the_reset_values():
    """The model NIC's registers after reset, and the driver's defaults, equal the
    gateware's reset values for the same NIC parameters."""
    import asyncio

    from sim.nicmodel import ModelFabric, ModelNic
    from sim.system.model_harness import ModelSystem
    from sim.system.top import NIC_PARAMS

    eng = ReliabilityEngine(num_qps=NIC_PARAMS["num_qps"], evs_per_qp=NIC_PARAMS["evs_per_qp"],
                            window=NIC_PARAMS["window"], clk_freq_hz=NIC_PARAMS["clk_freq_hz"],
                            data_width=NIC_PARAMS["data_width"], max_mtu=NIC_PARAMS["max_mtu"])
    want = {"target_rtt": eng.target_rtt_reset, "cwnd_init": eng.cwnd_init_reset}
    nic = ModelNic(NIC_PARAMS, ModelFabric())
    assert {n: nic.reg("reliability", n) for n in want} == want

    async def body():
        tb = ModelSystem()
        await tb.init()
        dev = tb.ends[0].dev
        assert dev.congestion_defaults() == want
        assert {n: await dev.rel.read(n) for n in want} == want
        faster = await dev.set_congestion(base_rtt_ns=2000.0, link_gbps=100.0)
        assert {n: faster[n] for n in want} == {
            "target_rtt": target_rtt_units(2000.0, NIC_PARAMS["clk_freq_hz"]),
            "cwnd_init": start_cwnd_packets(2000.0, 100e9, NIC_PARAMS["max_mtu"],
                                            NIC_PARAMS["window"])}
        assert faster["nscc_ctrl"] & 1 == 0  # the packet window: NSCC stays off
        assert {n: await dev.rel.read(n) for n in faster} == faster
        with pytest.raises(ValueError, match="link_gbps must be > 0"):
            dev.congestion_defaults(link_gbps=0)

    asyncio.run(body())


def test_driver_selects_nscc_by_name():
    """``set_congestion("uet-1.0-nscc", ...)`` writes NSCC's registers (on, its
    parameters by MRC's names) and the model NIC then runs the golden model's NSCC
    for a QP brought to RTS; a wrong name, NSCC parameters without NSCC, a bad MTU
    and NSCC selected with a QP in RTS are refused by what to fix."""
    import asyncio

    from hw.reliability.nscc_path import nscc_register_values, nscc_register_words
    from sim.system.model_harness import ModelSystem
    from sim.system.top import NIC_PARAMS

    async def body():
        tb = ModelSystem()
        await tb.init()
        dev = tb.ends[0].dev
        with pytest.raises(ValueError, match="must be one of .*uet-1.0-nscc.*not 'reno'"):
            await dev.set_congestion("reno")
        with pytest.raises(ValueError, match="'gamma'.* are NSCC's parameters"):
            await dev.set_congestion("packet-window", gamma=0.5)
        with pytest.raises(ValueError, match="unknown NSCC parameters.*'gama'"):
            await dev.set_congestion("uet-1.0-nscc", gama=0.5)
        with pytest.raises(ValueError, match="mtu must be a path MTU"):
            await dev.set_congestion("uet-1.0-nscc", mtu=1500)
        words = await dev.set_congestion("uet-1.0-nscc", base_rtt_ns=20_000.0, gamma=0.5,
                                         mtu=1024)
        want = nscc_register_words(nscc_register_values(
            clk_freq_hz=NIC_PARAMS["clk_freq_hz"], mtu_wire=1024 + DATA_WIRE_OVERHEAD,
            rate_bps=line_rate_bps(NIC_PARAMS["data_width"], NIC_PARAMS["clk_freq_hz"]),
            base_rtt_ns=20_000.0, gamma=0.5))
        assert {n: words[n] for n in want} == want and want["nscc_ctrl"] & 1
        assert {n: await dev.rel.read(n) for n in want} == want
        await tb.connect()
        qp = tb.ends[0].nic.qps[tb.ends[0].qp.qpn]
        assert qp.cc.p.enabled and qp.cc.p.gamma == 0.5 and qp.cc.mtu == 1024 + DATA_WIRE_OVERHEAD
        # TX's window reads NSCC's, as the gateware's: bytes // mtu_wire within 1..window
        q = tb.ends[0].qp.qpn
        for cwnd, packets in ((qp.cc.cwnd, int(qp.cc.cwnd) // qp.cc.mtu), (100.0, 1),
                              (1e9, NIC_PARAMS["window"]), (3.5 * qp.cc.mtu, 3)):
            qp.cc.cwnd = cwnd
            assert await dev.tx.read("qp_cwnd", q) == packets, cwnd
        with pytest.raises(ValueError, match=r"before bringing QPs to RTS.*QPs \[\d+\]"):
            await dev.set_congestion("uet-1.0-nscc")
        await dev.set_congestion()  # back to the packet window: allowed any time
        assert (await dev.rel.read("nscc_ctrl")) & 1 == 0

    asyncio.run(body())

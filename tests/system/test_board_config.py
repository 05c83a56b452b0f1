"""Smoke test of the NicCore that the board builds: ``VersaTop().nic_params()``
(hw/board/top.py ``VERSA_NIC_PARAMS`` over hw/board/soc.py
``BOARD_NIC_PARAMS``: 2 QPs x 2 EVs, SACK 32, MTU 512, window 16, one MR,
32-bit DMA addresses) at the board's core clock, as two NICs under Verilator
(sim/system/simhw.py's wrapper, its own build ``system_two_nic_board``),
configured and driven only through the host driver.

Traffic both ways at once on the one QP pair (each NIC's only MR), 1 % loss
on every path of both directions, and the data direction's second path
down for good once the transfer is under way, so that frames are lost for
certain, whatever the seed: memory is byte exact both ways, the send and
receive completions equal the golden model's for the same flows, field for
field and in order, and the counter equations of ``SystemTB.check_counters``
hold in both directions.

The default suite's only system test at board size: the rest of tests/system
runs ``sim/system/top.py``'s ``NIC_PARAMS`` (16 QPs x 8 EVs, SACK 64, 64-bit
addresses).
"""

from __future__ import annotations

import cocotb
import pytest
from cocotb.utils import get_sim_time

from host_driver.driver import MPR_UNIT, Completion, EvProfile, WrOpcode
from hw.board.top import VersaTop
from sim.system.harness import EV_BASES, SystemTB
from sim.system.scoreboard import flow_imm, model_flows, normalise_rtl
from tests import seeds

BOARD = VersaTop()
PARAMS = {**BOARD.nic_params(), "clk_freq_hz": BOARD.core_hz}
LOSS = 0.01
# (messages, bytes) per direction: NIC 0 -> NIC 1 many-packet messages, the
# last packet short; NIC 1 -> NIC 0 two packets each
FLOWS = ((12, 3000), (12, 700))
DOWN_AFTER = 16  # data frames NIC 0 sends before its second path goes down


def packets(messages: int, size: int) -> int:
    return messages * -(-size // PARAMS["max_mtu"])


@cocotb.test()
async def test_board_traffic(dut):
    tb = SystemTB(dut, seed=seeds.of(61), keep_log=True)
    await tb.init()
    # what the device-info block reports (every parameter but inflight_depth, nscc
    # and ev_gen: the driver tells those from the NSCC registers and the CSR chain)
    unreported = ("inflight_depth", "nscc", "ev_gen")
    for end in tb.ends:
        assert {n: end.dev.params[n] for n in PARAMS if n not in unreported} == {
            n: v for n, v in PARAMS.items() if n not in unreported}
        with pytest.raises(ValueError, match="built without NSCC"):
            await end.dev.set_congestion("uet-1.0-nscc")
        with pytest.raises(ValueError, match="built without the EV generator"):
            await end.dev.generate_evs(0, EvProfile.auto())
    assert (PARAMS["sack_bits"], PARAMS["max_mtu"], PARAMS["num_mrs"], PARAMS["addr_width"]) \
        == (32, 512, 1, 32)
    evs = [EvProfile.explicit(range(base, base + PARAMS["evs_per_qp"])) for base in EV_BASES]
    await tb.connect(qps=1, buf_size=64 * 1024, sq_log2=4, mtu=PARAMS["max_mtu"], timeout=7,
                     sack_threshold=3, evs=evs, mpr=PARAMS["mpr_max"] // MPR_UNIT)
    tb.fabric.set_loss(LOSS)
    start = get_sim_time(unit="ns")
    flows, runs = [], []
    for src, (messages, size) in enumerate(FLOWS):
        conn, peer = tb.ends[src].conns[0], tb.ends[1 - src].conns[0]
        flows.append({"src": "ab"[src], "dst": "ab"[1 - src], "messages": messages,
                      "size": size, "imm": True, "depth": messages})
        payload = tb.random_bytes(messages * size)
        tb.ends[src].dev.mem.write(conn.send_buf, payload)
        for i in range(messages):
            await conn.qp.post_send(WrOpcode.WRITE_WITH_IMM, local_addr=conn.send_buf + i * size,
                                    length=size, remote_addr=peer.recv_buf + i * size,
                                    rkey=peer.mr.rkey, imm=flow_imm(src, i), wr_id=i,
                                    ring=False)
        runs.append(payload)
    for end in tb.ends:
        await end.conns[0].qp.ring_doorbell()
    # the data direction's second EV's path goes down for good mid-transfer
    data = tb.fabric.directions[0]
    path = data.path_of(tb.ends[0].conns[0].qp.evs.values[1])
    while sum(ev in tb.ends[0].conns[0].qp.evs.values for _, ev, _, _ in data.log) < DOWN_AFTER:
        await tb.cycles(16)
    down_ns = get_sim_time(unit="ns") - start
    tb.fabric.set_path_up(path, False, direction=0)
    model = model_flows(flows, paths=PARAMS["evs_per_qp"], mtu=PARAMS["max_mtu"], loss=LOSS,
                        path_down=(path, "b", down_ns), seed=seeds.of(61))
    for src, (messages, size) in enumerate(FLOWS):
        conn, peer = tb.ends[src].conns[0], tb.ends[1 - src].conns[0]
        send = await conn.qp.send_cq.wait(messages, timeout_cycles=4_000_000)
        recv = await peer.qp.recv_cq.wait(messages, timeout_cycles=400_000)
        assert [(c.wr_id, c.status, c.byte_len) for c in send] == [
            (i, Completion.SUCCESS, size) for i in range(messages)], src
        assert normalise_rtl(send, recv, imm=True) == model[src], src
        got = tb.ends[1 - src].dev.mem.read(peer.recv_buf, messages * size)
        assert got == runs[src], f"NIC {1 - src}'s memory is not what NIC {src} wrote"
    await tb.quiesce()
    figures = [await tb.check_counters(src, packets=packets(*FLOWS[src]),
                                       messages=FLOWS[src][0], imm_messages=FLOWS[src][0])
               for src in (0, 1)]
    assert figures[0]["fabric.data_dropped"] >= 1 and figures[0]["A.tx.retx_packets"] >= 1
    dut._log.info("board configuration: %.1f us simulated; path %d down at %.1f us; "
                  "data dropped %d/%d, retransmitted %d/%d", (get_sim_time(unit="ns") - start)
                  / 1e3, path, down_ns / 1e3, figures[0]["fabric.data_dropped"],
                  figures[1]["fabric.data_dropped"], figures[0]["A.tx.retx_packets"],
                  figures[1]["A.tx.retx_packets"])


def board_top():
    from sim.system.simhw import SimTwoNicTop

    return SimTwoNicTop(PARAMS)


def test_board_config():
    from sim.cocotb_runner import run_cocotb
    from sim.system.simhw import SIM_TOPLEVEL

    run_cocotb(name="system_two_nic_board", elaborate=board_top, toplevel=SIM_TOPLEVEL,
               test_module="tests.system.test_board_config", testcase="test_board_traffic")

"""NicCore with 1,024 QPs: two NICs built with ``MANY_QPS_PARAMS`` (sim/system/top.py's
``NIC_PARAMS`` with ``num_qps`` 1,024 and ``num_mrs`` 256) in two_nic_sim, configured and driven
only through the host driver (the build's parameters from
``system_params()``).

- ``test_256_of_1024_qps_both_ways``: 256 connections per NIC at once, their
  QP numbers spread over the whole table (NIC 0's 4k + 3, NIC 1's 4k, so the
  QPN's upper bits all take part), each connection's receive buffer in a
  memory region of its own (256 per NIC, their MR blocks after the QP
  blocks): ``every_qp_both_ways``'s checks
  (byte-exact memory, completions in order and equal to the golden model's,
  the counter equations, every QP's packet count).

The build is its own (sim_build/system_two_nic_sim_num_mrs256_num_qps1024) and the run
is in the long suite (``make test-long TESTS=tests/system/test_many_qps.py``):
the build takes about 7 CPU minutes (12.4 min wall beside a board build) and
the run about 2 more, past what make test's 20 minutes on CI's 2 cores leave.
"""

from __future__ import annotations

import cocotb
import pytest

from sim.system.harness import SystemTB
from sim.system.simhw import run_two_nic
from sim.system.top import MANY_QPS_PARAMS, system_params
from sim.system.transfers import every_qp_both_ways
from tests import seeds

CONNECTIONS = 256


@cocotb.test()
async def test_256_of_1024_qps_both_ways(dut):
    """256 QPs of each NIC, 2 WRITE_WITH_IMM per QP and direction of 64..574
    bytes (one packet each, a size per QP), all posted before the first
    doorbell rings. The retransmit timeout (t = 12: 65,536 cycles of this
    build's clock) is above the time the 512 packets of a direction take
    through the NIC's port (about 25,000 cycles), so nothing is sent twice;
    at t = 9 (8,192 cycles) the later QPs time out behind the earlier ones'
    packets and ACKs, and the retransmissions are still draining when the
    counters are read."""
    num_qps = system_params()["num_qps"]
    tb = SystemTB(dut, seed=seeds.of(41), keep_log=True)
    await tb.init()
    for end in tb.ends:
        assert end.dev.params["num_qps"] == num_qps
        assert (await end.dev.rel.read_fields("params"))["num_qps"] == num_qps
        assert await end.dev.tx.read("num_qps") == num_qps
    spread = num_qps // CONNECTIONS
    qpns = [[spread * k + spread - 1 for k in range(CONNECTIONS)],
            [spread * k for k in range(CONNECTIONS)]]
    await tb.connect(qps=CONNECTIONS, buf_size=4096, sq_log2=2, timeout=12, qpns=qpns)
    await every_qp_both_ways(tb, dut, f"{CONNECTIONS} of {num_qps} QPs both ways", messages=2,
                             sizes=[64 + 2 * k for k in range(CONNECTIONS)])


@pytest.mark.long
def test_many_qps_system():
    run_two_nic("tests.system.test_many_qps", ["test_256_of_1024_qps_both_ways"], "many",
                MANY_QPS_PARAMS)

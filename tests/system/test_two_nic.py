"""Two NicCores joined by the fabric model, configured and driven only through
the host driver (host_driver/driver.py): discovery, RDMA WRITEs over 8 paths,
WRITE_WITH_IMM completions on both sides, loss recovery.

One Verilator build (sim_build/system_two_nic) serves every test here.
"""

from __future__ import annotations

import cocotb
import pytest
from cocotb.utils import get_sim_time

from host_driver.driver import Completion, Device, WrOpcode
from hw.nic.csr import DEVICE_INFO_TYPE_ID, NIC_VERSION
from tests.system.harness import SystemTB
from tests.system.scoreboard import model_completions, normalise_rtl
from tests.system.top import BUILD_IDS, NIC_PARAMS, TwoNicTop

RDMA_WRITE_LAST_WITH_IMM, RDMA_WRITE_ONLY_WITH_IMM = 0x09, 0x0B


async def transfer(tb: SystemTB, src: int, sizes: list[int], *, opcode=WrOpcode.WRITE,
                   timeout_cycles=2_000_000):
    """Post WRITEs of ``sizes`` bytes from NIC ``src`` into the peer's MR,
    back to back in the peer's buffer,
    flow-controlled by the send queue's size. Returns (posted, payload, early)
    with ``early`` the send completions taken while waiting for a free slot."""
    a, b = tb.ends[src], tb.ends[1 - src]
    payload = tb.random_bytes(sum(sizes))
    a.dev.mem.write(a.send_buf, payload)
    posted, early, offset = [], [], 0
    for n in sizes:
        if a.qp.outstanding >= a.qp.sq_size:
            early += await a.qp.send_cq.wait(1, timeout_cycles=timeout_cycles)
        imm = 0xA5000000 | len(posted)
        wr_id = await a.qp.post_send(opcode, local_addr=a.send_buf + offset, length=n,
                                     remote_addr=b.recv_buf + offset, rkey=b.mr.rkey, imm=imm)
        posted.append((wr_id, n, imm))
        offset += n
    return posted, payload, early


async def complete_all(end, posted, already=()):
    cqes = list(already)
    cqes += await end.qp.send_cq.wait(len(posted) - len(cqes), timeout_cycles=4_000_000)
    return cqes


def check_memory(tb, dst, payload):
    got = tb.ends[dst].dev.mem.read(tb.ends[dst].recv_buf, len(payload))
    if got != payload:
        first = next(i for i in range(len(payload)) if got[i] != payload[i])
        raise AssertionError(f"NIC {dst} memory differs from byte {first} of {len(payload)}")


@cocotb.test()
async def test_discovery(dut):
    """The driver walks the block chain and reads the build parameters."""
    tb = SystemTB(dut)
    await tb.init()
    for i, end in enumerate(tb.ends):
        dev: Device = end.dev
        assert [(b.type_id, b.version) for b in dev.blocks] == [
            (DEVICE_INFO_TYPE_ID, 1), (2, 1), (3, 1), (4, 1)]
        block_size = dev.params["block_size"]
        assert [b.base for b in dev.blocks] == [k * block_size for k in range(4)]
        assert dev.params["nic_version"] == NIC_VERSION
        assert dev.params["build_id"] == BUILD_IDS[i]
        for name in ("data_width", "num_qps", "evs_per_qp", "sack_bits", "max_mtu", "mpr_max",
                     "num_mrs", "window", "clk_freq_hz"):
            assert dev.params[name] == NIC_PARAMS[name], name
        # the blocks' own parameter registers agree with the device-info block
        assert await dev.tx.read("num_qps") == NIC_PARAMS["num_qps"]
        assert await dev.tx.read("evs_per_qp") == NIC_PARAMS["evs_per_qp"]
        rel_params = await dev.rel.read_fields("params")
        assert rel_params == {"num_qps": NIC_PARAMS["num_qps"],
                              "evs_per_qp": NIC_PARAMS["evs_per_qp"],
                              "window": NIC_PARAMS["window"]}
        assert (await dev.rx.read_fields("PARAMS"))["mrs"] == NIC_PARAMS["num_mrs"]
        # per-NIC state: scratch words are independent
        await dev.info.write("scratch", 0x1234_0000 + i)
    for i, end in enumerate(tb.ends):
        assert await end.dev.info.read("scratch") == 0x1234_0000 + i


@cocotb.test()
async def test_write_lossless_8_paths(dut):
    """1 MiB of RDMA WRITEs (16 x 64 KiB) NIC 0 -> NIC 1 over 8 lossless paths:
    the receiver's memory is byte exact, every WQE completes SUCCESS in order,
    the packets are sprayed over all 8 paths and nothing is retransmitted."""
    tb = SystemTB(dut, seed=11)
    await tb.init()
    await tb.connect(sq_log2=4)
    sizes = [64 * 1024] * 16
    start = get_sim_time(unit="ns")
    posted, payload, early = await transfer(tb, 0, sizes)
    cqes = await complete_all(tb.ends[0], posted, early)
    elapsed = get_sim_time(unit="ns") - start
    assert [(c.wr_id, c.status, c.byte_len, c.opcode) for c in cqes] == [
        (w, Completion.SUCCESS, n, WrOpcode.WRITE) for w, n, _ in posted]
    assert all(c.qpn == tb.ends[0].qp.qpn for c in cqes)
    check_memory(tb, 1, payload)
    packets = sum((n + 1023) // 1024 for n in sizes)
    carried = [p.carried for p in tb.fabric.directions[0].paths]
    assert sum(carried) == packets, carried
    assert min(carried) >= packets // 8 // 2, f"uneven spraying: {carried}"
    c0, c1 = await tb.ends[0].dev.counters(), await tb.ends[1].dev.counters()
    assert c0["rel.retx_timeout"] == c0["rel.retx_sack"] == c0["rel.retx_nak"] == 0, c0
    assert c1["rx.placed"] == packets and c1["rx.duplicate"] == 0, c1
    assert c0["rel.cqes"] == len(sizes)
    # WRITE without immediate: no receive completion
    assert await tb.ends[1].qp.recv_cq.poll() == []
    dut._log.info("1 MiB in %.1f us: %.2f Gb/s at 64 bits x 125 MHz; packets per path %s",
                  elapsed / 1e3, len(payload) * 8 / elapsed, carried)


@cocotb.test()
async def test_write_with_imm_both_directions(dut):
    """WRITE_WITH_IMM in both directions at once: the receiver gets one CQE per
    message (MSN, length, immediate, opcode), the sender one SUCCESS CQE per
    WQE, and both memories are byte exact."""
    tb = SystemTB(dut, seed=12)
    await tb.init()
    await tb.connect(sq_log2=4)
    sizes = [[1, 100, 1024, 1025, 3000, 4096 + 7, 20000, 64],
             [8, 2048, 513, 9999, 1023, 1, 4096, 300]]
    runs = [await transfer(tb, src, sizes[src], opcode=WrOpcode.WRITE_WITH_IMM)
            for src in (0, 1)]
    for src in (0, 1):
        posted, payload, early = runs[src]
        sender, receiver = tb.ends[src], tb.ends[1 - src]
        cqes = await complete_all(sender, posted, early)
        assert [(c.wr_id, c.status, c.byte_len, c.imm, c.opcode) for c in cqes] == [
            (w, Completion.SUCCESS, n, imm, WrOpcode.WRITE_WITH_IMM) for w, n, imm in posted]
        recv = await receiver.qp.recv_cq.wait(len(posted), timeout_cycles=200_000)
        assert [(c.wr_id, c.byte_len, c.imm, c.qpn, c.status) for c in recv] == [
            (msn, n, imm, receiver.qp.qpn, 0) for msn, (_, n, imm) in enumerate(posted, 1)]
        assert [c.opcode for c in recv] == [
            RDMA_WRITE_ONLY_WITH_IMM if n <= 1024 else RDMA_WRITE_LAST_WITH_IMM
            for _, n, _ in posted]
        check_memory(tb, 1 - src, payload)


@cocotb.test()
async def test_write_one_percent_loss(dut):
    """512 KiB each way with 1 % loss on every path of both directions (data
    and ACKs): SACK and timeout retransmissions repair it, memory is exact."""
    tb = SystemTB(dut, seed=13)
    await tb.init()
    await tb.connect(sq_log2=4, timeout=9)
    tb.fabric.set_loss(0.01)
    runs = [await transfer(tb, src, [32 * 1024] * 16) for src in (0, 1)]
    for src in (0, 1):
        posted, payload, early = runs[src]
        cqes = await complete_all(tb.ends[src], posted, early)
        assert [(c.wr_id, c.status) for c in cqes] == [(w, 0) for w, _, _ in posted]
        check_memory(tb, 1 - src, payload)
    dropped = sum(p.dropped for p in tb.fabric.paths())
    assert dropped > 0
    retx = 0
    for end in tb.ends:
        c = await end.dev.counters()
        retx += c["rel.retx_timeout"] + c["rel.retx_sack"] + c["rel.retx_nak"]
    assert retx >= 1
    dut._log.info("1 %% loss: %d frames dropped, %d retransmit requests", dropped, retx)


@cocotb.test()
async def test_write_with_imm_matches_model(dut):
    """12 x 5000-byte WRITE_WITH_IMM (wr_id i, immediate i) NIC 0 -> NIC 1 over 8
    lossless paths: the send and receive completions equal the golden model's
    for the same flow, field for field and in order."""
    tb = SystemTB(dut, seed=14)
    await tb.init()
    await tb.connect(sq_log2=4)
    messages, size = 12, 5000
    a, b = tb.ends
    payload = tb.random_bytes(messages * size)
    a.dev.mem.write(a.send_buf, payload)
    for i in range(messages):
        await a.qp.post_send(WrOpcode.WRITE_WITH_IMM, local_addr=a.send_buf + i * size,
                             length=size, remote_addr=b.recv_buf + i * size, rkey=b.mr.rkey,
                             imm=i, wr_id=i)
    send = await a.qp.send_cq.wait(messages, timeout_cycles=1_000_000)
    recv = await b.qp.recv_cq.wait(messages, timeout_cycles=200_000)
    expected = model_completions(messages=messages, size=size, imm=True)
    assert len(expected["send"]) == len(expected["recv"]) == messages
    assert normalise_rtl(send, recv, imm=True) == expected
    check_memory(tb, 1, payload)


@cocotb.test()
async def test_ev_denied_by_controller(dut):
    """The controller sets EV 5 DENIED through the driver: no data frame of the
    next 128 KiB uses it; set GOOD again, the next 128 KiB use it again."""
    tb = SystemTB(dut, seed=15)
    tb.fabric.keep_log = True
    await tb.init()
    await tb.connect(sq_log2=4)
    a = tb.ends[0]
    denied_ev = tb.ends[0].qp.evs.values[5]
    await a.dev.set_ev_state(a.qp, 5, denied=True)
    assert (await a.dev.ev_states(a.qp))[5] == 2
    mark = len(tb.fabric.directions[0].log)
    posted, payload, early = await transfer(tb, 0, [16 * 1024] * 8)
    await complete_all(a, posted, early)
    check_memory(tb, 1, payload)
    evs_used = [ev for _, ev, _, _ in tb.fabric.directions[0].log[mark:]]
    assert len(evs_used) == 128 and denied_ev not in evs_used
    assert len(set(evs_used)) == 7
    await a.dev.set_ev_state(a.qp, 5, denied=False)
    mark = len(tb.fabric.directions[0].log)
    posted, payload, early = await transfer(tb, 0, [16 * 1024] * 8)
    await complete_all(a, posted, early)
    assert denied_ev in [ev for _, ev, _, _ in tb.fabric.directions[0].log[mark:]]


@cocotb.test()
async def test_write_reordered(dut):
    """WRITE_WITH_IMM both ways with 20 % of the frames of every path (data and
    ACKs) held back 3 us: every message completes without a retransmit
    timeout (SACK-driven retransmissions are allowed: a late packet looks like
    a hole), receive completions stay in message order, memory is exact."""
    tb = SystemTB(dut, seed=17)
    await tb.init()
    await tb.connect(sq_log2=4, timeout=12)
    tb.fabric.set_reorder(0.2, 3000.0)
    runs = [await transfer(tb, src, [8 * 1024 + 17 * src] * 8, opcode=WrOpcode.WRITE_WITH_IMM)
            for src in (0, 1)]
    for src in (0, 1):
        posted, payload, early = runs[src]
        cqes = await complete_all(tb.ends[src], posted, early)
        assert [(c.wr_id, c.status) for c in cqes] == [(w, 0) for w, _, _ in posted]
        recv = await tb.ends[1 - src].qp.recv_cq.wait(len(posted), timeout_cycles=200_000)
        assert [(c.wr_id, c.imm) for c in recv] == [(msn, imm) for msn, (_, _, imm)
                                                     in enumerate(posted, 1)]
        check_memory(tb, 1 - src, payload)
    for end in tb.ends:
        c = await end.dev.counters()
        assert c["rel.retx_timeout"] == 0 and c["rel.timeouts"] == 0, c


@cocotb.test()
async def test_path_down_then_up(dut):
    """Path 3 (EV 0xC003) of NIC 0 -> NIC 1 goes down: its losses make EV 3
    ASSUMED_BAD (an EV event the controller reads), the transfer completes on
    the other paths; once the path is up, a probe brings EV 3 back to GOOD."""
    tb = SystemTB(dut, seed=16)
    await tb.init()
    await tb.connect(sq_log2=4, timeout=9, probe_period=4000)
    a = tb.ends[0]
    tb.fabric.set_path_up(3, False, direction=0)
    posted, payload, early = await transfer(tb, 0, [32 * 1024] * 8)
    await complete_all(a, posted, early)
    check_memory(tb, 1, payload)
    events = await a.dev.read_ev_events()
    assert any(e.ev_index == 3 and e.new == 1 for e in events), events
    assert (await a.dev.ev_states(a.qp))[3] == 1
    tb.fabric.set_path_up(3, True, direction=0)
    for _ in range(100):
        await a.dev.transport.idle(1000)
        if (await a.dev.ev_states(a.qp))[3] == 0:
            break
    assert (await a.dev.ev_states(a.qp))[3] == 0, "probe did not bring EV 3 back"
    events = await a.dev.read_ev_events()
    assert any(e.ev_index == 3 and e.old == 1 and e.new == 0 for e in events), events


# ---- pytest entry points: one simulator build; the default tests share one run ------------

DEFAULT_TESTS = ["test_discovery", "test_write_lossless_8_paths",
                 "test_write_with_imm_both_directions", "test_write_with_imm_matches_model",
                 "test_ev_denied_by_controller"]


def run(testcases, tag):
    from sim.cocotb_runner import SIM_BUILD, run_cocotb

    run_cocotb(name="system_two_nic", elaborate=TwoNicTop, toplevel="two_nic",
               test_module="tests.system.test_two_nic", testcase=testcases,
               test_dir=SIM_BUILD / "system_two_nic" / tag)


def test_system():
    run(DEFAULT_TESTS, "default")


@pytest.mark.long
def test_system_faults():
    run(["test_write_one_percent_loss", "test_write_reordered", "test_path_down_then_up"],
        "faults")

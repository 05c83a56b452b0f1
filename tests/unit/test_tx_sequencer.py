"""hw/tx/sequencer.py ``Sequencer`` alone, 512 bits (a WQE is one beat),
against a memory that answers each WQE read 3 cycles after its request, any
number in flight: the two halves overlap, so the packets of different QPs
leave a packet every 3 cycles (the front half's LOAD and CHECK of the next
QP under the back half's SEGMENT and EV_VALUE, its TAKE under EMIT); a QP's
own next packet waits for its EMIT (7 cycles a packet on one QP, 3 and 4 in
turn over two); and with a WQE per packet, reading 4 WQEs ahead per QP
(the default at 512 bits) keeps up with that, where reading one ahead (12
cycles from one take of a QP to its next, at this memory) is the limit
below four QPs.
Every run also checks what was sent: each QP's PSNs in order from 0, its
packets in the order of its WQEs, the QPs served round robin."""

import pytest
from amaranth.sim import Simulator

from hw.tx.regs import tx_register_map
from hw.tx.sequencer import Sequencer

from .csrbus import csr_read, csr_write

NQ, EVS, MTU = 4, 2, 256
LATENCY = 3  # the memory's cycles from a WQE request to its beat


def send(num_qps, wqes_per_qp, length, read_ahead=None):
    """The (cycle, qpn, psn, last) of every ``sent`` record of ``num_qps``
    QPs, each given ``wqes_per_qp`` WRITEs of ``length`` bytes at once, the
    sequencer reading ``read_ahead`` WQEs ahead per QP (None: its default)."""
    dut = Sequencer(data_width=512, num_qps=NQ, evs_per_qp=EVS, max_mtu=MTU, inflight_depth=16,
                    wqe_read_ahead=read_ahead)
    rmap = tx_register_map(NQ, EVS)
    wqe = bytearray(64)
    wqe[0x20:0x24] = length.to_bytes(4, "little")
    packets = num_qps * wqes_per_qp * -(-length // MTU)
    sent = []

    async def memory(ctx):
        due = []  # per request in flight, the cycles to its beat
        ctx.set(dut.wqe_req.ready, 1)
        ctx.set(dut.wqe_data.payload.data, int.from_bytes(wqe, "little"))
        ctx.set(dut.wqe_data.payload.last, 1)
        while True:
            ctx.set(dut.wqe_data.valid, bool(due) and due[0] == 0)
            taken = bool(due) and due[0] == 0 and ctx.get(dut.wqe_data.ready)
            requested = ctx.get(dut.wqe_req.valid)
            await ctx.tick()
            due = [max(0, d - 1) for d in (due[1:] if taken else due)]
            if requested:
                due.append(LATENCY)

    async def bench(ctx):
        ctx.set(dut.ev.good, (1 << EVS) - 1)
        ctx.set(dut.ev.ready, 1)
        for port in (dut.hdr_desc, dut.pay_desc, dut.sent):
            ctx.set(port.ready, 1)
        while not await csr_read(ctx, dut.csr, rmap["status"].addr(), 3) & 1:
            pass
        for q in range(num_qps):
            for name, value in (("qp_sq_log2_size", 4), ("qp_ctrl", 1)):
                await csr_write(ctx, dut.csr, rmap[name].addr(q), value)
                await ctx.tick()
        for q in range(num_qps):
            await csr_write(ctx, dut.csr, rmap["qp_doorbell"].addr(q), wqes_per_qp)
            await ctx.tick()
        for cycle in range(40 * packets):
            if ctx.get(dut.sent.valid):
                p = ctx.get(dut.sent.payload)
                assert not p.op_err and not p.retx
                sent.append((cycle, p.qpn, p.psn, p.last))
                if len(sent) == packets:
                    break
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(memory, background=True)
    sim.add_testbench(bench)
    sim.run()
    assert len(sent) == packets
    per_wqe = -(-length // MTU)
    for q in range(num_qps):
        mine = [(psn, last) for _, qpn, psn, last in sent if qpn == q]
        assert mine == [(i, (i + 1) % per_wqe == 0) for i in range(wqes_per_qp * per_wqe)]
    return sent


def steady_gaps(sent, num_qps):
    """The cycles between consecutive packets, the first round and the last
    left out (the start, and the QPs running out one by one)."""
    cycles = [c for c, _, _, _ in sent]
    return [b - a for a, b in zip(cycles[:-1], cycles[1:], strict=True)][2 * num_qps:-2 * num_qps]


@pytest.mark.parametrize("num_qps", [3, 4])
def test_sequencer_overlaps_qps(num_qps):
    """Multi-packet WQEs (2 KiB, 8 packets at MTU 256) over three or four
    QPs: a packet every 3 cycles, the QPs in turn."""
    sent = send(num_qps, 2, 2048)
    gaps = steady_gaps(sent, num_qps)
    assert gaps and set(gaps) == {3}, gaps
    order = [qpn for _, qpn, _, _ in sent]
    assert all(order[i] != order[i + 1] for i in range(len(order) - 1))


def test_sequencer_one_and_two_qps():
    """A QP's own next packet goes through IDLE after its EMIT: 7 cycles a
    packet on one QP; over two, 3 and 4 in turn."""
    one = steady_gaps(send(1, 1, 2048), 1)
    assert one and set(one) == {7}, one
    two = steady_gaps(send(2, 2, 2048), 2)
    assert two and sorted(set(two)) == [3, 4], two
    assert all(a + b == 7 for a, b in zip(two[:-1], two[1:], strict=True)), two


def test_sequencer_wqe_per_packet():
    """64-byte WRITEs, a WQE each, 4 read ahead per QP: the sequencer's own
    rates, a packet every 3 cycles over four QPs and over three, 7 on one."""
    for num_qps in (4, 3):
        gaps = steady_gaps(send(num_qps, 12, 64), num_qps)
        assert gaps and set(gaps) == {3}, (num_qps, gaps)
    one = steady_gaps(send(1, 12, 64), 1)
    assert one and set(one) == {7}, one


def test_sequencer_wqe_per_packet_one_ahead():
    """The same with one WQE read ahead per QP: over four QPs still a packet
    every 3 cycles; over three, the read-ahead's 12 cycles from a take of a QP
    to its next are the limit (4 cycles a packet on average), and on one QP
    12."""
    four = steady_gaps(send(4, 12, 64, read_ahead=1), 4)
    assert four and set(four) == {3}, four
    three = steady_gaps(send(3, 12, 64, read_ahead=1), 3)
    assert sum(three) / len(three) == pytest.approx(4, abs=0.2), three
    one = steady_gaps(send(1, 12, 64, read_ahead=1), 1)
    assert one and set(one) == {12}, one

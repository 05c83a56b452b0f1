"""hw/tx/sequencer.py ``Sequencer`` alone, 512 bits (a WQE is one beat),
against a memory that answers each WQE read 3 cycles after its request, any
number in flight: the two halves overlap, so the packets leave a packet
every 3 cycles (the front half's LOAD and CHECK of the next packet under the
back half's SEGMENT and EV_VALUE, its TAKE under EMIT). Reading 4 WQEs
ahead per QP (the default at 512 bits) that holds on one QP too when each
packet ends its WQE (the next WQE taken as the packet before is emitted),
and over two QPs; a QP's packet after one that does not end its WQE waits
for that one's EMIT (7 cycles a packet on one QP). Reading one ahead, a
QP's next packet always waits for its EMIT (3 and 4 in turn over two QPs)
and, with a WQE per packet, the read-ahead (12 cycles from one take of a QP
to its next, at this memory) is the limit below four QPs.
Every run also checks what was sent: each QP's PSNs in order from 0, its
packets in the order of its WQEs, its EVs in turn and its packet counter;
and a window of 2 PSNs holds on one QP as on two, also with CSR writes to
another QP that delay the ring rows' takes and the PSN table's advances.
Four QPs keep their per-QP state in flip-flops, eight in RAM rows
(``RAM_QPS``)."""

import pytest
from amaranth.sim import Simulator

from hw.tx.regs import tx_register_map
from hw.tx.sequencer import Sequencer

from .csrbus import csr_read, csr_write

NQ, EVS, MTU = 4, 2, 256
LATENCY = 3  # the memory's cycles from a WQE request to its beat


def send(num_qps, wqes_per_qp, length, read_ahead=None, cwnd=None, nq=NQ, outages=(),
         noise=None):
    """The (cycle, qpn, psn, last) of every ``sent`` record of ``num_qps``
    QPs, each given ``wqes_per_qp`` WRITEs of ``length`` bytes at once, the
    sequencer reading ``read_ahead`` WQEs ahead per QP (None: its default).
    With ``cwnd`` (and no acks) each QP sends that many packets and no more.
    ``outages``: (first cycle, cycles) spans with no GOOD EV, each ended by
    a link coming back (``link_rose``), which unparks the QPs parked for
    want of one with their WQEs kept. ``noise`` (a phase, 0..9): every 5th
    cycle a write to the last QP (not sending), a doorbell or a qp_next_psn
    in turn, which the ring rows' takes and the PSN table's advances wait
    for.
    Each QP's packets are checked: PSNs in order from 0, WQE indices and
    packet ends in order, EVs in turn (both GOOD: the next after the
    cursor), and its ``qp_tx_packets`` counter at the end."""
    dut = Sequencer(data_width=512, num_qps=nq, evs_per_qp=EVS, max_mtu=MTU, inflight_depth=16,
                    wqe_read_ahead=read_ahead)
    rmap = tx_register_map(nq, EVS)
    wqe = bytearray(64)
    wqe[0x20:0x24] = length.to_bytes(4, "little")
    per_wqe = -(-length // MTU)
    per_qp = wqes_per_qp * per_wqe if cwnd is None else cwnd
    packets = num_qps * per_qp
    sent = []
    counted = []

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
        settings = [("qp_sq_log2_size", 4), ("qp_ctrl", 1)]
        if cwnd is not None:
            settings.insert(0, ("qp_cwnd", cwnd))
        for q in range(num_qps):
            for name, value in settings:
                await csr_write(ctx, dut.csr, rmap[name].addr(q), value)
                await ctx.tick()
        for q in range(num_qps):
            await csr_write(ctx, dut.csr, rmap["qp_doorbell"].addr(q), wqes_per_qp)
            await ctx.tick()
        for cycle in range(40 * packets + 100):
            down = any(first <= cycle < first + span for first, span in outages)
            ctx.set(dut.ev.good, 0 if down else (1 << EVS) - 1)
            ctx.set(dut.ev.link_rose, any(cycle == first + span for first, span in outages))
            if ctx.get(dut.sent.valid):
                p = ctx.get(dut.sent.payload)
                assert not p.op_err and not p.retx
                sent.append((cycle, p.qpn, p.psn, p.last, p.wqe_index, p.ev_index))
                if len(sent) == packets and cwnd is None:
                    break
            if noise is not None and (cycle + noise) % 5 == 0:  # one cycle, as csr_write
                name = ("qp_doorbell", "qp_next_psn")[(cycle + noise) // 5 % 2]
                ctx.set(dut.csr.addr, rmap[name].addr(nq - 1))
                ctx.set(dut.csr.w_data, cycle)
                ctx.set(dut.csr.w_stb, 1)
            await ctx.tick()
            ctx.set(dut.csr.w_stb, 0)
        for q in range(num_qps):
            row = await csr_read(ctx, dut.csr, rmap["qp_tx_packets"].addr(q), 3)
            counted.append(row)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(memory, background=True)
    sim.add_testbench(bench)
    sim.run()
    assert len(sent) == packets
    for q in range(num_qps):
        mine = [(psn, last, wqe) for _, qpn, psn, last, wqe, _ in sent if qpn == q]
        assert mine == [(i, (i + 1) % per_wqe == 0, i // per_wqe) for i in range(per_qp)]
        evs = [ev for _, qpn, _, _, _, ev in sent if qpn == q]
        if not outages:
            assert evs == [i % EVS for i in range(per_qp)], (q, evs)
        assert counted[q] == per_qp, (q, counted)
    return [(cycle, qpn, psn, last) for cycle, qpn, psn, last, _, _ in sent]


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
    """Multi-packet WQEs: a QP's packet after one that is not its WQE's last
    goes through IDLE after that one's EMIT (the WQE's row is written
    there), 7 cycles a packet on one QP, and its next WQE's first 3 cycles
    after its last; over two QPs a packet every 3
    cycles, each QP served again in the cycle the back half emits its packet
    (4 WQEs read ahead); reading one ahead, 3 and 4 in turn."""
    one = steady_gaps(send(1, 3, 1024), 1)  # 4 packets a WQE
    assert one and sorted(set(one)) == [3, 7], one  # 3 from a WQE's last to the next
    two = steady_gaps(send(2, 2, 2048), 2)
    assert two and set(two) == {3}, two
    two = steady_gaps(send(2, 2, 2048, read_ahead=1), 2)
    assert two and sorted(set(two)) == [3, 4], two
    assert all(a + b == 7 for a, b in zip(two[:-1], two[1:], strict=True)), two


@pytest.mark.parametrize("nq", [NQ, 8])
def test_sequencer_wqe_per_packet(nq):
    """64-byte WRITEs, a WQE each, 4 read ahead per QP: a packet every 3
    cycles over four QPs, three, two and one (on one QP each TAKE takes the
    next WQE as the packet before it is emitted, its PSN, EV and ring index
    forwarded)."""
    for num_qps in (4, 3, 2, 1):
        gaps = steady_gaps(send(num_qps, 12, 64, nq=nq), num_qps)
        assert gaps and set(gaps) == {3}, (num_qps, gaps)


@pytest.mark.parametrize("noise", range(10))
def test_sequencer_chain_meets_writes(noise):
    """One QP at 8 QPs (RAM rows) with a CSR write to another QP every 5th
    cycle, at each phase: a take of the ring rows that meets a doorbell
    lands a cycle late (the chain's ring index is forwarded), and an advance
    of the PSN table that meets a qp_next_psn write too (``cur_wait``,
    counted in the window: with cwnd 2, 2 PSNs and no more)."""
    send(1, 12, 64, nq=8, noise=noise)
    send(1, 12, 64, nq=8, cwnd=2, noise=noise)
    send(2, 12, 64, nq=8, cwnd=2, noise=noise)


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


@pytest.mark.parametrize("num_qps,nq", [(1, NQ), (2, NQ), (1, 8)])
def test_sequencer_window_counts_the_back_half(num_qps, nq):
    """A window of 2 PSNs (cwnd) and no acks: each QP sends 2 packets and no
    third, also on one QP, where the next packet's window is checked while
    the back half still holds the one before (not yet in the PSN table)."""
    send(num_qps, 8, 64, cwnd=2, nq=nq)


@pytest.mark.parametrize("first", range(20, 29))
def test_sequencer_park_under_a_chain(first):
    """One QP sending a WQE per packet, its next WQE taken as the packet
    before it is emitted, and no GOOD EV for 12 cycles from ``first`` (each
    of the 9 cycles of a stretch of packets): the packet in SEGMENT then
    parks its QP with its WQE kept (a chained TAKE must not have taken the
    next, nor the packet's EMIT before it cleared the WQE's active flag),
    and after the outage every WQE is sent once, in order."""
    send(1, 12, 64, outages=[(first, 12)])

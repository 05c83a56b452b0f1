"""The host driver (host_driver/driver.py) against the model NIC
(sim/nicmodel/) on the golden model's transport and fabric, through
sim/system/model_harness.py: the scenarios of tests/system/test_two_nic.py,
written against the same driver API, plus outage and bad-input cases.

Pure Python: every test runs in well under a second of model work.
"""

from __future__ import annotations

import asyncio

import pytest

from host_driver.driver import Completion, DriverError, QpState, WrOpcode
from hw.nic.csr import DEVICE_INFO_TYPE_ID, NIC_VERSION
from hw.nic.ev_load import EV_GEN_VERSION
from hw.nic.plane_status import PLANES_TYPE_ID
from hw.reliability.registers import VERSION as REL_VERSION
from hw.rx.regs import RX_VERSION
from sim.model.packet import data_wire_len
from sim.nicmodel import ModelFabric, ModelNic
from sim.system import requester_cases
from sim.system.model_harness import BUILD_IDS, ModelSystem
from sim.system.scoreboard import model_completions, normalise_rtl
from sim.system.top import NIC_PARAMS

RDMA_WRITE_LAST_WITH_IMM, RDMA_WRITE_ONLY_WITH_IMM = 0x09, 0x0B


def run(coro):
    return asyncio.run(coro)


async def transfer(tb, src, sizes, *, opcode=WrOpcode.WRITE, qp=None, peer_qp=None,
                   base=0, timeout_cycles=2_000_000):
    """Post WRITEs of ``sizes`` bytes from NIC ``src`` into the peer's MR, back
    to back, flow-controlled by the send queue (tests/system/test_two_nic.py's
    helper). Returns (posted, payload, early)."""
    a, b = tb.ends[src], tb.ends[1 - src]
    qp = qp or a.qp
    payload = tb.random_bytes(sum(sizes))
    a.dev.mem.write(a.send_buf + base, payload)
    posted, early, offset = [], [], base
    for n in sizes:
        if qp.outstanding >= qp.sq_size:
            early += await qp.send_cq.wait(1, timeout_cycles=timeout_cycles)
        imm = 0xA5000000 | len(posted)
        wr_id = await qp.post_send(opcode, local_addr=a.send_buf + offset, length=n,
                                   remote_addr=b.recv_buf + offset, rkey=b.mr.rkey, imm=imm)
        posted.append((wr_id, n, imm))
        offset += n
    return posted, payload, early


async def complete_all(qp, posted, already=(), timeout_cycles=4_000_000):
    cqes = list(already)
    cqes += await qp.send_cq.wait(len(posted) - len(cqes), timeout_cycles=timeout_cycles)
    return cqes


def check_memory(tb, dst, payload, base=0):
    end = tb.ends[dst]
    got = end.dev.mem.read(end.recv_buf + base, len(payload))
    if got != payload:
        first = next(i for i in range(len(payload)) if got[i] != payload[i])
        raise AssertionError(f"NIC {dst} memory differs from byte {first} of {len(payload)}")


async def connected(seed, **kw):
    tb = ModelSystem(seed=seed)
    await tb.init()
    await tb.connect(sq_log2=4, **kw)
    return tb


# ---- discovery -------------------------------------------------------------------------------


def test_discovery():
    """The blocks, their order and the build parameters the RTL test expects."""
    async def body():
        tb = ModelSystem()
        await tb.init()
        for i, end in enumerate(tb.ends):
            dev = end.dev
            # the planes block last: the NICs have planes
            assert [(b.type_id, b.version) for b in dev.blocks] == [
                (DEVICE_INFO_TYPE_ID, 1), (2, 1), (3, RX_VERSION), (4, REL_VERSION),
                (5, EV_GEN_VERSION), (PLANES_TYPE_ID, 1)]
            block_size = dev.params["block_size"]
            assert [b.base for b in dev.blocks] == [k * block_size for k in range(6)]
            assert dev.params["nic_version"] == NIC_VERSION
            assert dev.params["build_id"] == BUILD_IDS[i]
            for name in ("data_width", "num_qps", "evs_per_qp", "sack_bits", "max_mtu",
                         "mpr_max", "num_mrs", "window", "clk_freq_hz"):
                assert dev.params[name] == NIC_PARAMS[name], name
            assert await dev.tx.read("num_qps") == NIC_PARAMS["num_qps"]
            assert await dev.tx.read("evs_per_qp") == NIC_PARAMS["evs_per_qp"]
            assert await dev.rel.read_fields("params") == {
                "num_qps": NIC_PARAMS["num_qps"], "evs_per_qp": NIC_PARAMS["evs_per_qp"],
                "window": NIC_PARAMS["window"]}
            assert (await dev.rx.read_fields("PARAMS"))["mrs"] == NIC_PARAMS["num_mrs"]
            assert await dev.rel.read("timeout_unit") == round(
                1.024e-6 * NIC_PARAMS["clk_freq_hz"])
            await dev.info.write("scratch", 0x1234_0000 + i)
        for i, end in enumerate(tb.ends):
            assert await end.dev.info.read("scratch") == 0x1234_0000 + i
        # the addresses set_address wrote are where every block keeps them
        nic = tb.ends[1].nic
        assert nic.reg("rx", "OWN_IP") == nic.reg("tx", "src_ip") == 0x0A000002
    run(body())


def test_planes_block_required_and_read():
    """A NIC whose device info reports planes must have the planes block: the
    driver refuses one without it, saying what is missing. With it, the model's
    block reads every link up, no plane event and nothing counted per plane."""
    async def body():
        tb = ModelSystem()
        tb.ends[0].nic.block_order = tb.ends[0].nic.block_order[:-1]  # the block hidden
        with pytest.raises(DriverError, match="says 4 planes but the planes block is missing"):
            await tb.ends[0].dev.init()
        dev = tb.ends[1].dev
        await dev.init()
        assert await dev.read_plane_events() == []
        assert await dev.plane_counters() == [
            {"up": 1, "tx_frames": 0, "rx_frames": 0, "link_drops": 0}] * 4
    run(body())


def test_model_nic_block_layout_is_nic_core():
    """Window size and block order come from NicCore's own rule (its planes
    block last, with planes)."""
    from hw.nic.core import NicCore

    nic = ModelNic(NIC_PARAMS, ModelFabric())
    core = NicCore(**NIC_PARAMS, build_id=0)
    assert 1 << nic.block_bits == core.block_size
    assert nic.block_order == core.block_order
    assert [nic.read32(core.block_base(name)) >> 16 for name in core.block_order] == [
        1, 2, 3, 4, 5, PLANES_TYPE_ID]
    n = len(core.block_order)
    assert nic.read32((n - 1) << nic.block_bits | 4) == 0  # the last block's next
    assert nic.read32(n << nic.block_bits) == 0  # outside every window


def test_bad_parameters():
    fabric = ModelFabric()
    with pytest.raises(ValueError, match="num_qps must be a power of two"):
        ModelNic({**NIC_PARAMS, "num_qps": 3}, fabric)
    with pytest.raises(ValueError, match=r"missing \['window'\]"):
        ModelNic({k: v for k, v in NIC_PARAMS.items() if k != "window"}, fabric)
    with pytest.raises(ValueError, match=r"unknown \['bogus'\]"):
        ModelNic({**NIC_PARAMS, "bogus": 1}, fabric)
    with pytest.raises(ValueError, match="window .* must not exceed mpr_max"):
        ModelNic({**NIC_PARAMS, "mpr_max": 128, "window": 256, "inflight_depth": 256}, fabric)
    with pytest.raises(ValueError, match="num_paths"):
        ModelFabric(num_paths=0)
    with pytest.raises(ValueError, match="not a 32-bit value"):
        ModelNic(NIC_PARAMS, fabric).write32(0x40, 1 << 32)


def test_peer_must_be_on_the_fabric():
    async def body():
        tb = ModelSystem()
        await tb.init()
        dev = tb.ends[0].dev
        qp = await dev.create_qp(dev.alloc_pd(), dev.create_cq(4), dev.create_cq(4), sq_log2=4)
        await qp.to_init()
        with pytest.raises(ValueError, match="QP_PEER_IP 0x0a000063 is no NIC"):
            await qp.to_rtr(dest_qpn=0, peer_mac="02:00:00:00:00:63", peer_ip="10.0.0.99")
    run(body())


def test_a_chosen_qpn():
    """create_qp takes a free QP number of the caller's choosing, and refuses a
    used one or one outside the NIC's table, saying which."""
    async def body():
        tb = ModelSystem()
        await tb.init()
        dev = tb.ends[0].dev
        pd, top = dev.alloc_pd(), dev.params["num_qps"] - 1

        def cqs():
            return dev.create_cq(4), dev.create_cq(4)

        qp = await dev.create_qp(pd, *cqs(), sq_log2=4, qpn=top)
        assert qp.qpn == top
        assert (await dev.create_qp(pd, *cqs(), sq_log2=4)).qpn == 0
        with pytest.raises(DriverError, match=f"QP {top} is in use"):
            await dev.create_qp(pd, *cqs(), sq_log2=4, qpn=top)
        with pytest.raises(ValueError, match=rf"qpn must be in 0\.\.{top} \(num_qps\)"):
            await dev.create_qp(pd, *cqs(), sq_log2=4, qpn=top + 1)
    run(body())


# ---- data transfer ---------------------------------------------------------------------------


def test_write_lossless_8_paths():
    """1 MiB of WRITEs (16 x 64 KiB) NIC 0 -> NIC 1 over 8 lossless paths:
    byte exact, SUCCESS in order, sprayed evenly over all 8 paths, nothing
    retransmitted, no receive completion for a plain WRITE."""
    async def body():
        tb = await connected(11)
        sizes = [64 * 1024] * 16
        start = tb.now_cycles
        posted, payload, early = await transfer(tb, 0, sizes)
        cqes = await complete_all(tb.ends[0].qp, posted, early)
        cycles = tb.now_cycles - start
        assert [(c.wr_id, c.status, c.byte_len, c.opcode) for c in cqes] == [
            (w, Completion.SUCCESS, n, WrOpcode.WRITE) for w, n, _ in posted]
        assert all(c.qpn == tb.ends[0].qp.qpn for c in cqes)
        check_memory(tb, 1, payload)
        packets = sum((n + 1023) // 1024 for n in sizes)
        carried = [p.carried for p in tb.fabric.directions[0].paths]
        assert carried == [packets // 8] * 8  # round robin over 8 GOOD EVs
        c0, c1 = await tb.ends[0].dev.counters(), await tb.ends[1].dev.counters()
        assert c0["rel.retx_timeout"] == c0["rel.retx_sack"] == c0["rel.retx_nak"] == 0, c0
        assert c1["rx.placed"] == packets and c1["rx.duplicate"] == 0, c1
        assert c0["rel.cqes"] == len(sizes)
        assert await tb.ends[0].dev.tx.read("qp_consumer", 0) == len(sizes)
        assert await tb.ends[0].dev.tx.read("qp_tx_packets", 0) == packets
        assert await tb.ends[1].qp.recv_cq.poll() == []
        # at the line rate of data_width bits per cycle, with per-packet
        # headers, the transfer takes at least as long as the wire needs
        wire_bits = packets * (1024 + 70 + 4 + 24) * 8
        assert wire_bits / 64 <= cycles < 1.1 * wire_bits / 64
    run(body())


def test_write_over_ipv6_takes_its_longer_frames():
    """Model NICs with IPv6 addresses, the QP bound over IPv6: 256 KiB byte
    exact; the model's QP knows its family, and the transfer takes the wire
    time of frames 20 bytes longer than over IPv4 (its data bytes counted so)."""
    async def body():
        tb = await connected(13, ipv6=True)
        qp = tb.ends[0].nic.qps[tb.ends[0].qp.qpn]
        assert qp.cfg.ipv6 and tb.ends[1].nic.qps[tb.ends[1].qp.qpn].cfg.ipv6
        sizes = [64 * 1024] * 4
        start = tb.now_cycles
        posted, payload, early = await transfer(tb, 0, sizes)
        await complete_all(tb.ends[0].qp, posted, early)
        cycles = tb.now_cycles - start
        check_memory(tb, 1, payload)
        packets = sum((n + 1023) // 1024 for n in sizes)
        assert qp.stats["tx_bytes"] == packets * data_wire_len(1024, False, ipv6=True)
        assert data_wire_len(1024, False, ipv6=True) == data_wire_len(1024, False) + 20
        wire_bits = packets * (1024 + 70 + 20 + 4 + 24) * 8
        assert wire_bits / 64 <= cycles < 1.1 * wire_bits / 64
    run(body())


def test_write_with_imm_both_directions():
    """WRITE_WITH_IMM both ways at once (NIC 1 starts at the PSN wrap): one
    receive CQE per message (MSN, length, immediate, QPN, opcode), one SUCCESS
    send CQE per WQE, both memories byte exact."""
    async def body():
        tb = await connected(12)
        sizes = [[1, 100, 1024, 1025, 3000, 4096 + 7, 20000, 64],
                 [8, 2048, 513, 9999, 1023, 1, 4096, 300]]
        runs = [await transfer(tb, src, sizes[src], opcode=WrOpcode.WRITE_WITH_IMM)
                for src in (0, 1)]
        for src in (0, 1):
            posted, payload, early = runs[src]
            sender, receiver = tb.ends[src], tb.ends[1 - src]
            cqes = await complete_all(sender.qp, posted, early)
            assert [(c.wr_id, c.status, c.byte_len, c.imm, c.opcode) for c in cqes] == [
                (w, Completion.SUCCESS, n, imm, WrOpcode.WRITE_WITH_IMM)
                for w, n, imm in posted]
            recv = await receiver.qp.recv_cq.wait(len(posted), timeout_cycles=200_000)
            assert [(c.wr_id, c.byte_len, c.imm, c.qpn, c.status) for c in recv] == [
                (msn, n, imm, receiver.qp.qpn, 0) for msn, (_, n, imm) in enumerate(posted, 1)]
            assert [c.opcode for c in recv] == [
                RDMA_WRITE_ONLY_WITH_IMM if n <= 1024 else RDMA_WRITE_LAST_WITH_IMM
                for _, n, _ in posted]
            check_memory(tb, 1 - src, payload)
        # the driver wrote its receive consumer index back for RX's full check
        assert tb.ends[1].nic.rx_reg("QP_CQ_CONS", 0) == len(sizes[0])
    run(body())


def test_receive_msn_counts_every_message():
    """A receive CQE's wr_id is the MSN: plain WRITEs between WRITE_WITH_IMMs
    count as messages (RX's rule, not the golden model's receive-WR count)."""
    async def body():
        tb = await connected(18)
        a, b = tb.ends
        ops = [WrOpcode.WRITE, WrOpcode.WRITE_WITH_IMM, WrOpcode.WRITE, WrOpcode.WRITE,
               WrOpcode.WRITE_WITH_IMM]
        for i, op in enumerate(ops):
            await a.qp.post_send(op, local_addr=a.send_buf, length=2000,
                                 remote_addr=b.recv_buf + 2000 * i, rkey=b.mr.rkey, imm=i)
        await a.qp.send_cq.wait(len(ops))
        recv = await b.qp.recv_cq.wait(2)
        assert [(c.wr_id, c.imm) for c in recv] == [(2, 1), (5, 4)]
        assert await b.qp.recv_cq.poll() == []
    run(body())


def test_write_one_percent_loss():
    """512 KiB each way with 1 % loss on every path of both directions (data
    and ACKs): timeouts repair it (SACK detection is off: sack_threshold 0),
    memory is exact, retransmissions are counted."""
    async def body():
        tb = await connected(13, timeout=9)
        tb.fabric.set_loss(0.01)
        runs = [await transfer(tb, src, [32 * 1024] * 16) for src in (0, 1)]
        for src in (0, 1):
            posted, payload, early = runs[src]
            cqes = await complete_all(tb.ends[src].qp, posted, early)
            assert [(c.wr_id, c.status) for c in cqes] == [(w, 0) for w, _, _ in posted]
            check_memory(tb, 1 - src, payload)
        dropped = sum(p.dropped for p in tb.fabric.paths())
        assert dropped > 0
        counters = [await end.dev.counters() for end in tb.ends]
        for c in counters:
            assert c["rel.retx_timeout"] >= 1 and c["rel.timeouts"] >= 1, c
            assert c["rel.retx_sack"] == 0
        # every lost data frame was placed once, in the end
        assert counters[1]["rx.placed"] == counters[0]["rx.placed"] == 512
        # a PSN declared lost is sent again unless an ACK covers it first
        for end, c in zip(tb.ends, counters, strict=True):
            retx = await end.dev.tx.read("qp_retx_packets", 0)
            assert 1 <= retx <= c["rel.retx_timeout"], (retx, c)
    run(body())


def test_sack_threshold_retransmits_holes_without_timeout():
    """With sack_threshold 3 a lost data packet is resent on SACK evidence
    (reliability's dup-ACK count), on another EV, before any timeout."""
    async def body():
        tb = await connected(19, timeout=14, sack_threshold=3)
        drops = []

        def drop_psn_once(pkt, now):
            if pkt.kind == 0 and pkt.psn == 0x10 + 40 and not drops:
                drops.append(pkt.ev)
                return True
            return False
        for p in tb.fabric.paths(0):
            p.drop_fn = drop_psn_once
        tb.fabric.keep_log = True
        model_qp = tb.ends[0].nic.qps[0]
        model_qp.tx_log = []  # (time, psn, ev, retransmission)
        posted, payload, early = await transfer(tb, 0, [64 * 1024])
        cqes = await complete_all(tb.ends[0].qp, posted, early)
        assert [c.status for c in cqes] == [0]
        check_memory(tb, 1, payload)
        c = await tb.ends[0].dev.counters()
        assert (c["rel.retx_sack"], c["rel.retx_timeout"], c["rel.timeouts"]) == (1, 0, 0), c
        assert await tb.ends[0].dev.tx.read("qp_retx_packets", 0) == 1
        log = tb.fabric.directions[0].log
        assert len(log) == 65 and [e[1] for e in log if e[3]] == drops
        resent = [ev for _, psn, ev, retx in model_qp.tx_log if retx]
        assert len(resent) == 1 and resent[0] != drops[0]  # on another EV
    run(body())


def test_trimmed_packets_are_nacked_and_resent():
    """5 % of the data frames NIC 0 -> NIC 1 trimmed at random: RX counts each
    and answers NAK TRIMMED (TRIM_NACK on), reliability resends each at once
    (reason NAK), no EV blamed; memory exact. A resent copy trimmed again is
    not resent by its NAK (one fast retransmit per PSN between timeouts,
    docs/protocol.md): that NAK counts in naks_trim_repeat and the timer
    resends the PSN, so retx_nak == trimmed with no timeout exactly when no
    resent copy was trimmed."""
    async def body():
        tb = await connected(26, timeout=14)
        tb.fabric.set_trim(prob=0.05, direction=0)
        posted, payload, early = await transfer(tb, 0, [16 * 1024] * 16)
        cqes = await complete_all(tb.ends[0].qp, posted, early)
        assert [c.status for c in cqes] == [0] * 16
        check_memory(tb, 1, payload)
        trimmed = sum(p.trimmed for p in tb.fabric.paths(0))
        c0, c1 = await tb.ends[0].dev.counters(), await tb.ends[1].dev.counters()
        assert trimmed > 0 and c1["rx.trimmed"] == trimmed == c1["rx.naks_sent"], c1
        assert c0["rel.naks_trimmed"] == trimmed, c0
        assert c0["rel.retx_nak"] + c0["rel.naks_trim_repeat"] == trimmed, c0
        assert (c0["rel.timeouts"] == 0) == (c0["rel.naks_trim_repeat"] == 0), c0
        assert c0["rel.ev_to_bad"] == 0, c0
        assert c1["rx.placed"] == 256
        assert await tb.ends[0].dev.ev_states(tb.ends[0].qp) == [0] * 8
    run(body())


def test_scheduled_path_fault():
    """schedule_path takes path 2 down and up at model times (fault_log says
    when); frames on it meanwhile are dropped; the transfer completes exact."""
    async def body():
        tb = await connected(27, timeout=9)
        t0 = tb.now_ns
        tb.fabric.schedule_path(2, t0 + 20_000, t0 + 400_000, direction=0)
        posted, payload, early = await transfer(tb, 0, [32 * 1024] * 8)
        cqes = await complete_all(tb.ends[0].qp, posted, early)
        assert [c.status for c in cqes] == [0] * 8
        check_memory(tb, 1, payload)
        assert [(t, e.up) for t, e in tb.fabric.fault_log] == [
            (t0 + 20_000, False), (t0 + 400_000, True)]
        assert tb.fabric.counters()["nic0->nic1"][2]["dropped"] > 0
        assert tb.fabric.directions[1].paths[2].dropped == 0
        with pytest.raises(ValueError, match="up_ns"):
            tb.fabric.schedule_path(1, 10.0, 5.0)
        with pytest.raises(ValueError, match="path must be in 0..7"):
            tb.fabric.set_path_up(8, False)
        with pytest.raises(ValueError, match="probability"):
            tb.fabric.set_loss(1.5)
    run(body())


def test_queue_overflow_trims():
    """Paths at 1/16 of the line rate with 4 KiB queues (8 paths carry half
    of what the NIC sends): the queues overflow and the links trim (UET
    style); the NAKs bring every packet in, exact."""
    async def body():
        tb = await connected(28, timeout=14)
        line = tb.ends[0].nic.params["data_width"] * tb.ends[0].nic.params["clk_freq_hz"] / 1e9
        tb.fabric.set_rate(line / 16, queue_bytes=4096, direction=0)
        tb.fabric.set_trim(on_overflow=True, direction=0)
        posted, payload, early = await transfer(tb, 0, [64 * 1024] * 4)
        cqes = await complete_all(tb.ends[0].qp, posted, early)
        assert [c.status for c in cqes] == [0] * 4
        check_memory(tb, 1, payload)
        counters = tb.fabric.counters()["nic0->nic1"]
        assert sum(p["trimmed"] for p in counters) > 0
        assert max(p["max_queue_bytes"] for p in counters) <= 4096
        c1 = await tb.ends[1].dev.counters()
        assert c1["rx.trimmed"] == sum(p["trimmed"] for p in counters)
    run(body())


def test_write_with_imm_matches_golden_model():
    """12 x 5000-byte WRITE_WITH_IMM (wr_id i, immediate i) over 8 lossless
    paths: send and receive completions equal the golden model's
    (sim/system/scoreboard.py) field for field and in order."""
    async def body():
        tb = await connected(14)
        messages, size = 12, 5000
        a, b = tb.ends
        payload = tb.random_bytes(messages * size)
        a.dev.mem.write(a.send_buf, payload)
        for i in range(messages):
            await a.qp.post_send(WrOpcode.WRITE_WITH_IMM, local_addr=a.send_buf + i * size,
                                 length=size, remote_addr=b.recv_buf + i * size,
                                 rkey=b.mr.rkey, imm=i, wr_id=i)
        send = await a.qp.send_cq.wait(messages)
        recv = await b.qp.recv_cq.wait(messages)
        expected = model_completions(messages=messages, size=size, imm=True)
        assert len(expected["send"]) == len(expected["recv"]) == messages
        assert normalise_rtl(send, recv, imm=True) == expected
        check_memory(tb, 1, payload)
    run(body())


def test_two_qps_share_the_link():
    """Two QP pairs NIC 0 -> NIC 1 at once: each completes its own WQEs in
    order into its own region of the peer's buffer; the scheduler alternates
    between them, so both finish within one message of each other."""
    async def body():
        tb = ModelSystem(seed=20)
        await tb.init()
        pairs = await tb.connect_qps(2, sq_log2=4)
        a = tb.ends[0]
        runs = [await transfer(tb, 0, [16 * 1024] * 8, qp=qa, base=j * (1 << 19))
                for j, (qa, _) in enumerate(pairs)]
        finish = []
        for j, (qa, _) in enumerate(pairs):
            posted, payload, early = runs[j]
            cqes = await complete_all(qa, posted, early)
            assert [(c.wr_id, c.status, c.qpn) for c in cqes] == [
                (w, 0, qa.qpn) for w, _, _ in posted]
            check_memory(tb, 1, payload, base=j * (1 << 19))
            finish.append(await a.dev.tx.read("qp_tx_packets", qa.qpn))
        assert finish == [128, 128]
    run(body())


# ---- controller, faults, errors ---------------------------------------------------------------


def test_ev_denied_by_controller():
    """EV 5 DENIED by the controller: no data frame of the next 128 KiB uses it
    (the event queue reports GOOD -> DENIED); set GOOD again, it is used again."""
    async def body():
        tb = await connected(15)
        tb.fabric.keep_log = True
        a = tb.ends[0]
        denied_ev = a.qp.evs.values[5]
        await a.dev.set_ev_state(a.qp, 5, denied=True)
        assert (await a.dev.ev_states(a.qp))[5] == 2
        events = await a.dev.read_ev_events()
        assert [(e.qpn, e.ev_index, e.old, e.new) for e in events] == [(a.qp.qpn, 5, 0, 2)]
        mark = len(tb.fabric.directions[0].log)
        posted, payload, early = await transfer(tb, 0, [16 * 1024] * 8)
        await complete_all(a.qp, posted, early)
        check_memory(tb, 1, payload)
        evs_used = [ev for _, ev, _, _ in tb.fabric.directions[0].log[mark:]]
        assert len(evs_used) == 128 and denied_ev not in evs_used
        assert len(set(evs_used)) == 7
        await a.dev.set_ev_state(a.qp, 5, denied=False)
        mark = len(tb.fabric.directions[0].log)
        posted, payload, early = await transfer(tb, 0, [16 * 1024] * 8)
        await complete_all(a.qp, posted, early)
        assert denied_ev in [ev for _, ev, _, _ in tb.fabric.directions[0].log[mark:]]
    run(body())


def test_path_down_then_up():
    """Path 3 of NIC 0 -> NIC 1 goes down: timeouts make EV 3 ASSUMED_BAD (an
    EV event), the transfer completes on the other paths; once the path is
    up, a probe brings EV 3 back to GOOD."""
    async def body():
        tb = await connected(16, timeout=9, probe_period=4000)
        a = tb.ends[0]
        tb.fabric.set_path_up(3, False, direction=0)
        posted, payload, early = await transfer(tb, 0, [32 * 1024] * 8)
        await complete_all(a.qp, posted, early)
        check_memory(tb, 1, payload)
        events = await a.dev.read_ev_events()
        assert any(e.ev_index == 3 and e.old == 0 and e.new == 1 for e in events), events
        assert (await a.dev.ev_states(a.qp))[3] == 1
        assert tb.fabric.directions[0].paths[3].dropped > 0
        c = await a.dev.counters()
        assert c["rel.ev_to_bad"] >= 1 and c["rel.probes_sent"] >= 1
        tb.fabric.set_path_up(3, True, direction=0)
        for _ in range(100):
            await a.dev.transport.idle(1000)
            if (await a.dev.ev_states(a.qp))[3] == 0:
                break
        assert (await a.dev.ev_states(a.qp))[3] == 0, "probe did not bring EV 3 back"
        events = await a.dev.read_ev_events()
        back = [e for e in events if e.ev_index == 3 and e.old == 1 and e.new == 0]
        assert len(back) == 1, events
        # its round trip: the model EV's, in whole ns, and at least both ways of
        # the 400 ns path; no other event has one
        ev3 = a.nic.ev_tables[a.qp.qpn].evs[3]
        assert back[0].rtt_ns == round(ev3.probe_rtt_ns) > 2 * 400, (back, ev3.probe_rtt_ns)
        assert [e for e in events if e.rtt_ns is not None] == back
        assert (await a.dev.counters())["rel.ev_to_good"] == 1
    run(body())


def test_srv6_routes_on_the_usids_around_a_failed_path():
    """tests/system/test_ev_formats.py's SRv6 case on model NICs (64-bit EV
    entries, NIC_PARAMS) and the model fabric routing on the uSIDs: each EV's
    packets take the spine its first uSID names (path 3's drops are EV 3's
    only), EV 3 goes ASSUMED_BAD, the transfer completes byte exact, and an
    SRv6 probe brings EV 3 back. NIC 1's EVs are GENERATED (the spines' uSIDs
    placed first in the list), NIC 0's EXPLICIT; they read back whole (their
    64 bits staged through ev_value_hi)."""
    from host_driver.driver import EvProfile
    from sim.fabric.routing import SPINE_USID_BASE
    from sim.system.pairs import srv6_evs

    async def body():
        tb = ModelSystem(seed=17, routing="srv6")
        await tb.init()
        evs = [srv6_evs(1, 8), srv6_evs(0, 8)]
        generated = EvProfile.generated(min_ev=SPINE_USID_BASE, max_ev=SPINE_USID_BASE + 7,
                                        count=8, ev_format="srv6",
                                        template=evs[1][0] & ((1 << 48) - 1))
        await tb.connect_qps(1, sq_log2=4, timeout=9, probe_period=4000, ipv6=True,
                             sack_threshold=1,
                             evs=[EvProfile.explicit(evs[0], ev_format="srv6"), generated])
        for end, qp in zip(tb.ends, (tb.ends[0].qps[0], tb.ends[1].qps[0]), strict=True):
            end.qp = qp
        a = tb.ends[0]
        assert list((await a.qp.query()).evs) == [(v, 0) for v in evs[0]]
        assert list(tb.ends[1].qp.evs.values) == evs[1] == list(generated.values)
        tb.fabric.set_path_up(3, False, direction=0)
        posted, payload, early = await transfer(tb, 0, [16 * 1024] * 4)
        await complete_all(a.qp, posted, early)
        check_memory(tb, 1, payload)
        assert (await a.dev.ev_states(a.qp))[3] == 1
        paths = tb.fabric.directions[0].paths
        assert paths[3].dropped > 0 and all(p.dropped == 0 for k, p in enumerate(paths) if k != 3)
        tb.fabric.set_path_up(3, True, direction=0)
        for _ in range(100):
            await a.dev.transport.idle(1000)
            if (await a.dev.ev_states(a.qp))[3] == 0:
                break
        assert (await a.dev.ev_states(a.qp))[3] == 0, "no probe brought EV 3 back"
    run(body())


def test_total_outage_retry_exceeded_then_flushed():
    """Every path of NIC 0 -> NIC 1 down with 4 WQEs posted: after
    linear_cnt + exp_cnt retries the QP goes to ERROR; the oldest WQE completes
    RETRY_EXCEEDED, the others FLUSHED (byte_len 0); nothing is written to the
    peer afterwards, even once the paths are back."""
    async def body():
        tb = await connected(21, timeout=4, linear_cnt=2, exp_cnt=1)
        a, b = tb.ends
        for k in range(8):
            tb.fabric.set_path_up(k, False, direction=0)
        posted, payload, early = await transfer(tb, 0, [3000] * 4)
        assert early == []
        cqes = await a.qp.send_cq.wait(4, timeout_cycles=1_000_000)
        assert [(c.wr_id, c.status, c.byte_len) for c in cqes] == [
            (posted[0][0], Completion.RETRY_EXCEEDED, 0)] + [
            (w, Completion.FLUSHED, 0) for w, _, _ in posted[1:]]
        assert (await a.dev.rel.read_fields("qp_ctrl", a.qp.qpn))["state"] == QpState.ERROR
        assert (await a.dev.tx.read_fields("qp_ctrl", a.qp.qpn))["enable"] == 0
        c = await a.dev.counters()
        assert c["rel.retry_exhausted"] == 1 and c["rel.timeouts"] == 3, c
        # back up: nothing more goes out, nothing is placed, no more CQEs
        sent = await a.dev.tx.read("qp_tx_packets", a.qp.qpn)
        for k in range(8):
            tb.fabric.set_path_up(k, True, direction=0)
        await a.dev.transport.idle(200_000)
        assert await a.dev.tx.read("qp_tx_packets", a.qp.qpn) == sent
        assert (await b.dev.counters())["rx.placed"] == 0
        assert b.dev.mem.read(b.recv_buf, 12000) == bytes(12000)
        assert await a.qp.send_cq.poll() == []
        # a WQE posted to the QP in ERROR completes FLUSHED (verbs) and is not sent
        a.qp.state = QpState.ERROR
        w = await a.qp.post_send(WrOpcode.WRITE, local_addr=a.send_buf, length=1,
                                 remote_addr=b.recv_buf, rkey=b.mr.rkey)
        cqes = await a.qp.send_cq.wait(1)
        assert [(c.wr_id, c.status) for c in cqes] == [(w, Completion.FLUSHED)]
        assert await a.dev.tx.read("qp_tx_packets", a.qp.qpn) == sent
        # the driver refuses to post on a QP it has reset and not brought back
        await a.qp.to_reset()
        with pytest.raises(DriverError, match="is RESET"):
            await a.qp.post_send(WrOpcode.WRITE, local_addr=a.send_buf, length=1,
                                 remote_addr=b.recv_buf, rkey=b.mr.rkey)
    run(body())


# ---- requester corner cases (sim/system/requester_cases.py; the RTL runs them too) -------


def test_unsignaled_wqes_get_no_cqe():
    """A send CQE only for signaled WQEs on success; it frees the ring slots of
    the unsignaled WQEs before it (the CQE carries its WQE's ring index); a QP
    with sq_sig_all signals every WQE."""
    async def body():
        tb = await connected(41)
        a, b = tb.ends
        await requester_cases.unsignaled(a, b)
        a.qp.sq_sig_all = True
        w = await a.qp.post_send(WrOpcode.WRITE, local_addr=a.send_buf, length=10,
                                 remote_addr=b.recv_buf, rkey=b.mr.rkey, signaled=False)
        assert [c.wr_id for c in await a.qp.send_cq.wait(1)] == [w]
    run(body())


def test_unknown_opcode_then_post_in_error_then_reuse():
    """An unknown WQE opcode completes LOC_QP_OP_ERR after the WQE before it
    (SUCCESS), the next FLUSHED, and the QP goes to ERROR without sending it;
    WQEs posted in ERROR complete FLUSHED; ERROR -> RESET -> INIT -> RTR ->
    RTS on both ends leaves the QPs reusable (byte-exact WRITE_WITH_IMMs both
    ways, send and receive CQEs from the rings' start)."""
    async def body():
        tb = await connected(42)
        a, b = tb.ends
        await requester_cases.unknown_opcode(a, b)
        await requester_cases.post_in_error(a, b)
        c = await a.dev.counters()
        assert c["rel.cqes"] == 5 and c["rel.retry_exhausted"] == 0, c
        await requester_cases.reset_and_reuse(a, b)
    run(body())


def test_reset_after_error_reuses_qp():
    """WQEs TX never fetched when the QP went to ERROR (FLUSHED) are not sent
    after ERROR -> RESET -> ... -> RTS: the reset empties TX's ring, and the
    QPs carry new traffic byte-exact with the right completions."""
    async def body():
        tb = await connected(44)
        a, b = tb.ends
        await a.dev.tx.write("qp_ctrl", 0, a.qp.qpn)  # TX holds the WQEs back
        posted = [await a.qp.post_send(WrOpcode.WRITE, local_addr=a.send_buf, length=4000,
                                       remote_addr=b.recv_buf, rkey=b.mr.rkey)
                  for _ in range(3)]
        await a.qp.to_error()
        cqes = await a.qp.send_cq.wait(3)
        assert [(c.wr_id, c.status) for c in cqes] == [(w, Completion.FLUSHED) for w in posted]
        await requester_cases.reset_and_reuse(a, b)
        assert (await b.dev.counters())["rx.placed"] == 5 + 1 + 2 + 1  # 1 KiB MTU
    run(body())


def test_unknown_opcode_first_wqe():
    """The refused WQE is the QP's first: it completes at once, the next FLUSHED."""
    async def body():
        tb = await connected(43)
        a, b = tb.ends
        slot = a.qp.sq_addr + (a.qp.producer % a.qp.sq_size) * 64
        w0 = await a.qp.post_send(WrOpcode.WRITE, local_addr=a.send_buf, length=8,
                                  remote_addr=b.recv_buf, rkey=b.mr.rkey, ring=False)
        a.dev.mem.write(slot, bytes([requester_cases.BAD_OPCODE]))
        w1 = await a.qp.post_send(WrOpcode.WRITE, local_addr=a.send_buf, length=8,
                                  remote_addr=b.recv_buf, rkey=b.mr.rkey)
        cqes = await a.qp.send_cq.wait(2)
        assert [(c.wr_id, c.status) for c in cqes] == [
            (w0, Completion.LOC_QP_OP_ERR), (w1, Completion.FLUSHED)]
        assert (await a.dev.counters())["rx.placed"] == 0
        assert (await b.dev.counters())["rx.placed"] == 0
    run(body())


def test_controller_error_flushes():
    """The driver's to_error: every WQE not completed completes FLUSHED."""
    async def body():
        tb = await connected(22, timeout=14)
        a, b = tb.ends
        tb.fabric.set_path_up(0, False, direction=0)  # keep the first WQE outstanding
        posted, _, _ = await transfer(tb, 0, [8192] * 3)
        await a.dev.transport.idle(2000)
        await a.qp.to_error()
        cqes = await a.qp.send_cq.wait(3)
        assert [(c.wr_id, c.status) for c in cqes] == [(w, Completion.FLUSHED)
                                                       for w, _, _ in posted]
    run(body())


def test_error_flushes_wqes_tx_has_not_fetched():
    """WQEs posted while TX is disabled are not fetched; the controller's
    ERROR still completes every posted WQE FLUSHED, in ring order (reliability
    sees the doorbells), and TX's consumer index stays behind."""
    async def body():
        tb = await connected(29)
        a, b = tb.ends
        await a.dev.tx.write("qp_ctrl", 0, a.qp.qpn)
        posted = [await a.qp.post_send(WrOpcode.WRITE, local_addr=a.send_buf, length=100,
                                       remote_addr=b.recv_buf, rkey=b.mr.rkey)
                  for _ in range(3)]
        await a.dev.transport.idle(10_000)
        assert await a.dev.tx.read("qp_consumer", a.qp.qpn) == 0
        assert await a.qp.send_cq.poll() == []
        await a.qp.to_error()
        cqes = await a.qp.send_cq.wait(3)
        assert [(c.wr_id, c.status) for c in cqes] == [(w, Completion.FLUSHED) for w in posted]
        assert await a.dev.tx.read("qp_consumer", a.qp.qpn) == 0
        assert (await b.dev.counters())["rx.placed"] == 0
    run(body())


def test_bad_rkey_is_not_written_and_counted():
    """A WRITE naming an rkey no region has: RX refuses every packet (counted in
    bad_rkey, NAK 0x62 sent), writes nothing. The requester does as verbs
    does: the first NAK 0x62 completes the WQE with REM_ACCESS (and every
    later WQE FLUSHED) and puts the QP in ERROR, so the NAKs after it are
    ignored (docs/reliability.md). A message that does not fit its region
    is refused at its FIRST packet already (bad_bounds), though that packet
    fits."""
    async def body():
        tb = await connected(23, timeout=4, linear_cnt=1, exp_cnt=1)
        a, b = tb.ends
        a.dev.mem.write(a.send_buf, b"\xAB" * 4096)
        await a.qp.post_send(WrOpcode.WRITE, local_addr=a.send_buf, length=4096,
                             remote_addr=b.recv_buf, rkey=b.mr.rkey ^ 0x100)
        await a.qp.post_send(WrOpcode.WRITE, local_addr=a.send_buf, length=64,
                             remote_addr=b.recv_buf, rkey=b.mr.rkey)
        cqes = await a.qp.send_cq.wait(2, timeout_cycles=1_000_000)
        assert [c.status for c in cqes] == [Completion.REM_ACCESS, Completion.FLUSHED]
        await a.dev.transport.idle(10_000)  # let the frames in flight land
        cb, ca = await b.dev.counters(), await a.dev.counters()
        assert cb["rx.bad_rkey"] >= 1 and cb["rx.placed"] == 0, cb
        assert cb["rx.naks_sent"] == cb["rx.bad_rkey"]
        assert ca["rel.naks_fatal"] == 1 and ca["rel.retry_exhausted"] == 0, ca
        assert ca["rel.acks_ignored"] == cb["rx.naks_sent"] - 1, ca
        assert b.dev.mem.read(b.recv_buf, 4096) == bytes(4096)

        tb = await connected(24, timeout=4, linear_cnt=1, exp_cnt=1)
        a, b = tb.ends
        a.dev.mem.write(a.send_buf, b"\xCD" * 2048)
        await a.qp.post_send(WrOpcode.WRITE, local_addr=a.send_buf, length=2048,
                             remote_addr=b.recv_buf + b.mr.length - 1024, rkey=b.mr.rkey)
        cqes = await a.qp.send_cq.wait(1, timeout_cycles=1_000_000)
        assert [c.status for c in cqes] == [Completion.REM_ACCESS]
        cb = await b.dev.counters()
        assert cb["rx.bad_bounds"] >= 1 and cb["rx.placed"] == 0, cb
        end = b.recv_buf + b.mr.length
        assert b.dev.mem.read(end - 1024, 2048) == bytes(2048)
    run(body())


def test_a_region_of_another_pd_is_refused():
    """The receiving QP's PD has the region ``b.mr``; a region registered in
    another PD is refused to it (NAK 0x62, counted bad_pd), and nothing is
    written there."""
    async def body():
        tb = await connected(25, timeout=4, linear_cnt=1, exp_cnt=1)
        a, b = tb.ends
        other = b.dev.alloc_pd()
        assert other.pdn != b.mr.pd.pdn
        buf = b.dev.mem.alloc(4096, align=4096)
        b.dev.mem.write(buf, bytes(4096))
        mr2 = await other.reg_mr(buf, 4096)
        a.dev.mem.write(a.send_buf, b"\x5A" * 256)
        await a.qp.post_send(WrOpcode.WRITE, local_addr=a.send_buf, length=256,
                             remote_addr=buf, rkey=mr2.rkey)
        cqes = await a.qp.send_cq.wait(1, timeout_cycles=1_000_000)
        assert [c.status for c in cqes] == [Completion.REM_ACCESS]
        cb = await b.dev.counters()
        assert cb["rx.bad_pd"] >= 1 and cb["rx.bad_rkey"] == 0 and cb["rx.placed"] == 0, cb
        assert b.dev.mem.read(buf, 4096) == bytes(4096)
    run(body())


def test_a_stale_rkey_is_refused():
    """Deregistered and registered again (the same table entry, the same
    memory), a region gets an rkey with another key byte; the old rkey is
    refused (bad_rkey, NAK 0x62) while the new one writes."""
    async def body():
        tb = await connected(26, timeout=4, linear_cnt=1, exp_cnt=1)
        a, b = tb.ends
        old = b.mr
        await old.deregister()
        new = await old.pd.reg_mr(old.addr, old.length)
        assert new.index == old.index and new.rkey != old.rkey
        assert new.rkey & 0xFFFFFF == old.rkey & 0xFFFFFF  # only the key byte moved
        a.dev.mem.write(a.send_buf, b"\x11" * 64)
        await a.qp.post_send(WrOpcode.WRITE, local_addr=a.send_buf, length=64,
                             remote_addr=b.recv_buf, rkey=new.rkey)
        await a.qp.post_send(WrOpcode.WRITE, local_addr=a.send_buf, length=64,
                             remote_addr=b.recv_buf + 64, rkey=old.rkey)
        cqes = await a.qp.send_cq.wait(2, timeout_cycles=1_000_000)
        assert [c.status for c in cqes] == [Completion.SUCCESS, Completion.REM_ACCESS]
        cb = await b.dev.counters()
        assert cb["rx.bad_rkey"] >= 1 and cb["rx.placed"] == 1, cb
        assert b.dev.mem.read(b.recv_buf, 128) == b"\x11" * 64 + bytes(64)
    run(body())


def test_receive_ring_full_holds_completions():
    """A WRITE_WITH_IMM whose receive CQE has no slot (producer + held -
    QP_CQ_CONS >= size) is not acknowledged (``cq_full``) and so not completed at
    the requester; once the host polls the ring, the retransmission completes
    it. No completion is lost (``cq_overflow`` stays 0)."""
    async def body():
        tb = ModelSystem(seed=25)
        await tb.init()
        a, b = tb.ends
        await tb.connect(sq_log2=4, recv_cq_log2=2, timeout=4)
        for i in range(6):
            await a.qp.post_send(WrOpcode.WRITE_WITH_IMM, local_addr=a.send_buf, length=64,
                                 remote_addr=b.recv_buf + 64 * i, rkey=b.mr.rkey, imm=i)
        assert len(await a.qp.send_cq.wait(4)) == 4
        await a.dev.transport.idle(10_000)  # several retransmit timeouts
        assert await a.qp.send_cq.poll() == []  # messages 5 and 6 wait for a CQ slot
        c = await b.dev.counters()
        assert (c["rx.cqe_written"], c["rx.cq_overflow"]) == (4, 0) and c["rx.cq_full"] > 0, c
        got = await b.qp.recv_cq.wait(6)
        assert [x.imm for x in got] == list(range(6))
        assert all(x.status == 0 for x in await a.qp.send_cq.wait(2))
        c = await b.dev.counters()
        assert (c["rx.cqe_written"], c["rx.cq_overflow"]) == (6, 0), c
    run(body())


def test_harness_matches_rtl_harness():
    """The model harness uses the RTL harness's addresses and EV profiles."""
    from sim.system import harness, model_harness

    assert model_harness.MACS == harness.MACS and model_harness.IPS == harness.IPS
    assert model_harness.EVS == harness.EVS


# ---- max_wimm (sim/system/requester_cases.py ``wimm_burst``; the RTL runs it too) --------


def test_max_wimm_keeps_a_small_receive_cq_from_overflowing():
    """12 WRITE_WITH_IMMs posted at once into a receive CQ of 4 entries that the
    peer's host polls every 400 cycles, ACK after every packet: with max_wimm 2
    the requester never has more than 2 outstanding, and the peer drops none
    (no cq_full, no wimm_full) and nothing is resent; with the default (the
    NIC's maximum: no bound) the same burst outruns the CQ: cq_full drops and
    retransmissions. Both byte-exact, every completion on both sides (the RTL
    runs the same case: tests/system/test_two_nic.py)."""
    async def body():
        got = {}
        for max_wimm in (2, None):
            tb = ModelSystem(seed=51)
            await tb.init()
            await tb.connect(sq_log2=4, recv_cq_log2=2, timeout=6, ack_n=1,
                             max_wimm=max_wimm)
            got[max_wimm] = await requester_cases.wimm_burst(*tb.ends, poll_cycles=400)
        assert got[2] == {"max_outstanding": 2, "cq_full": 0, "wimm_full": 0, "retx": 0}, got
        assert got[None]["max_outstanding"] > 2 and got[None]["cq_full"] > 0, got
        assert got[None]["retx"] > 0, got
    run(body())


# ---- the control API's queries and teardown (sim/system/control_cases.py; the RTL too) ---


def test_device_and_qp_queries_and_teardown():
    """``Device.query`` answers the capabilities and limits from the NIC's
    registers; ``QueuePair.query`` the QP's state, PSNs, settings and EVs as
    the NIC holds them, before and after a transfer; ``MemoryRegion.query``
    the MR table's entry; a QP with a requester MPR apart from its responder
    MPR, then destroyed with its CQs, frees its QPN and memory. The
    connection's EVs are derived by the NICs: GENERATED at one end, AUTO at
    the other (``nic_derived_evs``)."""
    from sim.system import control_cases
    from sim.system.model_harness import IPS, MACS

    async def body():
        tb = ModelSystem(seed=61)
        await tb.init()
        settings = dict(mtu=1024, mpr=2, timeout=9, sack_threshold=3)
        await tb.connect(sq_log2=4, evs=control_cases.ev_profiles(), **settings)
        a, b = tb.ends
        for end in tb.ends:
            await control_cases.device_query(end.dev)
        await control_cases.nic_derived_evs(a, b)
        await control_cases.qp_query(a, b, dict(settings, evs_a=a.qp.evs.values))
        await control_cases.teardown(a.dev, MACS[1], IPS[1])
    run(body())


def test_queries_see_what_the_nic_did():
    """Not the driver's copy: a QP that reliability put in ERROR (the controller's
    write here, as retry exhaustion would) queries ERROR while the driver still
    thinks RTS; a DENIED EV queries DENIED; a deregistered region queries no
    access; a CQ destroyed cannot serve a new QP; bad MPRs raise."""
    async def body():
        tb = await connected(62)
        a, b = tb.ends
        dev = a.dev
        await dev.set_ev_state(a.qp, 2, denied=True)
        await dev.rel.write_fields("qp_ctrl", a.qp.qpn, state=QpState.ERROR)
        attr = await a.qp.query()
        assert a.qp.state == QpState.RTS and attr.state == QpState.ERROR
        assert attr.evs[2][1] == 2  # DENIED
        await b.mr.deregister()
        assert (await b.mr.query()).access == 0
        pd = dev.alloc_pd()
        cq = dev.create_cq(4)
        cq.destroy()
        with pytest.raises(DriverError, match="destroyed"):
            await dev.create_qp(pd, cq, dev.create_cq(4), sq_log2=4)
        qp = await dev.create_qp(pd, dev.create_cq(4), dev.create_cq(4), sq_log2=4)
        await qp.to_init()
        await qp.to_rtr(dest_qpn=1, peer_mac="02:00:00:00:00:02", peer_ip="10.0.0.2")
        limit = dev.params["mpr_max"] // 128
        with pytest.raises(ValueError, match=f"mpr must be in 1..{limit}"):
            await qp.to_rts(evs=a.qp.evs, mpr=limit + 1)
    run(body())


def test_nic_derived_ev_profiles_are_checked_first():
    """A GENERATED profile the rule cannot satisfy, or with parameters out of
    range, raises ValueError in Python saying what to fix, before any register
    is written; only GENERATED and AUTO go to the NIC's EV generator."""
    from host_driver.driver import EvProfile

    with pytest.raises(ValueError, match="width must be 1..16"):
        EvProfile.generated(width=17)
    with pytest.raises(ValueError, match="16-bit values"):
        EvProfile.generated(width=8, init=1 << 16)
    with pytest.raises(ValueError, match="only 3 distinct EVs, 5 asked"):
        EvProfile.generated(width=4, min_ev=2, max_ev=4, count=5)
    with pytest.raises(ValueError, match="min <= max"):
        EvProfile.generated(width=8, min_ev=9, max_ev=3)
    auto = EvProfile.auto()
    assert (auto.mode, auto.values) == ("auto", ())

    async def body():
        tb = ModelSystem(seed=3)
        await tb.init()
        dev = tb.ends[0].dev
        with pytest.raises(ValueError, match="GENERATED and AUTO"):
            await dev.generate_evs(0, EvProfile.explicit([1, 2]))
        loaded = await dev.generate_evs(1, EvProfile.generated(width=6, init=5, count=3))
        assert loaded.values == (5, 6, 7) and loaded.mode == "generated"
        # SRv6's AUTO: the first hops from the template's first uSID on, QP 1 from the second
        ne = dev.params["evs_per_qp"]
        loaded = await dev.generate_evs(1, EvProfile.auto(ev_format="srv6",
                                                          template=0x0E00_0002 << 32))
        assert loaded.values == tuple((0x0E00 + (1 + i) % ne) << 48 | 0x0002 << 32
                                      for i in range(ne))
        # a STEV value split over the flow label (8 + 4 bits) and the source port (4)
        loaded = await dev.generate_evs(2, EvProfile.generated(
            width=16, min_ev=0x1234, max_ev=0x1235, count=2, ev_format="stev",
            template=0xC000, ev_bits=0xFF0F00F0))
        assert loaded.values == (0x1203_C040, 0x1203_C050)
        with pytest.raises(ValueError, match="past the last uSID 0xffff"):
            await dev.generate_evs(1, EvProfile.auto(ev_format="srv6",
                                                     template=0xFFFC_0002 << 32))
    run(body())

"""The model NIC's peer-frame checks (docs/security.md), as the RTL's: forged
ACKs, probe answers and trimmed frames injected on the model fabric change no
state and are counted, each reason in its own counter."""

import asyncio

from host_driver.driver import Completion, WrOpcode
from sim.model.packet import ACK, AETH_ACK, DATA, NAK_TRIMMED, PROBE_RESP, Forged, Packet
from sim.system.attack_setup import write_into_dead_paths
from sim.system.model_harness import ModelSystem

FORGER_IP = 0x0A000042  # 10.0.0.66


def ip(s):
    a, b, c, d = (int(x) for x in s.split("."))
    return a << 24 | b << 16 | c << 8 | d


def forged_ack(tb, to_nic, qpn, cum_psn, *, syndrome=AETH_ACK, psn=None, sack_base=None,
               **claims):
    """An ACK/NAK as NIC ``1 - to_nic`` would send it, claiming ``claims``."""
    src, dst = tb.ends[1 - to_nic].nic.host, tb.ends[to_nic].nic.host
    pkt = Packet(ACK, src, dst, 0, 0xD000, qpn)
    pkt.wire_len = 82
    pkt.syndrome, pkt.msn = syndrome, 0
    pkt.psn = cum_psn if psn is None else psn
    pkt.cum_psn = cum_psn
    pkt.sack_base = (cum_psn + 1) & 0xFFFFFF if sack_base is None else sack_base
    pkt.sack_bits, pkt.sack_bitmap, pkt.ece, pkt.ce_count = 64, 0, False, 0
    pkt.forged = Forged(**claims)
    return pkt


async def _dead_path_write():
    """Two connected model NICs, every path NIC 0 -> NIC 1 down, a 4 KiB WRITE in
    flight: (tb, payload, its first PSN)."""
    tb = ModelSystem(seed=5)
    await tb.init()
    await tb.connect(sq_log2=4, timeout=9)
    return (tb, *await write_into_dead_paths(tb))


def test_forged_ack_completes_nothing():
    """Issue 26's reproduction on the model: every path NIC 0 -> NIC 1 down, a
    4 KiB WRITE posted; forged ACKs naming its PSNs (from 10.0.0.66, to another
    IP, to another MAC, to a QP not in RTS, with a bad sack_base) complete
    nothing and are counted; once the paths are up the WRITE completes."""
    async def body():
        tb, payload, una = await _dead_path_write()
        a, b = tb.ends
        last = (una + 3) & 0xFFFFFF
        q = a.qp.qpn
        peer = ip(b.dev.ip)
        attacks = [
            (forged_ack(tb, 0, q, last, src_ip=FORGER_IP), "peer_bad_source"),
            (forged_ack(tb, 0, q, last, dst_ip=ip("10.0.0.9")), "peer_not_for_us"),
            (forged_ack(tb, 0, q, last, dst_mac=0x020000000009), "peer_bad_mac"),
            (forged_ack(tb, 0, q ^ 1, last, src_ip=peer), "peer_qp_state"),
            (forged_ack(tb, 0, tb.ends[0].dev.params["num_qps"], last), "peer_bad_qpn"),
            (forged_ack(tb, 0, q, last, sack_base=last), "peer_bad_sack"),
            (forged_ack(tb, 0, q, una, syndrome=NAK_TRIMMED, src_ip=FORGER_IP),
             "peer_bad_source"),
        ]
        before = await a.dev.counters()
        for pkt, _ in attacks:
            tb.fabric.inject(0, pkt)
        await a.dev.transport.idle(200)
        assert await a.qp.send_cq.poll() == [], "a forged ACK completed the WRITE"
        after = await a.dev.counters()
        for name in {r for _, r in attacks}:
            assert after[f"rx.{name}"] - before[f"rx.{name}"] == sum(
                r == name for _, r in attacks), name
        assert after["rx.peer_frames"] - before["rx.peer_frames"] == len(attacks)
        for name in ("acks", "acks_ignored", "acks_unsent", "naks_trimmed", "retx_nak"):
            assert after[f"rel.{name}"] == before[f"rel.{name}"], name
        assert await a.dev.rel.read("una_psn", q) == una
        # from the peer's own address, naming PSNs never sent (docs/protocol.md):
        # a cumulative PSN beyond nxt is ignored whole, SACK bits beyond nxt clipped
        tb.fabric.inject(0, forged_ack(tb, 0, q, (last + 5) & 0xFFFFFF))
        ack = forged_ack(tb, 0, q, (una - 1) & 0xFFFFFF)
        ack.sack_bitmap = 0xF0  # PSNs una + 4 .. una + 7: never sent
        tb.fabric.inject(0, ack)
        await a.dev.transport.idle(200)
        assert await a.qp.send_cq.poll() == [], "an ACK of unsent PSNs completed the WRITE"
        c = await a.dev.counters()
        assert (c["rel.acks_unsent"], c["rel.acks"], c["rel.acks_stale"]) == (
            after["rel.acks_unsent"] + 1, after["rel.acks"] + 1, after["rel.acks_stale"] + 1)
        assert await a.dev.rel.read("una_psn", q) == una
        for p in range(tb.fabric.num_paths):
            tb.fabric.set_path_up(p, True, direction=0)
        cqes = await a.qp.send_cq.wait(1, timeout_cycles=2_000_000)
        assert [c.status for c in cqes] == [Completion.SUCCESS]
        assert b.dev.mem.read(b.recv_buf, 4096) == payload
    asyncio.run(body())


def test_forged_trim_and_replayed_probe_answer():
    """A trimmed frame from 10.0.0.66 is dropped as bad_source (no NAK); a
    probe answer that matches no outstanding probe changes no EV."""
    async def body():
        tb = ModelSystem(seed=6)
        await tb.init()
        await tb.connect(sq_log2=4, timeout=9, probe_period=4000)
        a, b = tb.ends
        trim = Packet(DATA, a.nic.host, b.nic.host, 0, 0xC000, b.qp.qpn)
        trim.psn, trim.opcode, trim.va, trim.rkey = 0, 0x0A, b.recv_buf, b.mr.rkey
        trim.dma_len, trim.payload_len, trim.imm, trim.wire_len = 1024, 0, 0, 70
        trim.trimmed = True
        trim.forged = Forged(src_ip=FORGER_IP)
        resp = Packet(PROBE_RESP, b.nic.host, a.nic.host, 0, 0xC003, a.qp.qpn)
        resp.probe_id, resp.timestamp, resp.wire_len = 77, 0, 74
        before = (await a.dev.counters(), await b.dev.counters())
        tb.fabric.inject(1, trim)
        tb.fabric.inject(0, resp)
        await a.dev.transport.idle(200)
        ca, cb = await a.dev.counters(), await b.dev.counters()
        assert cb["rx.bad_source"] - before[1]["rx.bad_source"] == 1
        assert cb["rx.naks_sent"] == before[1]["rx.naks_sent"]
        assert ca["rel.probes_stale"] - before[0]["rel.probes_stale"] == 1
        assert ca["rel.ev_to_good"] == before[0]["rel.ev_to_good"]
    asyncio.run(body())


def test_second_nak_trimmed_costs_no_retransmit():
    """docs/security.md's bound on the model: NAK TRIMMED from the peer's own
    address naming an in-flight PSN (every path down, so nothing arrives) costs
    one retransmit and one window cut (the model NIC's window is the
    hardware's, so the cut is the golden model's, taken with the retransmit);
    the same NAK again, twice, is refused
    and counted (naks_trim_repeat) and changes neither. The timer resends the
    PSN; once the paths are up the WRITE completes."""
    async def body():
        tb, payload, una = await _dead_path_write()
        a, b = tb.ends
        q = a.qp.qpn
        model_qp = a.nic.qps[q]
        before = await a.dev.counters()
        for _ in range(3):
            tb.fabric.inject(0, forged_ack(tb, 0, q, (una - 1) & 0xFFFFFF,
                                           syndrome=NAK_TRIMMED, psn=(una + 1) & 0xFFFFFF))
            await a.dev.transport.idle(200)
        after = await a.dev.counters()
        delta = {n: after[f"rel.{n}"] - before[f"rel.{n}"]
                 for n in ("naks_trimmed", "retx_nak", "naks_trim_repeat", "timeouts")}
        assert delta == {"naks_trimmed": 3, "retx_nak": 1, "naks_trim_repeat": 2,
                         "timeouts": 0}, delta
        # MrcQp.on_ack's trim branch: the retransmit and the window cut together
        assert [(p, why) for _, p, _, why in model_qp.retx_log] == [
            ((una + 1) & 0xFFFFFF, "trim")], model_qp.retx_log
        for p in range(tb.fabric.num_paths):
            tb.fabric.set_path_up(p, True, direction=0)
        cqes = await a.qp.send_cq.wait(1, timeout_cycles=2_000_000)
        assert [c.status for c in cqes] == [Completion.SUCCESS]
        assert b.dev.mem.read(b.recv_buf, 4096) == payload
        assert (await a.dev.counters())["rel.timeouts"] >= 1
    asyncio.run(body())


def test_fresh_qp_knows_no_psn():
    """As reliability (its ``fresh`` flag): a QP in RTS learns its PSNs from TX's
    first sent record, so until it sends, una_psn and nxt_psn read 0 and an
    ACK from the peer naming the PSN before its start PSN is ignored and
    counted (acks_ignored), not taken; after a WRITE they read from the start
    PSN on."""
    async def body():
        tb = ModelSystem(seed=5)
        await tb.init()
        await tb.connect(sq_log2=4, timeout=9)
        a, b = tb.ends
        q = a.qp.qpn
        start = a.nic.qps[q].sq_psn
        assert start != 0
        assert [await a.dev.rel.read(n, q) for n in ("una_psn", "nxt_psn")] == [0, 0]
        before = await a.dev.counters()
        tb.fabric.inject(0, forged_ack(tb, 0, q, (start - 1) & 0xFFFFFF))
        await a.dev.transport.idle(200)
        after = await a.dev.counters()
        assert [after[f"rel.{n}"] - before[f"rel.{n}"]
                for n in ("acks_ignored", "acks", "acks_stale")] == [1, 0, 0]
        a.dev.mem.write(a.send_buf, bytes(range(256)) * 4)
        await a.qp.post_send(WrOpcode.WRITE, local_addr=a.send_buf, length=1024,
                             remote_addr=b.recv_buf, rkey=b.mr.rkey)
        cqes = await a.qp.send_cq.wait(1, timeout_cycles=2_000_000)
        assert [c.status for c in cqes] == [Completion.SUCCESS]
        assert [await a.dev.rel.read(n, q) for n in ("una_psn", "nxt_psn")] == [
            (start + 1) & 0xFFFFFF] * 2
    asyncio.run(body())

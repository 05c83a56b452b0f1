"""An attacker on the fabric between two NicCores (docs/security.md): forged
ACKs, NAKs, probe answers and trimmed frames, with valid ICRCs, injected next
to the NICs (``Fabric.inject``). No forged frame may complete work or change
state; each is dropped and counted, and the counter equations of
``SystemTB.check_counters`` hold with the injected frames in them.

On tests/system/test_two_nic.py's build (sim_build/system_two_nic_sim: the
same top and options, so no second Verilator build).
"""

from __future__ import annotations

import ipaddress

import cocotb

from host_driver import layers as L
from host_driver.driver import Completion, WrOpcode
from sim import coverage as fcov
from sim.system.attack_setup import write_into_dead_paths
from sim.system.harness import IPS, IPS6, MACS, SystemTB
from sim.system.simhw import run_two_nic
from sim.system.top import NIC_PARAMS
from tests import seeds

FORGER_IP, FORGER_MAC = "10.0.0.66", "02:00:00:00:00:66"
OTHER_IP, OTHER_MAC = "10.0.0.9", "02:00:00:00:00:09"
SACK_BITS = NIC_PARAMS["sack_bits"]


def to_nic(i: int, **claims) -> dict:
    """The addresses of a frame that the peer of NIC ``i`` would send it,
    overridden by ``claims``."""
    return {"src_mac": MACS[1 - i], "dst_mac": MACS[i], "src_ip": IPS[1 - i],
            "dst_ip": IPS[i], **claims}


def forged_ack(i, qpn, cum_psn, **kw):
    addr = {k: kw.pop(k) for k in ("src_mac", "dst_mac", "src_ip", "dst_ip") if k in kw}
    return bytes(L.ack_packet(dqpn=qpn, cum_psn=cum_psn, sack_bits=SACK_BITS, ev=0xD000,
                              **kw, **to_nic(i, **addr)))


async def paths_up_and_complete(tb, payload):
    """Every path NIC 0 -> NIC 1 up again: the 4 KiB WRITE that
    ``write_into_dead_paths`` posted completes SUCCESS, NIC 1 holds its bytes,
    and the counter equations hold (the injected frames in them)."""
    a, b = tb.ends
    for p in range(tb.fabric.num_paths):
        tb.fabric.set_path_up(p, True, direction=0)
    cqes = await a.qp.send_cq.wait(1, timeout_cycles=2_000_000)
    assert [(c.status, c.byte_len) for c in cqes] == [(Completion.SUCCESS, 4096)]
    assert b.dev.mem.read(b.recv_buf, 4096) == payload
    await tb.quiesce()
    await tb.check_counters(0, packets=4, messages=1)
    await tb.check_counters(1, packets=0, messages=0)


@cocotb.test()
async def test_forged_ack_with_every_path_down(dut):
    """Issue 26's reproduction: every path NIC 0 -> NIC 1 down, a 4 KiB WRITE
    posted on NIC 0. One ACK from 10.0.0.66 with a valid ICRC naming all its
    PSNs, and one from the peer's address sent to another IP and MAC, complete
    nothing (they did, SUCCESS, before the peer-frame filter); they are
    counted (``peer_bad_source``, ``peer_not_for_us``). Once the paths are up
    the WRITE completes SUCCESS and NIC 1 holds its bytes."""
    tb = SystemTB(dut, seed=seeds.of(41), keep_log=True)
    await tb.init()
    # a start window that holds the whole WRITE, as in the run
    await tb.ends[0].dev.rel.write("cwnd_init", NIC_PARAMS["window"])
    await tb.connect(sq_log2=4, timeout=9)
    a, b = tb.ends
    payload, una = await write_into_dead_paths(tb)
    last = (una + 3) & 0xFFFFFF
    # the forged ACK of issue 26: from 10.0.0.66, naming every PSN of the WRITE
    tb.fabric.inject(0, forged_ack(0, a.qp.qpn, last, src_ip=FORGER_IP, src_mac=FORGER_MAC))
    tb.fabric.inject(0, forged_ack(0, a.qp.qpn, last, dst_ip=OTHER_IP, dst_mac=OTHER_MAC))
    # from the peer's own address (what the NIC cannot tell from the peer),
    # naming PSNs never sent: docs/protocol.md's rules ignore the first whole
    # (acks_unsent) and clip the second's SACK bits beyond nxt (nothing left)
    tb.fabric.inject(0, forged_ack(0, a.qp.qpn, (last + 5) & 0xFFFFFF))
    tb.fabric.inject(0, forged_ack(0, a.qp.qpn, (una - 1) & 0xFFFFFF,
                                   sack_base=una, bitmap=0xF0))
    await tb.cycles(2000)
    assert await a.qp.send_cq.poll() == [], "a forged ACK completed the WRITE"
    c = await tb.counters(0)
    assert (c["rx.peer_bad_source"], c["rx.peer_not_for_us"]) == (1, 1), c
    assert (c["rel.acks_unsent"], c["rel.acks"], c["rel.acks_stale"]) == (1, 1, 1), c
    assert await a.dev.rel.read("una_psn", a.qp.qpn) == una
    await paths_up_and_complete(tb, payload)
    fcov.sample_forged("ack_every_path_down")


@cocotb.test()
async def test_forged_acks_over_ipv6_and_across_families(dut):
    """A QP bound over IPv6, its WRITE stuck behind dead paths (as above).
    Forged ACKs with valid ICRCs, each naming every PSN of the WRITE: over
    IPv6 from another address and to another address; and over IPv4 from the
    peer's IPv4 address and from 0.0.0.1, the low 32 bits of the peer's IPv6
    address (a family the QP is not bound over). None completes anything;
    each is dropped and counted (``peer_bad_source``, ``peer_not_for_us``).
    An ACK from the peer's own IPv6 address naming PSNs never sent is
    ignored (``acks_unsent``). Once the paths are up the WRITE completes."""
    tb = SystemTB(dut, seed=seeds.of(42), keep_log=True)
    await tb.init()
    await tb.ends[0].dev.rel.write("cwnd_init", NIC_PARAMS["window"])
    await tb.connect(sq_log2=4, timeout=9, ipv6=True)
    a, b = tb.ends
    payload, una = await write_into_dead_paths(tb)
    last = (una + 3) & 0xFFFFFF
    peer6 = ipaddress.IPv6Address(IPS6[1])
    low32 = str(ipaddress.IPv4Address(int(peer6) & 0xFFFF_FFFF))
    v6 = {"src_ip": IPS6[1], "dst_ip": IPS6[0]}
    for claims in ({**v6, "src_ip": "fd00:0:0:66::1", "src_mac": FORGER_MAC},
                   {**v6, "dst_ip": "fd00:0:0:9::1", "dst_mac": OTHER_MAC},
                   {"src_ip": IPS[1]}, {"src_ip": low32}):
        tb.fabric.inject(0, forged_ack(0, a.qp.qpn, last, **claims))
    tb.fabric.inject(0, forged_ack(0, a.qp.qpn, (last + 5) & 0xFFFFFF, **v6))
    await tb.cycles(2000)
    assert await a.qp.send_cq.poll() == [], "a forged ACK completed the WRITE"
    c = await tb.counters(0)
    assert (c["rx.peer_bad_source"], c["rx.peer_not_for_us"]) == (3, 1), c
    assert (c["rel.acks_unsent"], c["rel.acks"]) == (1, 0), c
    assert await a.dev.rel.read("una_psn", a.qp.qpn) == una
    await paths_up_and_complete(tb, payload)


@cocotb.test()
async def test_forged_naks_cost_one_retransmit(dut):
    """docs/security.md's bound end to end: every path NIC 0 -> NIC 1 down, a
    4 KiB WRITE (4 PSNs) in flight; five NAK TRIMMED from the peer's own
    address (what the NIC cannot tell from the peer's) for each of its PSNs
    cost one retransmit and one window cut per PSN: 4 retx_nak, the 16 others
    refused (naks_trim_repeat). Once the paths are up the timer resends the
    WRITE, which completes SUCCESS, byte-exact."""
    tb = SystemTB(dut, seed=seeds.of(43), keep_log=True)
    await tb.init()
    await tb.ends[0].dev.rel.write("cwnd_init", NIC_PARAMS["window"])
    await tb.connect(sq_log2=4, timeout=9)
    a, b = tb.ends
    payload, una = await write_into_dead_paths(tb)
    before = await tb.counters(0)
    for _ in range(5):
        for k in range(4):
            psn = (una + k) & 0xFFFFFF
            tb.fabric.inject(0, forged_ack(0, a.qp.qpn, (una - 1) & 0xFFFFFF, psn=psn,
                                           syndrome=L.NAK_TRIMMED))
        await tb.cycles(400)
    await tb.cycles(2000)
    c = await tb.counters(0)
    got = {n: c[f"rel.{n}"] - before[f"rel.{n}"]
           for n in ("naks_trimmed", "retx_nak", "naks_trim_repeat", "timeouts")}
    assert got == {"naks_trimmed": 20, "retx_nak": 4, "naks_trim_repeat": 16,
                   "timeouts": 0}, got
    for p in range(tb.fabric.num_paths):
        tb.fabric.set_path_up(p, True, direction=0)
    cqes = await a.qp.send_cq.wait(1, timeout_cycles=2_000_000)
    assert [(c.status, c.byte_len) for c in cqes] == [(Completion.SUCCESS, 4096)]
    assert b.dev.mem.read(b.recv_buf, 4096) == payload
    assert (await tb.counters(0))["rel.timeouts"] >= 1
    await tb.quiesce()
    await tb.check_counters(0, packets=4, messages=1)
    await tb.check_counters(1, packets=0, messages=0)
    fcov.sample_forged("naks_one_retransmit")


@cocotb.test()
async def test_attacker_during_transfer(dut):
    """16 x 8 KiB WRITEs NIC 0 -> NIC 1 over 8 lossless paths while an attacker
    injects, every 1 to 3 us, one of: ACKs and NAK TRIMMED naming in-flight
    PSNs from 10.0.0.66; ACKs from the peer's address to another IP, to
    another MAC, to a QP not in RTS, with a sack_base other than cum_psn + 1;
    probe answers from 10.0.0.66 and from the peer's address answering no
    probe (probing is off); trimmed WRITEs to NIC 1 from 10.0.0.66 and to a
    QP not in RTS. The transfer completes byte-exact with 16 SUCCESS
    completions in order, each forged frame is counted under its reason, and
    the counter equations hold with the injected frames."""
    tb = SystemTB(dut, seed=seeds.of(42), keep_log=True)
    await tb.init()
    await tb.connect(sq_log2=4, timeout=9)
    a, b = tb.ends
    qa, qb = a.qp.qpn, b.qp.qpn
    idle_a = (qa + 1) % NIC_PARAMS["num_qps"]  # QPs never brought up: RESET
    idle_b = (qb + 1) % NIC_PARAMS["num_qps"]
    sizes = [8192] * 16
    total = sum(sizes) // 1024
    rng = seeds.rng(7)
    psn = [0]  # the attacker's guess of the PSN in flight

    def guess():
        return (una + min(psn[0], total - 1)) & 0xFFFFFF

    write = dict(opcode=L.OP_WRITE_ONLY, va=b.recv_buf, rkey=b.mr.rkey, dma_len=1024,
                 payload=bytes(1024), ev=0xC000)
    # (to NIC, frame maker, the counter that drops it, the case in sim/coverage.py)
    attacks = [
        (0, lambda: forged_ack(0, qa, guess(), src_ip=FORGER_IP), "rx.peer_bad_source",
         "ack_forged_source"),
        (0, lambda: forged_ack(0, qa, guess(), psn=guess(), syndrome=L.NAK_TRIMMED,
                               src_ip=FORGER_IP), "rx.peer_bad_source", "nak_forged_source"),
        (0, lambda: forged_ack(0, qa, guess(), dst_ip=OTHER_IP), "rx.peer_not_for_us",
         "ack_not_for_us"),
        (0, lambda: forged_ack(0, qa, guess(), dst_mac=OTHER_MAC), "rx.peer_bad_mac",
         "ack_bad_mac"),
        (0, lambda: forged_ack(0, idle_a, guess()), "rx.peer_qp_state", "ack_idle_qp"),
        (0, lambda: forged_ack(0, qa, guess(), sack_base=(guess() + 5) & 0xFFFFFF),
         "rx.peer_bad_sack", "ack_bad_sack_base"),
        (0, lambda: bytes(L.probe_packet(response=True, dqpn=qa, probe_id=1, ev=0xC003,
                                         timestamp=0, **to_nic(0, src_ip=FORGER_IP))),
         "rx.peer_bad_source", "probe_resp_forged_source"),
        (0, lambda: bytes(L.probe_packet(response=True, dqpn=qa, probe_id=1, ev=0xC003,
                                         timestamp=0, **to_nic(0))), "rel.probes_stale",
         "probe_resp_stale"),
        (1, lambda: L.trim(bytes(L.write_packet(dqpn=qb, psn=guess(), **write,
                                                **to_nic(1, src_ip=FORGER_IP)))),
         "rx.bad_source", "trimmed_write_forged_source"),
        (1, lambda: L.trim(bytes(L.write_packet(dqpn=idle_b, psn=guess(), **write,
                                                **to_nic(1)))), "rx.qp_state",
         "trimmed_write_idle_qp"),
    ]
    sent = {}
    done, k_sent = [False], [0]

    async def attacker():
        k = 0
        while not done[0]:
            nic, make, reason, _ = attacks[k % len(attacks)]
            tb.fabric.inject(nic, make())
            sent[reason] = sent.get(reason, 0) + 1
            k += 1
            k_sent[0] = k
            psn[0] = len(tb.fabric.directions[0].log)  # data frames NIC 0 has sent
            await tb.cycles(rng.randrange(125, 375))  # 1..3 us

    payload = tb.random_bytes(sum(sizes))
    a.dev.mem.write(a.send_buf, payload)
    posted, early, offset = [], [], 0
    task = None
    for n in sizes:
        if task is None and posted:
            # the first WQE is on the wire: the attacker learns its first PSN
            while not tb.fabric.directions[0].log:
                await tb.cycles(4)
            una = await a.dev.rel.read("una_psn", qa)
            task = cocotb.start_soon(attacker())
        if a.qp.outstanding >= a.qp.sq_size:
            early += await a.qp.send_cq.wait(1, timeout_cycles=2_000_000)
        wr_id = await a.qp.post_send(WrOpcode.WRITE, local_addr=a.send_buf + offset, length=n,
                                     remote_addr=b.recv_buf + offset, rkey=b.mr.rkey)
        posted.append(wr_id)
        offset += n
    cqes = early + await a.qp.send_cq.wait(len(posted) - len(early), timeout_cycles=4_000_000)
    done[0] = True
    await task
    assert [(c.wr_id, c.status, c.byte_len) for c in cqes] == [
        (w, Completion.SUCCESS, n) for w, n in zip(posted, sizes, strict=True)]
    assert b.dev.mem.read(b.recv_buf, len(payload)) == payload
    assert len(tb.fabric.injected) >= 2 * len(attacks), "the transfer outran the attacker"
    await tb.quiesce()
    ca, cb = await tb.counters(0), await tb.counters(1)
    got = {reason: (ca if nic == 0 else cb)[reason] for nic, _, reason, _ in attacks}
    assert got == sent, (got, sent)
    for _, _, _, case in attacks[:k_sent[0]]:
        fcov.sample_forged(case)
    assert ca["rel.acks_unsent"] == 0 and ca["rel.naks_trimmed"] == 0
    assert ca["rel.retx_nak"] == 0 and cb["rx.naks_sent"] == 0 and cb["rx.trimmed"] == 0
    await tb.check_counters(0, packets=total, messages=len(sizes))
    await tb.check_counters(1, packets=0, messages=0)


def test_attacker():
    run_two_nic("tests.system.test_attacker",
                ["test_forged_ack_with_every_path_down",
                 "test_forged_acks_over_ipv6_and_across_families",
                 "test_forged_naks_cost_one_retransmit",
                 "test_attacker_during_transfer"], "attacker")

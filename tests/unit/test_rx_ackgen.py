"""hw/rx/ackgen.py ``RxAckBuilder`` on its own, in Amaranth's simulator: ACKs,
NAKs and probe responses of random fields, back to back, each frame
byte-exact against the scapy layers' (host_driver/layers.py; their ICRC
included), with random backpressure on ``m_axis``; built with ``ipv6``, the
jobs with ``v6`` set go over IPv6, with the job's flow label (the data's,
echoed), and the others over IPv4, mixed."""

import ipaddress

import pytest
from amaranth.sim import Simulator

from host_driver import layers as L
from hw.rx.ackgen import RxAckBuilder
from tests import seeds

from .simstream import collect_frames, send_record

OWN_MAC, OWN_IP, OWN_IP6 = "02:00:00:00:00:0a", "10.9.0.1", "2001:db8:9::1"
PEER_IP, PEER_IP6 = "10.9.0.2", "2001:db8:9:4::2"
SACK_BITS = 64


def mac_int(mac: str) -> int:
    return int(mac.replace(":", ""), 16)


def reference(job: dict) -> bytes:
    v6 = job.get("v6", 0)
    addr = dict(src_mac=OWN_MAC, dst_mac="02:00:00:00:00:0b",
                src_ip=OWN_IP6 if v6 else OWN_IP, dst_ip=PEER_IP6 if v6 else PEER_IP,
                flow_label=job["flow"] if v6 else 0)
    if job["probe"]:
        return bytes(L.probe_packet(response=True, dqpn=job["dqpn"], probe_id=job["probe_id"],
                                    ev=job["ev"], timestamp=job["timestamp"], **addr))
    return bytes(L.ack_packet(dqpn=job["dqpn"], cum_psn=job["cum_psn"],
                              sack_base=job["sack_base"], bitmap=job["bitmap"],
                              sack_bits=SACK_BITS, syndrome=job["syndrome"], msn=job["msn"],
                              psn=job["psn"], ece=job["ece"], ce_count=job["ce_count"],
                              svc_time=job["svc_time"], ev=job["ev"], **addr))


@pytest.mark.parametrize("w,ipv6", [(64, False), (64, True), (128, True)],
                         ids=["64", "64-ipv6", "128-ipv6"])
def test_frames_match_scapy(w, ipv6):
    rng = seeds.rng(w + ipv6)
    dut = RxAckBuilder(w, SACK_BITS, ipv6=ipv6)
    jobs = []
    for _ in range(24):
        ev = rng.getrandbits(16)
        job = dict(probe=rng.getrandbits(1), syndrome=rng.choice([0x1F, 0x60, 0x70]),
                   psn=rng.getrandbits(24), dqpn=rng.getrandbits(24), msn=rng.getrandbits(24),
                   cum_psn=rng.getrandbits(24), sack_base=rng.getrandbits(24),
                   bitmap=rng.getrandbits(SACK_BITS), ece=rng.getrandbits(1),
                   ce_count=rng.getrandbits(16), svc_time=rng.getrandbits(16), ev=ev,
                   dst_mac=mac_int("02:00:00:00:00:0b"), probe_id=rng.getrandbits(32),
                   probe_ev=ev, timestamp=rng.getrandbits(64))
        if ipv6:  # the flow label echoed over IPv6; an IPv4 frame has none
            job["v6"], job["flow"] = rng.getrandbits(1), rng.getrandbits(20)
        job["dst_ip"] = int(ipaddress.ip_address(PEER_IP6 if job.get("v6") else PEER_IP))
        jobs.append(job)
    got = []

    async def feed(ctx):
        ctx.set(dut.own_mac, mac_int(OWN_MAC))
        ctx.set(dut.own_ip, int(ipaddress.ip_address(OWN_IP)))
        if ipv6:
            ctx.set(dut.own_ip6, int(ipaddress.ip_address(OWN_IP6)))
        for job in jobs:
            await send_record(ctx, dut.job, [(dut.job.payload, job)])

    async def collect(ctx):
        axis = dut.m_axis
        await collect_frames(ctx, axis.tvalid, axis.tready, axis.tdata, axis.tkeep, axis.tlast,
                             got, len(jobs), seed=5)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(feed)
    sim.add_testbench(collect)
    sim.run_until(1e-8 * 5000)
    assert len(got) == len(jobs)
    kinds = set()
    for job, frame in zip(jobs, got, strict=True):
        kinds.add((job.get("v6", 0), job["probe"]))
        assert L.check_frame(frame) == (True, True), job
        assert frame == reference(job), job
    assert len(kinds) == (4 if ipv6 else 2), kinds

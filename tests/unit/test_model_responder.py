"""Responder behaviour packet by packet: PSN window, duplicates, coalescing,
SACK width, ECN echo, NAKs; and the QP state machine."""

from __future__ import annotations

import pytest

from sim.model import INIT, RTR, RTS, QpConfig, World, explicit_evs
from sim.model.packet import (
    ACK,
    AETH_ACK,
    NAK_REMOTE_ACCESS,
    NAK_TRIMMED,
    OP_WRITE_FIRST,
    OP_WRITE_LAST_IMM,
    OP_WRITE_MIDDLE,
    OP_WRITE_ONLY,
    PSN_MASK,
    Packet,
)

START = PSN_MASK - 5  # every test crosses the 24-bit wrap


def setup(**cfg_kw):
    cfg = QpConfig(start_psn=START, **{"mtu": 256, "ack_every": 4, "ack_delay_ns": 1000.0,
                                       **cfg_kw})
    w = World(seed=1, planes=1, paths_per_plane=4)
    w.add_host("a")
    w.add_host("b")
    conn = w.connect("a", "b", cfg=cfg, evs=explicit_evs([0xC000, 0xC001]), mr_length=1 << 20)
    acks = []
    w.fabric.taps.append(lambda p, now: acks.append(p) if p.kind == ACK else None)
    return w, conn, acks


def data(conn, w, k, opcode=OP_WRITE_MIDDLE, ce=False, ackreq=False, trimmed=False, imm=None,
         va_off=None, rkey=None):
    a, b = w.nics["a"].host, w.nics["b"].host
    psn = (START + k) & PSN_MASK
    off = k * 256 if va_off is None else va_off
    # 256-byte packets (the MTU) with the RETH DMA length of a message they can
    # be part of: FIRST and LAST of two packets, ONLY of one, MIDDLE of 16
    dma_len = {OP_WRITE_FIRST: 512, OP_WRITE_LAST_IMM: 512, OP_WRITE_ONLY: 256}.get(opcode, 4096)
    pkt = Packet.data_packet(a, b, 0, 0xC000, conn.responder.qpn, psn, opcode,
                             conn.mr.va + off, conn.rkey if rkey is None else rkey, dma_len, 256,
                             imm, ackreq=ackreq)
    pkt.ce = ce
    if trimmed:
        pkt.trim()
    conn.responder.on_data(pkt)
    return pkt


def test_in_order_coalesced_every_n():
    w, conn, acks = setup(ack_every=4)
    for k in range(8):
        data(conn, w, k)
    assert len(acks) == 2
    assert acks[-1].cum_psn == (START + 7) & PSN_MASK
    assert acks[-1].sack_base == (START + 8) & PSN_MASK
    assert acks[-1].syndrome == AETH_ACK


def test_coalescing_timer_sends_the_rest():
    w, conn, acks = setup(ack_every=4, ack_delay_ns=1500.0)
    data(conn, w, 0)
    assert acks == []
    w.run(until=1499.0)
    assert acks == []
    w.run(until=1501.0)
    assert len(acks) == 1 and acks[0].cum_psn == START


def test_ackreq_acks_at_once():
    w, conn, acks = setup()
    data(conn, w, 0, ackreq=True)
    assert len(acks) == 1


def test_out_of_order_sack_bitmap_and_width():
    w, conn, acks = setup(ack_every=1, sack_bits=32)
    for k in range(1, 41):  # PSN START+0 missing
        data(conn, w, k)
    last = acks[-1]
    assert last.cum_psn == (START - 1) & PSN_MASK
    assert last.sack_base == START
    # bit i = sack_base + i received: bits 1..31 (bit 0 is the hole); 32 bits wide
    assert last.sack_bitmap == ((1 << 32) - 1) & ~1
    data(conn, w, 0)  # fill the hole: cumulative jumps over all 41
    assert acks[-1].cum_psn == (START + 40) & PSN_MASK
    assert acks[-1].sack_bitmap == 0


def test_duplicates_dropped_and_reacked():
    w, conn, acks = setup(ack_every=100)
    data(conn, w, 0)
    data(conn, w, 2)
    n = len(acks)
    data(conn, w, 0)  # below cumulative
    data(conn, w, 2)  # already in the bitmap
    assert len(acks) == n + 2
    assert conn.responder.stats["rx_dup"] == 2
    assert conn.responder.stats["rx_bytes"] == 2 * 256


def test_beyond_window_rejected():
    w, conn, _ = setup(mpr=1)  # 128 PSNs
    data(conn, w, 127, va_off=0)
    data(conn, w, 128, va_off=0)
    st = conn.responder.stats
    assert st["rx_out_of_window"] == 1
    assert st["rx_data"] == 1


def test_ecn_echo():
    w, conn, acks = setup(ack_every=3)
    data(conn, w, 0, ce=True)
    data(conn, w, 1)
    data(conn, w, 2, ce=True)
    assert acks[-1].ece and acks[-1].ce_count == 2
    for k in range(3, 6):
        data(conn, w, k)
    assert not acks[-1].ece and acks[-1].ce_count == 0


def test_trimmed_packet_naks_with_its_psn():
    w, conn, acks = setup()
    data(conn, w, 1, trimmed=True)
    assert len(acks) == 1
    nak = acks[0]
    assert nak.syndrome == NAK_TRIMMED and nak.psn == (START + 1) & PSN_MASK
    assert conn.responder.stats["rx_bytes"] == 0


def test_trim_nack_off_drops_silently():
    w, conn, acks = setup(trim_nack=False)
    data(conn, w, 1, trimmed=True)
    assert acks == [] and conn.responder.stats["rx_trimmed"] == 1


def test_bad_rkey_and_bounds_nak_remote_access():
    w, conn, acks = setup()
    data(conn, w, 0, rkey=0xDEAD)
    data(conn, w, 0, va_off=(1 << 20) - 100)  # runs past the region
    assert [a.syndrome for a in acks] == [NAK_REMOTE_ACCESS, NAK_REMOTE_ACCESS]
    assert conn.responder.stats["rx_access_err"] == 2


def test_receive_completions_in_message_order():
    """The LAST of message 2 arrives before message 1 is complete: completions
    still come out in order, when the cumulative PSN passes each LAST."""
    w, conn, _ = setup(ack_every=100)
    r = conn.responder
    data(conn, w, 3, opcode=OP_WRITE_LAST_IMM, imm=22)  # message 2 = PSN 2..3
    data(conn, w, 1, opcode=OP_WRITE_LAST_IMM, imm=11)  # message 1 = PSN 0..1
    data(conn, w, 2, opcode=OP_WRITE_FIRST)
    assert r.recv_cq == []
    data(conn, w, 0, opcode=OP_WRITE_FIRST)
    assert [c.imm for c in r.recv_cq] == [11, 22]
    assert [c.byte_len for c in r.recv_cq] == [512, 512]  # the two-packet messages
    data(conn, w, 4, opcode=OP_WRITE_ONLY)  # no immediate: no receive completion
    assert len(r.recv_cq) == 2


def test_state_machine():
    w = World(seed=1)
    w.add_host("a")
    w.add_host("b")
    nic = w.nics["a"]
    from sim.model.ev import EvTable

    qp = nic.create_qp(7, "mrc", QpConfig(), EvTable([(0xC000, 0)], 1))
    assert qp.state == "RESET"
    with pytest.raises(ValueError):
        qp.modify(RTS)
    with pytest.raises(ValueError):
        qp.post_write(1, 0, 0, 10)
    qp.modify(INIT)
    with pytest.raises(ValueError):
        qp.modify(RTR)  # needs the peer
    qp.modify(RTR, peer=w.nics["b"].host, dqpn=9)
    qp.modify(RTS)
    qp.post_write(1, 0, 0, 10)
    qp.modify("ERROR")
    assert qp.state == "ERROR"
    assert [c.status for c in qp.send_cq] == ["WR_FLUSH_ERR"]


@pytest.mark.parametrize("bad", [dict(mtu=1000), dict(mpr=0), dict(mpr=256), dict(rto_exp=25),
                                 dict(linear_cnt=8), dict(exp_cnt=26), dict(sack_bits=48)])
def test_config_validation(bad):
    with pytest.raises(ValueError):
        QpConfig(**bad).validate()


def test_max_wimm_bounds_early_immediates():
    w, conn, _ = setup(ack_every=100, max_wimm=1)
    r = conn.responder
    data(conn, w, 2, opcode=OP_WRITE_LAST_IMM, imm=1)
    data(conn, w, 4, opcode=OP_WRITE_LAST_IMM, imm=2)  # a second early LAST: no room
    assert r.stats["rx_wimm_full"] == 1 and r.stats["rx_data"] == 1


def test_service_time_counts_from_the_newest_packet_placed():
    """An ACK's svc_time is the time from the newest packet placed to the ACK, in
    64 ns units rounded down: 0 for one sent on that packet's arrival, the rest
    of the timer for one the timer sends, and saturated (SVC_TIME_MAX) past
    65,535 units."""
    from hw.protocol import SVC_TIME_MAX

    w, conn, acks = setup(ack_every=4, ack_delay_ns=1500.0)
    for k in range(4):
        data(conn, w, k)
    assert len(acks) == 1 and acks[0].svc_time == 0
    data(conn, w, 4)
    # packet 5 arrives 400 ns into the timer that packet 4 started
    w.engine.after(400.0, lambda k: data(conn, w, k), 5)
    w.run(until=1600.0)
    assert len(acks) == 2 and acks[1].cum_psn == (START + 5) & PSN_MASK
    assert acks[1].svc_time == 1100 // 64
    w2, conn2, acks2 = setup(ack_every=4, ack_delay_ns=4_300_000.0)
    data(conn2, w2, 0)
    w2.run(until=5_000_000.0)
    assert len(acks2) == 1 and acks2[0].svc_time == SVC_TIME_MAX


@pytest.mark.parametrize("svc", [0, 11, 65_534, 65_535])
def test_requester_takes_the_service_time_off_its_rtt_sample(svc):
    """The RTT sample NSCC gets from an ACK is its arrival less the newest packet's
    send time less the ACK's service time (``svc`` units of 64 ns, set on the
    ACK as it leaves the responder), not below 0; a saturated service time
    leaves no sample."""
    from hw.protocol import SVC_TIME_MAX

    w, conn, acks = setup()
    req = conn.requester
    sent, samples = [], []

    def tap(p, now):
        if p.kind == ACK:
            p.svc_time = svc
        else:
            sent.append(now)

    w.fabric.taps.append(tap)

    class Spy:  # the QP's NSCC, recording each ACK's sample
        def __init__(self, cc):
            self.cc = cc

        def on_ack(self, now, acked, ece, rtt):
            samples.append((now, rtt))
            self.cc.on_ack(now, acked, ece, rtt)

        def __getattr__(self, name):
            return getattr(self.cc, name)

    req.cc = Spy(req.cc)
    req.post_write(1, conn.mr.va, conn.rkey, 256)
    w.run(until=200_000.0)
    assert len(acks) == 1 and len(samples) == 1
    now, rtt = samples[0]
    if svc == SVC_TIME_MAX:
        assert rtt is None
    else:
        assert rtt == pytest.approx(max(now - sent[0] - 64 * svc, 0.0))
        assert (rtt > 0) == (svc < 1000 // 64)  # the path's round trip: under 1 us

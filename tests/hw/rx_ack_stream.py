"""Checks of the responder's ACK stream under fuzzed traffic (shared by
test_rx_pipeline.py and test_rx_engine.py).

Every frame on ``m_axis_ack`` is decoded and its IPv4 checksum and ICRC checked
(``RxTB.decode_ack``). Their number and order depend on when the engine marks
packets (at their B responses) and on its ACK timers, which the model does not
follow, so the stream is held to rules that hold whatever the timing:

- an ACK's PSN is its cum_psn, its sack_base is cum_psn + 1 and its bitmap's
  bit 0 is clear (that PSN would be the cumulative one);
- per QP, cum_psn and MSN never go back;
- every PSN an ACK names as received (up to cum_psn, or a SACK bit) was
  accepted by the model: nothing is acknowledged that was not placed;
- the NAKs (syndrome, PSN) and probe responses are exactly the model's, in
  order (a NAK is sent at once on its packet's check);
- the last ACK of each QP, sent for a duplicate once everything is settled,
  has exactly the model's cum_psn, bitmap and MSN (``final``).
"""

from __future__ import annotations

from host_driver.layers import PSN_MASK, write_packet

OWN_MAC, OWN_IP = "02:00:00:00:00:02", "10.0.0.2"  # the benches' responder

AETH_ACK = 0x1F
HALF = 1 << 23


def _after_or_at(a: int, b: int) -> bool:
    """PSN (or MSN) ``a`` is at or after ``b`` (24-bit serial numbers)."""
    return (a - b) & PSN_MASK < HALF


def biased_psn(rng, epsn: int, window: int) -> int:
    """A PSN where the checks decide: within 8 of the expected PSN or of the
    window's far edge (``epsn + window``) most of the time, else anywhere."""
    r = rng.random()
    if r < 0.4:
        return (epsn + rng.randrange(-8, 9)) & PSN_MASK
    if r < 0.7:
        return (epsn + window + rng.randrange(-8, 9)) & PSN_MASK
    if r < 0.8:
        return rng.getrandbits(24)
    return (epsn + rng.randrange(-20, window + 20)) & PSN_MASK


class AckStream:
    """The ACK frames of one run, checked as they are collected.

    ``peers`` maps each QP's PEER_QPN (the ACK's DestQP) to its QPN.
    """

    def __init__(self, tb, peers: dict[int, int]):
        self.tb, self.peers = tb, peers
        self.last: dict[int, dict] = {}
        self.naks: list[tuple] = []
        self.probes: list[dict] = []
        self.frames = 0
        self.acks = 0

    def collect(self):
        """Decode the frames sent so far and check each (see the module doc)."""
        model = self.tb.model
        for raw in self.tb.ack_frames():
            a = self.tb.decode_ack(raw)  # checksum, ICRC, addresses, length
            self.frames += 1
            if a.get("probe"):
                self.probes.append(a)
                continue
            qpn = self.peers[a["dqpn"]]
            if a["syndrome"] != AETH_ACK:
                self.naks.append((qpn, a["syndrome"], a["psn"]))
                continue
            self.acks += 1
            cum = a["cum_psn"]
            assert a["psn"] == cum and a["sack_base"] == (cum + 1) & PSN_MASK, a
            assert a["bitmap"] & 1 == 0, a
            prev = self.last.get(qpn)
            if prev is not None:
                assert _after_or_at(cum, prev["cum_psn"]), (prev, a)
                assert _after_or_at(a["msn"], prev["msn"]), (prev, a)
            placed = model.qps[qpn].placed
            start = prev["cum_psn"] if prev is not None else (model.qps[qpn].cfg["epsn"] - 1)
            for i in range((cum - start) & PSN_MASK):
                psn = (start + 1 + i) & PSN_MASK
                assert psn in placed, f"QP {qpn}: ACK {a} covers PSN {psn}, never placed"
            for i in range(len(bin(a["bitmap"])) - 2):
                if a["bitmap"] >> i & 1:
                    psn = (cum + 1 + i) & PSN_MASK
                    assert psn in placed, f"QP {qpn}: ACK {a} SACKs PSN {psn}, never placed"
            self.last[qpn] = a

    def check_model_naks_and_probes(self):
        """The NAKs and probe responses are exactly the model's, in order."""
        want_naks, want_probes = [], []
        model = self.tb.model
        for w in model.acks:
            if w.get("probe"):
                want_probes.append(w)
            elif w["syndrome"] != AETH_ACK:
                want_naks.append((self.peers[w["dqpn"]], w["syndrome"], w["psn"]))
        model.acks.clear()
        assert self.naks == want_naks, f"NAKs {self.naks[:8]}..., want {want_naks[:8]}..."
        assert self.probes == want_probes
        self.naks.clear()
        self.probes.clear()

    async def poke(self, qpn: int, *, va: int, rkey: int):
        """Send a zero-length duplicate (the PSN before the expected one) to a
        writable region: its ACK, sent at once, names the QP's settled state,
        which ``final`` compares with the model's."""
        q = self.tb.model.qps[qpn]
        self.tb.send(write_packet(opcode=0x0A, dqpn=qpn, psn=q.epsn - 1, va=va, rkey=rkey,
                                  dma_len=0, dst_ip=OWN_IP, dst_mac=OWN_MAC))
        await self.tb.drain()
        self.collect()
        self.final(qpn)
        self.tb.model.acks.clear()  # (compared by ``final``)

    def final(self, qpn: int):
        """The QP's last ACK (sent for a duplicate after everything settled)
        names exactly the model's state."""
        q = self.tb.model.qps[qpn]
        a = self.last[qpn]
        bitmap = sum(1 << i for i in range(self.tb.sack_bits)
                     if (q.epsn + i) & PSN_MASK in q.recv)
        got = (a["cum_psn"], a["bitmap"], a["msn"])
        assert got == ((q.epsn - 1) & PSN_MASK, bitmap, q.msn), (qpn, got, q.epsn, q.msn)

"""Independent checks of a run: what a scoreboard asserts about the transport.

``AckAudit`` watches the fabric (not the model's own bookkeeping): it records
every data PSN that actually reached a responder and checks every ACK/NAK a
responder sends against it, so "no PSN is acknowledged that was not
received" is tested from the outside. ``check_delivery`` compares memory and
completions with what was posted.
"""

from __future__ import annotations

from .packet import ACK, DATA, PSN_MASK, psn_diff


class AckAudit:
    """Install on a World before running; ``violations`` lists any bad ACK."""

    def __init__(self, world) -> None:
        self.world = world
        self.received: dict[int, set[int]] = {}  # responder qpn -> received PSNs
        self.cum: dict[int, int] = {}  # responder qpn -> audited cumulative PSN
        self.violations: list[str] = []
        self.acks_checked = 0
        world.fabric.delivery_hooks.append(self._delivered)
        world.fabric.taps.append(self._sent)

    def _responder_of(self, requester_qpn: int):
        for c in self.world.connections:
            if c.requester.qpn == requester_qpn:
                return c.responder
        return None

    def _delivered(self, pkt, now) -> None:
        if pkt.kind != DATA or pkt.trimmed:
            return
        qpn = pkt.dqpn
        rcv = self.received.setdefault(qpn, set())
        rcv.add(pkt.psn)
        if qpn not in self.cum:
            resp = next(c.responder for c in self.world.connections if c.responder.qpn == qpn)
            self.cum[qpn] = (resp.rq_psn - 1) & PSN_MASK
        cum = self.cum[qpn]
        while ((cum + 1) & PSN_MASK) in rcv:
            cum = (cum + 1) & PSN_MASK
        self.cum[qpn] = cum

    def _sent(self, pkt, now) -> None:
        if pkt.kind != ACK:
            return
        resp = self._responder_of(pkt.dqpn)
        if resp is None:
            return
        self.acks_checked += 1
        qpn = resp.qpn
        rcv = self.received.get(qpn, set())
        audited = self.cum.get(qpn, (resp.rq_psn - 1) & PSN_MASK)
        if psn_diff(pkt.cum_psn, audited) > 0:
            self.violations.append(
                f"t={now}: ACK cum_psn {pkt.cum_psn:#x} beyond what arrived ({audited:#x})")
        bitmap = pkt.sack_bitmap
        while bitmap:
            low = bitmap & -bitmap
            psn = (pkt.sack_base + low.bit_length() - 1) & PSN_MASK
            if psn not in rcv:
                self.violations.append(f"t={now}: SACK of PSN {psn:#x} that never arrived")
            bitmap ^= low


def check_delivery(conn, posted: list[tuple[int, int, bytes, int | None]]) -> list[str]:
    """Compare a connection's result with what was posted.

    ``posted`` = [(wr_id, offset in the MR, data, imm)] in post order. Returns
    a list of problems (empty when the memory holds exactly the data, every
    WR completed successfully in order, and every immediate arrived in order
    with its length).
    """
    problems = []
    req, resp, mr = conn.requester, conn.responder, conn.mr
    done = [c for c in req.send_cq]
    if [c.wr_id for c in done] != [p[0] for p in posted]:
        problems.append(f"send completions {[c.wr_id for c in done]} != posted order")
    for c in done:
        if c.status != "SUCCESS":
            problems.append(f"wr {c.wr_id} completed with {c.status}")
    if mr.buf is not None:
        for wr_id, off, data, _ in posted:
            if bytes(mr.buf[off:off + len(data)]) != data:
                problems.append(f"wr {wr_id}: memory differs from the data written")
    total = sum(len(p[2]) for p in posted)
    if resp.stats["rx_bytes"] != total:
        problems.append(f"responder accepted {resp.stats['rx_bytes']} bytes, {total} were written")
    imms = [(p[3], len(p[2])) for p in posted if p[3] is not None]
    got = [(c.imm, c.byte_len) for c in resp.recv_cq]
    if got != imms:
        problems.append(f"receive completions {got[:5]}... != immediates posted {imms[:5]}...")
    return problems

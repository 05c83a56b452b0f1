"""Differential test of the RX benches' scoreboard (``RxModel``, tests/hw/rx_tb.py)
against the golden model's responder (docs/verification.md, "Differential
testing").

The golden model's responder is ``MrcQp`` (sim/model/qp.py); the model NIC
(sim/nicmodel) runs it behind NicCore's registers, with RX's rules where
docs/model.md says the hardware's differ (check order, the shared
pending-completion table, the receive CQ, stale trims). hypothesis draws
packet traces for three QPs (in order, reordered, duplicates, stale PSNs,
out of the window, far beyond the next PSN sent, trimmed, probes, bad
lengths, R_Keys, protection domains and bounds, ECN marks, AckReq, the host
freeing CQ slots, a QP initialised again) and hands each packet to both, as
``RxModel`` records and as golden-model ``Packet``s. They must agree on every
verdict (the RX counters), the bytes placed, the ACK/NAK stream (syndrome,
PSN, cumulative PSN, SACK base and bitmap, MSN, ECE and CE count, in order),
the probe answers and the receive CQEs.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from host_driver.layers import IMM_OPCODES, PSN_MASK
from hw.nic.core import BLOCK_ORDER
from hw.rx.mr_table import make_rkey
from sim.model.packet import ACK, DATA, PROBE_REQ, PROBE_RESP, Forged, Packet
from sim.nicmodel import ModelFabric, ModelNic
from sim.system.top import NIC_PARAMS
from tests.hw.rx_tb import OWN_IP, OWN_MAC, QpModel, RxModel, ip2int, mac2int

PEER_IP = "10.0.0.1"
PARAMS = {**NIC_PARAMS, "mpr_max": 1024}
MRS = (  # (base, length, rkey, access, pd)
    (0x10000, 0x8000, make_rkey(0, tag=0x11), 3, 0),  # entry i's R_Key names entry i
    (0x20003, 0x1001, make_rkey(1, tag=0x22), 3, 0),  # unaligned
    (0x30000, 0x1000, make_rkey(2, tag=0x33), 1, 0),  # no REMOTE_WRITE
    (0x40000, 0x2000, make_rkey(3, tag=0x44), 3, 1),  # protection domain 1
)
# QPN -> (epsn, mpr, ack_n, trim_nack, mtu code, pd, cq_log2)
QPS = {
    1: (0, 1, 1, 1, 1, 0, 2),  # window 128, MTU 256, a CQ of 4
    2: (PSN_MASK - 40, 2, 3, 0, 2, 0, 3),  # across the 2^24 wrap, MTU 512
    3: (1000, 1, 2, 1, 1, 1, 5),  # protection domain 1
}
MTU = {1: 256, 2: 512}
CQ_BASE = 0x80000


def _addr(nic, name, index=0):
    reg = nic.maps["rx"][name]
    return BLOCK_ORDER.index("rx") << nic.block_bits | reg.addr(index)


class Pair:
    """The same RX configuration in an ``RxModel`` and in a model NIC."""

    def __init__(self):
        self.fabric = ModelFabric()
        self.nic = ModelNic(PARAMS, self.fabric)
        self.peer = ModelNic(PARAMS, self.fabric)
        self.peer.write32(_addr(self.peer, "OWN_IP"), ip2int(PEER_IP))
        tx_src = BLOCK_ORDER.index("tx") << self.peer.block_bits | self.peer.maps["tx"][
            "src_ip"].addr()
        self.peer.write32(tx_src, ip2int(PEER_IP))
        self.rx = RxModel(num_qps=PARAMS["num_qps"], sack_bits=PARAMS["sack_bits"],
                          mpr_max=PARAMS["mpr_max"])
        self.sent: list[Packet] = []
        self.nic.core.send_control = self.sent.append  # ACKs, NAKs, probe answers
        mac = mac2int(OWN_MAC)
        for name, v in (("OWN_IP", ip2int(OWN_IP)), ("OWN_MAC_LO", mac & 0xFFFFFFFF),
                        ("OWN_MAC_HI", mac >> 32)):
            self.w(name, v)
        for i, (base, length, rkey, access, pd) in enumerate(MRS):
            for name, v in (("MR_BASE_LO", base), ("MR_BASE_HI", 0), ("MR_LENGTH", length),
                            ("MR_RKEY", rkey), ("MR_ACCESS", access | pd << 8)):
                self.w(name, v, i)
            self.rx.mrs[i] = dict(base=base, length=length, rkey=rkey, access=access, pd=pd)
        for q in QPS:
            self.init_qp(q)

    def w(self, name, value, index=0):
        self.nic.write32(_addr(self.nic, name, index), value)

    def init_qp(self, q, epsn=None):
        e, mpr, ack_n, trim_nack, mtu, pd, log2 = QPS[q]
        epsn = e if epsn is None else epsn
        cq_base = CQ_BASE + 0x1000 * q
        self.w("QP_PEER_IP", ip2int(PEER_IP), q)
        self.w("QP_CTRL", 3 | trim_nack << 3 | mtu << 4 | mpr << 8 | pd << 16, q)
        self.w("QP_ACK", ack_n | 0xFFFF << 16, q)
        self.w("QP_PEER_QPN", 0x100 + q, q)
        self.w("QP_CQ_BASE_LO", cq_base, q)
        self.w("QP_CQ_CTRL", log2 | 1 << 31, q)
        self.w("QP_CQ_CONS", 0, q)
        self.w("QP_EPSN", epsn, q)
        self.rx.qps[q] = QpModel(dict(
            peer_ip=ip2int(PEER_IP), peer_qpn=0x100 + q, epsn=epsn, state=3, mpr=mpr,
            ack_n=ack_n, ack_t=0xFFFF, trim_nack=trim_nack, cq_base=cq_base, cq_log2=log2,
            cq_enable=1, cq_cons=0, mtu=128 << mtu, pd=pd))

    def set_cq_cons(self, q, cons):
        self.w("QP_CQ_CONS", cons & 0xFFFF, q)
        self.rx.qps[q].cfg["cq_cons"] = cons & 0xFFFF

    def send(self, p: dict):
        """One packet to both: ``p`` names its fields as RxModel's record does."""
        op = p["bth.opcode"]
        kind = {0x11: ACK, 0xC0: PROBE_REQ, 0xC1: PROBE_RESP}.get(op, DATA)
        src, dst = self.peer.host, self.nic.host
        if kind == DATA:
            pkt = Packet.data_packet(src, dst, 0, p["ev"], p["bth.dqpn"], p["bth.psn"], op,
                                     p["reth.va"], p["reth.rkey"], p["reth.dma_len"],
                                     p["payload_len"], p.get("imm"),
                                     ackreq=bool(p["bth.ackreq"]), data=p["payload"])
            pkt.ce = p["ecn"] == 3
            if p["trimmed"]:
                pkt.trim()
        else:
            pkt = Packet(kind, src, dst, 0, p["ev"], p["bth.dqpn"])
            pkt.probe_id, pkt.timestamp = p.get("probe.probe_id", 0), 0
        forged = {k: v for k, v in (("src_ip", p["ip_src"]), ("dst_ip", p["ip_dst"]))
                  if v != ip2int({"src_ip": PEER_IP, "dst_ip": OWN_IP}[k])}
        if forged:
            pkt.forged = Forged(**forged)
        self.nic.core.receive(pkt)
        rec = {k: v for k, v in p.items() if k != "payload"}
        if p["trimmed"]:
            rec["payload_len"] = 0
        return self.rx.frame(rec, b"" if p["trimmed"] else p["payload"])

    def golden_acks(self):
        out = []
        for a in self.sent:
            if a.kind == PROBE_RESP:
                out.append(dict(probe=True, ev=a.ev, dqpn=a.dqpn, probe_id=a.probe_id))
                continue
            out.append(dict(syndrome=a.syndrome, psn=a.psn, cum_psn=a.cum_psn,
                            sack_base=a.sack_base, bitmap=a.sack_bitmap, msn=a.msn,
                            ece=int(a.ece), ce_count=a.ce_count, dqpn=a.dqpn))
        self.sent.clear()
        return out

    def rx_acks(self):
        keys = ("syndrome", "psn", "cum_psn", "sack_base", "bitmap", "msn", "ece", "ce_count",
                "dqpn")
        out = [dict(probe=True, ev=a["ev"], dqpn=a["dqpn"], probe_id=a["probe_id"])
               if a.get("probe") else {k: a[k] for k in keys} for a in self.rx.acks]
        self.rx.acks.clear()
        return out

    def check(self, step):
        got, want = self.rx_acks(), self.golden_acks()
        assert got == want, f"step {step}: ACKs\n RxModel {got}\n golden  {want}"
        counts = {k: v for k, v in self.rx.count.items() if v}
        golden = {k: v for k, v in self.nic.rx_cnt.items() if v and k != "parser_accepted"}
        assert counts == golden, f"step {step}: counters\n RxModel {counts}\n golden  {golden}"

    def check_memory(self):
        mem = bytearray(self.nic.mem.read(0, CQ_BASE + 0x1000 * (max(QPS) + 1)))
        want = bytearray(len(mem))
        for addr, data in self.rx.writes + self.rx.cqes:
            want[addr:addr + len(data)] = data
        if mem != want:
            bad = next(i for i in range(len(mem)) if mem[i] != want[i])
            raise AssertionError(f"memory differs first at {bad:#x}: golden {mem[bad]:#04x}, "
                                 f"RxModel {want[bad]:#04x}")


# ---- traces ------------------------------------------------------------------------------

PSN_KINDS = ("in_order", "in_order", "reorder", "duplicate", "stale", "out_of_window",
             "far", "window_edge")


@st.composite
def steps(draw):
    kind = draw(st.sampled_from(("data",) * 12 + ("probe", "cq_cons", "init", "spoof")))
    step = dict(kind=kind, qpn=draw(st.sampled_from(tuple(QPS))))
    if kind in ("probe", "cq_cons", "init"):
        step["n"] = draw(st.integers(0, 8))
        return step
    step.update(
        psn=draw(st.sampled_from(PSN_KINDS)),
        delta=draw(st.integers(1, 140)),
        opcode=draw(st.sampled_from((0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x0A, 0x0B))),
        length=draw(st.sampled_from(("mtu",) * 4 + ("short",) * 4 + ("zero", "long", "any"))),
        any_len=draw(st.integers(0, 1100)),
        msg=draw(st.integers(0, 3)),
        region=draw(st.sampled_from(("good",) * 15 + ("rkey", "pd", "below", "above",
                                                       "no_write"))),
        offset=draw(st.integers(0, 2048)),
        trimmed=draw(st.integers(0, 9)) == 0,
        ackreq=draw(st.booleans()),
        ce=draw(st.booleans()),
        source=draw(st.sampled_from(("peer",) * 8 + ("other_src", "not_for_us"))),
        dqpn=draw(st.sampled_from((0, 9, 16, 0xFFFFFF))),
    )
    return step


def build(pair: Pair, step: dict, sent: dict, k: int) -> dict:
    """The packet of a trace step, its PSN relative to the QP's state now."""
    q = step["qpn"] if step["kind"] != "spoof" else step["dqpn"]
    qm = pair.rx.qps.get(step["qpn"])
    mtu = MTU.get(QPS[step["qpn"]][4], 256)
    epsn, w = qm.epsn, pair.rx.window(qm)
    hi = sent.get(step["qpn"], epsn)
    psn = {
        "in_order": epsn,
        "reorder": epsn + step["delta"] % 12,
        "duplicate": hi - 1 - step["delta"] % 8,
        "stale": epsn - step["delta"],
        "out_of_window": epsn + w + step["delta"] % 8,
        "far": epsn + (1 << 23) + step["delta"] - 70,
        "window_edge": epsn + w - 1 - step["delta"] % 3,
    }[step["psn"]] & PSN_MASK
    sent[step["qpn"]] = max(hi, psn, key=lambda x: (x - epsn) & PSN_MASK)
    op = step["opcode"]
    length = {"mtu": mtu, "short": mtu // 4 + 3, "zero": 0, "long": mtu + 1,
              "any": step["any_len"]}[step["length"]]
    if op in (0x06, 0x07) and step["length"] != "any":
        length = mtu
    before = {0x07: mtu * (1 + step["msg"]), 0x08: mtu * (1 + step["msg"]),
              0x09: mtu * (1 + step["msg"])}.get(op, 0)
    after = {0x06: mtu * step["msg"] + 7, 0x07: mtu * step["msg"] + 7}.get(op, 0)
    dma_len = before + length + after
    mr = MRS[3] if QPS[step["qpn"]][5] == 1 else MRS[step["offset"] % 2]
    base, mlen, rkey = mr[0], mr[1], mr[2]
    va = base + before + step["offset"] % max(1, mlen - dma_len)
    region = step["region"]
    if region == "rkey":
        rkey = 0xDEAD
    elif region == "pd":
        rkey = MRS[0][2] if mr is MRS[3] else MRS[3][2]
    elif region == "below":
        va = base + before - 1 - step["offset"] % 4
    elif region == "above":
        va = base + mlen - length + 1 + step["offset"] % 4
    elif region == "no_write":
        rkey = MRS[2][2]
    src = {"other_src": "10.0.0.9"}.get(step["source"], PEER_IP)
    dst = {"not_for_us": "10.0.0.77"}.get(step["source"], OWN_IP)
    return {"bth.opcode": op, "bth.dqpn": q, "bth.psn": psn, "bth.ackreq": int(step["ackreq"]),
            "reth.va": va, "reth.rkey": rkey, "reth.dma_len": dma_len, "payload_len": length,
            "payload": bytes((k + i) & 0xFF for i in range(length)),
            "imm": 0x1000 + k if op in IMM_OPCODES else None, "ecn": 3 if step["ce"] else 2,
            "trimmed": int(step["trimmed"]), "ev": 0xC000 + k % 7,
            "ip_src": ip2int(src), "ip_dst": ip2int(dst), "eth_src": 0x020000000001}


def run_trace(trace):
    pair = Pair()
    sent: dict[int, int] = {}
    for k, step in enumerate(trace):
        q = step["qpn"]
        if step["kind"] == "cq_cons":
            pair.set_cq_cons(q, pair.rx.qps[q].cq_prod)
        elif step["kind"] == "init":
            pair.init_qp(q, epsn=(QPS[q][0] + 1000 * step["n"]) & PSN_MASK)
            sent.pop(q, None)
        elif step["kind"] == "probe":
            pair.send({"bth.opcode": 0xC0, "bth.dqpn": q, "probe.probe_id": k, "ev": 0xD000 + k,
                       "ip_src": ip2int(PEER_IP), "ip_dst": ip2int(OWN_IP), "trimmed": 0,
                       "eth_src": 1, "bth.psn": 0, "payload": b""})
        else:
            pair.send(build(pair, step, sent, k))
        pair.check(k)
    pair.rx.flush_timer_acks()
    pair.fabric.advance(1e9)  # the golden model's coalescing timers
    pair.check("end")
    pair.check_memory()
    return pair


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(steps(), min_size=8, max_size=80))
def test_rx_model_matches_golden(trace):
    run_trace(trace)


def test_rx_model_matches_golden_long_trace():
    """One long in-order-and-reordered trace: CQ rings wrap, MSNs count up."""
    import random

    rng = random.Random(5)
    trace = []
    for _ in range(600):
        trace.append(dict(kind="data", qpn=rng.choice(tuple(QPS)),
                          psn=rng.choice(("in_order",) * 6 + ("reorder", "duplicate")),
                          delta=rng.randrange(1, 20), opcode=rng.choice((0x0A, 0x0B, 0x08, 0x09,
                                                                         0x06, 0x07)),
                          length=rng.choice(("mtu", "short")), any_len=0,
                          msg=rng.randrange(3), region="good", offset=rng.randrange(2048),
                          trimmed=False, ackreq=rng.random() < 0.2, ce=rng.random() < 0.3,
                          source="peer", dqpn=0))
        if rng.random() < 0.1:
            trace.append(dict(kind="cq_cons", qpn=rng.choice(tuple(QPS)), n=0))
    pair = run_trace(trace)
    assert pair.rx.count["placed"] > 200 and pair.rx.count["cqe_written"] > 10, pair.rx.count


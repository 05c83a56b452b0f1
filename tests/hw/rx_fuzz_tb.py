"""The RX fuzzer (docs/verification.md, "Fuzzing"): hostile and broken frames
into ``RxEngine``, every one of them judged by the references, shared by
tests/hw/test_rx_engine.py's ``test_fuzz_rx`` (short in the default suite,
100,000 frames under ``make test-long``).

The frames come from four sources, mixed in each batch:

- ``scapy_frame``: scapy ``fuzz()`` of our layers (BTH, RETH, ImmDt, AETH,
  MRC SACK, MRC PROBE) under Eth/IPv4/UDP headers addressed to us, the
  checksums made good half the time so that they reach validation;
- ``hypothesis_specs``: frames drawn by hypothesis strategies (opcode, QP,
  PSN relative to the QP's expected one, R_Key, VA relative to a region's
  edges, lengths, addresses, ECN, trim, broken checksums), built when sent;
- ``Mutator``: valid frames of the fuzzed QPs mutated: bit flips, truncation,
  extension, fields swapped between two frames, replays of earlier frames,
  spoofed QPNs, PSNs, R_Keys and source addresses, VAs moved by a few bytes
  (the checksums made good
  again most of the time, so the mutant is judged by validation, not the
  parser);
- valid frames of the fuzzed QPs, PSNs in order or at the window's edges, one
  in five at a region's edge or a few bytes past it.

Every frame goes through the parser's reference (``expect_frame``) and, if
accepted, through ``RxModel``: the model sees everything the engine sees,
so its counters, memory image and NAKs are exact. ``FuzzBench`` checks after
each batch (the invariants of docs/verification.md):

- no write outside a region: every AW burst lies in the beat-rounded span of a
  writable region or CQ ring, and every byte written (each strobed run of
  each W beat) in the region itself (``RxTB.violations``), with memory equal
  byte for byte to the model's image;
- no hang: the pipeline never stands still for ``STALL`` cycles while input
  waits, and is quiet within ``DRAIN_BOUND`` cycles of its last input beat;
- counters add up: the parser's verdicts sum to the frames sent, the outcomes
  to the parser's accepted frames, the peer filter's drops plus the records
  on ``peer_ack`` to ``peer_frames``, and each counter is the model's;
- a valid packet after the garbage is accepted and placed: the batch ends with
  a canary (a WRITE_ONLY at its QP's expected PSN, AckReq set), whose bytes
  must be in memory and whose ACK must name the model's cumulative PSN,
  bitmap and MSN; every ACK and NAK is held to ``AckStream``'s rules.
"""

from __future__ import annotations

import random
import warnings
from collections import Counter, deque

from cocotb.utils import get_sim_time
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw, fuzz

from host_driver import layers as L
from hw.rx.mr_table import make_rkey
from hw.rx.regs import COUNTERS
from tests.hw.parser_frames import expect_frame, fix_icrc, fix_ipv4_checksum
from tests.hw.rx_tb import (
    ACK_T,
    MR0,
    MR1,
    MR2,
    OWN_IP,
    OWN_MAC,
    RTR,
    AckStream,
    after_or_at,
    biased_psn,
)

PARSER = tuple(n for n in COUNTERS if n.startswith("parser_"))
OUTCOMES = ("peer_frames", "probe_requests", "bad_qpn", "not_for_us", "qp_state", "bad_source",
            "bad_length", "bad_reth", "bad_rkey", "bad_pd", "bad_bounds", "placed", "duplicate",
            "out_of_window", "wimm_full", "cq_full", "dma_error", "trimmed", "trim_stale")
PEER_DROPS = tuple(n for n in COUNTERS if n.startswith("peer_") and n != "peer_frames")
MAX_PAYLOAD = 4096  # RxEngine's default max_payload

MR3 = dict(base=0x60000, length=0x2000, rkey=make_rkey(3, tag=0x44))  # writable, PD 1
MRS = (MR0, MR1, MR2, MR3)
CANARY = 5  # the QP of the batches' canaries
# QPN -> setup_qp arguments of the fuzzed QPs (the others stay in RESET)
QPS = {
    3: dict(peer_qpn=0x103, epsn=L.PSN_MASK - 100, mpr=1, ack_n=2, ack_t=ACK_T, cq_log2=2,
            mtu=256),
    4: dict(peer_qpn=0x104, epsn=0, state=RTR, ack_n=1, ack_t=ACK_T, trim_nack=0, mtu=512),
    CANARY: dict(peer_qpn=0x105, epsn=0x7FFFF0, ack_n=8, ack_t=ACK_T, mtu=1024),
    6: dict(peer_qpn=0x106, epsn=0, state=1),  # INIT: takes nothing
    7: dict(peer_qpn=0x107, epsn=1000, ack_n=1, ack_t=ACK_T, mtu=256, pd=1, cq_log2=3),
}
SPOOF_QPNS = (3, 3, 4, 4, 5, 6, 7, 7, 0, 9, 15, 16, 0x40, 0xFFFFFF)
STALL = 2000  # cycles with input waiting and nothing moving: a hang
DRAIN_BOUND = 8000  # cycles from the last input beat taken to a quiet pipeline
SETTLE_ROUNDS = 4  # quiet periods (with a counter read) in which every frame gets its verdict
SOURCES = ("valid", "scapy", "hypothesis", "mutant")

# Frame offsets (docs/protocol.md).
TOS, IP_SRC, IP_DST, SPORT = 15, 26, 30, 34
OPCODE, DQPN, PSN, VA, RKEY, DMA_LEN = 42, 47, 51, 54, 62, 66
SWAP_FIELDS = ((OPCODE, 1), (DQPN, 3), (PSN, 3), (VA, 8), (RKEY, 4), (DMA_LEN, 4), (IP_SRC, 4),
               (50, 1))


def fix_checksums(frame: bytearray) -> bytes:
    """The IPv4 checksum and (for an IHL-5 frame long enough) the ICRC made good."""
    if len(frame) >= 34:
        fix_ipv4_checksum(frame)
        if frame[14] & 0xF == 5 and len(frame) >= 58 and frame[15] >> 2 != L.TRIM_DSCP_DEFAULT:
            fix_icrc(frame)
    return bytes(frame)


def record_of(fields: dict) -> dict:
    """``expect_frame``'s nested record flattened to ``RxModel``'s names."""
    rec = {}
    for name, v in fields.items():
        if isinstance(v, dict):
            rec.update({f"{name}.{k}": x for k, x in v.items()})
        else:
            rec[name] = v
    return rec


def _l3(rng):
    src = rng.choice(("10.0.0.1",) * 6 + ("10.0.0.5", "10.0.0.9"))
    dst = OWN_IP if rng.random() < 0.9 else "10.0.0.77"
    mac = OWN_MAC if rng.random() < 0.9 else "02:00:00:00:00:09"
    return (Ether(src="02:00:00:00:00:01", dst=mac) / IP(src=src, dst=dst, flags="DF")
            / UDP(sport=rng.getrandbits(16), dport=L.ROCE_UDP_PORT, chksum=0))


def scapy_frame(rng) -> bytes:
    """scapy ``fuzz()`` of one of our header stacks, checksums good half the time."""
    kind = rng.randrange(5)
    bth = dict(dqpn=rng.choice(SPOOF_QPNS))
    if rng.random() < 0.5:
        bth["tver"] = 0  # else mostly unknown_opcode: a transport version other than 0
    if kind == 0:
        body = fuzz(L.BTH(**bth)) / fuzz(L.RETH()) / Raw(bytes(rng.randrange(0, 300)))
    elif kind == 1:
        body = (fuzz(L.BTH(opcode=rng.choice(L.WRITE_OPCODES), **bth))
                / fuzz(L.RETH(rkey=rng.choice(MRS)["rkey"])) / Raw(rng.randbytes(64)))
        if body[L.BTH].opcode in L.IMM_OPCODES:
            body = (fuzz(L.BTH(opcode=rng.choice(L.IMM_OPCODES), **bth))
                    / fuzz(L.RETH()) / fuzz(L.ImmDt()) / Raw(rng.randbytes(16)))
    elif kind == 2:
        body = fuzz(L.BTH(opcode=L.OP_ACKNOWLEDGE, **bth)) / fuzz(L.AETH()) / fuzz(
            L.MRCSack(sack_words=2))
    elif kind == 3:
        body = fuzz(L.BTH(opcode=rng.choice(L.PROBE_OPCODES), **bth)) / fuzz(L.MRCProbe())
    else:
        body = fuzz(L.BTH()) / Raw(rng.randbytes(rng.randrange(0, 80)))
    frame = bytearray(bytes(_l3(rng) / body))
    return fix_checksums(frame) if rng.random() < 0.5 else bytes(frame)


# ---- hypothesis ----------------------------------------------------------------------

def _spec_strategy():
    from hypothesis import strategies as st

    lengths = st.one_of(st.sampled_from((0, 1, 7, 8, 9, 64, 255, 256, 257, 512, 1024)),
                        st.integers(0, 1100), st.integers(0, MAX_PAYLOAD + 8))
    return st.fixed_dictionaries(dict(
        opcode=st.one_of(*[st.sampled_from(L.WRITE_OPCODES + L.PROBE_OPCODES
                                           + (L.OP_ACKNOWLEDGE,))] * 5, st.integers(0, 255)),
        qpn=st.sampled_from(SPOOF_QPNS),
        psn_off=st.one_of(st.integers(-8, 8), st.integers(120, 136), st.integers(-3, 3).map(
            lambda d: (1 << 23) + d), st.integers(0, L.PSN_MASK)),
        mr=st.integers(0, len(MRS)),
        rkey=st.one_of(st.none(), st.integers(0, 0xFFFFFFFF)),
        va_off=st.one_of(st.integers(-2, 2), st.integers(-(1 << 12), 1 << 18),
                         st.integers(0, (1 << 64) - 1)),
        va_from_end=st.booleans(),
        length=lengths,
        dma_len=st.one_of(st.none(), st.integers(0, (1 << 32) - 1), st.integers(0, 3000)),
        imm=st.integers(0, 0xFFFFFFFF),
        ackreq=st.booleans(),
        ecn=st.integers(0, 3),
        src=st.sampled_from(("10.0.0.1", "10.0.0.1", "10.0.0.1", "10.0.0.5")),
        own_ip=st.booleans() | st.just(True),
        trimmed=st.integers(0, 15).map(lambda x: x == 0),
        break_icrc=st.integers(0, 15).map(lambda x: x == 0),
        cum_off=st.integers(-4, 70),
        sack_base_ok=st.booleans() | st.just(True),
        bitmap=st.integers(0, (1 << 64) - 1),
    ))


def hypothesis_specs(n: int, seed: int) -> list[dict]:
    """``n`` frame specs drawn by hypothesis (``build_spec`` makes the frame)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed
    from hypothesis.errors import HypothesisSideeffectWarning

    out: list[dict] = []
    warnings.filterwarnings("ignore", category=HypothesisSideeffectWarning)

    @hseed(seed)
    @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(_spec_strategy())
    def draw(spec):
        out.append(spec)

    draw()
    return out


def build_spec(spec: dict, model) -> bytes:
    """The frame of a hypothesis spec, its PSN relative to the QP's expected PSN now."""
    q = model.qps.get(spec["qpn"])
    epsn = q.epsn if q else 0
    psn = (epsn + spec["psn_off"]) & L.PSN_MASK
    op = spec["opcode"]
    addr = dict(src_ip=spec["src"], dst_ip=OWN_IP if spec["own_ip"] else "10.0.0.77",
                dst_mac=OWN_MAC)
    if op in L.WRITE_OPCODES:
        mr = MRS[spec["mr"]] if spec["mr"] < len(MRS) else dict(base=0, length=0, rkey=0)
        rkey = mr["rkey"] if spec["rkey"] is None else spec["rkey"]
        edge = mr["base"] + (mr["length"] - spec["length"] if spec["va_from_end"] else 0)
        va = (edge + spec["va_off"]) & ((1 << 64) - 1)
        dma_len = spec["length"] if spec["dma_len"] is None else spec["dma_len"]
        pkt = L.write_packet(opcode=op, dqpn=spec["qpn"], psn=psn, va=va, rkey=rkey,
                             dma_len=dma_len,
                             payload=bytes((i * 7) & 0xFF for i in range(spec["length"])),
                             imm=spec["imm"] if op in L.IMM_OPCODES else None,
                             ackreq=int(spec["ackreq"]), ecn=spec["ecn"], **addr)
        frame = bytes(pkt)
        if spec["trimmed"]:
            frame = L.trim(frame)
    elif op == L.OP_ACKNOWLEDGE:
        cum = (epsn + spec["cum_off"]) & L.PSN_MASK
        base = None if spec["sack_base_ok"] else cum + 2
        frame = bytes(L.ack_packet(dqpn=spec["qpn"], cum_psn=cum, sack_base=base,
                                   bitmap=spec["bitmap"], **addr))
    elif op in L.PROBE_OPCODES:
        frame = bytes(L.probe_packet(response=op == L.OP_PROBE_RESP, dqpn=spec["qpn"],
                                     probe_id=spec["imm"], ev=spec["imm"] & 0xFFFF,
                                     timestamp=spec["bitmap"], **addr))
    else:  # an opcode we do not know, on a WRITE's headers
        raw = bytearray(bytes(L.write_packet(opcode=0x0A, dqpn=spec["qpn"], psn=psn, va=0,
                                             rkey=0, dma_len=0, **addr)))
        raw[OPCODE] = op
        frame = fix_checksums(raw)
    if spec["break_icrc"] and len(frame) > 60:
        b = bytearray(frame)
        b[-1] ^= 0x80
        frame = bytes(b)
    return frame


# ---- mutations of valid streams --------------------------------------------------------

class Mutator:
    """Mutations of valid frames, with a history for replays and field swaps."""

    def __init__(self, rng):
        self.rng = rng
        self.history: deque[bytes] = deque(maxlen=512)

    def remember(self, frame: bytes):
        self.history.append(frame)

    def mutant(self, frame: bytes) -> bytes:
        rng = self.rng
        if self.history and rng.random() < 0.15:
            return rng.choice(self.history)  # a replay, unchanged
        b = bytearray(frame)
        for _ in range(rng.randrange(1, 3)):
            what = rng.randrange(8)
            if what == 0 and b:  # bit flips, mostly in the headers
                for _ in range(rng.randrange(1, 4)):
                    i = rng.randrange(min(len(b), 80) if rng.random() < 0.8 else len(b))
                    b[i] ^= 1 << rng.randrange(8)
            elif what == 1:  # truncation
                b = b[:rng.randrange(len(b) + 1)]
            elif what == 2:  # extension
                b += rng.randbytes(rng.randrange(1, 24))
            elif what == 3 and self.history:  # a field from another valid frame
                other = rng.choice(self.history)
                off, n = rng.choice(SWAP_FIELDS)
                if len(other) >= off + n and len(b) >= off + n:
                    b[off:off + n] = other[off:off + n]
            elif what == 4 and len(b) >= DQPN + 3:  # spoofed QPN
                b[DQPN:DQPN + 3] = rng.choice(SPOOF_QPNS).to_bytes(3, "big")
            elif what == 5 and len(b) >= PSN + 3:  # spoofed PSN
                psn = int.from_bytes(b[PSN:PSN + 3], "big")
                psn = (psn + rng.choice((1, -1, 64, 127, 128, 1 << 23, rng.getrandbits(24))))
                b[PSN:PSN + 3] = (psn & L.PSN_MASK).to_bytes(3, "big")
            elif what == 6 and len(b) >= RKEY + 4:  # spoofed R_Key or source
                if rng.random() < 0.5:
                    rkey = rng.choice([m["rkey"] for m in MRS] + [rng.getrandbits(32)])
                    b[RKEY:RKEY + 4] = rkey.to_bytes(4, "big")
                else:
                    b[IP_SRC:IP_SRC + 4] = bytes((10, 0, 0, rng.choice((1, 5, 9))))
            elif what == 7 and len(b) >= VA + 8:  # VA moved by a few bytes
                va = int.from_bytes(b[VA:VA + 8], "big") + rng.choice((-9, -8, -1, 1, 8, 9, 64))
                b[VA:VA + 8] = (va % (1 << 64)).to_bytes(8, "big")
        return fix_checksums(b) if rng.random() < 0.8 else bytes(b)


# ---- the bench -------------------------------------------------------------------------

class FuzzBench:
    """Fuzzed frames into an ``RxTB`` (``frames=True``), judged by
    ``expect_frame`` and ``RxModel`` (module doc); ``batch`` sends one batch
    and checks the invariants."""

    def __init__(self, tb, *, seed: int, step: int | None = None):
        self.tb = tb
        self.step = step  # from this frame on, the counters after every frame (to find one)
        self.rng = random.Random(seed)
        self.seed = seed
        self.mut = Mutator(self.rng)
        self.specs: list[dict] = []
        self.spec_draws = 0
        self.parser = Counter()  # parser verdicts of the frames sent
        self.sources = Counter()
        self.sent = 0
        self.peer_passed = 0
        self.max_drain = 0
        self.canaries = 0
        self.acks = AckStream(tb, {cfg["peer_qpn"]: q for q, cfg in QPS.items()})
        self.aw_bursts = 0
        self.aw_outside: list[tuple[int, int]] = []
        self.counts: dict[str, int] = {}
        self.last_frame = None
        self.batch_log: list[tuple] = []  # the accepted frames of the batch: for a failure
        self._watch_aw()
        # for a failure's report: the last writes the model expects and the DMA made
        self.model_writes: deque[tuple] = deque(maxlen=4000)
        self.dma_writes: deque[tuple] = deque(maxlen=4000)
        write = tb.ram.write_if._write

        async def logged_write(address, data_):
            self.dma_writes.append((get_sim_time("ns"), address, len(data_)))
            await write(address, data_)

        tb.ram.write_if._write = logged_write

    def _watch_aw(self):
        """Every AW burst must lie in the beat-rounded span of an allowed range."""
        ch = self.tb.ram.write_if.aw_channel
        recv = ch.recv
        lanes = self.tb.ram.write_if.byte_lanes

        async def checked_recv():
            aw = await recv()
            lo = int(aw.awaddr) // lanes * lanes
            hi = lo + (int(aw.awlen) + 1) * (1 << int(aw.awsize))
            self.aw_bursts += 1
            if not any(a // lanes * lanes <= lo and hi <= -(-b // lanes) * lanes
                       for a, b in self.tb.allowed):
                self.aw_outside.append((lo, hi))
            return aw

        ch.recv = checked_recv

    async def setup(self):
        tb = self.tb
        await tb.add_mr(3, **MR3, pd=1)
        for qpn, cfg in QPS.items():
            await tb.setup_qp(qpn, **cfg)

    # -- frames
    def valid_frame(self, qpn: int, *, psn=None, ackreq=None) -> bytes:
        """A valid WRITE of a fuzzed QP, the length rules of its MTU kept, its
        message inside a writable region of its PD."""
        rng, q = self.rng, self.tb.model.qps[qpn]
        mtu = q.cfg["mtu"]
        op = rng.choice(L.WRITE_OPCODES)
        if op in (0x06, 0x07):
            length = mtu
        else:
            length = rng.choice((0, 1, 8, 13, 64, mtu // 2, mtu))
            if op in (0x08, 0x09) and length == 0:
                length = mtu
        before = {0x07: mtu, 0x08: mtu, 0x09: mtu}.get(op, 0)  # message bytes before it
        after = {0x06: rng.randrange(1, mtu + 1), 0x07: rng.randrange(1, mtu + 1)}.get(op, 0)
        dma_len = before + length + after
        mr = MR3 if q.cfg["pd"] == 1 else rng.choice((MR0, MR1))
        va = mr["base"] + before + rng.randrange(0, mr["length"] - dma_len + 1)
        r = rng.random()
        if r < 0.1:  # the message's end at the region's end, or a few bytes past it
            va = mr["base"] + mr["length"] - after - length + rng.choice((0, 0, 1, 2, 7, 8, 9))
        elif r < 0.2:  # its start at the region's start, or a few bytes before it
            va = mr["base"] + before - rng.choice((0, 0, 1, 2, 7, 8, 9))
        if psn is None:  # in order half the time, else at the window's edges
            psn = (q.epsn if rng.random() < 0.5
                   else biased_psn(rng, q.epsn, self.tb.model.window(q)))
        pkt = L.write_packet(
            opcode=op, dqpn=qpn, psn=psn, va=va, rkey=mr["rkey"], dma_len=dma_len,
            payload=rng.randbytes(length), imm=rng.getrandbits(32) if op in L.IMM_OPCODES
            else None, ackreq=rng.getrandbits(1) if ackreq is None else ackreq,
            ecn=rng.choice((2, 2, 3)), ev=rng.getrandbits(16), dst_ip=OWN_IP,
            dst_mac=OWN_MAC)
        frame = bytes(pkt)
        if rng.random() < 0.05:
            frame = L.trim(frame)
        return frame

    def next_frame(self) -> tuple[str, bytes, int]:
        rng = self.rng
        r = rng.random()
        fuzzed = (3, 3, 4, 7)
        if r < 0.3:
            frame = self.valid_frame(rng.choice(fuzzed))
            self.mut.remember(frame)
            return "valid", frame, 0
        if r < 0.45:
            return "scapy", scapy_frame(rng), 0
        if r < 0.7:
            if self.spec_draws >= len(self.specs):
                self.specs = hypothesis_specs(500, self.seed * 100_003 + self.sent)
                self.spec_draws = 0
            self.spec_draws += 1
            return "hypothesis", build_spec(self.specs[self.spec_draws - 1], self.tb.model), 0
        frame = self.mut.mutant(self.valid_frame(rng.choice(fuzzed)))
        return "mutant", frame, int(rng.random() < 0.02)

    def send(self, frame: bytes, tuser: int = 0) -> str:
        """One frame to the engine, judged by the parser's reference and the model."""
        exp = expect_frame(frame, bool(tuser), sack_bits=self.tb.sack_bits,
                           max_payload=MAX_PAYLOAD)
        self.parser[f"parser_{exp.verdict}"] += 1
        outcome = None
        if exp.verdict == "accepted":
            rec = record_of(exp.fields)
            outcome = self.tb.model.frame(rec, exp.payload)
            self.batch_log.append((self.sent, outcome, rec.get("bth.dqpn"), rec.get("bth.psn"),
                                   rec.get("bth.opcode"), rec.get("trimmed"),
                                   rec.get("payload_len")))
            self.peer_passed += outcome == "peer"
            if outcome == "placed" and exp.payload:
                self.model_writes.append((self.sent, get_sim_time("ns"), rec["reth.va"],
                                          len(exp.payload), rec["bth.dqpn"], rec["bth.psn"],
                                          rec["bth.opcode"], frame.hex()))
        self.tb.send_raw(frame, tuser)
        self.sent += 1
        return outcome

    # -- a batch
    async def batch(self, n: int):
        tb, rng = self.tb, self.rng
        self.batch_log.clear()
        for _ in range(n):
            source, frame, tuser = self.next_frame()
            if not frame:
                continue
            self.sources[source] += 1
            epsns = {q: m.epsn for q, m in tb.model.qps.items()}
            self.send(frame, tuser)
            if self.step is not None and self.sent > self.step:
                await self.drain()
                self.last_frame = (source, frame.hex(), tuser)
                await self.check_counters()
            elif any(m.epsn != epsns[q] for q, m in tb.model.qps.items()):
                # the model advanced at once, the engine does at the B
                # response: settled, the model's later verdicts are the engine's
                await self.drain()
        # the canary: a valid packet right behind the garbage
        q = tb.model.qps[CANARY]
        psn = q.epsn
        pkt = L.write_packet(opcode=0x0A, dqpn=CANARY, psn=psn, va=MR0["base"] + 0x1F000
                             + 8 * (self.canaries % 64), rkey=MR0["rkey"], dma_len=8,
                             payload=rng.randbytes(8), ackreq=1, dst_ip=OWN_IP,
                             dst_mac=OWN_MAC)
        outcome = self.send(bytes(pkt))
        assert outcome == "placed", f"canary at PSN {psn}: {outcome}"
        await self.drain()
        self.canaries += 1
        va = pkt[L.RETH].va
        got = tb.ram.read(va, 8)
        assert got == L.write_payload(pkt), f"canary {self.canaries}: {got.hex()} at {va:#x}"
        a = self.acks.last.get(CANARY)
        assert a is not None and after_or_at(a["cum_psn"], psn), (
            f"canary PSN {psn} not acknowledged: {a}")
        self.acks.final(CANARY)  # that ACK names the model's state
        if rng.random() < 0.3:
            for qpn in (3, 7):
                await tb.poll_cq(qpn)
        await self.check()

    async def drain(self):
        """Until every frame sent has its verdict (a parser verdict and, if
        accepted, an outcome) and the outputs are quiet: a frame dropped
        silently gives no sign while its payload is discarded (up to
        MAX_PAYLOAD / 8 cycles), so quiet outputs alone do not say the frames
        before it were checked."""
        for _ in range(SETTLE_ROUNDS):
            cycles = await self.tb.drain(extra=200, stall=STALL)
            self.max_drain = max(self.max_drain, cycles)
            assert cycles <= DRAIN_BOUND, f"busy {cycles} cycles after the last input beat"
            c = await self.tb.counters()
            if (sum(c[n] for n in PARSER) == self.sent
                    and sum(c[n] for n in OUTCOMES) == c["parser_accepted"]):
                break
        self.acks.collect()

    async def check(self):
        tb = self.tb
        assert not self.aw_outside, f"AW bursts outside every region: {self.aw_outside[:4]}"
        assert not tb.violations, f"writes outside every region: {tb.violations[:5]}"
        try:
            tb.check_memory()  # memory byte for byte the model's
        except AssertionError:
            got = tb.ram.read(0, tb.mem_size)
            bad = next(i for i in range(tb.mem_size) if got[i] != tb.shadow[i])
            near = [w for w in self.model_writes if w[2] <= bad + 64 and bad < w[2] + w[3] + 64]
            dma = [w for w in self.dma_writes if w[1] <= bad + 64 and bad < w[1] + w[2] + 64]
            raise AssertionError(f"memory differs at {bad:#x}; the model's writes near it "
                                 f"(frame, ns, va, len, qpn, psn, opcode, frame): {near}; "
                                 f"the DMA's (ns, addr, len): {dma}") from None
        c = await self.check_counters()
        self.acks.check_model_naks_and_probes()
        self.counts = c
        return c

    async def check_counters(self):
        tb = self.tb
        c = await tb.counters()
        where = f"after frame {self.sent} (the last: {self.last_frame})"
        assert sum(c[n] for n in PARSER) == self.sent, (where, {n: c[n] for n in PARSER})
        assert sum(c[n] for n in OUTCOMES) == c["parser_accepted"], (
            where, {n: c[n] for n in OUTCOMES}, c["parser_accepted"])
        assert sum(c[n] for n in PEER_DROPS) + len(tb.peer.values()) == c["peer_frames"], (
            {n: c[n] for n in PEER_DROPS}, len(tb.peer.values()), c["peer_frames"])
        assert len(tb.peer.values()) == self.peer_passed
        want = Counter(tb.model.count) + self.parser
        diff = {n: (c[n], want[n]) for n in COUNTERS
                if n != "acks_sent" and c[n] != want[n]}  # (acks_sent: the ACK timers)
        assert not diff, (f"counters (engine, model) after frame {self.sent}: {diff}; the "
                          f"batch's accepted frames (frame, outcome, qpn, psn, opcode, trimmed, "
                          f"length): {self.batch_log}")
        return c

    def progress(self, log, total: int, wall: float, path=None):
        """Two lines to ``log``, and appended to the file ``path`` if given."""
        lines = [
            f"fuzz: {self.sent}/{total} frames, {self.canaries} canaries, simulated "
            f"{get_sim_time('ns') / 1e6:.3f} ms, {self.sent / max(wall, 1e-9):.0f} frames/s, "
            f"sources {dict(self.sources)}, max drain {self.max_drain} cycles",
            f"fuzz counters: { {k: v for k, v in self.counts.items() if v} }",
        ]
        for line in lines:
            log.info("%s", line)
        if path is not None:
            with open(path, "a") as f:
                f.write("".join(f"{line}\n" for line in lines))


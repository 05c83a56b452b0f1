"""cocotb tests of ``RxEngine``: MAC frames through the parser into the pipeline.

What only the full engine can show: frames the parser drops (bad ICRC,
truncated, bad frame, scapy ``fuzz()`` output, mutated valid frames) never
disturb the receive state, the next valid packet is accepted, and every frame
sent is counted exactly once across the parser's and the pipeline's counters.
"""

import os

import cocotb
import pytest
from cocotb.triggers import RisingEdge
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw, fuzz

from host_driver.layers import (
    AETH,
    BTH,
    RETH,
    ImmDt,
    MRCProbe,
    MRCSack,
    ack_packet,
    write_packet,
)
from hw.rx.regs import COUNTERS
from sim.model.packet import message_extent
from tests import seeds
from tests.hw.rx_tb import (
    ACK_T,
    MR0,
    MR1,
    OWN_IP,
    OWN_MAC,
    PSN_MASK,
    SETTLE,
    AckStream,
    biased_psn,
    message_packets,
    run_engine_tests,
)
from tests.hw.rx_tb import start as start_bench

PARSER = [n for n in COUNTERS if n.startswith("parser_")]
OUTCOMES = ("peer_frames", "probe_requests", "bad_qpn", "not_for_us", "qp_state", "bad_source",
            "bad_length", "bad_reth", "bad_rkey", "bad_pd", "bad_bounds", "placed", "duplicate",
            "out_of_window", "wimm_full", "cq_full", "dma_error", "trimmed", "trim_stale")


async def start(dut, *, seed=1, backpressure=0.0):
    """The RxEngine bench: MAC frames through the parser."""
    return await start_bench(dut, seed=seed, backpressure=backpressure, frames=True)


def check_totals(c, frames):
    """Every frame is counted once: by one parser verdict, and if accepted by one outcome."""
    assert sum(c[n] for n in PARSER) == frames, {n: c[n] for n in PARSER}
    assert sum(c[n] for n in OUTCOMES) == c["parser_accepted"], {n: c[n] for n in OUTCOMES}


@cocotb.test()
async def test_message_through_parser(dut):
    """A shuffled 64 KiB WRITE_WITH_IMM at MTU 4096, ACKs and CQE checked exactly."""
    tb = await start(dut, seed=2, backpressure=0.2)
    await tb.setup_qp(1, epsn=77, ack_n=4, ack_t=ACK_T, mtu=4096)
    pkts, _ = message_packets(dqpn=1, first_psn=77, va=MR0["base"] + 3, rkey=MR0["rkey"],
                              length=65536 - 5, mtu=4096, imm=0x1234, seed=1)
    order = list(range(len(pkts)))
    seeds.rng(1).shuffle(order)
    for i in order:
        tb.send(pkts[i])
    await tb.drain()
    tb.model.flush_timer_acks()
    for _ in range(ACK_T + 300):
        await RisingEdge(dut.clk)
    tb.check_memory()
    c = await tb.check_counters()
    tb.check_acks()
    check_totals(c, len(pkts))
    assert c["cqe_written"] == 1


@cocotb.test()
async def test_parser_drops(dut):
    """Bad ICRC, truncated and bad-frame copies are dropped; the good copy is placed."""
    tb = await start(dut, seed=3)
    await tb.setup_qp(2, epsn=0, ack_n=1)
    pkts, _ = message_packets(dqpn=2, first_psn=0, va=MR1["base"], rkey=MR1["rkey"],
                              length=3 * 1024, mtu=1024, imm=3, seed=2)
    sent = 0
    for p in pkts:
        raw = bytearray(bytes(p))
        bad_icrc = bytearray(raw)
        bad_icrc[-1] ^= 0x40
        bad_payload = bytearray(raw)
        bad_payload[100] ^= 1  # payload corrupted: only the ICRC notices
        tb.send_raw(bytes(bad_icrc))
        tb.send_raw(bytes(bad_payload))
        tb.send_raw(bytes(raw[:60]))  # truncated inside the RETH
        tb.send_raw(bytes(raw[:-1]))  # one byte short
        tb.send_raw(bytes(raw), tuser=1)  # the MAC flagged it
        tb.send(p)
        sent += 6
    await tb.drain()
    tb.check_memory()
    c = await tb.check_counters()
    tb.check_acks()
    assert c["parser_bad_icrc"] == 2 * len(pkts) and c["parser_bad_frame"] == len(pkts)
    assert c["parser_truncated"] + c["parser_length_mismatch"] == 2 * len(pkts)
    check_totals(c, sent)


@cocotb.test()
async def test_region_check_before_window(dut):
    """A FIRST or LAST frame beyond the window whose message leaves its region
    is refused by the region check (``bad_bounds``, NAK 0x62), which comes
    before the window's (docs/rx.md, "Validation"): a LAST_WITH_IMMEDIATE
    whose message starts 0x74 bytes below MR1, a FIRST whose message ends 257
    bytes past it. Moved by ``inside_region`` (as the fuzz test moves the
    frames it sends unseen by the model), the same frames end at the window:
    ``out_of_window``, no NAK. Engine and model alike."""
    tb = await start(dut, seed=5)
    await tb.setup_qp(3, epsn=0, ack_n=1, mpr=1)
    far = 0x1D1057  # beyond the window (128 PSNs) and not before it
    end = MR1["base"] + MR1["length"]
    frames = ((0x09, far, 0x4038F, 64, 1088), (0x06, far + 1, end - 1024, 1024, 1281))
    for moved in (False, True):
        for op, psn, va, length, dma_len in frames:
            if moved:
                va = inside_region(op, va, length, dma_len, MR1)
            tb.send(write_packet(opcode=op, dqpn=3, psn=psn, va=va, rkey=MR1["rkey"],
                                 dma_len=dma_len, payload=bytes(i & 0xFF for i in range(length)),
                                 imm=psn if op == 0x09 else None, dst_ip=OWN_IP,
                                 dst_mac=OWN_MAC))
    await tb.drain()
    tb.check_memory()
    c = await tb.check_counters()
    tb.check_acks()
    check_totals(c, 2 * len(frames))
    for name, want in dict(bad_bounds=2, out_of_window=2, naks_sent=2, placed=0).items():
        assert c[name] == want, (name, c[name], want)


def fuzz_frame(rng):
    """A scapy fuzz() of the RoCE layers under valid Eth/IPv4/UDP headers, to a
    QP the fuzz test does not set up (the model does not see these frames)."""
    kind = rng.randrange(4)
    bth = dict(dqpn=rng.choice((0, 5, 9, 15, 16, 0x40, 0xFFFFFF)))
    if kind == 0:
        body = fuzz(BTH(**bth)) / fuzz(RETH()) / Raw(bytes(rng.randrange(0, 300)))
    elif kind == 1:
        body = fuzz(BTH(opcode=rng.choice((0x09, 0x0B)), **bth)) / fuzz(RETH()) / fuzz(ImmDt())
    elif kind == 2:
        body = fuzz(BTH(opcode=0x11)) / fuzz(AETH()) / fuzz(MRCSack(sack_words=2))
    else:
        body = fuzz(BTH(opcode=rng.choice((0xC0, 0xC1)), **bth)) / fuzz(MRCProbe())
    frame = (Ether(src="02:00:00:00:00:01", dst=OWN_MAC)
             / IP(src=rng.choice(("10.0.0.1", "10.0.0.5")), dst=OWN_IP, flags="DF")
             / UDP(sport=rng.getrandbits(16), dport=4791, chksum=0) / body)
    return bytes(frame)


def inside_region(opcode, va, length, dma_len, mr):
    """``va`` moved, if it must be, so that the bytes the region check covers
    for this packet (``message_extent``: a FIRST or LAST packet's whole message)
    lie in ``mr``."""
    lo, hi = message_extent(opcode, va, length, dma_len)
    end = mr["base"] + mr["length"]
    return va + max(0, mr["base"] - lo) - max(0, hi - end)


def mutate(raw, rng):
    """A valid frame with random byte flips, cuts or extensions."""
    b = bytearray(raw)
    for _ in range(rng.randrange(1, 4)):
        what = rng.randrange(4)
        if what == 0 and b:
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        elif what == 1:
            b = b[: rng.randrange(len(b) + 1)]
        elif what == 2:
            b += bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 20)))
        else:
            i = rng.randrange(14, 74)
            if i < len(b):
                b[i] = rng.getrandbits(8)
    return bytes(b)


FUZZ_PEERS = {0x103: 3, 0x104: 4}  # PEER_QPN -> QPN of the fuzzed QPs
# Counted the same by the engine and the model whatever the frames the model
# does not see (fuzz() output, mutants: never in a QP's window, their messages
# inside their regions) did.
EXACT = ("placed", "duplicate", "wimm_full", "cq_full", "bad_rkey", "bad_bounds", "trimmed",
         "cqe_written", "cq_overflow", "naks_sent", "probes_answered", "dma_error")


@cocotb.test()
async def test_fuzz_frames(dut):
    """scapy fuzz() and mutated valid frames among valid ones (1,000 frames;
    RX_FUZZ_PACKETS for more), valid PSNs biased to the window's edges.

    The valid frames carry fresh payloads and go through the model: memory is
    compared byte for byte with it (writes outside the regions are caught as
    they happen), and so are the counters the other frames cannot touch. The
    mutants are of frames whose PSN is beyond the window, and the fuzz() output
    is for QPs not set up, so neither can place anything. A mutant's frame has its
    message inside its region: a mutation may leave the frame as it was (or
    change only what the parser ignores, as the UDP checksum), and the region
    check comes before the window's (docs/rx.md, "Validation"), so an intact
    copy of a FIRST or LAST frame whose message leaves its region would count
    ``bad_bounds`` unseen by the model. Every ACK/NAK frame is
    decoded, ICRC-checked and held to the rules of tests/hw/rx_tb.py's AckStream.
    """
    n = int(os.environ.get("RX_FUZZ_PACKETS", "1000"))
    tb = await start(dut, seed=4, backpressure=0.1)
    rng = seeds.rng(4321)
    await tb.setup_qp(3, peer_qpn=0x103, epsn=PSN_MASK - 100, mpr=1, ack_n=2, ack_t=ACK_T,
                      cq_log2=2)
    await tb.setup_qp(4, peer_qpn=0x104, epsn=0, state=2, ack_n=1, ack_t=ACK_T)
    acks = AckStream(tb, FUZZ_PEERS)
    sent = 0
    for k in range(n):
        r = rng.random()
        qpn = rng.choice((3, 4))
        q = tb.model.qps[qpn]
        mr = rng.choice((MR0, MR1))
        length = rng.choice((0, 1, 64, 257, 1024))
        opcode = rng.choice((0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B))
        # a payload and RETH length a message at the QPs' MTU (1024) can have
        # (docs/protocol.md, "RETH consistency")
        if opcode in (0x06, 0x07):
            length = 1024
        elif opcode in (0x08, 0x09) and length == 0:
            length = 64
        dma_len = {0x06: 1024 + 257, 0x07: 2048 + 64}.get(
            opcode, length + (1024 if opcode in (0x08, 0x09) else 0))
        va = mr["base"] + rng.randrange(0, mr["length"] - length + 1)
        window = tb.model.window(q)
        valid = 0.3 <= r < 0.6
        if not valid:
            va = inside_region(opcode, va, length, dma_len, mr)
        psn = (biased_psn(rng, q.epsn, window) if valid
               else q.epsn + window + 16 + rng.randrange((1 << 23) - window - 32))
        pkt = write_packet(
            opcode=opcode, dqpn=qpn, psn=psn, va=va, rkey=mr["rkey"], dma_len=dma_len,
            payload=rng.randbytes(length), imm=k if opcode in (0x09, 0x0B) else None,
            dst_ip=OWN_IP, dst_mac=OWN_MAC, ackreq=rng.getrandbits(1), ev=rng.getrandbits(16))
        epsn = q.epsn
        if valid:
            tb.send(pkt)
        else:
            if r < 0.3:
                raw = fuzz_frame(rng)
            elif rng.random() < 0.1:
                raw = bytes(ack_packet(dqpn=3, cum_psn=rng.getrandbits(24), dst_ip=OWN_IP))
            else:
                raw = mutate(bytes(pkt), rng)
            if not raw:
                continue
            tb.send_raw(raw, tuser=int(rng.random() < 0.02))
        sent += 1
        if q.epsn != epsn or rng.random() < 0.01:
            # settled after an advance: the model's verdicts are the engine's
            await tb.drain(extra=SETTLE)
            acks.collect()
            if rng.random() < 0.3:  # the host polls the receive CQ
                await tb.poll_cq(qpn)
    await tb.drain()
    acks.collect()
    tb.check_memory()
    c = await tb.counters()
    check_totals(c, sent)
    for name in EXACT:
        assert c[name] == tb.model.count[name], (name, c[name], tb.model.count[name])
    acks.check_model_naks_and_probes()
    for qpn in FUZZ_PEERS.values():
        await acks.poke(qpn, va=MR0["base"], rkey=MR0["rkey"])
    assert acks.acks > n // 20, acks.acks
    # The next valid message is accepted, placed and completed (QP 4 set up
    # again too: the LAST packets it still holds would leave no pending entry
    # for this message's out-of-order one).
    tb.model.count.clear()
    await tb.setup_qp(4, peer_qpn=0x104, epsn=0, state=2, ack_n=1, ack_t=ACK_T)
    await tb.setup_qp(3, epsn=5, ack_n=1, ack_t=ACK_T)
    before = await tb.counters()
    pkts, _ = message_packets(dqpn=3, first_psn=5, va=MR0["base"] + 0x777, rkey=MR0["rkey"],
                              length=5000, mtu=1024, imm=6, seed=6)
    for p in reversed(pkts):
        tb.send(p)
    await tb.drain()
    tb.check_memory()
    tb.check_acks()
    after = await tb.counters()
    assert after["placed"] - before["placed"] == len(pkts)
    assert after["cqe_written"] - before["cqe_written"] == 1


@cocotb.test()
async def test_fuzz_rx(dut):
    """The RX fuzzer of tests/hw/rx_fuzz_tb.py: RX_FUZZ_FRAMES frames (2,000 by
    default; 100,000 under make test-long) from scapy fuzz(), hypothesis and
    mutations of valid streams, among valid frames, in batches of 100, each
    batch closed by a canary and the invariants checked (no write outside a
    region, no hang, counters add up, a valid packet still placed and
    acknowledged). The stimulus comes from the run's seed (tests/seeds.py);
    RX_FUZZ_SEED, if set, picks it instead."""
    import time

    from tests.hw.rx_fuzz_tb import FuzzBench

    total = int(os.environ.get("RX_FUZZ_FRAMES", "2000"))
    seed = int(os.environ.get("RX_FUZZ_SEED") or seeds.of(20261204))
    log_path = os.environ.get(FUZZ_LOG_ENV)  # the progress, for a long run's terminal
    if log_path:
        with open(log_path, "a") as f:
            f.write(f"fuzz stimulus seed {seed}, {total} frames\n")
    dut._log.info("fuzz stimulus seed %d", seed)
    tb = await start(dut, seed=seed, backpressure=0.1)
    step = os.environ.get("RX_FUZZ_STEP")  # a frame number: checked frame by frame from it
    fz = FuzzBench(tb, seed=seed, step=None if step is None else int(step))
    await fz.setup()
    t0 = time.monotonic()
    last = t0
    while fz.sent < total:
        await fz.batch(min(100, total - fz.sent))
        if time.monotonic() - last > 30 or fz.sent >= total:
            last = time.monotonic()
            fz.progress(dut._log, total, last - t0, log_path)
    # a batch is 100 frames and its canary
    assert fz.canaries * 101 >= total and min(fz.sources.values()) > total // 20, fz.sources
    assert fz.acks.acks > total // 50 and fz.aw_bursts > total // 10


FUZZ_LOG_ENV = "RX_FUZZ_LOG"  # a file the fuzzer appends its progress to
def test_rx_engine():
    run_engine_tests()


@pytest.mark.long
def test_rx_engine_512():
    """Every test of this module on a 512-bit engine (a 1 KiB payload is 16
    beats): the same scoreboard, memory and ACK checks (about 2 min with the
    build)."""
    run_engine_tests(width=512)


@pytest.mark.long
def test_rx_engine_fuzz_long():
    run_engine_tests("test_fuzz_frames", extra_env={"RX_FUZZ_PACKETS": "10000"})


@pytest.mark.long
def test_rx_fuzz_long():
    """100,000 fuzzed frames (docs/verification.md, "Fuzzing"), about an hour: the
    progress (every 30 s of wall time) goes to build/rx_fuzz/progress.log and,
    through pytest's capture and xdist, to the terminal."""
    import sys
    import threading

    from sim.cocotb_runner import ROOT

    log = ROOT / "build" / "rx_fuzz" / "progress.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    done = threading.Event()

    def follow():  # the simulator's lines, as it writes them
        with open(log) as f:
            while not done.is_set():
                line = f.readline()
                if line:
                    print(line, end="", file=sys.__stderr__, flush=True)
                else:
                    done.wait(2)
            sys.__stderr__.write(f.read())

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    try:
        run_engine_tests("test_fuzz_rx", extra_env={"RX_FUZZ_FRAMES": "100000",
                                                    FUZZ_LOG_ENV: str(log)})
    finally:
        done.set()
        follower.join()

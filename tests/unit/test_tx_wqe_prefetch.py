"""hw/tx/wqe_prefetch.py: ``WqePrefetch`` behind a ``BurstShare``, with a
second client on the share, against a memory that holds several bursts in
flight and answers them in order after random delays, under random
doorbells, takes and ring resets.

Checked every cycle, with one WQE read ahead per QP and with several
(``depth``): a WQE is read only while it is posted (behind the doorbell),
each in ring order from the QP's ``ci`` and at most ``depth`` past it, at
``sq_base + slot x 64`` of the QP's ring; ``ready`` is set exactly while the
QP's WQE at ``ci`` is in the buffer (its bytes, read through
``rd_q``/``rd_slot``/``rd_wqe``), never for a read that a reset overtook;
every QP with a posted WQE is served; the other client's beats all
come back to it, in order, its request served within 100 cycles (it waits
for the prefetch's bursts in flight at most), and the shared request is
never withdrawn."""

import itertools
import random

import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from hw.tx.layouts import WQE_KEPT_FIELDS
from hw.tx.wqe_prefetch import BurstShare, WqePrefetch
from tests import seeds

ADDR_WIDTH = 48


def wqe_bytes(q, index, generation):
    """The 64 bytes at a QP's ring slot: who wrote them, for which WQE index."""
    return random.Random(f"{q}:{index}:{generation}").randbytes(64)


class Top(wiring.Component):
    def __init__(self, nq, dw, depth=1):
        self.pf = WqePrefetch(num_qps=nq, data_width=dw, addr_width=ADDR_WIDTH, depth=depth)
        self.share = BurstShare(data_width=dw, addr_width=ADDR_WIDTH)
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.submodules.pf, m.submodules.share = self.pf, self.share
        wiring.connect(m, self.pf.req, self.share.b_req)
        wiring.connect(m, self.share.b_data, self.pf.data)
        return m


MIN_CYCLES, MAX_CYCLES = 6000, 60000
MEM_QUEUE = 6  # bursts the memory holds in flight


def enough(log) -> bool:
    """The run has taken, interleaved and reset enough to have shown something."""
    return log["takes"] > 100 and log["a_bursts"] > 20 and log["resets"] > 3


@pytest.mark.parametrize("nq,dw,depth", [(1, 64, 1), (4, 64, 1), (16, 64, 1), (5, 128, 1),
                                         (3, 512, 1), (1, 512, 4), (4, 512, 2), (3, 64, 4),
                                         (16, 512, 4)])
def test_wqe_prefetch(nq, dw, depth):
    top = Top(nq, dw, depth)
    pf, share = top.pf, top.share
    rng = seeds.rng(nq * 1000 + dw + depth)
    nbytes = dw // 8
    beats = 64 // nbytes
    log = {"fills": 0, "takes": 0, "resets": 0, "discarded": 0, "a_bursts": 0}

    async def bench(ctx):
        log2 = [rng.choice([1, 2, 3, 15]) for _ in range(nq)]
        base = [(0x10000 * (q + 1)) << 8 for q in range(nq)]
        pi, ci, gen = [0] * nq, [0] * nq, [0] * nq
        written = {}  # (q, slot) -> (index, generation) of the WQE there
        enable = [1] * nq
        mem_queue = []  # bursts accepted: (client, addr, beats left, delay)
        # per QP, its reads not taken and not overtaken by a reset, in ring order:
        # [index, generation, arrived]
        reads = {q: [] for q in range(nq)}
        pi_seen = [[0] * nq, [0] * nq]  # pi as the prefetch sees it: 2 cycles late
        ring_q_prev = 0
        a_pending = None  # the second client's request: address
        a_expect = []  # the second client's beats, in order
        ready_prev = 0
        idle_since = [0] * nq
        reset_at = [-1] * nq  # the cycle of each QP's last ring reset
        b_presented_at = None  # the cycle the prefetch's pending request was first valid
        a_wait = 0  # cycles the second client's request has waited
        for cycle in range(MAX_CYCLES):
            # at least MIN_CYCLES, and on until the run has done enough of each (a seed
            # whose draws leave its QPs disabled or their rings full takes longer)
            if cycle >= MIN_CYCLES and enough(log):
                break
            # ---- the host: doorbells (posting WQEs), resets, enables
            posted = None
            for q in range(nq):
                size = 1 << log2[q]
                if posted is None and rng.random() < 0.05 and (pi[q] - ci[q]) % 65536 < size:
                    slot = pi[q] % size
                    written[(q, slot)] = (pi[q], gen[q])
                    pi[q] = (pi[q] + 1) % 65536
                    posted = q  # one doorbell a cycle, as the decode strobes them
                if rng.random() < 0.003:
                    gen[q] += 1  # the ring is reset: consumer = producer
                    ci[q] = pi[q]
                    ctx.set(pf.drop, 1 << q)
                    ctx.set(pf.drop_stb, 1)
                    ctx.set(pf.drop_q, q)
                    for read in reads[q]:
                        read.append("discard")
                    reads[q] = []
                    reset_at[q] = cycle
                    log["resets"] += 1
                    break
            else:
                ctx.set(pf.drop, 0)
                ctx.set(pf.drop_stb, 0)
            dropped = ctx.get(pf.drop)
            if rng.random() < 0.01:
                q = rng.randrange(nq)
                enable[q] ^= 1
            # ---- the consumer: take a ready QP's WQE (ci moves on with it)
            ready = ctx.get(pf.ready)
            take_q = None
            candidates = [q for q in range(nq) if ready >> q & 1 and not dropped >> q & 1]
            if candidates and rng.random() < 0.4:
                take_q = rng.choice(candidates)
            ctx.set(pf.take, take_q is not None)
            ctx.set(pf.take_q, take_q or 0)
            rd_q = take_q if take_q is not None else rng.randrange(nq)
            ctx.set(pf.rd_q, rd_q)
            if depth > 1:
                ctx.set(pf.rd_slot, (ci[rd_q] if take_q is not None else rng.randrange(4)) % depth)
                ctx.set(pf.post_stb, posted is not None)
                ctx.set(pf.post_q, posted or 0)
            # a doorbell's pi reaches the prefetch 2 cycles after its strobe (the
            # rows' latency), a reset's ci at once
            pi_seen = [pi_seen[1], list(pi)]
            ctx.set(pf.pi, sum(v << (16 * q) for q, v in enumerate(pi_seen[0])))
            ctx.set(pf.ci, sum(v << (16 * q) for q, v in enumerate(ci)))
            ctx.set(pf.enable, sum(v << q for q, v in enumerate(enable)))
            ctx.set(pf.op_halt, 0)
            ctx.set(pf.sq_base, base[ring_q_prev])
            ctx.set(pf.sq_log2, log2[ring_q_prev])
            ring_q_prev = ctx.get(pf.ring_q)
            # ---- the second client: a burst now and then, from its own region
            if a_pending is None and not a_expect and rng.random() < 0.02:
                a_pending = 0x7000_0000 + 64 * rng.randrange(1000)
            # the share serves the second client first: it waits for one burst at most
            a_wait = a_wait + 1 if a_pending is not None else 0
            assert a_wait < 100, cycle
            ctx.set(share.a_req.valid, a_pending is not None)
            ctx.set(share.a_req.payload.addr, a_pending or 0)
            ctx.set(share.a_req.payload.len, beats - 1)
            ctx.set(share.a_data.ready, rng.random() < 0.8)
            # ---- the memory: AR taken when no burst is queued; beats after a delay
            arvalid = ctx.get(share.req.valid)
            if not ctx.get(share.b_req.valid):
                b_presented_at = None
            elif b_presented_at is None:
                b_presented_at = cycle
            # several bursts in flight, their beats in order
            arready = len(mem_queue) < MEM_QUEUE and rng.random() < 0.7
            ctx.set(share.req.ready, arready)
            if arvalid and arready:
                addr = ctx.get(share.req.payload.addr)
                assert ctx.get(share.req.payload.len) == beats - 1
                if addr >= 0x7000_0000:
                    assert a_pending == addr
                    a_pending = None
                    data = [(addr + k).to_bytes(nbytes, "little") for k in range(beats)]
                    a_expect = [int.from_bytes(b, "little") for b in data]
                    log["a_bursts"] += 1
                else:
                    q = addr // (0x10000 << 8) - 1
                    slot = (addr - base[q]) // 64
                    assert 0 <= q < nq and slot < (1 << log2[q]), hex(addr)
                    index, generation = written[(q, slot)]
                    raw = wqe_bytes(q, index, generation)
                    data = [raw[k * nbytes:(k + 1) * nbytes] for k in range(beats)]
                    if reset_at[q] >= b_presented_at - 1:
                        # a reset overtook the request (which may not be withdrawn):
                        # its data must be discarded
                        read = [index, generation, False, "discard"]
                        log["discarded"] += 1
                    else:
                        # only a posted WQE, the next in ring order, at most depth ahead
                        want = (ci[q] + len(reads[q])) % 65536
                        assert len(reads[q]) < depth, (q, reads[q])
                        assert slot == want % (1 << log2[q]) and pi[q] != want, (q, slot)
                        assert index == want
                        read = [index, generation, False]
                        reads[q].append(read)
                owner = None if addr >= 0x7000_0000 else read
                mem_queue.append([data, rng.randrange(1, 5), owner])  # beats from the cycle after
            rvalid = False
            if mem_queue and mem_queue[0][1] == 0 and rng.random() < 0.8:
                rvalid = True
                ctx.set(share.data.payload.data, int.from_bytes(mem_queue[0][0][0], "little"))
                ctx.set(share.data.payload.last, len(mem_queue[0][0]) == 1)
            ctx.set(share.data.valid, rvalid)
            if rvalid and ctx.get(share.data.ready):
                beat = mem_queue[0][0].pop(0)
                if ctx.get(share.a_data.valid):
                    assert a_expect, (cycle, ctx.get(share.b_data.valid), beat)
                    assert int.from_bytes(beat, "little") == a_expect.pop(0)
                if not mem_queue[0][0]:
                    read = mem_queue.pop(0)[2]
                    if read is not None:
                        read[2] = True  # in the buffer (a discarded one: nowhere)
            elif mem_queue and mem_queue[0][1] > 0:
                mem_queue[0][1] -= 1
            await ctx.tick()
            # ---- after the clock: the consumer's take, and the buffer's content
            if take_q is not None:
                want_index, generation, arrived = reads[take_q].pop(0)
                assert arrived and want_index == ci[take_q]
                raw = wqe_bytes(take_q, want_index, generation)
                got = ctx.get(pf.rd_wqe)
                for name, off, size in WQE_KEPT_FIELDS:
                    want = int.from_bytes(raw[off:off + size], "little")
                    assert getattr(got, name) == want, (take_q, want_index, name)
                ci[take_q] = (ci[take_q] + 1) % 65536
                log["takes"] += 1
            now = ctx.get(pf.ready)
            for q in range(nq):
                # ready exactly while the WQE at ci is in (reads arrive in order)
                assert bool(now >> q & 1) == bool(reads[q] and reads[q][0][2]), (q, cycle)
                if now >> q & 1 and not ready_prev >> q & 1 and not (take_q == q):
                    log["fills"] += 1
                # every QP with a posted WQE is served within a bound
                waiting = enable[q] and pi[q] != ci[q] and not now >> q & 1
                idle_since[q] = idle_since[q] + 1 if waiting else 0
                assert idle_since[q] < 40 * nq + 100, (q, cycle)
            ready_prev = now

    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert enough(log), log


def test_wqe_prefetch_back_to_back():
    """Several QPs waiting, a memory that takes every request and answers each
    ``LATENCY`` cycles later: the next QP is picked as a request is taken and
    its reads overlap those in flight, so the requests come 3 cycles apart
    (ROW, ADDR, REQ) whatever the latency, where reads one at a time would
    take 4 plus the latency; each QP's WQE is read once and becomes ready."""
    nq, dw, latency = 4, 512, 6
    top = Top(nq, dw)
    pf, share = top.pf, top.share
    taken = []  # (cycle, q) of each request taken

    async def bench(ctx):
        base = [(0x10000 * (q + 1)) << 8 for q in range(nq)]
        ctx.set(pf.pi, sum(1 << (16 * q) for q in range(nq)))  # one WQE posted per QP
        ctx.set(pf.enable, (1 << nq) - 1)
        ctx.set(share.req.ready, 1)
        ctx.set(share.data.payload.last, 1)
        for cycle in range(60):
            ctx.set(pf.sq_base, base[ctx.get(pf.ring_q)])  # read in ADDR; ring_q holds from ROW
            ctx.set(share.data.valid, any(t == cycle - latency for t, _ in taken))
            if ctx.get(share.req.valid):
                taken.append((cycle, ctx.get(share.req.payload.addr) // (0x10000 << 8) - 1))
            await ctx.tick()
        assert ctx.get(pf.ready) == (1 << nq) - 1

    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert sorted(q for _, q in taken) == list(range(nq)), taken
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(taken)]
    assert gaps == [3] * (nq - 1), taken


@pytest.mark.parametrize("strobe_at", range(4, 16))
def test_wqe_prefetch_doorbell_race(strobe_at):
    """A read ahead of several WQEs that finds the ring's end (``pi`` as the
    prefetch sees it, two cycles after the doorbell's strobe) stops asking for
    the QP until a doorbell; a doorbell strobed just before, whose ``pi`` that
    read did not see, still brings the QP back: its second WQE is read, at
    whichever cycle the doorbell comes."""
    top = Top(1, 512, depth=4)
    pf, share = top.pf, top.share
    taken = []  # the cycles requests were taken

    async def bench(ctx):
        ctx.set(pf.enable, 1)
        ctx.set(pf.sq_base, 0x10000 << 8)
        ctx.set(pf.sq_log2, 4)
        ctx.set(share.req.ready, 1)
        ctx.set(share.data.payload.last, 1)
        for cycle in range(80):
            # doorbells strobed at 0 and strobe_at, each pi seen 2 cycles later
            ctx.set(pf.pi, 0 if cycle < 2 else 1 if cycle < strobe_at + 2 else 2)
            ctx.set(pf.post_stb, cycle in (0, strobe_at))
            ctx.set(share.data.valid, any(t == cycle - 3 for t in taken))
            if ctx.get(share.req.valid):
                taken.append(cycle)
            await ctx.tick()

    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert len(taken) == 2, taken

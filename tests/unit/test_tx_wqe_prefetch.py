"""hw/tx/wqe_prefetch.py: ``WqePrefetch`` behind a ``BurstShare``, with a
second client on the share, against a memory that holds several bursts in
flight and answers them in order after random delays, under random
doorbells, takes and ring resets.

Checked every cycle: a WQE is read only while it is posted (its slot is the
QP's ``ci``, behind the doorbell), at ``sq_base + slot x 64`` of the QP's
ring; ``ready`` rises only with the QP's WQE at ``ci`` in the buffer (its
bytes, read through ``rd_q``/``rd_wqe``) and never for a read that a reset
overtook; every QP with a posted WQE is served; the other client's beats all
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
    def __init__(self, nq, dw):
        self.pf = WqePrefetch(num_qps=nq, data_width=dw, addr_width=ADDR_WIDTH)
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


@pytest.mark.parametrize("nq,dw", [(1, 64), (4, 64), (16, 64), (5, 128), (3, 512)])
def test_wqe_prefetch(nq, dw):
    top = Top(nq, dw)
    pf, share = top.pf, top.share
    rng = seeds.rng(nq * 1000 + dw)
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
        reads = {}  # q -> (index, generation) read since its last take/reset, or None
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
            for q in range(nq):
                size = 1 << log2[q]
                if rng.random() < 0.05 and (pi[q] - ci[q]) % 65536 < size:
                    slot = pi[q] % size
                    written[(q, slot)] = (pi[q], gen[q])
                    pi[q] = (pi[q] + 1) % 65536
                if rng.random() < 0.003:
                    gen[q] += 1  # the ring is reset: consumer = producer
                    ci[q] = pi[q]
                    ctx.set(pf.drop, 1 << q)
                    ctx.set(pf.drop_stb, 1)
                    ctx.set(pf.drop_q, q)
                    reads.pop(q, None)
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
            ctx.set(pf.pi, sum(v << (16 * q) for q, v in enumerate(pi)))
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
                    assert not ready >> q & 1 and reads.get(q) is None
                    index, generation = written[(q, slot)]
                    raw = wqe_bytes(q, index, generation)
                    data = [raw[k * nbytes:(k + 1) * nbytes] for k in range(beats)]
                    if reset_at[q] >= b_presented_at - 1:
                        # a reset overtook the request (which may not be withdrawn):
                        # its data must be discarded
                        reads[q] = "discard"
                        log["discarded"] += 1
                    else:
                        # only a posted WQE, at ci
                        assert slot == ci[q] % (1 << log2[q]) and pi[q] != ci[q], (q, slot)
                        assert index == ci[q]
                        reads[q] = (index, generation)
                owner = None if addr >= 0x7000_0000 else q
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
                    owner = mem_queue.pop(0)[2]
                    if reads.get(owner) == "discard":
                        del reads[owner]
            elif mem_queue and mem_queue[0][1] > 0:
                mem_queue[0][1] -= 1
            await ctx.tick()
            # ---- after the clock: the consumer's take, and the buffer's content
            if take_q is not None:
                want_index, generation = reads.pop(take_q)
                assert want_index == ci[take_q]
                raw = wqe_bytes(take_q, want_index, generation)
                got = ctx.get(pf.rd_wqe)
                for name, off, size in WQE_KEPT_FIELDS:
                    want = int.from_bytes(raw[off:off + size], "little")
                    assert getattr(got, name) == want, (take_q, want_index, name)
                ci[take_q] = (ci[take_q] + 1) % 65536
                log["takes"] += 1
            now = ctx.get(pf.ready)
            for q in range(nq):
                if now >> q & 1 and not ready_prev >> q & 1 and not (take_q == q):
                    assert reads.get(q) is not None and reads[q][0] == ci[q], (q, reads, ci)
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

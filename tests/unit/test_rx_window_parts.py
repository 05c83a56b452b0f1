"""The sub-components of the RX PSN window (hw/rx/window_*.py) in Amaranth's
simulator, each against a Python reference of its contract."""


import pytest
from amaranth.hdl import Value
from amaranth.sim import Simulator

from hw.protocol import SVC_TIME_MAX, Syndrome
from hw.rx.window_ack import AckReader
from hw.rx.window_advance import CqSlot, FirstHole
from hw.rx.window_scan import TimerScan
from hw.rx.window_tables import InFlightTable, PendingTable
from tests import seeds

PSN = 1 << 24


def run(dut, bench):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


# ---- AckReader ---------------------------------------------------------------------------

@pytest.mark.parametrize("sack_bits,ns_per_cycle,ipv6", [(32, 8, False), (64, 7, False),
                                                         (64, 8, True)])
def test_ack_reader_builds_each_job_from_the_words_at_epsn(sack_bits, ns_per_cycle, ipv6):
    """The job carries the ``sack_bits`` bitmap bits from epsn's bit on of the
    two words loaded (ACK1, ACK2), the cumulative PSN epsn - 1 (also an ACK's
    PSN; a NAK's is the request's), the probe bit, the service time (the
    cycles from the row's ``svc_from`` to ``now``, in 64 ns units rounded
    down, saturating at SVC_TIME_MAX, also across the time's wrap) and the
    passed-through
    fields; it holds while ``ack.valid`` whatever its sources do, and each
    ``send`` gives exactly one transfer. Built with ``ipv6``, the job's
    128-bit ``dst_ip`` and ``v6`` are the QP's ``peer_ip`` and ``peer_v6``."""
    W = sack_bits
    dut = AckReader(sack_bits=W, qp_bits=2, addr_width=32, ns_per_cycle=ns_per_cycle,
                    ipv6=ipv6)
    rng = seeds.rng(sack_bits)
    got = []
    want = []

    def randomise_sources(ctx):
        ctx.set(dut.word, rng.getrandbits(W))
        ctx.set(dut.qp_state.epsn, rng.getrandbits(24))
        ctx.set(dut.request.psn, rng.getrandbits(24))
        ctx.set(dut.syndrome, rng.getrandbits(8))
        ctx.set(dut.now, rng.getrandbits(24))
        ctx.set(dut.qp_state.svc_from, rng.getrandbits(24))

    async def take_ready(ctx):
        ready = int(rng.random() < 0.4)
        ctx.set(dut.ack.ready, ready)
        if ready and ctx.get(dut.ack.valid):
            got.append(ctx.get(Value.cast(dut.ack.payload)))
        await ctx.tick()

    async def bench(ctx):
        layout = dut.ack.payload.shape()
        for _ in range(60):
            epsn = rng.choice([rng.getrandbits(24), PSN - 1, 0, rng.randrange(W)])
            first, second = rng.getrandbits(W), rng.getrandbits(W)
            syn = rng.choice([Syndrome.ACK, Syndrome.NAK_TRIMMED, rng.getrandbits(8)])
            probe = rng.getrandbits(1)
            svc_from = rng.getrandbits(24)
            top = ((SVC_TIME_MAX + 1) * 64 - 1) // ns_per_cycle  # the last unsaturated
            cycles = rng.choice([0, 1, 8, 9, rng.randrange(1 << 8), rng.randrange(1 << 19),
                                 top, top + 1, rng.getrandbits(24)])
            fields = dict(msn=rng.getrandbits(24), ece=rng.getrandbits(1),
                          ce_count=rng.getrandbits(16), ev=rng.getrandbits(16),
                          mac=rng.getrandbits(48))
            cfg = dict(peer_qpn=rng.getrandbits(24), peer_ip=rng.getrandbits(128 if ipv6 else 32))
            if ipv6:
                cfg["peer_v6"] = rng.getrandbits(1)
            req = dict(psn=rng.getrandbits(24), probe_id=rng.getrandbits(32),
                       probe_ev=rng.getrandbits(16), timestamp=rng.getrandbits(64))
            # the previous job leaves first (the engine sends only while ack.valid is clear)
            while ctx.get(dut.ack.valid):
                await take_ready(ctx)
            ctx.set(dut.ack.ready, 0)
            ctx.set(dut.qp_state.epsn, epsn)
            ctx.set(dut.syndrome, syn)
            ctx.set(dut.probe, probe)
            ctx.set(dut.qp_state.svc_from, svc_from)
            ctx.set(dut.now, (svc_from + cycles) % PSN)
            for k, v in fields.items():
                ctx.set(getattr(dut.qp_state, k), v)
            for k, v in cfg.items():
                ctx.set(getattr(dut.cfg, k), v)
            for k, v in req.items():
                ctx.set(getattr(dut.request, k), v)
            ctx.set(dut.word, first)
            ctx.set(dut.load_first, 1)
            await ctx.tick()
            ctx.set(dut.load_first, 0)
            ctx.set(dut.word, second)
            ctx.set(dut.load_second, 1)
            await ctx.tick()
            ctx.set(dut.load_second, 0)
            ctx.set(dut.word, rng.getrandbits(W))
            await ctx.tick()  # ACK_SH
            ctx.set(dut.send, 1)
            await ctx.tick()
            ctx.set(dut.send, 0)
            want.append(dict(
                probe=probe, syndrome=syn,
                psn=(epsn - 1) % PSN if syn == Syndrome.ACK else req["psn"],
                dqpn=cfg["peer_qpn"], msn=fields["msn"], cum_psn=(epsn - 1) % PSN,
                sack_base=epsn,
                bitmap=((second << W | first) >> (epsn % W)) & ((1 << W) - 1),
                ece=fields["ece"], ce_count=fields["ce_count"], ev=fields["ev"],
                svc_time=min(cycles * ns_per_cycle // 64, SVC_TIME_MAX),
                dst_mac=fields["mac"], dst_ip=cfg["peer_ip"], probe_id=req["probe_id"],
                probe_ev=req["probe_ev"], timestamp=req["timestamp"],
                **({"v6": cfg["peer_v6"]} if ipv6 else {})))
            # the job holds while it waits, whatever its sources do
            for _ in range(rng.randrange(4)):
                randomise_sources(ctx)
                await take_ready(ctx)
        while ctx.get(dut.ack.valid):
            await take_ready(ctx)
        got[:] = [{k: (v >> layout[k].offset) & ((1 << layout[k].width) - 1)
                   for k in want[0]} for v in got]

    run(dut, bench)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g == w, f"job {i}"


# ---- InFlightTable -----------------------------------------------------------------------

@pytest.mark.parametrize("slots", [4, 8])
def test_inflight_table_against_reference(slots):
    """Random entries, releases, row writes and reads: ``hit`` is the match of
    the cycle before (a valid slot with the request's QP and PSN), the free
    slot the lowest invalid one, ``any_free`` and ``busy`` registered from the
    slots and the entry, a row read the last row written."""
    qp_bits = 2
    dut = InFlightTable(qp_bits=qp_bits, slots=slots)
    rng = seeds.rng(slots)
    valid = [0] * slots
    keys = [(0, 0)] * slots
    rows = {}
    match = [0] * slots
    any_free = busy = 0
    hits = 0

    async def bench(ctx):
        nonlocal valid, match, any_free, busy, hits
        for cyc in range(3000):
            if rng.random() < 0.6 and any(valid):
                qp, psn = keys[rng.choice([i for i in range(slots) if valid[i]])]
            else:
                qp, psn = rng.getrandbits(qp_bits), rng.choice([rng.getrandbits(24), 5, 6])
            row = dict(qp=qp, psn=psn, ackreq=rng.getrandbits(1), ce=rng.getrandbits(1))
            enter = 1 << rng.randrange(slots) if rng.random() < 0.3 else 0
            write, wslot = rng.random() < 0.3, rng.randrange(slots)
            release, rslot = rng.random() < 0.3, rng.randrange(slots)
            read_slot = rng.randrange(slots)
            for k, v in row.items():
                ctx.set(getattr(dut.request, k), v)
            ctx.set(dut.enter, enter)
            ctx.set(dut.write, write)
            ctx.set(dut.write_slot, wslot)
            ctx.set(dut.release, release)
            ctx.set(dut.release_slot, rslot)
            ctx.set(dut.read_slot, read_slot)
            # outputs against the reference
            free = [i for i in range(slots) if not valid[i]]
            assert ctx.get(dut.hit) == any(match), cyc
            hits += any(match)
            assert ctx.get(dut.free_slot) == (free[0] if free else 0), cyc
            assert ctx.get(dut.free_onehot) == (1 << free[0] if free else 0), cyc
            assert ctx.get(dut.any_free) == any_free, cyc
            assert ctx.get(dut.busy) == busy, cyc
            if read_slot in rows:
                got = ctx.get(dut.read_row)
                assert {k: getattr(got, k) for k in row} == rows[read_slot], cyc
            # the next state
            match = [valid[i] and keys[i] == (qp, psn) for i in range(slots)]
            any_free = int(not all(valid[i] or (enter >> i) & 1 for i in range(slots)))
            busy = int(any(valid) or enter != 0)
            if release:
                valid[rslot] = 0
            for i in range(slots):
                if (enter >> i) & 1:
                    valid[i], keys[i] = 1, (qp, psn)
            if write:
                rows[wslot] = row
            await ctx.tick()

    run(dut, bench)
    assert hits > 100


# ---- PendingTable ------------------------------------------------------------------------

@pytest.mark.parametrize("entries, base", [(4, 1000), (8, PSN - 40)])
def test_pending_table_completes_passed_entries_earliest_first(entries, base):
    """Entries enter, lose their in-flight flag, are dropped by a failed write
    or an init of their QP; an advance over a word passes every entry of the
    QP in it with no hole before it, and the completions come out earliest
    PSN first (across the 2^24 wrap), each its own completion row. The free
    entry, the free counts and a QP's WITH_IMMEDIATE count follow the table.
    Every step as the window engine drives it (one operation at a time)."""
    W, ring_words, qp_bits, tag_bits = 32, 4, 1, 2
    dut = PendingTable(qp_bits=qp_bits, tag_bits=tag_bits, entries=entries, sack_bits=W,
                       ring_words=ring_words)
    rng = seeds.rng(entries)
    ref = {}  # entry -> dict(qp, psn, tag, in_flight, imm, row)
    completions = []

    def rel(psn):
        return (psn - base) % PSN

    async def idle(ctx, n=1):
        for _ in range(n):
            check_free(ctx)
            await ctx.tick()

    def check_free(ctx):
        free = [i for i in range(entries) if i not in ref]
        assert ctx.get(dut.any_free) == bool(free)
        assert ctx.get(dut.two_free) == (len(free) >= 2)
        if free:
            assert ctx.get(dut.free_slot) == free[0]
        assert ctx.get(dut.free_onehot) == (1 << free[0] if free else 0)
        qp = ctx.get(dut.request.qp)
        assert ctx.get(dut.imm_count) == sum(e["qp"] == qp and e["imm"] for e in ref.values())

    async def strobe(ctx, port, **sets):
        for k, v in sets.items():
            ctx.set(getattr(dut, k), v)
        ctx.set(port, 1)
        await idle(ctx)
        ctx.set(port, 0)

    async def bench(ctx):
        # 400 operations, and more (up to 4000) until more than 30 completions
        # have been checked: how many 400 give depends on the seed
        ops = 0
        while ops < 400 or len(completions) <= 30 and ops < 4000:
            ops += 1
            op = rng.choices(["enter", "written", "lost", "drop_qp", "advance"],
                             [6, 2, 1, 0.3, 3])[0]
            if op == "enter" and len(ref) < entries:
                slot = min(i for i in range(entries) if i not in ref)
                taken = {e["psn"] for e in ref.values()}
                offsets = [o for o in range(100) if (base + o) % PSN not in taken]
                psn = (base + rng.choice(offsets)) % PSN
                e = dict(qp=rng.getrandbits(qp_bits), psn=psn, tag=rng.getrandbits(tag_bits),
                         imm=rng.getrandbits(1), in_flight=1,
                         row=dict(imm_flag=rng.getrandbits(1), opcode=rng.getrandbits(8),
                                  imm=rng.getrandbits(32), dma_len=rng.getrandbits(32)))
                for k in ("qp", "psn", "tag", "imm"):
                    ctx.set(getattr(dut.request, k), e[k])
                ctx.set(dut.request_le, (1 << (psn % W + 1)) - 1)
                for k, v in e["row"].items():
                    ctx.set(getattr(dut.row, k), v)
                await idle(ctx)  # the check: the order against the entries registers
                ctx.set(dut.enter, 1 << slot)
                ctx.set(dut.write, 1)
                ctx.set(dut.write_slot, slot)
                await idle(ctx)
                ctx.set(dut.enter, 0)
                ctx.set(dut.write, 0)
                ref[slot] = e
            elif op == "written":
                tag = rng.getrandbits(tag_bits)
                await strobe(ctx, dut.written, tag=tag)
                for e in ref.values():
                    if e["tag"] == tag:
                        e["in_flight"] = 0
            elif op == "lost":
                tag = rng.getrandbits(tag_bits)
                await strobe(ctx, dut.lost, tag=tag)
                await strobe(ctx, dut.drop_lost)
                for i in [i for i, e in ref.items() if e["in_flight"] and e["tag"] == tag]:
                    del ref[i]
            elif op == "drop_qp":
                qp = rng.getrandbits(qp_bits)
                await strobe(ctx, dut.drop_qp, qp=qp)
                for i in [i for i, e in ref.items() if e["qp"] == qp]:
                    del ref[i]
            elif op == "advance":
                qp = rng.getrandbits(qp_bits)
                epsn = (base + rng.randrange(100)) % PSN
                # the clear bits of epsn's word from epsn on
                holes = rng.getrandbits(W) & rng.choice([0, 0, (1 << W) - 1]) \
                    & ~((1 << (epsn % W)) - 1) & ((1 << W) - 1)
                ctx.set(dut.qp, qp)
                ctx.set(dut.epsn, epsn)
                ctx.set(dut.holes, holes)
                await strobe(ctx, dut.restart)
                await idle(ctx)  # ADV_RD: the hole flags register
                await strobe(ctx, dut.pass_word)
                word = (epsn // W) % ring_words
                passed = [i for i, e in ref.items()
                          if e["qp"] == qp and (e["psn"] // W) % ring_words == word
                          and not holes & ((1 << (e["psn"] % W + 1)) - 1)]
                passed.sort(key=lambda i: rel(ref[i]["psn"]))
                while True:
                    await idle(ctx)  # the selection registers
                    assert ctx.get(dut.sel_any) == bool(passed)
                    assert ctx.get(dut.sel_more) == (len(passed) >= 2)
                    if not passed:
                        break
                    first = passed.pop(0)
                    row = ctx.get(dut.sel_row)
                    assert {k: getattr(row, k) for k in ref[first]["row"]} == ref[first]["row"]
                    completions.append(first)
                    await strobe(ctx, dut.complete)
                    del ref[first]
            await idle(ctx, rng.randrange(2))

    run(dut, bench)
    assert len(completions) > 30


# ---- FirstHole, CqSlot -------------------------------------------------------------------

@pytest.mark.parametrize("width", [32, 64, 128])
def test_first_hole_is_the_lowest_set_bit_two_cycles_on(width):
    dut = FirstHole(width)
    rng = seeds.rng(width)
    history = []

    async def bench(ctx):
        for cyc in range(600):
            holes = rng.choice([rng.getrandbits(width), 1 << rng.randrange(width),
                                (1 << width) - (1 << rng.randrange(width))])
            ctx.set(dut.holes, holes)
            history.append(holes)
            if cyc >= 2:
                before = history[cyc - 2]
                want = (before & -before).bit_length() - 1
                assert ctx.get(dut.first) == want, (cyc, hex(before))
            await ctx.tick()

    run(dut, bench)


def test_cq_slot_against_reference():
    """The ring is full when cq_prod - cq_cons (mod 2^16) reaches its size
    (2^cq_log2, all 2^16 from 16 on); the slot's address wraps within
    addr_width bits; the phase flips on every pass over the ring."""
    aw = 40
    dut = CqSlot(aw)
    rng = seeds.rng(3)
    fulls = 0

    async def bench(ctx):
        nonlocal fulls
        for _ in range(500):
            log2 = rng.choice([0, 1, 4, 15, 16, 17, 31, rng.randrange(32)])
            prod = rng.getrandbits(16)
            cons = rng.choice([rng.getrandbits(16), (prod - rng.randrange(4)) % 65536,
                               (prod - (1 << min(log2, 16)) + rng.randrange(-1, 2)) % 65536])
            base = rng.choice([rng.getrandbits(aw), (1 << aw) - 32])
            ctx.set(dut.cq_log2, log2)
            ctx.set(dut.cq_prod, prod)
            ctx.set(dut.cq_cons, cons)
            ctx.set(dut.cq_base, base)
            await ctx.tick().repeat(2)
            size = 1 << min(log2, 16)
            full = (prod - cons) % 65536 >= size
            fulls += full
            assert ctx.get(dut.full) == full, (log2, prod, cons)
            assert ctx.get(dut.addr) == (base + (prod % size) * 32) % (1 << aw)
            assert ctx.get(dut.phase) == 1 - ((prod >> log2) & 1)

    run(dut, bench)
    assert 50 < fulls < 450


# ---- TimerScan ---------------------------------------------------------------------------

def test_timer_scan_against_reference():
    """A scan is due after three operations; each scan takes the next QP; a
    QP's ACK is due when its timer is armed, has packets to acknowledge and
    ``now`` is at or past its deadline (by less than 2^23 cycles, across the
    2^24 wrap)."""
    qp_bits = 2
    dut = TimerScan(qp_bits)
    rng = seeds.rng(5)
    ops, qp, expired, dues = 0, 0, 0, 0

    async def bench(ctx):
        nonlocal ops, qp, expired, dues
        for now in range(3000):
            assert ctx.get(dut.now) == now % PSN
            assert ctx.get(dut.due) == (ops == 3)
            assert ctx.get(dut.qp) == qp
            assert ctx.get(dut.expired) == expired
            due = ops == 3
            start = due or rng.random() < 0.1
            count = not start and rng.random() < 0.7
            check = rng.random() < 0.3
            deadline = (now + rng.randint(-300, 300)) % PSN
            armed, unacked = rng.getrandbits(1), rng.choice([0, 1, 200])
            ctx.set(dut.start, start)
            ctx.set(dut.count, count)
            ctx.set(dut.check, check)
            ctx.set(dut.row.deadline, deadline)
            ctx.set(dut.row.armed, armed)
            ctx.set(dut.row.unacked, unacked)
            if count:
                ops += 1
            if start:
                qp, ops = (qp + 1) % (1 << qp_bits), 0
            if check:
                late = (now - deadline) % PSN < 1 << 23
                expired = int(bool(armed and unacked and late))
                dues += expired
            await ctx.tick()

    run(dut, bench)
    assert dues > 50

"""The sub-components of the RX PSN window (hw/rx/window_*.py) in Amaranth's
simulator, each against a Python reference of its contract."""

import random

import pytest
from amaranth.hdl import Value
from amaranth.sim import Simulator

from hw.protocol import Syndrome
from hw.rx.window_ack import AckReader

PSN = 1 << 24


def run(dut, bench):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


# ---- AckReader ---------------------------------------------------------------------------

@pytest.mark.parametrize("sack_bits", [32, 64])
def test_ack_reader_builds_each_job_from_the_words_at_epsn(sack_bits):
    """The job carries the ``sack_bits`` bitmap bits from epsn's bit on of the
    two words loaded (ACK1, ACK2), the cumulative PSN epsn - 1 (also an ACK's
    PSN; a NAK's is the request's), the probe bit and the passed-through
    fields; it holds while ``ack.valid`` whatever its sources do, and each
    ``send`` gives exactly one transfer."""
    W = sack_bits
    dut = AckReader(sack_bits=W, qp_bits=2, addr_width=32)
    rng = random.Random(sack_bits)
    got = []
    want = []

    def randomise_sources(ctx):
        ctx.set(dut.word, rng.getrandbits(W))
        ctx.set(dut.qp_state.epsn, rng.getrandbits(24))
        ctx.set(dut.request.psn, rng.getrandbits(24))
        ctx.set(dut.syndrome, rng.getrandbits(8))

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
            fields = dict(msn=rng.getrandbits(24), ece=rng.getrandbits(1),
                          ce_count=rng.getrandbits(16), ev=rng.getrandbits(16),
                          mac=rng.getrandbits(48))
            cfg = dict(peer_qpn=rng.getrandbits(24), peer_ip=rng.getrandbits(32))
            req = dict(psn=rng.getrandbits(24), probe_id=rng.getrandbits(32),
                       probe_ev=rng.getrandbits(16), timestamp=rng.getrandbits(64))
            # the previous job leaves first (the engine sends only while ack.valid is clear)
            while ctx.get(dut.ack.valid):
                await take_ready(ctx)
            ctx.set(dut.ack.ready, 0)
            ctx.set(dut.qp_state.epsn, epsn)
            ctx.set(dut.syndrome, syn)
            ctx.set(dut.probe, probe)
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
                dst_mac=fields["mac"], dst_ip=cfg["peer_ip"], probe_id=req["probe_id"],
                probe_ev=req["probe_ev"], timestamp=req["timestamp"]))
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

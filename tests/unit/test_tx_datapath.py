"""Amaranth-simulator tests of the TX datapath blocks, next to the cocotb
regression: HeaderBuilder -> Framer -> IcrcInserter against the scapy
reference frame, the Realigner on every start lane, the round-robin picker."""

import ipaddress
import itertools

import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from host_driver import layers as L
from hw.headers import ICRC_BYTES
from hw.protocol import EvFormat, srv6_carrier, srv6_sport, stev_fields
from hw.stream import Beat
from hw.tx.arbiter import round_robin
from hw.tx.carrier import CarrierWriter
from hw.tx.dma import Realigner
from hw.tx.framer import Framer
from hw.tx.header_builder import HeaderBuilder
from hw.tx.icrc import IcrcInserter
from hw.tx.layouts import PacketDesc
from tests import seeds

from .csrbus import csr_read, csr_write
from .simstream import collect_frames, send_record


class Datapath(wiring.Component):
    def __init__(self, w, ipv6=False):
        self.w = w
        self.ipv6 = ipv6
        self.ev_width = 64 if ipv6 else 16  # every EV format over IPv6
        super().__init__(
            {
                "desc": In(stream.Signature(PacketDesc(ipv6, self.ev_width))),
                "payload": In(stream.Signature(Beat(w))),
                "o": Out(stream.Signature(Beat(w))),
                "src_mac": In(48),
                "src_ip": In(32),
                "src_ip6": In(128),
            }
        )

    def elaborate(self, platform):
        m = Module()
        m.submodules.hb = hb = HeaderBuilder(self.ipv6, self.ev_width)
        m.submodules.framer = fr = Framer(self.w, self.ipv6)
        m.submodules.icrc = ic = IcrcInserter(self.w, self.ipv6)
        wiring.connect(m, wiring.flipped(self.desc), hb.desc)
        wiring.connect(m, hb.hdr, fr.hdr)
        wiring.connect(m, wiring.flipped(self.payload), fr.payload)
        wiring.connect(m, fr.o, ic.i)
        wiring.connect(m, ic.o, wiring.flipped(self.o))
        m.d.comb += [hb.src_mac.eq(self.src_mac), hb.src_ip.eq(self.src_ip)]
        if self.ipv6:
            m.d.comb += hb.src_ip6.eq(self.src_ip6)
        return m


def _beats(data: bytes, nbytes: int):
    for i in range(0, max(len(data), 1), nbytes):
        chunk = data[i : i + nbytes]
        yield int.from_bytes(chunk, "little"), (1 << len(chunk)) - 1, i + nbytes >= len(data)


async def _send_frame(ctx, port, data: bytes, nbytes: int):
    """``data`` into a stream of ``Beat``s, a beat per handshake."""
    for word, keep, last in _beats(data, nbytes):
        await send_record(ctx, port, ((port.payload.data, word), (port.payload.keep, keep),
                                      (port.payload.last, last)))


SRC_IP6, DST_IP6 = "2001:db8::a:1", "2001:db8:1:2::bb"


def _cases(rng, lengths, ipv6, ev_width):
    """A WRITE packet's fields (``L.write_packet``'s, and ``ev_entry``: the EV
    entry and its format) per payload length: random opcodes, PSNs, keys, EVs;
    with ``ipv6``, a random half over IPv6, each EV in a random format."""
    cases = []
    for n in lengths:
        op = rng.choice(L.WRITE_OPCODES)
        v6 = ipv6 and rng.getrandbits(1)
        fmt = rng.choice(list(EvFormat)) if ipv6 else EvFormat.UDP
        ev = rng.getrandbits(ev_width)
        sport, flow_label = ev & 0xFFFF, 0
        if v6 and fmt == EvFormat.STEV:
            sport, flow_label = stev_fields(ev)
        elif v6 and fmt == EvFormat.SRV6:
            sport = srv6_sport(ev)
        cases.append(
            dict(
                opcode=op,
                dqpn=rng.getrandbits(24),
                psn=rng.getrandbits(24),
                va=rng.getrandbits(64),
                rkey=rng.getrandbits(32),
                dma_len=rng.getrandbits(31),
                imm=rng.getrandbits(32) if op in L.IMM_OPCODES else None,
                payload=rng.randbytes(n),
                ackreq=rng.getrandbits(1),
                ev=sport,
                flow_label=flow_label,
                ev_entry=(ev, fmt),
                dscp=rng.getrandbits(6),
                src_mac="02:11:22:33:44:55",
                dst_mac="02:66:77:88:99:aa",
                src_ip=SRC_IP6 if v6 else "192.168.1.1",
                dst_ip=DST_IP6 if v6 else "172.16.5.9",
            )
        )
    return cases


def _set_desc(ctx, d, c, ipv6):
    """A ``PacketDesc`` (``d``) set to case ``c``'s fields."""
    se = int(c["opcode"] in L.IMM_OPCODES)
    ctx.set(d.opcode, c["opcode"])
    ctx.set(d.se, se)
    ctx.set(d.ackreq, c["ackreq"])
    ctx.set(d.dqpn, c["dqpn"])
    ctx.set(d.psn, c["psn"])
    ctx.set(d.va, c["va"])
    ctx.set(d.rkey, c["rkey"])
    ctx.set(d.dma_len, c["dma_len"])
    ctx.set(d.imm, c["imm"] or 0)
    ctx.set(d.length, len(c["payload"]))
    ctx.set(d.ev, c["ev_entry"][0])
    if ipv6:
        ctx.set(d.ev_format, c["ev_entry"][1])
    ctx.set(d.dst_mac, 0x0266778899AA)
    if ":" in c["dst_ip"]:
        ctx.set(d.dst_ip, int(ipaddress.IPv6Address(c["dst_ip"])))
        ctx.set(d.v6, 1)
    else:
        ctx.set(d.dst_ip, 0xAC100509)
        if ipv6:
            ctx.set(d.v6, 0)
    ctx.set(d.dscp, c["dscp"])


def _reference(c) -> bytes:
    """Case ``c``'s frame, built by scapy (host_driver/layers.py)."""
    ref = L.write_packet(**{k: v for k, v in c.items() if k != "ev_entry"})
    ref[L.BTH].se = int(c["opcode"] in L.IMM_OPCODES)
    return bytes(ref)


@pytest.mark.parametrize("w,ipv6", [(64, False), (128, False),
                                    pytest.param(256, False, marks=pytest.mark.long),
                                    (64, True), (128, True),
                                    pytest.param(256, True, marks=pytest.mark.long)],
                         ids=["64", "128", "256", "64-ipv6", "128-ipv6", "256-ipv6"])
def test_frames_match_scapy(w, ipv6):
    """Frames of every WRITE opcode and payload lengths 0..70 are byte-exact;
    built with ``ipv6``, a random half of them over IPv6 (each header length
    after each other, so every residue change of the framer is crossed),
    each QP's EV (64 bits) in a random format: UDP's source port, STEV's
    flow label and source port, SRv6's source port (the header builder's
    frame is the one to the peer: ``CarrierWriter`` puts the carrier in
    later), and an IPv4 frame's EV as UDP's whatever its format.
    Not at 512 bits: Amaranth's Python simulator cannot compile the ICRC
    inserter's 64-lane mux trees (too many levels of indentation)."""
    rng = seeds.rng(w + ipv6)
    nbytes = w // 8
    dut = Datapath(w, ipv6)
    cases = _cases(rng, list(range(0, 20)) + [31, 32, 33, 63, 64, 65, 70], ipv6, dut.ev_width)
    got = []

    async def feed(ctx):
        ctx.set(dut.src_mac, 0x021122334455)
        ctx.set(dut.src_ip, 0xC0A80101)
        ctx.set(dut.src_ip6, int(ipaddress.IPv6Address(SRC_IP6)))
        for c in cases:
            _set_desc(ctx, dut.desc.payload, c, ipv6)
            ctx.set(dut.desc.valid, 1)
            await ctx.tick().until(dut.desc.ready)
            ctx.set(dut.desc.valid, 0)

    async def feed_payload(ctx):
        for c in cases:
            if not c["payload"]:
                continue
            await _send_frame(ctx, dut.payload, c["payload"], nbytes)

    async def collect(ctx):
        o = dut.o
        await collect_frames(ctx, o.valid, o.ready, o.payload.data, o.payload.keep,
                             o.payload.last, got, len(cases), seed=1)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(feed)
    sim.add_testbench(feed_payload)
    sim.add_testbench(collect)
    sim.run_until(1e-8 * 20000)
    assert len(got) == len(cases)
    for c, frame in zip(cases, got, strict=True):
        assert L.check_frame(frame) == (True, True)
        assert frame == _reference(c), f"opcode {c['opcode']:#x}, {len(c['payload'])} bytes"


@pytest.mark.parametrize("ready_p", [1.0, 0.4], ids=["ready", "random-ready"])
@pytest.mark.parametrize("ipv6", [False, True], ids=["ipv4", "ipv6"])
def test_header_builder_back_to_back(ipv6, ready_p):
    """Descriptors offered back to back (``valid`` held): each header's bytes,
    length and pad are the scapy frame's, in order, none lost or repeated,
    under a random ``hdr.ready`` too; with the framer's side always ready, a
    header every 3 cycles at most once the first is out, 3 in 7 (a
    64-byte WRITE's frame is 3 beats at 512 bits)."""
    ev_width = 64 if ipv6 else 16
    rng = seeds.rng(7 + ipv6)
    dut = HeaderBuilder(ipv6, ev_width)
    cases = _cases(rng, [rng.randrange(0, 1500) for _ in range(40)], ipv6, ev_width)
    got = []  # (cycle, bytes, length, pad)

    async def feed(ctx):
        ctx.set(dut.src_mac, 0x021122334455)
        ctx.set(dut.src_ip, 0xC0A80101)
        if ipv6:
            ctx.set(dut.src_ip6, int(ipaddress.IPv6Address(SRC_IP6)))
        ctx.set(dut.desc.valid, 1)
        for c in cases:
            _set_desc(ctx, dut.desc.payload, c, ipv6)
            await ctx.tick().until(dut.desc.ready)
        ctx.set(dut.desc.valid, 0)

    async def collect(ctx):
        bp = seeds.rng(3)
        nbytes = len(dut.hdr.payload.bytes) // 8
        cycle = 0
        while len(got) < len(cases):
            ready = bp.random() < ready_p
            ctx.set(dut.hdr.ready, ready)
            if ready and ctx.get(dut.hdr.valid):
                h = ctx.get(dut.hdr.payload)
                got.append((cycle, h.bytes.to_bytes(nbytes, "little"), h.length, h.pad))
            await ctx.tick()
            cycle += 1

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(feed)
    sim.add_testbench(collect)
    sim.run()
    for c, (_, hdr, length, pad) in zip(cases, got, strict=True):
        ref = _reference(c)
        hlen = len(ref) - len(c["payload"]) - (-len(c["payload"]) % 4) - ICRC_BYTES
        assert hdr[:hlen] == ref[:hlen], f"opcode {c['opcode']:#x}"
        assert (length, pad) == (len(c["payload"]), -len(c["payload"]) % 4)
    if ready_p == 1.0:
        cycles = [t for t, *_ in got]
        gaps = [b - a for a, b in itertools.pairwise(cycles)]
        assert max(gaps) <= 3 and cycles[-1] - cycles[0] <= 7 * (len(got) - 1) // 3 + 2, cycles


@pytest.mark.parametrize("w", [64, 256])
def test_realigner(w):
    """Every start lane and lengths around beat boundaries come out packed."""
    nbytes = w // 8
    dut = Realigner(w)
    rng = seeds.rng(w)
    cases = [
        (lane, n)
        for lane in range(nbytes)
        for n in (1, nbytes - lane, nbytes, nbytes + 1, 2 * nbytes, 3 * nbytes - 1, 100)
    ]
    memory = rng.randbytes(64 * len(cases) + 256)
    got = []

    async def feed_info(ctx):
        for lane, n in cases:
            ctx.set(dut.info.payload.lane, lane)
            ctx.set(dut.info.payload.length, n)
            ctx.set(dut.info.payload.one_beat, n <= nbytes)
            ctx.set(dut.info.payload.two_beats, nbytes < n <= 2 * nbytes)
            ctx.set(dut.info.valid, 1)
            await ctx.tick().until(dut.info.ready)
            ctx.set(dut.info.valid, 0)

    async def feed_data(ctx):
        for i, (lane, n) in enumerate(cases):
            base = 64 * i
            beats = (lane + n + nbytes - 1) // nbytes
            for b in range(beats):
                word = memory[base + b * nbytes : base + (b + 1) * nbytes]
                ctx.set(dut.i.payload.data, int.from_bytes(word, "little"))
                ctx.set(dut.i.payload.last, b == beats - 1)
                ctx.set(dut.i.valid, 1)
                await ctx.tick().until(dut.i.ready)
                ctx.set(dut.i.valid, 0)

    async def collect(ctx):
        buf = b""
        bp = seeds.rng(2)
        while len(got) < len(cases):
            ready = bp.random() < 0.6
            ctx.set(dut.o.ready, ready)
            _, _, valid, data, keep, last = await ctx.tick().sample(
                dut.o.valid, dut.o.payload.data, dut.o.payload.keep, dut.o.payload.last
            )
            if valid and ready:
                n = bin(keep).count("1")
                assert keep == (1 << n) - 1
                assert data >> (8 * n) == 0, "lanes above keep not zero"
                buf += data.to_bytes(nbytes, "little")[:n]
                if last:
                    got.append(buf)
                    buf = b""

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(feed_info)
    sim.add_testbench(feed_data)
    sim.add_testbench(collect)
    sim.run_until(1e-8 * 20000)
    assert len(got) == len(cases)
    for i, ((lane, n), data) in enumerate(zip(cases, got, strict=True)):
        base = 64 * i + lane
        assert data == memory[base : base + n], (lane, n)


def test_round_robin():
    """The first set bit after ``last``, wrapping; exhaustive for 6 bits."""
    n = 6
    vec, last = Signal(n), Signal(range(n))
    m = Module()
    found, index = round_robin(m, vec, last)
    found_s, index_s = Signal(), Signal(range(n))
    m.d.comb += [found_s.eq(found), index_s.eq(index)]

    async def bench(ctx):
        for v in range(1 << n):
            for lst in range(n):
                ctx.set(vec, v)
                ctx.set(last, lst)
                expect = next(
                    ((lst + k) % n for k in range(1, n + 1) if v >> ((lst + k) % n) & 1), None
                )
                assert ctx.get(found_s) == (expect is not None)
                if expect is not None:
                    assert ctx.get(index_s) == expect, (bin(v), lst)

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()


def test_engine_parameters():
    from hw.tx.engine import TxEngine

    with pytest.raises(ValueError, match="data_width"):
        TxEngine(data_width=48)
    with pytest.raises(ValueError, match="evs_per_qp"):
        TxEngine(evs_per_qp=300)
    with pytest.raises(ValueError, match="max_mtu"):
        TxEngine(max_mtu=9000)
    with pytest.raises(ValueError, match="inflight_depth"):
        TxEngine(inflight_depth=100)
    with pytest.raises(ValueError, match=r"max_span must be in 1\.\.inflight_depth \(64\)"):
        TxEngine(inflight_depth=64, max_span=65)
    with pytest.raises(ValueError, match="CSR space"):
        TxEngine(num_qps=512, csr_addr_width=16)
    with pytest.raises(ValueError, match=r"addr_width .* 32\.\.64, not 31"):
        TxEngine(addr_width=31)


def test_engine_sq_base_keeps_addr_width_bits():
    """At addr_width 40, ``qp_sq_base_hi`` keeps 8 bits and reads 0 above, and
    ``m_axi`` carries 40-bit addresses."""
    from hw.tx.engine import TxEngine
    from hw.tx.regs import tx_register_map

    dut = TxEngine(num_qps=2, evs_per_qp=2, max_mtu=256, inflight_depth=16, addr_width=40)
    assert len(dut.m_axi.araddr) == 40
    rmap = tx_register_map(2, 2)
    got = {}

    async def bench(ctx):
        lat = TxEngine.CSR_READ_LATENCY
        while not await csr_read(ctx, dut.csr, rmap["status"].addr(), lat) & 1:  # initialised
            pass
        for name, value in (("qp_sq_base_lo", 0x89AB_C000), ("qp_sq_base_hi", 0xFFFF_FF12)):
            await csr_write(ctx, dut.csr, rmap[name].addr(1), value)
            await ctx.tick()
        got["lo"] = await csr_read(ctx, dut.csr, rmap["qp_sq_base_lo"].addr(1), lat)
        got["hi"] = await csr_read(ctx, dut.csr, rmap["qp_sq_base_hi"].addr(1), lat)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert got == {"lo": 0x89AB_C000, "hi": 0x12}


@pytest.mark.parametrize("num_qps", [2, 4])
def test_engine_qp_settings_rows(num_qps):
    """Every per-QP settings register reads back the value just written (the
    read strobed in the cycle after the write's application) and leaves the
    other QP's row alone: at 2 QPs the settings are flip-flop rows written
    under per-row lane strobes (``CFG_FLOP_QPS``), at 4 RAMs."""
    from hw.tx.engine import TxEngine
    from hw.tx.qp_settings import CFG_FLOP_QPS
    from hw.tx.regs import tx_register_map

    assert (num_qps <= CFG_FLOP_QPS) == (num_qps == 2)
    dut = TxEngine(num_qps=num_qps, evs_per_qp=2, max_mtu=1024, inflight_depth=16)
    rmap = tx_register_map(num_qps, 2)
    defaults = {"qp_mtu": 1024, "qp_mpr": 1, "qp_cwnd": 16, "qp_dest_qpn": 0,
                "qp_dst_mac_lo": 0, "qp_dst_mac_hi": 0, "qp_dst_ip": 0, "qp_dscp": 0,
                "qp_sq_base_lo": 0, "qp_sq_base_hi": 0, "qp_sq_log2_size": 0}

    def values(q):
        return {"qp_mtu": 256 << q, "qp_mpr": 0x5A + q, "qp_cwnd": 0x1234 + q,
                "qp_dest_qpn": 0xABCDE0 + q, "qp_dst_mac_lo": 0x89ABCDE0 + q,
                "qp_dst_mac_hi": 0x4560 + q, "qp_dst_ip": 0x0A000100 + q, "qp_dscp": 0x20 + q,
                "qp_sq_base_lo": 0x12345000 + (q << 8), "qp_sq_base_hi": 0xFEDC0000 + q,
                "qp_sq_log2_size": 9 + q}

    got = {}

    async def bench(ctx):
        lat = TxEngine.CSR_READ_LATENCY

        async def row(q):
            return {name: await csr_read(ctx, dut.csr, rmap[name].addr(q), lat)
                    for name in defaults}

        while not await csr_read(ctx, dut.csr, rmap["status"].addr(), lat) & 1:
            pass
        got["init"] = [await row(q) for q in range(2)]
        for q in (1, 0):
            got[f"after {q}"] = {}
            for name, value in values(q).items():
                await csr_write(ctx, dut.csr, rmap[name].addr(q), value)
                await ctx.tick()
                got[f"after {q}"][name] = await csr_read(ctx, dut.csr, rmap[name].addr(q), lat)
            got[f"other {q}"] = await row(1 - q)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert got["init"] == [defaults, defaults]
    assert got["after 1"] == values(1) and got["other 1"] == defaults
    assert got["after 0"] == values(0) and got["other 0"] == values(1)


@pytest.mark.parametrize("num_qps", [2, 8])
def test_sequencer_ack_update(num_qps):
    """ack_update moves a QP's una_psn only to a PSN within [una_psn, next_psn]
    (across the PSN wrap), leaves the other QPs alone, and a second ack right
    behind the first is judged against the first's result: at 2 QPs the
    PSNs are flip-flops, compared per QP, at 8 RAM rows (``RAM_QPS``)."""
    from hw.tx.psn_table import RAM_QPS
    from hw.tx.regs import tx_register_map
    from hw.tx.sequencer import Sequencer

    assert (num_qps <= RAM_QPS) == (num_qps == 2)
    dut = Sequencer(num_qps=num_qps, evs_per_qp=2, max_mtu=256, inflight_depth=16)
    rmap = tx_register_map(num_qps, 2)
    lat = 3  # the sequencer's CSR read latency
    q, other, p0, packets = 1, 0, 0xFFFFFE, 5
    # one WQE: a 5-packet WRITE (MTU 256), its 64 bytes as 8 little-endian words
    wqe = bytearray(64)
    wqe[0x20:0x24] = (packets * 256).to_bytes(4, "little")
    words = [int.from_bytes(wqe[i : i + 8], "little") for i in range(0, 64, 8)]
    got = {}

    memory = wqe_memory(dut, words)

    async def bench(ctx):
        ctx.set(dut.ev.good, 0b11)
        ctx.set(dut.ev.ready, 1)
        for port in (dut.hdr_desc, dut.pay_desc, dut.sent):
            ctx.set(port.ready, 1)

        async def una(qp):
            return await csr_read(ctx, dut.csr, rmap["qp_una_psn"].addr(qp), lat)

        async def acks(*items):  # back to back: each as soon as ready
            for qp, psn in items:
                ctx.set(dut.ack_update.payload, {"qpn": qp, "una_psn": psn})
                ctx.set(dut.ack_update.valid, 1)
                await ctx.tick().until(dut.ack_update.ready)
            ctx.set(dut.ack_update.valid, 0)
            for _ in range(3):
                await ctx.tick()

        while not await csr_read(ctx, dut.csr, rmap["status"].addr(), lat) & 1:
            pass
        for name, value in (("qp_sq_log2_size", 4), ("qp_next_psn", p0), ("qp_ctrl", 1),
                            ("qp_doorbell", 1)):
            await csr_write(ctx, dut.csr, rmap[name].addr(q), value)
            await ctx.tick()
        sent = []
        for _ in range(400):
            await ctx.tick()
            if ctx.get(dut.sent.valid):
                sent.append(ctx.get(dut.sent.payload.psn))
        got["sent"] = sent
        got["start"] = await una(q)
        steps = [
            ((q, p0 - 1),),  # behind una_psn: stale
            ((q, (p0 + packets + 1) & 0xFFFFFF),),  # beyond next_psn
            ((other, 3),),  # the other QP, nothing in flight there
            ((q, (p0 + 2) & 0xFFFFFF),),  # across the wrap
            ((q, (p0 + 4) & 0xFFFFFF), (q, (p0 + 3) & 0xFFFFFF)),  # the second stale then
            ((q, (p0 + 3) & 0xFFFFFF), (q, (p0 + packets) & 0xFFFFFF)),  # up to next_psn
        ]
        got["steps"] = []
        for items in steps:
            await acks(*items)
            got["steps"].append((await una(q), await una(other)))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(memory, background=True)
    sim.add_testbench(bench)
    sim.run()
    assert got["sent"] == [(p0 + i) & 0xFFFFFF for i in range(packets)]
    assert got["start"] == p0
    assert got["steps"] == [(p0, 0), (p0, 0), (p0, 0), (0, 0), (2, 0), (3, 0)]


@pytest.mark.parametrize("num_qps", [2, 8])
def test_sequencer_retx_in_flight(num_qps):
    """A retransmit is sent only for a PSN in flight on its own QP: within
    [una_psn, next_psn) of that QP (across the PSN wrap), with another QP's
    PSNs elsewhere. At 2 QPs the subtractions are made per QP from
    flip-flops and cur_q picks the result, at 8 from the RAM rows of cur_q
    (``RAM_QPS``)."""
    from hw.tx.psn_table import RAM_QPS
    from hw.tx.regs import tx_register_map
    from hw.tx.sequencer import Sequencer

    assert (num_qps <= RAM_QPS) == (num_qps == 2)
    dut = Sequencer(num_qps=num_qps, evs_per_qp=2, max_mtu=256, inflight_depth=16)
    rmap = tx_register_map(num_qps, 2)
    lat = 3  # the sequencer's CSR read latency
    q, other, p0, p_other, packets = 1, 0, 0xFFFFFE, 0x100, 5
    wqe = bytearray(64)
    wqe[0x20:0x24] = (packets * 256).to_bytes(4, "little")
    words = [int.from_bytes(wqe[i : i + 8], "little") for i in range(0, 64, 8)]
    got = {}

    memory = wqe_memory(dut, words)

    async def bench(ctx):
        ctx.set(dut.ev.good, 0b11)
        ctx.set(dut.ev.ready, 1)
        for port in (dut.hdr_desc, dut.pay_desc, dut.sent):
            ctx.set(port.ready, 1)

        async def run(cycles):
            sent = []
            for _ in range(cycles):
                await ctx.tick()
                if ctx.get(dut.sent.valid):
                    sent.append((ctx.get(dut.sent.payload.qpn), ctx.get(dut.sent.payload.psn),
                                 ctx.get(dut.sent.payload.retx)))
            return sent

        while not await csr_read(ctx, dut.csr, rmap["status"].addr(), lat) & 1:
            pass
        for qp, name, value in ((other, "qp_next_psn", p_other), (other, "qp_ctrl", 1),
                                (q, "qp_sq_log2_size", 4), (q, "qp_next_psn", p0),
                                (q, "qp_ctrl", 1), (q, "qp_doorbell", 1)):
            await csr_write(ctx, dut.csr, rmap[name].addr(qp), value)
            await ctx.tick()
        got["sent"] = await run(400)
        got["retx"] = []
        for qp, psn in ((q, (p0 + 2) & 0xFFFFFF),  # in flight, across the wrap
                        (q, p0 - 1),  # behind una_psn
                        (q, (p0 + packets) & 0xFFFFFF),  # next_psn: not yet sent
                        (other, (p0 + 2) & 0xFFFFFF),  # the other QP: nothing in flight
                        (other, p_other),
                        (q, p0)):  # the oldest in flight
            ctx.set(dut.retx.payload, {"qpn": qp, "psn": psn, "reason": 0})
            ctx.set(dut.retx.valid, 1)
            await ctx.tick().until(dut.retx.ready)
            ctx.set(dut.retx.valid, 0)
            got["retx"].append(await run(150))
        got["ignored"] = await csr_read(ctx, dut.csr, rmap["retx_ignored"].addr(), lat)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(memory, background=True)
    sim.add_testbench(bench)
    sim.run()
    assert got["sent"] == [(q, (p0 + i) & 0xFFFFFF, 0) for i in range(packets)]
    assert got["retx"] == [[(q, (p0 + 2) & 0xFFFFFF, 1)], [], [], [], [], [(q, p0, 1)]]
    assert got["ignored"] == 4


def wqe_memory(dut, words):
    """A simulator process for a Sequencer's WQE reads: answers every read burst
    with ``words`` (64-bit, the last with ``last``), one per cycle it is taken."""
    async def memory(ctx):
        while True:
            while not ctx.get(dut.wqe_req.valid):
                await ctx.tick()
            ctx.set(dut.wqe_req.ready, 1)
            await ctx.tick()
            ctx.set(dut.wqe_req.ready, 0)
            for i, word in enumerate(words):
                ctx.set(dut.wqe_data.payload.data, word)
                ctx.set(dut.wqe_data.payload.last, i == len(words) - 1)
                ctx.set(dut.wqe_data.valid, 1)
                taken = False
                while not taken:
                    taken = ctx.get(dut.wqe_data.ready)
                    await ctx.tick()
            ctx.set(dut.wqe_data.valid, 0)
    return memory


@pytest.mark.parametrize("w", [64, 128, 512])
def test_carrier_writer(w):
    """``CarrierWriter`` puts each SRv6 frame's carrier in its destination
    address and passes the others, back to back under random ``ready``: the
    frames are ``host_driver.layers.srv6_frame`` of the frames to the peer,
    byte for byte (their ICRC the peer's)."""
    rng = seeds.rng(w)
    nbytes = w // 8
    dut = CarrierWriter(w)
    cases = []
    for n in (0, 1, 7, 8, 33, 64, 200):
        peer = int(ipaddress.IPv6Address(DST_IP6)) ^ rng.getrandbits(96)
        frame = bytes(L.write_packet(
            opcode=L.WRITE_OPCODES[0], dqpn=5, psn=rng.getrandbits(24), va=0, rkey=1,
            dma_len=n, payload=rng.randbytes(n), ev=0xC001, src_mac="02:11:22:33:44:55",
            dst_mac="02:66:77:88:99:aa", src_ip=SRC_IP6,
            dst_ip=str(ipaddress.IPv6Address(peer))))
        ev = rng.getrandbits(64) if rng.getrandbits(1) else None
        cases.append((frame, ev, peer))
    got = []

    async def feed(ctx):
        for frame, ev, peer in cases:
            ctx.set(dut.srv6, ev is not None)
            ctx.set(dut.address, srv6_carrier(peer, ev or 0))
            await _send_frame(ctx, dut.i, frame, nbytes)

    async def collect(ctx):
        o = dut.o
        await collect_frames(ctx, o.valid, o.ready, o.payload.data, o.payload.keep,
                             o.payload.last, got, len(cases), seed=w)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(feed)
    sim.add_testbench(collect)
    sim.run_until(1e-8 * 2000)
    assert len(got) == len(cases)
    for (frame, ev, _), out in zip(cases, got, strict=True):
        assert out == (frame if ev is None else L.srv6_frame(frame, ev))

"""``RxValidator`` in Amaranth's simulator: one QP, a region table (an
``MrTable``, each region written at the entry its R_Key names), WRITE headers
in, the request (kind, syndrome, VA) and the counter strobes out."""

from collections import Counter

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from hw.rx.mr_table import MR_WORDS, make_rkey, rkey_index

OWN_IP, PEER_IP = 0x0A000002, 0x0A000001
MR = dict(base=0x8000_1000, length=0x1000, rkey=make_rkey(0, tag=0x34), pd=0)
MTU_CODE_1024 = 3


def write(va, length, *, opcode=0x0A, dma_len=None, rkey=MR["rkey"]):
    """A WRITE header: ``length`` payload bytes at ``va``; the RETH DMA length
    is the payload's unless given (an ONLY packet's)."""
    return dict(opcode=opcode, va=va, payload_len=length,
                dma_len=length if dma_len is None else dma_len, rkey=rkey)


def run_validator(frames, mrs=(MR,), *, addr_width=32, mtu_code=MTU_CODE_1024, qp_pd=0,
                  state=None, ipv6=None):
    """Each header of ``frames`` (dicts as ``write`` makes) through an
    ``RxValidator`` with the regions ``mrs`` (valid and writable unless they
    say ``access``; each at the entry its R_Key names unless it says
    ``index``) and QP 0 in RTS with path MTU ``mtu_code`` and PD ``qp_pd``:
    the list of (kind, syndrome, va) requests and a Counter of the counter
    strobes. With ``ipv6`` = (own IPv6 address, the peer's address,
    the peer's family) the validator is built with ``ipv6``, and a frame may
    give its ``ip_src``, ``ip_dst`` and ``v6``."""
    from hw.rx.layouts import QpState
    from hw.rx.mr_table import MR_ACCESS_VALID, MR_ACCESS_WRITE, MrTable
    from hw.rx.validate import VALIDATOR_COUNTERS, RxValidator

    index = [mr.get("index", rkey_index(mr["rkey"])) for mr in mrs]
    num_mrs = max(2, 1 + max(index, default=0))
    dut = RxValidator(num_qps=2, num_mrs=num_mrs, sack_bits=64, addr_width=addr_width,
                      ipv6=ipv6 is not None)
    table = MrTable(num_mrs=num_mrs, addr_width=addr_width)
    top = Module()
    top.submodules.dut, top.submodules.table = dut, table
    wiring.connect(top, dut.mr_lookup, table.lookup)
    results, strobes = [], Counter()

    def sample(ctx):
        for name in VALIDATOR_COUNTERS:
            strobes[name] += ctx.get(getattr(dut.counters, name))

    async def bench(ctx):
        ctx.set(dut.own_ip, OWN_IP)
        ctx.set(dut.cfg.state, QpState.RTS if state is None else state)
        ctx.set(dut.cfg.peer_ip, PEER_IP)
        if ipv6 is not None:
            own6, peer, peer_v6 = ipv6
            ctx.set(dut.own_ip6, own6)
            ctx.set(dut.cfg.peer_ip, peer)
            ctx.set(dut.cfg.peer_v6, peer_v6)
        ctx.set(dut.cfg.mtu, mtu_code)
        ctx.set(dut.cfg.pd, qp_pd)
        for i, mr in zip(index, mrs, strict=True):
            access = mr.get("access", MR_ACCESS_VALID | MR_ACCESS_WRITE) | mr.get("pd", 0) << 8
            words = dict(base_lo=mr["base"] & 0xFFFF_FFFF, base_hi=mr["base"] >> 32,
                         length=mr["length"], rkey=mr["rkey"], access=access)
            for k, name in enumerate(MR_WORDS):
                for field, value in (("en", 1), ("index", i), ("word", k), ("data", words[name])):
                    ctx.set(getattr(table.w, field), value)
                await ctx.tick()
        ctx.set(table.w.en, 0)
        ctx.set(dut.req.ready, 1)
        for f in frames:
            hdr = dut.hdr.payload
            ctx.set(hdr.ip_src, f.get("ip_src", PEER_IP))
            ctx.set(hdr.ip_dst, f.get("ip_dst", OWN_IP))
            if ipv6 is not None:
                ctx.set(hdr.v6, f.get("v6", 0))
            ctx.set(hdr.bth.opcode, f["opcode"])
            ctx.set(hdr.reth.va, f["va"])
            ctx.set(hdr.reth.rkey, f["rkey"])
            ctx.set(hdr.reth.dma_len, f["dma_len"])
            ctx.set(hdr.payload_len, f["payload_len"])
            ctx.set(dut.hdr.valid, 1)
            await ctx.tick().until(dut.hdr.ready)
            ctx.set(dut.hdr.valid, 0)
            for _ in range(10):
                sample(ctx)
                await ctx.tick()
                if ctx.get(dut.req.valid):
                    req = dut.req.payload
                    results.append((ctx.get(req.kind), ctx.get(req.syndrome), ctx.get(req.va)))
                    break
        for _ in range(3):
            sample(ctx)
            await ctx.tick()

    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return results, strobes

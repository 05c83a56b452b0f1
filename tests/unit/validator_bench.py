"""``RxValidator`` in Amaranth's simulator: one QP, a region table, WRITE
headers in, the request (kind, syndrome, VA) and the counter strobes out."""

from collections import Counter

from amaranth.sim import Simulator

OWN_IP, PEER_IP = 0x0A000002, 0x0A000001
MR = dict(base=0x8000_1000, length=0x1000, rkey=0x1234, pd=0)
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
    say ``access``) and QP 0 in RTS with path MTU ``mtu_code`` and PD
    ``qp_pd``: the list of (kind, syndrome, va) requests and a Counter of the
    counter strobes. With ``ipv6`` = (own IPv6 address, the peer's address,
    the peer's family) the validator is built with ``ipv6``, and a frame may
    give its ``ip_src``, ``ip_dst`` and ``v6``."""
    from hw.rx.layouts import QpState
    from hw.rx.validate import MR_ACCESS_VALID, MR_ACCESS_WRITE, VALIDATOR_COUNTERS, RxValidator

    dut = RxValidator(num_qps=2, num_mrs=max(2, len(mrs)), sack_bits=64, addr_width=addr_width,
                      ipv6=ipv6 is not None)
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
        for i, mr in enumerate(mrs):
            ctx.set(dut.mrs[i].base, mr["base"])
            ctx.set(dut.mrs[i].length, mr["length"])
            ctx.set(dut.mrs[i].rkey, mr["rkey"])
            ctx.set(dut.mrs[i].pd, mr.get("pd", 0))
            ctx.set(dut.mrs[i].access, mr.get("access", MR_ACCESS_VALID | MR_ACCESS_WRITE))
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

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return results, strobes

"""A trimmed frame is answered (NAK TRIMMED) only for a PSN the responder
still awaits (docs/security.md, "Trimmed frames"): ``RxPipeline`` with parser
records, in Amaranth's simulator."""

from amaranth.sim import Simulator

from hw.headers import Opcode
from hw.rx.engine import RxPipeline
from hw.rx.layouts import QpState

from .csrbus import csr_read, csr_write
from .simstream import send_record

OWN_IP, PEER_IP, FORGER_IP = 0x0A000002, 0x0A000001, 0x0A000042
EPSN, MPR = 100, 1  # window 128 PSNs


def run_trims(trims):
    """Trimmed WRITE records (psn, source IP) to QP 1 (RTS, TRIM_NACK on,
    expecting EPSN); the RX counters afterwards."""
    dut = RxPipeline(num_qps=2, num_mrs=1, sack_bits=64, mpr_max=128)
    rmap = dut.register_map
    names = ("trimmed", "trim_stale", "naks_sent", "bad_source")
    counts = {}

    async def bench(ctx):
        ctx.set(dut.m_axis_ack.tready, 1)
        await csr_write(ctx, dut.csr, rmap["OWN_IP"].addr(), OWN_IP)
        await csr_write(ctx, dut.csr, rmap["QP_PEER_IP"].addr(1), PEER_IP)
        await csr_write(ctx, dut.csr, rmap["QP_CTRL"].addr(1),
                        QpState.RTS.value | 1 << 3 | MPR << 8)
        await csr_write(ctx, dut.csr, rmap["QP_EPSN"].addr(1), EPSN)
        await ctx.tick().repeat(100)  # the receive state's clear
        h = dut.hdr.payload
        for psn, src in trims:
            await send_record(ctx, dut.hdr, [
                (h.ip_src, src), (h.ip_dst, OWN_IP), (h.bth.opcode, Opcode.WRITE_ONLY),
                (h.bth.dqpn, 1), (h.bth.psn, psn), (h.dscp, 0x3F), (h.trimmed, 1),
                (h.payload_len, 0)], settle=60)
        for name in names:
            counts[name] = await csr_read(ctx, dut.csr, rmap[f"CNT_{name.upper()}"].addr(),
                                          latency=RxPipeline.CSR_READ_LATENCY)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return counts


def test_only_awaited_psns_are_nacked():
    got = run_trims([
        (EPSN - 1, PEER_IP),  # already received (behind the cumulative PSN)
        (EPSN + 128, PEER_IP),  # beyond the window
        ((EPSN - 5000) & 0xFFFFFF, PEER_IP),  # far behind
        (EPSN + 5, FORGER_IP),  # awaited, but not from the peer
        (EPSN + 5, PEER_IP),  # awaited: NAK TRIMMED
        (EPSN + 127, PEER_IP),  # the window's last PSN: NAK TRIMMED
    ])
    assert got == {"trimmed": 2, "trim_stale": 3, "naks_sent": 2, "bad_source": 1}

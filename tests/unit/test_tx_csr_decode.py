"""hw/tx/csr_decode.py ``TxCsrDecode``: per-QP CSR writes become the right
strobes exactly two cycles after ``w_stb`` (INIT's writes before ``ready``),
the global registers and the EV table's write port, and every register of
hw/tx/regs.py reads back, 3 cycles after ``r_stb``, the value a Python
reference of the register map computes from the block's inputs (the PSNs
are ``PsnTable``'s CSR port's, whose address is tests/unit/test_tx_psn_table.py's)."""


import pytest
from amaranth.sim import Simulator

from hw.protocol import PLANE_BITS
from hw.tx.csr_decode import TxCsrDecode
from hw.tx.qp_settings import CFG_LANES
from hw.tx.regs import (
    EV_PLANE_LSB,
    QP_BASE,
    QP_STRIDE,
    TX_TYPE_ID,
    TX_VERSION,
    G,
    Q,
    tx_register_map,
)
from tests import seeds

from .csrbus import csr_read

READ_LATENCY = 3


class Reference:
    """What a read of each TX register returns, from the decode's inputs and
    the global registers written so far."""

    def __init__(self, nq, ne, max_mtu, depth, addr_width, inputs):
        self.nq, self.ne, self.max_mtu, self.depth = nq, ne, max_mtu, depth
        self.addr_width, self.inp = addr_width, inputs
        self.src_mac = self.src_ip = self.ev_select = 0  # ev_select as written

    def lane(self, name):
        for i, (lane, _, bits) in enumerate(CFG_LANES):
            if lane == name:
                return (self.inp["cfg_row"] >> (32 * i)) & ((1 << bits) - 1)
        raise KeyError(name)

    def per_qp(self, key, q, width):
        return (self.inp[key] >> (width * q)) & ((1 << width) - 1)

    def read(self, addr):
        inp = self.inp
        if addr >= QP_BASE and (addr - QP_BASE) // QP_STRIDE < self.nq:
            q, reg = (addr - QP_BASE) // QP_STRIDE, (addr - QP_BASE) % QP_STRIDE
            bit = {key: (inp[key] >> q) & 1 for key in
                   ("enable", "wqe_active", "win_blocked", "ev_blocked", "wimm_wait")}
            shift_bits = max(1, (self.max_mtu.bit_length() - 1 - 8).bit_length())
            for name, off, _ in CFG_LANES:
                if reg == off:
                    value = self.lane(name)
                    if name == "mtu_shift":
                        return 256 << (value & ((1 << shift_bits) - 1))
                    if name == "sq_base_hi":
                        return value & ((1 << (self.addr_width - 32)) - 1)
                    return value
            return {
                Q.CTRL: bit["enable"], Q.NEXT_PSN: inp["psn_next"], Q.UNA_PSN: inp["psn_una"],
                Q.DOORBELL: self.per_qp("pi", q, 16), Q.CONSUMER: self.per_qp("ci", q, 16),
                Q.TX_PACKETS: inp["counters"] & 0xFFFFFFFF, Q.RETX_PACKETS: inp["counters"] >> 32,
                Q.STATUS: bit["wqe_active"] | bit["win_blocked"] << 1 | bit["ev_blocked"] << 2
                | bit["wimm_wait"] << 3 | inp["psn_inflight"] << 8,
                Q.WIMM_OUTSTANDING: inp["wimm_count"],
            }.get(reg, 0)
        eb = max(1, (self.ne - 1).bit_length())
        qb = max(1, (self.nq - 1).bit_length())
        sel = self.ev_select
        return {
            G.ID: TX_TYPE_ID << 16 | TX_VERSION, G.STATUS: 1, G.NUM_QPS: self.nq,
            G.EVS_PER_QP: self.ne,
            G.CAPS: 8 | (self.max_mtu.bit_length() - 1) << 8 | (self.depth.bit_length() - 1) << 12,
            G.SRC_MAC_LO: self.src_mac & 0xFFFFFFFF, G.SRC_MAC_HI: self.src_mac >> 32,
            G.SRC_IP: self.src_ip,
            G.EV_SELECT: (sel & ((1 << eb) - 1)) | (((sel >> 8) & ((1 << qb) - 1)) << 8),
            G.EV_ENTRY: inp["ev_r_value"] | inp["ev_r_state"] << 16
            | inp["ev_r_plane"] << EV_PLANE_LSB,
            G.RETX_IGNORED: inp["retx_ignored"], G.RETX_NO_EV: inp["retx_no_ev"],
        }.get(addr, 0)

    def write_global(self, addr, value):
        if addr == G.SRC_MAC_LO:
            self.src_mac = (self.src_mac & ~0xFFFFFFFF) | value
        elif addr == G.SRC_MAC_HI:
            self.src_mac = (self.src_mac & 0xFFFFFFFF) | (value & 0xFFFF) << 32
        elif addr == G.SRC_IP:
            self.src_ip = value
        elif addr == G.EV_SELECT:
            self.ev_select = value

    def strobes(self, addr, value, flop_rows):
        """The qp_w strobes of a per-QP write of ``value`` at ``addr`` (after INIT)."""
        nl, nq = len(CFG_LANES), self.nq
        none = dict(lanes=0, rows=0, ctrl=0, doorbell=0, unpark=0, next_psn=0, psn_write=0,
                    reset=0, flush=0, init=0)
        if not (addr >= QP_BASE and (addr - QP_BASE) // QP_STRIDE < nq):
            return none
        q, reg = (addr - QP_BASE) // QP_STRIDE, (addr - QP_BASE) % QP_STRIDE
        mtus = [1 << lg for lg in range(8, self.max_mtu.bit_length())]
        lanes = sum(1 << i for i, (name, off, _) in enumerate(CFG_LANES)
                    if off == reg and (name != "mtu_shift" or value in mtus))
        ctrl = int(reg == Q.CTRL)
        return dict(
            none, q=q, data=value, lanes=lanes, rows=lanes << (nl * q) if flop_rows else 0,
            ctrl=ctrl, doorbell=int(reg == Q.DOORBELL),
            unpark=int(reg in (Q.MPR, Q.CWND, Q.CTRL, Q.NEXT_PSN)),
            next_psn=int(reg == Q.NEXT_PSN) << q, psn_write=int(reg == Q.NEXT_PSN),
            reset=(ctrl & (value >> 1) & 1) << q, flush=(ctrl & (value >> 2) & 1) << q,
            mtu_shift=mtus.index(value) if value in mtus else 0)


@pytest.mark.parametrize("nq", [2, 4])
def test_tx_csr_decode(nq):
    ne, max_mtu, depth, addr_width = 4, 1024, 16, 48
    flop_rows = nq <= 2
    dut = TxCsrDecode(num_qps=nq, evs_per_qp=ne, csr_addr_width=16, max_mtu=max_mtu,
                      data_width=64, inflight_depth=depth, addr_width=addr_width,
                      flop_rows=flop_rows, wimm_count_width=6)
    rng = seeds.rng(nq)
    inputs = {
        "enable": nq, "wqe_active": nq, "win_blocked": nq, "ev_blocked": nq, "wimm_wait": nq,
        "psn_next": 24, "psn_una": 24, "psn_inflight": 24, "pi": 16 * nq, "ci": 16 * nq,
        "cfg_row": 32 * len(CFG_LANES), "counters": 64, "wimm_count": 6,
        "retx_ignored": 32, "retx_no_ev": 32, "ev_r_value": 16, "ev_r_state": 2,
        "ev_r_plane": PLANE_BITS,
    }
    values = {key: rng.getrandbits(width) for key, width in inputs.items()}
    ref = Reference(nq, ne, max_mtu, depth, addr_width, values)
    rmap = tx_register_map(nq, ne)
    addrs = [reg.addr(q) for reg in rmap.registers for q in range(reg.count)]
    addrs += [0x018, 0x0FC, QP_BASE + 0x54, QP_BASE + nq * QP_STRIDE + Q.CTRL]
    qw = dut.qp_w
    fields = ("q", "data", "lanes", "rows", "init", "mtu_shift", "ctrl", "doorbell", "unpark",
              "next_psn", "psn_write", "reset", "flush")
    log = {"reads": 0, "writes": 0, "init": 0}

    async def bench(ctx):
        for key, value in values.items():
            ctx.set(getattr(dut, key), value)
        # before ready: INIT's writes of row init_q, every lane, data 0
        for init_q in range(nq):
            ctx.set(dut.init_q, init_q)
            await ctx.tick()
            await ctx.tick()
            got = {f: ctx.get(getattr(qw, f)) for f in fields}
            nl = len(CFG_LANES)
            assert got["lanes"] == (1 << nl) - 1 and got["init"] == 1
            assert got["q"] == init_q and got["data"] == 0 and got["ctrl"] == 0
            assert got["psn_write"] == 1 and got["next_psn"] == 0  # the PSN rows zeroed
            assert got["rows"] == (((1 << nl) - 1) << (nl * init_q) if flop_rows else 0)
            log["init"] += 1
        ctx.set(dut.ready, 1)
        await ctx.tick()
        await ctx.tick()
        for _ in range(300):
            if rng.random() < 0.5:
                addr = rng.choice(addrs)
                got = await csr_read(ctx, dut.csr, addr, READ_LATENCY)
                assert got == ref.read(addr), f"read {addr:#x}: {got:#x}, not {ref.read(addr):#x}"
                log["reads"] += 1
                continue
            addr = rng.choice(addrs)
            reg = (addr - QP_BASE) % QP_STRIDE if addr >= QP_BASE else None
            value = rng.choice([256, 512, 1024, 2048, 300, 3, 5, 7, rng.getrandbits(32)]) \
                if reg in (Q.MTU, Q.CTRL) else rng.getrandbits(32)
            ctx.set(dut.csr.addr, addr)
            ctx.set(dut.csr.w_data, value)
            ctx.set(dut.csr.w_stb, 1)
            # EV_ENTRY goes to the EV table at w_stb
            assert ctx.get(dut.ev_we) == (addr == G.EV_ENTRY)
            assert (ctx.get(dut.ev_value), ctx.get(dut.ev_state), ctx.get(dut.ev_plane)) == \
                (value & 0xFFFF, (value >> 16) & 3, (value >> EV_PLANE_LSB) & 7)
            await ctx.tick()
            ctx.set(dut.csr.w_stb, 0)
            assert ctx.get(qw.lanes) == 0 and ctx.get(qw.ctrl) == 0  # not before 2 cycles
            await ctx.tick()
            want = ref.strobes(addr, value, flop_rows)
            got = {f: ctx.get(getattr(qw, f)) for f in fields if f in want}
            assert got == want, f"write {addr:#x} = {value:#x}"
            await ctx.tick()
            assert ctx.get(qw.lanes) == 0 and ctx.get(qw.next_psn) == 0  # one cycle only
            assert ctx.get(qw.psn_write) == 0
            ref.write_global(addr, value)
            eb, qb = 2, max(1, (nq - 1).bit_length())
            assert ctx.get(dut.src_mac) == ref.src_mac and ctx.get(dut.src_ip) == ref.src_ip
            sel = ref.ev_select
            assert ctx.get(dut.ev_sel) == (sel & 3) | ((sel >> 8) & ((1 << qb) - 1)) << eb
            log["writes"] += 1

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert log["reads"] > 100 and log["writes"] > 100 and log["init"] == nq

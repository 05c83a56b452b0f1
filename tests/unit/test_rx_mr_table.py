"""hw/rx/mr_table.py ``MrTable``: random CSR writes, lookups and reads
against a Python model of the table, cycle by cycle -- a lookup finds the
entry its R_Key's index bits name and hits only when that entry exists, is
VALID and REMOTE_WRITE and holds the whole R_Key; reads give each word as
kept (MR_BASE_HI below ``addr_width``, MR_ACCESS's 16 bits); VALID is 0
after reset whatever the RAM holds -- and the R_Key helpers."""

import pytest
from amaranth.hdl import ClockDomain, Module
from amaranth.sim import Simulator

from hw.rx.mr_table import MR_WORDS, MrTable, make_rkey, rkey_index
from tests import seeds


def test_rkey_helpers():
    assert make_rkey(5) == 0x0000_054D
    assert make_rkey(0x1234, tag=0x11, generation=0x1AB) == 0xAB12_3411
    assert rkey_index(make_rkey(0xFFFF, generation=7)) == 0xFFFF
    with pytest.raises(ValueError, match="16 bits"):
        make_rkey(1 << 16)
    with pytest.raises(ValueError, match="num_mrs must be in"):
        MrTable(num_mrs=0)


@pytest.mark.parametrize("num_mrs, addr_width", [(1, 64), (5, 48), (16, 64)])
def test_mr_table(num_mrs, addr_width):
    dut = MrTable(num_mrs=num_mrs, addr_width=addr_width)
    rng = seeds.rng(num_mrs)
    keep = {"base_hi": (1 << (addr_width - 32)) - 1, "access": 0xFFFF}
    rows = [[0] * len(MR_WORDS) for _ in range(num_mrs)]
    valid = [0] * num_mrs
    log = {"hits": 0, "misses": 0, "reads": 0}

    def some_rkey():
        # mostly keys of existing entries (their own or a near miss), some beyond the table
        i = rng.randrange(num_mrs + 2)
        if i < num_mrs and rng.random() < 0.7:
            return rows[i][MR_WORDS.index("rkey")]
        return make_rkey(i, tag=rng.getrandbits(8), generation=rng.getrandbits(2))

    async def bench(ctx):
        prev = None  # (rkey, (index, word), rows, valid) of the cycle before
        for cycle in range(3000):
            if cycle == 1500:  # reset: VALID bits clear, the rows stay
                ctx.set(dut.w.en, 0)
                ctx.set(cd.rst, 1)
                await ctx.tick()
                ctx.set(cd.rst, 0)
                valid[:] = [0] * num_mrs
                prev = None
            if prev is not None:
                rkey, (ri, rw), snap, snap_valid = prev
                i = rkey_index(rkey)
                if i < num_mrs:
                    row = snap[i]
                    access = row[MR_WORDS.index("access")]
                    want_hit = (snap_valid[i] and access >> 1 & 1
                                and row[MR_WORDS.index("rkey")] == rkey)
                    got = ctx.get(dut.lookup.entry)
                    assert got["base"] == row[0] | row[1] << 32
                    assert got["length"] == row[2] and got["rkey"] == row[3]
                    assert got["pd"] == access >> 8 & 0xFF
                    assert got["access"] & 1 == snap_valid[i]
                else:
                    want_hit = False
                assert ctx.get(dut.lookup.hit) == want_hit, (cycle, hex(rkey))
                log["hits" if want_hit else "misses"] += 1
                want = snap[ri][rw]
                if MR_WORDS[rw] == "access":
                    want = want & ~1 | snap_valid[ri]
                assert ctx.get(dut.r_data) == want, (cycle, ri, rw)
                log["reads"] += 1
            en = rng.random() < 0.15
            index, word, value = rng.randrange(num_mrs), rng.randrange(5), rng.getrandbits(32)
            if word == MR_WORDS.index("rkey") and rng.random() < 0.8:
                value = make_rkey(index, tag=rng.getrandbits(8), generation=rng.getrandbits(2))
            if word == MR_WORDS.index("access") and rng.random() < 0.7:
                value = rng.choice((3, 3, 3, 1, 2, 0)) | rng.getrandbits(8) << 8
            for name, v in (("en", en), ("index", index), ("word", word), ("data", value)):
                ctx.set(getattr(dut.w, name), v)
            rkey = some_rkey()
            ri, rw = rng.randrange(num_mrs), rng.randrange(5)
            ctx.set(dut.lookup.rkey, rkey)
            ctx.set(dut.r_index, ri)
            ctx.set(dut.r_word, rw)
            snap, snap_valid = [list(r) for r in rows], list(valid)
            await ctx.tick()
            prev = (rkey, (ri, rw), snap, snap_valid)
            if en:
                rows[index][word] = value & keep.get(MR_WORDS[word], 0xFFFF_FFFF)
                if MR_WORDS[word] == "access":
                    valid[index] = value & 1

    top = Module()
    top.domains.sync = cd = ClockDomain()
    top.submodules.dut = dut
    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert log["hits"] > 100 and log["misses"] > 200 and log["reads"] > 2000, log

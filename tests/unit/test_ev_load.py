"""``EvGenBlock`` (hw/nic/ev_load.py), the ``ev_gen`` register block, in Amaranth's
simulator: a run's writes into TX's and reliability's EV tables (decoded as those
blocks decode them) against the golden model's GENERATED profile, AUTO, every
refusal (parameters, too few EVs, a QP out of range), a start while busy, and an
interconnect that takes the writes only now and then."""

import pytest
from amaranth.sim import Simulator

from hw.nic.ev_load import (
    AUTO_MAX,
    AUTO_MIN,
    WRITE_SPACING,
    EvGenBlock,
    auto_init,
    auto_params,
    deposit,
)
from hw.protocol import EvState
from hw.reliability.registers import register_map as rel_register_map
from hw.tx.regs import tx_register_map
from sim.model.ev import generated_evs
from tests import seeds

pytestmark = pytest.mark.usefixtures("invariant_checks")

NQ, E = 4, 8
TX, REL = 1, 3
TX_MAP, REL_MAP = tx_register_map(NQ, E), rel_register_map(NQ, E, 64)
# the maps of a build whose EV entries hold 64 bits (every EV format)
TX_MAP64 = tx_register_map(NQ, E, ipv6=True, ev_width=64)
REL_MAP64 = rel_register_map(NQ, E, 64, ipv6=True, ev_width=64)


def field(reg_map, reg, name, word):
    for fname, lsb, width, _ in reg_map[reg].fields:
        if fname == name:
            return word >> lsb & ((1 << width) - 1)
    raise KeyError(name)


class Tables:
    """TX's and reliability's EV tables as the injected writes leave them (with
    64-bit entries: an entry write takes the bits its block's ev_value_hi
    staged, and clears them)."""

    def __init__(self, wide=False):
        self.tx, self.rel, self.select = {}, {}, None
        self.writes = 0
        self.last = None
        self.tx_map, self.rel_map = (TX_MAP64, REL_MAP64) if wide else (TX_MAP, REL_MAP)
        self.staged = {TX: {}, REL: {}}

    def _take(self, block):
        hi = self.staged[block]
        self.staged[block] = {}
        return sum(word << 16 + 32 * k for k, word in hi.items())

    def _hi(self, block, addr):
        """The ev_value_hi word ``addr`` is, in ``block``, or None."""
        reg_map = self.tx_map if block == TX else self.rel_map
        if not any(r.name == "ev_value_hi" for r in reg_map.registers):
            return None
        reg = reg_map["ev_value_hi"]
        k = (addr - reg.offset) // 4
        return k if 0 <= k < reg.count and addr % 4 == 0 else None

    def apply(self, cycle, block, addr, data):
        self.writes += 1
        # TX takes writes as the host bridge gives them: no closer than its spacing
        assert self.last is None or cycle - self.last >= WRITE_SPACING, (self.last, cycle)
        self.last = cycle
        k = self._hi(block, addr)
        if k is not None:
            self.staged[block][k] = data
        elif block == TX and addr == TX_MAP["ev_select"].offset:
            self.select = (field(TX_MAP, "ev_select", "qpn", data),
                           field(TX_MAP, "ev_select", "ev_index", data))
        elif block == TX and addr == TX_MAP["ev_entry"].offset:
            assert self.select is not None, "ev_entry written before ev_select"
            self.tx[self.select] = (data & 0xFFFF | self._take(TX), data >> 16 & 3)
        elif block == REL:
            ev = REL_MAP["ev"]
            index = (addr - ev.offset) // 4
            assert 0 <= index < ev.count and data >> 31, (addr, data)
            self.rel[divmod(index, E)] = (data & 0xFFFF | self._take(REL), data >> 16 & 3)
        else:
            raise AssertionError(f"write to block {block} 0x{addr:x}")


def run(steps, *, take=1.0, wide=False):
    """``steps``: ("write", register, value[, index]), ("start", auto) or
    ("status",). Each start waits for the run's end. ``wide``: a build of
    64-bit EV entries. Returns (tables, [status words])."""
    tables, statuses = Tables(wide), []
    dut = EvGenBlock(num_qps=NQ, evs_per_qp=E, tx_map=tables.tx_map, rel_map=tables.rel_map,
                     tx_block=TX, rel_block=REL, ev_width=64 if wide else 16)
    rm = dut.register_map
    rng = seeds.rng(11)
    cycle = 0

    async def bench(ctx):
        async def tick():
            nonlocal cycle
            ready = rng.random() < take
            ctx.set(dut.inject.ready, ready)
            if ready and ctx.get(dut.inject.valid):
                p = dut.inject.payload
                tables.apply(cycle, ctx.get(p.block), ctx.get(p.addr), ctx.get(p.data))
            await ctx.tick()
            cycle += 1

        async def write(name, value, index=0):
            ctx.set(dut.csr.addr, rm[name].addr(index))
            ctx.set(dut.csr.w_data, value)
            ctx.set(dut.csr.w_stb, 1)
            await tick()
            ctx.set(dut.csr.w_stb, 0)

        async def read(name):
            ctx.set(dut.csr.addr, rm[name].offset)
            ctx.set(dut.csr.r_stb, 1)
            await tick()
            ctx.set(dut.csr.r_stb, 0)
            return ctx.get(dut.csr.r_data)

        for step in steps:
            if step[0] == "write":
                await write(*step[1:])
            elif step[0] == "start":
                await write("gen_start", step[1])
                await tick()
                again = step[2:] == ("again",)
                for _ in range(100_000):
                    if not await read("gen_status") & 1:
                        break
                    if again:
                        await write("gen_start", 0)  # while busy: ignored
                        again = False
                else:
                    raise AssertionError("the run did not end")
            else:
                statuses.append(await read("gen_status"))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return tables, statuses


def status(word):
    return dict(busy=word & 1, error=word >> 1 & 1, ignored=word >> 2 & 1, bad_qp=word >> 3 & 1,
                found=word >> 8 & 0xFF)


def generated(q, *, width, init, lo, hi, mask, count, take=1.0):
    return run([("write", "gen_qp", q), ("write", "gen_range", lo | hi << 16),
                ("write", "gen_init", init | mask << 16),
                ("write", "gen_shape", width | count << 8), ("start", 0), ("status",)],
               take=take)


def expect_table(tables, q, values):
    """Entries 0 .. len(values) - 1 GOOD with those values, the rest DENIED, in both."""
    want = {(q, i): (values[i], EvState.GOOD) if i < len(values) else (0, EvState.DENIED)
            for i in range(E)}
    assert tables.tx == want and tables.rel == want


@pytest.mark.parametrize("take", [1.0, 0.3])
def test_generated_matches_the_golden_model(take):
    params = dict(width=10, init=0x2F3, lo=100, hi=700, mask=0x3F5, count=6)
    tables, (word,) = generated(2, **params, take=take)
    want = [v for v, _ in generated_evs(width=10, init=0x2F3, min_ev=100, max_ev=700,
                                        mask=0x3F5, count=6)]
    expect_table(tables, 2, want)
    assert status(word) == dict(busy=0, error=0, ignored=0, bad_qp=0, found=6)
    assert tables.writes == 3 * E


def test_auto():
    tables, (word,) = run([("write", "gen_qp", 3), ("start", 1), ("status",)])
    want = [v for v, _ in generated_evs(**auto_params(3, E))]
    assert all(AUTO_MIN <= v <= AUTO_MAX for v in want) and len(set(want)) == E
    expect_table(tables, 3, want)
    assert status(word)["found"] == E
    assert [auto_init(q) for q in range(4)] == [0, 1 << 13, 1 << 12, 3 << 12]


def test_refusals_deny_every_entry():
    # min above max: refused by the generator
    tables, (word,) = generated(1, width=8, init=0, lo=9, hi=3, mask=0xFF, count=2)
    expect_table(tables, 1, [])
    assert status(word) == dict(busy=0, error=1, ignored=0, bad_qp=0, found=0)
    # 3 distinct EVs in the range, 5 asked: too few
    tables, (word,) = generated(0, width=4, init=0, lo=2, hi=4, mask=0xF, count=5)
    expect_table(tables, 0, [])
    assert status(word)["error"] == 1
    # more than evs_per_qp, and a width of 0
    for shape in (dict(width=8, count=E + 1), dict(width=0, count=1)):
        tables, (word,) = generated(0, init=0, lo=0, hi=0, mask=0, **shape)
        expect_table(tables, 0, [])
        assert status(word)["error"] == 1


def test_a_qp_out_of_range_writes_nothing():
    tables, (word,) = run([("write", "gen_qp", NQ), ("start", 1), ("status",)])
    assert tables.writes == 0
    assert status(word) == dict(busy=0, error=0, ignored=0, bad_qp=1, found=0)


def test_a_start_while_busy_is_ignored_and_said_so():
    tables, (word,) = run([("write", "gen_qp", 1), ("start", 1, "again"), ("status",)])
    expect_table(tables, 1, [v for v, _ in generated_evs(**auto_params(1, E))])
    assert status(word)["ignored"] == 1 and status(word)["found"] == E


def test_registers_read_back():
    dut = EvGenBlock(num_qps=NQ, evs_per_qp=E, tx_map=TX_MAP, rel_map=REL_MAP, tx_block=TX,
                     rel_block=REL)
    rm = dut.register_map
    got = {}

    async def bench(ctx):
        for name, value in (("gen_qp", 0xFFFF_1234), ("gen_range", 0x1234_5678),
                            ("gen_init", 0x9ABC_DEF0), ("gen_shape", 0xFFFF_FFFF)):
            ctx.set(dut.csr.addr, rm[name].offset)
            ctx.set(dut.csr.w_data, value)
            ctx.set(dut.csr.w_stb, 1)
            await ctx.tick()
            ctx.set(dut.csr.w_stb, 0)
            ctx.set(dut.csr.r_stb, 1)  # the cycle after the write: still pending
            await ctx.tick()
            ctx.set(dut.csr.r_stb, 0)
            got[name] = ctx.get(dut.csr.r_data)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert got == {"gen_qp": 0x1234, "gen_range": 0x1234_5678, "gen_init": 0x9ABC_DEF0,
                   "gen_shape": 0xFF1F}


def test_parameters_are_checked():
    with pytest.raises(ValueError, match="power of two"):
        EvGenBlock(num_qps=NQ, evs_per_qp=6, tx_map=TX_MAP, rel_map=REL_MAP, tx_block=TX,
                   rel_block=REL)
    with pytest.raises(ValueError, match="num_qps x evs_per_qp"):
        EvGenBlock(num_qps=NQ * 2, evs_per_qp=E, tx_map=TX_MAP, rel_map=REL_MAP, tx_block=TX,
                   rel_block=REL)


def wide_setup(bits, template):
    """The writes of ``gen_bits`` and ``gen_template`` (64-bit EV entries)."""
    return [("write", name, value >> 32 * k & 0xFFFF_FFFF, k)
            for name, value in (("gen_bits", bits), ("gen_template", template)) for k in (0, 1)]


@pytest.mark.parametrize("bits, template", [
    (0xFFFF << 16, 0xC00B),  # STEV's flow label over its source port
    (0xFF << 24 | 0xF << 16 | 0xF << 4, 0xC000),  # STEV, 8 + 4 + 4 bits split over both
    (0xFFFF << 48, 0x0002 << 32),  # SRv6's first uSID over the rest of the list
    (0, 0)])  # the reset value: UDP's source port
def test_derived_values_are_deposited_in_the_template(bits, template):
    """With 64-bit EV entries, each derived value's bit j goes to the j-th
    lowest set bit of ``gen_bits``, the others ``gen_template``'s
    (``deposit``: the bits may be split), GENERATED and AUTO alike: every
    entry's bits above 15 staged in TX's and reliability's ev_value_hi before
    its entry write, zeros for the DENIED ones."""
    used = bits or 0xFFFF
    tables, (word,) = run([*wide_setup(bits, template), ("write", "gen_qp", 2),
                           ("write", "gen_range", 0x0E00 | 0x0E07 << 16),
                           ("write", "gen_init", 0 | 0xFFFF << 16),
                           ("write", "gen_shape", 16 | 5 << 8), ("start", 0), ("status",)],
                          wide=True)
    want = [deposit(v, used, template) for v, _ in generated_evs(
        width=16, init=0, min_ev=0x0E00, max_ev=0x0E07, mask=0xFFFF, count=5)]
    expect_table(tables, 2, want)
    assert status(word)["found"] == 5
    assert tables.writes == E * (3 + 2 * 2)
    tables, _ = run([*wide_setup(bits, template), ("write", "gen_qp", 1), ("start", 1),
                     ("status",)], wide=True)
    expect_table(tables, 1, [deposit(v, used, template)
                             for v, _ in generated_evs(**auto_params(1, E, used, template))])


def test_deposit():
    """``deposit``, the rule the gateware's DEPOSIT state follows bit by bit."""
    assert deposit(0xABCD, 0xFFFF << 16, 0xC00B) == 0xABCD_C00B
    assert deposit(0b101, 0b1011 << 4, 0xFFFF) == 0xFFDF  # bits 4, 5, 7 from 1, 0, 1; 6 kept
    assert deposit(0x1FF, 0xFF, 0) == 0xFF  # value bits past the last are dropped
    assert deposit(0xA5, 0xF << 28 | 0xF, 0) == 0xA << 28 | 0x5


@pytest.mark.parametrize("qpn", [0, 3])
def test_srv6_auto_takes_the_first_hops_from_the_templates(qpn):
    """AUTO with the value in SRv6's first uSID: the evs_per_qp first hops from
    the template's first uSID on, QP q starting at the (q mod evs_per_qp)-th,
    the rest of each list the template's; a range past uSID 0xFFFF is refused
    (every entry DENIED), as the model's rule refuses it."""
    template = 0x0E00_0002 << 32

    def auto(template, qpn):
        return run([*wide_setup(0xFFFF << 48, template), ("write", "gen_qp", qpn),
                    ("start", 1), ("status",)], wide=True)

    tables, (word,) = auto(template, qpn)
    firsts = [0x0E00 + (qpn + i) % E for i in range(E)]
    assert [v for v, _ in generated_evs(**auto_params(qpn, E, 0xFFFF << 48, template))] == firsts
    expect_table(tables, qpn, [f << 48 | 0x0002 << 32 for f in firsts])
    assert status(word) == dict(busy=0, error=0, ignored=0, bad_qp=0, found=E)
    tables, (word,) = auto(0xFFFC_0002 << 32, qpn)
    expect_table(tables, qpn, [])
    assert status(word)["error"] == 1
    with pytest.raises(ValueError, match="min <= max < 2"):
        generated_evs(**auto_params(qpn, E, 0xFFFF << 48, 0xFFFC_0002 << 32))


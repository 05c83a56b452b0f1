"""hw/tx/wqe_loader.py ``WqeLoader``: ``cur`` and ``op_bad`` checked every
cycle, under random state flags, beats and rows, against a Python model of
the rule: the saved row loads the cycle after LOAD (a quarter of the fields
also after IDLE, RETX_CHECK or RETX_COMPARE), a WQE field the cycle after
the register of its beat (the 64-byte WQE format of docs/tx.md), every WQE
field from the prefetched WQE in TAKE, PARSE and TAKE set wqe_index and
pkt_index over all of them, and op_bad is the unknown opcode of a WQE taken
(never a retransmission's re-fetch), cleared from IDLE on."""


from amaranth.sim import Simulator

from hw.tx.layouts import WQE_KEPT_FIELDS, WqeOpcode
from hw.tx.wqe_loader import WqeLoader
from tests import seeds

ADDR_WIDTH = 48
# field: (byte offset in the WQE, bytes, bits kept in cur); with_imm is the opcode byte's
WQE_FIELDS = {"with_imm": (0x00, 1, 1), "imm": (0x04, 4, 32), "laddr": (0x10, 8, ADDR_WIDTH),
              "raddr": (0x18, 8, 64), "length": (0x20, 4, 32), "rkey": (0x24, 4, 32)}
WIDTHS = {"laddr": ADDR_WIDTH, "raddr": 64, "length": 32, "rkey": 32, "imm": 32, "with_imm": 1,
          "wqe_index": 16, "pkt_index": 24}
GROUPS = ((None, ("raddr",)), ("idle", ("laddr", "with_imm", "wqe_index")),
          ("retx_check", ("length", "rkey")), ("retx_compare", ("imm", "pkt_index")))
KNOWN = {int(k) for k in WqeOpcode.KNOWN}


def test_wqe_loader():
    dut = WqeLoader(data_width=64, addr_width=ADDR_WIDTH)
    rng = seeds.rng(5)
    flags = ("idle", "load", "retx_check", "retx_compare", "fetch_data", "parse", "take")
    log = {"op_bad": 0, "beat_loads": 0, "row_loads": 0, "takes": 0}

    def field_of(beat_word, name):
        off, size, _ = WQE_FIELDS[name]
        value = beat_word >> (8 * (off % 8)) & ((1 << (8 * size)) - 1)
        return value

    def wqe_field(wqe, name):
        return wqe["opcode" if name == "with_imm" else name]

    async def bench(ctx):
        cur = dict.fromkeys(WIDTHS, 0)
        op_bad = 0
        beat_reg = dict.fromkeys(WQE_FIELDS, 0)  # each field's bits of the beat before
        load_row = dict.fromkeys(range(4), 0)
        load = dict.fromkeys(WQE_FIELDS, 0)
        for _ in range(4000):
            f = {name: int(rng.random() < 0.25) for name in flags}
            retx = int(rng.random() < 0.3)
            row = {name: rng.getrandbits(w) for name, w in WIDTHS.items()}
            beat = rng.getrandbits(64)
            if rng.random() < 0.5:  # an opcode byte worth decoding
                beat = (beat & ~0xFF) | rng.choice([*KNOWN, WqeOpcode.WRITE_WITH_IMM, 0x55])
            wqe = {name: rng.getrandbits(8 * size) for name, _, size in WQE_KEPT_FIELDS}
            if rng.random() < 0.5:
                wqe["opcode"] = rng.choice([*KNOWN, WqeOpcode.WRITE_WITH_IMM, 0x55])
            beat_valid = int(rng.random() < 0.6)
            beat_index = rng.randrange(8)
            parse_wqe, parse_pkt = rng.getrandbits(16), rng.getrandbits(24)
            for name in flags:
                ctx.set(getattr(dut, f"in_{name}"), f[name])
            ctx.set(dut.retx, retx)
            ctx.set(dut.row, row)
            ctx.set(dut.wqe, wqe)
            for name, value in (("beat", beat), ("beat_valid", beat_valid),
                                ("beat_index", beat_index), ("parse_wqe_index", parse_wqe),
                                ("parse_pkt_index", parse_pkt)):
                ctx.set(getattr(dut, name), value)
            got = ctx.get(dut.cur)
            assert {name: getattr(got, name) for name in WIDTHS} == cur
            assert ctx.get(dut.op_bad) == op_bad
            await ctx.tick()
            # the model's next state, from this cycle's values
            new_cur = dict(cur)
            for g, (_, names) in enumerate(GROUPS):
                for name in names:
                    if name not in WQE_FIELDS:
                        if load_row[g]:
                            new_cur[name] = row[name]
                    elif load[name]:
                        if load_row[g]:
                            new_cur[name] = row[name]
                            log["row_loads"] += 1
                        else:
                            value = beat_reg[name]
                            if name == "with_imm":
                                value = int(value == WqeOpcode.WRITE_WITH_IMM)
                            new_cur[name] = value & ((1 << WIDTHS[name]) - 1)
                            log["beat_loads"] += 1
            if f["take"]:
                for name in WQE_FIELDS:
                    value = wqe_field(wqe, name)
                    if name == "with_imm":
                        value = int(value == WqeOpcode.WRITE_WITH_IMM)
                    new_cur[name] = value & ((1 << WIDTHS[name]) - 1)
                log["takes"] += 1
            if f["parse"] or f["take"]:
                new_cur["wqe_index"], new_cur["pkt_index"] = parse_wqe, parse_pkt
            new_op_bad = op_bad
            if f["idle"]:
                new_op_bad = 0
            if f["take"]:
                new_op_bad = int(wqe_field(wqe, "with_imm") not in KNOWN)
                log["op_bad"] += new_op_bad
            beat_hit = f["fetch_data"] and beat_valid
            for g, (also, names) in enumerate(GROUPS):
                row_next = f["load"] or (also is not None and f[also])
                load_row[g] = int(row_next)
                for name in names:
                    if name in WQE_FIELDS:
                        load[name] = int(row_next or (beat_hit
                                                      and beat_index == WQE_FIELDS[name][0] // 8))
            beat_reg = {name: field_of(beat, name) for name in WQE_FIELDS}
            cur, op_bad = new_cur, new_op_bad

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert log["op_bad"] > 20 and log["beat_loads"] > 200 and log["row_loads"] > 200
    assert log["takes"] > 200

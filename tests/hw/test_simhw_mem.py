"""two_nic_sim's host memory (sim/system/simhw.py ``mrc_sim_axi_mem``) on its
own, at 64 and 512 bits, driven by cocotbext-axi's AxiMaster: bursts of
every size and alignment, many at once both ways, land and read back byte
exact (checked through the backdoor both ways); several bursts are
outstanding at once and a queued read burst's first beat follows the last
beat of the one before it with no idle cycle; no access raises
``mem_error``."""

from __future__ import annotations

import os
import random

import cocotb
import pytest
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiBus, AxiMaster

from sim.system import simhw

RAM = 1 << 20
DATA_WIDTH = int(os.environ.get("SIMHW_MEM_DW", "64"))
PORTS = (("awid", 4, "i"), ("awaddr", 64, "i"), ("awlen", 8, "i"), ("awsize", 3, "i"),
         ("awburst", 2, "i"), ("awvalid", 1, "i"), ("awready", 1, "o"),
         ("wdata", "DW", "i"), ("wstrb", "DW/8", "i"), ("wlast", 1, "i"), ("wvalid", 1, "i"),
         ("wready", 1, "o"), ("bid", 4, "o"), ("bresp", 2, "o"), ("bvalid", 1, "o"),
         ("bready", 1, "i"), ("arid", 4, "i"), ("araddr", 64, "i"), ("arlen", 8, "i"),
         ("arsize", 3, "i"), ("arburst", 2, "i"), ("arvalid", 1, "i"), ("arready", 1, "o"),
         ("rid", 4, "o"), ("rdata", "DW", "o"), ("rresp", 2, "o"), ("rlast", 1, "o"),
         ("rvalid", 1, "o"), ("rready", 1, "i"))


class MemTop:
    """The memory module alone, its AXI ports as ``axi_*``."""

    cocotb_public = True

    def __init__(self, data_width: int):
        self.data_width = data_width

    def prepare_build(self) -> list[str]:
        lib = simhw.build_library()
        return ["-LDFLAGS", f"{lib} -Wl,-rpath,{lib.parent}"]

    def verilog_text(self, toplevel: str, emit_src: bool = False) -> str:
        dw = self.data_width
        io = ["input clk", "input rst", "output mem_error"]
        for name, width, direction in PORTS:
            bits = {"DW": dw, "DW/8": dw // 8}.get(width, width)
            rng = f"[{bits - 1}:0] " if bits > 1 else ""
            io.append(f"{'input' if direction == 'i' else 'output'} {rng}axi_{name}")
        conns = ", ".join(f".{name}(axi_{name})" for name, _, _ in PORTS)
        return (simhw._DPI + "\n" + simhw._MEM + f"\nmodule {toplevel} (\n    "
                + ",\n    ".join(io) + ");\n"
                + f"  mrc_sim_axi_mem #(.NIC(0), .IW(4), .DW({dw})) mem (.clk(clk), .rst(rst), "
                + conns + ", .mem_error(mem_error));\nendmodule\n")


async def _setup(dut):
    lib = simhw._load()
    lib.mrc_sim_reset(RAM, 1)
    cocotb.start_soon(Clock(dut.clk, 8, unit="ns").start())
    dut.rst.value = 1
    master = AxiMaster(AxiBus.from_prefix(dut, "axi"), dut.clk, dut.rst)
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 2)
    return master, simhw.HostRam(lib, 0, RAM)


async def _watch(dut, log):
    """Per cycle: AW taken, B taken, AR taken, R beat (its last flag)."""
    while True:
        await RisingEdge(dut.clk)
        log.append((bool(dut.axi_awvalid.value and dut.axi_awready.value),
                    bool(dut.axi_bvalid.value and dut.axi_bready.value),
                    bool(dut.axi_arvalid.value and dut.axi_arready.value),
                    bool(dut.axi_rvalid.value and dut.axi_rready.value),
                    bool(dut.axi_rlast.value)))


@cocotb.test()
async def test_bursts_both_ways(dut):
    master, ram = await _setup(dut)
    log = []
    cocotb.start_soon(_watch(dut, log))
    rng = random.Random(5)
    bpb = DATA_WIDTH // 8
    shadow = bytearray(RAM)
    # writes: every alignment within a beat, lengths up to 4 KiB, 8 at a time
    writes = []
    for k in range(48):
        addr = 8192 * k + rng.randrange(2 * bpb)
        data = rng.randbytes(rng.choice([1, bpb - 1, bpb, bpb + 1, 100, 1000, 4096 - bpb]))
        writes.append((addr, data))
        shadow[addr:addr + len(data)] = data
    for i in range(0, len(writes), 8):
        tasks = [cocotb.start_soon(master.write(a, d)) for a, d in writes[i:i + 8]]
        for t in tasks:
            await t
    for a, d in writes:
        assert ram.read(a, len(d)) == d, hex(a)
    # reads of what was written and of backdoor bytes, 8 at a time
    ram.write(RAM - 4096, bytes(range(256)) * 16)
    shadow[RAM - 4096:] = bytes(range(256)) * 16
    reads = [(a, len(d)) for a, d in writes] + [(RAM - 4096 + 17, 3000), (RAM - bpb, bpb)]
    for i in range(0, len(reads), 8):
        tasks = [(a, n, cocotb.start_soon(master.read(a, n))) for a, n in reads[i:i + 8]]
        for a, n, t in tasks:
            assert (await t).data == bytes(shadow[a:a + n]), hex(a)
    await ClockCycles(dut.clk, 4)
    assert not dut.mem_error.value and ram.errors() == (0, 0)
    # several bursts outstanding each way, and queued reads back to back
    aw_out = ar_out = 0
    most_w = most_r = 0
    back_to_back = 0
    last_end = None
    for cycle, (aw, b, ar, r, rlast) in enumerate(log):
        aw_out += aw - b
        most_w = max(most_w, aw_out)
        ar_out += ar
        most_r = max(most_r, ar_out)
        if r and rlast:
            ar_out -= 1
            last_end = cycle
        elif r and last_end == cycle - 1 and ar_out > 0:
            back_to_back += 1
    assert most_w >= 2 and most_r >= 2, (most_w, most_r)
    assert back_to_back > 0


@pytest.mark.parametrize("width", [64, 512])
def test_simhw_mem(width, monkeypatch):
    from sim.cocotb_runner import run_cocotb

    monkeypatch.setenv("SIMHW_MEM_DW", str(width))
    run_cocotb(name=f"simhw_mem_w{width}", elaborate=lambda: MemTop(width), toplevel="simhw_mem",
               test_module="tests.hw.test_simhw_mem", extra_env={"SIMHW_MEM_DW": str(width)})

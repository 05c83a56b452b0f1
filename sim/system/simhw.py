"""Simulation-only hardware for the fast two-NIC harness: per-cycle work in
the Verilator model, per-transaction work in Python.

``SimTwoNicTop`` is the two-NIC top (sim/system/top.py) inside a Verilog
wrapper ``two_nic_sim`` that adds, per NIC i:

- ``mrc_sim_axi_mem``: an AXI4 slave on ``n{i}_m_axi`` whose bytes live in C++
  (sim/system/simhw.cpp, the shared library ``libmrcsimhw.so``), as wide as
  the NICs' data path (64 to 512 bits, in 64-bit words to C++). INCR bursts
  of any size up to the bus width; up to four bursts each way outstanding
  (AW or AR taken, B or the last R beat not yet), served in order, one beat
  per cycle and back to back, as a host's PCIe root complex takes several
  requests: a write burst's W beats from the cycle after its AW, its B in
  the cycle after its last beat; a read burst's first beat on R in the
  cycle after its AR, or right after the last beat of the burst before it.
  A write burst's bytes reach the memory together, at its last beat (as a
  PCIe write lands whole): Python never sees half a burst, such as a CQE
  whose phase byte (beat 2 of 4 on 64 bits) is in and whose WQE index
  (beat 3) is not.
  An access outside the memory, a burst that is not INCR, or WLAST on the
  wrong beat is counted and raises ``n{i}_mem_error`` (sticky until reset),
  which fails the test (``SimHw.watch``).
- per plane p (``plane_suffix``: ``_p{p}`` but for plane 0), on its own
  MAC port of simhw.cpp (``mac_port``):
- ``mrc_sim_mac_tx`` on ``n{i}_mac_tx``: TREADY high outside reset, or, once
  Python paces the port (``FrameSink.pace``: a wire's rate, its overhead
  per frame and a FIFO), high in the cycle after one in which what the MAC
  holds leaves the wire within the FIFO's time; the bytes of each beat's
  TKEEP go to C++, and a frame is whole at TLAST (with its departure from
  the wire when paced), when the port ``n{i}_tx_frames`` (a count) changes:
  Python wakes once per frame.
- ``mrc_sim_mac_rx`` on ``n{i}_mac_rx``: frames Python queued, each with the
  simulated time it is due (the fabric's arrival time), go out in the order
  they fall due, from the first clock edge at or after it, back to back, one
  beat per cycle while TREADY allows, TUSER 0. Python is not woken to
  deliver a frame.

The AXI4-Lite CSR ports (``n{i}_s_axil``) and ``n{i}_irq`` are the top's own.

Python side (``SimHw``, one per simulator process, reached with ctypes in
the library the simulator loaded): ``ram(i)`` (``read``/``write`` backdoor,
the interface of cocotbext-axi's ``AxiRam`` that ``HostMemory`` uses),
``sink(i)`` (``await recv()`` -> a frame with ``tdata`` and ``departure_ns``;
``pace(gbps, overhead_bytes, fifo_bytes)``) and ``source(i)``
(``await send(frame)`` now, or ``send_at(data, arrival_ns)``), the interface
of the cocotbext-axi stream sink and source the fabric (sim/system/fabric.py)
takes.
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from sim.system.top import MAX_NICS, NIC_PARAMS, PARAMS_ENV, TwoNicTop

__all__ = ["SimTwoNicTop", "SimHw", "library_path", "build_library", "SIM_TOPLEVEL",
           "run_two_nic"]

HERE = Path(__file__).resolve().parent
CPP = HERE / "simhw.cpp"
SIM_TOPLEVEL = "two_nic_sim"
LIB_NAME = "libmrcsimhw.so"


def library_path() -> Path:
    from sim.cocotb_runner import SIM_BUILD

    return SIM_BUILD / "_simhw" / LIB_NAME


def build_library() -> Path:
    """Compile simhw.cpp into ``library_path()`` unless it is current (a
    digest of the source beside it). The file is replaced by a rename, so a
    simulator that has the old one loaded keeps it."""
    path = library_path()
    digest = hashlib.sha256(CPP.read_bytes()).hexdigest()
    stamp = path.with_suffix(".digest")
    if path.exists() and stamp.exists() and stamp.read_text() == digest:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{LIB_NAME}.{os.getpid()}")
    cxx = os.environ.get("CXX", "g++")
    subprocess.run([cxx, "-O2", "-std=c++17", "-shared", "-fPIC", "-o", str(tmp), str(CPP)],
                   check=True)
    os.replace(tmp, path)
    stamp.write_text(digest)
    return path


# ---- Verilog ------------------------------------------------------------------------------

_DPI = """\
import "DPI-C" function longint mrc_mem_read(input int nic, input longint addr);
import "DPI-C" function void mrc_mem_write(input int nic, input longint addr,
                                           input longint data, input int strb,
                                           input int last);
import "DPI-C" function void mrc_mem_protocol_error(input int nic, input longint addr);
import "DPI-C" function int mrc_mem_failed(input int nic);
import "DPI-C" function void mrc_tx_beat(input int nic, input longint data, input int keep,
                                         input int last, input longint now_ns);
import "DPI-C" function int mrc_tx_ready(input int nic, input longint now_ns);
import "DPI-C" function int mrc_rx_beat(input int nic, input longint now_ns, input int more,
                                        output longint data, output int keep_last);
"""

_MEM = """\
// Host memory of NIC ``NIC``: an AXI4 slave whose bytes are in simhw.cpp.
// DW (64 .. 512) bits of data, reaching simhw.cpp as 64-bit words. Up to Q
// bursts each way are outstanding (AW or AR taken, B or last R not yet), and
// served in order, back to back.
module mrc_sim_axi_mem #(parameter int NIC = 0, parameter int IW = 1, parameter int DW = 64) (
    input clk, input rst,
    input [IW-1:0] awid, input [63:0] awaddr, input [7:0] awlen, input [2:0] awsize,
    input [1:0] awburst, input awvalid, output awready,
    input [DW-1:0] wdata, input [DW/8-1:0] wstrb, input wlast, input wvalid, output wready,
    output [IW-1:0] bid, output [1:0] bresp, output bvalid, input bready,
    input [IW-1:0] arid, input [63:0] araddr, input [7:0] arlen, input [2:0] arsize,
    input [1:0] arburst, input arvalid, output arready,
    output reg [IW-1:0] rid, output reg [DW-1:0] rdata, output [1:0] rresp, output reg rlast,
    output reg rvalid, input rready,
    output reg mem_error);
  localparam int Q = 4;
  localparam int WORDS = DW / 64;
  // beat k of an INCR burst at ``a`` of 2^size bytes a beat
  function automatic [63:0] beat_addr(input [63:0] a, input [2:0] size, input [7:0] k);
    beat_addr = k == 8'd0 ? a : (a & ~((64'd1 << size) - 64'd1)) + (64'(k) << size);
  endfunction
  // the beat's DW bits at ``a``'s bus-aligned address
  function automatic [DW-1:0] read_beat(input [63:0] a);
    for (int w = 0; w < WORDS; w++)
      read_beat[64 * w +: 64] = mrc_mem_read(NIC, (a & ~64'(DW / 8 - 1)) + 64'(8 * w));
  endfunction
  // queues of bursts (ring buffers: head index and count)
  reg [63:0] awq_addr [Q]; reg [2:0] awq_size [Q]; reg [7:0] awq_len [Q]; reg [IW-1:0] awq_id [Q];
  reg [63:0] arq_addr [Q]; reg [2:0] arq_size [Q]; reg [7:0] arq_len [Q]; reg [IW-1:0] arq_id [Q];
  reg [IW-1:0] bq_id [Q];
  reg [2:0] aw_n, b_n, ar_n;
  reg [1:0] aw_head, b_head, ar_head;
  reg [7:0] w_beat;  // the next W beat of the oldest write burst
  reg [7:0] r_beat;  // the beat on R (while rvalid) of the oldest read burst
  assign awready = 32'(aw_n) + 32'(b_n) < Q;
  assign wready = aw_n != 3'd0;
  assign bvalid = b_n != 3'd0;
  assign bid = bq_id[b_head];
  assign bresp = 2'b00;
  assign arready = 32'(ar_n) < Q;
  assign rresp = 2'b00;
  always @(posedge clk) begin : serve
    int awc, bc, arc, awh, bh, arh, push;
    logic [63:0] a;
    logic [2:0] sz;
    logic [7:0] len, k;
    logic [IW-1:0] id;
    if (rst) begin
      aw_n <= 3'd0; b_n <= 3'd0; ar_n <= 3'd0; aw_head <= 2'd0; b_head <= 2'd0; ar_head <= 2'd0;
      w_beat <= 8'd0; r_beat <= 8'd0; rvalid <= 1'b0; mem_error <= 1'b0;
    end else begin
      awc = 32'(aw_n); bc = 32'(b_n); arc = 32'(ar_n);
      awh = 32'(aw_head); bh = 32'(b_head); arh = 32'(ar_head);
      if (bc != 0 && bready) begin
        bh = (bh + 1) % Q; bc = bc - 1;
      end
      if (wvalid && awc != 0) begin  // a beat of the oldest write burst
        a = beat_addr(awq_addr[awh], awq_size[awh], w_beat);
        len = awq_len[awh];
        for (int w = 0; w < WORDS; w++)
          mrc_mem_write(NIC, (a & ~64'(DW / 8 - 1)) + 64'(8 * w), wdata[64 * w +: 64],
                        {24'd0, wstrb[8 * w +: 8]}, {31'd0, w_beat == len && w == WORDS - 1});
        if (wlast != (w_beat == len)) mrc_mem_protocol_error(NIC, a);
        if (w_beat == len) begin
          bq_id[(bh + bc) % Q] <= awq_id[awh];
          bc = bc + 1; awh = (awh + 1) % Q; awc = awc - 1;
          w_beat <= 8'd0;
        end else w_beat <= w_beat + 8'd1;
      end
      if (awvalid && awready) begin
        push = (awh + awc) % Q;
        awq_addr[push] <= awaddr; awq_size[push] <= awsize; awq_len[push] <= awlen;
        awq_id[push] <= awid; awc = awc + 1;
        if (awburst != 2'b01) mrc_mem_protocol_error(NIC, awaddr);
      end
      push = -1;
      if (arvalid && arready) begin
        push = (arh + arc) % Q;
        arq_addr[push] <= araddr; arq_size[push] <= arsize; arq_len[push] <= arlen;
        arq_id[push] <= arid; arc = arc + 1;
        if (arburst != 2'b01) mrc_mem_protocol_error(NIC, araddr);
      end
      if (!rvalid || rready) begin  // R free for the next beat
        k = 8'd0;
        if (rvalid && rlast) begin
          arh = (arh + 1) % Q; arc = arc - 1;
        end else if (rvalid) k = r_beat + 8'd1;
        if (arc != 0) begin
          if (arh == push) begin  // the burst taken in this cycle
            a = araddr; sz = arsize; len = arlen; id = arid;
          end else begin
            a = arq_addr[arh]; sz = arq_size[arh]; len = arq_len[arh]; id = arq_id[arh];
          end
          rdata <= read_beat(beat_addr(a, sz, k)); rid <= id; rlast <= k == len;
          rvalid <= 1'b1; r_beat <= k;
        end else begin
          rvalid <= 1'b0; r_beat <= 8'd0;
        end
      end
      aw_n <= 3'(awc); b_n <= 3'(bc); ar_n <= 3'(arc);
      aw_head <= 2'(awh); b_head <= 2'(bh); ar_head <= 2'(arh);
      if (mrc_mem_failed(NIC) != 0) mem_error <= 1'b1;
    end
  end
endmodule

// NIC ``NIC``'s mac_tx into simhw.cpp; ``frames`` counts the frames taken.
module mrc_sim_mac_tx #(parameter int NIC = 0, parameter int DW = 64) (
    input clk, input rst, input [DW-1:0] tdata, input [DW/8-1:0] tkeep, input tlast,
    input tvalid,
    output tready, output reg [31:0] frames);
  reg ready;  // paced at the wire's rate by simhw.cpp (mrc_tx_pace), else always
  assign tready = ready && !rst;
  always @(posedge clk) begin
    if (rst) begin
      frames <= 32'd0;
      ready <= 1'b1;
    end else begin
      if (tvalid && ready) begin
        for (int w = 0; w < DW / 64; w++)
          mrc_tx_beat(NIC, tdata[64 * w +: 64], {24'd0, tkeep[8 * w +: 8]},
                      {31'd0, tlast && w == DW / 64 - 1}, $time);
        if (tlast) frames <= frames + 32'd1;
      end
      ready <= mrc_tx_ready(NIC, $time) != 0;
    end
  end
endmodule

// NIC ``NIC``'s mac_rx: the frames queued in simhw.cpp, back to back once due
// ($time in ns: run_cocotb's timescale is 1ns/1ps).
// A beat holds DW / 8 bytes of one frame (fewer at its end), in 64-bit words.
module mrc_sim_mac_rx #(parameter int NIC = 0, parameter int DW = 64) (
    input clk, input rst, output reg [DW-1:0] tdata, output reg [DW/8-1:0] tkeep,
    output reg tlast, output tuser, output reg tvalid, input tready);
  assign tuser = 1'b0;
  always @(posedge clk) begin : beat
    longint data;
    int keep_last;
    if (rst) tvalid <= 1'b0;
    else if (!tvalid || tready) begin
      if (mrc_rx_beat(NIC, $time, 0, data, keep_last) != 0) begin
        tvalid <= 1'b1; tdata <= '0; tkeep <= '0;
        tdata[63:0] <= data; tkeep[7:0] <= keep_last[7:0]; tlast <= keep_last[8];
        for (int w = 1; w < DW / 64; w++)
          if (keep_last[8] == 0 && mrc_rx_beat(NIC, $time, 1, data, keep_last) != 0) begin
            tdata[64 * w +: 64] <= data; tkeep[8 * w +: 8] <= keep_last[7:0];
            tlast <= keep_last[8];
          end
      end else tvalid <= 1'b0;
    end
  end
endmodule
"""

_MEM_PORTS = ("awid awaddr awlen awsize awburst awvalid awready wdata wstrb wlast wvalid wready "
              "bid bresp bvalid bready arid araddr arlen arsize arburst arvalid arready rid rdata "
              "rresp rlast rvalid rready").split()
_STREAM_PORTS = ("tdata", "tkeep", "tlast", "tvalid", "tready")


def plane_suffix(plane: int) -> str:
    """The suffix of plane ``plane``'s NicCore MAC ports (none for plane 0)."""
    return f"_p{plane}" if plane else ""


def mac_port(nic: int, plane: int) -> int:
    """simhw.cpp's index of NIC ``nic``'s MAC port of plane ``plane``."""
    return nic + MAX_NICS * plane


def wrapper_verilog(top: TwoNicTop, toplevel: str = SIM_TOPLEVEL, core: str = "two_nic") -> str:
    """The Verilog of the wrapper module ``toplevel`` around ``core`` (the
    two-NIC top's module) and of the simulation-only modules it uses."""
    if top.data_width not in (64, 128, 256, 512):
        raise ValueError(f"the simulation memory and MAC streams are 64 to 512 bits wide (a "
                         f"power of two); the NICs' data_width is {top.data_width}")
    ports = [(("__".join(map(str, path))), member.flow.name, len(value))
             for path, member, value in top.signature.flatten(top)]
    width = {name: w for name, _, w in ports}
    dw = top.data_width
    io = ["input clk", "input rst"]
    body, conns = [], [".clk(clk)", ".rst(rst)"]
    for name, flow, w in ports:
        rng = f"[{w - 1}:0] " if w > 1 else ""
        if "_s_axil__" in name or name.endswith(("_irq", "_link_up", "_plane_drops")):
            io.append(f"{'input' if flow == 'In' else 'output'} {rng}{name}")
        else:
            body.append(f"  wire {rng}{name};")
        conns.append(f".{name}({name})")
    for i in range(top.num_nics):
        io += [f"output [31:0] n{i}_tx_frames{plane_suffix(p)}" for p in range(top.num_planes)]
        io.append(f"output n{i}_mem_error")
    body.append(f"  {core} core ({', '.join(conns)});")
    for i in range(top.num_nics):
        p = f"n{i}_m_axi__"
        mem = ", ".join(f".{s}({p}{s})" for s in _MEM_PORTS)
        body.append(f"  mrc_sim_axi_mem #(.NIC({i}), .IW({width[p + 'awid']}), .DW({dw})) mem{i} "
                    f"(.clk(clk), .rst(rst), {mem}, .mem_error(n{i}_mem_error));")
        for p in range(top.num_planes):
            sfx, port = plane_suffix(p), mac_port(i, p)
            tx = ", ".join(f".{s}(n{i}_mac_tx{sfx}__{s})" for s in _STREAM_PORTS)
            body.append(f"  mrc_sim_mac_tx #(.NIC({port}), .DW({dw})) tx{port} (.clk(clk), "
                        f".rst(rst), {tx}, .frames(n{i}_tx_frames{sfx}));")
            rx = ", ".join(f".{s}(n{i}_mac_rx{sfx}__{s})" for s in (*_STREAM_PORTS, "tuser"))
            body.append(f"  mrc_sim_mac_rx #(.NIC({port}), .DW({dw})) rx{port} (.clk(clk), "
                        f".rst(rst), {rx});")
    head = f"module {toplevel} (\n    " + ",\n    ".join(io) + ");\n"
    return _DPI + "\n" + _MEM + "\n" + head + "\n".join(body) + "\nendmodule\n"


class SimTwoNicTop(TwoNicTop):
    """The two-NIC top inside ``two_nic_sim`` (host memories and MAC streams
    in the simulator, see the module docstring). For ``run_cocotb``."""

    def build_key(self) -> str:
        from sim.cocotb_runner import source_digest

        return source_digest(Path(__file__), extra=(super().build_key(),))

    def prepare_build(self) -> list[str]:
        """Build the C++ library (if needed); Verilator's arguments to link it."""
        lib = build_library()
        return ["-LDFLAGS", f"{lib} -Wl,-rpath,{lib.parent}"]

    def verilog_text(self, toplevel: str = SIM_TOPLEVEL, emit_src: bool = False) -> str:
        return (super().verilog_text("two_nic", emit_src) + "\n"
                + wrapper_verilog(self, toplevel))


def run_two_nic(test_module: str, testcases, tag: str, overrides: dict | None = None,
                extra_env: dict | None = None):
    """Run cocotb tests ``testcases`` of ``test_module`` on the one two-NIC
    build (sim_build/system_two_nic_sim), in the run directory ``tag``; or,
    with ``overrides`` (NicCore parameters over NIC_PARAMS, such as
    ``{"data_width": 512}``), on a build of its own named by them, the tests
    reading its parameters from ``sim.system.top.system_params()``.
    ``extra_env``: more environment for the simulator's Python."""
    import json

    from sim.cocotb_runner import SIM_BUILD, run_cocotb

    overrides = overrides or {}
    name = "system_two_nic_sim" + "".join(f"_{k}{v}" for k, v in sorted(overrides.items()))
    params = {**NIC_PARAMS, **overrides}
    run_cocotb(name=name, elaborate=lambda: SimTwoNicTop(params), toplevel=SIM_TOPLEVEL,
               test_module=test_module, testcase=testcases, test_dir=SIM_BUILD / name / tag,
               extra_env={**(extra_env or {}), PARAMS_ENV: json.dumps(overrides)})


# ---- Python side --------------------------------------------------------------------------

def _load() -> ctypes.CDLL:
    """The library the simulator loaded (the same copy: dlopen of the path it
    was loaded from returns it)."""
    loaded = None
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                if line.rstrip().endswith(LIB_NAME):
                    loaded = line.split(None, 5)[5].strip()
                    break
    except OSError:
        pass
    return _load_from(ctypes.CDLL(loaded or str(library_path())))


def _load_from(lib: ctypes.CDLL) -> ctypes.CDLL:
    """``lib`` with the argument and result types of its C API set."""
    u8p, u64 = ctypes.POINTER(ctypes.c_uint8), ctypes.c_uint64
    lib.mrc_sim_reset.argtypes = [u64, ctypes.c_int]
    lib.mrc_sim_reset.restype = ctypes.c_int
    lib.mrc_mem_ptr.argtypes, lib.mrc_mem_ptr.restype = [ctypes.c_int], ctypes.c_void_p
    lib.mrc_mem_drop_lanes.argtypes = [ctypes.c_int, u64, ctypes.c_int]
    lib.mrc_mem_drop_lanes.restype = None
    for name in ("mrc_mem_errors", "mrc_mem_first_error"):
        getattr(lib, name).argtypes, getattr(lib, name).restype = [ctypes.c_int], u64
    lib.mrc_tx_peek.argtypes, lib.mrc_tx_peek.restype = [ctypes.c_int], ctypes.c_int
    lib.mrc_tx_pop.argtypes, lib.mrc_tx_pop.restype = [ctypes.c_int, u8p], ctypes.c_int
    lib.mrc_tx_pace.argtypes = [ctypes.c_int, ctypes.c_double, ctypes.c_int, ctypes.c_double]
    lib.mrc_tx_pace.restype = None
    lib.mrc_tx_departure.argtypes, lib.mrc_tx_departure.restype = [ctypes.c_int], ctypes.c_double
    lib.mrc_rx_push.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, u64]
    lib.mrc_rx_push.restype = None
    lib.mrc_rx_queued.argtypes, lib.mrc_rx_queued.restype = [ctypes.c_int], ctypes.c_int
    return lib


class HostRam:
    """NIC ``nic``'s host memory, backdoor: ``read(addr, n)``, ``write(addr, data)``."""

    def __init__(self, lib, nic: int, size: int):
        self.lib, self.nic, self.size = lib, nic, size
        self.base = lib.mrc_mem_ptr(nic)

    def _check(self, addr: int, n: int) -> None:
        if addr < 0 or n < 0 or addr + n > self.size:
            raise ValueError(f"host memory of NIC {self.nic}: [0x{addr:x}, +{n}) is outside "
                             f"its {self.size} bytes")

    def read(self, addr: int, n: int) -> bytes:
        self._check(addr, n)
        return ctypes.string_at(self.base + addr, n)

    def write(self, addr: int, data) -> None:
        data = bytes(data)
        self._check(addr, len(data))
        ctypes.memmove(self.base + addr, data, len(data))

    def errors(self) -> tuple[int, int]:
        """(count, first address) of the NIC's bad DMA accesses."""
        return self.lib.mrc_mem_errors(self.nic), self.lib.mrc_mem_first_error(self.nic)

    def drop_lanes(self, beats: int, lanes: int) -> None:
        """Break the NIC's DMA once, to show a check catches it: its write
        beat ``beats`` beats from now (0: the next) loses the byte lanes of
        the mask ``lanes``."""
        self.lib.mrc_mem_drop_lanes(self.nic, beats, lanes)


@dataclass
class Frame:
    """A frame as the stream sink returns it (cocotbext-axi's has ``tdata`` too);
    ``departure_ns``: when its last bit left the wire, for a paced MAC (``FrameSink.pace``)."""

    tdata: bytes
    departure_ns: float | None = None


class FrameSink:
    """MAC port ``nic``'s mac_tx (``mac_port``), a frame at a time: ``await recv()``."""

    def __init__(self, lib, nic: int, count_signal):
        self.lib, self.nic, self.count = lib, nic, count_signal

    async def recv(self) -> Frame:
        from cocotb.triggers import ValueChange

        while (n := self.lib.mrc_tx_peek(self.nic)) < 0:
            await ValueChange(self.count)
        buf = (ctypes.c_uint8 * max(n, 1))()
        departure = self.lib.mrc_tx_departure(self.nic)
        self.lib.mrc_tx_pop(self.nic, buf)
        return Frame(bytes(buf[:n]), departure if departure >= 0 else None)

    def pace(self, gbps: float, overhead_bytes: int, fifo_bytes: int) -> None:
        """The MAC as a wire of ``gbps``: it takes the NIC's beats only while
        what it holds (at most ``fifo_bytes``) can leave at that rate, adding
        ``overhead_bytes`` per frame; each frame then carries its departure."""
        ns_per_byte = 8.0 / gbps
        self.lib.mrc_tx_pace(self.nic, ns_per_byte, overhead_bytes, fifo_bytes * ns_per_byte)


class FrameSource:
    """MAC port ``nic``'s mac_rx (``mac_port``): ``await send(frame)`` queues the frame's ``tdata``
    now; ``send_at(data, arrival_ns)`` queues bytes due at a later simulated
    time (ns, rounded up), without waking Python then."""

    def __init__(self, lib, nic: int):
        self.lib, self.nic = lib, nic

    async def send(self, frame) -> None:
        from cocotb.utils import get_sim_time

        self.send_at(frame.tdata, get_sim_time(unit="ns"))

    def send_at(self, data, arrival_ns: float) -> None:
        data = bytes(data)
        self.lib.mrc_rx_push(self.nic, data, len(data), math.ceil(arrival_ns))

    def queued(self) -> int:
        return self.lib.mrc_rx_queued(self.nic)


class SimHw:
    """The simulation-only hardware of a ``two_nic_sim`` dut (``num_nics`` NICs),
    from Python. Making one clears every memory and every queued frame."""

    def __init__(self, dut, ram_size: int, num_nics: int = 2):
        self.dut = dut
        self.lib = _load()
        self.lib.mrc_sim_reset(ram_size, num_nics)
        self.rams = [HostRam(self.lib, i, ram_size) for i in range(num_nics)]

    @staticmethod
    def present(dut) -> bool:
        """Whether ``dut`` is a ``two_nic_sim`` (else the bare two-NIC top)."""
        return hasattr(dut, "n0_tx_frames")

    def ram(self, i: int) -> HostRam:
        return self.rams[i]

    def sink(self, i: int, plane: int = 0) -> FrameSink:
        """NIC ``i``'s mac_tx of plane ``plane``."""
        return FrameSink(self.lib, mac_port(i, plane),
                         getattr(self.dut, f"n{i}_tx_frames{plane_suffix(plane)}"))

    def source(self, i: int, plane: int = 0) -> FrameSource:
        """NIC ``i``'s mac_rx of plane ``plane``."""
        return FrameSource(self.lib, mac_port(i, plane))

    async def watch(self, i: int) -> None:
        """Raise (failing the test) when NIC i's memory reports a bad access."""
        from cocotb.triggers import RisingEdge

        await RisingEdge(getattr(self.dut, f"n{i}_mem_error"))
        count, first = self.rams[i].errors()
        raise AssertionError(f"NIC {i}'s DMA made {count} bad host-memory access(es) (outside "
                             f"the {self.rams[i].size} bytes, not an INCR burst, or WLAST on "
                             f"the wrong beat); the first at 0x{first:x}")

"""Formal properties of the RX DMA writer (hw/rx/dma.py; ``sim.formal`` runs them).

The writer's promise (its docstring): whatever the payload stream does, it
never touches a byte outside ``[addr, addr + len)`` of the command it runs.
``DmaWriterHarness`` drives ``RxDmaWriter`` with commands and a payload
stream the solver chooses freely (the stream rule assumed on both; the
stream's beats, their ``last`` flags and their number are unconstrained: a
hostile frame can end early or run long), and an AXI slave that is free to
stall AW and W and to answer B whenever a burst is outstanding. It asserts:

- every AW burst lies in its command's range, beat-aligned: it starts where
  the previous burst of the command ended (the first at the command's first
  beat), it ends by the command's last beat, and it never crosses the
  writer's burst boundary (2 KiB at 64 bits; so never a 4 KiB page);
- every W beat belongs to a command (none without one, never more than the
  command's beats), and each of its strobes is a byte of ``[addr, addr +
  len)``; WLAST is set on the last beat of each burst and only there;
- a discarding or zero-length command writes nothing;
- the AW and W channels keep the AXI rule (valid held until ready, payload
  stable).

Reduction: 64-bit data, 32-bit addresses, commands of at most
``MAX_LEN`` (40) bytes at any address (so the solver places them across a
2 KiB boundary), two commands outstanding (``max_outstanding`` 2), one-bit
tags; inline commands of at most 32 bytes (a CQE). The checks are on byte
addresses, so they do not depend on the length limit; a longer command only
repeats the per-beat and per-burst steps checked here. The bytes' values
are held at 0 (the inline CQE and the stream's data): where a byte goes is
decided by the addresses, counts and flags alone (the realigning mux's
data path is checked in simulation, tests/unit/test_rx_units.py). Bounded
at ``DEPTH`` (10) cycles: one command from its take to its last W beat,
bursts split at the boundary included, and the next command's AW while that
one's W beats still go (the covers show both). Each step deeper costs the
solver about three times the one before (the run times are in
docs/verification.md's proofs table), so the second command's last beats
are out of reach; k-induction would need the
writer's own invariants (its counters against its address registers).
"""

from amaranth.hdl import Assert, Assume, Cat, Const, Cover, Elaboratable, Module, Mux, Signal

from hw.formal import Proof, axi4_rules, harness, valid_until_ready
from hw.rx.dma import CQE_BYTES, RxDmaWriter

__all__ = ["PROOFS", "DmaWriterHarness"]

BPB = 8  # bytes per beat (64-bit data)
ADDR = 32
MAX_LEN = 40
DEPTH = 10
BOUNDARY = 2048


class _Shadow:
    """The harness's record of one command whose beats are still due."""

    def __init__(self, name):
        self.valid = Signal(name=f"{name}_valid")
        self.addr = Signal(ADDR, name=f"{name}_addr")
        self.end = Signal(ADDR + 1, name=f"{name}_end")  # addr + len
        self.beats = Signal(8, name=f"{name}_beats")  # W beats it writes


class _CommandQueue:
    """The writing commands whose W beats (or AW bursts) are still due, in
    order: three records, ``head`` first (the writer takes a command while
    the one before it still writes, and that one's last beat can wait in
    its output register). ``pop`` (set by the caller) drops the head;
    ``push`` appends a command taken in the same cycle or after."""

    SLOTS = 3

    def __init__(self, m, name, due):
        self.m, self.due = m, due
        self.slots = [_Shadow(f"{name}{i}") for i in range(self.SLOTS)]
        self.head = self.slots[0]
        self.pop = Signal(name=f"{name}_pop")

    def push(self, cond, addr, length, beats):
        m, slots = self.m, self.slots
        with m.If(self.pop):
            for s, after in zip(slots[:-1], slots[1:], strict=True):
                m.d.sync += [s.valid.eq(after.valid), s.addr.eq(after.addr),
                             s.end.eq(after.end), s.beats.eq(after.beats)]
            m.d.sync += slots[-1].valid.eq(0)
        with m.If(cond):
            # the first free slot once the pop (if any) has moved them up
            valid = Cat(s.valid for s in slots)
            valid = Mux(self.pop, valid >> 1, valid)
            for i, slot in enumerate(slots):
                here = ~valid[i] if i == 0 else (valid[i - 1] & ~valid[i])
                with m.If(here):
                    m.d.sync += [slot.valid.eq(1), slot.addr.eq(addr),
                                 slot.end.eq(addr + length), slot.beats.eq(beats)]
        m.d.comb += Assert(~(cond & slots[-1].valid & ~self.pop),
                           f"a fourth writing command is taken while three still have "
                           f"{self.due} due")


class DmaWriterHarness(Elaboratable):
    """See the module docstring."""

    def __init__(self):
        self.dut = RxDmaWriter(data_width=64, tag_width=1, id_width=1, max_outstanding=2,
                               addr_width=ADDR)
        d = self.dut
        self.inputs = [d.cmd.valid, d.cmd.payload, d.data.valid, d.data.payload, d.done.ready,
                       d.m_axi.awready, d.m_axi.wready, d.m_axi.bvalid, d.m_axi.bresp,
                       d.m_axi.bid, d.m_axi.arready, d.m_axi.rvalid, d.m_axi.rdata,
                       d.m_axi.rresp, d.m_axi.rlast, d.m_axi.rid]

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        axi, c = dut.m_axi, dut.cmd.payload
        valid_until_ready(m, dut.cmd.valid, dut.cmd.ready, dut.cmd.payload, dut_drives=False,
                          name="cmd")
        valid_until_ready(m, dut.data.valid, dut.data.ready, dut.data.payload, dut_drives=False,
                          name="data")
        axi4_rules(m, axi, dut_is_master=True, channels=("aw", "w", "b"))
        m.d.comb += [
            Assume(c.len <= MAX_LEN),
            Assume(~c.inline | (c.len <= CQE_BYTES)),
            Assume((c.addr + c.len)[ADDR:] == 0),  # the validator passes no write past 2^32
            # the bytes' values: no bearing on where they go (see the docstring)
            Assume(c.inline_data == 0),
            Assume(dut.data.payload.data == 0),
        ]

        # B: the slave answers only bursts whose AW it took
        aws, bs = Signal(4), Signal(4)
        with m.If(axi.awvalid & axi.awready):
            m.d.sync += aws.eq(aws + 1)
        with m.If(axi.bvalid & axi.bready):
            m.d.sync += bs.eq(bs + 1)
        m.d.comb += Assume(~axi.bvalid | (aws != bs))

        # The commands that write, in order: W's record (head, next) and AW's.
        taken = dut.cmd.valid & dut.cmd.ready
        writes = taken & ~c.discard & (c.len != 0)
        new_beats = (c.addr[:3] + c.len + (BPB - 1)) >> 3
        w_q = _CommandQueue(m, "w", "W beats")
        head = w_q.head
        w_idx = Signal(8)
        w_go = axi.wvalid & axi.wready
        w_pop = w_q.pop
        m.d.comb += w_pop.eq(w_go & head.valid & (w_idx == head.beats - 1))
        with m.If(w_pop):
            m.d.sync += w_idx.eq(0)
        with m.Elif(w_go):
            m.d.sync += w_idx.eq(w_idx + 1)
        w_q.push(writes, c.addr, c.len, new_beats)

        # W beats: each strobe inside its command's bytes
        beat_addr = Signal(ADDR + 1)
        m.d.comb += beat_addr.eq(Cat(Const(0, 3), head.addr[3:]) + (w_idx << 3))
        m.d.comb += Assert(~axi.wvalid | head.valid, "a W beat with no command")
        for lane in range(BPB):
            byte = beat_addr + lane
            m.d.comb += Assert(~(axi.wvalid & axi.wstrb[lane])
                               | ((byte >= head.addr) & (byte < head.end)),
                               f"W strobe of lane {lane} outside the command's bytes")
        ends_burst = (beat_addr[3:11] == (BOUNDARY // BPB) - 1) | (w_idx == head.beats - 1)
        m.d.comb += Assert(~axi.wvalid | (axi.wlast == ends_burst),
                           "WLAST not on the last beat of a burst")

        # AW bursts: in the command's beats, contiguous, within a boundary. A
        # command's next burst starts where its last one taken ended, the first
        # at the command's first beat.
        aw_q = _CommandQueue(m, "aw", "AWs")
        aw = aw_q.head
        aw_taken = axi.awvalid & axi.awready
        aw_len_bytes = (axi.awlen + 1) << 3
        aw_end = Signal(ADDR + 2)
        m.d.comb += aw_end.eq(axi.awaddr + aw_len_bytes)
        last_beat_end = Cat(Const(0, 3), (aw.end + (BPB - 1))[3:])  # the command's end, aligned up
        aw_started = Signal()  # an AW of the head command was taken
        aw_last_end = Signal(ADDR)
        aw_next = Mux(aw_started, aw_last_end, Cat(Const(0, 3), aw.addr[3:]))
        m.d.comb += [
            Assert(~axi.awvalid | aw.valid, "an AW with no command"),
            Assert(~axi.awvalid | (axi.awaddr == aw_next), "an AW not where the previous ended"),
            Assert(~axi.awvalid | (aw_end <= last_beat_end), "an AW past the command's end"),
            Assert(~axi.awvalid | ((axi.awaddr[:11] + aw_len_bytes) <= BOUNDARY),
                   "an AW across the burst boundary"),
        ]
        m.d.comb += aw_q.pop.eq(aw_taken & (aw_end == last_beat_end))
        with m.If(aw_q.pop):
            m.d.sync += aw_started.eq(0)
        with m.Elif(aw_taken):
            m.d.sync += [aw_started.eq(1), aw_last_end.eq(aw_end)]
        aw_q.push(writes, c.addr, c.len, new_beats)

        crossed = Signal()
        with m.If(aw_taken & aw.valid & (axi.awaddr != Cat(Const(0, 3), aw.addr[3:]))):
            m.d.sync += crossed.eq(1)
        m.d.comb += [
            Cover(w_pop & crossed),  # a command split at the boundary, all written
            # a command's AW while the one before it has two W beats or more to go
            Cover(aw_taken & w_q.slots[1].valid & (head.beats - w_idx >= 2)),
            Cover(taken & c.inline & (c.len == CQE_BYTES)),
            Cover(w_pop & (head.beats == 6)),
            Cover(dut.data.valid & dut.data.ready & dut.data.payload.last & head.valid
                  & (w_idx == 0) & (head.beats > 2)),  # the stream ends early
        ]
        return m


PROOFS = [
    Proof("rx_dma_writer_bounds", harness(DmaWriterHarness), mode="bmc", depth=DEPTH,
          cover_depth=DEPTH,
          engine="smtbmc --syn yices", long=True,
          reduction=f"64-bit data, 32-bit addresses, commands of at most {MAX_LEN} bytes, "
                    f"two outstanding, the bytes' values 0; bounded at {DEPTH} cycles: one "
                    f"command from its take to its last W beat"),
]

"""Control and status registers: a simple CSR bus, the AXI4-Lite bridge onto
it, and register maps that describe each block's registers once, for the
decode logic, the host driver and docs/registers.md alike.

CSR bus (``CSRBusSignature``), drawn from the master's side:

    addr   Out(addr_width)  byte address, 32-bit aligned
    w_stb  Out(1)           one-cycle write strobe; ``w_data`` is written to ``addr``
    w_data Out(32)
    r_stb  Out(1)           one-cycle read strobe
    r_data In(32)           the slave presents the read value the cycle after ``r_stb``
                            (or later: each block documents its read latency)

A slave may give reads side effects (a read-to-clear counter, popping an event
queue) on ``r_stb``; it never stalls the bus.
"""

import operator
from collections import defaultdict
from dataclasses import dataclass, field
from functools import reduce

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .axi import AXI_RESP_OKAY, AXI_RESP_SLVERR, AXI4LiteSignature

__all__ = ["AXI4LiteToCSR", "CSRBusSignature", "Register", "RegisterMap", "RegisteredWrites",
           "block_decode", "grouped_read", "read_groups", "read_in_groups"]

# Words per group of ``grouped_read``: an 8:1 mux is one slice level (LUT4s,
# PFUMX and L6MUX21 on the ECP5) and its 11 inputs bound how deep synthesis
# can make it.
READ_GROUP_BITS = 3


def block_decode(addr, base: int, stride: int, count: int):
    """``(inside, index)`` for ``count`` blocks of ``stride`` bytes (a power of
    two) from ``base`` (a multiple of it): whether ``addr`` lies in one, and
    which (``max(1, ceil(log2(count)))`` bits, meaningful with ``inside``).

    When the blocks' span, rounded up to a power of two, is aligned in the
    address space (``base`` a multiple of it), ``inside`` is an equality of
    the high address bits (a LUT tree) and ``index`` the address bits
    between: no subtraction or magnitude compare of the address (a carry
    chain) lies in the decode. Otherwise the block number is compared and
    subtracted."""
    if stride <= 0 or stride & (stride - 1):
        raise ValueError(f"stride must be a power of two, not {stride!r}")
    if base % stride:
        raise ValueError(f"base {base:#x} must be a multiple of the stride {stride:#x}")
    if count < 1:
        raise ValueError(f"count must be at least 1, not {count!r}")
    shift = stride.bit_length() - 1
    ib = max(1, (count - 1).bit_length())
    slot = addr[shift:]
    first = base >> shift
    if first % (1 << ib) == 0 and len(slot) >= ib:
        index = slot[:ib]
        inside = slot[ib:] == first >> ib
        if count < 1 << ib:
            inside = inside & (index < count)
        return inside, index
    inside = (slot >= first) & (slot < first + count)
    return inside, (slot - first)[:ib]


def read_groups(words):
    """``words`` (byte offset, 32-bit aligned -> value) in groups of
    2**READ_GROUP_BITS consecutive words: (group number, {word in the group:
    value}) pairs, by group number. Raises ValueError on an unaligned offset."""
    groups = defaultdict(dict)
    for offset, value in words.items():
        if offset % 4:
            raise ValueError(f"register offset {offset:#x} is not 32-bit aligned")
        index = offset >> 2
        groups[index >> READ_GROUP_BITS][index % (1 << READ_GROUP_BITS)] = value
    return sorted(groups.items())


def grouped_read(m, addr, r_stb, words, *, name="rd", unaligned_zero=False):
    """The first of two registered read stages for flip-flop registers.

    ``words`` maps a byte offset (32-bit aligned) to the value that a read of
    it returns (a Value of up to 32 bits). At ``r_stb``, every group of
    2**READ_GROUP_BITS consecutive words registers its word mux on
    ``addr[2:5]``, or 0 if ``addr`` is not in the group. Returns the OR of
    those registers (combinational): the value of the word read, 0 for an
    offset ``words`` lacks, valid the cycle after ``r_stb`` until the next.
    The caller registers it (or a mux of it with its memories' read data)
    for a read latency of 2. The groups ignore ``addr``'s low two bits, so an
    unaligned address reads its word; with ``unaligned_zero`` it reads 0
    instead, through a flip-flop registered at ``r_stb`` beside the groups
    (one more LUT input after them, none before).

    Depth: about three LUT levels before the group registers (the group's
    address compare beside an 8:1 mux), an OR of as many terms as there are
    groups after them. A 40-word register file on the full address instead is
    a compare per word and a 40-way AND-OR in one cycle, which synthesis
    builds up to eight LUTs deep. Cost: 32 flip-flops per group.
    """
    group_values = []
    for group, entries in read_groups(words):
        word_value = Signal(32, name=f"{name}_word{group}")
        with m.Switch(addr[2 : 2 + READ_GROUP_BITS]):
            for word, value in entries.items():
                with m.Case(word):
                    m.d.comb += word_value.eq(value)
        group_value = Signal(32, name=f"{name}_group{group}")
        with m.If(r_stb):
            m.d.sync += group_value.eq(
                Mux(addr[2 + READ_GROUP_BITS :] == group, word_value, 0))
        group_values.append(group_value)
    value = reduce(operator.or_, group_values, Const(0, 32))
    if not unaligned_zero:
        return value
    aligned = Signal(name=f"{name}_aligned")
    with m.If(r_stb):
        m.d.sync += aligned.eq(addr[:2] == 0)
    return Mux(aligned, value, 0)


def read_in_groups(m, addr, r_stb, words, *, name="rd"):
    """The flip-flop registers' read mux in two registered steps, behind a
    register of the address: a read latency of 3 cycles.

    ``words`` maps a byte offset (32-bit aligned) to a Value of up to 32
    bits. At ``r_stb``, every group of 2**READ_GROUP_BITS consecutive words
    (as ``grouped_read``'s) registers whether the address is in it
    (``{name}_hit{g}``) and, if it is, the word in the group (``{name}_sel{g}``,
    else 0): a copy of the address of its own, distinct from the other
    groups' (so synthesis keeps it apart), placed with its group, so that
    the address does not fan out over every group's mux. The cycle after,
    each group registers its word (an 8:1 mux on its copy, or 0); the
    returned OR of the groups is the value of the word read (0 for an offset
    ``words`` lacks), the words as they were one cycle after ``r_stb``,
    valid two cycles after ``r_stb``; the caller registers it.
    """
    group_values = []
    for group, entries in read_groups(words):
        in_group = addr[2 + READ_GROUP_BITS :] == group
        hit = Signal(name=f"{name}_hit{group}")
        sel = Signal(READ_GROUP_BITS, name=f"{name}_sel{group}")
        with m.If(r_stb):
            m.d.sync += [hit.eq(in_group),
                         sel.eq(Mux(in_group, addr[2 : 2 + READ_GROUP_BITS], 0))]
        word_value = Signal(32, name=f"{name}_word{group}")
        with m.Switch(sel):
            for word, value in entries.items():
                with m.Case(word):
                    m.d.comb += word_value.eq(value)
        group_value = Signal(32, name=f"{name}_group{group}")
        m.d.sync += group_value.eq(Mux(hit, word_value, 0))
        group_values.append(group_value)
    return reduce(operator.or_, group_values, Const(0, 32))


class RegisteredWrites:
    """CSR writes decoded at ``w_stb`` and applied the cycle after from
    registers, with reads that see them at once.

    ``targets`` maps a key to ``(decode, readback)``: ``decode`` is a 1-bit
    Value of ``bus.addr``, true at the target's addresses; ``readback`` is an
    int mask of the bits of the written word that a read of the same address
    returns at the same positions once the write is applied (``(1 << n) - 1``
    for an n-bit register read back as written), or None when a read needs
    no bypass: it does not return the written bits (a command, a start
    strobe), or it takes the target's value only the cycle after ``r_stb``,
    when a write strobed the cycle before has landed. ``fields`` maps a key
    to a Value of ``bus.addr`` that the target's write needs (a QP index, say).

    At ``w_stb`` the helper registers ``data`` (``w_data``), ``fields[key]``
    and one strobe ``stb[key]`` per target (``w_stb`` and its decode); the
    caller applies the write in the next cycle under ``stb[key]``, a
    flip-flop, so no address compare is in series with the targets' clock or
    write enables (each a wide fan-out).

    Reads stay exact: a read strobed in the cycle after a write, while the
    write is still pending, would find the target's old value, so the read
    path takes the pending write's readback bits in its place when the read
    address is the write's. ``read_at_strobe(value)`` does this for a read
    stage that samples ``value`` at ``r_stb`` (a read latency of 1, one LUT
    in front of the read register); ``read_after_strobe(m, value)`` for a
    stage that samples ``value`` the cycle after ``r_stb`` (the second stage
    of ``grouped_read``, a read latency of 2): the address compare is
    registered at ``r_stb``, and a 2:1 mux per bit is all that lies in front
    of the second stage. The read latency and the bus protocol are unchanged.

    The bypass covers values the read path takes from flip-flops; a target
    read through a memory port addressed at ``r_stb`` needs its own (or
    ``None`` and a documented exception).

    Cost: 32 flip-flops for the data, one per target and per field bit; with
    a readback, ``len(addr)`` more, an address compare and 32 LUTs, and for
    ``read_after_strobe`` 64 more flip-flops (fewer: constant mask bits).
    """

    def __init__(self, m, bus, targets, *, fields=None, name="w"):
        self.data = Signal(32, name=f"{name}_data")
        self.addr = Signal(len(bus.addr), name=f"{name}_addr")
        self.stb = {key: Signal(name=f"{name}_stb_{key}") for key in targets}
        self.fields = {key: Signal.like(value, name=f"{name}_{key}")
                       for key, value in (fields or {}).items()}
        self._bus, self._name = bus, name
        # The data, address and fields load at every w_stb (one flip-flop
        # enable); they are used only in the cycle a strobe is high.
        with m.If(bus.w_stb):
            m.d.sync += [self.data.eq(bus.w_data), self.addr.eq(bus.addr),
                         *(reg.eq(fields[key]) for key, reg in self.fields.items())]
        m.d.sync += [stb.eq(bus.w_stb & targets[key][0]) for key, stb in self.stb.items()]
        # The readback mask of the pending write: per distinct mask, the OR of
        # the strobes of the targets that have it (few distinct masks).
        by_mask = defaultdict(list)
        for key, (_, readback) in targets.items():
            if readback:
                by_mask[readback].append(self.stb[key])
        self._pending = reduce(operator.or_, (s for ss in by_mask.values() for s in ss),
                               Const(0, 1))  # a write a read returns is pending
        self._mask = reduce(operator.or_, (
            Mux(reduce(operator.or_, ss), mask, 0) for mask, ss in by_mask.items()), Const(0, 32))

    def _select(self):
        """Per bit: the read at this cycle's ``r_stb`` takes the pending write's bit."""
        hit = self._pending & (self._bus.addr == self.addr)
        return Mux(hit, self._mask, 0)

    def read_at_strobe(self, value):
        """``value``, the read value sampled at ``r_stb``, with the pending
        write's readback bits in place when the read is of its address."""
        select = self._select()
        return (value & ~select) | (self.data & select)

    def read_after_strobe(self, m, value):
        """``value``, the read pipeline's value the cycle after ``r_stb``,
        with the readback bits of the write that was pending at ``r_stb`` in
        place when the read was of its address."""
        select = Signal(32, name=f"{self._name}_rd_select")
        data = Signal(32, name=f"{self._name}_rd_data")
        with m.If(self._bus.r_stb):
            m.d.sync += [select.eq(self._select()), data.eq(self.data)]
        return (value & ~select) | (data & select)


class CSRBusSignature(wiring.Signature):
    def __init__(self, addr_width: int = 16):
        self.addr_width = addr_width
        super().__init__(
            {
                "addr": Out(addr_width),
                "w_stb": Out(1),
                "w_data": Out(32),
                "r_stb": Out(1),
                "r_data": In(32),
            }
        )

    def __eq__(self, other):
        return isinstance(other, CSRBusSignature) and self.addr_width == other.addr_width

    def __repr__(self):
        return f"CSRBusSignature({self.addr_width})"


class AXI4LiteToCSR(wiring.Component):
    """AXI4-Lite slave onto the CSR bus.

    Interface: ``s_axil`` (AXI4-Lite slave, 32-bit data), ``csr`` (CSR bus master).
    A write needs its AW and W beats; once both are in, one ``w_stb`` cycle is
    issued and B answers OKAY. A write whose ``wstrb`` is not 0xF is not applied
    and answers SLVERR: every register is a whole 32-bit word. A read issues
    one ``r_stb`` and answers R with ``r_data`` of the cycle ``read_latency``
    cycles after it (1 for a slave on the bus itself, more behind a pipelined
    interconnect such as hw/nic/csr.py's ``CsrInterconnect``).

    ``addr``, ``w_data``, ``w_stb`` and ``r_stb`` come straight from flip-flops,
    so the slaves' decode starts at a register.

    Latency: write 2 cycles from the later of AW/W to B valid; read 1 +
    ``read_latency`` cycles from AR to R valid. Throughput: one write per 3
    cycles, one read per 3 + ``read_latency`` cycles.
    """

    def __init__(self, addr_width: int = 16, read_latency: int = 1):
        if not isinstance(read_latency, int) or read_latency < 1:
            raise ValueError(f"read_latency must be a whole number of cycles >= 1, "
                             f"not {read_latency!r}")
        self.read_latency = read_latency
        self.addr_width = addr_width
        super().__init__(
            {
                "s_axil": In(AXI4LiteSignature(addr_width, 32)),
                "csr": Out(CSRBusSignature(addr_width)),
            }
        )

    def elaborate(self, platform):
        m = Module()
        axil, csr = self.s_axil, self.csr
        addr = Signal(self.addr_width)
        wdata = Signal(32)
        full_word = Signal()
        w_stb = Signal()
        r_stb = Signal()
        wait = Signal(range(self.read_latency + 1))
        m.d.comb += [csr.addr.eq(addr), csr.w_data.eq(wdata), csr.w_stb.eq(w_stb),
                     csr.r_stb.eq(r_stb)]
        m.d.sync += [w_stb.eq(0), r_stb.eq(0)]

        with m.FSM():
            with m.State("IDLE"):
                with m.If(axil.awvalid & axil.wvalid):
                    m.d.comb += [axil.awready.eq(1), axil.wready.eq(1)]
                    m.d.sync += [
                        addr.eq(axil.awaddr & ~3),
                        wdata.eq(axil.wdata),
                        full_word.eq(axil.wstrb == 0xF),
                        w_stb.eq(axil.wstrb == 0xF),
                    ]
                    m.next = "WRITE"
                with m.Elif(axil.arvalid):
                    m.d.comb += axil.arready.eq(1)
                    m.d.sync += [addr.eq(axil.araddr & ~3), r_stb.eq(1)]
                    m.next = "READ"
            with m.State("WRITE"):
                # w_stb is high in this cycle.
                m.d.sync += axil.bresp.eq(Mux(full_word, AXI_RESP_OKAY, AXI_RESP_SLVERR))
                m.next = "WRITE_RESP"
            with m.State("WRITE_RESP"):
                m.d.comb += axil.bvalid.eq(1)
                with m.If(axil.bready):
                    m.next = "IDLE"
            with m.State("READ"):
                # r_stb is high in this cycle; the data comes read_latency later.
                m.d.sync += wait.eq(self.read_latency - 1)
                m.next = "READ_DATA"
            with m.State("READ_DATA"):
                with m.If(wait == 0):
                    m.d.sync += axil.rdata.eq(csr.r_data)
                    m.next = "READ_RESP"
                with m.Else():
                    m.d.sync += wait.eq(wait - 1)
            with m.State("READ_RESP"):
                m.d.comb += [axil.rvalid.eq(1), axil.rresp.eq(AXI_RESP_OKAY)]
                with m.If(axil.rready):
                    m.next = "IDLE"
        return m


@dataclass
class Register:
    """One 32-bit register, or an array of ``count`` of them ``stride`` apart."""

    name: str
    offset: int
    access: str  # "RO", "RW", "WO" (strobe), "RC" (read clears), "RP" (read pops)
    doc: str
    count: int = 1
    stride: int = 4
    fields: list[tuple[str, int, int, str]] = field(default_factory=list)  # (name, lsb, width, doc)

    def addr(self, index: int = 0) -> int:
        if not 0 <= index < self.count:
            raise IndexError(f"{self.name}[{index}] is out of range 0..{self.count - 1}")
        return self.offset + index * self.stride

    def pack(self, **values: int) -> int:
        """The word of these field values (the fields not named are 0); a value
        that its field cannot hold raises."""
        word = 0
        fields = {name: (lsb, width) for name, lsb, width, _ in self.fields}
        for name, value in values.items():
            if name not in fields:
                raise KeyError(f"{self.name} has no field {name!r}; its fields: "
                               f"{', '.join(fields)}")
            lsb, width = fields[name]
            if not 0 <= value < 1 << width:
                raise ValueError(f"{self.name}.{name} is {width} bits: {value} does not fit")
            word |= value << lsb
        return word


class RegisterMap:
    """The registers of one block, relative to the block's base address."""

    ACCESS = ("RO", "RW", "WO", "RC", "RP")

    def __init__(self, name: str, type_id: int, version: int, doc: str):
        self.name, self.type_id, self.version, self.doc = name, type_id, version, doc
        self.registers: list[Register] = []

    def add(self, name, offset, access, doc, *, count=1, stride=4, fields=()):
        if access not in self.ACCESS:
            raise ValueError(f"{self.name}.{name}: access {access!r} is not one of {self.ACCESS}")
        if offset % 4 or stride % 4:
            raise ValueError(f"{self.name}.{name}: registers are 32-bit words, 4-byte aligned")
        reg = Register(name, offset, access, doc, count, stride, list(fields))
        new = set(range(offset, offset + (count - 1) * stride + 4, 4)) if stride == 4 else {
            offset + i * stride for i in range(count)
        }
        for other in self.registers:
            old = {other.offset + i * other.stride for i in range(other.count)}
            if new & old:
                raise ValueError(f"{self.name}.{name} overlaps {other.name}")
        self.registers.append(reg)
        return reg

    def __getitem__(self, name) -> Register:
        for reg in self.registers:
            if reg.name == name:
                return reg
        raise KeyError(f"{self.name} has no register {name!r}")

    @property
    def size(self) -> int:
        return max((r.offset + (r.count - 1) * r.stride + 4 for r in self.registers), default=0)

    def markdown(self, base: int = 0) -> str:
        lines = [
            f"### {self.name} (type 0x{self.type_id:04x}, version {self.version})",
            "",
            self.doc,
            "",
            "| offset | name | access | description |",
            "|---|---|---|---|",
        ]
        for r in sorted(self.registers, key=lambda r: r.offset):
            where = f"0x{base + r.offset:04x}"
            if r.count > 1:
                where += f" + i x 0x{r.stride:x} (i < {r.count})"
            desc = r.doc
            for fname, lsb, width, fdoc in r.fields:
                bits = f"[{lsb + width - 1}:{lsb}]" if width > 1 else f"[{lsb}]"
                desc += f"<br>`{bits}` {fname}: {fdoc}"
            lines.append(f"| {where} | `{r.name}` | {r.access} | {desc} |")
        return "\n".join(lines) + "\n"

"""The NIC's CSR space: the device-info block and the interconnect that puts
every block's CSR bus behind one AXI4-Lite port as a chain of self-describing
register blocks.

Every block owns a window of ``2**block_bits`` bytes; window ``i`` starts at
``i << block_bits``. The first two words of every window are the uniform block
header that the host walks to discover the hardware (Corundum style):

    +0x0  header  [31:16] block type, [15:0] version
    +0x4  next    byte offset of the next block's header from the CSR base, 0 = last

``CsrInterconnect`` answers reads of those two words itself, from the
``RegisterMap`` of each block, so the header is uniform whatever each block's
own ID/NEXT registers hold; writes to them are dropped.
"""

from dataclasses import dataclass

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.csr import CSRBusSignature, RegisteredWrites, RegisterMap, grouped_read

__all__ = [
    "DEVICE_INFO_TYPE_ID",
    "DEVICE_INFO_VERSION",
    "NIC_VERSION",
    "BlockWindow",
    "CAPABILITIES",
    "CsrInterconnect",
    "CsrWrite",
    "DeviceInfo",
    "NIC_CAPABILITIES",
    "caps_names",
    "caps_word",
    "device_info_register_map",
    "header_word",
    "host_view",
]

DEVICE_INFO_TYPE_ID = 0x0001
DEVICE_INFO_VERSION = 1
# NIC gateware version, major << 16 | minor: bumped with any change a driver can see.
NIC_VERSION = 0x0001_0006

# The capabilities MRC's API names (mrc.h), by their bit in the device-info word
# ``caps``, and the ones this NIC has: TRIM_NACK (RX answers a trimmed packet with
# NAK TRIMMED, docs/rx.md) and SVC_TIME (RX's ACKs carry its service time, which
# reliability takes off its RTT samples, docs/protocol.md). DYNAMIC_MPR is not
# implemented.
CAPABILITIES = ("TRIM_NACK", "DYNAMIC_MPR", "SVC_TIME")
NIC_CAPABILITIES = ("TRIM_NACK", "SVC_TIME")


def caps_word(names) -> int:
    """The ``caps`` word with the bits of ``names`` (each one of ``CAPABILITIES``)."""
    unknown = set(names) - set(CAPABILITIES)
    if unknown:
        raise ValueError(f"unknown capabilities {sorted(unknown)}; known: {CAPABILITIES}")
    return sum(1 << CAPABILITIES.index(n) for n in names)


def caps_names(word: int) -> frozenset[str]:
    """The names of the bits set in a ``caps`` word (bits beyond the known: ignored)."""
    return frozenset(n for i, n in enumerate(CAPABILITIES) if word >> i & 1)


HEADER_OFFSET = 0x0
NEXT_OFFSET = 0x4


def header_word(regmap: RegisterMap) -> int:
    """The uniform header word of a block: type << 16 | version."""
    return (regmap.type_id & 0xFFFF) << 16 | (regmap.version & 0xFFFF)


def host_view(regmap: RegisterMap) -> RegisterMap:
    """``regmap`` as the host sees it behind ``CsrInterconnect``: its first two
    words are the uniform header and next pointer, whatever the block's own
    registers there hold; every other register is the block's own (the same
    ``Register`` objects)."""
    view = RegisterMap(regmap.name, regmap.type_id, regmap.version, regmap.doc)
    view.add("header", HEADER_OFFSET, "RO", "block header (answered by the interconnect)",
             fields=[("version", 0, 16, f"{regmap.version}"),
                     ("type", 16, 16, f"0x{regmap.type_id:04x} ({regmap.name})")])
    view.add("next", NEXT_OFFSET, "RO",
             "offset of the next block header from the CSR base, 0 = last "
             "(answered by the interconnect)")
    for reg in regmap.registers:
        if reg.offset not in (HEADER_OFFSET, NEXT_OFFSET):
            view.registers.append(reg)
    return view


@dataclass(frozen=True)
class BlockWindow:
    """One block of the CSR space: its register map and where it sits."""

    name: str
    base: int
    regmap: RegisterMap
    next_base: int  # 0 = last block
    # cycles from the block's r_stb to its r_data; 0: the interconnect's
    # block_read_latency. A block faster than that has its r_data delayed by
    # registers to it.
    read_latency: int = 0


# (register name, offset, doc) of the read-only parameter words of the device-info block.
DEVICE_INFO_PARAMS = (
    ("nic_version", 0x08, "NIC gateware version: [31:16] major, [15:0] minor"),
    ("build_id", 0x0C, "build identifier given at elaboration (e.g. a source revision)"),
    ("data_width", 0x10, "MAC stream and DMA data width, bits"),
    ("num_qps", 0x14, "queue pairs"),
    ("evs_per_qp", 0x18, "entropy values (paths) per QP"),
    ("sack_bits", 0x1C, "SACK bitmap width, bits"),
    ("max_mtu", 0x20, "largest MTU, bytes"),
    ("mpr_max", 0x24, "largest responder MPR window, PSNs"),
    ("num_mrs", 0x28, "memory regions in the RX MR table"),
    ("window", 0x2C, "PSNs the reliability block tracks per QP (cwnd ceiling)"),
    ("clk_freq_hz", 0x30, "core clock frequency, Hz"),
    ("block_size", 0x34, "bytes of CSR space per register block"),
    ("addr_width", 0x38, "host DMA address width, bits (32..64): the NIC reaches host memory "
                         "below 2^addr_width only, and its address registers keep that many "
                         "bits"),
    ("caps", 0x3C, "capabilities, one bit each: [0] TRIM_NACK, [1] DYNAMIC_MPR, [2] SVC_TIME "
                   "(MRC's names; 1 = implemented)"),
    ("num_planes", 0x44, "planes: MAC port pairs, each its own fabric (2..8); 0 for a NIC "
                         "with one plane, as the word read before it existed"),
)
SCRATCH_OFFSET = 0x40


def device_info_register_map() -> RegisterMap:
    rm = RegisterMap(
        "device_info",
        DEVICE_INFO_TYPE_ID,
        DEVICE_INFO_VERSION,
        "Device information: the first block of the CSR space (offset 0), where a "
        "driver starts walking the block chain. Build parameters, read only.",
    )
    rm.add("header", HEADER_OFFSET, "RO", "block header",
           fields=[("version", 0, 16, f"{DEVICE_INFO_VERSION}"),
                   ("type", 16, 16, f"0x{DEVICE_INFO_TYPE_ID:04x} (device info)")])
    rm.add("next", NEXT_OFFSET, "RO", "offset of the next block header from the CSR base, 0 = last")
    for name, offset, doc in DEVICE_INFO_PARAMS:
        rm.add(name, offset, "RO", doc)
    rm.add("scratch", SCRATCH_OFFSET, "RW",
           "scratch word: holds what is written, for bus and driver checks (reset 0)")
    return rm


class DeviceInfo(wiring.Component):
    """The device-info register block (``device_info_register_map``).

    ``params`` maps each name of ``DEVICE_INFO_PARAMS`` to its 32-bit value.
    Interface: ``csr`` (CSR bus slave). Reads answer ``read_latency`` (1 or 2)
    cycles after ``r_stb`` and hold until the next read; no read has a side
    effect. With 2 (NicCore's, the interconnect's ``block_read_latency``) the
    read mux is registered in two stages (``hw.csr.grouped_read``). A write
    to ``scratch`` is applied the cycle after ``w_stb`` (decoded, then
    applied from registers); a read strobed meanwhile returns the written
    word. The header words are answered by the interconnect, so this block
    reads 0 there.
    """

    def __init__(self, params: dict[str, int], addr_width: int = 16, read_latency: int = 1):
        if read_latency not in (1, 2):
            raise ValueError(f"read_latency must be 1 or 2 cycles, not {read_latency!r}")
        self.read_latency = read_latency
        missing = {name for name, _, _ in DEVICE_INFO_PARAMS} - set(params)
        if missing:
            raise ValueError(f"device info is missing parameters {sorted(missing)}")
        for name, value in params.items():
            if not isinstance(value, int) or not 0 <= value < 1 << 32:
                raise ValueError(f"device info {name} must fit 32 bits, not {value!r}")
        self.params = dict(params)
        self.register_map = device_info_register_map()
        super().__init__({"csr": In(CSRBusSignature(addr_width))})

    def elaborate(self, platform):
        m = Module()
        csr = self.csr
        scratch = Signal(32)
        # A write to SCRATCH is decoded at w_stb and applied the cycle after,
        # from registers (hw.csr.RegisteredWrites): the address compare does
        # not reach the 32 enables (docs/timing.md#nic-core-glue). A read
        # strobed in between returns the written word. A read of SCRATCH at
        # r_stb takes the value SCRATCH has once a pending write lands (a 2:1
        # mux on the strobe, a flip-flop), so it needs no compare of its
        # address with the write's (no readback through the helper).
        w = RegisteredWrites(m, csr, {"scratch": (csr.addr == SCRATCH_OFFSET, None)})
        with m.If(w.stb["scratch"]):
            m.d.sync += scratch.eq(w.data)
        scratch_next = Mux(w.stb["scratch"], w.data, scratch)
        # a parameter that is 0 is left out of the read mux: a word not in it reads 0
        words = {offset: self.params[name] for name, offset, _ in DEVICE_INFO_PARAMS
                 if self.params[name]}
        words[SCRATCH_OFFSET] = scratch_next
        read = Signal(32)
        aligned = csr.addr[:2] == 0
        if self.read_latency == 2:
            # a read of an unaligned address answers 0
            m.d.sync += read.eq(grouped_read(m, csr.addr, csr.r_stb, words, name="read",
                                             unaligned_zero=True))
        else:
            # A table indexed by the few word-address bits the registers span,
            # gated by a check that the other address bits are 0, both in
            # parallel: fewer LUT levels than a compare of the whole address
            # per register.
            index_bits = (max(words) >> 2).bit_length()
            value = Signal(32)
            with m.Switch(csr.addr[2 : 2 + index_bits]):
                for offset, word_value in words.items():
                    with m.Case(offset >> 2):
                        m.d.comb += value.eq(word_value)
            in_table = aligned & (csr.addr[2 + index_bits :] == 0)
            with m.If(csr.r_stb):
                m.d.sync += read.eq(Mux(in_table, value, 0))
        m.d.comb += csr.r_data.eq(read)
        return m


# An internal CSR write, issued by the NIC itself onto one block's bus.
CsrWrite = data.StructLayout({"block": 4, "addr": 32, "data": 32})


class CsrInterconnect(wiring.Component):
    """One CSR bus master onto ``len(windows)`` block buses, with the headers.

    Parameters: ``windows`` (``BlockWindow`` per block, window ``i`` at
    ``i << block_bits``), ``block_bits``.

    Interface
    ---------
    ``csr``        In(CSRBusSignature(addr_width)): from the AXI4-Lite bridge.
    ``b{i}``       Out(CSRBusSignature(block_bits)): block ``i``'s bus, the
                   address relative to its window.
    ``inject``     In(stream.Signature(CsrWrite)): writes the NIC makes on its
                   own (block index, address in the block, data). One is taken
                   in a cycle when the host bus has no strobe and had no read
                   strobe in the cycle before, so the host's accesses never see
                   it; the host bridge strobes at most one cycle in three, so an
                   injected write waits at most two cycles.

    Reads of a window's words 0 and 1 are answered with the uniform header
    and next pointer and are not passed on; writes to them are dropped. A
    read outside every window answers 0.

    Pipelined for timing: every block bus (``addr``, ``w_data``, ``w_stb``,
    ``r_stb``) comes from flip-flops loaded two cycles after the upstream
    strobe, and the read data is registered on its way back, so neither the
    address decode nor the read mux is in series with a block's own logic.
    The first stage decodes the access's block into one flip-flop per block,
    which is the clock enable of that block's address and data registers (a
    wide fan-out placed next to the block); the address and data pass that
    stage in one shared register.
    ``block_read_latency`` (1 to 3): cycles from a block's ``r_stb`` to its
    ``r_data``; 2 lets blocks register their read mux, 3 lets them take it in
    two registered steps. A window whose ``read_latency`` is less answers
    through as many registers more (so every block answers alike). A block of latency 1
    must hold ``r_data`` while its ``addr`` holds, which the interconnect
    keeps still until the data is taken (no injected write in between). A
    block's ``addr`` and ``w_data`` change only on an access to that block
    (a strobe to it, or a read or write of its header words, which passes
    no strobe) and, for the block ``inject.block`` names, in the cycles free
    for an injected write (they load its payload whether or not it is
    valid), so each block has registers of its own.

    Latency: writes reach a block 2 cycles after ``csr.w_stb``; ``csr.r_data``
    is valid ``read_latency`` = 3 + ``block_read_latency`` cycles after
    ``csr.r_stb``: give the AXI4-Lite bridge that ``read_latency``.
    Throughput: one write per cycle; one read per ``read_latency`` cycles
    (the bridge issues at most one per ``read_latency`` + 3).
    """

    def __init__(self, windows: list[BlockWindow], block_bits: int, block_read_latency: int = 1):
        if block_read_latency not in (1, 2, 3):
            raise ValueError(f"block_read_latency must be 1, 2 or 3 cycles, not "
                             f"{block_read_latency!r}")
        self.block_read_latency = block_read_latency
        self.read_latency = 3 + block_read_latency
        if not windows:
            raise ValueError("the CSR interconnect needs at least one block")
        for i, w in enumerate(windows):
            if w.base != i << block_bits:
                raise ValueError(f"block {w.name} must sit at 0x{i << block_bits:x}, "
                                 f"not 0x{w.base:x}")
            if w.regmap.size > 1 << block_bits:
                raise ValueError(f"block {w.name} needs 0x{w.regmap.size:x} bytes, more than "
                                 f"its 0x{1 << block_bits:x}-byte window")
            if not 0 <= w.read_latency <= block_read_latency:
                raise ValueError(f"block {w.name}'s read_latency must be 1..{block_read_latency} "
                                 f"cycles (the interconnect's block_read_latency) or 0 for "
                                 f"that, not {w.read_latency!r}")
        self.windows = list(windows)
        self.block_bits = block_bits
        self.index_bits = max(1, (len(windows) - 1).bit_length())
        self.addr_width = block_bits + self.index_bits
        members = {"csr": In(CSRBusSignature(self.addr_width)),
                   "inject": In(stream.Signature(CsrWrite))}
        for i in range(len(windows)):
            members[f"b{i}"] = Out(CSRBusSignature(block_bits))
        super().__init__(members)

    def bus(self, i):
        return getattr(self, f"b{i}")

    def elaborate(self, platform):
        m = Module()
        up, bb = self.csr, self.block_bits
        n = len(self.windows)
        index = up.addr[bb:]
        offset = up.addr[:bb]
        is_header = offset[2:] == HEADER_OFFSET >> 2
        is_next = offset[2:] == NEXT_OFFSET >> 2
        intercepted = is_header | is_next

        # Internal writes slip into cycles the host leaves free: no strobe
        # now, and no read strobe in the cycles before whose data is not yet
        # taken (an injected write moves the block's addr two cycles later, as
        # the host's access does: their order is kept).
        hold = 1 + self.block_read_latency
        read_before = Signal(hold)
        m.d.sync += read_before.eq(Cat(up.r_stb, read_before[:-1]))
        free = ~up.r_stb & ~up.w_stb & ~read_before.any()
        inj = self.inject.payload
        m.d.comb += self.inject.ready.eq(free)

        # The first registered stage: the access's address and data in one
        # register (the host's when it strobes, else the injected write's), and
        # its block decoded into flip-flops, one per block: load[i] says that
        # block i's registers take the access, w_stb[i] and r_stb[i] are its
        # strobes. A header or next-pointer access loads a block's registers
        # too, without a strobe: the header compare stays out of load. The
        # injected write's block loads the write's address and data in every
        # free cycle, its strobe being the write's valid: load does not wait
        # on ``inject.valid`` (the injecting block's handshake logic). A free
        # cycle has no read in flight, so a latency-1 block's read data is
        # taken already.
        host = up.w_stb | up.r_stb
        a_addr = Signal(bb)
        a_data = Signal(32)
        a_load = Signal(n)
        a_w_stb = Signal(n)
        a_r_stb = Signal(n)
        m.d.sync += [a_addr.eq(Mux(host, offset, inj.addr[:bb])),
                     a_data.eq(Mux(host, up.w_data, inj.data))]
        for i in range(n):
            to_block = index == i
            to_inject = free & (inj.block == i)
            m.d.sync += [
                a_load[i].eq(host & to_block | to_inject),
                a_w_stb[i].eq(up.w_stb & to_block & ~intercepted
                              | to_inject & self.inject.valid),
                a_r_stb[i].eq(up.r_stb & to_block & ~intercepted),
            ]

        for i in range(n):
            bus = self.bus(i)
            # The second registered stage, the block's bus: its address and
            # data registers load only for an access to that block (load[i], a
            # flip-flop), so each block has its own, placed next to it, not
            # one register fanning out across the chip: registers loaded
            # alike would be merged into one by synthesis.
            m.d.sync += [bus.w_stb.eq(a_w_stb[i]), bus.r_stb.eq(a_r_stb[i])]
            with m.If(a_load[i]):
                m.d.sync += [bus.addr.eq(a_addr), bus.w_data.eq(a_data)]

        # Read data: chosen by what the address was at r_stb, registered on
        # the way back (valid read_latency cycles after r_stb; r_index holds
        # until the next r_stb, read_latency + 3 cycles later at the soonest).
        r_index = Signal(self.index_bits)
        r_const = Signal()
        r_const_value = Signal(32)
        header = Signal(32)
        next_ptr = Signal(32)
        with m.Switch(index):
            for i, w in enumerate(self.windows):
                with m.Case(i):
                    m.d.comb += [header.eq(header_word(w.regmap)), next_ptr.eq(w.next_base)]
        in_range = index < n
        with m.If(up.r_stb):
            m.d.sync += [
                r_index.eq(index),
                r_const.eq(intercepted | ~in_range),
                r_const_value.eq(Mux(in_range, Mux(is_header, header, next_ptr), 0)),
            ]
        block_data = Signal(32)
        with m.Switch(r_index):
            for i, w in enumerate(self.windows):
                # a faster block's data through registers up to block_read_latency
                data = self.bus(i).r_data
                for k in range(self.block_read_latency - (w.read_latency or
                                                          self.block_read_latency)):
                    delayed = Signal(32, name=f"b{i}_r_delay{k}")
                    m.d.sync += delayed.eq(data)
                    data = delayed
                with m.Case(i):
                    m.d.comb += block_data.eq(data)
        r_data = Signal(32)
        m.d.sync += r_data.eq(Mux(r_const, r_const_value, block_data))
        m.d.comb += up.r_data.eq(r_data)
        return m

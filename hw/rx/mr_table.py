"""RX's memory-region table in RAM (``MrTable``), the rule by which an
R_Key names its entry, and the entry's layout (``MrEntry``)."""

from amaranth.hdl import Cat, Const, Module, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

__all__ = ["MrEntry", "MrTable", "MrLookupSignature", "MrWriteSignature", "MR_WORDS",
           "MR_ACCESS_VALID", "MR_ACCESS_WRITE", "RKEY_INDEX_SHIFT", "RKEY_INDEX_BITS",
           "rkey_index", "make_rkey"]

MR_ACCESS_VALID = 1 << 0
MR_ACCESS_WRITE = 1 << 1

# An R_Key names its table entry: bits 23:8 are the entry's index. The other
# bits are the host's (the driver puts a generation in 31:24 and 0x4D in
# 7:0); a region matches only if its whole R_Key is the packet's.
RKEY_INDEX_SHIFT, RKEY_INDEX_BITS = 8, 16

# The words of an MR block, in register order (MR_BASE_LO .. MR_ACCESS).
MR_WORDS = ("base_lo", "base_hi", "length", "rkey", "access")


def rkey_index(rkey: int) -> int:
    """The entry an R_Key names."""
    return (rkey >> RKEY_INDEX_SHIFT) & ((1 << RKEY_INDEX_BITS) - 1)


def make_rkey(index: int, tag: int = 0x4D, generation: int = 0) -> int:
    """An R_Key for entry ``index``: ``generation`` in bits 31:24, ``tag``
    in 7:0 (the driver's choice; the NIC compares them, never interprets)."""
    if not 0 <= index < 1 << RKEY_INDEX_BITS:
        raise ValueError(f"an MR index is {RKEY_INDEX_BITS} bits, not {index}")
    return (generation & 0xFF) << 24 | index << RKEY_INDEX_SHIFT | (tag & 0xFF)


class MrEntry(data.StructLayout):
    """One memory region as registered by the host; ``base`` is an
    ``addr_width``-bit DMA address."""

    def __init__(self, addr_width=64):
        super().__init__(
            {
                "base": unsigned(addr_width),
                "length": unsigned(32),
                "rkey": unsigned(32),
                "access": unsigned(8),
                "pd": unsigned(8),
            }
        )


def MrLookupSignature(addr_width=64):
    """A lookup, as its requester sees it: ``rkey`` Out; ``entry`` and
    ``hit`` In, for the R_Key of the cycle before."""
    return wiring.Signature({
        "rkey": Out(32),
        "entry": In(MrEntry(addr_width)),
        "hit": In(1),
    })


def MrWriteSignature(num_mrs):
    """A CSR write of one word of an MR block, as registered strobes (Out
    from the register decode), applied the cycle they are present: ``en``,
    ``index`` the entry, ``word`` its index in ``MR_WORDS``, ``data``."""
    return wiring.Signature({
        "en": Out(1),
        "index": Out(max(1, ceil_log2(num_mrs))),
        "word": Out(3),
        "data": Out(32),
    })


class MrTable(wiring.Component):
    """``num_mrs`` memory regions, found by R_Key.

    Interface: ``w`` (``MrWriteSignature``): a CSR write. ``lookup``
    (``MrLookupSignature``, flipped): the entry the R_Key of the cycle before
    names (``rkey_index``) and ``hit``: that index is below ``num_mrs``, the
    entry is VALID and REMOTE_WRITE, and its whole R_Key is the one given.
    ``r_index``, ``r_word`` -> ``r_data``: for CSR reads, the word of the
    cycle before's entry and word, as written (MR_BASE_HI's bits from
    ``addr_width`` on and MR_ACCESS's above 15 are not kept and read 0).

    Storage: each word of every entry in a RAM of its own, of the bits it
    keeps (two synchronous read ports each: LUT RAM or block RAM as
    synthesis maps it, LUT RAM at 16 entries). MR_ACCESS's VALID bit is a
    flip-flop per entry, 0 after reset: reset leaves every region invalid
    though the RAMs keep their rows.

    Latency: a write lands at the end of its cycle; a lookup or read gives
    the table as it was at the end of the cycle before (a write of that
    cycle not included). Throughput: a write, a lookup and a read per cycle.
    """

    def __init__(self, *, num_mrs, addr_width=64):
        if not 1 <= num_mrs <= 1 << RKEY_INDEX_BITS:
            raise ValueError(f"num_mrs must be in 1..{1 << RKEY_INDEX_BITS}, not {num_mrs!r}")
        self.num_mrs, self.addr_width = num_mrs, addr_width
        self.index_bits = max(1, ceil_log2(num_mrs))
        super().__init__({
            "w": In(MrWriteSignature(num_mrs)),
            "lookup": In(MrLookupSignature(addr_width)),
            "r_index": In(self.index_bits),
            "r_word": In(3),
            "r_data": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        n, aw, ib = self.num_mrs, self.addr_width, self.index_bits
        w = self.w
        # Each word in a RAM of its own, of the bits it keeps: MR_BASE_HI's
        # below addr_width, MR_ACCESS's 15..1 (VALID is the flip-flop below).
        kept = {"base_lo": (0, 32), "base_hi": (0, aw - 32), "length": (0, 32),
                "rkey": (0, 32), "access": (1, 16)}
        # The lookup reads the rows at the R_Key's index bits, the CSR reads
        # at r_index; a word that keeps no bit (MR_BASE_HI at 32-bit
        # addresses) reads 0.
        rkey = self.lookup.rkey
        index = rkey[RKEY_INDEX_SHIFT : RKEY_INDEX_SHIFT + RKEY_INDEX_BITS]
        word, csr = {}, {}
        for k, name in enumerate(MR_WORDS):
            lo, hi = kept[name]
            if hi == lo:
                word[name] = csr[name] = Const(0, 1)
                continue
            m.submodules[f"mr_{name}"] = mem = Memory(shape=hi - lo, depth=n, init=[])
            wr, look_port, csr_port = mem.write_port(), mem.read_port(), mem.read_port()
            m.d.comb += [wr.addr.eq(w.index), wr.en.eq(w.en & (w.word == k)),
                         wr.data.eq(w.data[lo:hi]),
                         look_port.addr.eq(index[:ib]), csr_port.addr.eq(self.r_index)]
            word[name], csr[name] = look_port.data, csr_port.data
        valid = Signal(n)
        with m.If(w.en & (w.word == MR_WORDS.index("access"))):
            m.d.sync += valid.bit_select(w.index, 1).eq(w.data[0])

        # The key and the index's range and VALID bit registered beside the
        # RAMs' read.
        key_r = Signal(32)
        listed = Signal()  # index < num_mrs, and VALID
        m.d.sync += [key_r.eq(rkey),
                     listed.eq((index < n) & valid.bit_select(index[:ib], 1))]
        e = self.lookup.entry
        m.d.comb += [
            e.base.eq(Cat(word["base_lo"], word["base_hi"])[:aw]),
            e.length.eq(word["length"]),
            e.rkey.eq(word["rkey"]),
            e.access.eq(Cat(listed, word["access"][:7])),
            e.pd.eq(word["access"][7:15]),
            self.lookup.hit.eq(listed & word["access"][0] & (word["rkey"] == key_r)),
        ]

        # CSR reads: the word of the rows read, VALID from its flip-flop
        r_word, r_valid = Signal(3), Signal()
        m.d.sync += [r_word.eq(self.r_word), r_valid.eq(valid.bit_select(self.r_index, 1))]
        with m.Switch(r_word):
            for k, name in enumerate(MR_WORDS):
                with m.Case(k):
                    value = Cat(r_valid, csr[name]) if name == "access" else csr[name]
                    m.d.comb += self.r_data.eq(value)
        return m

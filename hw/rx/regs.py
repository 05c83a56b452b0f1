"""The receive engine's registers: QP table, MR table, addresses, counters."""

import operator
from functools import reduce

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from hw.bits import greater_than_const
from hw.counters import CounterBank
from hw.csr import (
    CSRBusSignature,
    RegisteredWrites,
    RegisterMap,
    block_decode,
    read_in_groups,
)
from hw.protocol import PSN_BITS, TRIM_DSCP_DEFAULT

from .layouts import QpConfig
from .mr_table import MR_WORDS, MrLookupSignature, MrTable
from .parser import COUNTER_NAMES as PARSER_COUNTERS
from .peer_filter import PEER_FILTER_COUNTERS
from .validate import VALIDATOR_COUNTERS
from .window import WINDOW_COUNTERS

__all__ = ["COUNTERS", "COUNTER_LAG", "MAX_MRS", "PEER_ADDRESS_REGS", "RX_TYPE_ID",
           "RX_VERSION", "RxRegisters", "mr_base", "rx_register_map"]

# A QP's peer address in this block's registers, as the driver writes it and the
# model NIC reads it: (bits 31..0, bits 32i+31..32i for i = 1..3 as a format,
# the family), the last two in ipv6 builds only.
PEER_ADDRESS_REGS = ("QP_PEER_IP", "QP_PEER_IP6_{}", "QP_PEER_V6")

RX_TYPE_ID = 0x0003
RX_VERSION = 2
COUNTERS = (tuple(f"parser_{n}" for n in PARSER_COUNTERS) + VALIDATOR_COUNTERS + WINDOW_COUNTERS
            + PEER_FILTER_COUNTERS)
_COUNTER_DOC = {
    "peer_frames": "ACK/NAK/probe-response frames passed to `peer_ack`",
    "probe_requests": "probe requests from a bound peer (answered)",
    "bad_qpn": "dropped: BTH DestQP >= number of QPs",
    "not_for_us": "dropped: IPv4 destination is not `OWN_IP`",
    "qp_state": "dropped: QP not in RTR or RTS",
    "bad_source": "dropped: IPv4 source is not the QP's `PEER_IP`",
    "bad_rkey": "NAK 0x62: no valid writable region with this R_Key",
    "bad_bounds": "NAK 0x62: the packet's bytes, or its message's that its RETH declares, "
                  "not inside the region",
    "bad_length": "NAK 0x61: payload above the path MTU, or a FIRST/MIDDLE payload other "
                  "than the MTU",
    "bad_reth": "NAK 0x61: RETH DMA length inconsistent with the opcode and payload",
    "bad_pd": "NAK 0x62: the region's protection domain is not the QP's",
    "placed": "data packets written and marked received",
    "duplicate": "dropped and acknowledged: PSN already received or in flight",
    "out_of_window": "dropped: PSN beyond the QP's window",
    "wimm_full": "dropped: LAST packet with the pending-completion table full",
    "dma_error": "dropped after a write answered other than OKAY",
    "trimmed": "trimmed packets of a PSN still awaited (NAK 0x70 sent if TRIM_NACK)",
    "trim_stale": "trimmed packets dropped: PSN already received, in flight or outside "
                  "the window (no NAK)",
    "cqe_written": "receive completions written",
    "cq_overflow": "receive completions lost: the host took back a held CQE's slot "
                   "(ring disabled or shrunk, or QP_CQ_CONS moved past it)",
    "acks_sent": "ACK frames sent",
    "naks_sent": "NAK frames sent",
    "probes_answered": "probe responses sent",
    "cq_full": "dropped, not acknowledged: WITH_IMMEDIATE LAST packet with no free slot in "
               "its QP's receive CQ (or the ring disabled)",
    "peer_bad_qpn": "peer frame dropped: BTH DestQP >= number of QPs",
    "peer_not_for_us": "peer frame dropped: IPv4 destination is not `OWN_IP`",
    "peer_bad_mac": "peer frame dropped: Ethernet destination is not `OWN_MAC`",
    "peer_qp_state": "peer frame dropped: QP not in RTS",
    "peer_bad_source": "peer frame dropped: IPv4 source is not the QP's `PEER_IP`",
    "peer_bad_sack": "ACK/NAK dropped: SACK `sack_base` is not `cum_psn + 1`",
}

QP_BASE = 0x1000
QP_STRIDE = 0x40
MR_BASE = 0x400
MR_STRIDE = 0x20
# Up to LOW_MRS regions, the MR blocks lie from MR_BASE to the QP blocks; more
# follow the QP blocks (``mr_base``). PARAMS.mrs counts them in MRS_BITS.
LOW_MRS = (QP_BASE - MR_BASE) // MR_STRIDE
MRS_BITS = 12
MAX_MRS = (1 << MRS_BITS) - 1
COUNTER_BASE = 0x100
# The counters lie in one aligned slot of 2**COUNTER_SLOT_BITS bytes at
# COUNTER_BASE, which holds no other register.
COUNTER_SLOT_BITS = 8
assert 4 * len(COUNTERS) <= 1 << COUNTER_SLOT_BITS
# A counter read includes every event strobed at least this many cycles
# before its r_stb (the bank is addressed at r_stb).
COUNTER_LAG = CounterBank.lag(len(COUNTERS))

# Per-QP registers: (name, offset in the QP block, doc, fields)
_QP_REGS = (
    ("QP_CTRL", 0x00, "QP attributes", [
        ("state", 0, 3, "0 RESET, 1 INIT, 2 RTR, 3 RTS, 4 ERROR; data is accepted in RTR and RTS"),
        ("trim_nack", 3, 1, "TRIM_NACK capability: NAK 0x70 for a trimmed packet"),
        ("mtu", 4, 3, "path MTU: 1 256, 2 512, 3 1024, 4 2048, 5 4096 bytes; any other value "
                      "takes no data (NAK 0x61)"),
        ("mpr", 8, 8, "responder MPR, units of 128 PSNs; 0 or above mpr_max means mpr_max"),
        ("pd", 16, 8, "protection domain: only regions of this PD take its writes"),
    ]),
    ("QP_ACK", 0x04, "ACK coalescing", [
        ("n", 0, 8, "ACK after this many placed packets (0 means 1)"),
        ("t", 16, 16, "or this many cycles after the first unacknowledged one"),
    ]),
    ("QP_PEER_IP", 0x08, "IPv4 address of the bound peer; only it may write to this QP", []),
    ("QP_PEER_QPN", 0x0C, "the peer's QPN: DestQP of the ACKs and probe responses", []),
    ("QP_EPSN", 0x10, "write: initialise the expected PSN (cum_psn + 1), clear the "
                      "receive bitmap, MSN, completion producer index and ACK state; "
                      "read: the value last written", []),
    ("QP_CQ_BASE_LO", 0x14, "receive completion ring base, bits 31:0 (32-byte aligned)", []),
    ("QP_CQ_BASE_HI", 0x18, "receive completion ring base, bits 63:32; bits at and above "
                            "the device's `addr_width` are not kept and read 0", []),
    ("QP_CQ_CTRL", 0x1C, "receive completion ring", [
        ("log2_entries", 0, 5, "ring size 2^n CQEs of 32 bytes, n <= 15"),
        ("enable", 31, 1, "write CQEs (else WITH_IMMEDIATE messages are held back: "
                             "cq_full)"),
    ]),
    ("QP_CQ_CONS", 0x20, "consumer index the host has read up to (16 bits, free-running; "
                         "write 0 with `QP_EPSN`, which restarts the producer at 0)", []),
)
# With ``ipv6`` (a build parameter): the peer's IPv6 address above QP_PEER_IP's
# 32 bits, and its family.
_QP_REGS_IP6 = (
    *((f"QP_PEER_IP6_{i}", 0x20 + 4 * i,
       f"(ipv6 builds) the bound peer's IPv6 address, bits {32 * i + 31}:{32 * i}", [])
      for i in (1, 2, 3)),
    ("QP_PEER_V6", 0x30, "(ipv6 builds) the bound peer's family", [
        ("v6", 0, 1, "1: the peer is the IPv6 address QP_PEER_IP6_3..1 and QP_PEER_IP; "
                     "frames from it over IPv4 are dropped, and the other way round"),
    ]),
)
OWN_IP6 = 0x20  # with ipv6: 4 words, the lowest address bits first


def qp_regs(ipv6=False):
    """The per-QP registers of a build with or without ``ipv6``."""
    return _QP_REGS + (_QP_REGS_IP6 if ipv6 else ())


def mr_base(num_qps: int, num_mrs: int) -> int:
    """The first MR block's offset: MR_BASE for up to LOW_MRS regions (96),
    else the end of the QP blocks."""
    return MR_BASE if num_mrs <= LOW_MRS else QP_BASE + num_qps * QP_STRIDE


def rx_register_map(num_qps=16, num_mrs=16, next_offset=0, ipv6=False) -> RegisterMap:
    rmap = RegisterMap(
        "rx",
        RX_TYPE_ID,
        RX_VERSION,
        "Receive engine (hw/rx): addresses, memory regions, queue pairs, counters.",
    )
    rmap.add("ID", 0x00, "RO", "block identity", fields=[
        ("version", 0, 16, f"{RX_VERSION}"), ("type", 16, 16, f"0x{RX_TYPE_ID:04x}")])
    rmap.add("NEXT", 0x04, "RO", f"offset of the next register block, 0 if last ({next_offset:#x})")
    rmap.add("PARAMS", 0x08, "RO", "build parameters", fields=[
        ("log2_qps", 0, 4, "log2 of the number of QPs"),
        ("mrs", 4, MRS_BITS, "number of MR table entries"),
        ("sack_words", 16, 8, "SACK bitmap width / 32"),
        ("mpr_max", 24, 8, "largest window, units of 128 PSNs"),
    ])
    rmap.add("OWN_MAC_LO", 0x0C, "RW", "own MAC address bits 31:0 (source of ACKs)")
    rmap.add("OWN_MAC_HI", 0x10, "RW", "own MAC address bits 47:32")
    rmap.add("OWN_IP", 0x14, "RW", "own IPv4 address: frames to any other are dropped")
    rmap.add("TRIM_DSCP", 0x18, "RW",
             f"DSCP that marks a trimmed frame (reset 0x{TRIM_DSCP_DEFAULT:02X})")
    if ipv6:
        rmap.add("OWN_IP6", OWN_IP6, "RW", "(ipv6 builds) own IPv6 address, word i its bits "
                 "32i+31:32i: frames over IPv6 to any other are dropped", count=4, stride=4)
    for i, name in enumerate(COUNTERS):
        doc = _COUNTER_DOC.get(name, f"parser verdict `{name[7:]}` (frames)")
        rmap.add(f"CNT_{name.upper()}", COUNTER_BASE + 4 * i, "RO", f"count: {doc}")
    mr_regs = (
        ("MR_BASE_LO", 0x00, "region base address bits 31:0"),
        ("MR_BASE_HI", 0x04, "region base address bits 63:32; bits at and above the device's "
                             "`addr_width` are not kept and read 0"),
        ("MR_LENGTH", 0x08, "region length in bytes"),
        ("MR_RKEY", 0x0C, "R_Key of the region: a frame's R_Key finds the entry its bits 23:8 "
                          "name, which must hold that whole R_Key"),
        ("MR_ACCESS", 0x10, "access rights and protection domain"),
    )
    mr_fields = {"MR_ACCESS": [
        ("valid", 0, 1, "VALID (a flip-flop: 0 after reset)"),
        ("remote_write", 1, 1, "REMOTE_WRITE; both are needed to write"),
        ("pd", 8, 8, "protection domain: only QPs of this PD write here"),
    ]}
    for name, off, doc in mr_regs:
        rmap.add(name, mr_base(num_qps, num_mrs) + off, "RW", doc, count=num_mrs,
                 stride=MR_STRIDE, fields=mr_fields.get(name, ()))
    for name, off, doc, fields in qp_regs(ipv6):
        rmap.add(name, QP_BASE + off, "RW", doc, count=num_qps, stride=QP_STRIDE, fields=fields)
    return rmap


class RxRegisters(wiring.Component):
    """Register block of the receive engine (``rx_register_map``).

    Interface
    ---------
    ``csr``         In(CSRBusSignature): the host side; a read answers
                    ``CSR_READ_LATENCY`` (3) cycles after ``r_stb`` (the
                    address registered, then the read mux in two registered
                    steps; a bridge in front takes ``read_latency=3``).
    ``lookup_a`` / ``lookup_b``: two QP configuration lookups, ``addr`` In,
                    ``cfg`` Out one cycle later.
    ``lookup_c``    a third, for the peer-frame filter: only ``cfg.state`` and
                    ``cfg.peer_ip`` are read (the other fields are 0).
    ``init``        Out(stream): (qp, epsn) on every write to ``QP_EPSN``.
    ``init_busy``   Out (a flip-flop): a ``QP_EPSN`` write is not yet
                    delivered (high from the cycle after the write until the
                    cycle after its delivery; also for the cycle after any
                    other write, whose address is decoded only then); the
                    window engine checks no frame meanwhile, so a write takes
                    effect before every frame checked after it.
    ``mr_lookup``   the MR table's lookup (``MrTable``, hw/rx/mr_table.py): the
                    region the R_Key of the cycle before names, and whether
                    it takes a write.
    ``own_mac``, ``own_ip``, ``trim_dscp``: Out.
    ``events``      In: one-cycle strobes of the validator, window and peer
                    filter counters (wrapping).
    ``parser_events`` In: one-cycle strobes of the parser's verdict counters
                    (saturating).

    The per-QP registers live in one memory each (``num_qps`` x 32 bits) read
    by the two lookups (``QP_EPSN`` also by ``init``), and in one more memory
    of every QP block (``num_qps`` x 16 words, one read port) that answers the
    CSR reads; the MR table is an ``MrTable`` (a RAM per word, read by
    the lookup and by the CSR reads; its VALID bits flip-flops, 0 after
    reset). The counters (``COUNTERS``, 32 bits, read-only, 0 after
    configuration and after reset) are one
    ``hw.counters.CounterBank`` (a block RAM, addressed at ``r_stb``): each
    strobe counts exactly once, and a read includes every event strobed at
    least ``COUNTER_LAG`` (the bank's ``LAG``) cycles before its ``r_stb``.
    A write to
    ``QP_EPSN`` sets a pending bit for its QP; a pointer visiting one QP per
    cycle offers each pending QP on ``init`` (within ``num_qps + 2`` cycles),
    so back-to-back writes to several QPs are all delivered.

    Addresses (``MR_BASE_*``, ``QP_CQ_BASE_*``) keep ``addr_width`` bits
    (32..64): the upper bits of ``MR_BASE_HI`` and ``QP_CQ_BASE_HI`` are not
    stored and read 0.

    Latency: a CSR read answers 3 cycles after ``r_stb`` and returns the
    register as it was the cycle after ``r_stb`` (every write strobed before
    ``r_stb`` included; a counter as the bank's read of that cycle gives
    it, above); a lookup answers
    the cycle after its address; a write is decoded and registered at
    ``w_stb`` and takes effect a cycle later, in memory and flip-flop
    registers alike (a lookup addressed two cycles after ``w_stb`` sees it; a
    read strobed in the cycle between returns the written value).
    Throughput: one CSR access per cycle (a read's answer comes 3 cycles
    later) and one lookup per port per cycle.
    """

    CSR_READ_LATENCY = 3

    def __init__(self, *, num_qps=16, num_mrs=16, sack_bits=64, mpr_max=1024,
                 csr_addr_width=16, next_offset=0, addr_width=64, ipv6=False):
        self.num_qps, self.num_mrs = num_qps, num_mrs
        self.ipv6 = ipv6
        self.qp_regs = qp_regs(ipv6)
        self.addr_width = addr_width
        self.sack_bits, self.mpr_max = sack_bits, mpr_max
        self.qp_bits = exact_log2(num_qps)
        self.next_offset = next_offset
        self.map = rx_register_map(num_qps, num_mrs, next_offset, ipv6)
        if self.map.size > 1 << csr_addr_width:
            raise ValueError(
                f"the rx register map needs {self.map.size:#x} bytes, more than "
                f"csr_addr_width={csr_addr_width} addresses; use fewer QPs or a wider bus"
            )
        lookup = wiring.Signature({"addr": Out(self.qp_bits),
                                   "cfg": In(QpConfig(addr_width, ipv6))})
        events = data.StructLayout({n: unsigned(1) for n in VALIDATOR_COUNTERS + WINDOW_COUNTERS
                                    + PEER_FILTER_COUNTERS})
        super().__init__(
            {
                "csr": In(CSRBusSignature(csr_addr_width)),
                "lookup_a": In(lookup),
                "lookup_b": In(lookup),
                "lookup_c": In(lookup),
                "init": Out(stream.Signature(
                    data.StructLayout({"qp": unsigned(self.qp_bits), "epsn": unsigned(PSN_BITS)}))),
                "init_busy": Out(1),
                "mr_lookup": In(MrLookupSignature(addr_width)),
                "own_mac": Out(48),
                "own_ip": Out(32),
                **({"own_ip6": Out(128)} if ipv6 else {}),
                "trim_dscp": Out(6, init=TRIM_DSCP_DEFAULT),
                "events": In(events),
                "parser_events": In(len(PARSER_COUNTERS)),
            }
        )

    def elaborate(self, platform):
        m = Module()
        bus = self.csr
        rmap = self.map
        rd_value = Signal(32)  # the read data, CSR_READ_LATENCY cycles after r_stb

        qp_index = Signal(self.qp_bits)
        in_qp = Signal()
        # The word in the QP block: exactly its bits wide, as the read-back
        # memory's address is Cat(reg_index, qp_index).
        reg_index = Signal(exact_log2(QP_STRIDE) - 2)
        # The QP blocks are whole QP_STRIDE slots: compare the slot number, not
        # the byte address (no full-width subtract in the read and write decode).
        slot = bus.addr[exact_log2(QP_STRIDE):]
        first = QP_BASE // QP_STRIDE
        m.d.comb += [
            in_qp.eq((slot >= first) & (slot < first + self.num_qps)),
            qp_index.eq(slot - first),
            reg_index.eq(bus.addr[2 : exact_log2(QP_STRIDE)]),
        ]

        # ---- flip-flop registers
        own_mac_lo = Signal(32)
        own_mac_hi = Signal(16)
        m.d.comb += self.own_mac.eq(Cat(own_mac_lo, own_mac_hi))
        params = Const(rmap["PARAMS"].pack(log2_qps=self.qp_bits, mrs=self.num_mrs,
                                           sack_words=self.sack_bits // 32,
                                           mpr_max=self.mpr_max // 128), 32)
        plain = {
            "ID": (Const(RX_TYPE_ID << 16 | RX_VERSION, 32), None),
            "NEXT": (Const(self.next_offset, 32), None),
            "PARAMS": (params, None),
            "OWN_MAC_LO": (own_mac_lo, own_mac_lo),
            "OWN_MAC_HI": (own_mac_hi, own_mac_hi),
            "OWN_IP": (self.own_ip, self.own_ip),
            "TRIM_DSCP": (self.trim_dscp, self.trim_dscp),
        }
        if self.ipv6:
            for i in range(4):
                word = self.own_ip6[32 * i : 32 * (i + 1)]
                plain[OWN_IP6 + 4 * i] = (word, word)
        # The MR blocks: whole MR_STRIDE slots from mr_base.
        m.submodules.mr_table = mrs = MrTable(num_mrs=self.num_mrs, addr_width=self.addr_width)
        wiring.connect(m, wiring.flipped(self.mr_lookup), mrs.lookup)
        mr_block, mr_slot = block_decode(bus.addr, mr_base(self.num_qps, self.num_mrs),
                                         MR_STRIDE, self.num_mrs)
        mr_word = bus.addr[2 : exact_log2(MR_STRIDE)]
        in_mr = mr_block & (mr_word < len(MR_WORDS))
        mr_index = mr_slot[: len(mrs.w.index)]

        # The counters: strobes in COUNTERS order (the parser's first). The
        # parser's counters saturate, the others wrap.
        m.submodules.counter_bank = bank = CounterBank(
            len(COUNTERS), saturate=[n.startswith("parser_") for n in COUNTERS],
            read_register=True)
        m.d.comb += bank.strobe.eq(Cat(
            self.parser_events, *[self.events[n] for n in COUNTERS if not n.startswith("parser_")]))

        # Every write, to a flip-flop register (the MR table, own MAC and IP,
        # ...) or to a per-QP memory, is decoded at w_stb into one registered
        # strobe per target and applied the cycle after from registered data
        # and QP index (hw.csr.RegisteredWrites): no address compare (the QP
        # range is two carry chains) is in series with a clock enable or a
        # memory's write enable (LUT RAM WRE, or the enables of the words of
        # a small memory built of flip-flops). A read in the cycle after the
        # write returns the new value all the same: the reads take the
        # registers and the read-back memory a cycle after r_stb, when such
        # a write has landed (below), so no target needs a read bypass
        # (None).
        def key_offset(key):
            return rmap[key].offset if isinstance(key, str) else key
        writable = {key: target for key, (_, target) in plain.items() if target is not None}
        targets = {key: (bus.addr == key_offset(key), None) for key in writable}
        targets["QP_BLOCK"] = (in_qp, None)  # any word of a QP block: the read-back copy
        targets["MR"] = (in_mr, None)  # a word of an MR block: the table's row
        targets.update({name: (in_qp & (reg_index == offset // 4), None)
                        for name, offset, _, _ in self.qp_regs})
        w = RegisteredWrites(m, bus, targets,
                             fields={"qp": qp_index, "mr": mr_index, "mr_word": mr_word})
        m.d.comb += [mrs.w.en.eq(w.stb["MR"]), mrs.w.index.eq(w.fields["mr"]),
                     mrs.w.word.eq(w.fields["mr_word"]), mrs.w.data.eq(w.data)]
        for key, target in writable.items():
            with m.If(w.stb[key]):
                m.d.sync += target.eq(w.data[: len(target)])

        # ---- per-QP memories: one per register for the lookups, and one copy of
        # every QP block (QP_STRIDE // 4 words per QP) for the CSR reads, so a read
        # is one memory port, not a port per register and a mux between them.
        readback = Memory(shape=32, depth=self.num_qps * (QP_STRIDE // 4), init=[])
        m.submodules.qp_readback = readback
        readback_wp = readback.write_port()
        readback_rp = readback.read_port()
        # QP_CQ_BASE_HI keeps the base's bits below addr_width only (the
        # lookups' cq_base takes no more): so does its read-back copy.
        m.d.comb += [
            readback_wp.addr.eq(Cat(w.addr[2 : exact_log2(QP_STRIDE)], w.fields["qp"])),
            readback_wp.data.eq(Mux(w.stb["QP_CQ_BASE_HI"], w.data[: self.addr_width - 32],
                                    w.data)),
            readback_wp.en.eq(w.stb["QP_BLOCK"]),
        ]
        mems = {}
        # the registers each lookup reads (None: all)
        peer_regs = ("QP_PEER_IP",) + tuple(name for name, _, _, _ in _QP_REGS_IP6)
        lookups = ((self.lookup_a, None), (self.lookup_b, None),
                   (self.lookup_c, ("QP_CTRL", *peer_regs)))
        for name, _, _, _ in self.qp_regs:
            mem = Memory(shape=32, depth=self.num_qps, init=[])
            m.submodules[name.lower()] = mem
            wp = mem.write_port()
            m.d.comb += [
                wp.addr.eq(w.fields["qp"]),
                wp.data.eq(w.data),
                wp.en.eq(w.stb[name]),
            ]
            ports = []
            for lk, names in lookups:
                if names is not None and name not in names:
                    ports.append(Const(0, 32))
                    continue
                rp = mem.read_port()
                m.d.comb += rp.addr.eq(lk.addr)
                ports.append(rp.data)
            mems[name] = (ports, mem.read_port() if name == "QP_EPSN" else None)

        for i, (lk, _) in enumerate(lookups):
            def word(name, i=i):
                return mems[name][0][i]
            ctrl, ackr, cqc = word("QP_CTRL"), word("QP_ACK"), word("QP_CQ_CTRL")
            m.d.comb += [
                lk.cfg.state.eq(ctrl[0:3]),
                lk.cfg.trim_nack.eq(ctrl[3]),
                lk.cfg.mtu.eq(ctrl[4:7]),
                lk.cfg.mpr.eq(ctrl[8:16]),
                lk.cfg.pd.eq(ctrl[16:24]),
                lk.cfg.ack_n.eq(ackr[0:8]),
                lk.cfg.ack_t.eq(ackr[16:32]),
                lk.cfg.peer_ip.eq(word("QP_PEER_IP")),
                lk.cfg.peer_qpn.eq(word("QP_PEER_QPN")[:24]),
                lk.cfg.cq_base.eq(Cat(word("QP_CQ_BASE_LO"), word("QP_CQ_BASE_HI"))),
                lk.cfg.cq_log2.eq(cqc[0:5]),
                lk.cfg.cq_enable.eq(cqc[31]),
                lk.cfg.cq_cons.eq(word("QP_CQ_CONS")[:16]),
            ]
            if self.ipv6:
                m.d.comb += [
                    lk.cfg.peer_ip.eq(Cat(word("QP_PEER_IP"), *(word(f"QP_PEER_IP6_{k}")
                                                                for k in (1, 2, 3)))),
                    lk.cfg.peer_v6.eq(word("QP_PEER_V6")[0]),
                ]

        # QP_EPSN writes: a pending bit per QP, so writes to several QPs in a row
        # are all delivered however busy the window engine is; the value is read
        # back from the QP_EPSN memory when the request is presented. The write's
        # registered strobe sets the pending bit as the memory takes the value.
        init_pending = Signal(self.num_qps)
        init_valid = Signal()
        init_load = Signal()  # the EPSN read of the QP chosen last cycle is due
        epsn_wr = w.stb["QP_EPSN"]
        epsn_qp = w.fields["qp"]
        # A pointer walks the QPs, one per cycle, and stops at a pending one: no
        # priority encoder across num_qps bits (deep logic at 256 QPs).
        next_qp = Signal(self.qp_bits)
        epsn_rp = mems["QP_EPSN"][1]
        m.d.comb += [
            epsn_rp.addr.eq(next_qp),
            self.init.valid.eq(init_valid),
        ]
        set_mask = Signal(self.num_qps)
        clr_mask = Signal(self.num_qps)
        with m.If(epsn_wr):
            m.d.comb += set_mask.eq(1 << epsn_qp)
        with m.If(init_valid):
            with m.If(self.init.ready):
                m.d.sync += init_valid.eq(0)
        with m.Elif(init_load):
            m.d.sync += [init_valid.eq(1), self.init.payload.epsn.eq(epsn_rp.data[:PSN_BITS])]
            m.d.sync += init_load.eq(0)
        with m.Elif(init_pending.bit_select(next_qp, 1) & ~epsn_wr):
            # Take this QP; its EPSN word is read this cycle.
            m.d.comb += clr_mask.eq(1 << next_qp)
            m.d.sync += [self.init.payload.qp.eq(next_qp), init_load.eq(1)]
        with m.Else():
            m.d.sync += next_qp.eq(next_qp + 1)
        m.d.sync += init_pending.eq((init_pending & ~clr_mask) | set_mask)
        # init_busy from a flip-flop: high the cycle after any write (the
        # write's decode is a cycle away, registered in epsn_wr), and low one
        # cycle after the last pending request is delivered.
        init_busy = Signal()
        m.d.sync += init_busy.eq(
            bus.w_stb | epsn_wr | init_pending.any() | init_load | init_valid)
        m.d.comb += self.init_busy.eq(init_busy)

        # Reads, in three registered stages (CSR_READ_LATENCY): at r_stb the
        # address is registered, per group of flip-flop registers a copy of its
        # own (read_in_groups), for the QP blocks the read-back memory's word
        # address and for the MR blocks the table's entry and word; the cycle
        # after, the groups register their word and the memories read theirs;
        # a cycle later, one of them. The address
        # thus drives only flip-flops' inputs (a few LUTs each), not every
        # group's mux, which at 2 cycles (the groups registered at r_stb) is
        # too slow (docs/timing.md#rx-registers). Both the registers and the
        # memory are read the cycle after r_stb, when a write strobed before
        # r_stb has landed (RegisteredWrites applies it the cycle after w_stb),
        # so a read returns it with no bypass. The counter bank is addressed
        # at r_stb (the word in the COUNTER_BASE slot of 2**COUNTER_SLOT_BITS
        # bytes: no subtract) and gives its word from a register 2 cycles
        # later (read_register: the block RAM's output and the bank's bypass
        # choice are a path of their own, not in front of the mux below).
        # The flip-flop registers lie outside the QP and MR
        # blocks and the counters' slot, so a read of any of them matches none
        # of their groups (their OR is 0).
        flops = read_in_groups(m, bus.addr, bus.r_stb, {
            key_offset(key): value for key, (value, _) in plain.items()})
        from_mem = Signal()  # a QP-block register: the read-back memory's word
        rb_addr = Signal(len(readback_rp.addr))
        from_bank = Signal()  # a counter: the bank's word
        from_mr = Signal()  # a word of an MR block: the table's
        in_slot = bus.addr[COUNTER_SLOT_BITS:] == COUNTER_BASE >> COUNTER_SLOT_BITS
        counter_word = bus.addr[2:COUNTER_SLOT_BITS]
        with m.If(bus.r_stb):
            m.d.sync += [
                from_mem.eq(in_qp & reduce(operator.or_, [
                    reg_index == offset // 4 for _, offset, _, _ in self.qp_regs])),
                rb_addr.eq(Cat(reg_index, qp_index)),
                from_bank.eq(in_slot & ~greater_than_const(counter_word, len(COUNTERS) - 1)),
                from_mr.eq(in_mr),
                mrs.r_index.eq(mr_index),
                mrs.r_word.eq(mr_word),
            ]
        m.d.comb += [readback_rp.addr.eq(rb_addr), bank.rd_addr.eq(counter_word)]
        m.d.sync += rd_value.eq(Mux(from_mem, readback_rp.data,
                                    Mux(from_bank, bank.rd_data,
                                        Mux(from_mr, mrs.r_data, flops))))
        m.d.comb += bus.r_data.eq(rd_value)
        return m

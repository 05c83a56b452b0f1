"""MRC's GENERATED and AUTO EV profiles, derived and loaded by the NIC itself:
the ``ev_gen`` register block (``EvGenBlock``) around ``EvGenerator``."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hw.csr import CSRBusSignature, RegisteredWrites, RegisterMap
from hw.protocol import SRV6_USID_BITS, SRV6_USIDS, EvState, ev_hi_words

from .csr import CsrWrite
from .ev_gen import EV_WIDTH_MAX, EvGenerator

__all__ = ["AUTO_MAX", "AUTO_MIN", "auto_init", "EV_GEN_TYPE_ID", "EV_GEN_VERSION",
           "EvGenBlock", "SRV6_FIRST_USID", "auto_params", "deposit", "ev_gen_register_map"]

EV_GEN_TYPE_ID = 0x0005
EV_GEN_VERSION = 2

# AUTO: GENERATED over the ephemeral ports (RFC 6335, 49152..65535: 2^14 EVs),
# every entry of the QP's table; each QP starts at its number's low 14 bits
# reversed, so that QPs 0, 1, 2, 3, ... start 2^13, 2^12, 3 x 2^12, ... apart
AUTO_MIN, AUTO_MAX = 0xC000, 0xFFFF
AUTO_INIT_BITS = 14
# The EV bits of SRv6's first uSID. AUTO with the value there (gen_bits): a
# uSID names a fabric node, so the range is the evs_per_qp first hops from the
# template's first uSID on (a fabric's first-hop uSIDs are consecutive), QP q
# starting at the (q mod evs_per_qp)-th of them
SRV6_FIRST_USID = (1 << SRV6_USID_BITS) - 1 << SRV6_USID_BITS * (SRV6_USIDS - 1)
# cycles from one injected write to the next, at least
WRITE_SPACING = 4


def auto_init(qpn: int) -> int:
    """AUTO's first candidate for QP ``qpn``: its low 14 bits, reversed."""
    return int(f"{qpn & ((1 << AUTO_INIT_BITS) - 1):0{AUTO_INIT_BITS}b}"[::-1], 2)


def auto_params(qpn: int, evs_per_qp: int, bits: int = 0xFFFF,
                template: int = 0) -> dict[str, int]:
    """The GENERATED parameters AUTO takes for QP ``qpn`` (the golden model's
    ``generated_evs`` keywords), its value deposited in ``bits`` of
    ``template`` (``gen_bits``, ``gen_template``): the ephemeral ports, or in
    SRv6's first uSID the ``evs_per_qp`` first hops from the template's
    (``max_ev`` above 0xFFFF when they run past the last uSID:
    ``generated_evs`` refuses it, as the NIC does)."""
    if bits == SRV6_FIRST_USID:
        first = (template & SRV6_FIRST_USID) >> SRV6_USID_BITS * (SRV6_USIDS - 1)
        return dict(width=EV_WIDTH_MAX, init=qpn & 0xFFFF, min_ev=first,
                    max_ev=first + evs_per_qp - 1, mask=0xFFFF, count=evs_per_qp)
    return dict(width=EV_WIDTH_MAX, init=auto_init(qpn), min_ev=AUTO_MIN, max_ev=AUTO_MAX,
                mask=0xFFFF, count=evs_per_qp)


def deposit(value: int, bits: int, template: int) -> int:
    """The EV of a derived ``value`` deposited in ``bits`` of ``template``
    (builds with EVs wider than 16 bits: ``gen_bits``, ``gen_template``): the
    value's bit j goes to the j-th lowest set bit of ``bits`` (value bits past
    the last are dropped), the EV's other bits are the template's."""
    out = template & ~bits
    k = 0
    while bits:
        low = bits & -bits
        out |= low if value >> k & 1 else 0
        bits ^= low
        k += 1
    return out


def ev_gen_register_map(ev_width: int = 16) -> RegisterMap:
    rm = RegisterMap(
        "ev_gen", EV_GEN_TYPE_ID, EV_GEN_VERSION,
        "EV generator: derives a QP's EVs in the NIC (MRC's GENERATED and AUTO "
        "profiles) and writes them into TX's and reliability's EV tables, every "
        "entry past the last EV DENIED. Candidate i (i = 0, 1, ...) is "
        "min + (((init + i) & mask) mod (max - min + 1)); repeats are skipped.")
    rm.add("header", 0x00, "RO", "block header")
    rm.add("next", 0x04, "RO", "offset of the next block header from the CSR base, 0 = last")
    rm.add("gen_qp", 0x08, "RW", "the QP whose EVs a run loads",
           fields=[("qpn", 0, 16, "QP number")])
    rm.add("gen_range", 0x0C, "RW", "GENERATED: the EVs' range",
           fields=[("min", 0, 16, "smallest EV"), ("max", 16, 16, "largest EV (< 2^width)")])
    rm.add("gen_init", 0x10, "RW", "GENERATED: the candidates' start and mask",
           fields=[("init", 0, 16, "first candidate"), ("mask", 16, 16, "candidate mask")])
    rm.add("gen_shape", 0x14, "RW", "GENERATED: the EV's width and how many EVs",
           fields=[("width", 0, 5, "EV width, bits: 1..16 (the UDP profile's 16)"),
                   ("count", 8, 8, "EVs to derive: 1..evs_per_qp")])
    rm.add("gen_start", 0x18, "WO",
           "a write starts a run for gen_qp (ignored while one runs: status ignored)",
           fields=[("auto", 0, 1, "AUTO: the NIC's own parameters (width 16, the range "
                    f"0x{AUTO_MIN:04X}..0x{AUTO_MAX:04X}, init = the QP number's low "
                    f"{AUTO_INIT_BITS} bits reversed, mask 0xFFFF, count evs_per_qp; with "
                    f"gen_bits 0x{SRV6_FIRST_USID:X}, SRv6's first uSID: the range "
                    "gen_template's first uSID .. that + evs_per_qp - 1, init = the QP "
                    "number); 0: the registers above")])
    rm.add("gen_status", 0x1C, "RO", "the last run",
           fields=[("busy", 0, 1, "a run is going on: the EV tables of gen_qp are being "
                    "written (the host writes no EV entry meanwhile)"),
                   ("error", 1, 1, "the parameters were refused, or fewer than count "
                    "distinct EVs exist: every entry of the QP is DENIED"),
                   ("ignored", 2, 1, "a start was written while busy, and ignored"),
                   ("bad_qp", 3, 1, "gen_qp was not a QP: nothing was written"),
                   ("found", 8, 8, "EVs written GOOD (entries 0 .. found - 1)")])
    if ev_width > 16:
        rm.add("gen_template", 0x20, "RW", "(ev_width above 16) the EV's bits outside "
               "gen_bits, word i its bits 32i+31..32i", count=2, stride=4)
        rm.add("gen_bits", 0x28, "RW", "(ev_width above 16) the EV bits a derived value "
               "fills, GENERATED and AUTO alike, word i bits 32i+31..32i: the value's bit j "
               "goes to the j-th lowest set bit (0xFFFF: the UDP source port; 0xFFFF0000: "
               "STEV's flow label, or a split such as 8+4+4 bits over the flow label and the "
               f"source port; 0x{SRV6_FIRST_USID:X}: SRv6's first uSID); 0 (the reset value) "
               "is read as 0xFFFF", count=2, stride=4)
    return rm


def _field(reg, name):
    for fname, lsb, width, _ in reg.fields:
        if fname == name:
            return lsb, width
    raise KeyError(f"{reg.name} has no field {name!r}")


class EvGenBlock(wiring.Component):
    """The ``ev_gen`` register block (``ev_gen_register_map``): a write to
    ``gen_start`` runs ``EvGenerator`` for ``gen_qp`` and writes each EV it
    finds, as the driver does for an EXPLICIT profile: TX's ``ev_select`` and
    ``ev_entry`` (value, GOOD), then reliability's ``ev`` entry (value, GOOD,
    ``set_state``); then every entry from ``found`` to ``evs_per_qp`` - 1 as
    value 0, DENIED (every entry, when the run fails).

    Parameters: ``num_qps``, ``evs_per_qp`` (a power of two); ``tx_map`` and
    ``rel_map``, those blocks' register maps; ``tx_block`` and ``rel_block``,
    their indices on the CSR interconnect; ``ev_width``, the EV tables'
    (above 16: each derived value is deposited in ``gen_template``'s bits
    ``gen_bits`` (``deposit``), and each entry's bits above 15 are
    written into TX's and reliability's ``ev_value_hi`` before its entry
    write, zeros for the DENIED entries).

    Interface
    ---------
    ``csr``     In(CSRBusSignature(addr_width)): the block's registers. Reads
                answer the cycle after ``r_stb`` (latency 1) and hold until the
                next read; writes apply the cycle after ``w_stb``.
    ``inject``  Out(stream(CsrWrite)): the table writes, in order, onto the
                interconnect's internal-write port (each held until taken).

    The host must not write TX's ``ev_select``/``ev_entry`` or reliability's
    ``ev`` while ``busy``: the run's ``ev_select`` and ``ev_entry`` are two
    writes, and a host write between them would move the entry written.

    Latency: the generator's (about count x (21 + count / 2) cycles) plus 3
    injected writes per entry, ``WRITE_SPACING`` (4) cycles apart while the
    host is idle (so that TX sees them as it sees the host's, one in 3 cycles
    at most); 16 entries take about 750 cycles. With EVs wider than 16 bits
    each EV found also takes a cycle per EV bit up to ``gen_bits``' highest
    (``DEPOSIT``, a bit a cycle: 65 for SRv6's first uSID). A control-path
    operation: it runs while the QP is set up, not per packet.

    Cost: about 660 to 720 LUT4 and 410 to 420 flip-flops from 2 x 2 to 256 x 16
    QPs x EVs with 16-bit EVs, no block RAM (docs/board.md, "NicCore scaling");
    wider EVs add the template and bits registers and DEPOSIT's shift
    registers.
    """

    def __init__(self, *, num_qps, evs_per_qp, tx_map, rel_map, tx_block, rel_block,
                 addr_width=16, ev_width=16):
        if evs_per_qp & (evs_per_qp - 1) or not 1 <= evs_per_qp <= 128:
            raise ValueError(f"evs_per_qp must be a power of two in 1..128, not {evs_per_qp!r}")
        self.num_qps, self.evs_per_qp = num_qps, evs_per_qp
        self.tx_block, self.rel_block = tx_block, rel_block
        self.ev_select, self.ev_entry = tx_map["ev_select"], tx_map["ev_entry"]
        self.rel_ev = rel_map["ev"]
        self.ev_width = ev_width
        # TX's and reliability's ev_value_hi, in a build of wide EVs
        self.hi = () if ev_width <= 16 else (tx_map["ev_value_hi"], rel_map["ev_value_hi"])
        if self.rel_ev.stride != 4 or self.rel_ev.count != num_qps * evs_per_qp:
            raise ValueError("reliability's ev register must be num_qps x evs_per_qp words")
        self.register_map = ev_gen_register_map(ev_width)
        super().__init__({"csr": In(CSRBusSignature(addr_width)),
                          "inject": Out(stream.Signature(CsrWrite))})

    def elaborate(self, platform):
        m = Module()
        csr, E, rm = self.csr, self.evs_per_qp, self.register_map
        m.submodules.gen = gen = EvGenerator(E)
        ibits = max(1, (E - 1).bit_length())

        names = ("gen_qp", "gen_range", "gen_init", "gen_shape")
        regs = {name: Signal(32, name=name) for name in names}
        masks = {name: sum(((1 << w) - 1) << lsb for _, lsb, w, _ in rm[name].fields)
                 for name in regs}
        template, bits_reg = Signal(64), Signal(64)  # gen_template's, gen_bits' two words
        wide_words = {rm[name].addr(k): reg[32 * k : 32 * (k + 1)]
                      for name, reg in (("gen_template", template), ("gen_bits", bits_reg))
                      for k in (range(2) if self.hi else ())}
        w = RegisteredWrites(m, csr, {
            **{name: (csr.addr == rm[name].offset, masks[name]) for name in regs},
            **{f"t{k}": (csr.addr == addr, None) for k, addr in enumerate(wide_words)},
            "start": (csr.addr == rm["gen_start"].offset, None)})
        for name, reg in regs.items():
            with m.If(w.stb[name]):
                m.d.sync += reg.eq(w.data & masks[name])
        for k, word in enumerate(wide_words.values()):
            with m.If(w.stb[f"t{k}"]):
                m.d.sync += word.eq(w.data)
        # the EV bits a derived value fills (0 is read as the UDP source port's)
        bits = Signal(self.ev_width)
        m.d.comb += bits.eq(Mux(bits_reg[: self.ev_width].any(), bits_reg, 0xFFFF))

        busy, error, ignored, bad_qp = Signal(), Signal(), Signal(), Signal()
        found = Signal(8)
        status = Cat(busy, error, ignored, bad_qp, 0, 0, 0, 0, found)
        words = {**{rm[name].offset: reg for name, reg in regs.items()},
                 rm["gen_status"].offset: status, **wide_words}
        value = Signal(32)
        with m.Switch(csr.addr):
            for offset, word in words.items():
                with m.Case(offset):
                    m.d.comb += value.eq(word)
        read = Signal(32)
        with m.If(csr.r_stb):
            m.d.sync += read.eq(w.read_at_strobe(value))
        m.d.comb += csr.r_data.eq(read)

        # a run: the QP, the entry written and its value and state
        qpn = Signal(16)
        auto = Signal()
        idx = Signal(range(E + 1))
        ev_value = Signal(self.ev_width)
        # DEPOSIT's state: the value's bits still to place, the EV bits still to
        # visit, and the one-hot EV bit visited
        dep_value = Signal(16)
        dep_bits, dep_at = Signal(self.ev_width), Signal(self.ev_width)
        ev_state = Signal(EvState)
        p = gen.start.payload
        qp_f, rng, init, shape = regs["gen_qp"], regs["gen_range"], regs["gen_init"], \
            regs["gen_shape"]
        # AUTO's range and first candidate (auto_params): the ephemeral ports, or
        # the first hops from the template's first uSID on (a range past the last
        # uSID has max 0 < min: the generator refuses it)
        auto_min, auto_max = Const(AUTO_MIN, 16), Const(AUTO_MAX, 16)
        auto_init_q = qpn[:AUTO_INIT_BITS][::-1]
        if self.ev_width >= SRV6_FIRST_USID.bit_length():  # SRv6's entries
            usid = template.word_select(SRV6_USIDS - 1, SRV6_USID_BITS)
            last = Signal(SRV6_USID_BITS + 1)
            srv6 = bits == SRV6_FIRST_USID
            m.d.comb += last.eq(usid + (E - 1))
            auto_min = Mux(srv6, usid, auto_min)
            auto_max = Mux(srv6, Mux(last[-1], 0, last[:-1]), auto_max)
            auto_init_q = Mux(srv6, qpn, auto_init_q)
        m.d.comb += [
            p.width.eq(Mux(auto, EV_WIDTH_MAX, shape[0:5])),
            p.count.eq(Mux(auto, E, shape[8:16])),
            p.min.eq(Mux(auto, auto_min, rng[0:16])),
            p.max.eq(Mux(auto, auto_max, rng[16:32])),
            p.init.eq(Mux(auto, auto_init_q, init[0:16])),
            p.mask.eq(Mux(auto, 0xFFFF, init[16:32])),
        ]

        sel_ev, sel_qp = _field(self.ev_select, "ev_index")[0], _field(self.ev_select, "qpn")[0]
        inj = self.inject.payload
        entry_data = ev_value[:16] | ev_state << 16
        entry = Cat(idx[:ibits], qpn[: max(1, (self.num_qps - 1).bit_length())])

        # consecutive writes at least WRITE_SPACING cycles apart, as the host
        # bridge's: TX takes ev_select the cycle after its strobe, and an
        # ev_entry write into its EV table up to 3 cycles after its strobe
        gap = Signal(range(WRITE_SPACING))
        m.d.sync += gap.eq(Mux(gap != 0, gap - 1, 0))

        def write(block, addr, data, then):
            m.d.comb += [self.inject.valid.eq(gap == 0), inj.block.eq(block),
                         inj.addr.eq(addr), inj.data.eq(data)]
            with m.If(self.inject.valid & self.inject.ready):
                m.d.sync += gap.eq(WRITE_SPACING - 1)
                m.next = then

        with m.FSM():
            with m.State("IDLE"):
                with m.If(w.stb["start"]):
                    start_auto = w.data[0]
                    m.d.sync += [qpn.eq(qp_f[:16]), auto.eq(start_auto), ignored.eq(0),
                                 error.eq(0), found.eq(0)]
                    with m.If(qp_f[:16] < self.num_qps):
                        m.d.sync += [busy.eq(1), bad_qp.eq(0)]
                        m.next = "LAUNCH"
                    with m.Else():
                        m.d.sync += bad_qp.eq(1)
            with m.State("LAUNCH"):  # the generator is idle: it takes the run at once
                m.d.comb += gen.start.valid.eq(1)
                m.next = "RUN"
            with m.State("RUN"):
                with m.If(gen.ev.valid):
                    m.d.sync += [idx.eq(gen.ev.payload.index), ev_state.eq(EvState.GOOD)]
                    if self.hi:
                        m.d.sync += [ev_value.eq(template & ~bits), dep_value.eq(
                            gen.ev.payload.value), dep_bits.eq(bits), dep_at.eq(1)]
                        m.next = "DEPOSIT"
                    else:
                        m.d.sync += ev_value.eq(gen.ev.payload.value)
                        m.next = "SELECT"
                with m.Elif(~gen.busy):  # done: refused, too few EVs, or count found
                    m.d.sync += [error.eq(gen.error), found.eq(Mux(gen.error, 0, gen.found)),
                                 idx.eq(Mux(gen.error, 0, gen.found)), ev_value.eq(0),
                                 ev_state.eq(EvState.DENIED)]
                    m.next = "FILL"
            if self.hi:
                with m.State("DEPOSIT"):  # one EV bit a cycle (deposit)
                    with m.If(dep_bits[0]):
                        m.d.sync += dep_value.eq(dep_value >> 1)
                        with m.If(dep_value[0]):
                            m.d.sync += ev_value.eq(ev_value | dep_at)
                    m.d.sync += [dep_bits.eq(dep_bits >> 1), dep_at.eq(dep_at << 1)]
                    with m.If(~dep_bits.any()):
                        m.next = "SELECT"
            with m.State("FILL"):
                with m.If(idx == E):
                    m.d.sync += busy.eq(0)
                    m.next = "IDLE"
                with m.Else():
                    m.next = "SELECT"
            # an entry's writes: TX's select, its high words and entry, then
            # reliability's high words and entry
            words = ev_hi_words(self.ev_width) if self.hi else 0
            steps = [("SELECT", self.tx_block, self.ev_select.offset,
                      idx[:ibits] << sel_ev | qpn << sel_qp),
                     *[(f"TX_HI{k}", self.tx_block, self.hi[0].addr(k),
                        ev_value[16 + 32 * k :][:32]) for k in range(words)],
                     ("ENTRY", self.tx_block, self.ev_entry.offset, entry_data),
                     *[(f"REL_HI{k}", self.rel_block, self.hi[1].addr(k),
                        ev_value[16 + 32 * k :][:32]) for k in range(words)],
                     ("REL", self.rel_block, self.rel_ev.offset + (entry << 2),
                      entry_data | 1 << 31)]
            for k, (state, block, addr, data) in enumerate(steps):
                with m.State(state):
                    write(block, addr, data, steps[k + 1][0] if k + 1 < len(steps) else "NEXT")
            with m.State("NEXT"):
                with m.If(ev_state == EvState.DENIED):  # the entries past the EVs found
                    m.d.sync += idx.eq(idx + 1)
                    m.next = "FILL"
                with m.Else():
                    m.d.comb += gen.ev.ready.eq(1)  # the generator's EV is written
                    m.next = "RUN"

        # a start while a run goes on is ignored, and said so
        with m.If(w.stb["start"] & busy):
            m.d.sync += ignored.eq(1)
        return m


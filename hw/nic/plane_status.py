"""The ``planes`` register block: each plane's link state, its changes as a
host event, and per-plane frame counters."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.counters import CounterBank
from hw.csr import CSRBusSignature, RegisterMap
from hw.protocol import MAX_PLANES

__all__ = ["PLANES_TYPE_ID", "PLANES_VERSION", "PlaneStatus", "plane_register_map"]

PLANES_TYPE_ID = 0x0006
PLANES_VERSION = 1

# the per-plane counters: plane p's at COUNTER_BASE + p * PLANE_STRIDE, in this
# order, one word each (the fourth word of plane 0 is ``absent_drops``)
COUNTER_BASE = 0x20
PLANE_STRIDE = 16
PLANE_COUNTERS = ("tx_frames", "rx_frames", "link_drops")
ABSENT_DROPS = COUNTER_BASE + 4 * len(PLANE_COUNTERS)


def plane_register_map(num_planes: int) -> RegisterMap:
    rm = RegisterMap(
        "planes", PLANES_TYPE_ID, PLANES_VERSION,
        f"The NIC's planes (only in a NIC with 2..{MAX_PLANES}): each plane's MAC link "
        "as NicCore's `link_up` input gives it, a host event when a link goes down or "
        "comes back, and frames counted per plane (32-bit, saturating).")
    rm.add("header", 0x00, "RO", "block header")
    rm.add("next", 0x04, "RO", "offset of the next block header from the CSR base, 0 = last")
    rm.add("link_up", 0x08, "RO", "the planes' links now",
           fields=[("up", 0, num_planes, "bit p: plane p's link is up")])
    rm.add("link_changes", 0x0C, "RC",
           "the plane event: links that went down or came up since the last read "
           "(reading clears the bits read; NicCore's `irq` is high while any is set)",
           fields=[("changed", 0, num_planes, "bit p: plane p's link changed at least once")])
    doc = {"tx_frames": "frames sent on plane i (taken by its MAC)",
           "rx_frames": "frames received on plane i (taken from its MAC, bad ones too)",
           "link_drops": "frames for plane i discarded because its link was down"}
    for k, name in enumerate(PLANE_COUNTERS):
        rm.add(name, COUNTER_BASE + 4 * k, "RO", doc[name], count=num_planes,
               stride=PLANE_STRIDE)
    rm.add("absent_drops", ABSENT_DROPS, "RO",
           "frames discarded because their EV named a plane the NIC lacks")
    return rm


class PlaneStatus(wiring.Component):
    """The ``planes`` register block (``plane_register_map``).

    Interface
    ---------
    ``csr``          In(CSRBusSignature(addr_width)): the registers. A read
                     answers 2 cycles after ``r_stb`` and holds until the next.
    ``link_up``      In(num_planes): NicCore's ``link_up`` (reset all 1, as there).
    ``tx_frame``     In(num_planes): bit p strobes once per frame sent on plane p.
    ``rx_frame``     In(num_planes): bit p strobes once per frame received on plane p.
    ``link_drop``    In(num_planes): bit p strobes once per frame for plane p
                     discarded while its link was down.
    ``absent_drop``  In(1): strobes once per frame for a plane the NIC lacks.
    ``irq``          Out(1): high while ``link_changes`` is not 0 (an OR of its flip-flops).

    A link change is seen one cycle after ``link_up`` moves (its previous value
    is registered); ``link_changes`` gathers them until a read clears the bits
    it returned (a change in the read's own cycle stays for the next read).

    The counters are one ``CounterBank`` (block RAM): a frame counted in cycle
    t is in every read addressed ``CounterBank.lag(4 x num_planes)`` cycles
    later or more. Latency: 2 cycles per read; throughput: a read per cycle,
    every strobe every cycle.
    """

    READ_LATENCY = 2

    def __init__(self, num_planes: int, addr_width: int = 16):
        if not isinstance(num_planes, int) or not 2 <= num_planes <= MAX_PLANES:
            self._MustUse__silence = True  # never elaborated: no "never used" warning
            raise ValueError(f"num_planes must be in 2..{MAX_PLANES}, not {num_planes!r} "
                             "(a NIC with one plane has no planes block)")
        self.num_planes = num_planes
        self.register_map = plane_register_map(num_planes)
        n = num_planes
        super().__init__({
            "csr": In(CSRBusSignature(addr_width)),
            "link_up": In(n, init=(1 << n) - 1),
            "tx_frame": In(n),
            "rx_frame": In(n),
            "link_drop": In(n),
            "absent_drop": In(1),
            "irq": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n, csr, rm = self.num_planes, self.csr, self.register_map

        # counter 4p + k: plane p's k-th of PLANE_COUNTERS; 3 (plane 0's fourth
        # word) counts absent_drops, the other planes' fourth words stay 0
        m.submodules.counters = bank = CounterBank(4 * n, saturate=True)
        strobes = []
        for p in range(n):
            fourth = self.absent_drop if p == 0 else 0
            strobes.append(Cat(self.tx_frame[p], self.rx_frame[p], self.link_drop[p], fourth))
        m.d.comb += bank.strobe.eq(Cat(*strobes))

        prev = Signal(n, init=(1 << n) - 1)  # NicCore's link_up resets all up
        changes = Signal(n)
        moved = prev ^ self.link_up
        m.d.sync += prev.eq(self.link_up)

        in_counters = Signal()
        word = Signal(32)
        addr = csr.addr
        m.d.comb += [
            in_counters.eq((addr >= COUNTER_BASE) & (addr < COUNTER_BASE + PLANE_STRIDE * n)),
            bank.rd_addr.eq((addr - COUNTER_BASE)[2:]),
        ]
        read_changes = csr.r_stb & (addr == rm["link_changes"].offset)
        with m.Switch(addr):
            with m.Case(rm["link_up"].offset):
                m.d.comb += word.eq(self.link_up)
            with m.Case(rm["link_changes"].offset):
                m.d.comb += word.eq(changes)
        m.d.sync += changes.eq(Mux(read_changes, 0, changes) | moved)

        # stage 1: the flip-flop words and the counter's address; stage 2: the answer
        flop_word, from_bank = Signal(32), Signal()
        with m.If(csr.r_stb):
            m.d.sync += [flop_word.eq(word), from_bank.eq(in_counters)]
        answer = Signal(32)
        read2 = Signal()
        m.d.sync += read2.eq(csr.r_stb)
        with m.If(read2):
            m.d.sync += answer.eq(Mux(from_bank, bank.rd_data, flop_word))
        m.d.comb += [csr.r_data.eq(answer), self.irq.eq(changes.any())]
        return m

"""Formal properties of the AXI4 arbiter of hw/axi_arbiter.py (``sim.formal`` runs them).

``AxiArbiterHarness`` wraps an ``AXI4Arbiter`` between ``MASTERS`` masters
and a slave that the solver drives freely, each under the AXI rule
(``hw.formal.axi4_rules``: on every channel valid held until ready, the
payload stable): the masters' AW, W and AR and their B and R ready, the
slave's AW, W and AR ready and its B and R, whose IDs carry a master index
the arbiter gave (below ``MASTERS``). Asserted:

- the AXI rule on every port: AW, W and AR toward the slave, B and R
  toward each master;
- a master's AW (AR) is taken exactly when the slave takes the arbiter's,
  from that master, with its fields and its ID under the master's index;
  a W beat is taken from a master exactly when the slave takes the
  arbiter's, that master's beat; B and R go to the master their ID's index
  names, unchanged, and its ready is the slave's;
- no starvation, no deadlock, with the slave always ready on AW, W and AR
  and every master offering the W beats of each AW it had taken (a master
  that withholds them blocks the other masters' writes, as AXI's in-order
  W allows): a master's AR or AW offered is taken within 3 cycles
  (``MASTERS``, ``AW_BOUND``: a grant cycle, then at most 2 other grants),
  a W beat of an AW taken within 2 (``W_BOUND``: W passes from the second
  cycle after its AW).

Reduction: 3 masters (the NIC's TX, RX and reliability engines), 32-bit
data, 8-bit addresses and 1-bit IDs: the arbiter moves the fields through
AND-OR selects without reading them, so wider fields repeat the select;
single-beat bursts (``awlen`` 0, ``wlast`` on every beat; a longer burst
adds beats that pass one a cycle, and the waits grow with its length), the
W order FIFO of 4 entries the NIC uses.

Bounded at ``DEPTH`` (12) cycles: the covers reach each master's AW, AR
and W waiting the full bound by step 3, so 12 cycles are 4 times the
longest history covered; the arbiter's own state (two grant registers, the
order FIFO of 4) is reached within that.
"""

from amaranth.hdl import Assert, Assume, Cat, Cover, Elaboratable, Module, Mux, Signal

from hw.axi_arbiter import AXI4Arbiter
from hw.formal import Proof, axi4_rules, harness

__all__ = ["PROOFS", "AxiArbiterHarness"]

MASTERS = 3
ADDR, DATA, ID = 8, 32, 1
FIFO = 4
AW_BOUND = 3
W_BOUND = 2
DEPTH = 12

_AW = ("awaddr", "awlen", "awsize", "awburst", "awlock", "awcache", "awprot")
_AR = ("araddr", "arlen", "arsize", "arburst", "arlock", "arcache", "arprot")


class AxiArbiterHarness(Elaboratable):
    """See the module docstring. Free inputs: ``inputs``."""

    def __init__(self, *, aw_bound=AW_BOUND, w_bound=W_BOUND, ar_bound=MASTERS):
        self.aw_bound, self.w_bound, self.ar_bound = aw_bound, w_bound, ar_bound
        self.dut = AXI4Arbiter(MASTERS, addr_width=ADDR, data_width=DATA, id_width=ID,
                               w_fifo_depth=FIFO)
        self.inputs = []
        for i in range(MASTERS):
            s = self.dut.slave(i)
            self.inputs += [getattr(s, n) for n, mem in s.signature.members.items()
                            if mem.flow.name == "In"]
        mst = self.dut.m_axi
        self.inputs += [getattr(mst, n) for n, mem in mst.signature.members.items()
                        if mem.flow.name == "In"]

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        n, mst = MASTERS, dut.m_axi
        slaves = [dut.slave(i) for i in range(n)]
        for s in slaves:
            axi4_rules(m, s, dut_is_master=False)
        axi4_rules(m, mst, dut_is_master=True)
        b_index, r_index = mst.bid[ID:], mst.rid[ID:]
        m.d.comb += [Assume(~mst.bvalid | (b_index < n)), Assume(~mst.rvalid | (r_index < n))]

        aw_fire = mst.awvalid & mst.awready
        ar_fire = mst.arvalid & mst.arready
        w_fire = mst.wvalid & mst.wready
        for i, s in enumerate(slaves):
            m.d.comb += [Assume(~s.awvalid | (s.awlen == 0)), Assume(~s.wvalid | s.wlast)]
            s_aw = s.awvalid & s.awready
            s_ar = s.arvalid & s.arready
            s_w = s.wvalid & s.wready
            m.d.comb += [
                Assert(s_aw == (aw_fire & (mst.awid[ID:] == i)), f"AW of master {i} not passed"),
                Assert(~s_aw | ((Cat(getattr(mst, f) for f in _AW)
                                 == Cat(getattr(s, f) for f in _AW))
                                & (mst.awid[:ID] == s.awid)), f"AW of master {i} changed"),
                Assert(s_ar == (ar_fire & (mst.arid[ID:] == i)), f"AR of master {i} not passed"),
                Assert(~s_ar | ((Cat(getattr(mst, f) for f in _AR)
                                 == Cat(getattr(s, f) for f in _AR))
                                & (mst.arid[:ID] == s.arid)), f"AR of master {i} changed"),
                Assert(~s_w | (w_fire & (Cat(mst.wdata, mst.wstrb, mst.wlast)
                                         == Cat(s.wdata, s.wstrb, s.wlast))),
                       f"a W beat of master {i} taken but not passed"),
                Assert(~(b_index == i) | ((s.bvalid == mst.bvalid) & (mst.bready == s.bready)
                                          & (s.bid == mst.bid[:ID]) & (s.bresp == mst.bresp)),
                       f"B for master {i} misrouted"),
                Assert(~(b_index != i) | ~s.bvalid, f"B for another master at master {i}"),
                Assert(~(r_index == i) | ((s.rvalid == mst.rvalid) & (mst.rready == s.rready)
                                          & (Cat(s.rid, s.rdata, s.rresp, s.rlast)
                                             == Cat(mst.rid[:ID], mst.rdata, mst.rresp,
                                                    mst.rlast))),
                       f"R for master {i} misrouted"),
                Assert(~(r_index != i) | ~s.rvalid, f"R for another master at master {i}"),
            ]
        m.d.comb += Assert(w_fire == Cat(s.wvalid & s.wready for s in slaves).any(),
                           "a W beat left without a master's")

        # Liveness: the slave always ready on AW, W and AR; each master offers
        # the W beats of the AWs it had taken (bursts owed: AWs taken minus
        # last W beats taken).
        m.d.comb += [Assume(mst.awready), Assume(mst.wready), Assume(mst.arready)]
        waits = []
        for i, s in enumerate(slaves):
            owed = Signal(3, name=f"bursts_owed{i}")
            m.d.sync += owed.eq(owed + (s.awvalid & s.awready)
                                - (s.wvalid & s.wready & s.wlast))
            m.d.comb += Assume(s.wvalid | (owed == 0))
            for ch, bound, valid, ready in (
                    ("aw", self.aw_bound, s.awvalid, s.awready),
                    ("ar", self.ar_bound, s.arvalid, s.arready),
                    ("w", self.w_bound, s.wvalid & (owed != 0), s.wready)):
                wait = Signal(range(bound + 2), name=f"{ch}_wait{i}")
                m.d.sync += wait.eq(Mux(valid & ~ready, wait + 1, 0))
                m.d.comb += Assert(wait < bound, f"master {i}'s {ch} waited {bound} cycles")
                waits.append((ch, i, wait, bound))
        for _ch, _i, wait, bound in waits:
            m.d.comb += Cover(wait == bound - 1)
        return m


PROOFS = [
    Proof("axi_arbiter", harness(AxiArbiterHarness), mode="bmc", depth=DEPTH, cover_depth=DEPTH,
          reduction=f"{MASTERS} masters, {DATA}-bit data, {ADDR}-bit addresses, {ID}-bit IDs, "
                    f"bursts of at most 2 beats, a W order FIFO of {FIFO}; bounded at {DEPTH} "
                    "cycles, past the covers' longest history"),
]

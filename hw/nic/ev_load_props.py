"""Formal properties of ``EvGenBlock`` (hw/nic/ev_load.py; ``sim.formal`` runs them).

``EvGenHarness`` drives the block's CSR bus freely (any strobe, address and
data in any cycle: register writes, starts, reads) and its ``inject.ready``
freely. Checked, bounded:

- ``inject`` keeps the stream rule (``hw.formal.valid_until_ready``);
- every write it offers lands in an EV table: TX's ``ev_select`` (a QP below
  ``num_qps``, an entry below ``evs_per_qp``) or ``ev_entry`` (a state GOOD or
  DENIED), or reliability's ``ev`` entry of a QP below ``num_qps``, word
  aligned, with ``set_state``; no other register of any block, whatever the
  host writes;
- two writes are taken at least ``WRITE_SPACING`` cycles apart (a reload of
  the spacing one cycle short fails at step 8).

The covers show a run that derives both EVs of a QP and reports them
(``gen_status`` read back: not busy, found 2), a run the generator refuses
(error), and a write held while the interconnect is not ready.

Reduction: 2 QPs x 2 EVs, the smallest NicCore; the block's addresses are
``Cat(entry, qpn)`` of those widths at any size. Bounded, not proven: the
generator's modulo and repeat check take 20 cycles or more per candidate, so
a run is longer than an induction could span.
"""

from amaranth.hdl import Assert, Cover, Elaboratable, Module, Mux, Signal

from hw.formal import Proof, harness, valid_until_ready
from hw.protocol import EvState
from hw.reliability.registers import register_map as rel_register_map
from hw.tx.regs import tx_register_map

from .csr import host_view
from .ev_load import WRITE_SPACING, EvGenBlock

__all__ = ["PROOFS", "EvGenHarness"]

NQ, NE, TX, REL = 2, 2, 1, 3


class EvGenHarness(Elaboratable):
    """See the module docstring. Free inputs: the CSR bus's strobes, address and
    data, and ``inject.ready``."""

    def __init__(self):
        self.w_stb, self.r_stb, self.ready = Signal(), Signal(), Signal()
        self.addr = Signal(5)  # the block's words 0x00..0x1C (and unaligned bytes)
        self.w_data = Signal(32)
        self.inputs = [self.w_stb, self.r_stb, self.ready, self.addr, self.w_data]

    def elaborate(self, platform):
        m = Module()
        tx_map = host_view(tx_register_map(NQ, NE))
        rel_map = host_view(rel_register_map(NQ, NE, 16))
        m.submodules.dut = dut = EvGenBlock(num_qps=NQ, evs_per_qp=NE, tx_map=tx_map,
                                            rel_map=rel_map, tx_block=TX, rel_block=REL)
        csr, inj = dut.csr, dut.inject
        m.d.comb += [csr.w_stb.eq(self.w_stb), csr.r_stb.eq(self.r_stb & ~self.w_stb),
                     csr.addr.eq(self.addr), csr.w_data.eq(self.w_data),
                     inj.ready.eq(self.ready)]
        valid_until_ready(m, inj.valid, inj.ready, inj.payload, dut_drives=True, name="inject")

        p = inj.payload
        sel, entry, ev = tx_map["ev_select"], tx_map["ev_entry"], rel_map["ev"]
        state = p.data[16:18]
        good_or_denied = (state == EvState.GOOD) | (state == EvState.DENIED)
        to_select = (p.block == TX) & (p.addr == sel.offset)
        to_entry = (p.block == TX) & (p.addr == entry.offset)
        to_ev = ((p.block == REL) & (p.addr >= ev.offset)
                 & (p.addr < ev.offset + 4 * NQ * NE) & (p.addr[:2] == 0))
        m.d.comb += [
            Assert(~inj.valid | to_select | to_entry | to_ev,
                   "a write outside the EV tables"),
            Assert(~(inj.valid & to_select) | ((p.data[8:24] < NQ) & (p.data[0:8] < NE)),
                   "ev_select names no entry"),
            Assert(~(inj.valid & (to_entry | to_ev)) | good_or_denied,
                   "an EV entry written neither GOOD nor DENIED"),
            Assert(~(inj.valid & to_ev) | p.data[31], "reliability's entry without set_state"),
        ]
        since = Signal(range(WRITE_SPACING + 1), init=WRITE_SPACING)
        took = inj.valid & inj.ready
        m.d.sync += since.eq(Mux(took, 1, Mux(since == WRITE_SPACING, since, since + 1)))
        m.d.comb += Assert(~took | (since == WRITE_SPACING), "writes closer than WRITE_SPACING")

        # covers: a run's status read back; a write held
        status = dut.register_map["gen_status"].offset
        read_status = Signal()
        m.d.sync += read_status.eq(csr.r_stb & (csr.addr == status))
        found = csr.r_data[8:16]
        m.d.comb += [
            Cover(read_status & ~csr.r_data[0] & ~csr.r_data[1] & (found == NE)),
            Cover(read_status & csr.r_data[1]),
            Cover(inj.valid & ~inj.ready & to_ev),
        ]
        return m


PROOFS = [
    Proof("ev_gen_block", harness(EvGenHarness), mode="bmc", depth=80, cover_depth=70, long=True,
          reduction="2 QPs x 2 EVs; bounded at 80 cycles, past a whole run of two EVs "
                    "(the covers reach one, its status read back, at step 69)"),
]

"""Formal properties of TX's EV choice (hw/tx/ev.py, hw/tx/scheduler.py,
hw/tx/sequencer.py; ``sim.formal`` runs them): TX never sends a packet on an
EV that is not GOOD.

``EvHarness(parts, evs)`` wraps the ``Sequencer`` (``"seq"``), the
``EvTable`` (``"table"``), or the two joined as in ``TxEngine`` (``"both"``:
the sequencer's ``ev`` bus on the table's), in an environment the solver
drives freely within the interfaces' rules:

- ``csr`` (sequencer): any write or read of any address with any data, one
  strobe at most every 3 cycles (``AXI4LiteToCSR`` issues one per 3);
- ``wqe_req.ready``, ``wqe_data`` (any beats, any ``last``), ``retx`` (any
  QPN and PSN), ``ack_update`` (any QPN and PSN), WimmBound's ``at_bound``
  and ``rd_count``: free, the streams under the stream rule;
- ``hdr_desc``, ``pay_desc``, ``sent``: each sink's ``ready``, once high,
  stays high until it takes a transfer (``not full`` of the engine's FIFOs:
  the sequencer checks for room in TAKE or OFFSET and relies on it up to
  EMIT);
- ``update`` (table): any QP, EV index (in range or not) and state, under
  the stream rule;
- the sequencer alone: the table's side of ``ev`` free, ``good`` any bitmap
  in every cycle, ``ready`` once high stays high; the table alone: its CSR
  port free (``csr_we`` at most every 3 cycles, as ``TxCsrDecode`` issues),
  ``good_qp`` and ``val_sel`` free.

Asserted on the sequencer (``"seq"``, ``"both"``), for every data packet
(``sent`` valid without ``op_err``; new, ``retx`` = 0, and retransmitted
alike) whose ``sent`` record is offered at cycle E:

- its ``ev_index`` is GOOD in ``good`` at E - 2, the bitmap the sequencer
  read to choose it (in SEGMENT, 2 cycles before EMIT), and that bitmap is
  its own QP's row (``good_qp`` at E - 3). With ``good`` free in every
  cycle, no other cycle's bitmap would do. So a QP whose bitmap has no GOOD
  EV sends nothing, new or retransmitted;
- its header carries that entry's value (``val_sel`` at E - 1 names the QP
  and EV, ``hdr_desc.ev`` is ``value`` at E);
- ``hdr_desc`` and ``pay_desc`` are offered with it, all three under the
  stream rule.

Asserted on the table alone (``"table"``), against a reference model of its
docstring; assumed of the table in ``"both"`` (the table's own proof is their
guarantee, and the solver cannot check the memories' rows against the
reference to the joined bound). A change is *taken* in the cycle the updater, idle, takes
it: a CSR write (``csr_we`` after ``ready``) waits in a one-entry buffer and
goes first, else an ``update`` (consumed and ignored when its QP or index is
out of range); the updater is then busy 2 cycles.

- ``ready`` rises exactly at ``num_qps`` x 2^ceil(log2 evs) cycles and stays;
  ``update.ready`` exactly while the updater is idle with no CSR write
  waiting;
- ``good`` at t (the row of ``good_qp`` at t - 1) is exactly the GOOD bits
  of the states after every change taken by t - 3 and none taken later: a
  change is visible exactly 3 cycles after it is taken. ``csr_r_state``
  reads the same states with the same latency; ``became_good`` pulses, with
  the QP, 2 cycles after a change to GOOD is taken.

With planes (``EvHarness("table", evs, planes=n)``, the table alone): each
entry's plane is written by a CSR write (``csr_plane``) once the table is
ready, in the write's cycle (its state waits in the buffer), the defaults
being index mod n; ``link_up`` is free. Asserted against the reference:
``good`` is the GOOD bits above and, of those, only the EVs whose plane's link
was up the cycle before (a plane number n or above: down), from the planes
written up to the cycle before; ``csr_r_plane`` reads the entry's plane with
the same latency; ``link_rose`` pulses exactly in a cycle a link comes up.
So TX leaves a plane the cycle after its link goes down and uses a plane the
NIC lacks never. Cover: a link going down while the row read has a GOOD EV.

Asserted on the two joined (``"both"``): the sequencer's properties, and
end to end, through the reference: the EV of every data
packet whose ``sent`` record is offered at E was GOOD in the table's states
after every change taken by E - 5. So a change taken at t binds every packet
whose ``sent`` record comes at t + 5 or later, and no earlier one: a cover
reaches a new packet sent at t + 4 on an EV changed away from GOOD at t. A
CSR write is taken the cycle after its ``csr_we``, or 3 cycles after it (2)
if an update was taken in the strobe's cycle (the cycle before): a cover
reaches a new packet sent 7 cycles after the strobe of a CSR change away from
GOOD of its EV.

Covers (``"seq"``, ``"both"``): a new packet that is its WQE's first
(fetched), a later packet of a part-sent WQE, a retransmission; (``"both"``)
the two races above and a QP that stalls for want of a GOOD EV (a read of
its status shows ``ev_blocked``) and sends a new packet after one of its EVs
became GOOD; (``"table"``) a CSR write that waited for an update's change and
went before the next update offered, a change to GOOD, an update ignored.

What is left to the simulator tests (tests/unit/test_tx_scheduler.py,
tests/hw/test_tx_engine.py ``test_ev_states``, ``test_spreading``): which
GOOD EV is chosen (the next after the cursor, a retransmission's other than
its last), the evenness of the spraying, the values, and the header pipeline
after ``hdr_desc`` (the frame carries the descriptor's value).

Reduction: 2 QPs (rows do not mix); 3 EVs per QP for the sequencer and the
table alone (the next GOOD EV after the cursor can skip one that is not, and
a 2-bit index has an out-of-range value, as any count that is not a power of
two), 2 when joined (the table's defaults take ``num_qps`` x 2^ceil(log2
evs) cycles, which the sequencer waits for: 4 instead of 8, so the covers
are reached within the bound); 16 in-flight PSNs per QP, MTU 256, 512-bit
data (a WQE is one beat), 32-bit addresses, 2 WQEs read ahead per QP (a QP
chained with itself as at the default 4, the prefetch buffer half as deep).
The choice reads the bitmap combinationally (``EvChoice``), registers its
index in SEGMENT and holds it and the QP to EMIT, 2 cycles later; none of it
depends on the widths, the table's depth or the MTU.

Bounded, not unbounded: k-induction would need the sequencer's own
invariants (its FSM against the readies it saw, the in-flight records) and
the table's memories against the reference (a property cannot read their
rows). The bounds: the sequencer's (36) is past its first retransmission
(its covers: a first packet at step 12, a later one at 19, a retransmission
at 24): a new packet's choice meets every bitmap and cursor, and a
retransmission's choice is reached, its EV to avoid then being the cursor (a
retransmission avoiding another EV needs a second packet of its QP first,
beyond the bound; the choice's ``usable`` is a subset of ``good`` whatever it
avoids). The path from the choice to EMIT is the same for every packet. The
joined one (38) likewise: a first packet and the races at steps 14 and 15,
the stall and its unpark at 20, a later packet at 21, a retransmission at 26.
The
table's (24) holds its 8 cycles of defaults and 5 changes after them (a
change takes 3 cycles; the updater's own state, its buffer and busy count,
repeats every 3): each step costs the solver about twice the one before
(the memories' rows against the reference), so more changes are out of
reach. The joined proof assumes the table's properties to step 37; its
covers, reached under that assumption with the real table, show the
assumption holds on those histories.
"""

from amaranth.hdl import Assert, Assume, Cat, Const, Cover, Elaboratable, Module, Mux, Signal

from hw.formal import Proof, harness, valid_until_ready
from hw.protocol import Opcode

from .ev import EvTable, default_ev_plane
from .layouts import EvState
from .regs import QP_BASE, Q
from .sequencer import Sequencer

__all__ = ["PROOFS", "EvHarness"]

NQ = 2
QB = 1
CSR_ADDR_BITS = 13  # 0x1000 + 0x80 x 2 QPs
EV_BLOCKED_BIT = 2  # of a QP's status


def _delay(m, value, cycles, name):
    """``value`` of ``cycles`` cycles before (registers with init 0)."""
    for i in range(cycles):
        d = Signal(len(value), name=f"{name}_d{i + 1}")
        m.d.sync += d.eq(value)
        value = d
    return value


def _good_bits(states, ne):
    """The GOOD bits of one QP's row of reference states (2 bits each, ``ne``)."""
    return Cat(*[states[2 * e : 2 * e + 2] == EvState.GOOD for e in range(ne)])


class EvHarness(Elaboratable):
    """See the module docstring. ``parts``: ``"seq"``, ``"table"`` or
    ``"both"``; ``evs``: EVs per QP. Free inputs: ``inputs``."""

    def __init__(self, parts: str, evs: int, planes: int = 1):
        assert parts in ("seq", "table", "both")
        assert planes == 1 or parts == "table"
        self.parts, self.ne, self.planes = parts, evs, planes
        self.eb = max(1, (evs - 1).bit_length())
        self.seq = self.table = None
        self.inputs = []
        if parts in ("seq", "both"):
            self.seq = s = Sequencer(data_width=512, num_qps=NQ, evs_per_qp=evs, max_mtu=256,
                                     csr_addr_width=CSR_ADDR_BITS, inflight_depth=16,
                                     addr_width=32, wqe_read_ahead=2)
            self.inputs += [
                s.csr.addr, s.csr.w_stb, s.csr.w_data, s.csr.r_stb, s.wqe_req.ready,
                s.wqe_data.valid, s.wqe_data.payload, s.retx.valid, s.retx.payload,
                s.ack_update.valid, s.ack_update.payload, s.hdr_desc.ready, s.pay_desc.ready,
                s.sent.ready, s.wimm.rd_count, s.wimm.at_bound,
            ]
            if parts == "seq":
                self.inputs += [s.ev.csr_r_value, s.ev.csr_r_state, s.ev.good, s.ev.value,
                                s.ev.became_good, s.ev.became_good_qp, s.ev.ready]
        if parts in ("table", "both"):
            self.table = t = EvTable(num_qps=NQ, evs_per_qp=evs, num_planes=planes)
            self.inputs += [t.update.valid, t.update.payload]
            if parts == "table":
                self.inputs += [t.bus.csr_sel, t.bus.csr_we, t.bus.csr_value, t.bus.csr_state,
                                t.bus.good_qp, t.bus.val_sel]
            if planes > 1:
                self.inputs += [t.bus.csr_plane, t.link_up]

    def elaborate(self, platform):
        m = Module()
        seq, table = self.seq, self.table
        if seq is not None:
            m.submodules.seq = seq
            bus = seq.ev
        if table is not None:
            m.submodules.table = table
            bus = table.bus
        if seq is not None and table is not None:
            for name in bus.signature.members:
                if name in ("csr_r_value", "csr_r_state", "good", "value", "became_good",
                            "became_good_qp", "ready"):
                    m.d.comb += getattr(seq.ev, name).eq(getattr(table.bus, name))
                else:
                    m.d.comb += getattr(table.bus, name).eq(getattr(seq.ev, name))

        if seq is not None:
            self._environment(m, seq)
            self._sequencer(m, seq)
        if table is not None:
            ref_row = self._table(m, table)
        if seq is not None and table is not None:
            self._end_to_end(m, seq, table, ref_row)
        return m

    # ---- the sequencer's environment and properties

    def _environment(self, m, seq):
        csr = seq.csr
        # a CSR strobe (read or write) at most every 3 cycles
        stb = csr.w_stb | csr.r_stb
        gap = Signal(2)
        m.d.sync += gap.eq(Mux(stb, 2, Mux(gap != 0, gap - 1, 0)))
        m.d.comb += [Assume(~stb | (gap == 0)), Assume(~(csr.w_stb & csr.r_stb))]
        for name, port in (("wqe_data", seq.wqe_data), ("retx", seq.retx),
                           ("ack_update", seq.ack_update)):
            valid_until_ready(m, port.valid, port.ready, port.payload, dut_drives=False,
                              name=name)
        for name, port in (("hdr_desc", seq.hdr_desc), ("pay_desc", seq.pay_desc),
                           ("sent", seq.sent)):
            valid_until_ready(m, port.valid, port.ready, port.payload, dut_drives=True,
                              name=name)
            room = Signal(name=f"{name}_room")  # ready last cycle, no transfer
            m.d.sync += room.eq(port.ready & ~port.valid)
            m.d.comb += Assume(~room | port.ready)
        if self.table is None:
            up = Signal()
            m.d.sync += up.eq(seq.ev.ready)
            m.d.comb += Assume(~up | seq.ev.ready)

    def _sequencer(self, m, seq):
        bus, sent, hdr = seq.ev, seq.sent, seq.hdr_desc
        data = sent.valid & ~sent.payload.op_err
        m.d.comb += [
            Assert(hdr.valid == data, "hdr_desc is not offered with a data packet's sent"),
            Assert(seq.pay_desc.valid == data, "pay_desc is not offered with hdr_desc"),
        ]
        good2 = _delay(m, bus.good, 2, "good")  # the bitmap read at E - 2
        row2 = _delay(m, bus.good_qp, 3, "good_qp")  # its row (read a cycle before)
        sel1 = _delay(m, bus.val_sel, 1, "val_sel")
        qpn, ev = sent.payload.qpn, sent.payload.ev_index
        ne, eb = self.ne, self.eb
        m.d.comb += [
            Assert(~data | (qpn < NQ), "a packet of a QP out of range"),
            Assert(~data | (row2 == qpn[:QB]),
                   "a packet's EV was chosen from another QP's GOOD bitmap"),
            Assert(~data | ((ev < ne) & good2.bit_select(ev[:eb], 1)),
                   "a packet was sent on an EV not GOOD in the bitmap read 2 cycles before"),
            Assert(~data | (sel1 == Cat(ev[:eb], qpn[:QB])),
                   "the value read for a packet is not its EV's"),
            Assert(~data | (hdr.payload.ev == bus.value),
                   "a packet's header does not carry its EV's value"),
        ]
        self._covers(m, seq, data)

    def _covers(self, m, seq, data):
        sent, hdr = seq.sent, seq.hdr_desc
        new = data & ~sent.payload.retx
        # the first packet of a WQE: a FIRST or ONLY opcode
        op = hdr.payload.opcode
        first = (op == Opcode.WRITE_FIRST) | (op == Opcode.WRITE_ONLY) | (
            op == Opcode.WRITE_ONLY_IMM)
        m.d.comb += [
            Cover(new & first),
            Cover(new & ~first),
            Cover(data & sent.payload.retx),
        ]

    # ---- the table's reference model and properties

    def _table(self, m, table):
        bus, upd = table.bus, table.update
        # the table's own proof asserts its reference; joined, the reference is assumed
        check = Assert if self.seq is None else Assume
        if self.seq is None:
            gap = Signal(2)
            m.d.sync += gap.eq(Mux(bus.csr_we, 2, Mux(gap != 0, gap - 1, 0)))
            m.d.comb += Assume(~bus.csr_we | (gap == 0))
        valid_until_ready(m, upd.valid, upd.ready, upd.payload, dut_drives=False, name="update")

        ne, eb = self.ne, self.eb
        depth = NQ << eb
        count = Signal(range(depth + 1))
        with m.If(count != depth):
            m.d.sync += count.eq(count + 1)
        ready = count == depth
        m.d.comb += check(bus.ready == ready, "ready is not exactly the end of the defaults")

        # reference: states of every slot (2^eb per QP), the CSR buffer, the updater
        states = Signal(2 * (NQ << eb))
        pend = Signal()
        pend_sel = Signal(QB + eb)
        pend_state = Signal(2)
        busy = Signal(2)  # cycles the updater is still busy
        idle = ready & (busy == 0)
        u = upd.payload
        in_range = (u.qpn < NQ) & (u.ev_index < ne)
        take_csr = idle & pend
        take_upd = idle & ~pend & upd.valid
        took = take_csr | (take_upd & in_range)
        sel = Mux(pend, pend_sel, Cat(u.ev_index[:eb], u.qpn[:QB]))
        state = Mux(pend, pend_state, u.state)
        m.d.comb += check(upd.ready == (idle & ~pend),
                           "update is taken other than when the updater is idle and no CSR "
                           "write waits")
        m.d.sync += busy.eq(Mux(took, 2, Mux(busy != 0, busy - 1, 0)))
        with m.If(take_csr):
            m.d.sync += pend.eq(0)
        with m.If(bus.csr_we & ready):
            m.d.sync += [pend.eq(1), pend_sel.eq(bus.csr_sel), pend_state.eq(bus.csr_state)]
        # a change taken at t is applied at the end of t + 2: the states of cycle t + 3
        # have it
        chg_valid = _delay(m, took, 2, "chg_valid")
        chg_sel = _delay(m, sel, 2, "chg_sel")
        chg_state = _delay(m, state, 2, "chg_state")
        with m.If(chg_valid):
            m.d.sync += states.word_select(chg_sel, 2).eq(chg_state)

        row_q = _delay(m, bus.good_qp, 1, "row_q")
        rows = [_good_bits(states[2 * (q << eb) : 2 * ((q + 1) << eb)], ne) for q in range(NQ)]
        ref_row = Mux(row_q, rows[1], rows[0]) if NQ == 2 else rows[0]
        csr_sel1 = _delay(m, bus.csr_sel, 1, "csr_sel")
        good_ok = bus.good == ref_row
        if self.planes > 1:
            ref_row = ref_row & self._planes(m, table, ready, row_q, csr_sel1)
            # the plane rows' read register holds no read before the first cycle
            good_ok = ~self._past | (bus.good == ref_row)
        m.d.comb += [
            check(good_ok,
                   "good is not the GOOD bits of every change taken 3 cycles before or earlier"
                   + (", on a plane whose link was up the cycle before" if self.planes > 1
                      else "")),
            check(bus.csr_r_state == states.word_select(csr_sel1, 2),
                   "csr_r_state is not the state of every change taken 3 cycles before"),
            check(bus.became_good == (chg_valid & (chg_state == EvState.GOOD)),
                   "became_good does not pulse 2 cycles after a change to GOOD is taken"),
            check(~bus.became_good | (bus.became_good_qp == chg_sel[eb:]),
                   "became_good names another QP"),
        ]
        # covers: a CSR write that waited for an update's change and went before the
        # next update offered, a change to GOOD, an update ignored (out of range)
        waited = Signal()
        m.d.sync += waited.eq(Mux(take_csr, 0, waited | (pend & (busy != 0) & upd.valid)))
        m.d.comb += [
            Cover(take_csr & waited & upd.valid),
            Cover(bus.became_good),
            Cover(take_upd & ~in_range),
        ]
        self._took = (took, sel, state)
        return ref_row

    def _planes(self, m, table, ready, row_q, csr_sel1):
        """The planes' reference: each entry's plane, written by a CSR write once the
        table is ready (the defaults: index mod planes), and the links of the cycle
        before; returns the row of ``row_q``'s EVs whose plane's link is up (a plane
        the NIC lacks: down). Asserts ``csr_r_plane`` and ``link_rose``."""
        bus, n, ne, eb = table.bus, self.planes, self.ne, self.eb
        pb = len(bus.csr_plane)
        self._past = past = Signal()  # a cycle has passed: the read registers hold a read
        m.d.sync += past.eq(1)
        planes = Signal(pb * (NQ << eb), init=sum(
            default_ev_plane(i & ((1 << eb) - 1), n) << (pb * i) for i in range(NQ << eb)))
        with m.If(bus.csr_we & ready):
            m.d.sync += planes.word_select(bus.csr_sel, pb).eq(bus.csr_plane)
        links = Signal(n, init=(1 << n) - 1)
        m.d.sync += links.eq(table.link_up)
        live = Signal(ne)
        for e in range(ne):
            plane = planes.word_select(Cat(Const(e, eb), row_q), pb)
            m.d.comb += live[e].eq((plane < n) & links.bit_select(plane[:n.bit_length()], 1))
        m.d.comb += [
            Assert(~past | (bus.csr_r_plane == planes.word_select(csr_sel1, pb)),
                   "csr_r_plane is not the plane of the last write of the entry"),
            Assert(bus.link_rose == (table.link_up & ~links).any(),
                   "link_rose does not pulse as a link comes up"),
            # a link going down with a GOOD EV on its plane in the row read
            Cover((links & ~table.link_up).any() & (bus.good != 0)),
        ]
        return live

    # ---- the two joined

    def _end_to_end(self, m, seq, table, ref_row):
        sent = seq.sent
        data = sent.valid & ~sent.payload.op_err
        ev = sent.payload.ev_index[:self.eb]
        ref2 = _delay(m, ref_row, 2, "ref_row")
        m.d.comb += Assert(~data | ref2.bit_select(ev, 1),
                           "a packet was sent on an EV not GOOD after every change taken 5 "
                           "cycles before")
        new = data & ~sent.payload.retx
        slot = Cat(ev, sent.payload.qpn[:QB])
        # the race: a new packet sent on an EV whose change away from GOOD was taken 4
        # cycles before
        took, sel, state = self._took
        bad4 = _delay(m, took & (state != EvState.GOOD), 4, "bad")
        bad4_sel = _delay(m, sel, 4, "bad_sel")
        m.d.comb += Cover(new & bad4 & (bad4_sel == slot))
        # a CSR write of ev_entry is taken up to 3 cycles after its strobe: a new
        # packet sent 7 cycles after the strobe of a change away from GOOD on its EV
        bus = seq.ev
        csr_bad7 = _delay(m, bus.csr_we & (bus.csr_state != EvState.GOOD), 7, "csr_bad")
        csr_sel7 = _delay(m, bus.csr_sel, 7, "csr_bad_sel")
        m.d.comb += Cover(new & csr_bad7 & (csr_sel7 == slot))
        # the stall: a read of a QP's status shows it parked for want of a GOOD EV, and
        # the QP sends a new packet later
        csr = seq.csr
        status = (csr.addr[7:] == (QP_BASE >> 7)) & (csr.addr[:7] == Q.STATUS)
        read_q = _delay(m, Mux(csr.r_stb & status, Cat(csr.addr[7:7 + QB], 1), 0), 3,
                        "status_read")
        parked = Signal(NQ)  # per QP: a status read showed it parked for want of an EV
        with m.If(read_q[QB] & csr.r_data[EV_BLOCKED_BIT]):
            m.d.sync += parked.bit_select(read_q[:QB], 1).eq(1)
        m.d.comb += Cover(new & parked.bit_select(sent.payload.qpn[:QB], 1))


ENGINE = "smtbmc --syn yices"  # the sequencer's wide control logic, as gates

PROOFS = [
    Proof("tx_ev_table", harness(EvHarness, "table", 3), mode="bmc", depth=24, cover_depth=12,
          engine=ENGINE,
          reduction="2 QPs x 3 EVs (an out-of-range index); bounded at 24 cycles: the "
                    "8 of the defaults and 5 changes after them"),
    Proof("tx_ev_table_planes", harness(EvHarness, "table", 3, planes=3), mode="bmc", depth=16,
          cover_depth=12, engine=ENGINE,
          reduction="2 QPs x 3 EVs on 3 planes (plane numbers 3..7: planes the NIC lacks); "
                    "bounded at 16 cycles: the 8 of the defaults and 8 after them, in which "
                    "plane writes and link changes bind whatever the states do (2 state "
                    "changes fit; 18 cycles take the solver 7 times as long)"),
    Proof("tx_ev_sequencer", harness(EvHarness, "seq", 3), mode="bmc", depth=36, cover_depth=36,
          engine=ENGINE, long=True,
          reduction="2 QPs x 3 EVs, 16 PSNs in flight, MTU 256, 512-bit data, 32-bit "
                    "addresses, 2 WQEs read ahead; every input free, good any bitmap each "
                    "cycle; bounded at 36 cycles: a retransmission's choice at 24 (a new "
                    "packet's choice meets every bitmap and cursor)"),
    Proof("tx_ev_send", harness(EvHarness, "both", 2), mode="bmc", depth=38, cover_depth=38,
          engine=ENGINE, long=True,
          reduction="as tx_ev_sequencer, 2 EVs per QP (the table's defaults in 4 cycles); "
                    "bounded at 38 cycles: a retransmission at 26, the races at 14 and 15, "
                    "the stall and unpark at 20"),
]

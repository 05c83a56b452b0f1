"""Per-QP entropy-value (EV) table: values, states and the GOOD bitmap."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..bits import bit_at, onehot
from ..protocol import MAX_PLANES, PLANE_BITS
from .layouts import EvState, EvUpdate

__all__ = ["EvTable", "EvBusSignature", "default_ev_value", "default_ev_plane"]


class EvBusSignature(wiring.Signature):
    """The EV table's port to the sequencer, drawn from the sequencer's side."""

    def __init__(self, num_qps: int, evs_per_qp: int, ev_width: int = 16):
        self.num_qps, self.evs_per_qp, self.ev_width = num_qps, evs_per_qp, ev_width
        qp_bits = max(1, (num_qps - 1).bit_length())
        ev_bits = max(1, (evs_per_qp - 1).bit_length())
        super().__init__(
            {
                "csr_sel": Out(qp_bits + ev_bits),
                "csr_we": Out(1),
                "csr_value": Out(ev_width),
                "csr_state": Out(2),
                "csr_plane": Out(PLANE_BITS),
                "csr_r_value": In(ev_width),
                "csr_r_state": In(2),
                "csr_r_plane": In(PLANE_BITS),
                "good_qp": Out(qp_bits),
                "good": In(evs_per_qp),
                "val_sel": Out(qp_bits + ev_bits),
                "value": In(ev_width),
                "plane": In(PLANE_BITS),
                "became_good": In(1),
                "became_good_qp": In(qp_bits),
                "link_rose": In(1),
                "ready": In(1),
            }
        )

    def __eq__(self, other):
        return isinstance(other, EvBusSignature) and (
            (self.num_qps, self.evs_per_qp, self.ev_width)
            == (other.num_qps, other.evs_per_qp, other.ev_width))


def default_ev_value(index: int) -> int:
    """EV value an entry holds until the controller writes one: distinct
    UDP source ports 0xC000 + index, inside the dynamic port range."""
    return 0xC000 + index


def default_ev_plane(index: int, num_planes: int) -> int:
    """Plane an entry is bound to until the controller writes one: EV ``index``
    of every QP on plane ``index mod num_planes``, so that a QP's EVs cover
    every plane in turn."""
    return index % num_planes


class EvTable(wiring.Component):
    """EV values and states of every QP, and each QP's GOOD bitmap.

    Entries are addressed flat as ``Cat(ev_index, qp)``. Storage: values
    (``ev_width`` bits, ``hw.protocol.EV_WIDTHS``) and states (2 bits) per
    entry, and one row of ``evs_per_qp`` GOOD bits per QP, all block or
    distributed RAM, so 256 QPs x 256 EVs fits in BRAM.

    With ``num_planes`` above 1 each entry also holds its plane (the MAC port
    its packets leave on, ``PLANE_BITS`` bits, all of them stored: a plane the
    NIC lacks is kept as written, and the plane split drops and counts its
    frames rather than sending them on another plane); with one plane the
    field is not stored and reads 0.

    Ports (``bus``, an ``EvBusSignature``, and ``update``):
    - ``csr_sel``/``csr_we``/``csr_value``/``csr_state``/``csr_plane``: the
      controller's write of one entry; ``csr_r_value``/``csr_r_state``/
      ``csr_r_plane`` read ``csr_sel`` back, 1 cycle later.
    - ``update`` (stream of ``EvUpdate`` from reliability): state changes.
      Out-of-range QPs or indices are consumed and ignored.
    - ``good_qp`` -> ``good``: a QP's GOOD bitmap, 1 cycle later.
    - ``val_sel`` -> ``value``, ``plane``: an entry's value and plane, 1 cycle
      later.
    - ``became_good``/``became_good_qp``: a one-cycle pulse when an entry
      of that QP is written GOOD (a QP stalled for want of GOOD EVs retries).
    - ``link_up`` (with planes): In(num_planes), NicCore's. ``good`` holds
      only the GOOD entries whose plane's link is up (a plane the NIC lacks:
      down), so TX stops spraying on a plane as its link goes down and
      resumes as it comes back, without changing any EV's state;
      ``link_rose`` pulses when a link comes up (every QP stalled for want
      of GOOD EVs retries). The links are registered here: ``good`` follows
      a change of ``link_up`` 1 cycle later.

    - ``ready``: low while the table is being set to its defaults after
      reset (every entry GOOD, value ``default_ev_value``, plane
      ``default_ev_plane``), one entry per
      cycle: ``num_qps`` x 2^ceil(log2(evs_per_qp)) cycles. CSR writes and
      updates are not taken meanwhile.

    A state change (CSR or ``update``) is a read-modify-write of the QP's
    bitmap row: it is visible to ``good`` (and ``csr_r_state``) exactly 3
    cycles after it is taken. A CSR write waits in a one-entry buffer and goes
    before ``update``: it is taken the cycle after ``csr_we``, or 3 cycles
    after it (2) if an ``update`` was taken in ``csr_we``'s cycle (the cycle
    before). CSR writes must be at least 3 cycles apart (AXI4LiteToCSR issues
    one per 3). Throughput: one state change per 3 cycles (hw/tx/ev_props.py
    proves this timing against a reference model).
    """

    def __init__(self, num_qps: int = 16, evs_per_qp: int = 16, num_planes: int = 1,
                 ev_width: int = 16):
        if not isinstance(num_planes, int) or not 1 <= num_planes <= MAX_PLANES:
            self._MustUse__silence = True  # never elaborated: no "never used" warning
            raise ValueError(f"num_planes must be in 1..{MAX_PLANES}, not {num_planes!r}")
        self.num_qps, self.evs_per_qp, self.num_planes = num_qps, evs_per_qp, num_planes
        self.ev_width = ev_width
        self.qp_bits = max(1, (num_qps - 1).bit_length())
        self.ev_bits = max(1, (evs_per_qp - 1).bit_length())
        members = {
            "bus": In(EvBusSignature(num_qps, evs_per_qp, ev_width)),
            "update": In(stream.Signature(EvUpdate)),
        }
        if num_planes > 1:
            members["link_up"] = In(num_planes, init=(1 << num_planes) - 1)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        nq, ne = self.num_qps, self.evs_per_qp
        depth = nq << self.ev_bits
        values = [default_ev_value(i & ((1 << self.ev_bits) - 1)) & 0xFFFF for i in range(depth)]
        m.submodules.values = values_mem = Memory(shape=self.ev_width, depth=depth, init=values)
        m.submodules.states = states_mem = Memory(shape=2, depth=depth, init=[])
        planes = self.num_planes > 1
        if planes:
            m.submodules.planes = planes_mem = Memory(
                shape=PLANE_BITS, depth=depth,
                init=[default_ev_plane(i & ((1 << self.ev_bits) - 1), self.num_planes)
                      for i in range(depth)])
        m.submodules.good_rows = good_mem = Memory(shape=ne, depth=nq, init=[(1 << ne) - 1] * nq)

        def entry_ports(mem, csr_in, csr_out, seq_out):
            """A per-entry memory's ports: the controller's write and read-back
            at ``csr_sel``, the sequencer's read at ``val_sel``."""
            w = mem.write_port()
            r_csr = mem.read_port(transparent_for=(w,))
            r_seq = mem.read_port()
            m.d.comb += [
                w.addr.eq(self.bus.csr_sel), w.data.eq(csr_in), w.en.eq(self.bus.csr_we),
                r_csr.addr.eq(self.bus.csr_sel), csr_out.eq(r_csr.data),
                r_seq.addr.eq(self.bus.val_sel), seq_out.eq(r_seq.data),
            ]
            return w

        vw = entry_ports(values_mem, self.bus.csr_value, self.bus.csr_r_value, self.bus.value)
        init_index = Signal(range(depth + 1))
        initialized = Signal()

        if planes:
            pw = entry_ports(planes_mem, self.bus.csr_plane, self.bus.csr_r_plane,
                             self.bus.plane)
            # the INIT pass's plane: the entry's index mod num_planes, counted
            init_plane = Signal(PLANE_BITS)

        sw = states_mem.write_port()
        s_csr = states_mem.read_port(transparent_for=(sw,))
        m.d.comb += [s_csr.addr.eq(self.bus.csr_sel), self.bus.csr_r_state.eq(s_csr.data)]

        gw = good_mem.write_port()
        g_seq = good_mem.read_port(transparent_for=(gw,))
        g_rmw = good_mem.read_port(transparent_for=(gw,))
        m.d.comb += g_seq.addr.eq(self.bus.good_qp)
        if planes:
            live = self._live_rows(m, init_index, initialized)
            m.d.comb += self.bus.good.eq(g_seq.data & live)
        else:
            m.d.comb += self.bus.good.eq(g_seq.data)

        pend = Signal()
        pend_sel = Signal.like(self.bus.csr_sel)
        pend_state = Signal(2)
        upd_qp = Signal(self.qp_bits)
        upd_ev = Signal(self.ev_bits)
        upd_state = Signal(2)
        m.d.comb += g_rmw.addr.eq(upd_qp)

        m.d.comb += self.bus.ready.eq(initialized)
        with m.FSM(init="INIT"):
            with m.State("INIT"):
                # a soft reset must not leave the previous run's states behind
                m.d.comb += [
                    vw.addr.eq(init_index),
                    vw.data.eq(0xC000 | init_index[: self.ev_bits]),
                    vw.en.eq(1),
                    sw.addr.eq(init_index),
                    sw.data.eq(EvState.GOOD),
                    sw.en.eq(1),
                    gw.addr.eq(init_index),
                    gw.data.eq((1 << ne) - 1),
                    gw.en.eq(init_index < nq),
                ]
                m.d.sync += init_index.eq(init_index + 1)
                if planes:
                    m.d.comb += [pw.addr.eq(init_index), pw.data.eq(init_plane), pw.en.eq(1)]
                    wrap = (init_plane == self.num_planes - 1) | \
                        (init_index[: self.ev_bits] == (1 << self.ev_bits) - 1)
                    m.d.sync += init_plane.eq(Mux(wrap, 0, init_plane + 1))
                with m.If(init_index == depth - 1):
                    m.d.sync += initialized.eq(1)
                    m.next = "IDLE"
            with m.State("IDLE"):
                with m.If(pend):
                    m.d.sync += [
                        pend.eq(0),
                        upd_ev.eq(pend_sel[: self.ev_bits]),
                        upd_qp.eq(pend_sel[self.ev_bits :]),
                        upd_state.eq(pend_state),
                    ]
                    m.next = "READ"
                with m.Else():
                    u = self.update.payload
                    m.d.comb += self.update.ready.eq(1)
                    with m.If(self.update.valid & (u.qpn < nq) & (u.ev_index < ne)):
                        m.d.sync += [
                            upd_qp.eq(u.qpn),
                            upd_ev.eq(u.ev_index),
                            upd_state.eq(u.state),
                        ]
                        m.next = "READ"
            with m.State("READ"):
                m.next = "WRITE"
            with m.State("WRITE"):
                row = Signal(ne)
                m.d.comb += row.eq(g_rmw.data)
                m.d.comb += row.bit_select(upd_ev, 1).eq(upd_state == EvState.GOOD)
                m.d.comb += [
                    gw.addr.eq(upd_qp),
                    gw.data.eq(row),
                    gw.en.eq(1),
                    sw.addr.eq(Cat(upd_ev, upd_qp)),
                    sw.data.eq(upd_state),
                    sw.en.eq(1),
                    self.bus.became_good.eq(upd_state == EvState.GOOD),
                    self.bus.became_good_qp.eq(upd_qp),
                ]
                m.next = "IDLE"

        with m.If(self.bus.csr_we & initialized):
            m.d.sync += [
                pend.eq(1),
                pend_sel.eq(self.bus.csr_sel),
                pend_state.eq(self.bus.csr_state),
            ]
        return m

    def _live_rows(self, m, init_index, initialized):
        """The row of ``good_qp``'s EVs whose plane's link is up, aligned with
        ``good`` (1 cycle after ``good_qp``), from a copy of the planes kept
        per QP row (written with the entries: a write with one plane's bits
        enabled), and ``link_rose``."""
        nq, ne, n = self.num_qps, self.evs_per_qp, self.num_planes
        default_row = sum(default_ev_plane(i, n) << (PLANE_BITS * i) for i in range(ne))
        rows = Memory(shape=PLANE_BITS * ne, depth=nq, init=[default_row] * nq)
        m.submodules.plane_rows = rows
        rw = rows.write_port(granularity=PLANE_BITS)
        rr = rows.read_port(transparent_for=(rw,))
        ev_sel = self.bus.csr_sel[: self.ev_bits]
        with m.If(~initialized):  # the INIT pass writes every row's defaults
            m.d.comb += [rw.addr.eq(init_index), rw.data.eq(default_row),
                         rw.en.eq(Mux(init_index < nq, (1 << ne) - 1, 0))]
        with m.Else():
            m.d.comb += [rw.addr.eq(self.bus.csr_sel[self.ev_bits:]),
                         rw.data.eq(self.bus.csr_plane.replicate(ne)),
                         rw.en.eq(Mux(self.bus.csr_we, onehot(ev_sel, ne), 0))]
        m.d.comb += rr.addr.eq(self.bus.good_qp)
        # registered: the port's input fans out to every EV's plane select
        links = Signal(n, init=(1 << n) - 1)  # as link_up resets
        m.d.sync += links.eq(self.link_up)
        m.d.comb += self.bus.link_rose.eq((self.link_up & ~links).any())
        live = Signal(ne)
        for i in range(ne):
            plane = rr.data[PLANE_BITS * i: PLANE_BITS * (i + 1)]
            m.d.comb += live[i].eq(bit_at(links, plane))  # a plane >= n: 0, down
        return live

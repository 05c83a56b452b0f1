"""The PSN window's tables: the in-flight table (accepted packets between the
window check and the B verdict of their write)."""

from amaranth.hdl import Cat, Const, Module, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from hw.protocol import PSN_BITS

from .layouts import InFlightRow

__all__ = ["InFlightTable"]

# The duplicate match is registered in this many parts of the (QP, PSN) key,
# each at most 2-3 LUT levels from the request and the entries.
MATCH_PARTS = 4


class InFlightTable(wiring.Component):
    """``slots`` in-flight slots: a packet accepted by the window check is in
    one from then until the B verdict of its write.

    Interface
    ---------
    ``request``     In(InFlightRow): the request being checked (its QP and
                    PSN are matched and entered; the whole row is written).
    ``hit``         Out(1): a valid slot holds ``request``'s QP and PSN, from
                    the match registered the cycle before (combinational AND
                    of the parts per slot, OR over the slots).
    ``free_slot``   Out(tag): the lowest free slot (combinational).
    ``free_onehot`` Out(slots): the same, one-hot (combinational; none set
                    when all are in use).
    ``any_free``    Out(1): a slot is free, registered from the slots and
                    ``enter`` (a slot entered counts as used a cycle before
                    it is valid).
    ``enter``       In(slots): one-hot, the slot taken by ``request`` this
                    cycle: its valid bit and key registers load.
    ``write``       In(1), ``write_slot`` In(tag): write ``request`` into the
                    slot's row (LUT RAM).
    ``release``     In(1), ``release_slot`` In(tag): the slot is free from
                    the next cycle (an ``enter`` of the same slot wins).
    ``read_slot``   In(tag), ``read_row`` Out(InFlightRow): the slot's row
                    (combinational read: the B verdict's packet).

    Latency: an entry is valid, and matched by ``hit``, two cycles after its
    ``enter`` (one to load, one to register the match); a release shows in
    ``free_slot`` the cycle after and in ``any_free`` the cycle after that.
    Throughput: one entry and one release per cycle.
    """

    def __init__(self, *, qp_bits=4, slots=8):
        self.qp_bits = qp_bits
        self.slots = slots
        self.tag_bits = exact_log2(slots)
        super().__init__({
            "request": In(InFlightRow(qp_bits)),
            "hit": Out(1),
            "free_slot": Out(self.tag_bits),
            "free_onehot": Out(slots),
            "any_free": Out(1),
            "enter": In(slots),
            "write": In(1),
            "write_slot": In(self.tag_bits),
            "release": In(1),
            "release_slot": In(self.tag_bits),
            "read_slot": In(self.tag_bits),
            "read_row": Out(InFlightRow(qp_bits)),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.slots
        rq = self.request
        key = data.StructLayout({"qp": unsigned(self.qp_bits), "psn": unsigned(PSN_BITS)})
        entries = [Signal(key, name=f"inflight{i}") for i in range(n)]
        valid = Signal(n)

        # The rows, read by slot (the B verdict's tag) and written at the slot
        # the check picked.
        m.submodules.rows = rows = Memory(shape=InFlightRow(self.qp_bits), depth=n, init=[])
        rd = rows.read_port(domain="comb")
        wr = rows.write_port()
        m.d.comb += [
            rd.addr.eq(self.read_slot),
            self.read_row.eq(rd.data),
            wr.addr.eq(self.write_slot),
            wr.data.eq(rq),
            wr.en.eq(self.write),
        ]

        for i in reversed(range(n)):
            with m.If(~valid[i]):
                m.d.comb += self.free_slot.eq(i)
        m.d.comb += self.free_onehot.eq(
            Cat(~valid[i] & valid[:i].all() if i else ~valid[0] for i in range(n)))
        m.d.sync += self.any_free.eq(~(valid | self.enter).all())

        # The match, registered in MATCH_PARTS parts of the key (cut in parts
        # within a bit of each other's width; the slot's valid in the last).
        key_bits = self.qp_bits + PSN_BITS
        cuts = [key_bits * k // MATCH_PARTS for k in range(MATCH_PARTS + 1)]
        match = [Signal(n, name=f"flight_m{k}") for k in range(MATCH_PARTS)]
        for i, e in enumerate(entries):
            key_e, key_rq = Cat(e.qp, e.psn), Cat(rq.qp, rq.psn)
            for k in range(MATCH_PARTS):
                eq = key_e[cuts[k] : cuts[k + 1]] == key_rq[cuts[k] : cuts[k + 1]]
                if k == MATCH_PARTS - 1:
                    eq = eq & valid[i]
                m.d.sync += match[k][i].eq(eq)
        hit = Const(0, 1)
        for i in range(n):
            hit = hit | Cat(part[i] for part in match).all()
        m.d.comb += self.hit.eq(hit)

        for i in range(n):
            with m.If(self.release & (self.release_slot == i)):
                m.d.sync += valid[i].eq(0)
        for i, e in enumerate(entries):
            with m.If(self.enter[i]):
                m.d.sync += [valid[i].eq(1), e.qp.eq(rq.qp), e.psn.eq(rq.psn)]
        return m

"""The PSN window's tables: the in-flight table (accepted packets between the
window check and the B verdict of their write) and the pending-completion
table (LAST packets until the cumulative PSN passes them, and which of them an
advance passed, earliest first)."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from hw.bits import popcount, two_or_more
from hw.protocol import PSN_BITS

from .layouts import InFlightRow, PendingCqe, PendingEntry

__all__ = ["InFlightTable", "PendingTable"]

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
    ``busy``        Out(1): a slot is in use, registered the same way (a
                    release shows in it two cycles later).
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
            "busy": Out(1),
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
        m.d.sync += [
            self.any_free.eq(~(valid | self.enter).all()),
            self.busy.eq((valid | self.enter).any()),
        ]

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


class PendingTable(wiring.Component):
    """``entries`` pending completions, one table for all QPs: a LAST packet
    from its acceptance until the cumulative PSN passes it, and which entries
    an advance passed, selected earliest PSN first.

    Interface
    ---------
    ``request``      In(PendingEntry): the packet being checked (``qp``,
                     ``psn``, ``imm``: WITH_IMMEDIATE, ``tag``: its in-flight
                     slot; ``valid`` and ``in_flight`` are not read).
    ``request_le``   In(sack_bits): the positions at or below ``request.psn``
                     in its bitmap word (registered by the engine).
    ``row``          In(PendingCqe): what the packet's completion reports.
    ``free_slot``    Out: the lowest free entry; ``any_free`` Out(1): one is
                     free; ``two_free`` Out(1): two or more are;
                     ``free_onehot`` Out(entries): the lowest free entry
                     one-hot (all combinational).
    ``imm_count``    Out: the valid WITH_IMMEDIATE entries of ``request.qp``
                     (combinational; the engine registers it).
    ``enter``        In(entries): one-hot, the entry ``request`` takes this
                     cycle: its fields, its bitmap positions and its PSN order
                     against the other entries load (the order from the
                     comparison registered in the cycle before).
    ``write``        In(1), ``write_slot`` In: write ``row`` as the entry's
                     completion row (LUT RAM).
    ``written``      In(1), ``tag`` In: the write of in-flight slot ``tag``
                     has its B verdict: the entry of that slot is no longer in
                     flight.
    ``lost``         In(1): the write of slot ``tag`` failed: its entry (one
                     in flight in that slot) is registered, and dropped on
                     ``drop_lost`` (the cycle after).
    ``drop_qp``      In(1): drop every entry of ``qp`` (an init of the QP).
    ``qp``, ``epsn``  In: the QP being advanced and its expected PSN.
    ``holes``        In(sack_bits): the clear bits of the bitmap word being
                     advanced over, from ``epsn`` on.
    ``restart``      In(1): a new advance: no entry passed yet.
    ``pass_word``    In(1): the advance is at ``epsn``'s word: every entry of
                     ``qp`` in it with no hole before it is passed.
    ``complete``     In(1): the selected entry completes (it is dropped and
                     no longer passed).
    ``sel_any``      Out(1): an entry is passed; ``sel_more`` Out(1): two or
                     more are; ``sel_row`` Out(PendingCqe): the completion row
                     of the passed entry with the earliest PSN.

    Ordering: entries passed in one advance lie within it, shorter than the
    bitmap ring, so the sign of their ring-width-plus-one-bit PSN difference
    orders them; each pair's order is set when the later of the two enters.
    An entry of ``qp`` lies from ``epsn`` to less than ``mpr_max`` PSNs after
    it and the ring is a word longer than ``mpr_max``, so it is in
    ``epsn``'s word at or after ``epsn`` exactly when it is in ``epsn``'s ring
    word.

    Latency: whether an entry lies in ``epsn``'s word, and whether a hole of
    ``holes`` lies before it (per group of 8 bits), are registered from
    ``qp``, ``epsn`` and ``holes`` (one cycle before ``pass_word`` uses
    them); the selection (``sel_any``, ``sel_more``, ``sel_row``) is
    registered from the passed entries, a cycle after they change. The
    request's PSN order against the entries is registered every cycle (the
    entries do not change between the check and ``enter``). Throughput: one
    operation per cycle.
    """

    def __init__(self, *, qp_bits=4, tag_bits=3, entries=8, sack_bits=64, ring_words=16):
        self.qp_bits, self.tag_bits, self.entries = qp_bits, tag_bits, entries
        self.sack_bits, self.ring_words = sack_bits, ring_words
        super().__init__({
            "request": In(PendingEntry(qp_bits, tag_bits)),
            "request_le": In(sack_bits),
            "row": In(PendingCqe()),
            "free_slot": Out(range(entries)),
            "any_free": Out(1),
            "two_free": Out(1),
            "free_onehot": Out(entries),
            "imm_count": Out(range(entries + 1)),
            "enter": In(entries),
            "write": In(1),
            "write_slot": In(range(entries)),
            "written": In(1),
            "tag": In(tag_bits),
            "lost": In(1),
            "drop_lost": In(1),
            "drop_qp": In(1),
            "qp": In(qp_bits),
            "epsn": In(PSN_BITS),
            "holes": In(sack_bits),
            "restart": In(1),
            "pass_word": In(1),
            "complete": In(1),
            "sel_any": Out(1),
            "sel_more": Out(1),
            "sel_row": Out(PendingCqe()),
        })

    def elaborate(self, platform):
        m = Module()
        P, W = self.entries, self.sack_bits
        word_bits = exact_log2(W)
        ring_word_bits = exact_log2(self.ring_words)
        rq = self.request

        def word_index(psn):
            return psn[word_bits : word_bits + ring_word_bits]

        pend = [Signal(PendingEntry(self.qp_bits, self.tag_bits), name=f"pending{i}")
                for i in range(P)]
        m.submodules.rows = rows = Memory(shape=PendingCqe(), depth=P, init=[])
        rd = rows.read_port(domain="comb")
        wr = rows.write_port()
        m.d.comb += [wr.addr.eq(self.write_slot), wr.data.eq(self.row), wr.en.eq(self.write)]

        for i in reversed(range(P)):
            with m.If(~pend[i].valid):
                m.d.comb += [self.free_slot.eq(i), self.any_free.eq(1)]
        m.d.comb += [
            self.two_free.eq(two_or_more([~e.valid for e in pend])),
            self.free_onehot.eq(Cat(~pend[i].valid & Cat(e.valid for e in pend[:i]).all() if i
                                    else ~pend[0].valid for i in range(P))),
            self.imm_count.eq(popcount([e.valid & e.imm & (e.qp == rq.qp) for e in pend])),
        ]

        # ---- dropping entries: a failed write (registered, then applied), an
        # init of the QP, a completion; an entry that enters wins.
        lost_hit = Signal(P)  # the entry of the slot whose write failed
        with m.If(self.lost):
            for i, e in enumerate(pend):
                m.d.sync += lost_hit[i].eq(e.in_flight & (e.tag == self.tag))
        with m.If(self.drop_lost):
            for i, e in enumerate(pend):
                with m.If(lost_hit[i]):
                    m.d.sync += e.valid.eq(0)
        with m.If(self.drop_qp):
            for e in pend:
                with m.If(e.qp == self.qp):
                    m.d.sync += e.valid.eq(0)
        with m.If(self.written):
            for e in pend:
                with m.If(e.tag == self.tag):
                    m.d.sync += e.in_flight.eq(0)

        # ---- PSN order: before[a, b] (a > b): entry a's PSN is before entry
        # b's, from the sign of the PSN difference in ring bits plus one.
        order_bit = word_bits + ring_word_bits
        rq_before = Signal(P)  # request.psn is before entry k's PSN
        for k, e in enumerate(pend):
            m.d.sync += rq_before[k].eq((rq.psn - e.psn)[order_bit])
        before = {}
        for a in range(P):
            for b in range(a):
                before[a, b] = Signal(name=f"pend_lt{a}_{b}")

        # ---- the entries an advance passes: entry i is passed in the word
        # being advanced over when it lies in that word at or after epsn
        # (in_word) and no bit of the word from epsn up to it is clear
        # (holes holds only positions from epsn on, so the entry's positions
        # at or below its PSN in its word select them).
        passed = Signal(P)
        in_word = [Signal(name=f"pend_en{i}") for i in range(P)]
        at_or_below = [Signal(W, name=f"pend_le{i}") for i in range(P)]
        for i, e in enumerate(pend):
            m.d.sync += in_word[i].eq(
                e.valid & (e.qp == self.qp) & (word_index(e.psn) == word_index(self.epsn)))
        # Whether a hole lies before entry i, registered per group of 8 bits
        # (2 LUT levels), so the update of ``passed`` ORs a few flip-flops
        # rather than a W-bit AND-OR tree behind the holes' fan-out
        # (docs/timing.md#rx-window).
        group_bits = min(3, word_bits)
        hole_before = [Signal(W >> group_bits, name=f"pend_blk{i}") for i in range(P)]
        for i in range(P):
            m.d.sync += hole_before[i].eq(Cat(
                (self.holes[g << group_bits : (g + 1) << group_bits]
                 & at_or_below[i][g << group_bits : (g + 1) << group_bits]).any()
                for g in range(W >> group_bits)))

        # ---- the passed entry with the earliest PSN, registered from passed
        sel_oh_c = Signal(P)
        for i in range(P):
            terms = [passed[i]]
            for j in range(P):
                if j < i:
                    terms.append(~passed[j] | before[i, j])
                elif j > i:
                    terms.append(~passed[j] | ~before[j, i])
            m.d.comb += sel_oh_c[i].eq(Cat(*terms).all())
        sel_slot_c = Const(0, range(P))
        for i in range(P):
            sel_slot_c = sel_slot_c | Mux(sel_oh_c[i], i, 0)
        sel_oh = Signal(P)
        sel_slot = Signal(range(P))
        m.d.sync += [
            sel_oh.eq(sel_oh_c),
            sel_slot.eq(sel_slot_c),
            self.sel_any.eq(passed.any()),
            self.sel_more.eq(two_or_more([passed[i] for i in range(P)])),
        ]
        m.d.comb += [rd.addr.eq(sel_slot), self.sel_row.eq(rd.data)]

        with m.If(self.restart):
            m.d.sync += passed.eq(0)
        with m.If(self.pass_word):
            for i in range(P):
                with m.If(in_word[i] & ~hole_before[i].any()):
                    m.d.sync += passed[i].eq(1)
        with m.If(self.complete):
            m.d.sync += passed.eq(passed & ~sel_oh)
            for i, e in enumerate(pend):
                with m.If(sel_oh[i]):
                    m.d.sync += e.valid.eq(0)

        # ---- entering: the request's fields, positions and order
        for i, e in enumerate(pend):
            with m.If(self.enter[i]):
                m.d.sync += [
                    e.valid.eq(1),
                    e.qp.eq(rq.qp),
                    e.psn.eq(rq.psn),
                    e.in_flight.eq(1),
                    e.imm.eq(rq.imm),
                    e.tag.eq(rq.tag),
                    at_or_below[i].eq(self.request_le),
                ]
                for b in range(i):
                    m.d.sync += before[i, b].eq(rq_before[b])
                for a in range(i + 1, P):
                    m.d.sync += before[a, i].eq(~rq_before[a])
        return m

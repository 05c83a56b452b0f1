"""Bit-vector building blocks shared by the gateware: priority (lowest-set-bit)
trees, population counts, select trees, shifts and compares.

There is one definition of each shape here; a block needs its own variant only
when it says why. All functions build combinational expressions; the two that
take a ``Module`` name their result (a named signal stops an expression being
copied once per bit of a later slice).

Why explicit trees: a priority chain over ``n`` bits is ``n`` LUT levels, a tree
``log2(n)``; and yosys's ``share`` pass merges shifter and compare cells used in
different FSM states into one behind multiplexers driven by the state, which
lengthens every path through them. The trees below are plain AND/OR/MUX logic
that synthesis keeps as written.
"""

from amaranth.hdl import Cat, Const, Mux, Signal, Value

__all__ = [
    "lowest_set", "lowest_index", "popcount", "two_or_more",
    "one_hot_select", "index_select", "onehot",
    "shift_right", "bit_at", "below_const", "greater_than_const", "all_below",
    "lane_operand",
]


def lowest_set(value, width=None, m=None, name="low"):
    """``(any, index)``: whether any of the low ``width`` bits of ``value`` (all
    of them by default) is set, and the index of the lowest set one, as a tree
    of 2:1 choices (``log2(width)`` levels). ``index`` is meaningful only with
    ``any``.

    Each node's ``any`` is read three times by the level above, so as plain
    expressions the tree's cells repeat with every level (and a leaf of an
    operator's result repeats that operator: a ``width``-bit cell per bit).
    Given a module ``m``, the input and every level are named signals
    (``name``), and the tree is built once: do so for vectors of more than a
    few dozen bits."""
    value = Value.cast(value)
    width = len(value) if width is None else width
    if m is not None:
        bits = Signal(width, name=f"{name}_in")
        m.d.comb += bits.eq(value[:width])
        value = bits
    nodes = [(value[i], Const(0, 0)) for i in range(width)]
    level = 0
    while len(nodes) > 1:
        nxt = []
        for k in range(0, len(nodes), 2):
            if k + 1 == len(nodes):
                a_any, a_idx = nodes[k]
                nxt.append((a_any, Cat(a_idx, Const(0, 1))))
                continue
            (a_any, a_idx), (b_any, b_idx) = nodes[k], nodes[k + 1]
            if len(a_idx) == 0:  # two single bits: no index below this level
                nxt.append((a_any | b_any, ~a_any))
            else:
                nxt.append((a_any | b_any, Cat(Mux(a_any, a_idx, b_idx), ~a_any)))
        level += 1
        if m is not None:  # every index of a level has the level's width
            iw = len(nxt[0][1])
            anys = Signal(len(nxt), name=f"{name}_any{level}")
            idxs = Signal(len(nxt) * iw, name=f"{name}_idx{level}")
            m.d.comb += [anys.eq(Cat(*[a for a, _ in nxt])), idxs.eq(Cat(*[i for _, i in nxt]))]
            nxt = [(anys[k], idxs[k * iw : (k + 1) * iw]) for k in range(len(nxt))]
        nodes = nxt
    any_set, idx = nodes[0]
    if width == 1:
        idx = Const(0, 1)
    return any_set, idx


def lowest_index(m, value, width, name):
    """The index of the lowest set bit of ``value``'s low ``width`` bits as a
    named signal of ``range(max(width, 2))`` (meaningful only when one is set)."""
    idx = Signal(range(max(width, 2)), name=name)
    m.d.comb += idx.eq(lowest_set(value, width, m, name)[1])
    return idx


def lane_operand(m, value, data_width, name):
    """``value``, an operand that a beat's per-lane selects read once per lane:
    above 64 bits of beat a named signal driven by it, so that the Verilog
    states it once rather than once per lane; at 64 bits the expression
    itself, which keeps the 64-bit netlist, the board's, as it was placed and
    routed (docs/timing.md: each change to it is a new placement draw)."""
    if data_width <= 64:
        return value
    sig = Signal(len(Value.cast(value)), name=name)
    m.d.comb += sig.eq(value)
    return sig


def popcount(bits):
    """How many of ``bits`` are set, as a balanced adder tree (depth log2 of
    the count)."""
    nodes = list(bits)
    while len(nodes) > 1:
        nodes = [nodes[k] + nodes[k + 1] if k + 1 < len(nodes) else nodes[k]
                 for k in range(0, len(nodes), 2)]
    return nodes[0]


def two_or_more(bits):
    """Whether at least two of ``bits`` are set (a tree of (any, two) pairs)."""
    nodes = [(b, Const(0, 1)) for b in bits]
    while len(nodes) > 1:
        nxt = []
        for k in range(0, len(nodes), 2):
            if k + 1 == len(nodes):
                nxt.append(nodes[k])
                continue
            (a1, a2), (b1, b2) = nodes[k], nodes[k + 1]
            nxt.append((a1 | b1, a2 | b2 | (a1 & b1)))
        nodes = nxt
    return nodes[0][1]


def one_hot_select(onehot, values):
    """``values[i]`` where bit i of ``onehot`` is set, as an AND-OR (0 if no
    bit is set; the OR of several if several are): two LUT levels for up to
    three inputs, where an index compare and a priority chain make more."""
    terms = [Value.cast(v) & onehot[i].replicate(len(Value.cast(v)))
             for i, v in enumerate(values)]
    result = terms[0]
    for t in terms[1:]:
        result = result | t
    return result


def index_select(values, index, *, exact=False):
    """``values[index]`` (a list of values, ``index`` within range) as a tree of
    2:1 multiplexers, one level per bit of ``index`` from the lowest: no compare
    of ``index`` with each position (an ``Array`` lookup's decode, a LUT whose
    output fans out to every bit selected) comes first, and the tree maps to
    LUT4s and the slices' PFUMX/L6MUX muxes. ``exact=True``: there must be
    exactly ``2 ** len(index)`` values (every index a value of its own)."""
    values = list(values)
    if exact and len(values) != 1 << len(Value.cast(index)):
        raise ValueError(f"{len(values)} values for a {len(Value.cast(index))}-bit select")
    for bit in Value.cast(index):
        values = values + values[-1:] * (len(values) % 2)
        values = [Mux(bit, values[i + 1], values[i]) for i in range(0, len(values), 2)]
    return values[0]


def onehot(index, width):
    """``Const(1, width) << index`` as ``width`` compares."""
    return Cat(*[Value.cast(index) == i for i in range(width)])


def shift_right(value, amount):
    """``value >> amount`` at ``value``'s width, the largest step first: when
    only the low bits of the result are used, each step needs fewer bits than
    the one before."""
    value = Value.cast(value)
    w = len(value)
    for k in reversed(range(len(Value.cast(amount)))):
        n = 1 << k
        shifted = Cat(value[n:], Const(0, n))[:w] if n < w else Const(0, w)
        value = Mux(amount[k], shifted, value)
    return value


def bit_at(value, index):
    """``value.bit_select(index, 1)``, through ``shift_right``."""
    return shift_right(value, index)[0]


def below_const(value, bound, width):
    """``value < bound`` for a bound of at most ``2**width``: a zero test on the
    bits above ``width`` and a compare of the low bits only (not a full-width
    subtraction)."""
    value = Value.cast(value)
    return (value[width:] == 0) & (value[:width] < bound)


def greater_than_const(value, bound):
    """``value > bound`` for a constant ``bound``, as AND/OR logic from the
    lowest bit up (a compare cell would map to a carry chain, deeper here)."""
    greater = Const(0, 1)
    for k, bit in enumerate(Value.cast(value)):
        greater = (bit & greater) if (bound >> k) & 1 else (bit | greater)
    return greater if bound >> len(Value.cast(value)) == 0 else Const(0, 1)


def all_below(n, width):
    """A ``width``-bit mask with bits ``0 .. n-1`` set (``n`` a value)."""
    return Cat(*[greater_than_const(n, i) for i in range(width)])

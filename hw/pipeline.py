"""Register slices: pipeline stages for valid/ready interfaces, for timing.

``StreamRegister(shape)``
    One stage of ``amaranth.lib.stream`` (``i`` in, ``o`` out). Every output
    (``o.valid``, ``o.payload``, ``i.ready``) comes from a flip-flop, so no
    combinational path crosses the stage in either direction: the logic in
    front of it and behind it time separately. A two-entry skid buffer: the
    output register, and a second register that catches the beat accepted in
    the cycle the sink stalls.

    Latency: 1 cycle. Throughput: 1 transfer per cycle, with or without
    back-pressure (no bubble when ``o.ready`` toggles). Cost: 2 x width + 2
    flip-flops and a 2:1 mux per bit, two flip-flops for ``i.ready``, and 2
    flip-flops more per ``SKID_GROUP_BITS`` (36) bits past the first 36: a
    wide stage keeps its valid flags once per group of bits, so no enable or
    select net spans it.

``StreamRegister(shape, hold=True)``
    A stage for a stream of at most one transfer every two cycles: one
    register that loads only while empty and empties when taken. ``i.ready``
    is its empty flag, and its data's clock enables are copies of that flag
    (one per 72 bits), so the sink's ``o.ready`` reaches flip-flops' next
    values only, never a clock enable or a multiplexer of the data: for a
    consumer placed far from the stage (the RX validator's ACK records into
    reliability; docs/timing.md#stream-stages). Latency 1 cycle; throughput 1 transfer per 2
    cycles; width + 1 flip-flops and one per 72 bits.

``AXIStreamRegister(data_width, user_width)``
    The same stage for ``AXIStreamSignature`` (tdata/tkeep/tlast/tuser).

``forward_register(m, ...)``
    A stage that registers the forward direction only: ``o.valid`` and the
    data from flip-flops, each data bit loaded straight from its input (one
    flip-flop per bit and no multiplexer, so a block RAM's output, 4 ns
    clock-to-output on the ECP5, reaches one flip-flop and no logic);
    ``i.ready`` is ``o.ready | ~o.valid`` (combinational, one LUT). Put it
    behind a block-RAM read whose data leaves its block: its data has no
    reset and one enable, so on the board hw/board/outreg.py makes it the
    block RAM's own output register. Latency: 1 cycle.
    Throughput: 1 transfer per cycle while ``o.ready`` holds.

``AXI4RegisterSlice(addr_width, data_width, id_width)``
    A ``StreamRegister`` on each of the five AXI4 channels (AW, W, B, AR, R)
    between ``s_axi`` (towards the master) and ``m_axi`` (towards the
    slave). Latency 1 cycle per channel; bursts, IDs and ordering pass
    unchanged.

``AXIRegisterSlice(signature)``
    The same for any AXI-style signature whose members are named by channel
    (``aw*``, ``w*``, ``b*``, ``ar*``, ``r*``), e.g. ``AXI4LiteSignature``.

``OneHotFSM(m, states, init, implicit=None)``
    A state machine with one flip-flop per state (``st``, a record of one
    bit per name), for control logic that must meet timing: "in state X"
    is a flip-flop, not a decode of a binary state register, so the clock
    enables and selects that depend on it have no logic in front. The rule:
    ``m.FSM`` unless a state is itself the enable or select of a datapath
    register (or of a wide net); then ``OneHotFSM``. Written as ``m.FSM``:
    ``with fsm.State(name):`` opens a state's block (a plain ``m.If`` on its
    bit), ``fsm.next = name`` in it clears that bit and sets ``name``'s the
    next cycle (a state whose block takes no ``next`` stays), and
    ``fsm.ongoing(name)`` is the state's bit. ``next`` in a ``State`` block
    is the only way to write a transition. Unlike ``m.FSM``, two
    transitions taken in one cycle would both happen (two bits set), so
    ``next`` checks at elaboration that each of a state's transitions sits
    in a separate branch of one ``m.If``/``m.Elif``/``m.Else`` chain or
    ``m.Switch`` as every other transition of the state (a transition
    enclosing another, or two in sibling ``m.If``s, raises
    ``TransitionConflict``, naming both lines). The blocks are ``m.If``s
    in order, so an assignment made in every cycle goes before them.
    ``implicit`` names a state without a flip-flop: in it while no other
    bit is set (an idle state read in a few places only).
    ``sum_of_products=True`` makes each bit's next value ``bit & ~leave |
    enter``, of flags the transitions raise (no priority of the blocks'
    order in front of the flip-flop; the same cycles).
    Transitions under conditions that exclude each other by a rule the
    check cannot see (bits of a one-hot vector, flags registered from
    exclusive cases) go in ``with fsm.OneOf() as when:``, each under its own
    ``with when(cond):`` (a plain ``m.If``; no priority between them, so no
    logic is added): transitions in different ``when`` blocks of one
    ``OneOf`` are taken as exclusive, and under ``block_invariants()`` the
    simulator checks each cycle that at most one of the conditions holds.
    ``track=(name, ...)`` follows the transitions into and out of those
    states: ``fsm.entering(name)``/``fsm.leaving(name)`` are 1 in a cycle
    whose transition enters/leaves the state (its next value changes), and
    ``fsm.copy(name, tag)`` is a ``state_copy`` of it named
    ``{fsm name}_{name}_{tag}`` (a flip-flop equal to the state's, the
    enable of one group of a wide register's bits; see ``state_copy``).
    Under ``hw.formal.block_invariants()`` (simulator tests and proofs) every machine
    also asserts, each cycle, that its vector is one-hot.

``state_copy(m, enter, leave, name, init=0)``, ``load_in_groups(m, pairs, make_copy, bits=64)``
    Register replication for fan-out, the project's one idiom for it: copies
    of a one-hot state's flip-flop, each the enable of one group of at most
    ``bits`` bits of a wide register. One flip-flop as the enable of hundreds
    of flip-flops is a net whose routing alone eats most of a cycle
    (docs/timing.md#reliability-core has the measurements). A copy
    is set by the transitions into the state and cleared by those out of it,
    so its next value is a function of itself and synthesis keeps it apart
    (a copy loaded from the state's own flip-flop would be merged back into
    it). The stream stages above replicate their valid flags the same way,
    one per group of data bits (``SKID_GROUP_BITS``, ``hold_register``'s
    ``group``). A block that needs a copy cites this section rather than
    re-explaining it.

``BlockRamFIFO(width, depth)``
    ``amaranth.lib.fifo.SyncFIFOBuffered`` (same ports, latency and
    throughput) whose storage carries ``ram_style = "block"``, so yosys puts
    it in block RAM (DP16KD on the ECP5) even when it is shallow: a 16-deep
    FIFO of 700-bit records is 175 LUT-RAM cells (700 LUT positions with
    their write logic) or 20 block RAMs, and the board has block RAMs to
    spare and LUTs to none. The read data then comes from the block RAM's
    output (3-4 ns clock-to-out on the ECP5): keep the logic behind it short.
    One more input, ``r_free`` (0 if unused): set, it promises that the
    reader takes ``r_data`` in the next cycle whatever ``r_en`` is then (a
    register of its own behind ``r_data`` that will be empty), so the block
    RAM's read enable is one LUT of two flip-flops of the FIFO and ``r_en``.
    ``write_guard=False``: the writer promises ``w_en`` only while ``w_rdy``
    (it counts the room itself), so ``w_en`` is the block RAMs' write enable
    as it is, with no LUT of ``w_rdy`` in front of that wide net.

``unchecked_read_port(m, memory)``
    A synchronous read port (``addr``, ``en``, ``data``: Amaranth's
    ``read_port(domain="sync")`` with its cycle behaviour) for a memory whose
    reads never need the data of a write to the same address in the same
    cycle. The memory must carry the ``no_rw_check`` attribute. Amaranth's
    synchronous port asks for the old data on such a collision, which a
    DP16KD's two ports do not give, so yosys delays every write by a cycle
    and adds a bypass: a flip-flop and a LUT per bit, the LUT behind the
    block RAM's output. Built as an asynchronous port and a register,
    yosys folds both into the block RAM and applies ``no_rw_check`` (its
    ``memory_dff`` pass reads the attribute; a port that is synchronous
    from the start never passes through it). The data read in a cycle that
    also writes its address is undefined.
"""

import sys
from contextlib import contextmanager

from amaranth.hdl import Cat, Module, Mux, Shape, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.axi import AXI4Signature
from hw.bits import two_or_more
from hw.formal import checking, invariant
from hw.stream import AXIStreamSignature

__all__ = ["AXI4RegisterSlice", "AXIRegisterSlice", "AXIStreamRegister", "BlockRamFIFO",
           "OneHotFSM", "StreamRegister", "TransitionConflict",
           "forward_register", "load_in_groups", "registered_product", "saturating_increment",
           "skid", "state_copy", "unchecked_read_port"]


# Bits of a skid stage per copy of its valid flags: each copy selects and
# enables this many data bits (about 2 x 36 mux and enable sinks), so no single
# flip-flop or clock enable spans a wide stage.
SKID_GROUP_BITS = 36


# The operand width one ECP5 MULT18X18D multiplies unsigned (18 bits signed).
DSP_SLICE_BITS = 17


def registered_product(m: Module, a, b, name: str, drop: int = 0) -> Signal:
    """``a`` x ``b`` (unsigned) in two registered stages, valid 2 cycles after its
    operands: the products of the operands' 17-bit slices, each pair on one
    MULT18X18D, then their sum. A DSP's output and a wide adder after it do not
    fit one 125 MHz cycle on the ECP5. With ``drop``, the sum is registered
    without its ``drop`` low bits (``(a x b) >> drop``: truncated, none kept
    unread)."""
    a, b = Value.cast(a), Value.cast(b)
    parts = []
    for i, lo_a in enumerate(range(0, len(a), DSP_SLICE_BITS)):
        for j, lo_b in enumerate(range(0, len(b), DSP_SLICE_BITS)):
            sa, sb = a[lo_a:lo_a + DSP_SLICE_BITS], b[lo_b:lo_b + DSP_SLICE_BITS]
            part = Signal(len(sa) + len(sb), name=f"{name}_part{i}_{j}")
            m.d.sync += part.eq(sa * sb)
            parts.append((lo_a + lo_b, part))
    total = Signal(len(a) + len(b) - drop, name=name)
    m.d.sync += total.eq(sum(part << lo for lo, part in parts) >> drop)
    return total


def skid(m: Module, i_valid, i_ready, i_data, o_valid, o_ready, o_data, name: str):
    """Builds the skid buffer of ``StreamRegister`` in ``m`` between flat
    signals: ``i_ready``, ``o_valid`` and ``o_data`` are driven here
    (``i_ready`` and ``o_valid`` combinationally from flip-flops, ``o_data``
    from a flip-flop).

    A stage wider than ``SKID_GROUP_BITS`` keeps its two valid flags once per
    group of that many data bits: a group's output enable (``o_ready`` or its
    output empty), its output mux select and its spare's enable come from its
    own copies, so each is a net of a few dozen sinks placed by its bits,
    not one net across the whole stage. ``i_ready`` comes from one more copy
    of the two flags. Each copy's next value is a function of itself (the
    output flag's enable is its own value), so synthesis keeps the copies
    apart; all copies of a flag always hold the same value."""
    width = len(i_data)
    out_data = Signal(width, name=f"{name}_data")
    spare_data = Signal(width, name=f"{name}_spare_data")

    def flags(suffix):
        """A copy of the two valid flags (the output's and the spare's), and
        the output's enable (``o_ready`` or the output empty) from it."""
        out_valid = Signal(name=f"{name}_valid{suffix}")
        spare_valid = Signal(name=f"{name}_spare_valid{suffix}")
        load = Signal(name=f"{name}_load{suffix}")
        m.d.comb += load.eq(o_ready | ~out_valid)
        with m.If(load):
            # The output register takes the spare beat first, else the input.
            m.d.sync += [out_valid.eq(spare_valid | i_valid), spare_valid.eq(0)]
        with m.Elif(i_valid):
            # The sink stalls: the beat accepted this cycle waits in the spare
            # (a full spare accepts none, and stays full).
            m.d.sync += spare_valid.eq(1)
        return out_valid, spare_valid, load

    # i_ready from a copy of the flags of its own, which drives nothing else:
    # the producer's logic behind it sits in another block, and the copy can
    # be placed there, away from this stage's data selects.
    ready_copy = flags("_ready")
    first = flags("")
    m.d.comb += [o_valid.eq(first[0]), o_data.eq(out_data), i_ready.eq(~ready_copy[1])]
    copies = [ready_copy, first]
    for lo in range(0, width, SKID_GROUP_BITS):
        hi = min(lo + SKID_GROUP_BITS, width)
        group = flags(f"_{lo // SKID_GROUP_BITS}") if lo else first
        if lo:
            copies.append(group)
        _, spare_valid, load = group
        # The spare's data register follows the input while the spare is empty,
        # so its clock enable is one flip-flop (~spare_valid) rather than a
        # decode of i_valid and o_ready: a wide stage's enables are a wide fan-out.
        with m.If(~spare_valid):
            m.d.sync += spare_data[lo:hi].eq(i_data[lo:hi])
        with m.If(load):
            m.d.sync += out_data[lo:hi].eq(Mux(spare_valid, spare_data[lo:hi], i_data[lo:hi]))
    for out_valid, spare_valid, _ in copies:
        invariant(m, (out_valid == first[0]) & (spare_valid == first[1]),
                  f"skid {name}: the copies of its valid flags disagree")
    # a full spare waits behind a full output
    invariant(m, ~first[1] | first[0], f"skid {name}: the spare is full, the output empty")


def forward_register(m: Module, i_valid, i_ready, i_data, o_valid, o_ready, o_data, name: str):
    """Builds the stage of the module docstring's ``forward_register`` in ``m``
    between flat signals: ``i_ready`` (combinational), ``o_valid`` and
    ``o_data`` (flip-flops) are driven here."""
    out_valid = Signal(name=f"{name}_valid")
    # no reset: behind a block RAM on the board, hw/board/outreg.py makes this
    # register the RAM's output register (one enable, no reset)
    out_data = Signal(len(i_data), name=f"{name}_data", reset_less=True)
    load = Signal()
    m.d.comb += [load.eq(o_ready | ~out_valid), i_ready.eq(load),
                 o_valid.eq(out_valid), o_data.eq(out_data)]
    with m.If(load):
        m.d.sync += [out_valid.eq(i_valid), out_data.eq(i_data)]


def hold_register(m: Module, i_valid, i_ready, i_data, o_valid, o_ready, o_data, name: str,
                  group: int = 72):
    """Builds the stage of the module docstring's ``StreamRegister(shape,
    hold=True)`` in ``m`` between flat signals: ``i_ready`` (``~o_valid``),
    ``o_valid`` and ``o_data`` are flip-flops. The data loads only while the
    stage is empty, each group of at most ``group`` bits under its own copy
    of the empty flag; ``o_ready`` reaches the flags' next values only. The
    data has no reset (it is read only with ``o_valid``): behind a block RAM
    on the board, hw/board/outreg.py makes it the RAM's output register."""
    width = len(i_data)
    out_valid = Signal(name=f"{name}_valid")
    out_data = Signal(width, name=f"{name}_data", reset_less=True)
    m.d.comb += [i_ready.eq(~out_valid), o_valid.eq(out_valid), o_data.eq(out_data)]
    m.d.sync += out_valid.eq(Mux(out_valid, ~o_ready, i_valid))
    for lo in range(0, width, group):
        full = Signal(name=f"{name}_full{lo // group}", attrs={"keep": 1})
        m.d.sync += full.eq(Mux(full, ~o_ready, i_valid))
        invariant(m, full == out_valid, f"hold register {name}: a copy of its full flag differs")
        with m.If(~full):
            m.d.sync += out_data[lo : lo + group].eq(i_data[lo : lo + group])


def state_copy(m, enter, leave, name, init=0):
    """A copy of a one-hot state's flip-flop (reset value ``init``, the state's):
    set by ``enter`` (the transitions into the state, looked at outside it) and
    cleared by ``leave`` (the transitions out of it, looked at in it), so that it
    equals the state's flip-flop in every cycle. Its next value is a function of
    itself: a copy whose next value were the state flip-flop's would be merged back
    into it by synthesis."""
    copy = Signal(init=init, name=name)
    m.d.sync += copy.eq(Mux(copy, ~Value.cast(leave), enter))
    return copy


def load_in_groups(m, pairs, make_copy, bits=64):
    """``target.eq(source)`` for each ``(target, source)`` of ``pairs``, in groups of
    at most ``bits`` bits, each group under its own state copy ``make_copy(k)``."""
    dst = Cat(*[t for t, _ in pairs])
    srcs = []
    for t, s in pairs:  # each source at its target's width, as ``t.eq(s)`` takes it
        srcs.append(Signal(len(Value.cast(t))))
        m.d.comb += srcs[-1].eq(s)
    src = Cat(*srcs)
    for k, lo in enumerate(range(0, len(dst), bits)):
        with m.If(make_copy(k)):
            m.d.sync += dst[lo : lo + bits].eq(src[lo : lo + bits])


class TransitionConflict(SyntaxError):
    """Two transitions out of one ``OneHotFSM`` state that can fire in the same cycle."""


def _branch_path(m: Module, outer: int):
    """The branches enclosing the caller in ``m`` below control depth
    ``outer``: one ``(construct, branch index)`` per ``m.If`` chain or
    ``m.Switch`` (the construct is Amaranth's record of it, shared by all its
    branches; the index counts the branches closed before the open one)."""
    path = []
    for depth in range(outer, m.domain._depth):
        kind, ctrl = m._ctrl_stack[depth]
        index = {"If": lambda c: len(c["bodies"]),
                 "Switch": lambda c: len(c["cases"])}.get(kind, lambda c: None)(ctrl)
        path.append((ctrl, index))
    return path


def _exclusive(a, b, one_of):
    """Whether two branch paths can never both be taken in one cycle: they
    part in two branches of one If/Elif/Else chain or of one Switch (whose
    first matching case alone is taken), or in two ``when`` blocks of one
    ``OneOf`` (``one_of``: id of an If chain -> (the chain, its OneOf)). A
    path that contains the other, or that parts from it at two separate
    constructs otherwise, is not."""
    for (ca, ia), (cb, ib) in zip(a, b, strict=False):  # to the shorter path
        if ca is not cb:
            ra, rb = one_of.get(id(ca)), one_of.get(id(cb))
            return ra is not None and rb is not None and ra[1] is rb[1]
        if ia != ib:
            return ia is not None and ib is not None
    return False


class OneHotFSM:
    """See the module docstring."""

    def __init__(self, m: Module, states, init: str, name: str = "st", *, implicit=None,
                 sum_of_products=False, track=()):
        if init not in states:
            raise ValueError(f"OneHotFSM {name!r}: init {init!r} is not one of the states {states}")
        if implicit is not None and implicit not in states:
            raise ValueError(f"OneHotFSM {name!r}: implicit {implicit!r} is not one of the "
                             f"states {states}")
        self._m, self._name, self._implicit = m, name, implicit
        bits = [n for n in states if n != implicit]
        self.st = Signal(data.StructLayout({n: 1 for n in bits}),
                         init={} if init == implicit else {init: 1}, name=name)
        for n in track:
            if n not in bits:
                raise ValueError(f"OneHotFSM {name!r}: track {n!r} is not one of the states "
                                 f"with a flip-flop {bits}")
        self._init = init
        self._checked = None  # (state, control depth of its block) inside State()
        self._taken = {}  # state -> [(target, branch path, source location)]
        self._one_of = {}  # id of a OneOf's If chain -> (the chain, its OneOf)
        self._entering = {n: Signal(name=f"enter_{n}") for n in track}
        self._leaving = {n: Signal(name=f"leave_{n}") for n in track}
        self._enter = self._leave = None
        if sum_of_products:
            self._enter = {n: Signal(name=f"{name}_enter_{n}") for n in bits}
            self._leave = {n: Signal(name=f"{name}_leave_{n}") for n in bits}
            m.d.sync += [self.st[n].eq((self.st[n] & ~self._leave[n]) | self._enter[n])
                         for n in bits]
        if checking():
            vector = [self.st[n] for n in bits]
            one = ~two_or_more(vector)
            if implicit is None:
                one = one & Cat(*vector).any()
            invariant(m, one, f"OneHotFSM {name}: state vector not one-hot")

    def ongoing(self, name: str):
        """1 in state ``name`` (its flip-flop; for the implicit state, none set)."""
        if name == self._implicit:
            return ~Value.cast(self.st).any()
        return self.st[name]

    def _tracked(self, name: str):
        if name not in self._entering:
            raise ValueError(f"OneHotFSM {self._name!r}: state {name!r} is not tracked "
                             f"(track={tuple(self._entering)})")

    def entering(self, name: str):
        """1 in a cycle whose transition enters tracked state ``name``."""
        self._tracked(name)
        return self._entering[name]

    def leaving(self, name: str):
        """1 in a cycle whose transition leaves tracked state ``name``."""
        self._tracked(name)
        return self._leaving[name]

    def copy(self, name: str, tag):
        """A ``state_copy`` of tracked state ``name``'s flip-flop, named
        ``{fsm name}_{name}_{tag}``: a new flip-flop at each call."""
        self._tracked(name)
        return state_copy(self._m, self._entering[name], self._leaving[name],
                          f"{self._name}_{name}_{tag}", init=int(name == self._init))

    @contextmanager
    def OneOf(self):
        """Yields ``when``: ``with when(cond):`` opens ``m.If(cond)``, whose
        transitions exclude those of the other ``when`` blocks of this
        ``OneOf`` (the caller's promise that at most one ``cond`` holds in a
        cycle, which ``hw.formal.block_invariants()`` checks in simulation). For use
        in a ``State`` block; a ``when`` block is a plain ``m.If``."""
        if self._checked is None:
            raise SyntaxError(f"OneHotFSM {self._name!r}: OneOf outside a State block")
        m, depth, region, conds = self._m, self._m.domain._depth, object(), []

        @contextmanager
        def when(cond):
            if m.domain._depth != depth:
                raise SyntaxError(f"OneHotFSM {self._name!r}: a OneOf's when() must sit "
                                  f"directly in the OneOf block")
            with m.If(cond):
                chain = m._ctrl_stack[depth][1]
                self._one_of[id(chain)] = (chain, region)
                yield
            conds.append(cond)

        yield when
        if checking() and len(conds) > 1:
            invariant(m, ~two_or_more(conds),
                      f"OneHotFSM {self._name}: two conditions of one OneOf hold")

    @contextmanager
    def State(self, name: str):
        """Opens state ``name``'s block, as ``m.State``: the transitions
        (``next``) taken in it are checked to exclude each other."""
        if self._checked is not None:
            raise SyntaxError(f"OneHotFSM {self._name!r}: State({name!r}) inside "
                              f"State({self._checked[0]!r})")
        with self._m.If(self.ongoing(name)):
            self._checked = (name, self._m.domain._depth - 1)
            try:
                yield
            finally:
                self._checked = None

    @property
    def next(self):
        raise AttributeError("OneHotFSM.next can only be assigned (fsm.next = 'STATE')")

    @next.setter
    def next(self, name: str):
        """``fsm.next = name`` in a ``State`` block: the transition to ``name``
        (the state itself: stay), refused when another transition of the
        state can fire in the same cycle."""
        if self._checked is None:
            raise SyntaxError(f"OneHotFSM {self._name!r}: next = {name!r} outside a State block")
        state, depth = self._checked
        frame = sys._getframe(1)
        where = f"{frame.f_code.co_filename}:{frame.f_lineno}"
        path = _branch_path(self._m, depth)
        for target, other, other_where in self._taken.setdefault(state, []):
            if target != name and not _exclusive(path, other, self._one_of):
                raise TransitionConflict(
                    f"OneHotFSM {self._name!r}: state {state} goes to {target} ({other_where}) "
                    f"and to {name} ({where}) in the same cycle, which would leave two state "
                    f"bits set (or lose the stay); put the transitions in separate branches of "
                    f"one m.If/m.Elif/m.Else chain or m.Switch")
        self._taken[state].append((name, path, where))
        self._emit(state, name)

    def _emit(self, state: str, name: str):
        """The transition from ``state`` to ``name``."""
        if name not in self.st.shape().members and name != self._implicit:
            raise ValueError(f"OneHotFSM {self._name!r}: no state {name!r}")
        if name == state:
            return
        if name in self._entering:
            self._m.d.comb += self._entering[name].eq(1)
        if state in self._leaving:
            self._m.d.comb += self._leaving[state].eq(1)
        if self._enter is not None:
            if state != self._implicit:
                self._m.d.comb += self._leave[state].eq(1)
            if name != self._implicit:
                self._m.d.comb += self._enter[name].eq(1)
            return
        if state != self._implicit:
            self._m.d.sync += self.st[state].eq(0)
        if name != self._implicit:
            self._m.d.sync += self.st[name].eq(1)


class StreamRegister(wiring.Component):
    """See the module docstring."""

    def __init__(self, shape, *, hold=False):
        self.shape, self.hold = shape, hold
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape))})

    def elaborate(self, platform):
        m = Module()
        width = Shape.cast(self.shape).width
        i_flat, o_flat = Signal(width), Signal(width)
        m.d.comb += [i_flat.eq(Value.cast(self.i.payload)), Value.cast(self.o.payload).eq(o_flat)]
        build = hold_register if self.hold else skid
        build(m, self.i.valid, self.i.ready, i_flat, self.o.valid, self.o.ready, o_flat, "stage")
        return m


class AXIStreamRegister(wiring.Component):
    """See the module docstring."""

    def __init__(self, data_width=64, user_width=1):
        sig = AXIStreamSignature(data_width, user_width)
        super().__init__({"s_axis": In(sig), "m_axis": Out(sig)})

    def elaborate(self, platform):
        m = Module()
        s, o = self.s_axis, self.m_axis
        i_flat = Cat(s.tdata, s.tkeep, s.tlast, s.tuser)
        o_flat = Signal(len(i_flat))
        m.d.comb += Cat(o.tdata, o.tkeep, o.tlast, o.tuser).eq(o_flat)
        skid(m, s.tvalid, s.tready, i_flat, o.tvalid, o.tready, o_flat, "axis")
        return m


class AXIRegisterSlice(wiring.Component):
    """See the module docstring."""

    def __init__(self, signature):
        self._sig = signature
        super().__init__({"s_axi": In(signature), "m_axi": Out(signature)})

    def elaborate(self, platform):
        m = Module()
        s, mm = self.s_axi, self.m_axi
        members = {name for name, _ in self._sig.members.items()}
        for ch, forward in (("aw", True), ("w", True), ("ar", True), ("b", False), ("r", False)):
            fields = sorted(n for n in members
                            if n.startswith(ch) and n not in (f"{ch}valid", f"{ch}ready"))
            src, dst = (s, mm) if forward else (mm, s)
            i_flat = Cat(*(getattr(src, f) for f in fields))
            o_flat = Signal(len(i_flat), name=f"{ch}_out")
            m.d.comb += Cat(*(getattr(dst, f) for f in fields)).eq(o_flat)
            skid(m, getattr(src, f"{ch}valid"), getattr(src, f"{ch}ready"), i_flat,
                 getattr(dst, f"{ch}valid"), getattr(dst, f"{ch}ready"), o_flat, ch)
        return m


class AXI4RegisterSlice(AXIRegisterSlice):
    """See the module docstring."""

    def __init__(self, addr_width=64, data_width=64, id_width=4):
        super().__init__(AXI4Signature(addr_width, data_width, id_width))


class BlockRamFIFO(wiring.Component):
    """See the module docstring: ``SyncFIFOBuffered``'s ports (``w_data``,
    ``w_en``, ``w_rdy``, ``w_level``, ``r_data``, ``r_en``, ``r_rdy``,
    ``r_level``, ``level``) and behaviour, ``depth`` >= 2 entries (one is the
    output register), and ``r_free``: ``r_data`` is taken in a cycle with
    ``r_en`` or ``r_free`` set in the cycle before. The storage (``depth`` -
    1 entries) is read through
    ``unchecked_read_port``, whose register is the output register: the
    memory carries ``ram_style`` and ``no_rw_check`` (a read never hits the
    entry being written: the FIFO reads only entries written in an earlier
    cycle), so yosys adds no read-during-write bypass, which would cost a
    flip-flop and a LUT per bit. ``r_data`` has no reset (it is read only
    with ``r_rdy``). ``write_guard=False`` leaves ``w_rdy`` out of the write
    (see the module docstring).
    """

    def __init__(self, *, width: int, depth: int, ram_style: str = "block",
                 write_guard: bool = True):
        if ram_style not in ("block", "distributed"):
            raise ValueError(f"ram_style must be 'block' or 'distributed', not {ram_style!r}")
        if not isinstance(depth, int) or depth < 2:
            raise ValueError(f"depth must be an integer of at least 2, not {depth!r}")
        self.width, self.depth, self.ram_style = width, depth, ram_style
        self.write_guard = write_guard
        super().__init__({
            "w_data": In(width), "w_en": In(1), "w_rdy": Out(1),
            "w_level": Out(range(depth + 1)),
            "r_data": Out(width), "r_en": In(1), "r_rdy": Out(1), "r_free": In(1),
            "r_level": Out(range(depth + 1)),
            "level": Out(range(depth + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        inner_depth = self.depth - 1
        inner_level = Signal(range(inner_depth + 1))
        # ``inner_level != 0`` and ``!= inner_depth`` as flip-flops of their
        # own: they are in the read enable (the block RAM's output-register
        # clock enable) and the write enable, so each is one LUT of
        # flip-flops and the other side's handshake.
        inner_r_rdy = Signal()
        inner_w_rdy = Signal(init=1)
        m.d.comb += [
            self.w_rdy.eq(inner_w_rdy),
            self.level.eq(inner_level + self.r_rdy),
            self.w_level.eq(self.level),
            self.r_level.eq(self.level),
        ]
        # (without the guard, a write while full is the writer's error)
        do_write = (self.w_rdy & self.w_en) if self.write_guard else self.w_en
        # The storage is read when it has an entry and the output register is
        # empty or taken: ``r_en``, or ``r_free`` of the cycle before
        # (``free_q``). ``out_free`` (the output register empty or promised
        # free) is registered from the next values, so the block RAM's read
        # enable is one LUT of two flip-flops and ``r_en``, whatever drives
        # ``r_free``.
        free_q = Signal()
        out_free = Signal(init=1)
        take = self.r_en | free_q
        do_inner_read = inner_r_rdy & (out_free | self.r_en)

        m.submodules.storage = storage = Memory(
            shape=self.width, depth=inner_depth, init=[],
            attrs={"ram_style": self.ram_style, "no_rw_check": 1})
        w_port = storage.write_port()
        r_port = unchecked_read_port(m, storage)
        produce = Signal(range(inner_depth))
        consume = Signal(range(inner_depth))

        def incr(ptr):
            return Mux(ptr == inner_depth - 1, 0, ptr + 1)

        m.d.comb += [
            w_port.addr.eq(produce), w_port.data.eq(self.w_data), w_port.en.eq(do_write),
            r_port.addr.eq(consume), r_port.en.eq(do_inner_read),
            self.r_data.eq(r_port.data),
        ]
        with m.If(do_write):
            m.d.sync += produce.eq(incr(produce))
        r_rdy_next = do_inner_read | (self.r_rdy & ~take)
        m.d.sync += [
            self.r_rdy.eq(r_rdy_next),
            free_q.eq(self.r_free),
            out_free.eq(~r_rdy_next | self.r_free),
        ]
        with m.If(do_inner_read):
            m.d.sync += consume.eq(incr(consume))
        with m.If(do_write & ~do_inner_read):
            m.d.sync += [inner_level.eq(inner_level + 1), inner_r_rdy.eq(1),
                         inner_w_rdy.eq(inner_level != inner_depth - 1)]
        with m.If(do_inner_read & ~do_write):
            m.d.sync += [inner_level.eq(inner_level - 1), inner_r_rdy.eq(inner_level != 1),
                         inner_w_rdy.eq(1)]
        return m


class _ReadPort:
    def __init__(self, addr, en, data):
        self.addr, self.en, self.data = addr, en, data


def unchecked_read_port(m: Module, memory: Memory, *, domain: str = "sync"):
    """See the module docstring. Returns an object with ``addr``, ``en``
    (1 by default) and ``data`` (the memory's shape)."""
    if not memory.attrs.get("no_rw_check"):
        raise ValueError("unchecked_read_port needs a memory made with attrs={'no_rw_check': 1}; "
                         "without it yosys keeps the old-data-on-collision bypass")
    port = memory.read_port(domain="comb")
    en = Signal(init=1)
    data = Signal(memory.shape, reset_less=True)
    with m.If(en):
        m.d[domain] += data.eq(port.data)
    return _ReadPort(port.addr, en, data)


def saturating_increment(m, counter, enable):
    """``counter`` (a Signal) counts up by one in each cycle ``enable`` is high
    and stops at its largest value. The stop is the carry out of the
    increment (one more cell of the ECP5's carry chain) rather than a compare
    with all ones (a LUT tree per counter): 36 against 44 LUT4 positions at
    32 bits."""
    total = counter + 1  # one bit wider: the top bit is the carry out
    with m.If(enable & ~total[len(counter)]):
        m.d.sync += counter.eq(total[: len(counter)])

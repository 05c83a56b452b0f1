"""Formal properties: the shapes every proof of the gateware uses.

A block's properties live next to it (``hw/<block>_props.py``), written in
Amaranth (``Assert``, ``Assume``, ``Cover``) around the block in a proof
harness, and listed as ``Proof`` records; ``sim/formal.py`` runs them with
SymbiYosys (``yowasp-sby``) and an SMT solver (yices, ``yices-smt2``), and
``make formal`` runs them all (docs/verification.md).

``Proof(name, build, ...)``
    One proof: ``build()`` returns ``(harness, inputs)``, an Elaboratable and
    the signals the solver chooses freely each cycle (every other signal is
    driven by the harness). ``mode`` is ``"prove"`` (k-induction, unbounded)
    or ``"bmc"`` (bounded: no violation within ``depth`` cycles of reset).
    ``cover_depth`` bounds the search for each ``Cover``: a proof is not
    vacuous when each of its covers is reached. ``reduction`` says which
    parameters were shrunk to keep it tractable and why the property does not
    depend on them. ``long``: too slow for ``make test`` (``make test-long``).
    ``engine``: SymbiYosys's engine line (``smtbmc --syn yices`` has yosys
    synthesise the design to gates first, faster on wide control logic).

The proofs start from the reset state (every flip-flop at its ``init``) and
hold reset low: ``formal_top`` gives the harness a ``reset_less`` sync domain
whose clock is a port of the top (an undriven clock would freeze every
flip-flop, and every property would hold vacuously; the covers catch that).

``harness(cls, *args, **kwargs)``
    A ``Proof.build`` for a harness that lists its free inputs as ``inputs``:
    it makes ``cls(*args, **kwargs)`` at each run, returned with them.

``valid_until_ready(m, valid, ready, payload, *, dut_drives, name)``
    The stream rule (amaranth.lib.stream, AXI4 and AXI4-Stream alike): once
    ``valid`` is offered it stays until ``ready`` takes it, and ``payload``
    holds while it waits. Asserted on a port the block drives, assumed on
    one its environment drives.

``axi4_rules(m, port, *, dut_is_master, channels)``
    ``valid_until_ready`` on each AXI4 channel of ``port`` (``aw``, ``w``,
    ``b``, ``ar``, ``r``; ``channels`` picks some): the master drives AW, W
    and AR, the slave B and R.

``block_invariants(enable=True)``, ``invariant(m, condition, message)``
    A block states its own invariants with ``invariant`` (that copies of a
    flag agree, that a one-hot vector is one-hot): inside
    ``block_invariants()`` each is an ``Assert`` (the proofs elaborate their
    harness inside it, and so do the simulator tests, whose simulator checks
    each cycle); outside it none is added, so no check reaches a netlist.
    k-induction needs them: a state in which two copies of a flag disagree is
    unreachable, but only a stated invariant tells the solver so.

``transfer_count(m, valid, ready, width, name)``
    The number of transfers so far, modulo 2^``width``: a sequence-number
    stream (the environment sends its count as payload) checks that a block
    neither loses, duplicates nor reorders a transfer.
"""

from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

from amaranth.hdl import Assert, Assume, Cat, ClockDomain, Elaboratable, Module, Signal, Value

__all__ = ["Proof", "axi4_rules", "block_invariants", "checking", "formal_top", "harness",
           "invariant", "transfer_count", "valid_until_ready"]

_AXI4_CHANNELS = {  # channel: driven by the master
    "aw": True, "w": True, "ar": True, "b": False, "r": False,
}


@dataclass(frozen=True)
class Proof:
    """See the module docstring."""

    name: str
    build: Callable[[], tuple[Elaboratable, list]]
    mode: str = "prove"
    depth: int = 20
    cover_depth: int = 20
    reduction: str = ""
    long: bool = False
    covers: bool = True
    engine: str = "smtbmc yices"

    def __post_init__(self):
        if self.mode not in ("prove", "bmc"):
            raise ValueError(f"Proof {self.name!r}: mode must be 'prove' or 'bmc', not "
                             f"{self.mode!r}")
        if self.depth < 1 or self.cover_depth < 1:
            raise ValueError(f"Proof {self.name!r}: depth and cover_depth must be >= 1")


_invariants = [False]


@contextmanager
def block_invariants(enable=True):
    """See the module docstring (``enable=False``: none, inside such a context)."""
    _invariants.append(enable)
    try:
        yield
    finally:
        _invariants.pop()


def checking() -> bool:
    """Whether invariants are being added (inside ``block_invariants()``): a
    block builds the logic of an invariant only then."""
    return _invariants[-1]


def invariant(m: Module, condition, message: str):
    """See the module docstring."""
    if _invariants[-1]:
        m.d.comb += Assert(condition, message)


def formal_top(harness, inputs):
    """The top the solver sees: ``harness`` in a reset-less sync domain, and
    the ports (the domain's clock and the free ``inputs``)."""
    m = Module()
    m.domains.sync = cd = ClockDomain("sync", reset_less=True)
    m.submodules.harness = harness
    return m, [cd.clk, *(Value.cast(i) for i in inputs)]


def harness(cls, *args, **kwargs) -> Callable[[], tuple[Elaboratable, list]]:
    """See the module docstring."""
    def build():
        h = cls(*args, **kwargs)
        return h, h.inputs
    return build


def valid_until_ready(m: Module, valid, ready, payload, *, dut_drives: bool, name: str):
    """See the module docstring. Returns nothing; adds the check to ``m``."""
    payload = Value.cast(payload)
    waiting = Signal(name=f"{name}_waiting")  # offered and not taken last cycle
    held = Signal(len(payload), name=f"{name}_held")
    m.d.sync += [waiting.eq(valid & ~ready), held.eq(payload)]
    rule = ~waiting | (valid & (payload == held))
    check = Assert if dut_drives else Assume
    m.d.comb += check(rule, f"{name}: valid dropped or payload changed before ready")


def axi4_rules(m: Module, port, *, dut_is_master: bool, channels=("aw", "w", "b", "ar", "r")):
    """See the module docstring."""
    names = list(port.signature.members)
    for ch in channels:
        payload = [getattr(port, n) for n in names
                   if n.startswith(ch) and n not in (f"{ch}valid", f"{ch}ready")]
        valid_until_ready(m, getattr(port, f"{ch}valid"), getattr(port, f"{ch}ready"),
                          Cat(*payload), dut_drives=_AXI4_CHANNELS[ch] == dut_is_master,
                          name=f"axi_{ch}")


def transfer_count(m: Module, valid, ready, width: int, name: str):
    """See the module docstring."""
    count = Signal(width, name=name)
    with m.If(valid & ready):
        m.d.sync += count.eq(count + 1)
    return count

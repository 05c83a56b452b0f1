"""CRC-32 (Ethernet polynomial, reflected) over several bytes per cycle.

The ICRC of RoCEv2 and the Ethernet FCS are both this CRC. ``crc32_bytes``
builds combinational logic that consumes the first ``count`` bytes (lane 0
first) of a ``data`` word in one cycle. Each possible count is its own XOR
network, derived here by symbolic execution of the bit-serial CRC, and a mux
picks one: the logic depth is one XOR tree plus one mux, whatever the width.

The register holds the raw CRC state: start from ``CRC32_INIT`` (or
``ICRC_INIT`` for an ICRC, which already includes the 8 bytes of ones), and
the value on the wire is ``~state``, least-significant byte first. Running
the CRC over the data *and* its CRC leaves ``CRC32_RESIDUE`` in the register.
"""

from functools import cache

from amaranth.hdl import Array, Cat, Const, Mux, Value

__all__ = ["CRC32_INIT", "CRC32_RESIDUE", "ICRC_INIT", "crc32_before_zeros", "crc32_bytes",
           "crc32_parts", "crc32_state_py", "crc32_tail", "tail_rest", "tail_shift"]

CRC32_POLY_REFLECTED = 0xEDB88320
CRC32_INIT = 0xFFFFFFFF
CRC32_RESIDUE = 0xDEBB20E3


def crc32_state_py(state: int, data: bytes) -> int:
    """Reference: the raw CRC register after ``data`` (no final inversion)."""
    for byte in data:
        state ^= byte
        for _ in range(8):
            state = (state >> 1) ^ (CRC32_POLY_REFLECTED if state & 1 else 0)
    return state


def crc32_before_zeros(state: int, count: int) -> int:
    """The raw CRC register that ``count`` zero bytes take to ``state``: the
    inverse of ``crc32_state_py(s, bytes(count))``, which is a bijection. A
    CRC started from it over ``count`` leading zero bytes and then the data
    equals the CRC started from ``state`` over the data alone."""
    for _ in range(8 * count):
        # A zero-bit step shifts right and adds the polynomial (whose top bit
        # is set) when the bit shifted out was 1: bit 31 of the result says so.
        if state >> 31:
            state = (((state ^ CRC32_POLY_REFLECTED) << 1) | 1) & 0xFFFFFFFF
        else:
            state = (state << 1) & 0xFFFFFFFF
    return state


ICRC_INIT = crc32_state_py(CRC32_INIT, b"\xff" * 8)


@cache
def _matrix(nbytes: int) -> tuple[int, ...]:
    """For each output bit, a mask over inputs: bits 0..31 state, 32.. data."""
    state = [1 << i for i in range(32)]
    for byte in range(nbytes):
        for bit in range(8):
            state[bit] ^= 1 << (32 + 8 * byte + bit)
        for _ in range(8):
            lsb = state[0]
            state = state[1:] + [0]
            for i in range(32):
                if (CRC32_POLY_REFLECTED >> i) & 1:
                    state[i] ^= lsb
    return tuple(state)


def _xor_of(inputs: Value, mask: int) -> Value:
    bits = [inputs[i] for i in range(len(inputs)) if (mask >> i) & 1]
    if not bits:
        return Const(0, 1)
    return Cat(*bits).xor()


def crc32_parts(state, data, nbytes: int) -> tuple[Value, Value]:
    """The CRC register after the first ``nbytes`` bytes of ``data``, as the
    XOR of a part from ``state`` alone and a part from ``data`` alone (the
    CRC is linear), so either part can be computed, and registered, apart."""
    masks = _matrix(nbytes)
    state, data = Value.cast(state), Value.cast(data)
    state_part = Cat(*[_xor_of(state, mask & 0xFFFFFFFF) for mask in masks])
    data_part = Cat(*[_xor_of(data, mask >> 32) for mask in masks])
    return state_part, data_part


def crc32_tail(state, data, count, nbytes: int) -> tuple[Value, Value]:
    """The CRC register after the first ``count`` bytes (0..``nbytes``) of an
    ``nbytes``-byte word ``data``, as a part from ``state`` and ``count`` and
    a part from ``data`` and ``count`` (XOR them), each one XOR network over
    the word instead of one network per count (``crc32_parts``).

    Both inputs are moved up by ``nbytes - count`` lanes (``tail_shift``):
    leading zero bytes leave a zero CRC register at zero, so the full-word
    network on the moved data is the network of ``count`` bytes. The state's
    four bytes enter the CRC as if XORed into the first four data bytes, and
    those that ``count`` bytes do not reach stay in the register, moved down
    (``state >> 8 * count``). Logic per part: a byte shift (the state's is at
    most 5 positions per lane), one XOR tree over ``8 * nbytes`` inputs; and
    a 5-way choice for the state's remainder.
    """
    state = Value.cast(state)
    masks = _matrix(nbytes)
    state_moved = tail_shift(state, count, nbytes)
    data_moved = tail_shift(data, count, nbytes)
    state_net = Cat(*[_xor_of(state_moved, mask >> 32) for mask in masks])
    state_part = state_net ^ tail_rest(state, count)
    data_part = Cat(*[_xor_of(data_moved, mask >> 32) for mask in masks])
    return state_part, data_part


def tail_rest(state: Value, count: Value) -> Value:
    """The bytes of the CRC register ``state`` that ``count`` bytes do not
    reach: ``state >> 8 * count`` (zero from 4 bytes on), the part of
    ``crc32_tail``'s state part that is not the network over the moved state."""
    state = Value.cast(state)
    return Array([state >> (8 * k) for k in range(4)] + [Const(0, 32)])[Mux(count < 4, count, 4)]


def tail_shift(word: Value, count: Value, nbytes: int) -> Value:
    """``word`` (at most ``nbytes`` bytes) moved up by ``nbytes - count``
    lanes into an ``nbytes``-byte word: its byte 0 in lane ``nbytes - count``;
    bytes moved past the top are dropped (those beyond the first ``count``)."""
    word = Value.cast(word)
    wide = Cat(word, Const(0, 8 * nbytes - len(word))) if len(word) < 8 * nbytes else word
    return Array([(wide << (8 * (nbytes - k)))[: 8 * nbytes] for k in range(nbytes + 1)])[count]


def crc32_bytes(state: Value, data: Value, count: Value) -> Value:
    """The CRC register after the first ``count`` bytes of ``data``."""
    nbytes = len(data) // 8
    inputs = Cat(state, data)
    candidates = [state]
    for k in range(1, nbytes + 1):
        candidates.append(Cat(*[_xor_of(inputs, mask) for mask in _matrix(k)]))
    if isinstance(count, int):
        return candidates[count]
    return Array(candidates)[count]

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

from amaranth.hdl import Array, Cat, Const, Value

__all__ = ["CRC32_INIT", "CRC32_RESIDUE", "ICRC_INIT", "crc32_bytes", "crc32_state_py"]

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

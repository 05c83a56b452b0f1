"""Small parameter checks shared by the board blocks."""


def is_pow2(value) -> bool:
    return isinstance(value, int) and value > 0 and not value & (value - 1)

"""A value a caller handed us, as a message shows it: the one total ``repr`` of every refusal."""

from __future__ import annotations

__all__ = ["shown"]

_LONGEST_INT = 2**256
"""Integers at least this far from 0 are shown by their size: the interpreter refuses the ``repr`` of one
of more than 4,300 digits (``sys.set_int_max_str_digits``), and a message has no use for the digits."""


def shown(value: object, limit: int = 40) -> str:
    """``repr(value)`` cut to ``limit`` characters; total: any value, a huge integer or an object whose
    ``__repr__`` raises included, gives a string and never an exception."""
    try:
        if isinstance(value, int) and not -_LONGEST_INT < value < _LONGEST_INT:
            return f"an integer of {value.bit_length():,} bits"[:limit]
        if isinstance(value, str | bytes):  # only what is shown is quoted: a long text costs nothing
            value = value[: limit + 1]
        text = repr(value)
    except Exception:  # its own __repr__ raised, or held a huge integer
        text = f"<a {type(value).__name__} that cannot be shown>"
    return text[:limit]

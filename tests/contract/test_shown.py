"""How a value a caller handed us is shown in a message: total, bounded, and the plain repr when it fits."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollout_telemetry._contract.shown import shown
from tests.support import examples


class _Raising:
    def __repr__(self) -> str:
        raise RuntimeError("repr down")


HOSTILE = [10**5000, -(10**5000), [10**5000], {"k": 10**5000}, _Raising(), math.nan, "x" * 10**6, b"\0" * 99]


@pytest.mark.parametrize("value", HOSTILE, ids=lambda value: type(value).__name__)
def test_any_value_is_shown_within_the_limit(value: object) -> None:
    """A 5,000-digit integer, a container holding one, a repr that raises and a huge text give a string of at
    most the limit, never an exception."""
    text = shown(value, 40)
    assert isinstance(text, str)
    assert 0 < len(text) <= 40


def test_a_huge_integer_is_shown_by_its_size() -> None:
    """An integer the interpreter cannot print is named by its size in bits."""
    assert shown(10**5000, 60) == f"an integer of {(10**5000).bit_length():,} bits"


@settings(max_examples=examples(200), deadline=None)
@given(st.one_of(st.integers(-(2**200), 2**200), st.floats(), st.text(max_size=30), st.none(), st.booleans()))
def test_a_small_value_is_its_repr(value: object) -> None:
    """Whatever fits is its repr, cut to the limit: the message says exactly what was given."""
    assert shown(value, 80) == repr(value)[:80]

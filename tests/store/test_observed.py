"""The account's histograms beyond the duration's (``_store.observed``): counted one at a time or folded."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rollout_telemetry._store.observed import FOLD_AT, WAIT_BUCKETS, Observations

_VALUES = st.lists(
    st.one_of(
        st.sampled_from(WAIT_BUCKETS),  # on a bound: in that bound's bucket
        st.floats(min_value=0.0, max_value=10_000.0, allow_nan=False),
    ),
    max_size=3 * FOLD_AT,
)


@given(_VALUES)
def test_folding_pending_values_counts_them_as_observing_each(values: list[float]) -> None:
    """Values appended to pending and folded land in the buckets and count observe() gives them; the sum is
    theirs but for rounding (added in another order)."""
    one_by_one, folded = Observations(WAIT_BUCKETS), Observations(WAIT_BUCKETS)
    for value in values:
        one_by_one.observe(value)
        folded.pending.append(value)
    mine, theirs = folded.copy(), one_by_one.copy()
    assert (mine.buckets, mine.count) == (theirs.buckets, theirs.count)
    assert mine.total == pytest.approx(theirs.total, rel=1e-9, abs=1e-9)
    assert folded.pending == []
    expected = [sum(1 for v in values if v <= bound) for bound in WAIT_BUCKETS]  # an independent count
    cumulative = [sum(folded.buckets[: i + 1]) for i in range(len(WAIT_BUCKETS))]
    assert cumulative == expected
    assert folded.count == len(values)

"""A histogram of the account beyond the duration's: counts per bucket, their sum and number.

Only touched under the account's lock; a snapshot holds its frozen ``copy``.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

__all__ = ["FOLD_AT", "WAIT_BUCKETS", "Observations", "Observed"]

WAIT_BUCKETS: tuple[float, ...] = (
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
)  # fmt: skip
"""Upper bounds (seconds) of the admission wait histogram, from ten milliseconds to an hour; +Inf implied."""


@dataclass(frozen=True, slots=True)
class Observed:
    """A histogram at one moment: the count per bucket (+Inf last, not cumulative), the sum and the count."""

    bounds: tuple[float, ...]
    """The buckets' upper bounds, +Inf implied after the last."""
    buckets: tuple[int, ...]
    """The observations in each bucket (above the bound before it, at most its own), +Inf last."""
    total: float
    """The sum of the observed values."""
    count: int
    """The number of observations."""


FOLD_AT = 512
"""Values ``Observations.pending`` holds at most before they are counted (``fold``)."""


class Observations:
    """Values observed into buckets of ``bounds`` (upper bounds, +Inf implied).

    ``observe`` counts one value. On a hot path a value is appended to ``pending`` instead (and ``fold``
    called once ``FOLD_AT`` are there): finding one value's bucket costs as much as the rest of a rollout
    block's bookkeeping, while ``fold`` counts many at once at a small cost each (one sort, one bisection
    per bound), at the latest when the histogram is read (``copy``).
    """

    __slots__ = ("bounds", "buckets", "count", "pending", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.buckets = [0] * (len(bounds) + 1)
        self.total = 0.0
        self.count = 0
        self.pending: list[float] = []

    def observe(self, value: float) -> None:
        """Count one value (seconds, never negative)."""
        self.buckets[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def fold(self) -> None:
        """Count the values of ``pending``, and empty it."""
        pending = self.pending
        if not pending:
            return
        pending.sort()
        below = 0  # values at or under the bounds so far
        for index, bound in enumerate(self.bounds):
            under = bisect.bisect_right(pending, bound, below)  # a value equal to a bound is in its bucket
            self.buckets[index] += under - below
            below = under
        self.buckets[-1] += len(pending) - below
        self.total += sum(pending)
        self.count += len(pending)
        pending.clear()

    def copy(self) -> Observed:
        """The histogram now, frozen (``pending`` counted first)."""
        self.fold()
        return Observed(self.bounds, tuple(self.buckets), self.total, self.count)

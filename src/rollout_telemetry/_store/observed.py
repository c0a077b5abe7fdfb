"""A histogram of the account beyond the duration's: counts per bucket, their sum and number.

Only touched under the account's lock; a snapshot holds its frozen ``copy``.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

__all__ = ["WAIT_BUCKETS", "Observations", "Observed"]

WAIT_BUCKETS: tuple[float, ...] = (
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
)  # fmt: skip
"""Upper bounds (seconds) of the admission wait histogram, from ten milliseconds to an hour; +Inf implied."""


@dataclass(frozen=True, slots=True)
class Observed:
    """A histogram at one moment: the count per bucket (+Inf last, not cumulative), the sum and the count."""

    bounds: tuple[float, ...]
    buckets: tuple[int, ...]
    total: float
    count: int


class Observations:
    """Values observed into buckets of ``bounds`` (upper bounds, +Inf implied)."""

    __slots__ = ("bounds", "buckets", "count", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.buckets = [0] * (len(bounds) + 1)
        self.total = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        """Count one value (seconds, never negative)."""
        bounds = self.bounds
        # The first bucket without a bisection: most waits are there (a rollout entered as soon as made).
        self.buckets[0 if value <= bounds[0] else bisect.bisect_left(bounds, value)] += 1
        self.total += value
        self.count += 1

    def copy(self) -> Observed:
        """The histogram now, frozen."""
        return Observed(self.bounds, tuple(self.buckets), self.total, self.count)

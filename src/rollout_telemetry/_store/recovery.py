"""One agent's retries and recovery in the account: attempts until a terminal outcome, the time spent waiting
between attempts, the identities whose retries ran out, and failures by stage and delivery.

The coverage account decides when an identity's outcome is final (``Coverage.observe``: the one place the
attempt precedence lives); the facade then counts the verdict here, once per identity, and every failure's
(stage, delivery) as it arrives. Kept apart from ``AgentState`` until first used, so an agent that never
retries costs nothing and publishes nothing new.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from rollout_telemetry._contract.failure_where import Where
from rollout_telemetry._store.observed import Observed

__all__ = ["Recovery", "RecoverySnapshot"]

ATTEMPT_BUCKETS: Final[tuple[float, ...]] = (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 16.0)
"""Upper bounds of the attempts histogram (attempts an identity took to a terminal outcome); +Inf implied."""

RETRY_DELAY_BUCKETS: Final[tuple[float, ...]] = (
    0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
)  # fmt: skip
"""Upper bounds (seconds) of the cumulative retry delay histogram; +Inf implied."""


@dataclass(frozen=True, slots=True)
class RecoverySnapshot:
    """One agent's retries and failure stages at one moment."""

    attempts: Observed
    """Attempts each rollout identity took to reach its terminal outcome, one observation per identity."""
    retry_delay: Observed | None
    """Per retried identity, the seconds between each failed attempt's outcome and the next attempt's start,
    summed; ``None`` until one was measured (never from NeMo Gym's files)."""
    exhausted: Mapping[str, int]
    """Identities whose retries ran out, by the failure kind label of their last attempt."""
    stages: Mapping[tuple[str, str], int]
    """Failures with a known stage or delivery, by (stage, delivery)."""


class Recovery:
    """Mutable recovery counts of one agent; only touched under the account lock."""

    __slots__ = ("attempts", "attempts_sum", "delay", "delay_sum", "exhausted", "stages")

    def __init__(self) -> None:
        self.attempts = [0] * (len(ATTEMPT_BUCKETS) + 1)
        self.attempts_sum = 0
        self.delay: list[int] | None = None  # until a retried identity has a measured delay
        self.delay_sum = 0.0
        self.exhausted: dict[str, int] = {}
        self.stages: dict[Where, int] = {}

    def settled(self, attempts: int, delay: float | None, exhausted: str | None) -> None:
        """One identity reached its terminal outcome after ``attempts`` attempts, waiting ``delay`` seconds
        between them (``None``: not measurable), its retries exhausted with failure kind label
        ``exhausted`` (``None``: not exhausted)."""
        self.attempts[bisect.bisect_left(ATTEMPT_BUCKETS, attempts)] += 1
        self.attempts_sum += attempts
        if delay is not None:
            if self.delay is None:
                self.delay = [0] * (len(RETRY_DELAY_BUCKETS) + 1)
            self.delay[bisect.bisect_left(RETRY_DELAY_BUCKETS, delay)] += 1
            self.delay_sum += delay
        if exhausted is not None:
            self.exhausted[exhausted] = self.exhausted.get(exhausted, 0) + 1

    def failed_at(self, where: Where) -> None:
        """Count one failure at ``where`` (stage, delivery)."""
        self.stages[where] = self.stages.get(where, 0) + 1

    def copy(self) -> RecoverySnapshot:
        """Copy the counts; called under the account lock."""
        attempts = tuple(self.attempts)
        delay = None
        if self.delay is not None:
            delay = Observed(RETRY_DELAY_BUCKETS, tuple(self.delay), self.delay_sum, sum(self.delay))
        return RecoverySnapshot(
            attempts=Observed(ATTEMPT_BUCKETS, attempts, float(self.attempts_sum), sum(attempts)),
            retry_delay=delay,
            exhausted=self.exhausted.copy(),
            stages=self.stages.copy(),
        )

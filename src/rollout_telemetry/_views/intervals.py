"""The uncertainty of a run's mean rewards: 95% confidence intervals from the rewards themselves.

``RewardSamples`` keeps each counted outcome's reward per agent (a float each) while a run's files are read;
``interval`` gives the interval of a mean: Wilson's score interval when every reward is 0 or 1 (the mean is a
proportion), else a percentile bootstrap, and past ``BOOTSTRAP_MOST`` rewards the normal approximation, where
the bootstrap would cost seconds and says the same. Each interval names its method.
"""

from __future__ import annotations

import math
import random
import statistics
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from rollout_telemetry._contract.outcome import Classified, Disposition

__all__ = ["BOOTSTRAP_MOST", "RESAMPLES", "Interval", "RewardSamples"]

Z95 = 1.959963984540054
"""The standard normal quantile of 0.975: a two-sided 95% interval."""
RESAMPLES = 1000
"""Bootstrap resamples (their means' 2.5th and 97.5th percentiles are the interval)."""
BOOTSTRAP_MOST = 5000
"""Rewards up to which the bootstrap is used; above, the normal approximation."""

WILSON, BOOTSTRAP, NORMAL = "wilson", "bootstrap", "normal"


@dataclass(frozen=True, slots=True)
class Interval:
    """A mean with its 95% confidence interval and the method that gave it."""

    mean: float
    low: float
    high: float
    method: str
    """``wilson``, ``bootstrap`` or ``normal``."""


def interval(rewards: Sequence[float], *, seed: int = 0) -> Interval | None:
    """The mean of ``rewards`` with its 95% interval; ``None`` for fewer than two rewards (no spread).

    The bootstrap is seeded, so a report gives the same interval every time it is made.
    """
    n = len(rewards)
    if n < 2:  # one reward has no spread
        return None
    mean = math.fsum(rewards) / n
    if all(reward in (0.0, 1.0) for reward in rewards):
        centre = (mean + Z95**2 / (2 * n)) / (1 + Z95**2 / n)
        half = Z95 / (1 + Z95**2 / n) * math.sqrt(mean * (1 - mean) / n + Z95**2 / (4 * n * n))
        return Interval(mean, max(0.0, centre - half), min(1.0, centre + half), WILSON)
    if n <= BOOTSTRAP_MOST:
        draw = random.Random(seed).choices
        means = sorted(math.fsum(draw(rewards, k=n)) / n for _ in range(RESAMPLES))
        low, high = means[int(0.025 * RESAMPLES)], means[int(0.975 * RESAMPLES) - 1]
        return Interval(mean, low, high, BOOTSTRAP)
    half = Z95 * statistics.stdev(rewards) / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, NORMAL)


class RewardSamples:
    """Each counted outcome's reward, per agent: every reward (measured and masked, as ``rollout_reward``
    averages them) and the measured ones (``rollout_reward_unmasked``'s)."""

    def __init__(self) -> None:
        self._rewards: dict[str, array[float]] = {}
        self._measured: dict[str, array[float]] = {}

    def observe(self, agent: str, outcome: Classified) -> None:
        """One outcome the account counted (a repeated row is not)."""
        reward = outcome[1]
        if reward is None:  # failed, omitted, unscored: no reward
            return
        self._rewards.setdefault(agent, array("d")).append(reward)
        if outcome[0] is Disposition.MEASURED:
            self._measured.setdefault(agent, array("d")).append(reward)

    def intervals(self, agent: str) -> tuple[Interval | None, Interval | None]:
        """(every reward's, the measured rewards') intervals of ``agent``."""
        return interval(self._rewards.get(agent, ())), interval(self._measured.get(agent, ()))

    def counts(self, agent: str) -> tuple[int, int]:
        """(rewards, measured rewards) of ``agent``: the rows each mean is over."""
        return len(self._rewards.get(agent, ())), len(self._measured.get(agent, ()))

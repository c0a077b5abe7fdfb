"""An agent's declared reward range: where its lowest and highest rewards lie.

A range is declared, never observed: a group is classified once, when it completes, and a bound learnt from
the rewards seen so far would make the same group "at the lowest" early in a run and "other" later. The
default is NeMo Gym's usual binary reward, [0, 1].
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal

from rollout_telemetry._contract.outcome import MAX_REWARD
from rollout_telemetry._contract.shown import shown
from rollout_telemetry.errors import ConfigError

__all__ = [
    "DEFAULT_REWARD_RANGE",
    "UNIFORM_AT",
    "RewardRange",
    "UniformAt",
    "check_reward_range",
    "reward_bounds",
    "uniform_at",
]

RewardRange = tuple[float, float]
"""(lowest, highest) reward of an agent."""

DEFAULT_REWARD_RANGE: RewardRange = (0.0, 1.0)

REWARD_BUCKETS = 10
"""Equal-width buckets of the reward histogram between the lowest and the highest reward."""

UniformAt = Literal["lowest", "highest", "other"]
UNIFORM_AT: tuple[UniformAt, ...] = ("lowest", "highest", "other")
"""Where the common reward of a uniform group lies in its agent's range: the ``reward`` label values."""


def check_reward_range(reward_range: Iterable[float]) -> RewardRange:
    """A reward range checked: two finite numbers within +-``MAX_REWARD``, the lowest below the highest.

    Raises:
        ConfigError: the range is not such a pair.
    """
    try:
        bounds = tuple(reward_range) if not isinstance(reward_range, str | bytes) else ()
        if len(bounds) != 2 or any(isinstance(bound, str | bytes | bool) for bound in bounds):
            raise TypeError
        low, high = float(bounds[0]), float(bounds[1])  # any real number: int, float, Fraction, Decimal
    except (TypeError, ValueError):
        msg = f"reward_range must be a pair of numbers (lowest, highest), got {shown(reward_range, 60)}"
        raise ConfigError(msg) from None
    if not (math.isfinite(low) and math.isfinite(high) and -MAX_REWARD <= low < high <= MAX_REWARD):
        msg = (
            f"reward_range must be finite, lowest < highest, within +-{MAX_REWARD:g}: "
            f"({shown(low, 60)}, {shown(high, 60)})"
        )
        raise ConfigError(msg)
    return low, high


def uniform_at(reward: float, reward_range: RewardRange) -> UniformAt:
    """Where a uniform group's common reward lies: at (or below) the lowest, at (or above) the highest, or
    between (``other``). Outside the range it still tells the direction: the range was declared too narrow."""
    low, high = reward_range
    if reward <= low:
        return "lowest"
    if reward >= high:
        return "highest"
    return "other"


def reward_bounds(reward_range: RewardRange) -> tuple[float, ...]:
    """The upper bounds of the reward histogram's buckets: the lowest reward (everything at or below it),
    then ``REWARD_BUCKETS`` equal steps to the highest; +Inf is implied. Rounded to 12 digits, so [0, 1]
    gives 0.1, 0.2, 0.3 rather than 0.30000000000000004."""
    low, high = reward_range
    step = (high - low) / REWARD_BUCKETS
    return (*(round(low + step * index, 12) for index in range(REWARD_BUCKETS)), high)

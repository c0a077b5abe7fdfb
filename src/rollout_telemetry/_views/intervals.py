"""The uncertainty of a run's mean rewards: 95% confidence intervals from the rewards themselves.

``RewardSamples`` keeps each counted outcome's reward per agent (a float each) with its task while a run's
files are read; ``interval`` gives the interval of a mean. The tasks are draws from a population of tasks and
the repeats of a task are a cluster (Evan Miller, "Adding Error Bars to Evals", arXiv 2411.00640): when a
task has more than one reward, the cluster-robust standard error (CR1) with a Student t critical value on
clusters - 1 degrees of freedom; with one reward per task, Wilson's score interval when every reward is 0 or
1 (the mean is a proportion), else the t-interval, which is the clustered one with a cluster per reward.
Each interval names its method and the clusters it rests on.
"""

from __future__ import annotations

import functools
import math
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rollout_telemetry._contract.outcome import Classified, Disposition

__all__ = ["CLUSTERED", "STUDENT", "WILSON", "Interval", "RewardSamples", "interval_text"]

Z95 = 1.959963984540054
"""The standard normal quantile of 0.975: a two-sided 95% interval."""
SERIES_FROM = 1000
"""Degrees of freedom from which ``t975`` sums the Cornish-Fisher series instead of inverting the t CDF."""

WILSON, STUDENT, CLUSTERED = "wilson", "t", "clustered"


@dataclass(frozen=True, slots=True)
class Interval:
    """A mean with its 95% confidence interval, the method that gave it and the clusters it rests on."""

    mean: float
    low: float
    high: float
    method: str
    """``wilson``, ``t`` (one reward per task) or ``clustered`` (tasks repeated)."""
    clusters: int
    """Tasks (a reward without a task is a task of its own): the independent draws the interval rests on."""


def interval(rewards: Sequence[float], tasks: Sequence[int] | None = None) -> Interval | None:
    """The mean of ``rewards`` with its 95% interval, clustered by ``tasks`` (each reward's task, the same
    length; ``None``: a task per reward); ``None`` for fewer than two tasks (no spread between tasks).
    """
    n = len(rewards)
    clusters = n if tasks is None else len(set(tasks))
    if clusters < 2:  # one task (or one reward) says nothing of the spread between tasks
        return None
    mean = math.fsum(rewards) / n
    binary = all(reward in (0.0, 1.0) for reward in rewards)
    if clusters == n and binary:
        centre = (mean + Z95**2 / (2 * n)) / (1 + Z95**2 / n)
        half = Z95 / (1 + Z95**2 / n) * math.sqrt(mean * (1 - mean) / n + Z95**2 / (4 * n * n))
        return Interval(mean, max(0.0, centre - half), min(1.0, centre + half), WILSON, n)
    # CR1: Var = G/(G-1) * (N-1)/(N-K) * sum_g (sum_{i in g} e_i)^2 / N^2, with K = 1 regressor (the mean).
    sums: dict[int, float] = {}
    if tasks is None:
        squares = math.fsum((reward - mean) ** 2 for reward in rewards)
    else:
        for reward, task in zip(rewards, tasks, strict=True):
            sums[task] = sums.get(task, 0.0) + (reward - mean)
        squares = math.fsum(total * total for total in sums.values())
    half = t975(clusters - 1) * math.sqrt(clusters / (clusters - 1) * squares) / n
    low, high = mean - half, mean + half
    if binary:  # a proportion's interval stays within [0, 1]
        low, high = max(0.0, low), min(1.0, high)
    return Interval(mean, low, high, STUDENT if clusters == n else CLUSTERED, clusters)


def interval_text(ci: Mapping[str, Any] | None) -> str:
    """A report's interval (``mean_reward_ci95``) as the table and the page show it: its bounds, its method
    and the tasks it rests on; ``-`` for none."""
    if ci is None:
        return "-"
    return f"[{ci['low']:.3f}, {ci['high']:.3f}] {ci['method']}, {ci['clusters']:,} tasks"


@functools.lru_cache(maxsize=256)
def t975(df: int) -> float:
    """Student's t quantile of 0.975 on ``df`` degrees of freedom (a two-sided 95% interval), to 1e-12.

    Below ``SERIES_FROM``: Newton's method on the exact t CDF, a finite sum for integer ``df`` (Abramowitz
    and Stegun 26.7.3-4); from it, the Cornish-Fisher expansion in 1/df (26.7.5), whose next term is < 1e-14.

    Raises:
        ValueError: ``df`` below 1.
    """
    if df < 1:
        msg = f"degrees of freedom must be at least 1, not {df}"
        raise ValueError(msg)
    x = Z95
    series = (
        x
        + (x**3 + x) / 4 / df
        + (5 * x**5 + 16 * x**3 + 3 * x) / 96 / df**2
        + (3 * x**7 + 19 * x**5 + 17 * x**3 - 15 * x) / 384 / df**3
        + (79 * x**9 + 776 * x**7 + 1482 * x**5 - 1920 * x**3 - 945 * x) / 92160 / df**4
    )
    if df >= SERIES_FROM:
        return series
    if df == 1:
        return math.tan(0.475 * math.pi)  # Cauchy: exact
    t = min(series, 15.0)  # the series overshoots at small df; on a concave CDF Newton converges either way
    density = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    for _ in range(100):
        step = (_central(t, df) - 0.95) / (2 * density * (1 + t * t / df) ** (-(df + 1) / 2))
        t -= step
        if abs(step) <= 1e-15 * t:
            break
    return t


def _central(t: float, df: int) -> float:
    """P(|T| < t) for Student's T on integer ``df`` >= 2 (Abramowitz and Stegun 26.7.3 and 26.7.4)."""
    theta = math.atan(t / math.sqrt(df))
    cos2 = math.cos(theta) ** 2
    if df % 2 == 0:  # sin(theta) * (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ... up to cos^(df-2))
        term, total = 1.0, 1.0
        for j in range(1, df // 2):
            term *= cos2 * (2 * j - 1) / (2 * j)
            total += term
        return math.sin(theta) * total
    # 2/pi * (theta + sin(theta) * (cos + 2/3 cos^3 + 2*4/(3*5) cos^5 + ... up to cos^(df-2)))
    term = total = math.cos(theta)
    for j in range(1, (df - 1) // 2):
        term *= cos2 * (2 * j) / (2 * j + 1)
        total += term
    return 2 / math.pi * (theta + math.sin(theta) * total)


class RewardSamples:
    """Each counted outcome's reward and task, per agent: every reward (measured and masked, as
    ``rollout_reward`` averages them) and the measured ones (``rollout_reward_unmasked``'s)."""

    def __init__(self) -> None:
        self._rewards: dict[str, tuple[array[float], array[int]]] = {}
        self._measured: dict[str, tuple[array[float], array[int]]] = {}
        self._untasked = 0  # rows without a task: each a cluster of its own, numbered -1, -2, ...

    def observe(self, agent: str, outcome: Classified, task: int | None = None) -> None:
        """One outcome the account counted (a repeated row is not), of task ``task`` (``None``: unknown)."""
        reward = outcome[1]
        if reward is None:  # failed, omitted, unscored: no reward
            return
        if task is None:
            self._untasked += 1
            task = -self._untasked
        measured = outcome[0] is Disposition.MEASURED
        for store in (self._rewards, self._measured) if measured else (self._rewards,):
            rewards, tasks = store.setdefault(agent, (array("d"), array("q")))
            rewards.append(reward)
            tasks.append(task)

    def intervals(self, agent: str) -> tuple[Interval | None, Interval | None]:
        """(every reward's, the measured rewards') intervals of ``agent``, clustered by task."""
        return interval(*self._rewards.get(agent, ((), ()))), interval(*self._measured.get(agent, ((), ())))

    def counts(self, agent: str) -> tuple[int, int]:
        """(rewards, measured rewards) of ``agent``: the rows each mean is over."""
        return len(self._rewards.get(agent, ((),))[0]), len(self._measured.get(agent, ((),))[0])

    def agents(self) -> list[str]:
        """The agents with a reward, sorted."""
        return sorted(self._rewards)

    def by_task(self, agent: str) -> tuple[dict[int, list[float]], int]:
        """Every reward of ``agent`` by task (the tasks it names), and the rewards without a task."""
        found: dict[int, list[float]] = {}
        untasked = 0
        for reward, task in zip(*self._rewards.get(agent, ((), ())), strict=True):
            if task < 0:
                untasked += 1
            else:
                found.setdefault(task, []).append(reward)
        return found, untasked

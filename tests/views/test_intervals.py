"""The mean rewards' 95% intervals: clustered by task when tasks repeat (CR1, Student's t on clusters - 1
degrees of freedom), Wilson's for 0/1 rewards one per task, else the t-interval; checked against published
values, Student's t quantiles and a second computation of the clustered standard error."""

from __future__ import annotations

import itertools
import math
import random
import statistics

import pytest

from rollout_telemetry._contract.outcome import Disposition
from rollout_telemetry._views.intervals import RewardSamples, interval, t975

# Student's t 0.975 quantiles (scipy.stats.t.ppf(0.975, df), scipy 1.17), to 16 digits.
T975 = {
    1: 12.706204736174694,
    2: 4.302652729749462,
    3: 3.1824463052837078,
    4: 2.7764451051977934,
    5: 2.5705818356363146,
    6: 2.4469118511449786,
    7: 2.364624251592784,
    8: 2.306004135204166,
    9: 2.262157162798205,
    10: 2.228138851986274,
    15: 2.131449545559776,
    29: 2.045229642132703,
    30: 2.0422724563012378,
    50: 2.008559112100761,
    100: 1.9839715185235518,
    199: 1.9719565442517533,
    200: 1.9718962236339088,
    999: 1.9623414611334493,
    1000: 1.9623390808264083,
    1001: 1.9623367052808798,
    5000: 1.9604385517065073,
    100000: 1.9599877075346095,
    1000000: 1.959966356814107,
}


@pytest.mark.parametrize(("df", "quantile"), sorted(T975.items()))
def test_t975_is_students_quantile_to_1e_9(df: int, quantile: float) -> None:
    """The t quantile of 0.975 equals scipy's to 1e-9 relative, on both sides of the series' threshold."""
    assert t975(df) == pytest.approx(quantile, rel=1e-9, abs=0)


def test_t975_meets_the_closed_forms_and_the_normal() -> None:
    """df 1 (Cauchy: tan(0.475 pi)), 2 (0.95 / sqrt(2 p (1 - p))) and 4 (Hill's closed form) to 1e-12; the
    quantile falls with df towards the normal's; below 1 degree of freedom: ValueError."""
    p = 0.975
    assert t975(1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-12)
    assert t975(2) == pytest.approx((2 * p - 1) / math.sqrt(2 * p * (1 - p)), rel=1e-12)
    alpha = 4 * p * (1 - p)
    q = math.cos(math.acos(math.sqrt(alpha)) / 3) / math.sqrt(alpha)
    assert t975(4) == pytest.approx(2 * math.sqrt(q - 1), rel=1e-12)
    quantiles = [t975(df) for df in range(1, 3000)]
    assert all(a > b for a, b in itertools.pairwise(quantiles))
    assert quantiles[-1] > statistics.NormalDist().inv_cdf(p)
    with pytest.raises(ValueError, match="at least 1"):
        t975(0)


@pytest.mark.parametrize(
    ("successes", "n", "low", "high"),
    [(5, 10, 0.2366, 0.7634), (0, 10, 0.0, 0.2775), (10, 10, 0.7225, 1.0), (81, 263, 0.2553, 0.3662)],
)
def test_binary_rewards_one_per_task_get_wilsons_interval(
    successes: int, n: int, low: float, high: float
) -> None:
    """0/1 rewards, one per task: the Wilson score interval, as published (Newcombe 1998, and 81 of 263 in
    Wilson 1927's worked form): bounds to four places, within [0, 1] at 0 and n successes."""
    found = interval([1.0] * successes + [0.0] * (n - successes), list(range(n)))
    assert found is not None
    assert (found.method, found.clusters) == ("wilson", n)
    assert found.mean == successes / n
    assert (round(found.low, 4), round(found.high, 4)) == (low, high)


def test_fewer_than_two_tasks_have_no_interval() -> None:
    """No reward, one, or many of one task: no spread between tasks to estimate, no interval."""
    assert interval([]) is None
    assert interval([0.7]) is None
    assert interval([0.7, 0.2, 0.4], [3, 3, 3]) is None


def _clustered_by_pairs(rewards: list[float], tasks: list[int]) -> tuple[float, float]:
    """The clustered interval from the paper's form: Var = G/(G-1) (N-1)/(N-K) / N^2 * sum over clusters of
    sum over pairs (i, j) in the cluster of e_i e_j, K = 1, with scipy's t quantile."""
    n, k = len(rewards), 1
    mean = sum(rewards) / n
    members: dict[int, list[float]] = {}
    for reward, task in zip(rewards, tasks, strict=True):
        members.setdefault(task, []).append(reward - mean)
    g = len(members)
    pairs = sum(e_i * e_j for cluster in members.values() for e_i in cluster for e_j in cluster)
    variance = g / (g - 1) * (n - 1) / (n - k) * pairs / n**2
    half = T975[g - 1] * math.sqrt(variance)
    return mean - half, mean + half


@pytest.mark.parametrize("seed", range(12))
def test_the_clustered_interval_equals_the_sandwich_over_pairs(seed: int) -> None:
    """Tasks repeated an uneven number of times, rewards in [0, 1] or 0/1: the interval equals (1e-9) the
    cluster-robust CR1 one computed over every pair of residuals in a cluster, with scipy's t quantile."""
    rng = random.Random(seed)
    g = rng.choice([2, 3, 5, 6, 9, 11, 16, 30, 31])
    tasks = [task for task in range(g) for _ in range(rng.randint(1, 9))]
    rng.shuffle(tasks)
    binary = seed % 2 == 0
    rewards = [float(rng.random() < 0.6) if binary else rng.random() for _ in tasks]
    if len(set(tasks)) == len(tasks) or len(set(rewards)) < 2:
        tasks.append(tasks[0])
        rewards.append(1.0 - rewards[0])
    found = interval(rewards, tasks)
    assert found is not None
    assert (found.method, found.clusters) == ("clustered", g)
    low, high = _clustered_by_pairs(rewards, tasks)
    if binary:  # a proportion's interval is cut at 0 and 1
        low, high = max(0.0, low), min(1.0, high)
    assert found.low == pytest.approx(low, rel=1e-9, abs=1e-12)
    assert found.high == pytest.approx(high, rel=1e-9, abs=1e-12)
    assert found.mean == pytest.approx(statistics.fmean(rewards), rel=1e-12)


@pytest.mark.parametrize("n", [2, 7, 30, 5001])
def test_one_reward_per_task_is_the_t_interval(n: int) -> None:
    """Rewards not all 0/1, one per task (or no task given): mean +- t(n-1) s / sqrt(n), the clustered
    interval with a cluster per reward."""
    rng = random.Random(n)
    rewards = [rng.uniform(-1.0, 1.0) for _ in range(n)]
    found = interval(rewards)
    assert found is not None
    assert (found.method, found.clusters) == ("t", n)
    half = T975[n - 1] * statistics.stdev(rewards) / math.sqrt(n)
    assert found.low == pytest.approx(statistics.fmean(rewards) - half, rel=1e-9)
    assert found.high == pytest.approx(statistics.fmean(rewards) + half, rel=1e-9)
    assert interval(rewards, list(range(n))) == found


def test_repeats_widen_the_interval_of_near_constant_tasks() -> None:
    """Six tasks of eight rollouts each, each task's rewards all 0 or all 1: clustered on six tasks, twice
    as wide (and more) as Wilson's over 48 rewards taken as independent."""
    rewards = [float(task < 4) for task in range(6) for _ in range(8)]
    tasks = [task for task in range(6) for _ in range(8)]
    clustered, independent = interval(rewards, tasks), interval(rewards)
    assert clustered is not None
    assert independent is not None
    assert (clustered.method, clustered.clusters, independent.method) == ("clustered", 6, "wilson")
    assert clustered.high - clustered.low > 2 * (independent.high - independent.low)


def test_reward_samples_cluster_by_task_and_rows_without_one_alone() -> None:
    """RewardSamples clusters each agent's rewards by task; a reward without a task is a cluster of its own;
    the measured interval is over the measured rewards alone; failed rows (no reward) are in neither."""
    samples = RewardSamples()
    rows = [(0, 1.0), (0, 1.0), (1, 0.0), (1, 0.0), (2, 1.0), (None, 0.0), (None, 1.0)]
    for task, reward in rows:
        samples.observe("a", (Disposition.MEASURED, reward, None, None, None), task)
    samples.observe("a", (Disposition.MASKED, 0.5, None, None, None), 2)
    samples.observe("a", (Disposition.FAILED, None, "x", None, None), 2)
    every, measured = samples.intervals("a")
    assert every is not None
    assert measured is not None
    assert (every.method, every.clusters, measured.clusters) == ("clustered", 5, 5)
    assert every == interval([*(r for _, r in rows), 0.5], [0, 0, 1, 1, 2, -1, -2, 2])
    assert samples.counts("a") == (8, 7)
    assert samples.by_task("a") == ({0: [1.0, 1.0], 1: [0.0, 0.0], 2: [1.0, 0.5]}, 2)
    alone = RewardSamples()
    for _, reward in rows:
        alone.observe("b", (Disposition.MEASURED, reward, None, None, None))
    assert alone.intervals("b")[0] == interval([r for _, r in rows])  # Wilson: no task repeats

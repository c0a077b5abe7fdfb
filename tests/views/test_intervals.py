"""The mean rewards' 95% intervals: Wilson's for 0/1 rewards, a seeded bootstrap, the normal approximation
past the bootstrap's bound; checked against published values and by their coverage."""

from __future__ import annotations

import random
import statistics

import pytest

from rollout_telemetry._views.intervals import BOOTSTRAP_MOST, interval


@pytest.mark.parametrize(
    ("successes", "n", "low", "high"),
    [(5, 10, 0.2366, 0.7634), (0, 10, 0.0, 0.2775), (10, 10, 0.7225, 1.0), (81, 263, 0.2553, 0.3662)],
)
def test_binary_rewards_get_wilsons_interval(successes: int, n: int, low: float, high: float) -> None:
    """0/1 rewards: the Wilson score interval, as published (Newcombe 1998, and 81 of 263 in Wilson 1927's
    worked form): bounds to four places, within [0, 1] at 0 and n successes."""
    found = interval([1.0] * successes + [0.0] * (n - successes))
    assert found is not None
    assert found.method == "wilson"
    assert found.mean == successes / n
    assert (round(found.low, 4), round(found.high, 4)) == (low, high)


def test_fewer_than_two_rewards_have_no_interval() -> None:
    """No reward or one: no spread to estimate, no interval."""
    assert interval([]) is None
    assert interval([0.7]) is None


def test_the_bootstrap_covers_the_true_mean_about_95_times_in_100() -> None:
    """Rewards in [0, 1] (not 0/1): over 200 samples of 60 from a uniform distribution, the seeded bootstrap
    interval holds the true mean (0.5) in 90% to 99% of them; the same rewards give the same interval."""
    rng = random.Random(7)
    held = 0
    for _ in range(200):
        rewards = [rng.random() for _ in range(60)]
        found = interval(rewards)
        assert found is not None
        assert found.method == "bootstrap"
        assert found.low <= found.mean <= found.high
        held += found.low <= 0.5 <= found.high
    assert 180 <= held <= 198, held
    again = [rng.random() for _ in range(60)]
    assert interval(again) == interval(list(again))


def test_past_the_bootstrap_bound_the_normal_approximation() -> None:
    """More than BOOTSTRAP_MOST rewards: mean +- z * s / sqrt(n), z of NormalDist's 0.975 quantile."""
    rng = random.Random(3)
    rewards = [rng.uniform(-1.0, 1.0) for _ in range(BOOTSTRAP_MOST + 1)]
    found = interval(rewards)
    assert found is not None
    assert found.method == "normal"
    half = statistics.NormalDist().inv_cdf(0.975) * statistics.stdev(rewards) / len(rewards) ** 0.5
    assert found.low == pytest.approx(statistics.fmean(rewards) - half)
    assert found.high == pytest.approx(statistics.fmean(rewards) + half)

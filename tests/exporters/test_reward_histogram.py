"""The measured rewards' histogram: buckets from the declared reward range, published only once declared."""

from __future__ import annotations

import pytest
from prometheus_client.openmetrics import parser as openmetrics_parser

from rollout_telemetry import RolloutTelemetry
from rollout_telemetry._contract.reward_range import reward_bounds
from rollout_telemetry.exporters._exposition import encode
from tests.support import exposition, sample_names, samples

OPENMETRICS = "application/openmetrics-text; version=1.0.0"


def _buckets(telemetry: RolloutTelemetry, agent: str = "math") -> dict[str, float]:
    return {
        dict(labels)["le"]: v
        for (name, labels), v in samples(exposition(telemetry.registry)).items()
        if name == "rollout_measured_reward_bucket" and dict(labels)["agent"] == agent
    }


def test_bounds_of_the_default_range() -> None:
    """[0, 1] gives the lowest reward and ten steps of 0.1, with no float residue."""
    assert reward_bounds((0.0, 1.0)) == (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
    assert reward_bounds((-1.0, 1.0))[:3] == (-1.0, -0.8, -0.6)


def test_no_histogram_without_a_declared_range(telemetry: RolloutTelemetry) -> None:
    """A run that declares no reward range publishes no reward histogram."""
    telemetry.record("math", {"reward": 1.0})
    assert not {name for name in sample_names(exposition(telemetry.registry)) if "measured_reward" in name}


def test_measured_rewards_fill_cumulative_buckets(telemetry: RolloutTelemetry) -> None:
    """Each measured reward counts in the first bucket whose bound is at or above it; masked ones not."""
    telemetry.expect("math", reward_range=(0.0, 1.0))
    rewards = [0.0, 0.0, 0.3, 0.30000000000000004, 0.95, 1.0, 1.0, 1.0, 7.0]
    for reward in rewards:
        telemetry.record("math", {"reward": reward})
    telemetry.record("math", {"reward": 0.5, "mask_sample": True})
    telemetry.record("math", {"reward": None})
    buckets = _buckets(telemetry)
    # By hand: <= 0 holds 0, 0 (a reward below zero: test_a_reward_below_zero_under_a_range_from_zero_...);
    # 0.3 holds 0.3 exactly; 0.30000000000000004 goes to 0.4; 0.95 to 1.0.
    assert buckets["0.0"] == 2
    assert buckets["0.3"] == 3
    assert buckets["0.4"] == 4
    assert buckets["0.9"] == 4
    assert buckets["1.0"] == 8
    assert buckets["+Inf"] == 9
    text = exposition(telemetry.registry)
    parsed = samples(text)
    count = next(v for (name, labels), v in parsed.items() if name == "rollout_measured_reward_count")
    total = next(v for (name, labels), v in parsed.items() if name == "rollout_measured_reward_sum")
    assert count == len(rewards)
    assert total == pytest.approx(sum(rewards))


def test_a_declared_range_sets_the_bucket_bounds(telemetry: RolloutTelemetry) -> None:
    """Rewards in [-1, 1]: the buckets step by 0.2 from -1."""
    telemetry.expect("code", reward_range=(-1, 1))
    telemetry.record("code", {"reward": -0.9})
    buckets = _buckets(telemetry, "code")
    assert list(buckets) == [
        "-1.0",
        "-0.8",
        "-0.6",
        "-0.4",
        "-0.2",
        "0.0",
        "0.2",
        "0.4",
        "0.6",
        "0.8",
        "1.0",
        "+Inf",
    ]
    assert buckets["-1.0"] == 0
    assert buckets["-0.8"] == 1


def test_the_range_is_declared_before_the_first_reward(telemetry: RolloutTelemetry) -> None:
    """A new range after a measured reward is refused (the histogram would miss it); the same is a no-op."""
    telemetry.expect("math", reward_range=(0, 1))
    telemetry.record("math", {"reward": 1.0})
    telemetry.expect("math", reward_range=(0, 1))
    with pytest.raises(ValueError, match="before its first measured reward"):
        telemetry.expect("math", reward_range=(0, 2))
    telemetry.record_failure("code", "session_lost")
    telemetry.expect("code", reward_range=(0, 2))  # a failure is no measured reward


def test_a_range_below_zero_publishes_buckets_but_no_sum(telemetry: RolloutTelemetry) -> None:
    """Buckets below zero: neither format carries ``_sum`` (nor ``_count``, as prometheus_client writes it),
    so prometheus_client's strict OpenMetrics parser reads the whole scrape; a range from zero keeps both."""
    telemetry.expect("code", reward_range=(-1, 1))
    telemetry.expect("math", reward_range=(0, 1))
    for reward in (-0.9, 0.5, 1.0):
        telemetry.record("code", {"reward": reward})
        telemetry.record("math", {"reward": abs(reward)})
    for accept in ("", OPENMETRICS):
        text = encode(telemetry.registry, accept)[0].decode()
        agents = {
            suffix: {line.split('agent="')[1].split('"')[0] for line in text.splitlines() if suffix in line}
            for suffix in (
                "rollout_measured_reward_bucket{",
                "rollout_measured_reward_sum{",
                "_reward_count{",
            )
        }
        assert agents == {
            "rollout_measured_reward_bucket{": {"code", "math"},
            "rollout_measured_reward_sum{": {"math"},
            "_reward_count{": {"math"},
        }, accept
    strict = encode(telemetry.registry, OPENMETRICS)[0].decode()
    families = {f.name: f for f in openmetrics_parser.text_string_to_metric_families(strict)}  # type: ignore[no-untyped-call]
    code = [s for s in families["rollout_measured_reward"].samples if s.labels["agent"] == "code"]
    assert [s.value for s in code if s.labels["le"] in ("-0.8", "0.6", "+Inf")] == [1, 2, 3]


def test_a_reward_below_zero_under_a_range_from_zero_takes_the_sum_away(telemetry: RolloutTelemetry) -> None:
    """A reward under its declared range [0, 1] (-1): the sum could fall, so neither format carries ``_sum``
    nor ``_count`` from then on; the reward is in the lowest bucket and the strict parser reads the scrape
    (it rejected ``_sum`` -1.0)."""
    telemetry.expect("math", reward_range=(0, 1))
    telemetry.record("math", {"reward": 0.5})
    assert "rollout_measured_reward_sum" in sample_names(exposition(telemetry.registry))
    telemetry.record("math", {"reward": -1.0})
    for accept in ("", OPENMETRICS):
        text = encode(telemetry.registry, accept)[0].decode()
        assert "rollout_measured_reward_sum{" not in text
        assert "rollout_measured_reward_count{" not in text
    strict = encode(telemetry.registry, OPENMETRICS)[0].decode()
    families = {f.name: f for f in openmetrics_parser.text_string_to_metric_families(strict)}  # type: ignore[no-untyped-call]
    buckets = {s.labels["le"]: s.value for s in families["rollout_measured_reward"].samples}
    assert (buckets["0.0"], buckets["0.5"], buckets["+Inf"]) == (1, 2, 2)

"""Golden tests for the Gym-compatible progress keys."""

from __future__ import annotations

from rollout_telemetry import RolloutTelemetry
from tests.support import FakeClock


def test_one_good_and_one_judge_masked(telemetry: RolloutTelemetry, clock: FakeClock) -> None:
    """reward averages both (masked included); masked_pct and reward_unmasked appear."""
    telemetry.record("math", {"reward": 1.0})
    telemetry.record("math", {"reward": 0.0, "mask_sample": True, "failure_kind": "judge_failed"})
    clock.advance(60)
    assert telemetry.progress_metrics() == {
        "progress/math/reward": 50.0,
        "progress/math/masked_pct": 50.0,
        "progress/math/reward_unmasked": 100.0,
        "progress/total/rollouts_per_min": 2.0,
    }


def test_all_masked(telemetry: RolloutTelemetry, clock: FakeClock) -> None:
    """With nothing unmasked there is no reward_unmasked; masked_pct is 100."""
    telemetry.record("math", {"reward": 0.0, "mask_sample": True})
    telemetry.record("math", {"reward": 1.0, "mask_sample": True})
    clock.advance(30)
    assert telemetry.progress_metrics() == {
        "progress/math/reward": 50.0,
        "progress/math/masked_pct": 100.0,
        "progress/total/rollouts_per_min": 4.0,
    }


def test_all_failed(telemetry: RolloutTelemetry, clock: FakeClock) -> None:
    """An agent whose every rollout failed still shows its failed key, and no reward key."""
    for _ in range(3):
        telemetry.record_failure("browser", "session_lost", reason="reset timed out")
    clock.advance(60)
    assert telemetry.progress_metrics() == {
        "progress/browser/failed": 3,
        "progress/total/rollouts_per_min": 3.0,  # NeMo Gym counts every finished rollout, failures too
    }


def test_mixed_agents(telemetry: RolloutTelemetry, clock: FakeClock) -> None:
    """A healthy agent gets only its reward key; troubled agents get theirs, negative rewards included."""
    for reward in (1.0, 0.0, 0.5):
        telemetry.record("healthy", {"reward": reward})
    telemetry.record_failure("flaky", "transport_timeout")
    telemetry.record("flaky", {"reward": 0.2})
    telemetry.record_omission("picky", "cancelled")
    telemetry.record("picky", {"reward": -0.4})
    clock.advance(120)
    assert telemetry.progress_metrics() == {
        "progress/healthy/reward": 50.0,
        "progress/flaky/reward": 20.0,
        "progress/flaky/reward_unmasked": 20.0,
        "progress/flaky/failed": 1.0,
        "progress/picky/reward": -40.0,
        "progress/picky/reward_unmasked": -40.0,
        "progress/picky/omitted": 1.0,
        "progress/total/rollouts_per_min": 3.5,  # 7 finished (5 completed, 1 failed, 1 omitted) in 2 min
    }


def test_reward_lower_bound_with_expected_counts(clock: FakeClock) -> None:
    """reward_lower_bound = sum of rewards / (rewarded + still expected), as a percentage."""
    telemetry = RolloutTelemetry(clock=clock, expected={"math": 10})
    telemetry.record("math", {"reward": 1.0})
    telemetry.record("math", {"reward": 0.5})
    telemetry.record_failure("math", "session_lost")
    clock.advance(60)
    keys = telemetry.progress_metrics()
    assert keys["progress/math/reward_lower_bound"] == round(100 * 1.5 / (2 + 7), 2) == 16.67
    assert keys["progress/math/reward"] == 75.0
    assert keys["progress/math/failed"] == 1.0


def test_healthy_run_yields_exactly_the_plain_keys(telemetry: RolloutTelemetry, clock: FakeClock) -> None:
    """Nothing masked, failed or omitted: only reward and the rate, as without this library."""
    telemetry.record("a", {"reward": 0.25})
    telemetry.record("b", {"reward": 0.75})
    clock.advance(60)
    assert set(telemetry.progress_metrics()) == {
        "progress/a/reward",
        "progress/b/reward",
        "progress/total/rollouts_per_min",
    }


def test_rounding_is_two_decimals(telemetry: RolloutTelemetry, clock: FakeClock) -> None:
    """Percentages are rounded to two decimals."""
    for reward in (1.0, 0.0, 0.0):
        telemetry.record("a", {"reward": reward})
    telemetry.record("a", {"reward": 1.0, "mask_sample": True})
    clock.advance(60)
    keys = telemetry.progress_metrics()
    assert keys["progress/a/reward"] == 50.0
    assert keys["progress/a/masked_pct"] == 25.0
    assert keys["progress/a/reward_unmasked"] == 33.33

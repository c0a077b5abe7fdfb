"""Golden tests for the Gym-compatible progress keys."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from rollout_telemetry import RolloutTelemetry
from tests.support import FakeClock, examples


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
    telemetry = RolloutTelemetry(clock=clock)
    telemetry.expect("math", rollouts=10)
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


operations = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),
        st.sampled_from(["measured", "masked", "masked_unrewarded", "unscored", "failed", "omitted"]),
        st.sampled_from([-1.0, -0.25, 0.0, 0.25, 0.5, 1.0]),  # exact in binary: sums carry no rounding error
    ),
    max_size=80,
)


Tally = dict[str, float]
RECORDS: dict[str, Callable[[float], dict[str, object]]] = {
    "measured": lambda reward: {"reward": reward},
    "masked": lambda reward: {"reward": reward, "mask_sample": True, "failure_kind": "judge_failed"},
    "masked_unrewarded": lambda reward: {"mask_sample": True},
    "unscored": lambda reward: {"reward": None, "failure_kind": "verifier_error"},
}


def _tally(operations: list[tuple[str, str, float]]) -> dict[str, Tally]:
    """Per agent: rewarded count and sum, masked, measured and their sum, failed, omitted, finished."""
    tally: dict[str, Tally] = {}
    for agent, what, reward in operations:
        t = tally.setdefault(agent, dict.fromkeys(("n", "sum", "masked", "measured", "msum", "failed"), 0.0))
        t["done"] = t.get("done", 0) + 1
        t["omitted"] = t.get("omitted", 0) + (what == "omitted")
        t["failed"] += what == "failed"
        t["masked"] += what in ("masked", "masked_unrewarded")
        if what in ("measured", "masked"):
            t["n"] += 1
            t["sum"] += reward
        if what == "measured":
            t["measured"] += 1
            t["msum"] += reward
    return tally


def _gym_keys(tally: dict[str, Tally], expected: dict[str, int]) -> dict[str, float]:
    """NeMo Gym 0.7.0's per-agent keys, from the test's own tally."""
    want: dict[str, float] = {}
    for agent, t in tally.items():
        p = f"progress/{agent}/"
        if t["n"]:
            want[p + "reward"] = round(100 * t["sum"] / t["n"], 2)
        left = max(expected[agent] - t["done"], 0) if agent in expected else None
        if left is not None and t["n"] + left:
            want[p + "reward_lower_bound"] = round(100 * t["sum"] / (t["n"] + left), 2)
        if not (t["masked"] or t["failed"] or t["omitted"]):
            continue  # Gym's masking block: absent until something is lost
        if t["masked"]:
            want[p + "masked_pct"] = round(100 * t["masked"] / (t["masked"] + t["measured"]), 2)
        if t["measured"]:
            want[p + "reward_unmasked"] = round(100 * t["msum"] / t["measured"], 2)
        for key in ("failed", "omitted"):
            if t[key]:
                want[p + key] = int(t[key])
    for agent, count in expected.items():  # declared agents with nothing recorded yet
        if agent not in tally and count:
            want[f"progress/{agent}/reward_lower_bound"] = 0.0
    return want


@settings(max_examples=examples(300), deadline=None)
@given(operations=operations, expected=st.dictionaries(st.sampled_from(["a", "b"]), st.integers(0, 60)))
def test_progress_keys_follow_gyms_rules_over_random_runs(
    operations: list[tuple[str, str, float]], expected: dict[str, int]
) -> None:
    """progress_metrics() equals NeMo Gym 0.7.0's rules, applied by the test to the operations it made."""
    clock = FakeClock()
    telemetry = RolloutTelemetry(clock=clock)
    for agent, count in expected.items():
        telemetry.expect(agent, rollouts=count)
    for agent, what, reward in operations:
        if what == "failed":
            telemetry.record_failure(agent, "session_lost")
        elif what == "omitted":
            telemetry.record_omission(agent, "cancelled")
        else:
            telemetry.record(agent, RECORDS[what](reward))
    clock.advance(90)
    want = _gym_keys(_tally(operations), expected)
    want["progress/total/rollouts_per_min"] = len(operations) / 1.5
    assert telemetry.progress_metrics() == want

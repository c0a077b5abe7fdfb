"""The view model of ``top``: rates and reward trends from successive readings, worked out by hand."""

from __future__ import annotations

import pytest

from rollout_telemetry._cli.top_model import (
    AgentTotals,
    InFlightRollout,
    Reading,
    SourceView,
    TopView,
    Tracker,
    TrendPoint,
    top_kind,
    windowed_means,
)


def _reading(
    completed: float, rewarded: float = 0.0, positive: float = 0.0, negative: float = 0.0
) -> Reading:
    totals = AgentTotals(
        "math", completed=completed, rewarded=rewarded, reward_positive=positive, reward_negative=negative
    )
    return Reading((totals,))


def test_rollouts_per_minute_from_two_readings() -> None:
    """No rate on the first reading; then the completed increase over the elapsed time, per minute."""
    tracker = Tracker()
    (first,) = tracker.update(_reading(100), now=1000.0)
    assert first.per_minute is None
    (second,) = tracker.update(_reading(130), now=1005.0)
    assert second.per_minute == pytest.approx(360.0)  # 30 in 5 s


def test_rollouts_per_minute_are_finished_ones_as_in_gyms_key() -> None:
    """Rollouts per minute have one meaning: finished (completed, failed or omitted) per minute, in top as in
    NeMo Gym's progress/total/rollouts_per_min."""
    from rollout_telemetry import RolloutTelemetry
    from tests.support import FakeClock

    tracker = Tracker()
    tracker.update(Reading((AgentTotals("math", completed=10, failed={"x": 5}, omitted={"y": 1}),)), now=0.0)
    (row,) = tracker.update(
        Reading((AgentTotals("math", completed=20, failed={"x": 15}, omitted={"y": 1}),)), now=60.0
    )
    assert row.per_minute == pytest.approx(20.0)  # 10 completed + 10 failed in a minute
    clock = FakeClock()
    telemetry = RolloutTelemetry(clock=clock)
    for _ in range(10):
        telemetry.record("math", {"reward": 1.0})
        telemetry.record_failure("math", "session_lost")
    clock.advance(60.0)
    assert telemetry.progress_metrics()["progress/total/rollouts_per_min"] == pytest.approx(20.0)


def test_top_names_series_through_the_catalogue() -> None:
    """A series name the catalogue does not publish is refused where it is named (top reads through this)."""
    from rollout_telemetry._views.series import published

    assert published("rollout_completed_total") == "rollout_completed_total"
    with pytest.raises(ValueError, match="not in the catalogue"):
        published("rollout_complete_total")


def test_the_rate_spans_the_last_readings_not_just_the_last_gap() -> None:
    """Bursty completions between short refreshes average over the last ten seconds of readings."""
    tracker = Tracker()
    tracker.update(_reading(0), now=0.0)
    tracker.update(_reading(10), now=1.0)
    (row,) = tracker.update(_reading(10), now=2.0)  # nothing in the last second
    assert row.per_minute == pytest.approx(300.0)  # 10 in 2 s
    tracker.update(_reading(10), now=20.0)
    (late,) = tracker.update(_reading(10), now=21.0)
    assert late.per_minute == 0.0


def test_a_counter_that_went_down_is_a_restart() -> None:
    """After a restart, the current value is the increase since it, not a negative rate."""
    tracker = Tracker()
    tracker.update(_reading(500, rewarded=400, positive=300), now=0.0)
    (row,) = tracker.update(_reading(20, rewarded=10, positive=5, negative=1), now=10.0)
    assert row.per_minute == pytest.approx(120.0)  # 20 since the restart, in 10 s
    assert row.trend == (TrendPoint(10.0, 4.0, 10.0, 20.0, 0.0),)


def test_each_reading_adds_what_the_reward_counters_grew_by() -> None:
    """A trend point is the reward sum and rewarded count added since the reading before."""
    tracker = Tracker()
    tracker.update(_reading(10, rewarded=10, positive=6, negative=2), now=0.0)
    (row,) = tracker.update(_reading(14, rewarded=14, positive=7, negative=5), now=2.0)
    (point,) = row.trend
    assert point.reward_sum == pytest.approx(-2.0)  # +1 positive, +3 negative
    assert point.rewarded == 4.0


def test_history_is_bounded_in_time_and_points() -> None:
    """Points older than the history window go, and never more than the cap are kept."""
    tracker = Tracker(history_seconds=10.0, max_points=5)
    row = None
    for second in range(30):
        (row,) = tracker.update(_reading(second, rewarded=second, positive=second), now=float(second))
    assert row is not None
    assert [p.at for p in row.trend] == [25.0, 26.0, 27.0, 28.0, 29.0]
    tracker = Tracker(history_seconds=10.0, max_points=100)
    for second in range(30):
        (row,) = tracker.update(_reading(second), now=float(second))
    assert min(p.at for p in row.trend) >= 19.0


def test_windowed_means_weigh_by_rewarded_rollouts() -> None:
    """Each time slice's mean is its reward sum over its rewarded count; an empty slice has none."""
    points = (
        TrendPoint(at=1.0, reward_sum=1.0, rewarded=1.0),  # slice 0 (0-3 s ago ... oldest)
        TrendPoint(at=7.0, reward_sum=3.0, rewarded=4.0),  # slice 2
        TrendPoint(at=8.0, reward_sum=-1.0, rewarded=4.0),  # slice 2
        TrendPoint(at=-5.0, reward_sum=9.0, rewarded=1.0),  # older than the span
    )
    means = windowed_means(points, now=9.0, span=9.0, buckets=3)
    assert means == [1.0, None, pytest.approx(0.25)]


def test_top_kind_is_the_largest_count() -> None:
    """The most frequent kind; a tie goes to the first name in order; none when nothing counted."""
    assert top_kind({"a": 1, "b": 3, "c": 2}) == "b"
    assert top_kind({"z": 2, "m": 2}) == "m"
    assert top_kind({"x": 0}) is None


def test_oldest_in_flight_merges_sources_that_are_up() -> None:
    """The merged list is the oldest over every source that is up, oldest first."""
    up = SourceView(
        "a", up=True, in_flight=(InFlightRollout("math", "verify", 5.0), InFlightRollout("math", "gen", 1.0))
    )
    other = SourceView("b", up=True, in_flight=(InFlightRollout("code", "gen", 3.0),))
    down = SourceView("c", up=False, in_flight=(InFlightRollout("web", "gen", 99.0),))
    view = TopView((up, other, down), interval=1.0, now=0.0)
    assert [r.age_seconds for r in view.oldest_in_flight(2)] == [5.0, 3.0]
    assert view.has_in_flight_lists
    assert not TopView((SourceView("x", up=True),), 1.0, 0.0).has_in_flight_lists

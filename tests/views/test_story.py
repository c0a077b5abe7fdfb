"""The run's story: points read from the account, thinned by halves, bounded, the last one the report's."""

from __future__ import annotations

import math
import tracemalloc

import pytest

from rollout_telemetry._facade.telemetry import RolloutTelemetry
from rollout_telemetry._store.coverage import CoverageSnapshot
from rollout_telemetry._views import story as story_module
from rollout_telemetry._views.run_report import build_report
from rollout_telemetry._views.story import POINT_FIELDS, RunStory

REWARD, UNMASKED = POINT_FIELDS.index("reward"), POINT_FIELDS.index("reward_unmasked")
FAILED, MASKED = POINT_FIELDS.index("failed"), POINT_FIELDS.index("masked")


def _record(telemetry: RolloutTelemetry, story: RunStory, agent: str, n: int) -> None:
    """``n`` outcomes of ``agent``: every fifth masked, every seventh a failure; a tick after each."""
    for i in range(n):
        if i % 7 == 6:
            telemetry.record_failure(agent, "session_lost")
        else:
            telemetry.record(agent, {"reward": float(i % 2), "mask_sample": i % 5 == 4})
        story.tick()


def test_each_point_is_what_the_account_said_then() -> None:
    """At x rollouts, a point holds the running means and counts the account had after x outcomes."""
    telemetry = RolloutTelemetry(runtime_metrics=False)
    story = RunStory(telemetry.snapshot, "rollouts")
    expected = {}
    for i in range(40):
        _record(telemetry, story, "a", 1)
        agent = telemetry.snapshot().agent("a")
        assert agent is not None
        expected[i + 1] = (agent.mean_reward, agent.failed, agent.masked)
    points = story.points(telemetry.snapshot(), "a")
    assert [point[0] for point in points] == list(range(1, 41))
    for point in points:
        reward, failed, masked = expected[int(point[0])]
        assert point[REWARD] == reward
        assert (point[FAILED], point[MASKED]) == (failed, masked)


def test_points_stay_bounded_and_span_the_whole_run() -> None:
    """However many outcomes, at most ``most`` points per agent, from near the start to the last outcome."""
    telemetry = RolloutTelemetry(runtime_metrics=False)
    story = RunStory(telemetry.snapshot, "rollouts", most=16)
    _record(telemetry, story, "a", 1000)
    points = story.points(telemetry.snapshot(), "a")
    assert len(points) <= 16 + 1
    xs = [point[0] for point in points]
    assert xs == sorted(xs)
    assert xs[-1] == 1000
    assert xs[0] <= 1000 / 8  # thinned by halves: the first point stays near the start


def test_the_last_point_is_the_report_s_numbers() -> None:
    """The charts end where the page's table is: the last point's means are the report's."""
    telemetry = RolloutTelemetry(runtime_metrics=False)
    story = RunStory(telemetry.snapshot, "rollouts", most=8)
    _record(telemetry, story, "a", 333)
    _record(telemetry, story, "b", 5)
    snapshot = telemetry.snapshot()
    report = build_report(snapshot, CoverageSnapshot(agents=()))
    for row in report["agents"]:
        last = story.points(snapshot, row["agent"])[-1]
        assert last[REWARD] == row["events"]["mean_reward"]
        assert last[UNMASKED] == row["events"]["mean_reward_unmasked"]
        assert last[FAILED] == row["events"]["failed"]


def test_an_agent_that_did_not_change_gets_no_point() -> None:
    """An instant adds a point only for the agents whose counts changed since their last one."""
    telemetry = RolloutTelemetry(runtime_metrics=False)
    story = RunStory(telemetry.snapshot, "rollouts")
    telemetry.record("quiet", {"reward": 1.0})
    for _ in range(10):
        telemetry.record("busy", {"reward": 0.0})
        story.tick()
    snapshot = telemetry.snapshot()
    assert len(story.points(snapshot, "quiet")) == 1
    assert len(story.points(snapshot, "busy")) == 10


def test_before_any_reward_the_means_are_nan_not_zero() -> None:
    """An agent with only failures has no mean reward: the chart shows a gap, never a zero."""
    telemetry = RolloutTelemetry(runtime_metrics=False)
    story = RunStory(telemetry.snapshot, "rollouts")
    telemetry.record_failure("down", "judge_unavailable")
    story.tick()
    (point,) = story.points(telemetry.snapshot(), "down")
    assert math.isnan(point[REWARD])
    assert point[FAILED] == 1


def test_the_memory_bound_holds() -> None:
    """Agents changing at every instant, over many thinnings, take what ``memory_bound`` says, measured
    (benchmarks/page_history.py measures 500 agents at the default bound)."""
    telemetry = RolloutTelemetry(runtime_metrics=False)
    most = 16
    story = RunStory(telemetry.snapshot, "seconds", most=most)
    agents = [f"agent-{i:02d}" for i in range(50)]
    for name in agents:
        telemetry.record(name, {"reward": 1.0})
    tracemalloc.start()
    try:
        for _ in range(most * 8):
            for name in agents:
                telemetry.record(name, {"reward": 0.0})
            story.tick()
        allocated = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(True, story_module.__file__)]
        )
    finally:
        tracemalloc.stop()
    held = sum(trace.size for trace in allocated.traces)
    snapshot = telemetry.snapshot()
    assert all(len(story.points(snapshot, name)) <= most + 1 for name in agents)
    assert 0 < held <= story.memory_bound(len(agents)) + len(agents) * 128  # and each array's own header


def test_a_stride_below_one_is_refused() -> None:
    """A story that could never take a point is a programming error."""
    telemetry = RolloutTelemetry(runtime_metrics=False)
    with pytest.raises(ValueError, match="stride"):
        RunStory(telemetry.snapshot, "rollouts", stride=0)


def test_agents_taking_turns_keep_their_whole_history() -> None:
    """Two agents counted in turns (each changes at every other instant): thinning keeps, of each agent, the
    last point of every span, so both charts still start near the beginning and end at the last outcome."""
    telemetry = RolloutTelemetry(runtime_metrics=False)
    story = RunStory(telemetry.snapshot, "rollouts", most=8)
    for i in range(1000):
        telemetry.record("odd" if i % 2 else "even", {"reward": float(i % 3 == 0)})
        story.tick()
    snapshot = telemetry.snapshot()
    for agent in ("odd", "even"):
        points = story.points(snapshot, agent)
        xs = [point[0] for point in points]
        assert xs == sorted(xs)
        assert xs[-1] == 500
        assert xs[0] <= 500 / 4
        assert 4 <= len(points) <= 8 + 1


def test_a_point_taken_after_the_snapshot_is_left_out() -> None:
    """A sampler's tick between a page's snapshot and its points: the chart ends at the snapshot's numbers."""
    clock = [0.0]
    telemetry = RolloutTelemetry(runtime_metrics=False, clock=lambda: clock[0])
    story = RunStory(telemetry.snapshot, "seconds")
    telemetry.record("a", {"reward": 1.0})
    clock[0] = 5.0
    story.tick()
    page_read = telemetry.snapshot()  # the page's snapshot, at 5 s
    clock[0] = 10.0
    telemetry.record("a", {"reward": 0.0})
    story.tick()  # the sampler, before the page asks for the points
    points = story.points(page_read, "a")
    assert [point[0] for point in points] == [5.0]
    assert points[-1][REWARD] == 1.0


def test_most_must_be_even() -> None:
    """Halving ``most`` instants must leave a whole number of them."""
    telemetry = RolloutTelemetry(runtime_metrics=False)
    with pytest.raises(ValueError, match="even"):
        RunStory(telemetry.snapshot, "rollouts", most=7)

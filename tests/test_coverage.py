"""The run coverage account: newest attempt wins, the coverage identity, and Gym's end-of-run keys."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rollout_telemetry import Disposition
from rollout_telemetry.coverage import Coverage, coverage_metrics

MEASURED, MASKED, FAILED = Disposition.MEASURED, Disposition.MASKED, Disposition.FAILED


def test_one_good_and_one_masked_rollout_of_the_same_task() -> None:
    """The task is measured, not fully masked; the masked keys appear."""
    coverage = Coverage()
    coverage.observe("math", 0, 0, 0, MEASURED)
    coverage.observe("math", 0, 1, 0, MASKED)
    assert coverage_metrics(coverage.snapshot()) == {
        "coverage/measured_rollouts": 1,
        "coverage/masked_rollouts": 1,
        "coverage/measured_tasks": 1,
        "coverage/fully_masked_tasks": 0,
    }


def test_all_masked() -> None:
    """Every rollout of the task masked: one fully masked task, no measured task."""
    coverage = Coverage()
    coverage.observe("math", 0, 0, 0, MASKED)
    coverage.observe("math", 0, 1, 0, MASKED)
    assert coverage_metrics(coverage.snapshot()) == {
        "coverage/measured_rollouts": 0,
        "coverage/masked_rollouts": 2,
        "coverage/measured_tasks": 0,
        "coverage/fully_masked_tasks": 1,
    }


def test_nothing_masked_no_masked_keys() -> None:
    """Without masking, and without expected rollouts, there are no coverage keys at all."""
    coverage = Coverage()
    coverage.observe("math", 0, 0, 0, MEASURED)
    assert coverage_metrics(coverage.snapshot()) == {}


def test_run_level_keys_with_expected() -> None:
    """With materialized inputs the run-level counts appear, unknown included."""
    coverage = Coverage()
    for rollout in range(3):
        coverage.expect("math", 0, rollout)
    coverage.observe("math", 0, 0, 0, FAILED)
    coverage.observe("math", 0, 0, 1, MEASURED)
    keys = coverage_metrics(coverage.snapshot())
    assert keys == {
        "coverage/expected": 3,
        "coverage/measured": 1,
        "coverage/masked": 0,
        "coverage/unscored": 0,
        "coverage/failed": 0,
        "coverage/omitted": 0,
        "coverage/unknown": 2,
    }


def test_newest_attempt_wins_whatever_the_arrival_order() -> None:
    """A late line of an older attempt does not overwrite a newer one; retries are counted."""
    coverage = Coverage()
    coverage.observe("a", 1, 0, 2, MEASURED)
    coverage.observe("a", 1, 0, 1, FAILED)
    agent = coverage.snapshot().agent("a")
    assert agent is not None
    assert agent.rollouts[MEASURED] == 1
    assert agent.rollouts[FAILED] == 0
    assert agent.retried == 1


def test_a_task_with_an_unseen_rollout_is_not_fully_masked() -> None:
    """Fully masked means every rollout of the task is seen and masked."""
    coverage = Coverage()
    coverage.expect("a", 0, 0)
    coverage.expect("a", 0, 1)
    coverage.observe("a", 0, 0, 0, MASKED)
    agent = coverage.snapshot().agent("a")
    assert agent is not None
    assert agent.fully_masked_tasks == 0


attempts = st.lists(
    st.tuples(
        st.sampled_from(["a", "b"]),
        st.integers(0, 3),
        st.integers(0, 2),
        st.one_of(st.none(), st.integers(0, 3)),
        st.sampled_from(list(Disposition)),
    ),
    max_size=60,
)
expected = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 3), st.integers(0, 2)), max_size=30
)


@settings(max_examples=300, deadline=None)
@given(expected=expected, attempts=attempts, split=st.integers(0, 60))
def test_coverage_identity_holds_at_every_moment(
    expected: list[tuple[str, int, int]],
    attempts: list[tuple[str, int, int, int | None, Disposition]],
    split: int,
) -> None:
    """expected = measured + masked + unscored + failed + omitted + unknown, no term negative, throughout."""
    coverage = Coverage()
    steps: list[tuple[str, tuple[object, ...]]] = [("observe", a) for a in attempts]
    for i, identity in enumerate(expected):  # interleave the inputs with the attempts
        steps.insert(min(split + i, len(steps)), ("expect", identity))
    seen: set[tuple[str, int, int]] = set()
    for kind, args in steps:
        if kind == "expect":
            coverage.expect(*args)  # type: ignore[arg-type]
        else:
            coverage.observe(*args)  # type: ignore[arg-type]
            seen.add(args[:3])  # type: ignore[arg-type]
        snap = coverage.snapshot()
        for agent in snap.agents:
            assert all(count >= 0 for count in agent.rollouts.values())
            if snap.expected_known:
                assert agent.unknown is not None
                assert agent.expected is not None
                assert agent.unknown >= 0
                assert agent.expected == sum(agent.rollouts.values()) + agent.unknown
        assert sum(a.seen for a in snap.agents) == len(seen)
    retried = sum(a.retried for a in coverage.snapshot().agents)
    assert retried == len(attempts) - len(seen)

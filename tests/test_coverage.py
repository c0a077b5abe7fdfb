"""The run coverage account: newest attempt wins, the coverage identity, and Gym's end-of-run keys."""

from __future__ import annotations

from typing import Literal

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


Identity = tuple[str, int, int]
Attempt = tuple[str, int, int, int | None, Disposition]
Step = tuple[Literal["expect"], Identity] | tuple[Literal["observe"], Attempt]


def _model(steps: list[Step]) -> tuple[set[Identity], dict[Identity, tuple[int | None, Disposition]]]:
    """The test's own account of the steps: the declared identities, and the newest attempt of each seen one
    (a higher attempt index wins; for equal or missing indices, the later line)."""
    declared: set[Identity] = set()
    newest: dict[Identity, tuple[int | None, Disposition]] = {}
    for step in steps:
        if step[0] == "expect":
            declared.add(step[1])
            continue
        agent, task, rollout, attempt, disposition = step[1]
        older = newest.get((agent, task, rollout))
        if older is None or attempt is None or older[0] is None or attempt >= older[0]:
            newest[(agent, task, rollout)] = (attempt, disposition)
    return declared, newest


@settings(max_examples=300, deadline=None)
@given(expected=expected, attempts=attempts, split=st.integers(0, 60))
def test_coverage_matches_an_independent_account_at_every_moment(
    expected: list[Identity], attempts: list[Attempt], split: int
) -> None:
    """Each agent's dispositions, expected, unknown and retries equal the test's own account, throughout."""
    coverage = Coverage()
    steps: list[Step] = [("observe", a) for a in attempts]
    for i, identity in enumerate(expected):  # interleave the inputs with the attempts
        steps.insert(min(split + i, len(steps)), ("expect", identity))
    for done, step in enumerate(steps, start=1):
        if step[0] == "expect":
            coverage.expect(*step[1])
        else:
            coverage.observe(*step[1])
        declared, newest = _model(steps[:done])
        known = any(s[0] == "expect" for s in steps[:done])
        seen = set(newest)
        snap = coverage.snapshot()
        assert snap.expected_known is known
        agents = {a for a, _, _ in seen} | ({a for a, _, _ in declared} if known else set())
        assert {a.agent for a in snap.agents} == agents
        for agent in snap.agents:
            name = agent.agent
            mine = {identity for identity in seen if identity[0] == name}
            wanted = {identity for identity in declared if identity[0] == name}
            by_disposition = dict.fromkeys(Disposition, 0)
            for identity in mine:
                by_disposition[newest[identity][1]] += 1
            assert dict(agent.rollouts) == by_disposition
            observed = sum(1 for s in steps[:done] if s[0] == "observe" and s[1][0] == name)
            assert agent.retried == observed - len(mine)
            if known:
                # Expected: the identities in the inputs plus those seen outside them; unknown: not seen yet.
                assert agent.expected == len(wanted | mine)
                assert agent.unknown == len(wanted - mine)
            else:
                assert agent.expected is None
                assert agent.unknown is None
        if known:
            assert snap.unexpected == len(seen - declared)

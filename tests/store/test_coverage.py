"""The run coverage account: newest attempt wins, the coverage identity, and Gym's end-of-run keys."""

from __future__ import annotations

from typing import Literal

from hypothesis import given, settings
from hypothesis import strategies as st

from rollout_telemetry import Disposition
from rollout_telemetry._store.coverage import Coverage
from rollout_telemetry._views.progress import coverage_metrics
from tests.support import examples

MEASURED, MASKED, FAILED = Disposition.MEASURED, Disposition.MASKED, Disposition.FAILED
UNSCORED = Disposition.UNSCORED


def _ok(
    coverage: Coverage, agent: str, identity: tuple[int, int], attempt: int, disposition: Disposition
) -> None:
    assert coverage.observe(agent, identity, attempt, disposition, succeeded=True)[0] is None


def _fail(
    coverage: Coverage, agent: str, task: int, rollout: int, attempt: int, *, terminal: bool = False
) -> None:
    coverage.observe(agent, (task, rollout), attempt, FAILED, succeeded=False, terminal=terminal)


def test_one_good_and_one_masked_rollout_of_the_same_task() -> None:
    """The task is measured, not fully masked; the masked keys appear."""
    coverage = Coverage()
    _ok(coverage, "math", (0, 0), 0, MEASURED)
    _ok(coverage, "math", (0, 1), 0, MASKED)
    assert coverage_metrics(coverage.snapshot()) == {
        "coverage/measured_rollouts": 1,
        "coverage/masked_rollouts": 1,
        "coverage/measured_tasks": 1,
        "coverage/fully_masked_tasks": 0,
    }


def test_all_masked() -> None:
    """Every rollout of the task masked: one fully masked task, no measured task."""
    coverage = Coverage()
    _ok(coverage, "math", (0, 0), 0, MASKED)
    _ok(coverage, "math", (0, 1), 0, MASKED)
    assert coverage_metrics(coverage.snapshot()) == {
        "coverage/measured_rollouts": 0,
        "coverage/masked_rollouts": 2,
        "coverage/measured_tasks": 0,
        "coverage/fully_masked_tasks": 1,
    }


def test_nothing_masked_no_masked_keys() -> None:
    """Without masking, and without expected rollouts, there are no coverage keys at all."""
    coverage = Coverage()
    _ok(coverage, "math", (0, 0), 0, MEASURED)
    assert coverage_metrics(coverage.snapshot()) == {}


def test_run_level_keys_with_expected() -> None:
    """With materialized inputs Gym's three end-of-run keys appear: expected, scored, missing."""
    coverage = Coverage()
    for rollout in range(3):
        coverage.expect("math", 0, rollout)
    _fail(coverage, "math", 0, 0, 0)
    _ok(coverage, "math", (0, 0), 1, MEASURED)
    _fail(coverage, "math", 0, 1, 0)
    keys = coverage_metrics(coverage.snapshot())
    # 3 materialized; rollout 0 has a main-file row (its retry), rollout 1 only a failure, rollout 2 nothing.
    assert keys == {"coverage/expected": 3, "coverage/scored": 1, "coverage/missing": 2}


def test_gym_expected_counts_the_materialized_inputs_only() -> None:
    """A rollout seen outside the materialized inputs is scored but not expected, as Gym counts them."""
    coverage = Coverage()
    coverage.expect("math", 0, 0)
    _ok(coverage, "math", (0, 0), 0, MEASURED)
    _ok(coverage, "math", (7, 0), 0, MEASURED)
    keys = coverage_metrics(coverage.snapshot())
    assert keys == {"coverage/expected": 1, "coverage/scored": 2, "coverage/missing": -1}


def test_newest_attempt_wins_whatever_the_arrival_order() -> None:
    """A late line of an older attempt does not overwrite a newer one; retries are counted."""
    coverage = Coverage()
    _ok(coverage, "a", (1, 0), 2, MEASURED)
    _fail(coverage, "a", 1, 0, 1)
    agent = coverage.snapshot().agent("a")
    assert agent is not None
    assert agent.rollouts[MEASURED] == 1
    assert agent.rollouts[FAILED] == 0
    assert agent.retried == 1


def test_an_unstamped_failure_read_later_does_not_override_a_stamped_success() -> None:
    """Attempt 0 is unstamped: its failure, read after the success of attempt 1, changes nothing."""
    coverage = Coverage()
    _ok(coverage, "a", (0, 0), 1, MEASURED)
    _fail(coverage, "a", 0, 0, 0)
    agent = coverage.snapshot().agent("a")
    assert agent is not None
    assert (agent.rollouts[MEASURED], agent.rollouts[FAILED], agent.retryable) == (1, 0, 0)


def test_a_success_wins_over_a_failure_of_the_same_attempt_in_either_order() -> None:
    """At the same attempt, the main output's row wins whichever file is read first."""
    for first_success in (True, False):
        coverage = Coverage()
        if first_success:
            _ok(coverage, "a", (0, 0), 1, MASKED)
        _fail(coverage, "a", 0, 0, 1)
        if not first_success:
            _ok(coverage, "a", (0, 0), 1, MASKED)
        agent = coverage.snapshot().agent("a")
        assert agent is not None
        assert (agent.rollouts[MASKED], agent.rollouts[FAILED]) == (1, 0)


def test_a_repeated_success_is_a_duplicate() -> None:
    """The same identity and attempt twice in the main output: the second is refused, naming the first."""
    coverage = Coverage()
    assert coverage.observe("a", (0, 0), 0, MEASURED, succeeded=True, line=3)[0] is None
    assert coverage.observe("a", (0, 0), 0, MEASURED, succeeded=True, line=9)[0] == 3
    agent = coverage.snapshot().agent("a")
    assert agent is not None
    assert (agent.rollouts[MEASURED], agent.retried) == (1, 0)


def test_retryable_follows_nemo_gyms_resume_rule() -> None:
    """Failed with attempts left is retryable; terminal, out of attempts or succeeded is final."""
    coverage = Coverage(max_attempts=2)
    _fail(coverage, "a", 0, 0, 0)  # one attempt used of two: retryable
    _fail(coverage, "a", 1, 0, 0, terminal=True)  # terminal: final
    _fail(coverage, "a", 2, 0, 0)
    _fail(coverage, "a", 2, 0, 1)  # two attempts used of two: final
    agent = coverage.snapshot().agent("a")
    assert agent is not None
    assert (agent.rollouts[FAILED], agent.retryable) == (3, 1)
    _ok(coverage, "a", (0, 0), 1, MEASURED)  # retried and succeeded
    agent = coverage.snapshot().agent("a")
    assert agent is not None
    assert (agent.rollouts[FAILED], agent.retryable) == (2, 0)


def test_a_row_without_identity_is_a_rollout_of_its_own() -> None:
    """Rows without an identity are each counted and counted apart; they fill the agent's unknown rollouts
    first, as NeMo Gym counts rows against its inputs, and only beyond those add to expected."""
    coverage = Coverage()
    coverage.expect("a", 0, 0)
    coverage.expect("a", 0, 1)
    coverage.observe("a", None, 0, MEASURED, succeeded=True)
    agent = coverage.snapshot().agent("a")
    assert agent is not None
    assert (agent.rollouts[MEASURED], agent.unidentified, agent.unknown, agent.expected) == (1, 1, 1, 2)
    for _ in range(2):
        coverage.observe("a", None, 0, MEASURED, succeeded=True)
    snap = coverage.snapshot()
    agent = snap.agent("a")
    assert agent is not None
    assert (agent.rollouts[MEASURED], agent.unidentified, agent.unknown, agent.expected) == (3, 3, 0, 3)
    assert snap.unexpected == 1


def test_fully_masked_and_measured_tasks_as_nemo_gym_counts_them() -> None:
    """A task is fully masked when every one of its rows in the main output is masked (unseen and failed
    rollouts count neither way), and measured when one is not masked, an unscored one included."""
    coverage = Coverage()
    coverage.expect("a", 0, 0)
    coverage.expect("a", 0, 1)
    _ok(coverage, "a", (0, 0), 0, MASKED)
    _fail(coverage, "a", 0, 2, 0)
    agent = coverage.snapshot().agent("a")
    assert agent is not None
    assert (agent.fully_masked_tasks, agent.measured_tasks) == (1, 0)
    _ok(coverage, "a", (0, 1), 0, UNSCORED)
    agent = coverage.snapshot().agent("a")
    assert agent is not None
    assert (agent.fully_masked_tasks, agent.measured_tasks) == (0, 1)


rows = st.lists(
    st.tuples(
        st.sampled_from(["a", "b"]),
        st.one_of(st.none(), st.tuples(st.integers(0, 3), st.integers(0, 2))),
        st.integers(0, 3),
        st.booleans(),  # a success (main output) or a failure
        st.sampled_from(list(Disposition)),
        st.booleans(),  # terminal, for a failure
    ),
    max_size=60,
)
expected = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 3), st.integers(0, 2)), max_size=30
)

Identity = tuple[str, int, int]
Row = tuple[str, tuple[int, int] | None, int, bool, Disposition, bool]
Step = tuple[Literal["expect"], Identity] | tuple[Literal["observe"], Row]
MAX_ATTEMPTS = 2


def _check_against_model(coverage: Coverage, steps: list[Step]) -> None:
    """Compare the snapshot with the test's own account of the steps, computed from scratch."""
    declared: set[Identity] = set()
    records: dict[Identity, list[tuple[int, bool, int, Disposition, bool]]] = {}
    unidentified: dict[str, list[Disposition]] = {}
    for order, step in enumerate(steps):
        if step[0] == "expect":
            declared.add(step[1])
            continue
        name, row_identity, attempt, success, disposition, terminal = step[1]
        if row_identity is None:
            unidentified.setdefault(name, []).append(disposition)
            continue
        mine = records.setdefault((name, *row_identity), [])
        if success and any(r[0] == attempt and r[1] for r in mine):
            continue  # a duplicate success
        mine.append((attempt, success, order, disposition, terminal))
    known = bool(declared)
    snap = coverage.snapshot()
    assert snap.expected_known is known
    agents = (
        {a for a, _, _ in records} | set(unidentified) | ({a for a, _, _ in declared} if known else set())
    )
    assert {a.agent for a in snap.agents} == agents
    for agent in snap.agents:
        name = agent.agent
        mine_ids = {i for i in records if i[0] == name}
        by_disposition = dict.fromkeys(Disposition, 0)
        for identity in mine_ids:
            by_disposition[max(records[identity])[3]] += 1  # (attempt, success, line order) decides
        for disposition in unidentified.get(name, []):
            by_disposition[disposition] += 1
        assert dict(agent.rollouts) == by_disposition
        assert agent.retried == sum(len(records[i]) - 1 for i in mine_ids)
        assert agent.unidentified == len(unidentified.get(name, []))
        assert agent.retryable == sum(
            1
            for i in mine_ids
            if not any(r[1] for r in records[i])
            and not any(r[4] for r in records[i] if not r[1])
            and 0 < sum(1 for r in records[i] if not r[1]) < MAX_ATTEMPTS
        )
        wanted = {i for i in declared if i[0] == name}
        tasks = {(i[1]) for i in wanted | mine_ids}
        measured_tasks = fully_masked = 0
        for task in tasks:  # as NeMo Gym's reward profile: the task's rows in the main output
            members = {i for i in wanted | mine_ids if i[1] == task}
            decided = [max(records[i])[3] for i in members if i in records]
            reached = [d for d in decided if d in (MEASURED, MASKED, UNSCORED)]
            measured_tasks += any(d is not MASKED for d in reached)
            fully_masked += bool(reached) and all(d is MASKED for d in reached)
        assert (agent.measured_tasks, agent.fully_masked_tasks) == (measured_tasks, fully_masked)
        if known:
            seen = len(mine_ids) + len(unidentified.get(name, []))
            filled = min(len(unidentified.get(name, [])), len(wanted - mine_ids))  # unknown ones they fill
            assert agent.expected == len(wanted | mine_ids) + len(unidentified.get(name, [])) - filled
            assert agent.unknown == len(wanted - mine_ids) - filled
            assert agent.expected == seen + agent.unknown
        else:
            assert agent.expected is None
            assert agent.unknown is None


@settings(max_examples=examples(300), deadline=None)
@given(expected=expected, rows=rows, split=st.integers(0, 60))
def test_coverage_matches_an_independent_account_at_every_moment(
    expected: list[Identity], rows: list[Row], split: int
) -> None:
    """Dispositions, retries, retryable, tasks, expected and unknown equal an independent account, always."""
    coverage = Coverage(max_attempts=MAX_ATTEMPTS)
    steps: list[Step] = [("observe", row) for row in rows]
    for i, identity in enumerate(expected):  # interleave the inputs with the rows
        steps.insert(min(split + i, len(steps)), ("expect", identity))
    for done, step in enumerate(steps, start=1):
        if step[0] == "expect":
            coverage.expect(*step[1])
        else:
            name, row_identity, attempt, success, disposition, terminal = step[1]
            coverage.observe(name, row_identity, attempt, disposition, succeeded=success, terminal=terminal)
        _check_against_model(coverage, steps[:done])

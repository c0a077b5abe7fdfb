"""Groups: every state, classified once, retried members replacing earlier ones, sizes from each source."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rollout_telemetry import Disposition, RolloutTelemetry
from rollout_telemetry._cli.main import main
from rollout_telemetry._contract.group_state import GROUP_STATES, contaminated, group_state
from rollout_telemetry._contract.outcome import absent, classify
from rollout_telemetry._sources.follow import RunFiles
from tests.support import exposition, groups_of, recording_part, sample_names, samples, value

FIXTURES = Path(__file__).parents[1] / "fixtures"


def _states(telemetry: RolloutTelemetry, agent: str = "math") -> dict[str, float]:
    return {
        dict(labels)["state"]: v
        for (name, labels), v in samples(exposition(telemetry.registry)).items()
        if name == "rollout_groups_total" and dict(labels)["agent"] == agent
    }


@pytest.mark.parametrize(
    ("rewards", "state"),
    [
        ([1.0, 0.0, 0.5, 1.0], "valid"),
        ([1.0, 0.0, None, 1.0], "degraded"),
        ([1.0, 1.0, 1.0, 1.0], "uniform"),
        ([0.0, 0.0, None, None], "uniform"),
        ([1.0, None, None, None], "insufficient"),
        ([None, None, None, None], "no_valid"),
    ],
)
def test_group_state(rewards: list[float | None], state: str) -> None:
    """Each state from its members' rewards (None: not valid), with the default min_valid of 2."""
    assert group_state(rewards) == state


def test_min_valid_per_group_moves_the_insufficient_line() -> None:
    """Three valid members of four are insufficient when three are not enough."""
    assert group_state([1.0, 0.0, 0.5, None], min_valid=4) == "insufficient"
    assert group_state([1.0, 0.0, 0.5, None], min_valid=3) == "degraded"


def test_every_state_through_the_facade(telemetry: RolloutTelemetry) -> None:
    """Members recorded with record(), record_failure() and the lifecycle form groups of the declared size."""
    telemetry.expect("math", group_size=2)
    telemetry.record("math", {"reward": 1.0}, task_index=0, rollout_index=0)
    telemetry.record("math", {"reward": 0.0}, task_index=0, rollout_index=1)  # valid
    telemetry.record("math", {"reward": 1.0}, task_index=1, rollout_index=0)
    telemetry.record("math", {"reward": 1.0}, task_index=1, rollout_index=1)  # uniform
    telemetry.record("math", {"reward": 1.0}, task_index=2, rollout_index=0)
    telemetry.record_failure("math", "session_lost", task_index=2, rollout_index=1)  # insufficient
    telemetry.record("math", {"reward": 0.0, "mask_sample": True}, task_index=3, rollout_index=0)
    telemetry.record_omission("math", "cancelled", task_index=3, rollout_index=1)  # no valid member
    with telemetry.rollout("math", task_index=4, rollout_index=0) as rollout:
        rollout.complete({"reward": 1.0})
    assert _states(telemetry) == dict.fromkeys(GROUP_STATES, 0) | {
        "valid": 1,
        "uniform": 1,
        "insufficient": 1,
        "no_valid": 1,
    }
    with telemetry.rollout("math", task_index=4, rollout_index=1) as rollout:
        rollout.fail("session_lost")
    assert _states(telemetry)["insufficient"] == 2
    groups = groups_of(telemetry).agent("math")
    assert groups is not None
    assert groups.open == 0
    assert groups.completed == 5


def test_degraded_needs_enough_valid_members_that_differ() -> None:
    """Three valid members of four, rewards differing, one failed: degraded."""
    telemetry = RolloutTelemetry()
    telemetry.expect("code", rollouts=8, group_size=4)
    for index, reward in enumerate((1.0, 0.0, 0.5)):
        telemetry.record("code", {"reward": reward}, task_index=7, rollout_index=index)
    telemetry.record_failure("code", "transport_timeout", task_index=7, rollout_index=3)
    assert _states(telemetry, "code")["degraded"] == 1


def test_groups_appear_only_once_one_completes(telemetry: RolloutTelemetry) -> None:
    """No family before a group completes, and none for agents without a group size."""
    telemetry.record("math", {"reward": 1.0}, task_index=0, rollout_index=0)
    telemetry.expect("math", group_size=2)
    telemetry.record("math", {"reward": 1.0}, task_index=1, rollout_index=0)
    assert "rollout_groups_total" not in sample_names(exposition(telemetry.registry))
    assert groups_of(telemetry).agents == ()


def test_a_retried_member_replaces_its_earlier_attempt(telemetry: RolloutTelemetry) -> None:
    """A failed member retried before its group completes is replaced: the group is judged on the retry."""
    telemetry.expect("math", group_size=3)
    telemetry.record_failure("math", "session_lost", task_index=0, rollout_index=0)
    telemetry.record("math", {"reward": 1.0}, task_index=0, rollout_index=0)  # the retry
    telemetry.record("math", {"reward": 0.0}, task_index=0, rollout_index=1)
    assert "rollout_groups_total" not in sample_names(exposition(telemetry.registry))  # 2 members of 3
    telemetry.record("math", {"reward": 0.5}, task_index=0, rollout_index=2)
    assert _states(telemetry)["valid"] == 1
    assert sum(_states(telemetry).values()) == 1


def test_a_group_never_completes_twice(telemetry: RolloutTelemetry) -> None:
    """A retry arriving after its group completed changes nothing; the outcome itself is still counted."""
    telemetry.expect("math", group_size=2)
    telemetry.record("math", {"reward": 1.0}, task_index=0, rollout_index=0)
    telemetry.record_failure("math", "session_lost", task_index=0, rollout_index=1)
    telemetry.record("math", {"reward": 0.0}, task_index=0, rollout_index=1)  # late retry
    telemetry.record("math", {"reward": 0.5}, task_index=0, rollout_index=2)  # more members than the size
    assert _states(telemetry) == dict.fromkeys(GROUP_STATES, 0) | {"insufficient": 1}
    text = exposition(telemetry.registry)
    assert value(text, "rollout_completed_total", agent="math") == 3
    # Both would have changed the group: counted late.
    assert value(text, "rollout_groups_late_outcomes_total", agent="math") == 2


def test_only_an_outcome_that_would_change_a_classified_group_is_late(telemetry: RolloutTelemetry) -> None:
    """After a group completes: an older attempt, or a newer one with the same disposition, changes nothing
    the group counts; a newer attempt that turns a failed member valid is late."""
    telemetry.expect("math", group_size=2)
    telemetry.record("math", {"reward": 1.0}, task_index=0, rollout_index=0, attempt=1)
    telemetry.record_failure("math", "session_lost", task_index=0, rollout_index=1, attempt=0)
    assert "rollout_groups_late_outcomes_total" not in sample_names(exposition(telemetry.registry))
    telemetry.record_failure("math", "session_lost", task_index=0, rollout_index=0, attempt=0)  # older
    telemetry.record_failure("math", "transport_timeout", task_index=0, rollout_index=1, attempt=1)  # failed
    assert "rollout_groups_late_outcomes_total" not in sample_names(exposition(telemetry.registry))
    telemetry.record("math", {"reward": 0.0}, task_index=0, rollout_index=1, attempt=2)
    assert value(exposition(telemetry.registry), "rollout_groups_late_outcomes_total", agent="math") == 1
    assert _states(telemetry)["insufficient"] == 1  # as classified


def test_deferred_groups_are_classified_from_their_final_outcomes() -> None:
    """Inside deferred(), a group whose member is retried after the others arrived is judged on the retry;
    a group still short of members stays open; a new run classifies the groups of the run that ended."""
    telemetry = RolloutTelemetry()
    telemetry.expect("math", group_size=2)
    with recording_part(telemetry).deferred_groups():
        telemetry.record("math", {"reward": 1.0}, task_index=0, rollout_index=0)
        telemetry.record_failure("math", "session_lost", task_index=0, rollout_index=1)
        telemetry.record("math", {"reward": 0.0}, task_index=0, rollout_index=1, attempt=1)
        telemetry.record("math", {"reward": 1.0}, task_index=1, rollout_index=0)
        assert "rollout_groups_total" not in sample_names(exposition(telemetry.registry))
        telemetry.record("math", {"reward": 1.0}, task_index=2, rollout_index=0)
        telemetry.record("math", {"reward": 1.0}, task_index=2, rollout_index=1)
        recording_part(telemetry).new_run()  # task 2 complete, task 1 not: classified and dropped
        telemetry.record("math", {"reward": 1.0}, task_index=0, rollout_index=0)
    assert _states(telemetry) == dict.fromkeys(GROUP_STATES, 0) | {"valid": 1, "uniform": 1}
    math_groups = groups_of(telemetry).agent("math")
    assert math_groups is not None
    assert (math_groups.open, math_groups.late) == (1, 0)


def test_bad_identity_is_rejected_and_the_outcome_still_counted(telemetry: RolloutTelemetry) -> None:
    """A task index that is not an integer >= 0 is rejected by field; the rollout is counted, in no group."""
    telemetry.expect("math", group_size=1)
    telemetry.record("math", {"reward": 1.0}, task_index=-1, rollout_index=0)
    telemetry.record("math", {"reward": 1.0}, task_index=0, rollout_index="0")  # type: ignore[arg-type]
    text = exposition(telemetry.registry)
    assert value(text, "rollout_telemetry_rejected_total", reason="invalid_task_index") == 1
    assert value(text, "rollout_telemetry_rejected_total", reason="invalid_rollout_index") == 1
    assert value(text, "rollout_completed_total", agent="math") == 2
    assert "rollout_groups_total" not in sample_names(text)


def test_bad_group_size_is_refused(telemetry: RolloutTelemetry) -> None:
    """A group size must be an integer >= 1."""
    with pytest.raises(ValueError, match="group_size"):
        telemetry.expect("math", group_size=0)


def test_follow_mode_sizes_groups_from_the_materialized_inputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Members per task come from the inputs: a task of three, one of two, retries replace failures."""
    inputs = [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]
    run = tmp_path / "run.jsonl"
    (tmp_path / "run_materialized_inputs.jsonl").write_text(
        "".join(
            json.dumps({"_ng_task_index": t, "_ng_rollout_index": r, "agent_ref": {"name": "math"}}) + "\n"
            for t, r in inputs
        )
    )

    def row(task: int, rollout: int, reward: float, attempt: int = 0) -> str:
        identity = {"_ng_task_index": task, "_ng_rollout_index": rollout, "_ng_attempt_index": attempt}
        return json.dumps({**identity, "agent_ref": {"name": "math"}, "reward": reward}) + "\n"

    failure = {"_ng_task_index": 1, "_ng_rollout_index": 1, "agent_ref": {"name": "math"}}
    (tmp_path / "run_failures.jsonl").write_text(json.dumps(failure) + "\n")
    run.write_text(row(0, 0, 1.0) + row(0, 1, 1.0) + row(1, 0, 0.0))
    telemetry = RolloutTelemetry()
    follower = telemetry._run_follower(RunFiles.from_main(run))
    follower.poll()
    # Task 1 completed as insufficient (one valid member, one failed); task 0 waits for its third.
    assert _states(telemetry) == dict.fromkeys(GROUP_STATES, 0) | {"insufficient": 1}
    with run.open("a") as out:
        out.write(row(0, 2, 1.0) + row(1, 1, 1.0, attempt=1))
    follower.poll()
    # Task 1's retry arrived after its group was classified: late, and the group stays insufficient live.
    assert _states(telemetry) == dict.fromkeys(GROUP_STATES, 0) | {"insufficient": 1, "uniform": 1}
    assert value(exposition(telemetry.registry), "rollout_groups_late_outcomes_total", agent="math") == 1
    # report classifies each group from its final outcomes: task 1 is valid (0.0 and 1.0).
    assert main(["report", str(run), "--format", "json"]) == 0
    groups = json.loads(capsys.readouterr().out)["groups"]["math"]
    assert groups == dict.fromkeys(GROUP_STATES, 0) | {"valid": 1, "uniform": 1, "open": 0}


def test_an_earlier_attempt_arriving_late_does_not_replace_a_newer_one(telemetry: RolloutTelemetry) -> None:
    """Attempt 1 succeeded; the failure row of attempt 0 read after it leaves the member measured."""
    telemetry.expect("math", group_size=2)
    recording_part(telemetry).record_checked("math", classify({"reward": 1.0}), (0, 0), attempt=1)
    recording_part(telemetry).record_checked(
        "math", absent(Disposition.FAILED, "session_lost"), (0, 0), attempt=0
    )
    telemetry.record("math", {"reward": 0.0}, task_index=0, rollout_index=1)
    assert _states(telemetry)["valid"] == 1


def test_report_shows_the_groups_of_the_fixture_run(capsys: pytest.CaptureFixture[str]) -> None:
    """report --format json: groups of several rollouts by state per agent, sized by the materialized inputs;
    worked by hand."""
    assert main(["report", str(FIXTURES / "run.jsonl"), "--format", "json"]) == 0
    groups = json.loads(capsys.readouterr().out)["groups"]
    zero = dict.fromkeys(GROUP_STATES, 0)
    # math task 0: one measured, one masked member: one valid member is insufficient.
    assert groups["math_agent"] == zero | {"insufficient": 1, "open": 0}
    # code tasks 1 and 2 have one rollout each: nothing to compare, no group shown.
    assert "code_agent" not in groups
    # browser task 3: a failure and an omission (no valid member); task 4 never arrived (open).
    assert groups["browser_agent"] == zero | {"no_valid": 1, "open": 1}
    assert main(["report", str(FIXTURES / "run.jsonl")]) == 0
    assert "Groups by agent" in capsys.readouterr().out


def _by(telemetry: RolloutTelemetry, family: str, label: str, agent: str = "math") -> dict[str, float]:
    return {
        dict(labels)[label]: v
        for (name, labels), v in samples(exposition(telemetry.registry)).items()
        if name == family and dict(labels)["agent"] == agent
    }


@pytest.mark.parametrize(
    ("rewards", "expected"),
    [
        ([1.0, 0.0, 0.5], False),
        ([None, None, None], False),
        ([1.0, None, 0.0], True),
        ([None, 0.0, None], True),
    ],
)
def test_contaminated(rewards: list[float | None], expected: bool) -> None:
    """A group is contaminated only when a valid member (a reward) sits beside one that is not (None)."""
    assert contaminated(rewards) is expected


def test_baselines_and_uniform_directions_through_the_facade(telemetry: RolloutTelemetry) -> None:
    """Six groups of three: contaminated ones by state, uniform ones by direction, members by disposition."""
    telemetry.expect("math", group_size=3)
    groups: list[list[float | str]] = [
        [1.0, 0.0, "failed"],  # degraded, contaminated
        [1.0, 1.0, "masked"],  # uniform at the highest, contaminated
        [0.0, 0.0, 0.0],  # uniform at the lowest, clean
        [1.0, "failed", "omitted"],  # insufficient, contaminated
        ["failed", "failed", "omitted"],  # no valid member: nothing to contaminate
        [0.5, 0.5, 0.5],  # uniform elsewhere
    ]
    for task, members in enumerate(groups):
        for index, member in enumerate(members):
            if member == "failed":
                telemetry.record_failure("math", "session_lost", task_index=task, rollout_index=index)
            elif member == "omitted":
                telemetry.record_omission("math", "cancelled", task_index=task, rollout_index=index)
            elif member == "masked":
                telemetry.record(
                    "math", {"reward": 0.0, "mask_sample": True}, task_index=task, rollout_index=index
                )
            else:
                telemetry.record("math", {"reward": member}, task_index=task, rollout_index=index)
    assert _by(telemetry, "rollout_groups_contaminated_total", "state") == {
        "degraded": 1,
        "uniform": 1,
        "insufficient": 1,
    }
    assert _by(telemetry, "rollout_groups_uniform_total", "reward") == {"lowest": 1, "highest": 1, "other": 1}
    # Counted by hand from the table above: 18 members.
    assert _by(telemetry, "rollout_group_members_total", "disposition") == {
        "measured": 11,
        "masked": 1,
        "unscored": 0,
        "failed": 4,
        "omitted": 2,
    }
    text = exposition(telemetry.registry)
    assert value(text, "rollout_groups_total", agent="math", state="uniform") == 3  # the state is unchanged


def test_a_retried_member_leaves_no_contamination(telemetry: RolloutTelemetry) -> None:
    """A failure retried into a success before its group completes: a clean group, no new family at all."""
    telemetry.expect("math", group_size=2)
    telemetry.record_failure("math", "session_lost", task_index=0, rollout_index=0)
    telemetry.record("math", {"reward": 1.0}, task_index=0, rollout_index=0)  # the retry
    telemetry.record("math", {"reward": 0.0}, task_index=0, rollout_index=1)
    names = sample_names(exposition(telemetry.registry))
    assert "rollout_groups_total" in names
    assert not names & {
        "rollout_groups_contaminated_total",
        "rollout_group_members_total",
        "rollout_groups_uniform_total",
    }


def test_a_retry_that_fails_again_counts_its_newest_attempt(telemetry: RolloutTelemetry) -> None:
    """Attempt 0 measured, attempt 1 failed: the member stands as failed, the baseline contaminated."""
    telemetry.expect("math", group_size=2)
    recording_part(telemetry).record_checked("math", classify({"reward": 1.0}), (0, 0), attempt=0)
    recording_part(telemetry).record_checked(
        "math", absent(Disposition.FAILED, "session_lost"), (0, 0), attempt=1
    )
    telemetry.record("math", {"reward": 0.0}, task_index=0, rollout_index=1)
    assert _by(telemetry, "rollout_group_members_total", "disposition")["failed"] == 1
    assert _by(telemetry, "rollout_groups_contaminated_total", "state")["insufficient"] == 1


def test_a_declared_reward_range_moves_the_ends(telemetry: RolloutTelemetry) -> None:
    """With rewards in [-1, 1], a uniform 0 is other, a uniform -1 the lowest and 2 (beyond) the highest."""
    telemetry.expect("math", group_size=2)
    telemetry.expect("math", reward_range=(-1, 1))
    for task, reward in enumerate((0.0, -1.0, 2.0)):
        for index in range(2):
            telemetry.record("math", {"reward": reward}, task_index=task, rollout_index=index)
    assert _by(telemetry, "rollout_groups_uniform_total", "reward") == {"lowest": 1, "highest": 1, "other": 1}


@pytest.mark.parametrize("reward_range", [(1, 0), (0, 0), (0, math.inf), ("a", 1), (0,), (0, 1, 2)])
def test_a_bad_reward_range_is_refused(
    telemetry: RolloutTelemetry, reward_range: tuple[float, float]
) -> None:
    """A range must be two finite numbers, the lowest below the highest."""
    with pytest.raises(ValueError, match="reward_range"):
        telemetry.expect("math", reward_range=reward_range)

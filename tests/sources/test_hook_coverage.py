"""Run coverage in hook mode: expected work declared through the facade, outcomes recorded with their identity
and attempt, and one account whichever door the outcomes come through (the hook API or Gym's files)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event as tally
from hypothesis import given, settings
from hypothesis import strategies as st

from rollout_telemetry import Disposition, RolloutTelemetry
from rollout_telemetry._cli.main import main
from rollout_telemetry._cli.simulation import DemoConfig, run_demo
from rollout_telemetry._sources.follow import RunFiles
from rollout_telemetry._views.run_report import build_report
from rollout_telemetry.errors import ConfigError
from tests.support import (
    FakeClock,
    coverage_of,
    examples,
    exposition,
    groups_of,
    recording_part,
    samples,
    value,
)
from tests.virtual_loop import idle, run_virtual

AGENTS = ("math", "code")
IDENTITIES = [(task, rollout) for task in range(3) for rollout in range(2)]
KINDS = ("measured", "masked", "unscored", "failed", "omitted", "terminal")

# One outcome: (agent, identity or None, attempt, kind, reward, whether attempt 0 is written out).
Event = tuple[str, tuple[int, int] | None, int, str, float, bool]
event = st.tuples(
    st.sampled_from(AGENTS),
    st.one_of(st.none(), st.sampled_from(IDENTITIES), st.sampled_from(IDENTITIES)),
    st.integers(0, 3),
    st.sampled_from(KINDS),
    st.sampled_from([0.0, 0.25, 1.0, -0.5]),
    st.booleans(),
)
events = st.lists(event, max_size=30)
expected_work = st.fixed_dictionaries({agent: st.sets(st.sampled_from(IDENTITIES)) for agent in AGENTS})


def _record(telemetry: RolloutTelemetry, event: Event) -> None:
    """Give one outcome to the hook API, as a training loop would."""
    agent, identity, attempt, kind, reward, stamped = event
    task, rollout = identity if identity is not None else (None, None)
    given_attempt = attempt if identity is not None and (attempt or stamped) else None
    if kind in ("measured", "masked", "unscored"):
        response = {"reward": None if kind == "unscored" else reward, "mask_sample": kind == "masked"}
        telemetry.record(agent, response, task_index=task, rollout_index=rollout, attempt=given_attempt)
    elif kind == "omitted":
        telemetry.record_omission(
            agent, "cancelled", task_index=task, rollout_index=rollout, attempt=given_attempt
        )
    else:
        telemetry.record_failure(
            agent,
            "session_lost",
            task_index=task,
            rollout_index=rollout,
            attempt=given_attempt,
            terminal=kind == "terminal",
        )


def _row(event: Event) -> tuple[str, str]:
    """The file ("main" or "failures") and the line NeMo Gym writes for one outcome."""
    agent, identity, attempt, kind, reward, stamped = event
    row: dict[str, Any] = {"agent_ref": {"name": agent}}
    if identity is not None:
        row |= {"_ng_task_index": identity[0], "_ng_rollout_index": identity[1]}
    if attempt or stamped:
        row["_ng_attempt_index"] = attempt
    if kind in ("measured", "masked", "unscored"):
        row |= {"reward": None if kind == "unscored" else reward, "mask_sample": kind == "masked"}
        return "main", json.dumps(row)
    failure = "cancelled" if kind == "omitted" else "session_lost"
    row |= {"_ng_failure_record": {"failure": {"failure_kind": failure}}, "_ng_omitted": kind == "omitted"}
    row["_ng_failure_terminal"] = kind == "terminal"
    return "failures", json.dumps(row)


def _report_of(telemetry: RolloutTelemetry) -> dict[str, Any]:
    """What ``report --format json`` prints of a telemetry's state, through JSON as the CLI prints it."""
    report = build_report(telemetry.snapshot(), coverage_of(telemetry), groups_of(telemetry))
    decoded: dict[str, Any] = json.loads(json.dumps(report))
    return decoded


def _keys(telemetry: RolloutTelemetry) -> dict[str, float]:
    keys = telemetry.progress_metrics()
    del keys["progress/total/rollouts_per_min"]  # a rate of the live run
    return keys


@settings(max_examples=examples(300), deadline=None)
@given(expected_work, events)
def test_the_hook_api_and_the_files_fill_one_account(
    expected: dict[str, set[tuple[int, int]]], sequence: list[Event]
) -> None:
    """The same outcomes (retries, duplicates, failures, omissions, masks, rows without identity) through the
    hook API and through Gym's files: equal coverage, groups, counts and Gym keys, live and in report."""
    hook = RolloutTelemetry(clock=FakeClock())
    final = RolloutTelemetry(clock=FakeClock())  # each group classified from its final outcomes
    for telemetry in (hook, final):
        telemetry.expect(max_attempts=3)  # as a follower keeps one, whatever its inputs file holds
    for agent in AGENTS:
        if expected[agent]:  # an inputs file names only the agents it has rows of
            hook.expect(agent, identities=sorted(expected[agent]))
            final.expect(agent, identities=sorted(expected[agent]))
    with recording_part(final).deferred_groups():
        for event in sequence:
            _record(hook, event)
            _record(final, event)

    with tempfile.TemporaryDirectory() as folder:
        main_file = Path(folder) / "run.jsonl"
        files = {"main": main_file, "failures": Path(folder) / "run_failures.jsonl"}
        Path(folder, "run_materialized_inputs.jsonl").write_text(
            "".join(
                json.dumps({"_ng_task_index": t, "_ng_rollout_index": r, "agent_ref": {"name": agent}}) + "\n"
                for agent in AGENTS
                for t, r in sorted(expected[agent])
            )
        )
        for path in files.values():
            path.write_text("")
        live = RolloutTelemetry(clock=FakeClock())
        follower = live._run_follower(RunFiles.from_main(main_file))
        follower.poll()
        for event in sequence:  # appended a line at a time, read as it arrives
            which, line = _row(event)
            with files[which].open("a") as out:
                out.write(line + "\n")
            follower.poll()
        follower.finish()
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            status = main(["report", str(main_file), "--format", "json"])

    assert coverage_of(hook) == coverage_of(live)
    assert groups_of(hook) == groups_of(live)
    assert _keys(hook) == _keys(live)
    assert _report_of(hook) == _report_of(live)
    # Live, a group is classified when it completes; an outcome that would change it later is counted late.
    late = sum(agent.late for agent in groups_of(live).agents)
    finals = groups_of(final)
    tally(f"groups classified: {bool(sum(a.completed for a in finals.agents))}, late outcomes: {bool(late)}")
    assert sum(agent.late for agent in finals.agents) == 0
    if late == 0:
        assert finals == groups_of(live)
    if sequence:  # with no row at all, what report says of the inputs alone is another test's
        assert status == 0
        reported = json.loads(printed.getvalue())
        del reported["file"]  # which file report read: the hook has none
        del reported["notable"]  # rows at lines of the files: the hook keeps none
        read = ("mean_reward_ci95", "mean_reward_unmasked_ci95", "rewards", "measured_rewards", "per_task")
        for agent in reported["agents"]:  # the rewards' intervals and pass@k, of the rows report read
            for key in read:
                del agent["events"][key]
        # report reads the main file before its sidecar, in no known order with it: it classifies each
        # group from its final outcomes, which the live account does too when nothing arrived late.
        assert _report_of(final) == reported
        if late == 0:
            assert _report_of(hook) == reported
        else:
            by_groups = {"groups": None, "training_signal": None}
            assert {**_report_of(hook), **by_groups} == {**reported, **by_groups}
        assert _keys(hook) == {**reported["gym_progress"], **reported["gym_coverage"]}


def test_expected_tasks_publish_the_run_families_and_gym_keys() -> None:
    """expect(tasks=...) declares tasks x rollouts: rollout_run_* and coverage/* keys count them, newest
    attempt deciding, and reward_lower_bound divides by the rollouts still expected."""
    telemetry = RolloutTelemetry(run="r")
    telemetry.expect("math", tasks=2, rollouts_per_task=2)
    telemetry.record_failure("math", "session_lost", task_index=0, rollout_index=0)
    telemetry.record("math", {"reward": 1.0}, task_index=0, rollout_index=0, attempt=1)  # the retry succeeds
    telemetry.record("math", {"reward": 0.0, "mask_sample": True}, task_index=0, rollout_index=1)
    telemetry.record_failure("math", "session_lost", task_index=1, rollout_index=0, terminal=True)
    text = exposition(telemetry.registry)
    rollouts = {
        dict(labels)["disposition"]: count
        for (name, labels), count in samples(text).items()
        if name == "rollout_run_rollouts"
    }
    assert rollouts == {"measured": 1, "masked": 1, "unscored": 0, "failed": 1, "omitted": 0, "unknown": 1}
    assert value(text, "rollout_run_expected", agent="math", run="r") == 4
    assert value(text, "rollout_retried_total", agent="math", run="r") == 1
    assert value(text, "rollout_run_retryable", agent="math", run="r") == 0  # terminal
    keys = telemetry.progress_metrics()
    assert keys["coverage/expected"] == 4
    assert keys["coverage/scored"] == 2
    assert keys["coverage/missing"] == 2
    assert keys["coverage/masked_rollouts"] == 1
    # Gym's bound: the reward sum (1.0) over the rewarded events (2) and the rollouts expected beyond the
    # events finished (4 expected, 4 events: none); without expected work the key is absent.
    assert keys["progress/math/reward_lower_bound"] == 50.0


def test_without_expected_work_an_identity_only_groups() -> None:
    """No expected work declared: no rollout_run_* series; a repeated identity is counted twice, as before."""
    telemetry = RolloutTelemetry()
    telemetry.record("math", {"reward": 1.0}, task_index=0, rollout_index=0)
    telemetry.record("math", {"reward": 1.0}, task_index=0, rollout_index=0)
    text = exposition(telemetry.registry)
    assert not [name for name, _ in samples(text) if name.startswith("rollout_run_")]
    assert value(text, "rollout_completed_total", agent="math") == 2
    assert "coverage/expected" not in telemetry.progress_metrics()


def test_a_repeated_success_is_a_counted_rejection_and_counted_once() -> None:
    """With expected work, the same identity and attempt reaching the output twice counts once and is
    rejected as duplicate_rollout; a rollout block's repeat still ends its flight."""
    telemetry = RolloutTelemetry()
    telemetry.expect("math", tasks=1, rollouts_per_task=1)
    telemetry.record("math", {"reward": 1.0}, task_index=0, rollout_index=0)
    # attempt 0 is the unstamped attempt
    telemetry.record("math", {"reward": 0.5}, task_index=0, rollout_index=0, attempt=0)
    with telemetry.rollout("math", task_index=0, rollout_index=0) as rollout:
        rollout.complete({"reward": 0.5})
    snapshot = telemetry.snapshot()
    agent = snapshot.agent("math")
    assert agent is not None
    assert agent.in_flight == 0
    assert agent.completed == 2  # the record() repeat is not counted; the block's ran and is
    assert snapshot.rejected == {"duplicate_rollout": 2}
    coverage = coverage_of(telemetry).agent("math")
    assert coverage is not None
    assert coverage.seen == 1
    assert coverage.retried == 0


def test_rollout_blocks_feed_coverage_with_their_attempt() -> None:
    """rollout(task_index=, rollout_index=, attempt=) blocks: a failed attempt then its retry, one rollout."""
    telemetry = RolloutTelemetry()
    telemetry.expect("math", tasks=1, rollouts_per_task=2)
    with telemetry.rollout("math", task_index=0, rollout_index=0, attempt=0) as rollout:
        rollout.fail("session_lost")
    assert coverage_of(telemetry).agents[0].retryable == 1
    with telemetry.rollout("math", task_index=0, rollout_index=0, attempt=1) as rollout:
        rollout.complete({"reward": 1.0})
    with telemetry.rollout("math", task_index=0, rollout_index=1, attempt=0) as rollout:
        rollout.omit("cancelled", terminal=True)
    (coverage,) = coverage_of(telemetry).agents
    assert (coverage.rollouts[Disposition.MEASURED], coverage.rollouts[Disposition.OMITTED]) == (1, 1)
    assert (coverage.unknown, coverage.retried, coverage.retryable) == (0, 1, 0)


def test_abandon_leaves_a_rollout_uncounted_and_unknown() -> None:
    """abandon() takes a rollout out of flight counted nowhere: unknown against the expected work."""
    telemetry = RolloutTelemetry()
    telemetry.expect("math", tasks=1, rollouts_per_task=1)
    with telemetry.rollout("math", task_index=0, rollout_index=0) as rollout:
        rollout.abandon()
        rollout.complete({"reward": 1.0})  # too late: the rollout was abandoned
    agent = telemetry.snapshot().agent("math")
    assert agent is not None
    assert (agent.in_flight, agent.completed, agent.failed) == (0, 0, 0)
    assert telemetry.snapshot().rejected == {"duplicate_outcome": 1}
    assert coverage_of(telemetry).agents[0].unknown == 1


def test_expect_inputs_reads_gyms_materialized_inputs(tmp_path: Path) -> None:
    """expect_inputs declares each row's rollout under its agent; a bad row is a counted rejection."""
    inputs = tmp_path / "run_materialized_inputs.jsonl"
    rows = [
        {"_ng_task_index": 0, "_ng_rollout_index": 0, "agent_ref": {"name": "math"}},
        {"_ng_task_index": 0, "_ng_rollout_index": 1, "_ng_environment_server": "math"},
        {"_ng_task_index": 1, "_ng_rollout_index": 0},
        {"agent_ref": {"name": "math"}},
    ]
    inputs.write_text("".join(json.dumps(row) + "\n" for row in rows) + "\nnot json\n")
    telemetry = RolloutTelemetry()
    assert telemetry.expect("code", inputs=inputs) == 3
    coverage = coverage_of(telemetry)
    assert {a.agent: a.expected for a in coverage.agents} == {"code": 1, "math": 2}
    assert telemetry.snapshot().rejected == {"missing_identity": 1, "malformed_json": 1}
    with pytest.raises(ConfigError, match="cannot be read"):
        telemetry.expect(inputs=tmp_path / "missing.jsonl")


def test_bad_expected_work_is_refused() -> None:
    """A negative task count, a group of 0 and a second max_attempts are one-line errors."""
    telemetry = RolloutTelemetry()
    with pytest.raises(ConfigError, match="tasks"):
        telemetry.expect("math", tasks=-1)
    with pytest.raises(ConfigError, match="rollouts_per_task"):
        telemetry.expect("math", tasks=1, rollouts_per_task=0)
    with pytest.raises(ConfigError, match=r"^identities\[1\]: task_index: .* got -1$"):
        telemetry.expect("math", identities=[(0, 0), (-1, 0)])
    assert coverage_of(telemetry).agents == ()  # refused before anything was declared
    telemetry.expect(max_attempts=3)
    with pytest.raises(ConfigError, match="3 attempts, not 5"):
        telemetry.expect(max_attempts=5)


def test_declared_work_keeps_the_account_kept_with_other_attempts(tmp_path: Path) -> None:
    """Expected work declared after the account was kept with 5 attempts (a follower's --max-attempts
    reading its inputs) goes to that account: expect() never asks for the default 3 again."""
    telemetry = RolloutTelemetry()
    telemetry.expect(max_attempts=5)
    telemetry.expect("math", tasks=2, rollouts_per_task=2)
    with pytest.raises(ConfigError, match="5 attempts, not 3"):
        telemetry.expect(max_attempts=3)
    assert {a.agent: a.expected for a in coverage_of(telemetry).agents} == {"math": 4}


def test_a_stopped_demo_leaves_its_rollouts_in_flight_unknown_not_failed(clock: FakeClock) -> None:
    """Stopping the demo (its task cancelled) abandons the rollouts in flight: none is counted failed, none
    stays in flight, and expected = done + unknown. The demo runs on a loop on the telemetry's fake clock."""
    telemetry = RolloutTelemetry(clock=clock)
    config = DemoConfig(rate=400, duration=10.0, seed=1, failed=0.0, omitted=0.0, stalled=0.0)

    async def stopped() -> int:
        demo = asyncio.create_task(run_demo(telemetry, config))
        # Each rollout takes up to 2 s: let the loop's time pass until some are in flight and some are done.
        for _ in range(1000):
            if in_flight(telemetry) >= 20 and done(telemetry) >= 5:
                break
            await idle(0.01)
        abandoned = in_flight(telemetry)  # nothing runs between this line and the cancellation
        demo.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await demo
        return abandoned

    abandoned = run_virtual(stopped(), clock)
    assert abandoned >= 20
    assert done(telemetry) >= 5
    snapshot = telemetry.snapshot()
    assert sum(a.failed + a.omitted for a in snapshot.agents) == 0
    assert in_flight(telemetry) == 0
    coverage = coverage_of(telemetry)
    expected = sum(a.expected or 0 for a in coverage.agents)
    unknown = sum(a.unknown or 0 for a in coverage.agents)
    assert expected == 4000  # 400 a second for 10 s, declared before the first started
    assert done(telemetry) + unknown == expected
    assert sum(a.seen for a in coverage.agents) == done(telemetry)


def in_flight(telemetry: RolloutTelemetry) -> int:
    """Rollouts in flight now, over every agent."""
    return sum(a.in_flight for a in telemetry.snapshot().agents)


def done(telemetry: RolloutTelemetry) -> int:
    """Rollouts with an outcome, over every agent."""
    return sum(a.completed + a.failed + a.omitted for a in telemetry.snapshot().agents)


def test_an_attempt_not_given_is_attempt_0_for_groups_too() -> None:
    """With expected work, a success without an attempt and a failure stamped attempt 0 are one attempt: the
    success stands in its group as in the coverage account (a valid group, not a degraded one)."""
    telemetry = RolloutTelemetry()
    telemetry.expect("math", tasks=1, rollouts_per_task=2)
    telemetry.record("math", {"reward": 1.0}, task_index=0, rollout_index=0)
    telemetry.record_failure("math", "session_lost", task_index=0, rollout_index=0, attempt=0)
    telemetry.record("math", {"reward": 0.5}, task_index=0, rollout_index=1)
    (groups,) = groups_of(telemetry).agents
    assert groups.states["valid"] == 1
    (coverage,) = coverage_of(telemetry).agents
    assert coverage.rollouts[Disposition.MEASURED] == 2


def test_the_docs_page_example_prints_what_it_says() -> None:
    """docs/coverage-in-hook-mode.md's example runs as written and prints the figures its comments give."""
    page = (Path(__file__).parents[2] / "docs" / "coverage-in-hook-mode.md").read_text(encoding="utf-8")
    (example,) = re.findall(r"```python\n(.*?)```", page, re.S)
    said = [comment.strip() for comment in re.findall(r"print\(.*\)  # (.*)", example)]
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", example],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == said


# A failure's (stage, delivery) as given, values outside NeMo Gym's sets included.
STAGE_GIVEN = st.sampled_from([None, "agent", "verification", "cleanup", "seeding"])
DELIVERY_GIVEN = st.sampled_from([None, "not_sent", "delivered", "sent"])
_RECOVERY = ("rollout_attempts", "rollout_retries_exhausted_total", "rollout_failure_stages_total")
_REFUSED = ("invalid_stage", "invalid_delivery")


def _record_where(telemetry: RolloutTelemetry, event: Event, stage: str | None, delivery: str | None) -> None:
    """``_record``, a failure or omission carrying its stage and delivery."""
    agent, identity, attempt, kind, _, stamped = event
    if kind in ("measured", "masked", "unscored"):
        _record(telemetry, event)
        return
    task, rollout = identity if identity is not None else (None, None)
    given_attempt = attempt if identity is not None and (attempt or stamped) else None
    record = telemetry.record_omission if kind == "omitted" else telemetry.record_failure
    record(
        agent,
        "cancelled" if kind == "omitted" else "session_lost",
        task_index=task,
        rollout_index=rollout,
        attempt=given_attempt,
        terminal=kind == "terminal",
        stage=stage,
        delivery=delivery,
    )


def _row_where(event: Event, stage: str | None, delivery: str | None) -> tuple[str, str]:
    """``_row``, a failure row carrying its stage and delivery in its failure record, as NeMo Gym 0.7.0's
    ``RolloutFailure`` does."""
    which, line = _row(event)
    if which == "main":
        return which, line
    row = json.loads(line)
    record = row["_ng_failure_record"]
    if stage is not None:
        record["failure"]["stage"] = stage
    if delivery is not None:
        record["delivery"] = delivery
    return which, json.dumps(row)


def _recovery_series(telemetry: RolloutTelemetry) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """The attempts, exhausted and failure-stage series of /metrics, and the stage and delivery refusals."""
    parsed = samples(exposition(telemetry.registry))
    return {
        key: count
        for key, count in parsed.items()
        if key[0].startswith(_RECOVERY)
        or (key[0] == "rollout_telemetry_rejected_total" and dict(key[1])["reason"] in _REFUSED)
    }


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.tuples(event, STAGE_GIVEN, DELIVERY_GIVEN), max_size=40))
def test_the_hook_api_and_the_files_agree_on_attempts_exhaustion_and_stages(
    sequence: list[tuple[Event, str | None, str | None]],
) -> None:
    """The same attempts (retries, terminal failures, budgets used up, duplicates, rows without identity,
    stages and deliveries good and bad) through the hook API and through a followed Gym-shaped failures
    file: equal rollout_attempts, rollout_retries_exhausted_total and rollout_failure_stages_total."""
    hook = RolloutTelemetry(clock=FakeClock())
    hook.expect(max_attempts=3)
    with tempfile.TemporaryDirectory() as folder:
        main_file = Path(folder) / "run.jsonl"
        files = {"main": main_file, "failures": Path(folder) / "run_failures.jsonl"}
        for path in files.values():
            path.write_text("")
        live = RolloutTelemetry(clock=FakeClock())
        follower = live._run_follower(RunFiles.from_main(main_file))
        for one, stage, delivery in sequence:
            _record_where(hook, one, stage, delivery)
            which, line = _row_where(one, stage, delivery)
            with files[which].open("a") as out:
                out.write(line + "\n")
            follower.poll()
        follower.finish()
    assert _recovery_series(hook) == _recovery_series(live)

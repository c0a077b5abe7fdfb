"""Retries and recovery: attempts until a terminal outcome, the retry delay, retries exhausted, and failures
by NeMo Gym's stage and delivery, through the hook API, the lifecycle, and followed Gym 0.7.0 files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rollout_telemetry import RolloutTelemetry
from rollout_telemetry._sources.follow import RunFiles
from rollout_telemetry.errors import OutcomeError
from tests.support import FakeClock, exposition, sample_names, samples, value

REAL = Path(__file__).parents[1] / "fixtures" / "gym-0.7.0"
RECOVERY_FAMILIES = (
    "rollout_attempts",
    "rollout_retry_delay_seconds",
    "rollout_retries_exhausted_total",
    "rollout_failure_stages_total",
)
"""The recovery families: none without expected work or a failure's stage, and never an identity label."""
IDENTITY = {"task", "task_index", "rollout", "rollout_index", "attempt"}


def _names(telemetry: RolloutTelemetry) -> set[str]:
    return sample_names(exposition(telemetry.registry))


def _histogram(telemetry: RolloutTelemetry, name: str, agent: str = "math") -> dict[str, float]:
    """An agent's histogram as {le: cumulative count, "sum": .., "count": ..}, parsed from /metrics."""
    parsed: dict[str, float] = {}
    for (sample, labels), count in samples(exposition(telemetry.registry)).items():
        found = dict(labels)
        if found.get("agent") != agent:
            continue
        if sample == f"{name}_bucket":
            parsed[found["le"]] = count
        elif sample in (f"{name}_sum", f"{name}_count"):
            parsed[sample.rsplit("_", 1)[1]] = count
    return parsed


def _by_labels(telemetry: RolloutTelemetry, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(labels)): count
        for (sample, labels), count in samples(exposition(telemetry.registry)).items()
        if sample == name
    }


def _counts_below(attempts: list[int], bounds: tuple[str, ...]) -> dict[str, float]:
    """Cumulative bucket counts computed here, independently of the histogram code."""
    return {bound: sum(1 for a in attempts if bound == "+Inf" or a <= float(bound)) for bound in bounds}


def test_a_healthy_run_and_a_run_without_coverage_publish_none_of_the_new_families() -> None:
    """Outcomes without coverage (identity or not) and failures without stage or delivery add no family."""
    telemetry = RolloutTelemetry(clock=FakeClock())
    telemetry.record("math", {"reward": 1.0})
    telemetry.record("math", {"reward": 1.0}, task_index=0, rollout_index=0)
    telemetry.record_failure("math", "session_lost", task_index=1, rollout_index=0)
    telemetry.record_failure("math", "session_lost", task_index=1, rollout_index=0, attempt=1)
    with telemetry.rollout("math", task_index=2, rollout_index=0) as rollout:
        rollout.complete({"reward": 0.5})
    names = _names(telemetry)
    assert not [name for name in names if name.startswith(RECOVERY_FAMILIES)]


def test_attempts_count_each_identity_once_at_its_terminal_outcome() -> None:
    """rollout_attempts observes each identity once, when a success, a terminal failure or the last attempt
    of the budget makes it final, with the attempts it took; a retryable failure observes nothing yet."""
    telemetry = RolloutTelemetry(clock=FakeClock())
    telemetry.expect(max_attempts=3)
    telemetry.record("math", {"reward": 1.0}, task_index=0, rollout_index=0)  # 1 attempt
    telemetry.record_failure("math", "session_lost", task_index=1, rollout_index=0)
    assert _histogram(telemetry, "rollout_attempts")["count"] == 1  # the retryable failure: not final yet
    telemetry.record("math", {"reward": 0.0}, task_index=1, rollout_index=0, attempt=1)  # 2 attempts
    for attempt in range(3):  # the budget used up: 3 attempts
        telemetry.record_failure("math", "session_lost", task_index=2, rollout_index=0, attempt=attempt)
    telemetry.record_failure("math", "judge_failed", task_index=3, rollout_index=0, terminal=True)  # 1
    # a success stamped 4: 5 attempts
    telemetry.record("math", {"reward": 1.0}, task_index=4, rollout_index=0, attempt=4)
    # after its terminal outcome: not again
    telemetry.record("math", {"reward": 1.0}, task_index=3, rollout_index=0, attempt=1)
    bounds = ("1.0", "2.0", "3.0", "4.0", "5.0", "6.0", "8.0", "10.0", "16.0", "+Inf")
    expected = {**_counts_below([1, 2, 3, 1, 5], bounds), "sum": 12.0, "count": 5.0}
    assert _histogram(telemetry, "rollout_attempts") == expected


def test_unstamped_retries_count_their_rows() -> None:
    """Failures recorded without an attempt index still count as attempts: the budget's last one is final."""
    telemetry = RolloutTelemetry(clock=FakeClock())
    telemetry.expect(max_attempts=2)
    telemetry.record_failure("math", "session_lost", task_index=0, rollout_index=0)
    telemetry.record_failure("math", "session_lost", task_index=0, rollout_index=0)
    assert _histogram(telemetry, "rollout_attempts")["count"] == 1
    assert _histogram(telemetry, "rollout_attempts")["sum"] == 2
    text = exposition(telemetry.registry)
    assert value(text, "rollout_retries_exhausted_total", agent="math", failure_kind="session_lost") == 1


def test_retries_exhausted_by_budget_or_a_terminal_failure_after_a_retry() -> None:
    """Exhausted: the last failure terminal after at least one retry, or the attempts budget used up; a
    terminal failure at the first attempt, a success after retries, or a retryable failure is not."""
    telemetry = RolloutTelemetry(clock=FakeClock())
    telemetry.expect(max_attempts=3)
    telemetry.record_failure("math", "judge_failed", task_index=0, rollout_index=0, terminal=True)
    telemetry.record_failure("math", "session_lost", task_index=1, rollout_index=0)
    telemetry.record("math", {"reward": 1.0}, task_index=1, rollout_index=0, attempt=1)
    telemetry.record_failure("math", "session_lost", task_index=2, rollout_index=0)
    assert "rollout_retries_exhausted_total" not in _names(telemetry)
    telemetry.record_failure("math", "session_lost", task_index=3, rollout_index=0)
    telemetry.record_failure("math", "skipped", task_index=3, rollout_index=0, attempt=1, terminal=True)
    for attempt in range(3):
        telemetry.record_omission("math", "cancelled", task_index=4, rollout_index=0, attempt=attempt)
    assert _by_labels(telemetry, "rollout_retries_exhausted_total") == {
        (("agent", "math"), ("failure_kind", "skipped")): 1,
        (("agent", "math"), ("failure_kind", "cancelled")): 1,
    }


def test_retry_delay_sums_the_gaps_between_a_failure_and_the_next_start(clock: FakeClock) -> None:
    """The lifecycle's retry delay: from each failed attempt's outcome to the next attempt's start, summed
    per identity, observed once it is final after a retry; a first-try success observes none."""
    telemetry = RolloutTelemetry(clock=clock)
    telemetry.expect(max_attempts=5)
    for attempt, wait in ((0, 0.0), (1, 4.0), (2, 2.5)):
        clock.advance(wait)
        with telemetry.rollout("math", task_index=0, rollout_index=0, attempt=attempt) as rollout:
            clock.advance(10.0)  # the attempt's own time is no delay
            if attempt < 2:
                rollout.fail("session_lost")
            else:
                rollout.complete({"reward": 1.0})
    with telemetry.rollout("math", task_index=1, rollout_index=0) as rollout:
        rollout.complete({"reward": 1.0})
    histogram = _histogram(telemetry, "rollout_retry_delay_seconds")
    assert (histogram["count"], histogram["sum"]) == (1, 6.5)
    assert (histogram["5.0"], histogram["10.0"]) == (0, 1)


def test_retry_delay_of_record_calls_is_between_the_records(clock: FakeClock) -> None:
    """Without the lifecycle an attempt's start is its record: the delay is the time between the records."""
    telemetry = RolloutTelemetry(clock=clock)
    telemetry.expect(max_attempts=3)
    telemetry.record_failure("math", "session_lost", task_index=0, rollout_index=0)
    clock.advance(30.0)
    telemetry.record("math", {"reward": 1.0}, task_index=0, rollout_index=0, attempt=1)
    assert _histogram(telemetry, "rollout_retry_delay_seconds")["sum"] == 30.0


def test_stage_and_delivery_are_counted_and_bad_ones_refused_while_the_failure_counts() -> None:
    """record_failure and record_omission count (stage, delivery); a value outside Gym's sets is rejected
    as invalid_stage or invalid_delivery and the failure is still counted, as unknown."""
    telemetry = RolloutTelemetry(clock=FakeClock())
    telemetry.record_failure("math", "session_lost", stage="agent", delivery="possibly_delivered")
    telemetry.record_failure("math", "session_lost", stage="agent", delivery="possibly_delivered")
    telemetry.record_omission("math", "cancelled", stage="admission")
    telemetry.record_failure("math", "session_lost", stage="thinking", delivery="sent")
    telemetry.record_failure("math", "session_lost", delivery=3)  # type: ignore[arg-type]
    text = exposition(telemetry.registry)
    assert _by_labels(telemetry, "rollout_failure_stages_total") == {
        (("agent", "math"), ("delivery", "possibly_delivered"), ("stage", "agent")): 2,
        (("agent", "math"), ("delivery", "unknown"), ("stage", "admission")): 1,
        (("agent", "math"), ("delivery", "unknown"), ("stage", "unknown")): 2,
    }
    assert value(text, "rollout_failed_total", agent="math", failure_kind="session_lost") == 4
    assert value(text, "rollout_telemetry_rejected_total", reason="invalid_stage") == 1
    assert value(text, "rollout_telemetry_rejected_total", reason="invalid_delivery") == 2


def test_strict_raises_a_bad_stage_after_counting_the_failure() -> None:
    """With strict=True a bad stage raises, and the failure was counted first (at an unknown stage)."""
    telemetry = RolloutTelemetry(clock=FakeClock(), strict=True)
    with pytest.raises(OutcomeError, match="stage"):
        telemetry.record_failure("math", "session_lost", stage="thinking")
    text = exposition(telemetry.registry)
    assert value(text, "rollout_failed_total", agent="math", failure_kind="session_lost") == 1


def test_a_lifecycle_failure_takes_the_current_stage_unless_given(clock: FakeClock) -> None:
    """ctx.fail() counts the rollout's current stage (a Gym stage, also as <server>:<stage>) unless stage=
    is given; a stage of the user's own, without delivery, says nothing and is not counted."""
    telemetry = RolloutTelemetry(clock=clock)
    with telemetry.rollout("math") as rollout:
        rollout.stage("env:verification")
        rollout.fail("judge_failed")
    with telemetry.rollout("math") as rollout:
        rollout.stage("seed")
        rollout.fail("session_lost", stage="cleanup", delivery="delivered")
    with telemetry.rollout("math") as rollout:
        rollout.stage("thinking")
        rollout.fail("session_lost")
    with telemetry.rollout("math") as rollout:
        rollout.fail("session_lost", stage="nowhere")
    assert _by_labels(telemetry, "rollout_failure_stages_total") == {
        (("agent", "math"), ("delivery", "unknown"), ("stage", "verification")): 1,
        (("agent", "math"), ("delivery", "delivered"), ("stage", "cleanup")): 1,
        (("agent", "math"), ("delivery", "unknown"), ("stage", "unknown")): 1,
    }
    text = exposition(telemetry.registry)
    assert value(text, "rollout_failed_total", agent="math", failure_kind="session_lost") == 3
    assert value(text, "rollout_telemetry_rejected_total", reason="invalid_stage") == 1


def test_identity_is_never_a_label_of_the_new_families(clock: FakeClock) -> None:
    """The new families are labelled by agent, failure kind, stage and delivery only."""
    telemetry = RolloutTelemetry(clock=clock)
    telemetry.expect(max_attempts=2)
    for attempt in range(2):
        with telemetry.rollout("math", task_index=7, rollout_index=3, attempt=attempt) as rollout:
            rollout.fail("session_lost", delivery="not_sent")
    found = {
        sample: set(dict(labels))
        for (sample, labels), _ in samples(exposition(telemetry.registry)).items()
        if sample.startswith(RECOVERY_FAMILIES)
    }
    assert {name.split("_bucket")[0].removesuffix("_count").removesuffix("_sum") for name in found} == set(
        RECOVERY_FAMILIES
    )
    for labels in found.values():
        assert not labels & IDENTITY


def test_spans_carry_the_stage_delivery_and_attempts(clock: FakeClock) -> None:
    """The rollout span of a failure carries rollout.failure.stage and .delivery; the attempt that makes an
    identity final carries rollout.attempts."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = RolloutTelemetry(clock=clock, tracer_provider=provider)
    telemetry.expect(max_attempts=3)
    with telemetry.rollout("math", task_index=0, rollout_index=0) as rollout:
        rollout.stage("admission")
        rollout.fail("session_lost", delivery="not_sent")
    with telemetry.rollout("math", task_index=0, rollout_index=0, attempt=1) as rollout:
        rollout.complete({"reward": 1.0})
    failed, succeeded = (dict(span.attributes or {}) for span in exporter.get_finished_spans())
    assert (failed["rollout.failure.stage"], failed["rollout.failure.delivery"]) == ("admission", "not_sent")
    assert "rollout.attempts" not in failed
    assert succeeded["rollout.attempts"] == 2
    assert "rollout.failure.stage" not in succeeded


def _gym_failure_row(task: int, attempt: int | None, **fields: Any) -> dict[str, Any]:
    """A failures-sidecar row as NeMo Gym 0.7.0 writes one for an Environment Server's failure
    (``_episode_record``): its class, terminal flag, message and stage, with the row's identity."""
    row: dict[str, Any] = {
        "_ng_task_id": f"task-{task}",
        "_ng_failure_class": "environment_server_failed",
        "_ng_failure_terminal": False,
        "_ng_failure_message": "verifier unreachable",
        "_ng_task_index": task,
        "_ng_rollout_index": 0,
        "_ng_environment_server": "weather",
        "agent_ref": {"name": "weather_agent"},
    }
    if attempt is not None:
        row["_ng_attempt_index"] = attempt
    return row | fields


def test_followed_gym_rows_give_stage_delivery_attempts_and_exhaustion(tmp_path: Path) -> None:
    """Followed Gym 0.7.0 failure rows: _ng_failure_stage or the failure record's stage and delivery are
    counted, a bad one refused naming its line, and the attempts budget and terminal rows decide exhaustion;
    no retry delay is invented from the files."""
    main = tmp_path / "rollouts.jsonl"
    main.write_text(json.dumps({"reward": 1.0, "_ng_task_index": 9, "_ng_rollout_index": 0,
                                "agent_ref": {"name": "weather_agent"}}) + "\n")  # fmt: skip
    rows = [
        _gym_failure_row(0, None, _ng_failure_stage="verification"),
        _gym_failure_row(0, 1, _ng_failure_stage="verification"),
        _gym_failure_row(0, 2, _ng_failure_stage="verification"),  # the budget (3) used up
        _gym_failure_row(1, None, _ng_failure_record={"delivery": "not_sent", "failure": {"stage": "seed"}}),
        _gym_failure_row(1, 1, _ng_failure_terminal=True, _ng_failure_stage="reasoning"),  # refused stage
    ]
    (tmp_path / "rollouts_failures.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    telemetry = RolloutTelemetry(clock=FakeClock())
    follower = telemetry._run_follower(RunFiles.from_main(main))
    follower.poll()
    follower.finish()
    agent = ("agent", "weather_agent")
    assert _by_labels(telemetry, "rollout_failure_stages_total") == {
        (agent, ("delivery", "unknown"), ("stage", "verification")): 3,
        (agent, ("delivery", "not_sent"), ("stage", "seed")): 1,
        (agent, ("delivery", "unknown"), ("stage", "unknown")): 1,
    }
    assert _by_labels(telemetry, "rollout_retries_exhausted_total") == {
        (agent, ("failure_kind", "environment_server_failed")): 2
    }
    histogram = _histogram(telemetry, "rollout_attempts", "weather_agent")
    assert (histogram["count"], histogram["sum"], histogram["1.0"], histogram["2.0"]) == (3, 6, 1, 2)
    text = exposition(telemetry.registry)
    assert value(text, "rollout_telemetry_rejected_total", reason="invalid_stage") == 1
    assert "rollout_retry_delay_seconds_count" not in sample_names(text)


def test_a_real_gym_run_with_retries_gives_its_attempts(tmp_path: Path) -> None:
    """NeMo Gym 0.7.0's own files of a run with two retried rollouts: 22 identities took one attempt, the two
    retried ones two, and nothing was exhausted."""
    run = tmp_path / "retried"
    shutil.copytree(REAL / "retried", run)
    telemetry = RolloutTelemetry(clock=FakeClock())
    follower = telemetry._run_follower(RunFiles.from_main(run / "rollouts.jsonl"))
    follower.poll()
    follower.finish()
    histogram = _histogram(telemetry, "rollout_attempts", "rt_weather_simple_agent")
    assert (histogram["count"], histogram["sum"], histogram["1.0"], histogram["2.0"]) == (24, 26, 22, 24)
    assert "rollout_retries_exhausted_total" not in _names(telemetry)


def test_strict_raises_a_bad_stage_of_a_lifecycle_failure_after_counting_it(clock: FakeClock) -> None:
    """ctx.fail() with a bad delivery under strict=True counts the failure, then raises; the block's exit
    adds nothing."""
    telemetry = RolloutTelemetry(clock=clock, strict=True)
    with pytest.raises(OutcomeError, match="delivery"), telemetry.rollout("math") as rollout:
        rollout.fail("session_lost", delivery="sent")
    text = exposition(telemetry.registry)
    assert value(text, "rollout_failed_total", agent="math", failure_kind="session_lost") == 1
    assert "rollout_telemetry:no_outcome" not in text
    assert _by_labels(telemetry, "rollout_failure_stages_total") == {
        (("agent", "math"), ("delivery", "unknown"), ("stage", "unknown")): 1
    }

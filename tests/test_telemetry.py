"""The facade: recording paths, bad input in default and strict mode, and never raising."""

from __future__ import annotations

import inspect
import logging
import math
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from rollout_telemetry import Disposition, RolloutTelemetry, VerifyResponse
from rollout_telemetry._store.account import Account
from rollout_telemetry.errors import ConfigError, OutcomeError
from tests.support import FakeClock, exposition, value

BAD_INPUTS: list[tuple[str, Any, Any, str]] = [
    # (field, agent, response, rejection reason)
    ("reward", "math", {"reward": math.nan}, "invalid_reward"),
    ("reward", "math", {"reward": math.inf}, "invalid_reward"),
    ("reward", "math", {"reward": "0.5"}, "invalid_reward"),
    ("mask_sample", "math", {"reward": 1.0, "mask_sample": "true"}, "invalid_mask_sample"),
    ("failure_kind", "math", {"reward": 1.0, "failure_kind": 42}, "invalid_failure_kind"),
    ("failure_reason", "math", {"reward": 1.0, "failure_reason": b"bytes"}, "invalid_failure_reason"),
    ("agent", None, {"reward": 1.0}, "invalid_agent"),
    ("agent", "", {"reward": 1.0}, "invalid_agent"),
    ("response", "math", 3.5, "invalid_response"),
]


@pytest.mark.parametrize(("field", "agent", "response", "reason"), BAD_INPUTS)
def test_bad_input_is_counted_and_nothing_else_changes(
    telemetry: RolloutTelemetry, field: str, agent: Any, response: Any, reason: str
) -> None:
    """Default mode: record() does not raise; the rejection is counted; other counts are untouched."""
    telemetry.record("math", {"reward": 1.0})
    telemetry.record(agent, response)
    text = exposition(telemetry.registry)
    assert value(text, "rollout_telemetry_rejected_total", reason=reason) == 1
    assert value(text, "rollout_completed_total", agent="math") == 1
    assert value(text, "rollout_reward", agent="math") == 1.0


@pytest.mark.parametrize(("field", "agent", "response", "reason"), BAD_INPUTS)
def test_bad_input_raises_in_strict_mode(
    clock: FakeClock, field: str, agent: Any, response: Any, reason: str
) -> None:
    """strict=True: the clear error names the field, and nothing is counted."""
    telemetry = RolloutTelemetry(strict=True, clock=clock)
    with pytest.raises(OutcomeError, match=f"^{field}: ") as info:
        telemetry.record(agent, response)
    assert info.value.field == field
    assert telemetry.snapshot().agents == ()
    assert telemetry.snapshot().rejected == {}


@pytest.mark.parametrize(
    ("call", "reason"),
    [
        (lambda t: t.record_failure("a", 3), "invalid_failure_kind"),
        (lambda t: t.record_failure("a", "session_lost", reason=3), "invalid_failure_reason"),
        (lambda t: t.record_omission(None, "cancelled"), "invalid_agent"),
        (lambda t: t.record_omission("a", ["cancelled"]), "invalid_failure_kind"),
    ],
)
def test_failure_and_omission_bad_input(telemetry: RolloutTelemetry, call: Any, reason: str) -> None:
    """record_failure/record_omission count bad input too, and raise it in strict mode."""
    call(telemetry)
    assert telemetry.snapshot().rejected == {reason: 1}
    strict = RolloutTelemetry(strict=True)
    with pytest.raises(OutcomeError):
        call(strict)


def test_rejections_are_logged_once_per_cause(
    telemetry: RolloutTelemetry, caplog: pytest.LogCaptureFixture
) -> None:
    """A flood of the same bad input logs one warning and counts every one."""
    with caplog.at_level(logging.WARNING, logger="rollout_telemetry"):
        for _ in range(50):
            telemetry.record("math", {"reward": math.nan})
        telemetry.record("math", {"reward": 1.0, "mask_sample": "yes"})
    warnings = [r for r in caplog.records if "rejected" in r.getMessage()]
    assert len(warnings) == 2
    assert telemetry.snapshot().rejected == {"invalid_reward": 50, "invalid_mask_sample": 1}


def test_internal_error_never_reaches_the_collector(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug inside recording is logged and counted as internal_error, not raised."""

    def broken(*args: object) -> None:
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(Account, "count", broken)
    telemetry = RolloutTelemetry()
    with caplog.at_level(logging.ERROR, logger="rollout_telemetry"):
        telemetry.record("math", {"reward": 1.0})
    assert telemetry.snapshot().rejected == {"internal_error": 1}
    assert any("internal error" in r.getMessage() for r in caplog.records)


def test_record_takes_its_identity_by_keyword_only(telemetry: RolloutTelemetry) -> None:
    """record()'s identity is keyword-only, as its signature says: given by position it is a one-line
    TypeError, as for any keyword-only function, and nothing is counted."""
    parameters = inspect.signature(telemetry.record).parameters
    assert list(parameters) == ["agent", "response", "task_index", "rollout_index", "attempt"]
    identity = [parameters[name].kind for name in ("task_index", "rollout_index", "attempt")]
    assert identity == [inspect.Parameter.KEYWORD_ONLY] * 3
    with pytest.raises(TypeError, match="task_index, rollout_index and attempt by keyword only, got 3"):
        telemetry.record("math", {"reward": 1.0}, 3, 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="by keyword only, got 3"):
        telemetry.record("math", {"reward": 1.0}, 3)  # type: ignore[arg-type]
    assert telemetry.snapshot().agents == ()
    telemetry.record("math", {"reward": 1.0}, task_index=3, rollout_index=0, attempt=1)
    assert value(exposition(telemetry.registry), "rollout_completed_total", agent="math") == 1


def test_records_pydantic_models_and_objects(telemetry: RolloutTelemetry) -> None:
    """Models and plain objects take the same path as dicts."""

    class Obj:
        reward = 0.5
        mask_sample = True
        failure_kind = "judge_failed"

    telemetry.record("a", VerifyResponse(reward=1.0))
    telemetry.record("a", Obj())
    agent = telemetry.snapshot().agent("a")
    assert agent is not None
    assert (agent.measured, agent.masked) == (1, 1)
    assert agent.by_kind(Disposition.MASKED) == {"judge_failed": 1}


def test_unknown_kind_is_counted_under_its_own_name(
    telemetry: RolloutTelemetry, caplog: pytest.LogCaptureFixture
) -> None:
    """An unregistered kind passes through as its label, with one warning."""
    with caplog.at_level(logging.WARNING):
        telemetry.record_failure("a", "took_too_long")
        telemetry.record_failure("a", "took_too_long")
    text = exposition(telemetry.registry)
    assert value(text, "rollout_failed_total", failure_kind="took_too_long") == 2
    assert sum("took_too_long" in r.getMessage() for r in caplog.records) == 1


def test_failure_reason_never_reaches_metrics(telemetry: RolloutTelemetry) -> None:
    """Free-text reasons go to logs and spans, never into the exposition."""
    secret = "token=sk-SECRET-0123456789 at /home/user/.ssh"
    telemetry.record_failure("a", "session_lost", reason=secret)
    telemetry.record("a", {"reward": 0.0, "mask_sample": True, "failure_reason": secret})
    telemetry.record_omission("a", "cancelled", reason=secret)
    assert "SECRET" not in exposition(telemetry.registry)


def test_expect_rejects_negative_counts(telemetry: RolloutTelemetry) -> None:
    """A negative expected count is a clear error."""
    with pytest.raises(ValueError, match="must be an integer from 0 to"):
        telemetry.expect("a", rollouts=-1)


def test_expect_declares_all_of_an_agents_work_in_one_call(telemetry: RolloutTelemetry) -> None:
    """One call declares several agents' tasks, group size and reward range: each is published at zero, its
    rollouts expected in the coverage account, its groups sized, its rewards histogrammed in the range."""
    telemetry.expect("math", "code", tasks=3, rollouts_per_task=2, group_size=2, reward_range=(-1.0, 1.0))
    text = exposition(telemetry.registry)
    for agent in ("math", "code"):
        assert value(text, "rollout_completed_total", agent=agent) == 0
        assert value(text, "rollout_run_expected", agent=agent) == 6
    telemetry.record("math", {"reward": -1.0}, task_index=0, rollout_index=0)
    telemetry.record("math", {"reward": -1.0}, task_index=0, rollout_index=1)
    text = exposition(telemetry.registry)
    assert value(text, "rollout_groups_uniform_total", agent="math", reward="lowest") == 1
    assert value(text, "rollout_measured_reward_bucket", agent="math", le="-1.0") == 2


@pytest.mark.parametrize(
    "work",
    [{"rollouts": 4, "tasks": 2}, {"tasks": 2, "identities": [(0, 0)]}, {"rollouts": 1, "identities": []}],
)
def test_expect_takes_one_kind_of_expected_work(telemetry: RolloutTelemetry, work: dict[str, Any]) -> None:
    """A count, tasks, identities and inputs are ways to say the same thing: given together, a clear error."""
    with pytest.raises(ValueError, match="at most one of rollouts, tasks, identities and inputs"):
        telemetry.expect("a", **work)


@pytest.mark.parametrize(
    ("args", "work", "message"),
    [
        (("a", 5), {}, "takes agent names, then the work as keywords"),
        (("a",), {"rollouts_per_task": 4}, "give tasks too"),
        (("a", "b"), {"tasks": 2, "group_size": 0}, "group_size must be an integer from 1"),
        (("a",), {"identities": [(0,)]}, "must be \\(task_index, rollout_index\\) pairs"),
        (("a",), {"identities": 5}, "must be \\(task_index, rollout_index\\) pairs"),
        (("a",), {"identities": "01"}, "must be \\(task_index, rollout_index\\) pairs"),
        ((), {"inputs": 123}, "inputs must be the path of a materialized inputs file"),
        (("a", "b"), {"inputs": "x.jsonl"}, "with inputs=, give at most one agent"),
        (("a",), {"reward_range": "09"}, "reward_range must be a pair of numbers"),
        (("a",), {"reward_range": ("0", "1")}, "reward_range must be a pair of numbers"),
        (("a",), {"reward_range": 1}, "reward_range must be a pair of numbers"),
        (("a",), {"max_attempts": 0}, "max_attempts must be an integer from 1 to 65535"),
    ],
)
def test_expect_refuses_what_it_cannot_declare_before_declaring_anything(
    telemetry: RolloutTelemetry, args: tuple[Any, ...], work: dict[str, Any], message: str
) -> None:
    """A count given as a second agent, rollouts per task without tasks, a bad group size, identities that are
    not pairs, inputs that are not a path or with two agents, a reward range of strings, no attempt at all:
    one clear error (a ``ConfigError``, a ``ValueError``), and no agent declared by the call."""
    with pytest.raises(ValueError, match=message):
        telemetry.expect(*args, **work)
    assert telemetry.snapshot().agents == ()


def test_max_attempts_given_after_identities_says_when_to_give_it(telemetry: RolloutTelemetry) -> None:
    """The coverage account counts the attempts it was kept with: a different count after the first
    identities is refused, saying to give it once, with or before them; with them, in one call, it holds."""
    telemetry.expect("a", tasks=2)
    with pytest.raises(
        ConfigError, match="counts 3 attempts, not 5: give max_attempts= once, with or before"
    ):
        telemetry.expect(max_attempts=5)
    other = RolloutTelemetry(runtime_metrics=False)
    assert other.expect("a", tasks=2, max_attempts=5) == 2
    other.record_failure("a", "session_lost", task_index=0, rollout_index=0, attempt=3)
    retryable = other.registry.get_sample_value("rollout_run_retryable", {"agent": "a"})
    assert retryable == 1  # attempt 3 of 5: Gym would dispatch it again


def test_a_second_telemetry_on_one_registry_is_one_line_and_leaves_it_as_it_was() -> None:
    """Two telemetries on one prometheus_client registry: the second is refused in one line (not the list
    of every duplicated series) and registers nothing, so the first is scraped as before."""
    registry = CollectorRegistry()
    first = RolloutTelemetry(registry=registry, runtime_metrics=False)
    first.record("a", {"reward": 1.0})
    before = generate_latest(registry)
    with pytest.raises(ConfigError) as refused:
        RolloutTelemetry(registry=registry, runtime_metrics=False)
    assert "\n" not in str(refused.value)
    assert "already holds a RolloutTelemetry's series" in str(refused.value)
    assert generate_latest(registry) == before


@pytest.mark.parametrize("limit", [-1, "3", 2.5, None])
def test_a_limit_of_rollouts_in_flight_that_is_not_a_count_is_refused(
    telemetry: RolloutTelemetry, limit: object
) -> None:
    """``rollouts_in_flight(limit)``: a negative, text, fractional or missing limit is a ``ConfigError``."""
    with pytest.raises(ConfigError, match="limit must be a whole number of at least 0"):
        telemetry.rollouts_in_flight(limit)  # type: ignore[arg-type]


def test_a_failed_push_raises_push_error_naming_the_gateway(telemetry: RolloutTelemetry) -> None:
    """Nobody listening at the gateway: one documented exception type, naming it."""
    from rollout_telemetry.errors import PushError
    from tests.support import free_port

    gateway = f"127.0.0.1:{free_port()}"
    with pytest.raises(PushError, match=f"cannot push to the Pushgateway at {gateway}: .*refused"):
        telemetry.push(gateway, job="rollout-batch", timeout=2)


def test_a_reward_range_of_any_real_numbers_is_taken() -> None:
    """Fractions and decimals are numbers as the reward is: the range is taken as floats."""
    from decimal import Decimal
    from fractions import Fraction

    telemetry = RolloutTelemetry(runtime_metrics=False)
    telemetry.expect("a", reward_range=(Fraction(0), Decimal("2.5")))  # type: ignore[arg-type]
    telemetry.record("a", {"reward": 2.5}, task_index=0, rollout_index=0)
    telemetry.record("a", {"reward": 2.5}, task_index=0, rollout_index=1)
    text = exposition(telemetry.registry)
    assert value(text, "rollout_measured_reward_bucket", agent="a", le="2.5") == 2


def test_an_inputs_file_that_cannot_be_read_declares_nothing(tmp_path: Any) -> None:
    """``expect(inputs=, max_attempts=)`` with a missing file: refused, and no coverage account kept (no
    rollout_run_* series, no coverage keys), as for any refused ``expect()``."""
    telemetry = RolloutTelemetry(runtime_metrics=False)
    with pytest.raises(ConfigError, match="cannot be read"):
        telemetry.expect("a", inputs=tmp_path / "missing.jsonl", max_attempts=5)
    telemetry.record("a", {"reward": 1.0})
    assert not any(key.startswith("coverage/") for key in telemetry.progress_metrics())
    assert "rollout_run_" not in exposition(telemetry.registry)

"""Rollout spans as GenAI agent spans, read back from a real OTLP/HTTP receiver on 127.0.0.1: every attribute
and event by name and value, with and without the conventions' opt-in, and where free text may go."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rollout_telemetry import RolloutTelemetry
from rollout_telemetry._sources.follow import RunFiles
from rollout_telemetry.exporters.otel import OTLPExport, otlp_providers
from tests.otlp_receiver import OTLPReceiver, ReceivedSpan

INTERNAL, STATUS_UNSET, STATUS_ERROR = 1, 0, 2
BASELINE_SCHEMA = "https://opentelemetry.io/schemas/1.36.0"
LATEST_SCHEMA = "https://opentelemetry.io/schemas/1.41.0"

SECRET = "SECRET-8d2f"
"""A secret inside a failure reason: only a redact hook may decide what of it leaves."""
MODEL_OUTPUT = "MODEL-OUTPUT-4c1e"
"""Text of the model's answer: never on a span."""
USAGE = {
    "input_tokens": 120,
    "output_tokens": 40,
    "input_tokens_details": {"cached_tokens": 30},
    "output_tokens_details": {"reasoning_tokens": 12},
}
MEASURED = {
    "reward": 1.0,
    "response": {"usage": USAGE, "output": [{"type": "message", "content": MODEL_OUTPUT}]},
}
REASON = f"reset timed out after 30s (token={SECRET})"


def redact(text: str) -> str:
    """The user's hook: drops the secret, keeps the rest."""
    return re.sub(r"SECRET-\w+", "[redacted]", text)


@pytest.fixture
def receiver() -> Iterator[OTLPReceiver]:
    """A real OTLP/HTTP receiver on loopback."""
    with OTLPReceiver() as running:
        yield running


@pytest.fixture
def latest(monkeypatch: pytest.MonkeyPatch) -> None:
    """``OTEL_SEMCONV_STABILITY_OPT_IN`` asks for the latest experimental GenAI conventions."""
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "http, gen_ai_latest_experimental")


@pytest.fixture
def baseline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No opt-in: the default."""
    monkeypatch.delenv("OTEL_SEMCONV_STABILITY_OPT_IN", raising=False)


def _export(receiver: OTLPReceiver) -> OTLPExport:
    return otlp_providers(receiver.endpoint, export_interval_millis=60_000)


def _five_rollouts(telemetry: RolloutTelemetry) -> None:
    """One rollout of each disposition, task indices 1 to 5."""
    with telemetry.rollout("math", task_index=1, rollout_index=0, attempt=0) as rollout:
        rollout.complete(MEASURED)
    with telemetry.rollout("math", task_index=2, rollout_index=1) as rollout:
        rollout.complete({"reward": 0.0, "mask_sample": True, "failure_kind": "judge_failed"})
    with telemetry.rollout("math", task_index=3, rollout_index=0) as rollout:
        rollout.complete({"reward": None})
    with telemetry.rollout("browser", task_index=4, rollout_index=0) as rollout:
        rollout.fail("session_lost", reason=REASON)
    with telemetry.rollout("browser", task_index=5, rollout_index=0) as rollout:
        rollout.omit("cancelled")


def _by_task(receiver: OTLPReceiver) -> dict[int, ReceivedSpan]:
    spans = receiver.received()
    by_task = {span.attributes["rollout.task_index"]: span for span in spans}
    assert len(by_task) == len(spans)  # each span once
    return by_task


def _identity(agent: str, task: int, rollout: int, attempt: int | None = None) -> dict[str, Any]:
    identity: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent,
        "rollout.agent": agent,
        "rollout.task_index": task,
        "rollout.rollout_index": rollout,
    }
    if attempt is not None:
        identity["rollout.attempt"] = attempt
    return identity


def _evaluation(
    label: str, score: float | None = None, *, error_type: str | None = None, explanation: str | None = None
) -> tuple[str, dict[str, Any]]:
    attributes: dict[str, Any] = {"gen_ai.evaluation.name": "reward", "gen_ai.evaluation.score.label": label}
    if score is not None:
        attributes["gen_ai.evaluation.score.value"] = score
    if error_type is not None:
        attributes["error.type"] = error_type
    if explanation is not None:
        attributes["gen_ai.evaluation.explanation"] = explanation
    return "gen_ai.evaluation.result", attributes


def test_latest_conventions_every_attribute_and_event(receiver: OTLPReceiver, latest: None) -> None:
    """With the opt-in each rollout is an ``invoke_agent`` span whose attributes and events are exactly these,
    the outcome a ``gen_ai.evaluation.result`` event, the redacted reason its explanation."""
    export = _export(receiver)
    telemetry = RolloutTelemetry(run="genai", tracer_provider=export.tracer_provider, redact_reason=redact)
    _five_rollouts(telemetry)
    export.shutdown()
    spans = _by_task(receiver)
    assert set(spans) == {1, 2, 3, 4, 5}
    for task, span in spans.items():
        agent = "browser" if task >= 4 else "math"
        assert span.name == f"invoke_agent {agent}"
        assert span.kind == INTERNAL
        assert (span.scope, span.schema_url) == ("rollout_telemetry", LATEST_SCHEMA)
        assert span.parent_span_id == b""

    measured = spans[1]
    assert measured.attributes == {
        **_identity("math", 1, 0, attempt=0),
        "rollout.disposition": "measured",
        "rollout.mask_sample": False,
        "rollout.reward": 1.0,
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 40,
        "gen_ai.usage.cache_read.input_tokens": 30,
        "gen_ai.usage.reasoning.output_tokens": 12,
    }
    assert measured.events == [_evaluation("measured", 1.0)]
    assert (measured.status_code, measured.status_message) == (STATUS_UNSET, "")

    masked = spans[2]
    assert masked.attributes == {
        **_identity("math", 2, 1),
        "rollout.disposition": "masked",
        "rollout.mask_sample": True,
        "rollout.reward": 0.0,
        "rollout.failure_kind": "judge_failed",
    }
    assert masked.events == [_evaluation("masked", 0.0, error_type="judge_failed")]
    assert masked.status_code == STATUS_UNSET

    unscored = spans[3]
    assert unscored.attributes == {
        **_identity("math", 3, 0),
        "rollout.disposition": "unscored",
        "rollout.mask_sample": False,
    }
    assert unscored.events == [_evaluation("unscored", error_type="unspecified")]

    failed = spans[4]
    redacted = "reset timed out after 30s (token=[redacted])"
    assert failed.attributes == {
        **_identity("browser", 4, 0),
        "rollout.disposition": "failed",
        "rollout.mask_sample": False,
        "rollout.failure_kind": "session_lost",
        "error.type": "session_lost",
    }
    assert failed.events == [
        ("rollout.failure", {"rollout.failure_reason": redacted}),
        _evaluation("failed", error_type="session_lost", explanation=redacted),
    ]
    assert (failed.status_code, failed.status_message) == (STATUS_ERROR, redacted)

    omitted = spans[5]
    assert omitted.attributes == {
        **_identity("browser", 5, 0),
        "rollout.disposition": "omitted",
        "rollout.mask_sample": False,
        "rollout.failure_kind": "cancelled",
    }
    assert omitted.events == [_evaluation("omitted", error_type="cancelled")]
    assert omitted.status_code == STATUS_UNSET
    for span in spans.values():  # the hook saw the secret; nothing that left holds it, nor the model's text
        assert not any(SECRET in str(value) or MODEL_OUTPUT in str(value) for value in span.values())


def test_baseline_conventions_without_the_opt_in(receiver: OTLPReceiver, baseline: None) -> None:
    """Without the opt-in spans follow v1.36.0: the agent span and its input and output tokens, but neither
    cached nor reasoning tokens nor the evaluation event, which are newer."""
    export = _export(receiver)
    telemetry = RolloutTelemetry(run="genai", tracer_provider=export.tracer_provider, redact_reason=redact)
    _five_rollouts(telemetry)
    export.shutdown()
    spans = _by_task(receiver)
    assert {span.schema_url for span in spans.values()} == {BASELINE_SCHEMA}
    assert spans[1].name == "invoke_agent math"
    assert spans[1].attributes == {
        **_identity("math", 1, 0, attempt=0),
        "rollout.disposition": "measured",
        "rollout.mask_sample": False,
        "rollout.reward": 1.0,
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 40,
    }
    redacted = "reset timed out after 30s (token=[redacted])"
    assert spans[4].events == [("rollout.failure", {"rollout.failure_reason": redacted})]
    assert spans[4].attributes["error.type"] == "session_lost"
    for task in (1, 2, 3, 5):
        assert spans[task].events == []


def _places(span: ReceivedSpan, text: str) -> set[str]:
    """Where on a span ``text`` occurs: attribute keys, event/key pairs, the status, the name."""
    found = {f"attribute {key}" for key, value in span.attributes.items() if text in str(value)}
    for event, attributes in span.events:
        found |= {f"{event} {key}" for key, value in attributes.items() if text in str(value)}
    if text in span.status_message:
        found.add("status")
    if text in span.name:
        found.add("name")
    return found


def test_no_free_text_reaches_the_evaluation_event_without_the_redact_hook(
    receiver: OTLPReceiver, latest: None
) -> None:
    """Without ``redact_reason`` the evaluation event has no explanation: a reason is only where it has always
    been (the ``rollout.failure`` event and the ERROR status, cut to ``reason_limit``), and the model's text,
    a reason on a completed rollout excepted, nowhere."""
    export = _export(receiver)
    telemetry = RolloutTelemetry(run="genai", tracer_provider=export.tracer_provider, reason_limit=64)
    long_reason = REASON + " " + "x" * 300
    with telemetry.rollout("browser", task_index=1, rollout_index=0) as rollout:
        rollout.fail("session_lost", reason=long_reason)
    with telemetry.rollout("math", task_index=2, rollout_index=0) as rollout:
        rollout.complete({**MEASURED, "mask_sample": True, "failure_reason": f"judge said {SECRET}"})
    with pytest.raises(RuntimeError), telemetry.rollout("math", task_index=3, rollout_index=0):
        raise RuntimeError(f"container exited 137 ({SECRET})")
    export.shutdown()
    spans = _by_task(receiver)
    assert _places(spans[1], SECRET) == {"rollout.failure rollout.failure_reason", "status"}
    assert spans[1].status_message == long_reason[:64] + "…"
    assert _places(spans[2], SECRET) == {"rollout.failure rollout.failure_reason"}
    assert _places(spans[3], SECRET) == {"rollout.failure rollout.failure_reason", "status"}
    for span in spans.values():
        evaluation = dict(span.events)["gen_ai.evaluation.result"]
        assert "gen_ai.evaluation.explanation" not in evaluation
        assert _places(span, MODEL_OUTPUT) == set()


def _write(path: Path, *rows: dict[str, Any]) -> None:
    with path.open("a") as out:
        for row in rows:
            out.write(json.dumps(row) + "\n")


WEATHER = {"agent_ref": {"name": "weather"}}
NOW_NS = 1_700_000_000_123_456_789


def test_follow_mode_one_span_per_row(receiver: OTLPReceiver, latest: None, tmp_path: Path) -> None:
    """Following Gym's files with ``spans=True`` makes one span per counted row: its end when it was read, its
    start ``ng_perf.total_latency_ms`` earlier when Gym wrote one, Gym's rollout id to find Gym's own spans;
    nothing of the row's free text but its failure reason, which goes where a lifecycle span puts it."""
    main = tmp_path / "rollouts.jsonl"
    failures = tmp_path / "rollouts_failures.jsonl"
    _write(
        main,
        {
            **WEATHER,
            **MEASURED,
            "_ng_task_index": 0,
            "_ng_rollout_index": 0,
            "ng_perf": {"total_latency_ms": 1500},
        },
        {
            **WEATHER,
            "reward": 0.0,
            "mask_sample": True,
            "failure_kind": "judge_failed",
            "_ng_task_index": 0,
            "_ng_rollout_index": 1,
            "_ng_attempt_index": 2,
            "_ng_rollout_id": "job7.t0-r1",
            "ng_perf": {"total_latency_ms": True},
        },
        {**WEATHER, "reward": 0.5, "_ng_task_index": 2, "_ng_rollout_index": 0, "_ng_rollout_id": "../etc"},
    )
    _write(
        failures,
        {
            **WEATHER,
            "_ng_failure_class": "agent_run_error",
            "_ng_failure_type": "ClientResponseError",
            "_ng_failure_message": f"500, message='Internal Server Error' {SECRET}",
            "_ng_failure_response_body": f"Traceback ... {MODEL_OUTPUT}",
            "_ng_task_index": 1,
            "_ng_rollout_index": 0,
        },
    )
    export = _export(receiver)
    telemetry = RolloutTelemetry(run="follow", tracer_provider=export.tracer_provider)
    follower = telemetry._run_follower(RunFiles.from_main(main), spans=True, wall_clock=lambda: NOW_NS)
    assert follower.poll() == 4
    assert follower.poll() == 0  # read once: no second span of a row
    export.shutdown()
    spans = receiver.received()
    assert len(spans) == 4
    by_key = {(s.attributes["rollout.task_index"], s.attributes["rollout.rollout_index"]): s for s in spans}

    timed = by_key[0, 0]
    assert (timed.start_ns, timed.end_ns) == (NOW_NS - 1_500_000_000, NOW_NS)
    assert timed.name == "invoke_agent weather"
    assert timed.attributes == {
        **_identity("weather", 0, 0, attempt=0),
        "rollout.disposition": "measured",
        "rollout.mask_sample": False,
        "rollout.reward": 1.0,
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 40,
        "gen_ai.usage.cache_read.input_tokens": 30,
        "gen_ai.usage.reasoning.output_tokens": 12,
        "nemo.gym.rollout.id": "0-0",
        "rollout.timing": "ng_perf",
        "rollout.attempts": 1,  # its outcome final at its first attempt
    }
    assert timed.events == [_evaluation("measured", 1.0)]

    retried = by_key[0, 1]
    assert (retried.start_ns, retried.end_ns) == (NOW_NS, NOW_NS)  # a bool is no latency
    assert retried.attributes == {
        **_identity("weather", 0, 1, attempt=2),
        "rollout.disposition": "masked",
        "rollout.mask_sample": True,
        "rollout.reward": 0.0,
        "rollout.failure_kind": "judge_failed",
        "nemo.gym.rollout.id": "job7.t0-r1-a2",
        "rollout.timing": "read",
        "rollout.attempts": 3,  # attempt index 2
    }
    assert "nemo.gym.rollout.id" not in by_key[2, 0].attributes  # an id Gym would refuse is not Gym's

    failed = by_key[1, 0]
    assert failed.attributes == {
        **_identity("weather", 1, 0, attempt=0),
        "rollout.disposition": "failed",
        "rollout.mask_sample": False,
        "rollout.failure_kind": "agent_run_error",
        "error.type": "agent_run_error",
        "nemo.gym.rollout.id": "1-0",
        "rollout.timing": "read",
    }
    message = f"500, message='Internal Server Error' {SECRET}"
    assert failed.events == [
        ("rollout.failure", {"rollout.failure_reason": message}),
        _evaluation("failed", error_type="agent_run_error"),
    ]
    assert (failed.status_code, failed.status_message) == (STATUS_ERROR, message)
    for span in spans:
        assert span.parent_span_id == b""  # a row's rollout is a root span
        assert _places(span, MODEL_OUTPUT) == set()
        assert _places(span, SECRET) <= {"rollout.failure rollout.failure_reason", "status"}


def test_follow_mode_sends_each_rows_evaluation_as_a_log_record(
    receiver: OTLPReceiver, latest: None, tmp_path: Path
) -> None:
    """Following files with spans and a logger provider (``serve PATH --otlp-endpoint`` gives both): each
    row's outcome is a ``gen_ai.evaluation.result`` log record at its span's end, in its span's context."""
    main = tmp_path / "rollouts.jsonl"
    _write(
        main,
        {**WEATHER, **MEASURED, "_ng_task_index": 0, "_ng_rollout_index": 0},
        {**WEATHER, "reward": 0.0, "mask_sample": True, "failure_kind": "judge_failed", "_ng_task_index": 1,
         "_ng_rollout_index": 0},
    )  # fmt: skip
    export = _export(receiver)
    telemetry = RolloutTelemetry(
        run="follow", tracer_provider=export.tracer_provider, logger_provider=export.logger_provider
    )
    follower = telemetry._run_follower(RunFiles.from_main(main), spans=True, wall_clock=lambda: NOW_NS)
    assert follower.poll() == 2
    export.shutdown()
    spans = {span.span_id: span for span in receiver.received()}
    records = receiver.log_records()
    assert sorted(r.attributes["gen_ai.evaluation.score.label"] for r in records) == ["masked", "measured"]
    for record in records:
        span = spans[record.span_id]
        assert (record.trace_id, record.time_ns) == (span.trace_id, span.end_ns)
        assert record.event_name == "gen_ai.evaluation.result"
        assert all(name != "gen_ai.evaluation.result" for name, _ in span.events)

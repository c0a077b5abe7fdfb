"""The rollout log: a JSON line per rollout that ends, on ``rollout_telemetry.rollouts``, as its schema says
(``docs/reference/rollout-log.schema.json``)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import jsonschema  # type: ignore[import-untyped]  # no stubs in the dev environment
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rollout_telemetry import RolloutTelemetry
from tests.support import FakeClock

SCHEMA_FILE = Path(__file__).parent.parent / "docs" / "reference" / "rollout-log.schema.json"
LOGGER = "rollout_telemetry.rollouts"


@pytest.fixture
def validator() -> jsonschema.protocols.Validator:
    """The schema of docs/reference/rollout-log.schema.json, itself checked against its meta-schema."""
    schema = json.loads(SCHEMA_FILE.read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    validator: jsonschema.protocols.Validator = cls(schema)
    return validator


class _Lines(logging.Handler):
    """Keeps each rollout line, parsed, as it is logged."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[dict[str, object]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(record.getMessage()))


@pytest.fixture
def lines() -> Iterator[list[dict[str, object]]]:
    """The rollout lines logged while the test runs, parsed, in order; the logger enabled for INFO."""
    logger = logging.getLogger(LOGGER)
    handler, level = _Lines(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _run_everything(telemetry: RolloutTelemetry, clock: FakeClock) -> None:
    """Every way a rollout ends, through every door."""
    telemetry.record("math", {"reward": 1.0})
    telemetry.record(
        "math",
        {"reward": 0.0, "mask_sample": True, "failure_kind": "judge_failed"},
        task_index=3,
        rollout_index=1,
        attempt=2,
    )
    telemetry.record("math", {"reward": None}, task_index=-1, rollout_index=0)  # a bad identity: dropped
    telemetry.record_failure("math", "env_error", reason="token sk-secret leaked", terminal=True)
    telemetry.record_omission("math", "cancelled", task_index=4, rollout_index=0)
    with telemetry.rollout("code", task_index=1, rollout_index=0, attempt=0) as rollout:
        rollout.stage("verification")
        clock.advance(2.5)
        rollout.fail("judge_failed", reason="judge said sk-secret")
    with telemetry.rollout("code") as rollout:
        rollout.abandon()
    with pytest.raises(ValueError, match="boom"), telemetry.rollout("code"):
        raise ValueError("boom sk-secret")

    async def cancelled() -> None:
        async with telemetry.rollout("code"):
            raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(cancelled())


def test_every_line_follows_the_schema(
    clock: FakeClock, lines: list[dict[str, object]], validator: jsonschema.protocols.Validator
) -> None:
    """Each way a rollout ends writes one line that the JSON Schema accepts, with the state, identity,
    stage and elapsed time the run had."""
    telemetry = RolloutTelemetry(
        rollout_log=True, clock=clock, redact_reason=lambda reason: reason.replace("sk-secret", "***")
    )
    _run_everything(telemetry, clock)
    assert len(lines) == 9
    for line in lines:
        validator.validate(line)
    masked, bad_identity, failed, omitted, lifecycle, abandoned, raised, cancelled = lines[1:]
    assert masked["disposition"] == "masked"
    assert (masked["task_index"], masked["rollout_index"], masked["attempt"]) == (3, 1, 2)
    assert bad_identity["task_index"] is None
    assert failed["terminal"] is True
    assert omitted["failure_kind"] == "cancelled"
    assert omitted["state"] == "terminal"
    assert lifecycle["stage"] == "verification"
    assert lifecycle["elapsed_seconds"] == 2.5
    assert abandoned["state"] == "abandoned"
    assert abandoned["disposition"] is None
    assert raised["failure_kind"] == "agent_run_error"
    assert cancelled["state"] == "cancelled"
    assert {line["schema"] for line in lines} == {"rollout_telemetry.rollout/1"}


def test_a_rollout_with_a_span_names_its_trace(
    clock: FakeClock, lines: list[dict[str, object]], validator: jsonschema.protocols.Validator
) -> None:
    """A rollout block with a span writes the span's trace and span ids."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = RolloutTelemetry(rollout_log=True, clock=clock, tracer_provider=provider)
    with telemetry.rollout("math") as rollout:
        rollout.complete({"reward": 1.0})
    (span,) = exporter.get_finished_spans()
    (line,) = lines
    validator.validate(line)
    context = span.get_span_context()
    assert context is not None
    assert line["trace_id"] == format(context.trace_id, "032x")
    assert line["span_id"] == format(context.span_id, "016x")


def test_the_reason_is_only_the_redact_hooks_output(clock: FakeClock, lines: list[dict[str, object]]) -> None:
    """With a redact hook every reason is its output (the raw text is in no line); without one no line
    has a reason."""
    redacting = RolloutTelemetry(
        rollout_log=True, clock=clock, redact_reason=lambda reason: reason.replace("sk-secret", "***")
    )
    _run_everything(redacting, clock)
    plain = RolloutTelemetry(rollout_log=True, clock=clock)
    _run_everything(plain, clock)
    assert len(lines) == 18
    assert all("sk-secret" not in json.dumps(line) for line in lines)
    reasons = [line["reason"] for line in lines[:9] if "reason" in line]
    assert reasons == ["token *** leaked", "judge said ***", "ValueError: boom ***", "CancelledError: "]
    assert not any("reason" in line for line in lines[9:])


def test_a_raising_redact_hook_is_counted_and_the_rollout_still_counted(
    clock: FakeClock, lines: list[dict[str, object]]
) -> None:
    """A redact hook that raises costs the line, never the count: a counted rejection."""

    def redact(reason: str) -> str:
        raise RuntimeError(reason)

    telemetry = RolloutTelemetry(rollout_log=True, clock=clock, redact_reason=redact, span_mode="off")
    telemetry.record_failure("math", "env_error", reason="secret")
    with telemetry.rollout("math") as rollout:
        rollout.fail("env_error", reason="secret")
    agent = telemetry.snapshot().agent("math")
    assert agent is not None
    assert agent.failed == 2
    assert lines == []
    assert sum(telemetry.snapshot().rejected.values()) == 2


def test_no_line_when_the_logger_is_off(clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    """With rollout_telemetry.rollouts not enabled for INFO (the default), nothing is logged for rollouts."""
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        _run_everything(RolloutTelemetry(rollout_log=True, clock=clock, redact_reason=str.upper), clock)
    assert [record for record in caplog.records if record.name == LOGGER] == []


def test_no_line_without_rollout_log(clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    """Without rollout_log=True (the default) no rollout writes a line, even with the logger at INFO."""
    with caplog.at_level(logging.INFO, logger=LOGGER):
        _run_everything(RolloutTelemetry(clock=clock, redact_reason=str.upper), clock)
    assert [record for record in caplog.records if record.name == LOGGER] == []


def test_a_failure_says_where_and_how_long_it_waited(clock: FakeClock) -> None:
    """A failure's stage= and delivery= are on its line, and a lifecycle rollout's admission wait: from
    telemetry.offer(...) to entering its block."""
    logger = logging.getLogger(LOGGER)
    handler, level = _Lines(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    telemetry = RolloutTelemetry(rollout_log=True, clock=clock)
    try:
        telemetry.record_failure("math", "judge_failed", stage="verification", delivery="delivered")
        block = telemetry.offer("math")
        clock.advance(2.0)
        with block as rollout:
            rollout.fail("session_lost", delivery="possibly_delivered")
        first, second = handler.lines
        assert (first["stage"], first["delivery"]) == ("verification", "delivered")
        assert (second["stage"], second["delivery"]) == ("agent", "possibly_delivered")
        assert second["admission_wait_seconds"] == 2.0
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_the_schema_documents_every_field_the_docs_page_names() -> None:
    """The docs page links the schema file and names each of its fields."""
    schema = json.loads(SCHEMA_FILE.read_text())
    page = (SCHEMA_FILE.parent / "rollout-log.md").read_text()
    assert "rollout-log.schema.json" in page
    for field in schema["properties"]:
        assert f"`{field}`" in page, field


def test_turning_the_logger_on_mid_run_is_seen_at_once(clock: FakeClock) -> None:
    """Rollouts recorded while the logger is off write nothing; the first one after setLevel(INFO) writes
    its line."""
    logger = logging.getLogger(LOGGER)
    handler, level = _Lines(), logger.level
    logger.addHandler(handler)
    telemetry = RolloutTelemetry(rollout_log=True, clock=clock)
    try:
        logger.setLevel(logging.WARNING)
        telemetry.record("math", {"reward": 1.0})
        with telemetry.rollout("math") as rollout:
            rollout.complete({"reward": 1.0})
        assert handler.lines == []
        logger.setLevel(logging.INFO)
        telemetry.record("math", {"reward": 0.5})
        with telemetry.rollout("math") as rollout:
            rollout.complete({"reward": 1.0})
        assert [line["disposition"] for line in handler.lines] == ["measured", "measured"]
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)

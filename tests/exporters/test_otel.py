"""Spans and OpenTelemetry metrics, read through the SDK's in-memory exporter and reader."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from rollout_telemetry import RolloutTelemetry
from rollout_telemetry._store.snapshot import AccountSnapshot
from rollout_telemetry.exporters._meter import Callback, instrument_meter
from tests.support import FakeClock, exposition, groups_of, samples


@pytest.fixture(autouse=True)
def _baseline_conventions(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GenAI conventions' default (no opt-in), whatever the environment running the tests says."""
    monkeypatch.delenv("OTEL_SEMCONV_STABILITY_OPT_IN", raising=False)


@pytest.fixture
def spans() -> InMemorySpanExporter:
    """An in-memory span exporter."""
    return InMemorySpanExporter()


@pytest.fixture
def traced(spans: InMemorySpanExporter, clock: FakeClock) -> RolloutTelemetry:
    """Telemetry with its own SDK tracer provider (never the global one)."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    return RolloutTelemetry(run="r", clock=clock, tracer_provider=provider)


def _only(spans: InMemorySpanExporter) -> ReadableSpan:
    finished = spans.get_finished_spans()
    assert len(finished) == 1
    return finished[0]


def test_measured_span(traced: RolloutTelemetry, spans: InMemorySpanExporter) -> None:
    """A measured rollout is one span with its identity, disposition and reward; status unset."""
    with traced.rollout("math", task_index=17, rollout_index=2, attempt=0) as rollout:
        rollout.complete({"reward": 0.5})
    span = _only(spans)
    assert span.name == "invoke_agent math"
    assert dict(span.attributes or {}) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "math",
        "rollout.agent": "math",
        "rollout.task_index": 17,
        "rollout.rollout_index": 2,
        "rollout.attempt": 0,
        "rollout.disposition": "measured",
        "rollout.mask_sample": False,
        "rollout.reward": 0.5,
    }
    assert span.status.status_code is StatusCode.UNSET


def test_masked_span_is_not_an_error(traced: RolloutTelemetry, spans: InMemorySpanExporter) -> None:
    """A masked rollout carries mask_sample and its kind, without error.type."""
    with traced.rollout("math") as rollout:
        rollout.complete({"reward": 0.0, "mask_sample": True, "failure_kind": "judge_failed"})
    attributes = dict(_only(spans).attributes or {})
    assert attributes["rollout.disposition"] == "masked"
    assert attributes["rollout.mask_sample"] is True
    assert attributes["rollout.failure_kind"] == "judge_failed"
    assert "error.type" not in attributes


def test_unscored_span(traced: RolloutTelemetry, spans: InMemorySpanExporter) -> None:
    """An unscored rollout has no reward attribute."""
    with traced.rollout("math") as rollout:
        rollout.complete({"reward": None})
    attributes = dict(_only(spans).attributes or {})
    assert attributes["rollout.disposition"] == "unscored"
    assert "rollout.reward" not in attributes


def test_failed_span_has_error_type_and_reason(traced: RolloutTelemetry, spans: InMemorySpanExporter) -> None:
    """A failure sets error.type to the kind, status ERROR with the reason, and a failure event."""
    with traced.rollout("browser") as rollout:
        rollout.fail("session_lost", reason="reset timed out after 30s")
    span = _only(spans)
    assert span.attributes is not None
    assert span.attributes["error.type"] == "session_lost"
    assert span.attributes["rollout.disposition"] == "failed"
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "reset timed out after 30s"
    (event,) = span.events
    assert event.name == "rollout.failure"
    assert dict(event.attributes or {}) == {"rollout.failure_reason": "reset timed out after 30s"}


def test_failed_by_exception_span(traced: RolloutTelemetry, spans: InMemorySpanExporter) -> None:
    """An escaping exception gives error.type agent_run_error and the exception as the reason."""
    with pytest.raises(RuntimeError), traced.rollout("browser"):
        raise RuntimeError("container exited 137")
    span = _only(spans)
    assert span.attributes is not None
    assert span.attributes["error.type"] == "agent_run_error"
    assert span.status.description == "RuntimeError: container exited 137"


def test_omitted_and_no_outcome_spans(traced: RolloutTelemetry, spans: InMemorySpanExporter) -> None:
    """Omitted is not an error; a block without an outcome is a failure with its own kind."""
    with traced.rollout("a") as rollout:
        rollout.omit("cancelled")
    with traced.rollout("a"):
        pass
    omitted, abandoned = spans.get_finished_spans()
    assert omitted.attributes is not None
    assert abandoned.attributes is not None
    assert omitted.attributes["rollout.disposition"] == "omitted"
    assert omitted.status.status_code is StatusCode.UNSET
    assert abandoned.attributes["error.type"] == "rollout_telemetry:no_outcome"
    assert abandoned.status.status_code is StatusCode.ERROR


def test_rollout_span_is_current_inside_the_block(
    traced: RolloutTelemetry, spans: InMemorySpanExporter
) -> None:
    """Spans started inside the block are children of the rollout span."""
    with traced.rollout("a") as rollout:
        inner = trace.get_current_span()
        rollout.complete({"reward": 1.0})
    assert inner.get_span_context() == _only(spans).get_span_context()
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_annotate_mode_sets_attributes_on_the_current_span(
    spans: InMemorySpanExporter, clock: FakeClock
) -> None:
    """span_mode='annotate' adds the attributes to the caller's span and does not end it."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    telemetry = RolloutTelemetry(clock=clock, tracer_provider=provider, span_mode="annotate")
    with provider.get_tracer("test").start_as_current_span("post_run"):
        with telemetry.rollout("a", task_index=3, rollout_index=0) as rollout:
            rollout.complete({"reward": 1.0})
        assert spans.get_finished_spans() == ()
    span = _only(spans)
    assert span.name == "post_run"
    assert span.attributes is not None
    assert span.attributes["rollout.task_index"] == 3
    assert span.attributes["rollout.disposition"] == "measured"


def test_reason_is_truncated_and_redacted(spans: InMemorySpanExporter, clock: FakeClock) -> None:
    """failure_reason goes through the redaction hook, then the length limit."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    telemetry = RolloutTelemetry(
        clock=clock,
        tracer_provider=provider,
        reason_limit=20,
        redact_reason=lambda text: text.replace("sk-SECRET", "[redacted]"),
    )
    with telemetry.rollout("a") as rollout:
        rollout.fail("session_lost", reason="token sk-SECRET rejected by the sandbox after a long wait")
    description = _only(spans).status.description
    assert description == "token [redacted] rej…"


def test_a_truncation_reason_is_redacted_too(spans: InMemorySpanExporter, clock: FakeClock) -> None:
    """rollout.truncation_reason is free text: it goes through the redaction hook, then the length limit, as a
    failure reason does (docs/guides/security.md)."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    telemetry = RolloutTelemetry(
        clock=clock,
        tracer_provider=provider,
        reason_limit=20,
        redact_reason=lambda text: text.replace("sk-SECRET", "[redacted]"),
    )
    reason = "length: key sk-SECRET leaked into a very long reason"
    with telemetry.rollout("a") as rollout:
        rollout.complete({"reward": 0.0, "response": {"incomplete_details": {"reason": reason}}})
    attributes = dict(_only(spans).attributes or {})
    assert attributes["rollout.truncation_reason"] == "length: key [redacte…"
    assert attributes["rollout.truncation_cause"] == "other"


def test_no_sdk_configured_creates_no_spans(clock: FakeClock) -> None:
    """With the global no-op provider the lifecycle still counts, and no span machinery runs."""
    telemetry = RolloutTelemetry(clock=clock)
    with telemetry.rollout("a") as rollout:
        assert trace.get_current_span() is trace.INVALID_SPAN
        rollout.complete({"reward": 1.0})
    assert telemetry.snapshot().agents[0].measured == 1


def _points(reader: InMemoryMetricReader) -> Iterator[tuple[str, dict[str, object], float]]:
    data = reader.get_metrics_data()
    assert data is not None
    for resource_metrics in data.resource_metrics:
        for scope in resource_metrics.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    yield metric.name, dict(point.attributes or {}), point.value  # type: ignore[union-attr]


def test_otel_metrics_follow_the_same_rules(clock: FakeClock) -> None:
    """Observable instruments publish the Prometheus families' values, appearing only when they happen."""
    reader = InMemoryMetricReader()
    telemetry = RolloutTelemetry(run="r", clock=clock, meter_provider=MeterProvider(metric_readers=[reader]))
    telemetry.record("math", {"reward": 1.0})
    healthy = {name for name, _, _ in _points(reader)}
    assert healthy == {
        "rollout_completed",
        "rollout_rewarded",
        "rollout_reward_positive",
        "rollout_reward_negative",
        "rollout_reward",
    }
    telemetry.record("math", {"reward": 0.0, "mask_sample": True, "failure_kind": "judge_failed"})
    telemetry.record_failure("math", "session_lost")
    with telemetry.rollout("math") as rollout:
        clock.advance(2)
        rollout.complete({"reward": -1.0})
    points = {(name, tuple(sorted(attrs.items()))): v for name, attrs, v in _points(reader)}
    math = (("agent", "math"), ("run", "r"))
    assert points[("rollout_completed", math)] == 3
    assert points[("rollout_masked_ratio", math)] == pytest.approx(1 / 3)
    assert points[("rollout_reward_unmasked", math)] == 0.0
    assert points[("rollout_reward", math)] == 0.0
    assert (
        points[("rollout_failed", (("agent", "math"), ("failure_kind", "session_lost"), ("run", "r")))] == 1
    )
    assert (
        points[("rollout_masked", (("agent", "math"), ("failure_kind", "judge_failed"), ("run", "r")))] == 1
    )
    assert points[("rollout_duration_seconds_sum", math)] == 2.0
    assert points[("rollout_duration_seconds_count", math)] == 1
    assert (
        points[
            ("rollout_in_flight", (("agent", "math"), ("run", "r"), ("stage", "agent"), ("state", "active")))
        ]
        == 0
    )


def test_otel_metrics_read_one_snapshot_per_collection(clock: FakeClock) -> None:
    """Each collection of each reader takes exactly one snapshot and every instrument shows it, though the
    account moves on right after each snapshot is taken."""
    telemetry = RolloutTelemetry(run="r", clock=clock)
    done: Counter[str] = Counter()

    def measured() -> None:
        telemetry.record("math", {"reward": 1.0})
        done["measured"] += 1

    def masked() -> None:
        telemetry.record("math", {"reward": 0.5, "mask_sample": True, "failure_kind": "judge_failed"})
        done["masked"] += 1

    def unscored() -> None:
        telemetry.record("math", {"reward": None, "failure_kind": "no_reward"})
        done["unscored"] += 1

    def timed() -> None:
        with telemetry.rollout("math") as rollout:
            clock.advance(2)
            rollout.complete({"reward": 1.0})
        done["measured"] += 1
        done["timed"] += 1

    steps = (measured, masked, unscored, timed)
    for step in steps:
        step()
    read = telemetry.snapshot
    before: list[Counter[str]] = []  # what had been recorded when each snapshot was taken

    def snapshot() -> AccountSnapshot:
        snap = read()
        before.append(Counter(done))
        steps[len(before) % len(steps)]()  # the account moves on before the next instrument reads
        return snap

    first, second = InMemoryMetricReader(), InMemoryMetricReader()
    # The exporter's part alone, on a snapshot that moves on between instruments' reads.
    instrument_meter(
        MeterProvider(metric_readers=[first, second]), snapshot, lambda: groups_of(telemetry), {}
    )
    for collection in range(8):
        points: dict[str, float] = {}
        for name, attrs, value in _points((first, second)[collection % 2]):
            if attrs.get("le") in (None, "+Inf", "1.0"):
                key = name if "le" not in attrs else f"{name}{{le={attrs['le']}}}"
                points[key] = points.get(key, 0) + value  # summed over failure kinds
        assert len(before) == collection + 1
        seen = before[collection]
        assert points["rollout_completed"] == seen["measured"] + seen["masked"] + seen["unscored"]
        assert points["rollout_rewarded"] == seen["measured"] + seen["masked"]
        assert points["rollout_masked_rewarded"] == seen["masked"]
        assert points["rollout_masked"] == seen["masked"]
        assert points["rollout_unscored"] == seen["unscored"]
        assert points["rollout_reward_positive"] == seen["measured"] + 0.5 * seen["masked"]
        assert points["rollout_masked_ratio"] == pytest.approx(
            seen["masked"] / (seen["masked"] + seen["measured"])
        )
        assert points["rollout_duration_seconds_count"] == seen["timed"]
        assert points["rollout_duration_seconds_sum"] == 2.0 * seen["timed"]
        assert points["rollout_duration_seconds_bucket{le=+Inf}"] == seen["timed"]
        assert points["rollout_duration_seconds_bucket{le=1.0}"] == 0
    assert len(before) == 8


def test_a_global_provider_configured_later_is_picked_up() -> None:
    """In a fresh process: no spans before the SDK is set globally, spans once the telemetry's own clock
    has passed the one-second recheck (an injected clock, so nothing sleeps)."""
    code = """
from opentelemetry import trace
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from rollout_telemetry import RolloutTelemetry

now = [100.0]
telemetry = RolloutTelemetry(clock=lambda: now[0])
exporter = InMemorySpanExporter()

def one_rollout():
    with telemetry.rollout("a") as rollout:
        rollout.complete({"reward": 1.0})
    return len(exporter.get_finished_spans())

seen = [one_rollout()]
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
now[0] += 0.5
seen.append(one_rollout())  # still within the second the missing SDK is remembered for
now[0] += 0.6
seen.append(one_rollout())
print(*seen, telemetry.snapshot().agents[0].measured)
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.split() == ["0", "0", "1", "3"]


def test_two_hundred_concurrent_async_rollouts_with_spans_and_metrics(
    spans: InMemorySpanExporter, clock: FakeClock
) -> None:
    """200 rollouts in flight at once: 200 spans, in-flight 200 then exactly 0 in the OTel metrics."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    telemetry = RolloutTelemetry(
        clock=clock, tracer_provider=provider, meter_provider=MeterProvider(metric_readers=[reader])
    )
    release = asyncio.Event()
    during: list[float] = []

    async def one(i: int) -> None:
        async with telemetry.rollout("a", task_index=i, rollout_index=0) as rollout:
            await release.wait()
            rollout.complete({"reward": 1.0, "mask_sample": i % 4 == 0})

    async def main() -> None:
        tasks = [asyncio.create_task(one(i)) for i in range(200)]
        await asyncio.sleep(0)
        during.extend(v for name, _, v in _points(reader) if name == "rollout_in_flight")
        release.set()
        await asyncio.gather(*tasks)

    asyncio.run(main())
    assert during == [200]
    after = {name: v for name, _, v in _points(reader)}
    assert after["rollout_in_flight"] == 0
    assert after["rollout_masked"] == 50
    finished = spans.get_finished_spans()
    assert len(finished) == 200
    assert {span.attributes["rollout.task_index"] for span in finished if span.attributes} == set(range(200))
    # Each span was the current span of its own task only: no rollout became another's parent.
    assert all(span.parent is None for span in finished)


def test_a_raising_redact_hook_still_ends_the_span_and_detaches_it(clock: FakeClock) -> None:
    """redact_reason raising inside the span finish: counted, the span ended, the next span a root span."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    def redact(reason: str) -> str:
        raise ValueError("redaction service down")

    telemetry = RolloutTelemetry(clock=clock, tracer_provider=provider, redact_reason=redact)
    with telemetry.rollout("a") as rollout:
        rollout.fail("session_lost", reason="reset timed out")
    assert trace.get_current_span() is trace.INVALID_SPAN  # the context is detached
    with telemetry.rollout("a") as rollout:
        rollout.complete({"reward": 1.0})
    first, second = exporter.get_finished_spans()
    assert first.end_time is not None
    assert second.parent is None  # a root span, not a child of the first
    assert telemetry.snapshot().rejected == {"internal_error": 1}
    agent = telemetry.snapshot().agent("a")
    assert agent is not None
    assert (agent.failed, agent.measured, agent.in_flight) == (1, 1, 0)


def test_otel_publishes_tokens_truncation_and_groups(clock: FakeClock) -> None:
    """Tokens, truncations and group states reach OpenTelemetry as they reach Prometheus."""
    reader = InMemoryMetricReader()
    telemetry = RolloutTelemetry(run="r", clock=clock, meter_provider=MeterProvider(metric_readers=[reader]))
    telemetry.expect("math", group_size=2)
    response = {
        "usage": {"input_tokens": 5, "output_tokens": 7},
        "incomplete_details": {"reason": "max_output_tokens"},
    }
    telemetry.record("math", {"reward": 0.0, "response": response}, task_index=0, rollout_index=0)
    telemetry.record("math", {"reward": 1.0}, task_index=0, rollout_index=1)
    points = {(name, tuple(sorted(attrs.items()))): v for name, attrs, v in _points(reader)}
    assert points[("rollout_tokens", (("agent", "math"), ("run", "r"), ("type", "output")))] == 7
    assert points[("rollout_truncated", (("agent", "math"), ("cause", "output_cap"), ("run", "r")))] == 1
    assert points[("rollout_groups", (("agent", "math"), ("run", "r"), ("state", "valid")))] == 1
    assert points[("rollout_groups", (("agent", "math"), ("run", "r"), ("state", "uniform")))] == 0
    telemetry.record("math", {"reward": 1.0}, task_index=1, rollout_index=0)
    telemetry.record_failure("math", "session_lost", task_index=1, rollout_index=1)
    points = {(name, tuple(sorted(attrs.items()))): v for name, attrs, v in _points(reader)}
    agent, run = ("agent", "math"), ("run", "r")
    assert points[("rollout_groups_contaminated", (agent, run, ("state", "insufficient")))] == 1
    assert points[("rollout_group_members", (agent, ("disposition", "failed"), run))] == 1


def test_a_truncated_answer_keeps_its_raw_reason_on_the_span(
    traced: RolloutTelemetry, spans: InMemorySpanExporter
) -> None:
    """The span carries the cause and the raw reason (cut to reason_limit); the metric only the cause."""
    reason = "model_context_window_exceeded"
    with traced.rollout("math") as rollout:
        rollout.complete({"reward": 0.0, "response": {"incomplete_details": {"reason": reason}}})
    attributes = dict(_only(spans).attributes or {})
    assert attributes["rollout.truncation_cause"] == "context_window"
    assert attributes["rollout.truncation_reason"] == reason
    text = exposition(traced.registry)
    truncated = [
        (labels, v) for (name, labels), v in samples(text).items() if name == "rollout_truncated_total"
    ]
    assert truncated == [(frozenset({("run", "r"), ("agent", "math"), ("cause", "context_window")}), 1)]
    assert reason not in text


def test_the_reward_histogram_reaches_opentelemetry() -> None:
    """The measured rewards' histogram is published as its sum, count and bucket counters."""
    reader = InMemoryMetricReader()
    telemetry = RolloutTelemetry(meter_provider=MeterProvider(metric_readers=[reader]))
    telemetry.expect("math", reward_range=(0, 1))
    telemetry.record("math", {"reward": 1.0})
    telemetry.record("math", {"reward": 0.0})
    points = {(name, attrs.get("le")): v for name, attrs, v in _points(reader) if "measured_reward" in name}
    assert points[("rollout_measured_reward_count", None)] == 2
    assert points[("rollout_measured_reward_sum", None)] == 1.0
    assert points[("rollout_measured_reward_bucket", "0.0")] == 1
    assert points[("rollout_measured_reward_bucket", "0.9")] == 1
    assert points[("rollout_measured_reward_bucket", "+Inf")] == 2


class _Meter:
    """An API-level meter that keeps each observable instrument's callback, for calling by hand."""

    def __init__(self) -> None:
        self.callbacks: dict[str, Callback] = {}

    def create_observable_counter(self, name: str, callbacks: list[Callback], **_: object) -> None:
        self.callbacks[name] = callbacks[0]

    create_observable_gauge = create_observable_counter

    def get_meter(self, name: str) -> _Meter:
        return self


def test_otel_series_attributes_are_made_once(clock: FakeClock) -> None:
    """Two collections give each series the same attributes object; only the values are new."""
    meter = _Meter()
    telemetry = RolloutTelemetry(run="r", clock=clock, meter_provider=meter)  # type: ignore[arg-type]
    telemetry.record_failure("math", "session_lost")
    with telemetry.rollout("code") as rollout:
        rollout.complete({"reward": 1.0})

    def collect() -> dict[tuple[str, tuple[tuple[str, str], ...]], Observation]:
        return {
            (name, tuple(sorted(observation.attributes.items()))): observation  # type: ignore[union-attr,arg-type]
            for name, callback in meter.callbacks.items()
            for observation in callback(CallbackOptions())
        }

    first = collect()
    telemetry.record_failure("math", "session_lost")
    second = collect()
    assert first.keys() == second.keys()
    assert ("rollout_duration_seconds_bucket", (("agent", "code"), ("le", "+Inf"), ("run", "r"))) in first
    for series, observation in first.items():
        assert second[series].attributes is observation.attributes
    failed = ("rollout_failed", (("agent", "math"), ("failure_kind", "session_lost"), ("run", "r")))
    assert (first[failed].value, second[failed].value) == (1, 2)


def test_a_reward_histogram_below_zero_reaches_opentelemetry_without_a_sum() -> None:
    """Buckets below zero: the sum could fall, so no ``_sum`` counter is observed; count and buckets are."""
    reader = InMemoryMetricReader()
    telemetry = RolloutTelemetry(meter_provider=MeterProvider(metric_readers=[reader]))
    telemetry.expect("math", reward_range=(-1, 1))
    telemetry.record("math", {"reward": -1.0})
    telemetry.record("math", {"reward": 0.5})
    points = {(name, attrs.get("le")): v for name, attrs, v in _points(reader) if "measured_reward" in name}
    assert ("rollout_measured_reward_sum", None) not in points
    assert points[("rollout_measured_reward_count", None)] == 2
    assert points[("rollout_measured_reward_bucket", "-1.0")] == 1
    assert points[("rollout_measured_reward_bucket", "+Inf")] == 2

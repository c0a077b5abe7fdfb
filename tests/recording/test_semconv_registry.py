"""Every ``gen_ai.*`` name the package emits is the GenAI registry's: defined, not deprecated, of its type.

The registry's facts (tests/fixtures/semconv-genai/registry.json, read from
``open-telemetry/semantic-conventions-genai`` at the commits ``semconv.REGISTRY_COMMITS`` names) are checked
against what the package emits, collected from the OpenTelemetry SDK's in-memory exporters: the rollout
spans, their span events, the evaluation event as a log record and as a span event, and the OpenTelemetry
metrics, in the default mode and with ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rollout_telemetry import RolloutTelemetry
from rollout_telemetry._recording import semconv
from rollout_telemetry._sources.follow import RunFiles
from tests.support import FakeClock

REGISTRY: Mapping[str, Any] = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "semconv-genai" / "registry.json").read_text(encoding="utf-8")
)
PYTHON_TYPES = {"string": (str,), "int": (int,), "double": (float, int), "boolean": (bool,)}
USAGE = {
    "input_tokens": 10,
    "output_tokens": 5,
    "input_tokens_details": {"cached_tokens": 4},
    "output_tokens_details": {"reasoning_tokens": 2},
}


@dataclass
class Emitted:
    """What the package emitted: each ``gen_ai.*`` attribute's values, each event's attribute sets by event
    name, each span's name and attributes, and the metric names."""

    attributes: dict[str, list[object]] = field(default_factory=dict)
    events: dict[str, list[dict[str, object]]] = field(default_factory=dict)
    spans: list[tuple[str, dict[str, object]]] = field(default_factory=list)
    metrics: set[str] = field(default_factory=set)

    def attribute(self, name: str, value: object) -> None:
        if name.startswith("gen_ai."):
            self.attributes.setdefault(name, []).append(value)

    def event(self, name: str, attributes: Mapping[str, object]) -> None:
        self.events.setdefault(name, []).append(dict(attributes))
        for key, value in attributes.items():
            self.attribute(key, value)


def _run(telemetry: RolloutTelemetry, clock: FakeClock, folder: Path) -> None:
    """Rollouts of every disposition, with usage, a truncation, a reason, a stall, and a followed row."""
    with telemetry.rollout("a", task_index=1, rollout_index=0, attempt=1) as rollout:
        clock.advance(11.0)
        telemetry.snapshot()  # as a scrape does: stalls are checked
        rollout.complete({"reward": 1.0, "response": {"usage": USAGE}})
    with telemetry.rollout("a") as rollout:
        rollout.complete({"reward": 0.0, "response": {"incomplete_details": {"reason": "max_output_tokens"}}})
    with telemetry.rollout("a") as rollout:
        rollout.complete({"reward": 0.0, "mask_sample": True, "failure_kind": "judge_failed"})
    with telemetry.rollout("a") as rollout:
        rollout.fail("session_lost", reason="lost", stage="seed", delivery="not_sent")
    with telemetry.rollout("a") as rollout:
        rollout.omit("cancelled")
    folder.mkdir()
    main = folder / "run.jsonl"
    row = {"reward": 0.5, "_ng_task_index": 0, "_ng_rollout_index": 0, "agent_ref": {"name": "a"}}
    main.write_text(json.dumps(row) + "\n")
    telemetry._run_follower(RunFiles.from_main(main), spans=True).poll()


def emitted(clock: FakeClock, folder: Path, *, evaluation_event: str) -> Emitted:
    """Everything a run of every kind of outcome emits, through the SDK's in-memory exporters."""
    logs = InMemoryLogRecordExporter()  # type: ignore[no-untyped-call]
    spans, reader = InMemorySpanExporter(), InMemoryMetricReader()
    tracer_provider, logger_provider = TracerProvider(), LoggerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    telemetry = RolloutTelemetry(
        clock=clock,
        stall_after=10.0,
        redact_reason=str.upper,  # free text reaches the evaluation event only through the hook
        tracer_provider=tracer_provider,
        logger_provider=logger_provider,
        meter_provider=MeterProvider(metric_readers=[reader]),
        evaluation_event=evaluation_event,  # type: ignore[arg-type]
    )
    _run(telemetry, clock, folder)
    found = Emitted()
    for span in spans.get_finished_spans():
        attributes: dict[str, object] = dict(span.attributes or {})
        found.spans.append((span.name, attributes))
        for key, value in attributes.items():
            found.attribute(key, value)
        for event in span.events:
            found.event(event.name, event.attributes or {})
    for data in logs.get_finished_logs():
        record = data.log_record
        name = getattr(record, "event_name", None) or ""
        found.event(name, record.attributes or {})
    metrics = reader.get_metrics_data()
    assert metrics is not None
    for resource in metrics.resource_metrics:
        for scope in resource.scope_metrics:
            found.metrics |= {metric.name for metric in scope.metrics}
    telemetry.close()
    return found


def _attribute_problems(name: str, values: list[object]) -> Iterator[str]:
    defined = REGISTRY["attributes"].get(name)
    if defined is None:
        gone = REGISTRY["removed_or_renamed"].get(name)
        if gone is None:
            yield f"{name}: not in the registry"
        elif "renamed_to" in gone:
            yield f"{name}: renamed to {gone['renamed_to']} (PR #{gone['pr']})"
        else:
            yield f"{name}: removed (PR #{gone['pr']})"
        return
    if defined["deprecated"] is not None:
        yield f"{name}: deprecated ({defined['deprecated']})"
    kind = defined["enum_value_type"] if defined["type"] == "enum" else defined["type"]
    types = PYTHON_TYPES.get(kind)
    for value in values:
        if types is None or type(value) not in types or (kind != "boolean" and isinstance(value, bool)):
            yield f"{name}: {value!r} is not of the registry's type {kind}"
        elif defined["type"] == "enum" and value not in defined["members"]:
            yield f"{name}: {value!r} is not one of its members"


def registry_problems(found: Emitted) -> list[str]:
    """Every way ``found`` differs from the registry, one line each naming the name."""
    problems = [
        line for name, values in found.attributes.items() for line in _attribute_problems(name, values)
    ]
    for name, instances in found.events.items():
        if not name.startswith("gen_ai."):
            continue
        defined = REGISTRY["events"].get(name)
        if defined is None:
            problems.append(f"event {name}: not in the registry")
            continue
        required = {key for key, level in defined["attributes"].items() if level == "required"}
        for attributes in instances:
            if missing := sorted(required - set(attributes)):
                problems.append(f"event {name}: without its required {', '.join(missing)}")
    agent_span = REGISTRY["spans"]["gen_ai.invoke_agent.internal"]
    patterns = [
        re.escape(p).replace(r"\{gen_ai\.agent\.name\}", "(?P<agent>.+)") for p in agent_span["name_patterns"]
    ]
    for name, attributes in found.spans:
        match = next((m for p in patterns if (m := re.fullmatch(p, name))), None)
        if match is None:
            problems.append(f"span {name!r}: not a name of the agent span ({agent_span['name_patterns']})")
        elif match.groupdict().get("agent") not in (None, attributes.get("gen_ai.agent.name")):
            problems.append(f"span {name!r}: its agent is not its gen_ai.agent.name")
        if missing := sorted(set(agent_span["required"]) - set(attributes)):
            problems.append(f"span {name!r}: without its required {', '.join(missing)}")
        if attributes.get("gen_ai.operation.name") not in agent_span["operation_names"]:
            problems.append(f"span {name!r}: operation {attributes.get('gen_ai.operation.name')!r}")
    problems += [f"metric {name}: not in the registry" for name in found.metrics if name.startswith("gen_ai.")
                 and name not in REGISTRY["metrics"]]  # fmt: skip
    return problems


MODES = {
    "default": ({}, "log"),
    "latest, the event as a log record": ({semconv.OPT_IN_VARIABLE: semconv.OPT_IN_TOKEN}, "log"),
    "latest, the event on the span": ({semconv.OPT_IN_VARIABLE: f"http, {semconv.OPT_IN_TOKEN}"}, "span"),
}


@pytest.mark.parametrize("mode", list(MODES))
def test_every_gen_ai_name_emitted_is_the_registrys(
    mode: str, clock: FakeClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In each mode, every gen_ai.* attribute, event and span emitted is in the registry, not deprecated, of
    its type (an enum's value among its members), with each event's and the span's required attributes."""
    environment, evaluation_event = MODES[mode]
    monkeypatch.delenv(semconv.OPT_IN_VARIABLE, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    found = emitted(clock, tmp_path / "run", evaluation_event=evaluation_event)
    assert found.spans
    assert found.attributes
    if environment:  # the opt-in's names were emitted and so checked
        assert semconv.EVALUATION_EVENT in found.events
        assert {"gen_ai.usage.cache_read.input_tokens", "gen_ai.evaluation.explanation"} <= set(
            found.attributes
        )
    else:
        assert semconv.EVALUATION_EVENT not in found.events
    assert registry_problems(found) == []


def test_a_name_the_registry_lacks_fails_with_the_name(clock: FakeClock, tmp_path: Path) -> None:
    """The check names each departure: an attribute renamed to one the registry lacks, one it renamed, one of
    the wrong type, an enum value not among its members, and an event without its required attribute."""
    found = emitted(clock, tmp_path / "run", evaluation_event="span")
    assert registry_problems(found) == []
    found.attributes["gen_ai.usage.prompt_tokens"] = found.attributes.pop("gen_ai.usage.input_tokens")
    found.attributes["gen_ai.usage.cache_creation.input_tokens"] = [1]
    found.attributes["gen_ai.agent.name"].append(7)
    found.attributes["gen_ai.operation.name"].append("invoke_rollout")
    found.events["gen_ai.evaluation.result"] = [{"gen_ai.evaluation.score.label": "measured"}]
    assert sorted(registry_problems(found)) == [
        "event gen_ai.evaluation.result: without its required gen_ai.evaluation.name",
        "gen_ai.agent.name: 7 is not of the registry's type string",
        "gen_ai.operation.name: 'invoke_rollout' is not one of its members",
        "gen_ai.usage.cache_creation.input_tokens: renamed to gen_ai.usage.cache_write.input_tokens"
        " (PR #440)",
        "gen_ai.usage.prompt_tokens: not in the registry",
    ]


def test_the_pins_name_the_registry_read() -> None:
    """semconv names the registry the check reads: its repository, its README's schema URL and the commit of
    each file read."""
    source = REGISTRY["source"]
    assert source["repository"] == semconv.REGISTRY
    assert source["schema_url"]["readme"] == semconv.REGISTRY_SCHEMA_URL
    assert dict(semconv.REGISTRY_COMMITS) == {
        path: source["files"][path] for path in semconv.REGISTRY_COMMITS
    }

"""The span attribute table is what spans carry; its GenAI names are the conventions'; the opt-in is read as
the conventions spell it; follow-mode spans are off by default and never cost a row."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rollout_telemetry import RolloutTelemetry
from rollout_telemetry._recording import semconv
from rollout_telemetry._recording.semconv import ATTRIBUTES, latest_experimental
from rollout_telemetry._sources.follow import RunFiles, RunFollower
from tests.support import FakeClock, exposition, traced, value

TYPES = {str: "string", int: "int", float: "double", bool: "boolean"}
USAGE = {
    "input_tokens": 10,
    "output_tokens": 5,
    "input_tokens_details": {"cached_tokens": 4},
    "output_tokens_details": {"reasoning_tokens": 2},
}


def _traced(clock: FakeClock, **options: object) -> tuple[RolloutTelemetry, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = RolloutTelemetry(clock=clock, tracer_provider=provider, stall_after=10.0, **options)  # type: ignore[arg-type]
    return telemetry, exporter


def _every_kind_of_span(clock: FakeClock, tmp_path: Path) -> tuple[ReadableSpan, ...]:
    """Spans of every disposition, with usage, a truncation, a reason, a stall, and a followed row with Gym's
    timing."""
    telemetry, exporter = _traced(clock, redact_reason=str.upper)
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
    tmp_path.mkdir()
    main = tmp_path / "run.jsonl"
    perf = {"total_latency_ms": 20, "num_turns": 3, "num_tool_calls": 2}
    row = {"reward": 0.5, "_ng_task_index": 0, "_ng_rollout_index": 0, "ng_perf": perf}
    main.write_text(json.dumps({**row, "agent_ref": {"name": "a"}}) + "\n")
    telemetry._run_follower(RunFiles.from_main(main), spans=True).poll()
    return exporter.get_finished_spans()


def _carried(spans: tuple[ReadableSpan, ...]) -> dict[tuple[str, str], str]:
    """(on, name) -> type of every attribute the spans and their events carry."""
    carried: dict[tuple[str, str], str] = {}
    for span in spans:
        for name, value_ in (span.attributes or {}).items():
            carried["span", name] = TYPES[type(value_)]
        for event in span.events:
            for name, value_ in (event.attributes or {}).items():
                carried[event.name, name] = TYPES[type(value_)]
    return carried


def test_the_table_is_every_attribute_spans_carry(
    clock: FakeClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the opt-in, spans of every kind carry exactly the attributes of the table, of its types; without
    it, exactly those the table does not mark as needing it."""
    table = {(a.on, a.name): a for a in ATTRIBUTES}
    assert len(table) == len(ATTRIBUTES)  # no row twice
    monkeypatch.setenv(semconv.OPT_IN_VARIABLE, semconv.OPT_IN_TOKEN)
    carried = _carried(_every_kind_of_span(clock, tmp_path / "latest"))
    assert carried == {key: attribute.type for key, attribute in table.items()}
    monkeypatch.delenv(semconv.OPT_IN_VARIABLE)
    baseline = _carried(_every_kind_of_span(clock, tmp_path / "baseline"))
    assert set(baseline) == {key for key, attribute in table.items() if not attribute.opt_in}


def test_gen_ai_names_are_in_the_conventions_registry() -> None:
    """Every ``gen_ai.*`` attribute of the table is defined by the semantic conventions (the registry of the
    installed ``opentelemetry-semantic-conventions``, generated from them); so is ``error.type``."""
    from opentelemetry.semconv._incubating.attributes import gen_ai_attributes
    from opentelemetry.semconv.attributes import error_attributes

    registry = {value_ for value_ in vars(gen_ai_attributes).values() if isinstance(value_, str)}
    used = {a.name for a in ATTRIBUTES if a.name.startswith("gen_ai.")}
    assert used
    assert used <= registry, used - registry
    assert error_attributes.ERROR_TYPE in {a.name for a in ATTRIBUTES}


@pytest.mark.parametrize(
    ("listed", "latest"),
    [
        (None, False),
        ("", False),
        ("gen_ai_latest_experimental", True),
        ("http/dup, gen_ai_latest_experimental ,database", True),
        ("gen_ai_latest_experimental/dup", False),
        ("GEN_AI_LATEST_EXPERIMENTAL", False),
        ("http", False),
    ],
)
def test_the_opt_in_is_one_token_of_a_comma_separated_list(listed: str | None, latest: bool) -> None:
    """``OTEL_SEMCONV_STABILITY_OPT_IN`` is a comma-separated list; ``gen_ai_latest_experimental`` is one of
    its values, spaces around it allowed."""
    environ = {} if listed is None else {semconv.OPT_IN_VARIABLE: listed}
    assert latest_experimental(environ) is latest


def test_the_opt_in_is_read_when_the_telemetry_is_made(
    monkeypatch: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    """Each telemetry reads the variable once, when it is made: set later, it changes nothing for it."""
    monkeypatch.delenv(semconv.OPT_IN_VARIABLE, raising=False)
    before = traced(clock)
    monkeypatch.setenv(semconv.OPT_IN_VARIABLE, semconv.OPT_IN_TOKEN)
    assert _schema_url(*before) == semconv.schema_url(latest=False)
    assert _schema_url(*traced(clock)) == semconv.schema_url(latest=True)


def _schema_url(telemetry: RolloutTelemetry, exporter: InMemorySpanExporter) -> str | None:
    """The schema URL of the span of one rollout of ``telemetry``: the conventions it follows."""
    with telemetry.rollout("math") as rollout:
        rollout.complete({"reward": 1.0})
    (span,) = exporter.get_finished_spans()
    return span.instrumentation_scope.schema_url if span.instrumentation_scope else None


def test_importing_reads_no_environment() -> None:
    """The variable is read by the recorder, not at import: set after importing, it is seen."""
    code = (
        "import os\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from opentelemetry.sdk.trace.export import SimpleSpanProcessor\n"
        "from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter\n"
        "from rollout_telemetry import RolloutTelemetry\n"
        "os.environ['OTEL_SEMCONV_STABILITY_OPT_IN'] = 'gen_ai_latest_experimental'\n"
        "exporter, provider = InMemorySpanExporter(), TracerProvider()\n"
        "provider.add_span_processor(SimpleSpanProcessor(exporter))\n"
        "telemetry = RolloutTelemetry(tracer_provider=provider)\n"
        "telemetry.record_failure('math', 'session_lost')\n"
        "with telemetry.rollout('math') as rollout:\n"
        "    rollout.complete({'reward': 1.0})\n"
        "print(exporter.get_finished_spans()[0].instrumentation_scope.schema_url)\n"
    )
    env = {"PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.strip() == semconv.schema_url(latest=True)


def test_the_schema_url_names_the_latest_version() -> None:
    """With the opt-in the tracer's schema URL names the newest pinned conventions version."""
    assert semconv.schema_url(latest=True).endswith(semconv.LATEST)


def _followed(tmp_path: Path, telemetry: RolloutTelemetry, **options: object) -> RunFollower:
    main = tmp_path / "run.jsonl"
    rows = [
        {"reward": 1.0, "_ng_task_index": i, "_ng_rollout_index": 0, "agent_ref": {"name": "a"}}
        for i in range(3)
    ]
    main.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return telemetry._run_follower(RunFiles.from_main(main), **options)


def test_follow_mode_makes_no_span_by_default(clock: FakeClock, tmp_path: Path) -> None:
    """A follower whose telemetry has a tracer makes no span unless asked; asked, one per row."""
    telemetry, exporter = _traced(clock)
    assert _followed(tmp_path, telemetry).poll() == 3
    assert exporter.get_finished_spans() == ()
    (tmp_path / "again").mkdir()
    telemetry, exporter = _traced(clock)  # the same rows again would be repeats in one telemetry's account
    assert _followed(tmp_path / "again", telemetry, spans=True).poll() == 3
    assert len(exporter.get_finished_spans()) == 3


@pytest.mark.parametrize("mode", ["off", "annotate"])
def test_follow_mode_spans_only_in_span_mode(clock: FakeClock, tmp_path: Path, mode: str) -> None:
    """``span_mode="off"`` or ``"annotate"`` (there is no current span of a row): no span, rows counted."""
    telemetry, exporter = _traced(clock, span_mode=mode)
    assert _followed(tmp_path, telemetry, spans=True).poll() == 3
    assert exporter.get_finished_spans() == ()
    assert telemetry.snapshot().agents[0].measured == 3


def test_a_raising_redact_hook_costs_a_followed_row_nothing(clock: FakeClock, tmp_path: Path) -> None:
    """A hook that raises on a followed failure's reason: the row is counted, its span ended, the error
    counted as ``internal_error``; reading goes on."""

    def broken(text: str) -> str:
        raise ValueError("the hook failed")

    telemetry, exporter = _traced(clock, redact_reason=broken)
    main = tmp_path / "run.jsonl"
    main.write_text("")
    failure = {
        "_ng_failure_class": "agent_run_error",
        "_ng_failure_message": "boom",
        "_ng_task_index": 0,
        "_ng_rollout_index": 0,
        "agent_ref": {"name": "a"},
    }
    (tmp_path / "run_failures.jsonl").write_text(json.dumps(failure) + "\n")
    follower = telemetry._run_follower(RunFiles.from_main(main), spans=True)
    assert follower.poll() == 1
    assert follower.rows == 1
    (span,) = exporter.get_finished_spans()
    assert span.end_time is not None
    text = exposition(telemetry.registry)
    assert value(text, "rollout_failed_total", agent="a", failure_kind="agent_run_error") == 1
    assert value(text, "rollout_telemetry_rejected_total", reason="internal_error") == 1

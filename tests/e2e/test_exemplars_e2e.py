"""Exemplars end to end: a real Prometheus with exemplar storage finds the last failed rollout's trace."""

from __future__ import annotations

import time
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rollout_telemetry import RolloutTelemetry
from tests.e2e.prometheus import Prometheus


def test_prometheus_stores_the_trace_id_of_the_last_failed_rollout(tmp_path: Path) -> None:
    """Scraped as OpenMetrics, rollout_failed_total's exemplar is the trace of the latest failed rollout,
    and the duration histogram's exemplars are traces of recorded rollouts."""
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    telemetry = RolloutTelemetry(run="exemplars", tracer_provider=provider)
    for i in range(3):
        with telemetry.rollout("browser", task_index=i, rollout_index=0) as rollout:
            rollout.fail("session_lost", reason=f"reset {i} timed out")
    last = spans.get_finished_spans()[-1]
    expected = format(last.context.trace_id, "032x")
    server = telemetry.serve(port=0)
    started = time.time()
    try:
        target = f"127.0.0.1:{server.port}"
        with Prometheus(tmp_path, [target], flags=["--enable-feature=exemplar-storage"]) as prom:

            def stored() -> bool:
                found = prom.api(
                    "query_exemplars",
                    query='rollout_failed_total{run="exemplars"}',
                    start=str(started - 60),
                    end=str(time.time() + 60),
                )
                return any(
                    e["labels"].get("trace_id") == expected for series in found for e in series["exemplars"]
                )

            prom.wait_for(stored, timeout=30, what=f"the exemplar with trace id {expected}")
            durations = prom.api(
                "query_exemplars",
                query='rollout_duration_seconds_bucket{run="exemplars"}',
                start=str(started - 60),
                end=str(time.time() + 60),
            )
            traces = {format(span.context.trace_id, "032x") for span in spans.get_finished_spans()}
            stored_traces = {e["labels"]["trace_id"] for series in durations for e in series["exemplars"]}
            assert stored_traces and stored_traces <= traces  # noqa: PT018
    finally:
        server.stop()

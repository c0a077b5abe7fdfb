"""The SDK pieces of OTLP export that count what happens to each span; imported only with the SDK."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

if TYPE_CHECKING:
    from rollout_telemetry.exporters.otel import SpanExportStats

__all__ = ["BoundedSpanProcessor", "CountingSpanExporter"]


class CountingSpanExporter(SpanExporter):
    """Counts the spans the wrapped exporter sent and those it could not (an exception is a failure)."""

    def __init__(self, inner: SpanExporter, stats: SpanExportStats) -> None:
        self._inner = inner
        self._stats = stats

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._inner.export(spans)
        except Exception:
            result = SpanExportResult.FAILURE
        if result is SpanExportResult.SUCCESS:
            self._stats.add(exported=len(spans), queued=-len(spans))
        else:
            self._stats.add(failed=len(spans), queued=-len(spans))
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class BoundedSpanProcessor(SpanProcessor):
    """Hands ended spans to a batch processor while fewer than ``capacity`` wait; drops and counts the rest.

    The batch processor's own queue is as large, so it never overflows silently, and recording never
    waits for the network.
    """

    def __init__(self, batch: SpanProcessor, stats: SpanExportStats, capacity: int) -> None:
        self._batch = batch
        self._stats = stats
        self._capacity = capacity

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self._batch.on_start(span, parent_context=parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        if self._stats.queued >= self._capacity:
            self._stats.add(dropped=1)
            return
        self._stats.add(queued=1)
        self._batch.on_end(span)

    def shutdown(self) -> None:
        self._batch.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._batch.force_flush(timeout_millis)

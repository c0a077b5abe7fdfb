"""The SDK pieces of OTLP span export, and the SDK's own counts of what became of each span.

Imported only with the SDK (``pip install 'rollout-telemetry[otel]'``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.environment_variables import OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricsData, NumberDataPoint
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

__all__ = ["SpanPipeline"]

_EXPORTED = "otel.sdk.exporter.span.exported"
"""The OTLP exporter's count of spans it tried to send; ``error.type`` is set on those it could not."""
_PROCESSED = "otel.sdk.processor.span.processed"
"""The batch processor's count of spans it handled; ``error.type`` is set on those it dropped (``queue_full``,
or ``already_shutdown`` for a span ended after shutdown)."""
_ERROR_TYPE = "error.type"

_environ = threading.Lock()


@contextmanager
def _sdk_self_metrics() -> Iterator[None]:
    # The SDK turns its own metrics on only through this environment variable, which the batch processor and
    # the OTLP exporter read when they are built (there is no constructor argument). Set it for exactly that
    # construction, then put back what was there; the lock keeps two of our constructions from interleaving.
    with _environ:
        before = os.environ.get(OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED)
        os.environ[OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED] = "true"
        try:
            yield
        finally:
            if before is None:
                del os.environ[OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED]
            else:
                os.environ[OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED] = before


class SDKSpanCounts:
    """The SDK's own counts of the spans of one export pipeline, read from a private meter provider.

    ``exported`` and ``failed`` are the OTLP exporter's ``otel.sdk.exporter.span.exported`` without and
    with ``error.type``; ``dropped`` is the batch processor's ``otel.sdk.processor.span.processed`` with
    ``error.type`` (``already_shutdown``: a span ended after shutdown; ``queue_full`` never happens behind
    ``BoundedSpanProcessor``). The provider is private, so these counts never reach the user's metrics,
    and its reader is read only when the counts are asked for.

    Two cases the SDK leaves out, both only once shutdown has waited its 30 s for the export thread: spans
    still queued then are in no count, and a batch whose retries the exporter's shutdown cuts short is
    counted as exported (the SDK records no error for it).
    """

    def __init__(self) -> None:
        self._reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self._reader], shutdown_on_exit=False)
        """Hand this to the batch processor and the exporter whose spans are counted."""

    def __call__(self) -> dict[str, int]:
        """The counts by result: exported, failed, dropped."""
        counts = {"exported": 0, "failed": 0, "dropped": 0}
        data = self._reader.get_metrics_data()
        for attributes, value in _points(data, _EXPORTED):
            counts["failed" if _ERROR_TYPE in attributes else "exported"] += value
        for attributes, value in _points(data, _PROCESSED):
            if _ERROR_TYPE in attributes:
                counts["dropped"] += value
        return counts


def _points(data: MetricsData | None, name: str) -> Iterator[tuple[Mapping[str, object], int]]:
    if data is None:
        return
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    for point in metric.data.data_points:
                        if isinstance(point, NumberDataPoint):
                            yield point.attributes or {}, int(point.value)


class _Waiting:
    """How many spans wait for export, at most ``capacity``; the spans refused for lack of room."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._lock = threading.Lock()
        self._count = 0
        self.exporting = 0
        self.dropped = 0

    def enter(self) -> bool:
        """Take a place for one span if one is free; otherwise count it dropped."""
        with self._lock:
            if self._count >= self._capacity:
                self.dropped += 1
                return False
            self._count += 1
            return True

    def leave(self, count: int) -> None:
        """``count`` spans were taken out of the queue and handed to the exporter."""
        with self._lock:
            self._count -= count
            self.exporting += count

    def settled(self, count: int) -> None:
        """The exporter is done with ``count`` spans (exported or failed)."""
        with self._lock:
            self.exporting -= count

    @property
    def pending(self) -> int:
        """Spans waiting in the queue or in an export in progress."""
        with self._lock:
            return self._count + self.exporting


class BoundedSpanProcessor(SpanProcessor):
    """Hands each ended span to the batch processor while there is room for it to wait; drops and counts
    the rest. Recording never waits for the network: this is a counter check and an append.

    The SDK's batch processor counts what its own full queue drops, but not exactly: it compares the
    queue's length with its capacity and appends in two steps while its worker takes batches out, so a
    span can be counted as dropped and then be exported anyway (the endpoint-down test saw 3001 results
    for 3000 spans). Deciding here, under one lock, keeps that queue below its capacity (a span leaves the
    queue before the exporter is called, and leaves ``waiting`` only then), so the SDK never drops from a
    full queue and this count is exact.
    """

    def __init__(self, batch: SpanProcessor, waiting: _Waiting) -> None:
        self._batch = batch
        self._waiting = waiting

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self._batch.on_start(span, parent_context=parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        sampled = span.context is not None and span.context.trace_flags.sampled  # the only spans batched
        if sampled and not self._waiting.enter():
            return
        self._batch.on_end(span)

    def shutdown(self) -> None:
        self._batch.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._batch.force_flush(timeout_millis)


class _Handing(SpanExporter):
    """Marks a batch as no longer waiting, then exports it."""

    def __init__(self, inner: SpanExporter, waiting: _Waiting) -> None:
        self._inner = inner
        self._waiting = waiting

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self._waiting.leave(len(spans))
        try:
            return self._inner.export(spans)
        finally:
            self._waiting.settled(len(spans))

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class SpanPipeline:
    """A bounded, batching span processor exporting over OTLP/HTTP, and the counts of what became of each
    span: ``exported`` and ``failed`` from the SDK's exporter, ``dropped`` from the bounded processor (and
    the SDK's count of spans ended after shutdown).

    Args:
        endpoint: the ``/v1/traces`` URL.
        timeout_seconds: how long one export may take, retries included.
        headers: HTTP headers sent with each export.
        max_queue_size: how many spans may wait for export; the next ones are dropped.
    """

    def __init__(
        self, endpoint: str, *, timeout_seconds: float, headers: Mapping[str, str], max_queue_size: int
    ) -> None:
        self._sdk = SDKSpanCounts()
        self._waiting = _Waiting(max_queue_size)
        provider = self._sdk.meter_provider
        with _sdk_self_metrics():
            exporter = OTLPSpanExporter(
                endpoint=endpoint, timeout=timeout_seconds, headers=dict(headers), meter_provider=provider
            )
            batch = BatchSpanProcessor(
                _Handing(exporter, self._waiting),
                max_queue_size=max_queue_size,
                max_export_batch_size=min(512, max_queue_size),
                meter_provider=provider,
            )
        self.processor = BoundedSpanProcessor(batch, self._waiting)
        """Add this to the tracer provider."""

    def counts(self) -> dict[str, int]:
        """The counts by result: exported, failed, dropped."""
        counts = self._sdk()
        counts["dropped"] += self._waiting.dropped
        return counts

    def pending(self) -> int:
        """Spans ended but not settled: waiting for export or in an export in progress."""
        return self._waiting.pending

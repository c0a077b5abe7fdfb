"""OTLP/HTTP export of spans, metrics and evaluation events: ``otlp_providers()`` and what it returns.

The OpenTelemetry SDK and OTLP exporter are optional (``pip install 'rollout-telemetry[otel]'``) and
imported only here, where they are used.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client.registry import Collector

from rollout_telemetry.exporters._prometheus import SpanStatsCollector

if TYPE_CHECKING:
    from opentelemetry.sdk._logs import LoggerProvider as SDKLoggerProvider
    from opentelemetry.sdk.metrics import MeterProvider as SDKMeterProvider
    from opentelemetry.sdk.trace import TracerProvider as SDKTracerProvider


__all__ = ["OTLPExport", "SpanExportStats", "otlp_providers"]

_INSTALL_HINT = "pip install 'rollout-telemetry[otel]'"


class SpanExportStats:
    """Counts of rollout spans handed to OTLP export: exported, failed (the endpoint refused, was down or
    too slow) and dropped (the queue was full). Recording never waits for the network: when the queue is
    full a span is dropped and counted instead.

    Exported and failed are the OpenTelemetry SDK exporter's own counts; dropped is counted where the
    decision to drop is made (the SDK's count of its full queue's drops is not exact under concurrency; see
    ``_otlp_sdk.BoundedSpanProcessor``). Each is read when asked for; none is derived from the others.

    Args:
        read_counts: returns the counts by result (``exported``, ``failed``, ``dropped``).
        read_pending: returns how many spans wait for export or are being exported now (none if not given).
    """

    def __init__(
        self, read_counts: Callable[[], Mapping[str, int]], read_pending: Callable[[], int] | None = None
    ) -> None:
        self._read = read_counts
        self._read_pending = read_pending

    def counts(self) -> dict[str, int]:
        """The counts by result: exported, failed, dropped."""
        counts = self._read()
        return {result: counts.get(result, 0) for result in ("exported", "failed", "dropped")}

    @property
    def exported(self) -> int:
        """Spans the endpoint accepted."""
        return self.counts()["exported"]

    @property
    def failed(self) -> int:
        """Spans sent in a batch the endpoint refused or did not answer in time (or was down for)."""
        return self.counts()["failed"]

    @property
    def dropped(self) -> int:
        """Spans never sent: the export queue was full (or export had been shut down)."""
        return self.counts()["dropped"]

    @property
    def pending(self) -> int:
        """Spans ended but not settled yet: waiting in the queue, or in an export still in progress."""
        return 0 if self._read_pending is None else self._read_pending()

    def collector(self, const_labels: Mapping[str, str] | None = None) -> Collector:
        """A prometheus_client collector publishing ``rollout_telemetry_spans_total{result}``."""
        return SpanStatsCollector(self.counts, const_labels)


_EXIT_FLUSH_SECONDS = 2.0
"""The longest the process waits at exit for the export's pending data if ``shutdown()`` was not called."""


@dataclass(frozen=True, slots=True)
class OTLPExport:
    """SDK providers that export over OTLP/HTTP; call ``shutdown()`` to flush and stop them.

    At exit, if ``shutdown()`` was never called, what is pending is flushed for at most two seconds (the SDK's
    own exit hook, which waits up to 30 s for a slow endpoint, is off).
    """

    tracer_provider: SDKTracerProvider
    meter_provider: SDKMeterProvider
    span_stats: SpanExportStats
    logger_provider: SDKLoggerProvider
    """Where the ``gen_ai.evaluation.result`` events go as log records
    (``RolloutTelemetry(logger_provider=)``), batched to ``/v1/logs``."""
    _stopping: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _stopped: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)

    def shutdown(self, timeout: float | None = None) -> bool:
        """Flush what is pending and stop both providers; return whether that finished.

        With ``timeout`` (seconds) it waits at most that long: an endpoint that is down or slow cannot hold
        the process at exit (the flush goes on in a daemon thread, which ends with the process). Called
        again, it waits for the same flush.
        """
        if self._stopping.acquire(blocking=False):  # the first call starts the flush; never released
            threading.Thread(target=self._stop, name="rollout-telemetry-otlp-flush", daemon=True).start()
        return self._stopped.wait(timeout)

    def _stop(self) -> None:
        try:
            self.tracer_provider.shutdown()
            self.logger_provider.shutdown()
            self.meter_provider.shutdown()
        finally:
            self._stopped.set()

    def _at_exit(self) -> None:
        """The process is ending: flush for at most ``_EXIT_FLUSH_SECONDS``, unless ``shutdown()`` was."""
        if not self._stopping.locked():
            self.shutdown(_EXIT_FLUSH_SECONDS)


def otlp_providers(
    endpoint: str,
    *,
    service_name: str = "rollout-telemetry",
    export_interval_millis: int = 5000,
    timeout_seconds: float = 5.0,
    headers: Mapping[str, str] | None = None,
    max_queue_size: int = 2048,
) -> OTLPExport:
    """Build SDK tracer, meter and logger providers exporting to ``endpoint`` (e.g. ``http://127.0.0.1:4318``).

    Spans and log records (the evaluation events) are batched (the recording path never waits on the network;
    once ``max_queue_size`` spans wait for export, the next ones are dropped and counted); ``span_stats``
    reads the SDK's counts of exported and failed spans and the count of dropped ones. Metrics are read every
    ``export_interval_millis``.

    Raises:
        ImportError: the SDK or the OTLP exporter is not installed; the message says what to install.
    """
    try:
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.sdk._logs import LoggerProvider as SDKLoggerProvider
        from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
        from opentelemetry.sdk.metrics import MeterProvider as SDKMeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider as SDKTracerProvider

        from rollout_telemetry.exporters._otlp_sdk import SpanPipeline
    except ImportError as exc:
        msg = f"OTLP export needs the OpenTelemetry SDK and OTLP exporter: {_INSTALL_HINT}"
        raise ImportError(msg) from exc
    base = endpoint.rstrip("/")
    extra: dict[str, Any] = {"timeout": timeout_seconds, "headers": dict(headers or {})}
    resource = Resource.create({"service.name": service_name})
    tracer_provider = SDKTracerProvider(resource=resource, shutdown_on_exit=False)
    spans = SpanPipeline(
        f"{base}/v1/traces",
        timeout_seconds=timeout_seconds,
        headers=extra["headers"],
        max_queue_size=max_queue_size,
    )
    tracer_provider.add_span_processor(spans.processor)
    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=f"{base}/v1/metrics", **extra),
        export_interval_millis=export_interval_millis,
    )
    meter_provider = SDKMeterProvider(resource=resource, metric_readers=[reader], shutdown_on_exit=False)
    logger_provider = SDKLoggerProvider(resource=resource, shutdown_on_exit=False)
    logger_provider.add_log_record_processor(
        BatchLogRecordProcessor(
            OTLPLogExporter(endpoint=f"{base}/v1/logs", **extra),
            max_queue_size=max_queue_size,
            max_export_batch_size=min(512, max_queue_size),  # the SDK's batch, within the queue
        )
    )
    export = OTLPExport(
        tracer_provider, meter_provider, SpanExportStats(spans.counts, spans.pending), logger_provider
    )
    atexit.register(export._at_exit)
    return export

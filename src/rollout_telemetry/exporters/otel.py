"""OpenTelemetry metrics from the same account, and OTLP/HTTP export of spans and metrics.

``RolloutTelemetry(meter_provider=...)`` registers observable (asynchronous) instruments
(``instrument_meter``) whose callbacks all read one snapshot per collection: recording costs nothing extra,
every value of a collection agrees with the others, and the names and appear-only-when rules are those of the
Prometheus exposition (counters drop the ``_total`` suffix, as OpenTelemetry names do; a Prometheus exporter
downstream adds it back). The API has no observable histogram, so each histogram (rollout durations, measured
rewards) is published as its ``_sum``, ``_count`` and ``_bucket{le}`` counters; spans carry each duration.

The OpenTelemetry SDK and OTLP exporter are optional (``pip install 'rollout-telemetry[otel]'``) and
imported only here, where they are used.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
from prometheus_client.registry import Collector

from rollout_telemetry._store.groups import GroupsSnapshot
from rollout_telemetry._store.snapshot import AccountSnapshot, AgentSnapshot
from rollout_telemetry._views.family import Family
from rollout_telemetry._views.run_series import GROUP_FAMILIES
from rollout_telemetry._views.series import FAMILIES, HISTOGRAM_VIEWS, Histogram
from rollout_telemetry.exporters.prometheus import SpanStatsCollector

if TYPE_CHECKING:
    from opentelemetry.sdk._logs import LoggerProvider as SDKLoggerProvider
    from opentelemetry.sdk.metrics import MeterProvider as SDKMeterProvider
    from opentelemetry.sdk.trace import TracerProvider as SDKTracerProvider


__all__ = ["OTLPExport", "SpanExportStats", "otlp_providers"]

_INSTALL_HINT = "pip install 'rollout-telemetry[otel]'"


class _SharedSnapshot:
    """One account snapshot per collection, shared by the callbacks of every instrument.

    Each instrument gets a position, in the order the instruments are created. The SDK collects a reader by
    calling the callbacks of every asynchronous instrument once, in creation order, while it holds the
    provider's collection lock (``SynchronousMeasurementConsumer.collect``; collections of several readers
    of one provider take turns under that lock). So a callback at a position not after the previous one's
    starts a new collection and takes a new snapshot; every later callback of the collection reuses it. An
    instrument the SDK skips (a duplicate registration, a disabled meter) or a collection cut short by its
    timeout does not change that: positions still only rise within a collection. The test pins this down
    against the SDK: N collections, N snapshots, and identities across instruments hold in each.
    """

    def __init__(self, read: Callable[[], AccountSnapshot]) -> None:
        self._read = read
        self._lock = threading.Lock()
        self._position = -1
        self._snap: AccountSnapshot | None = None

    def at(self, position: int) -> AccountSnapshot:
        """The snapshot of the collection the callback at ``position`` belongs to."""
        with self._lock:
            if self._snap is None or position <= self._position:
                self._snap = self._read()
            self._position = position
            return self._snap


Callback = Callable[[CallbackOptions], Iterable[Observation]]
_Part = Callable[[Histogram, AgentSnapshot], Iterable[tuple[tuple[str, ...], float]]]
"""An agent's samples of one counter of a histogram: (label values after the agent's, value) pairs."""


class _Attributes:
    """Each series' attributes, made once and handed to every collection after.

    A dict of strings is not tracked by the garbage collector, and these live as long as the series: a
    collection makes no attributes of its own, only the ``Observation`` it must give each series (what the
    SDK makes of it per series, and keeps, is the SDK's: see ``instrument_meter``).
    """

    __slots__ = ("_const", "_made", "_names")

    def __init__(self, const: Mapping[str, str], names: tuple[str, ...]) -> None:
        self._const = const
        self._names = names
        self._made: dict[tuple[str, ...], Mapping[str, str]] = {}

    def __call__(self, labels: tuple[str, ...]) -> Mapping[str, str]:
        attributes = self._made.get(labels)
        if attributes is None:
            attributes = self._made[labels] = {**self._const, **dict(zip(self._names, labels, strict=True))}
        return attributes


def _family(
    shared: _SharedSnapshot, position: int, family: Family[AccountSnapshot], const: Mapping[str, str]
) -> Callback:
    attributes = _Attributes(const, family.labels)

    def observe(options: CallbackOptions) -> Iterator[Observation]:
        for labels, value in family.sample(shared.at(position)):
            yield Observation(value, attributes(labels))

    return observe


def _histogram_part(  # noqa: PLR0917 - one call site
    shared: _SharedSnapshot,
    position: int,
    const: Mapping[str, str],
    view: Histogram,
    names: tuple[str, ...],
    part: _Part,
) -> Callback:
    attributes = _Attributes(const, ("agent", *names))

    def observe(options: CallbackOptions) -> Iterator[Observation]:
        for agent in shared.at(position).agents:
            if view.has(agent):
                for labels, value in part(view, agent):
                    yield Observation(value, attributes((agent.agent, *labels)))

    return observe


def _buckets(view: Histogram, agent: AgentSnapshot) -> Iterator[tuple[tuple[str, ...], float]]:
    for bound, count in view.buckets(agent):
        yield (bound,), count


def _total(view: Histogram, agent: AgentSnapshot) -> Iterator[tuple[tuple[str, ...], float]]:
    total = view.total(agent)
    if total is not None:  # not beside negative buckets: it would not be a counter (series.monotonic_sum)
        yield (), total


# The OpenTelemetry API has no asynchronous histogram (only observable counters, up-down counters and
# gauges), so each histogram the account keeps is published as counters, as Prometheus spells it.
_HISTOGRAM_PARTS: tuple[tuple[str, str | None, str, tuple[str, ...], _Part], ...] = (
    ("sum", None, "The sum of the observed values", (), _total),
    ("count", "{rollout}", "The number of observations", (), lambda view, a: (((), view.count(a)),)),
    ("bucket", "{rollout}", "Observations at most the le bound, cumulative as in Prometheus", ("le",),
     _buckets),
)  # fmt: skip
"""(suffix, unit (None: the family's), description, label names after the agent, samples) of each
histogram's counters."""


def instrument_meter(
    meter_provider: MeterProvider,
    snapshot: Callable[[], AccountSnapshot],
    groups: Callable[[], GroupsSnapshot],
    const_labels: Mapping[str, str],
) -> None:
    """Publish the account (read by ``snapshot``) and the groups through observable instruments on
    ``meter_provider``: ``RolloutTelemetry(meter_provider=...)``.

    Every collection reads one snapshot, shared by all the instruments' callbacks; the groups' family reads
    one groups snapshot of its own. The account hands out an unchanged agent's snapshot again, so a
    collection derives only what changed, and each series' attributes are made once (``_Attributes``).

    What the SDK does not allow: a callback must give one ``Observation`` object per series at every
    collection (an observable counter's series that is not observed is gone from that export), and the SDK
    makes of each a ``Measurement``, a copy of its attributes and a data point at every collection, objects
    the garbage collector tracks. Unlike the Prometheus endpoint's text, an OpenTelemetry collection
    therefore leaves several objects per series to the collector whatever the callbacks do.
    """
    meter = meter_provider.get_meter("rollout_telemetry")
    shared = _SharedSnapshot(snapshot)
    const = dict(const_labels)
    for position, family in enumerate(FAMILIES):
        callback = _family(shared, position, family, const)
        create = (
            meter.create_observable_counter if family.type == "counter" else meter.create_observable_gauge
        )
        create(family.otel_name, callbacks=[callback], unit=family.unit, description=family.help)
    position = len(FAMILIES)
    for view in HISTOGRAM_VIEWS:
        for suffix, unit, description, names, part in _HISTOGRAM_PARTS:
            meter.create_observable_counter(
                f"{view.family.name}_{suffix}",
                callbacks=[_histogram_part(shared, position, const, view, names, part)],
                unit=unit or view.family.unit,
                description=f"{description} of {view.family.name}: {view.family.help}",
            )
            position += 1
    for group_family in GROUP_FAMILIES:
        meter.create_observable_counter(
            group_family.otel_name,
            callbacks=[_groups(groups, group_family, const)],
            unit=group_family.unit,
            description=group_family.help,
        )


def _groups(
    groups: Callable[[], GroupsSnapshot], family: Family[GroupsSnapshot], const: Mapping[str, str]
) -> Callback:
    attributes = _Attributes(const, family.labels)

    def observe(options: CallbackOptions) -> Iterator[Observation]:
        for labels, value in family.sample(groups()):
            yield Observation(value, attributes(labels))

    return observe


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


EXIT_FLUSH_SECONDS = 2.0
"""The longest the process waits at exit for the export's pending data if ``shutdown()`` was not called."""


@dataclass(frozen=True, slots=True)
class OTLPExport:
    """SDK providers that export over OTLP/HTTP; call ``shutdown()`` to flush and stop them.

    At exit, if ``shutdown()`` was never called, what is pending is flushed for at most
    ``EXIT_FLUSH_SECONDS`` (the SDK's own exit hook, which waits up to 30 s for a slow endpoint, is off).
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

    def at_exit(self) -> None:
        """The process is ending: flush for at most ``EXIT_FLUSH_SECONDS``, unless ``shutdown()`` was."""
        if not self._stopping.locked():
            self.shutdown(EXIT_FLUSH_SECONDS)


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
    atexit.register(export.at_exit)
    return export

"""A real OTLP/HTTP receiver on 127.0.0.1 for the tests: decodes the protobuf bodies it is sent."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

Response = ExportTraceServiceResponse | ExportMetricsServiceResponse | ExportLogsServiceResponse


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


@dataclass(frozen=True)
class ReceivedSpan:
    """A span as the receiver decoded it: what a trace backend would store."""

    name: str
    kind: int
    """The protobuf enum: 1 internal, 2 server, 3 client."""
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    status_code: int
    status_message: str
    start_ns: int
    end_ns: int
    scope: str
    schema_url: str
    parent_span_id: bytes
    trace_id: str = ""
    span_id: str = ""

    def values(self) -> Iterator[Any]:
        """Every value it carries: its name, attributes, events' names and attributes, status message."""
        yield self.name
        yield self.status_message
        yield from self.attributes.values()
        for event, attributes in self.events:
            yield event
            yield from attributes.values()


@dataclass(frozen=True)
class ReceivedLog:
    """A log record as the receiver decoded it (an event: its ``event_name``)."""

    event_name: str
    body: Any
    attributes: dict[str, Any]
    trace_id: str
    span_id: str
    time_ns: int
    scope: str
    schema_url: str


class OTLPReceiver:
    """Collects decoded spans, metric points and log records sent to ``/v1/traces``, ``/v1/metrics`` and
    ``/v1/logs``."""

    def __init__(self) -> None:
        self.traces: list[ExportTraceServiceRequest] = []
        self.metrics: list[ExportMetricsServiceRequest] = []
        self.logs: list[ExportLogsServiceRequest] = []
        self.lock = threading.Lock()
        self.trace_requests = 0
        """Trace export requests that arrived, answered or not."""
        self.answer = threading.Event()
        """Cleared by ``hold()``: trace requests then wait, unanswered, until it is set again."""
        self.answer.set()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                if self.path == "/v1/traces":
                    with receiver.lock:
                        receiver.trace_requests += 1
                    receiver.answer.wait(30)
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                response: (
                    ExportTraceServiceResponse | ExportMetricsServiceResponse | ExportLogsServiceResponse
                )
                if self.path == "/v1/traces":
                    request = ExportTraceServiceRequest.FromString(body)
                    with receiver.lock:
                        receiver.traces.append(request)
                    response = ExportTraceServiceResponse()
                elif self.path == "/v1/metrics":
                    metrics = ExportMetricsServiceRequest.FromString(body)
                    with receiver.lock:
                        receiver.metrics.append(metrics)
                    response = ExportMetricsServiceResponse()
                elif self.path == "/v1/logs":
                    logs = ExportLogsServiceRequest.FromString(body)
                    with receiver.lock:
                        receiver.logs.append(logs)
                    response = ExportLogsServiceResponse()
                else:
                    self.send_error(404)
                    return
                payload = response.SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1})

    def __enter__(self) -> OTLPReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.answer.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

    def hold(self) -> None:
        """Leave trace export requests unanswered (a slow endpoint) until ``answer.set()``."""
        self.answer.clear()

    def spans(self) -> list[tuple[str, dict[str, Any], int, str]]:
        """(name, attributes, status code, status message) of every span received."""
        found: list[tuple[str, dict[str, Any], int, str]] = []
        with self.lock:
            for request in self.traces:
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        for span in scope.spans:
                            attributes = {a.key: _value(a.value) for a in span.attributes}
                            found.append((span.name, attributes, span.status.code, span.status.message))
        return found

    def received(self) -> list[ReceivedSpan]:
        """Every span received, whole."""
        found: list[ReceivedSpan] = []
        with self.lock:
            for request in self.traces:
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        for span in scope.spans:
                            found.append(
                                ReceivedSpan(
                                    name=span.name,
                                    kind=span.kind,
                                    attributes={a.key: _value(a.value) for a in span.attributes},
                                    events=[
                                        (e.name, {a.key: _value(a.value) for a in e.attributes})
                                        for e in span.events
                                    ],
                                    status_code=span.status.code,
                                    status_message=span.status.message,
                                    start_ns=span.start_time_unix_nano,
                                    end_ns=span.end_time_unix_nano,
                                    scope=scope.scope.name,
                                    schema_url=scope.schema_url,
                                    parent_span_id=span.parent_span_id,
                                    trace_id=span.trace_id.hex(),
                                    span_id=span.span_id.hex(),
                                )
                            )
        return found

    def log_records(self) -> list[ReceivedLog]:
        """Every log record received, decoded, in the order they came."""
        with self.lock:
            requests = list(self.logs)
        return [
            ReceivedLog(
                event_name=record.event_name,
                body=_value(record.body) if record.HasField("body") else None,
                attributes={a.key: _value(a.value) for a in record.attributes},
                trace_id=record.trace_id.hex(),
                span_id=record.span_id.hex(),
                time_ns=record.time_unix_nano,
                scope=scoped.scope.name,
                schema_url=scoped.schema_url,
            )
            for request in requests
            for resource in request.resource_logs
            for scoped in resource.scope_logs
            for record in scoped.log_records
        ]

    def points(self) -> Iterator[tuple[str, dict[str, Any], float]]:
        """(metric name, attributes, value) of every sum and gauge point received, oldest first."""
        with self.lock:
            requests = list(self.metrics)
        for request in requests:
            for resource in request.resource_metrics:
                for scope in resource.scope_metrics:
                    for metric in scope.metrics:
                        kind = metric.WhichOneof("data")
                        if kind not in ("sum", "gauge"):
                            continue
                        for point in getattr(metric, kind).data_points:
                            attributes = {a.key: _value(a.value) for a in point.attributes}
                            number = point.as_double if point.HasField("as_double") else point.as_int
                            yield metric.name, attributes, number

    def latest(self) -> dict[tuple[str, tuple[tuple[str, Any], ...]], float]:
        """The newest value of each (metric, attributes) received."""
        return {(name, tuple(sorted(attrs.items()))): v for name, attrs, v in self.points()}

"""Faults the telemetry survives in-process: the OTLP endpoint down or slow, a followed directory vanishing.

The faults that need real processes (SIGTERM, a taken port, a forked child) are in
tests/e2e/test_faults_e2e.py.
"""

from __future__ import annotations

import contextlib
import gzip
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from rollout_telemetry import RolloutTelemetry
from rollout_telemetry._sources.follow import RunFiles, RunFollower
from rollout_telemetry.exporters.otel import otlp_providers
from tests.support import exposition, free_port, recording_part, value

ROLLOUTS = 3000
WAIT = 10.0
"""Seconds a test waits for a background thread to get somewhere before it fails: a bound, never a pace."""


def _record_through_spans(telemetry: RolloutTelemetry) -> None:
    # No time taken here: a recorder that waited for the network would wait the export timeout (0.5 s or
    # more) on each of these spans, far past the test's timeout.
    for i in range(ROLLOUTS):
        with telemetry.rollout("math", task_index=i, rollout_index=0) as rollout:
            if i % 3:
                rollout.complete({"reward": 1.0})
            else:
                rollout.fail("session_lost", reason="sandbox gone")


def _check_exact(telemetry: RolloutTelemetry) -> None:
    agent = telemetry.snapshot().agent("math")
    assert agent is not None
    assert agent.measured == ROLLOUTS - len(range(0, ROLLOUTS, 3))
    assert agent.failed == len(range(0, ROLLOUTS, 3))
    assert agent.in_flight == 0


def test_otlp_endpoint_down(tmp_path: Path) -> None:
    """Nobody listening: recording does not wait; spans fail or are dropped, and are counted."""
    port = free_port()  # nothing listens there
    otlp = otlp_providers(f"http://127.0.0.1:{port}", timeout_seconds=1, max_queue_size=256)
    telemetry = RolloutTelemetry(tracer_provider=otlp.tracer_provider)
    telemetry.registry.register(otlp.span_stats.collector())
    _record_through_spans(telemetry)
    _check_exact(telemetry)
    otlp.shutdown()  # a shutdown that hung on the dead endpoint fails on the test's timeout
    stats = otlp.span_stats
    assert stats.exported == 0
    # Spans dropped from a full queue: recording went on while the exporter failed its batches (waiting
    # about a second before its one retry of a refused connection when its timeout leaves room for it);
    # it did not wait for room in the queue.
    assert stats.dropped > 0
    assert stats.failed > 0
    assert stats.failed + stats.dropped == ROLLOUTS  # each ended span counted once, none lost
    text = exposition(telemetry.registry)
    assert value(text, "rollout_telemetry_spans_total", result="dropped") == stats.dropped
    assert value(text, "rollout_telemetry_spans_total", result="failed") == stats.failed
    assert value(text, "rollout_telemetry_spans_total", result="exported") == 0


class _SlowEndpoint(ThreadingHTTPServer):
    """An OTLP/HTTP endpoint on 127.0.0.1 that reads each export, notes the span ids in it, and answers only
    once ``answer`` is set: later than any client's export timeout."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _SlowHandler)
        self.received: set[bytes] = set()
        self.arrived = threading.Condition()
        """Notified each time span ids are noted in ``received``."""
        self.answer = threading.Event()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def note(self, span_ids: set[bytes]) -> None:
        with self.arrived:
            self.received |= span_ids
            self.arrived.notify_all()

    def wait_received(self, condition: Callable[[set[bytes]], bool], *, timeout: float) -> bool:
        """Whether ``condition`` of the span ids received holds within ``timeout`` seconds."""
        with self.arrived:
            return self.arrived.wait_for(lambda: condition(self.received), timeout=timeout)


class _SlowHandler(BaseHTTPRequestHandler):
    server: _SlowEndpoint

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest.FromString(body)
        self.server.note(
            {
                span.span_id
                for resource in request.resource_spans
                for scope in resource.scope_spans
                for span in scope.spans
            }
        )
        self.server.answer.wait()  # the behaviour under test: no answer within the client's export timeout
        with contextlib.suppress(OSError):  # the client gave up long ago
            self.send_response(200)
            self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_otlp_endpoint_slow(tmp_path: Path) -> None:
    """An endpoint slower than the export timeout: recording is unaffected, exports time out and count."""
    slow = _SlowEndpoint()
    thread = threading.Thread(target=slow.serve_forever, daemon=True)
    thread.start()
    try:
        otlp = otlp_providers(slow.endpoint, timeout_seconds=0.5, max_queue_size=256)
        telemetry = RolloutTelemetry(tracer_provider=otlp.tracer_provider)
        _record_through_spans(telemetry)
        _check_exact(telemetry)
        otlp.shutdown()
        stats = otlp.span_stats
        assert stats.exported == 0
        assert stats.failed > 0
        assert stats.failed + stats.dropped == ROLLOUTS  # each ended span counted once, none lost
        # The endpoint got every failed span (it was only too slow), and no other: the spans counted
        # failed are exactly the distinct spans it received.
        failed = stats.failed
        assert slow.wait_received(lambda received: len(received) >= failed, timeout=WAIT), (
            f"{len(slow.received)} distinct spans at the endpoint, {failed} counted failed"
        )
        assert len(slow.received) == failed
    finally:
        slow.answer.set()
        slow.shutdown()
        slow.server_close()


class _ObservedFollower(RunFollower):
    """A follower whose polls (its background thread's included) notify ``polled`` when they are over."""

    def __init__(self, telemetry: RolloutTelemetry, files: RunFiles) -> None:
        super().__init__(recording_part(telemetry), files)
        self.polled = threading.Condition()

    def poll(self) -> int:
        try:
            return super().poll()
        finally:
            with self.polled:
                self.polled.notify_all()

    def wait_polled(self, condition: Callable[[], bool], *, what: str) -> None:
        """Wait until ``condition`` holds after a poll; fail naming ``what`` after ``WAIT`` seconds."""
        with self.polled:
            assert self.polled.wait_for(condition, timeout=WAIT), f"no poll in {WAIT} s saw {what}"


def test_follow_file_directory_disappearing_in_the_background(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The background follower keeps running when its directory vanishes and picks the file up again."""
    folder = tmp_path / "run"
    folder.mkdir()
    main = folder / "out.jsonl"
    row = '{"reward": 1.0, "_ng_task_index": %d, "_ng_rollout_index": 0, "_ng_environment_server": "a"}\n'
    main.write_text(row % 0)
    telemetry = RolloutTelemetry()
    follower = _ObservedFollower(telemetry, RunFiles.from_main(main))
    follower.start(interval=0.05)
    try:
        follower.wait_polled(lambda: telemetry.snapshot().agent("a") is not None, what="the first row")
        for child in folder.iterdir():
            child.unlink()
        folder.rmdir()
        follower.wait_polled(
            lambda: any("disappeared" in record.getMessage() for record in caplog.records),
            what="the file gone",
        )
        folder.mkdir()
        main.write_text(row % 1 + row % 2 + row % 3)

        def read_again() -> bool:
            covered = follower.coverage.snapshot().agent("a")
            return covered is not None and covered.seen == 3  # the new run: the file that came back

        follower.wait_polled(read_again, what="the file read again after it came back")
        agent = telemetry.snapshot().agent("a")
        assert agent is not None
        assert agent.measured == 4  # the counter goes on: the row of the first file, then the 3 new ones
    finally:
        follower.stop()

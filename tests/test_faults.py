"""Faults the telemetry survives: OTLP down or slow, SIGTERM, a taken port, a forked child."""

from __future__ import annotations

import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from rollout_telemetry import RolloutTelemetry
from rollout_telemetry.exporters.otel import otlp_providers
from tests.support import exposition, free_port, samples, value, wait_until

ROLLOUTS = 3000


def _record_through_spans(telemetry: RolloutTelemetry) -> float:
    started = time.perf_counter()
    for i in range(ROLLOUTS):
        with telemetry.rollout("math", task_index=i) as rollout:
            if i % 3:
                rollout.complete({"reward": 1.0})
            else:
                rollout.fail("session_lost", reason="sandbox gone")
    return time.perf_counter() - started


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
    elapsed = _record_through_spans(telemetry)
    assert elapsed < 5, f"recording took {elapsed:.1f} s: it waited for the network"
    _check_exact(telemetry)
    started = time.monotonic()
    otlp.shutdown()
    assert time.monotonic() - started < 30
    stats = otlp.span_stats
    assert stats.exported == 0
    assert stats.dropped > 0
    assert stats.failed > 0
    assert stats.failed + stats.dropped == ROLLOUTS  # each ended span counted once, none lost
    text = exposition(telemetry.registry)
    assert value(text, "rollout_telemetry_spans_total", result="dropped") == stats.dropped
    assert value(text, "rollout_telemetry_spans_total", result="failed") == stats.failed
    assert value(text, "rollout_telemetry_spans_total", result="exported") == 0


class _Slow(BaseHTTPRequestHandler):
    """Reads each export, notes the span ids in it, and answers too late."""

    received: ClassVar[set[bytes]] = set()
    lock: ClassVar[threading.Lock] = threading.Lock()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest.FromString(body)
        ids = {
            span.span_id
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        }
        with self.lock:
            self.received.update(ids)
        time.sleep(3)  # the behaviour under test: slower than the client's export timeout
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_otlp_endpoint_slow(tmp_path: Path) -> None:
    """An endpoint slower than the export timeout: recording is unaffected, exports time out and count."""
    _Slow.received.clear()
    slow = ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    thread = threading.Thread(target=slow.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = f"http://127.0.0.1:{slow.server_address[1]}"
        otlp = otlp_providers(endpoint, timeout_seconds=0.5, max_queue_size=256)
        telemetry = RolloutTelemetry(tracer_provider=otlp.tracer_provider)
        elapsed = _record_through_spans(telemetry)
        assert elapsed < 5
        _check_exact(telemetry)
        otlp.shutdown()
        stats = otlp.span_stats
        assert stats.exported == 0
        assert stats.failed > 0
        assert stats.failed + stats.dropped == ROLLOUTS  # each ended span counted once, none lost

        def every_failed_span_arrived() -> bool:
            with _Slow.lock:
                return len(_Slow.received) == stats.failed

        # The endpoint got every failed span (it was only too slow), and no other: the spans counted
        # failed are exactly the distinct spans it received.
        wait_until(
            every_failed_span_arrived, timeout=10, what=f"{stats.failed} distinct spans at the endpoint"
        )
    finally:
        slow.shutdown()
        slow.server_close()


def _start(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "rollout_telemetry", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait_serving(process: subprocess.Popen[str]) -> str:
    # The first line printed, past any log line before it (serve says it waits for a missing file).
    assert process.stdout is not None
    for _ in range(20):
        line = process.stdout.readline()
        if not line or not line.startswith("20"):  # log lines start with the date
            break
    assert line.startswith("serving "), line
    return line


def _scrape_completed(port: int) -> float:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return 0
    return sum(v for (name, _), v in samples(text).items() if name == "rollout_completed_total")


@pytest.mark.e2e
@pytest.mark.parametrize("command", ["demo", "serve"])
def test_sigterm_stops_cleanly(tmp_path: Path, command: str) -> None:
    """SIGTERM while running: the process exits 0, says its final state, and the port is free again."""
    port = free_port()
    follow = tmp_path / "rollouts.jsonl"
    args = (
        ["demo", "--rate", "50", "--summary-interval", "60"]
        if command == "demo"
        else ["serve", "--follow", str(follow), "--poll-interval", "0.05"]
    )
    process = _start([*args, "--port", str(port)])
    try:
        _wait_serving(process)
        if command == "serve":  # a row read by the running follower, so the run is under way
            row = {"reward": 1.0, "_ng_task_index": 0, "_ng_rollout_index": 0, "_ng_environment_server": "a"}
            follow.write_text(json.dumps(row) + "\n")
        wait_until(lambda: _scrape_completed(port) >= 1, timeout=30, what="a completed rollout in /metrics")
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, output
    if command == "demo":
        assert "stopping" in output
        assert "completed=" in output  # the final per-agent state
    else:
        assert "stopped: 1 rollout outcomes read" in output
    with socket.socket() as again:
        # As a restarted exporter binds: SO_REUSEADDR passes the TIME_WAIT our scrapes leave, but on
        # Linux not a socket still listening.
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", port))
        again.listen()


@pytest.mark.e2e
def test_taken_port_fails_clearly_from_the_command_line() -> None:
    """A port in use: exit status 2 and a message naming the port; nothing keeps running."""
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        process = _start(["demo", "--port", str(port)])
        output, _ = process.communicate(timeout=30)
    assert process.returncode == 2
    assert f"port {port} is already in use" in output


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX-only")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_recording_in_a_forked_child() -> None:
    """A child forked while threads record can record (no inherited held lock); its counts are its own."""
    telemetry = RolloutTelemetry()
    stop = threading.Event()

    def hammer() -> None:
        while not stop.is_set():
            telemetry.record("parent", {"reward": 1.0, "mask_sample": True, "failure_kind": "judge_failed"})

    threads = [threading.Thread(target=hammer) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        wait_until(
            lambda: telemetry.snapshot().agent("parent") is not None, timeout=10, what="the threads recording"
        )
        pid = os.fork()
        if pid == 0:  # the child: record and report through the exit status only
            code = 1
            try:
                for _ in range(100):
                    telemetry.record("child", {"reward": 0.5})
                child = telemetry.snapshot().agent("child")
                code = 0 if child is not None and child.measured == 100 else 3
            finally:
                os._exit(code)
        statuses: list[int] = []

        def child_exited() -> bool:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                statuses.append(status)
            return bool(done)

        try:
            wait_until(child_exited, timeout=20, what="the forked child (it hung recording)")
        except AssertionError:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert [os.waitstatus_to_exitcode(status) for status in statuses] == [0]
    assert telemetry.snapshot().agent("child") is None  # the child's counts stayed in the child


def test_follow_file_directory_disappearing_in_the_background(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The background follower keeps running when its directory vanishes and picks the file up again."""
    from rollout_telemetry._sources.follow import RunFiles, RunFollower

    folder = tmp_path / "run"
    folder.mkdir()
    main = folder / "out.jsonl"
    row = '{"reward": 1.0, "_ng_task_index": %d, "_ng_rollout_index": 0, "_ng_environment_server": "a"}\n'
    main.write_text(row % 0)
    telemetry = RolloutTelemetry()
    follower = RunFollower(telemetry, RunFiles.from_main(main))
    follower.start(interval=0.05)
    try:
        wait_until(lambda: telemetry.snapshot().agent("a") is not None, timeout=10, what="the first row")
        for child in folder.iterdir():
            child.unlink()
        folder.rmdir()
        wait_until(
            lambda: any("disappeared" in record.getMessage() for record in caplog.records),
            timeout=10,
            what="the follower to notice the file is gone",
        )
        folder.mkdir()
        main.write_text(row % 1 + row % 2 + row % 3)

        def read_again() -> bool:
            covered = follower.coverage.snapshot().agent("a")
            return covered is not None and covered.seen == 3  # the new run: the file that came back

        wait_until(read_again, timeout=10, what="the file read again after it came back")
        agent = telemetry.snapshot().agent("a")
        assert agent is not None
        assert agent.measured == 4  # the counter goes on: the row of the first file, then the 3 new ones
    finally:
        follower.stop()

"""Faults the telemetry survives: OTLP down or slow, SIGTERM, a taken port, a forked child."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from rollout_telemetry import RolloutTelemetry
from rollout_telemetry.exporters.otel import otlp_providers
from tests.support import exposition, free_port, value, wait_until

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
    assert stats.failed + stats.dropped == ROLLOUTS  # two counts of the SDK's: each span in exactly one
    text = exposition(telemetry.registry)
    assert value(text, "rollout_telemetry_spans_total", result="dropped") == stats.dropped
    assert value(text, "rollout_telemetry_spans_total", result="exported") == 0


class _Slow(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        time.sleep(3)
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_otlp_endpoint_slow(tmp_path: Path) -> None:
    """An endpoint slower than the export timeout: recording is unaffected, exports time out and count."""
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
        assert stats.failed + stats.dropped == ROLLOUTS  # each span in exactly one of the SDK's counts
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
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("serving "), line
    return line


@pytest.mark.parametrize("command", ["demo", "serve"])
def test_sigterm_stops_cleanly(tmp_path: Path, command: str) -> None:
    """SIGTERM: the process exits 0, says its final state, and the port is free again."""
    port = free_port()
    args = (
        ["demo", "--rate", "50", "--summary-interval", "60"]
        if command == "demo"
        else ["serve", "--follow", str(tmp_path / "rollouts.jsonl")]
    )
    process = _start([*args, "--port", str(port)])
    try:
        _wait_serving(process)
        time.sleep(0.5)
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
        assert "stopped: 0 rollout outcomes read" in output
    with socket.socket() as again:
        again.bind(("127.0.0.1", port))


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
        time.sleep(0.05)
        before = telemetry.snapshot().agent("parent")
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
        deadline = time.monotonic() + 20
        status = None
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, signal.SIGKILL)
            pytest.fail("the forked child hung recording")
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert status is not None
    assert os.waitstatus_to_exitcode(status) == 0
    assert before is not None
    assert telemetry.snapshot().agent("child") is None  # the child's counts stayed in the child


def test_follow_file_directory_disappearing_in_the_background(tmp_path: Path) -> None:
    """The background follower keeps running when its directory vanishes and picks the file up again."""
    from rollout_telemetry.follow import RunFiles, RunFollower

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
        time.sleep(0.3)
        folder.mkdir()
        main.write_text(row % 1 + row % 2 + row % 3)

        def rebuilt() -> bool:
            agent = telemetry.snapshot().agent("a")
            return agent is not None and agent.measured == 3

        wait_until(rebuilt, timeout=10, what="the file read again after it came back")
    finally:
        follower.stop()

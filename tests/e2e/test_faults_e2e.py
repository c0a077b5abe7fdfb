"""Faults the telemetry survives as a real process: SIGTERM, a taken port, a forked child.

The in-process faults (the OTLP endpoint down or slow, a followed directory vanishing) are in
tests/sources/test_faults.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from rollout_telemetry import RolloutTelemetry
from tests.support import free_port, samples, wait_until


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


@pytest.mark.parametrize("command", ["demo", "serve"])
def test_sigterm_stops_cleanly(tmp_path: Path, command: str) -> None:
    """SIGTERM while running: the process exits 0, says its final state, and the port is free again."""
    port = free_port()
    follow = tmp_path / "rollouts.jsonl"
    args = (
        ["demo", "--rate", "50", "--summary-interval", "60"]
        if command == "demo"
        else ["serve", str(follow), "--poll-interval", "0.05"]
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


class _DrippingCollector:
    """An OTLP/HTTP endpoint on 127.0.0.1 that reads each request and answers a byte a second, never done."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.requests = 0
        self._stop = threading.Event()
        self._clients: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = self.listener.accept()
                self._clients.append(client)
                threading.Thread(target=self._drip, args=(client,), daemon=True).start()

    def _drip(self, client: socket.socket) -> None:
        with contextlib.suppress(OSError):
            client.recv(1 << 16)
            self.requests += 1
            for byte in b"HTTP/1.1 200 OK\r\n":
                client.send(bytes([byte]))
                if self._stop.wait(1):
                    return

    def close(self) -> None:
        self._stop.set()
        self.listener.close()
        for client in self._clients:
            client.close()


SDK_EXIT_WAIT = 30.0
"""Seconds the OpenTelemetry SDK's own exit hook waits for an exporter to flush (``shutdown``'s default)."""


def test_a_dripping_otlp_collector_cannot_hold_the_exit() -> None:
    """An OTLP collector answering one byte a second: SIGTERM to `demo --otlp-endpoint` ends it long before
    the SDK's own exit hook would (it waited 30 s; ours waits FLUSH_SECONDS), the line at exit counts the
    spans never sent (it said 0), and no traceback follows."""
    from rollout_telemetry._cli.otlp import FLUSH_SECONDS

    collector = _DrippingCollector()
    port = free_port()
    process = _start(
        [
            "demo",
            "--rate",
            "200",
            "--port",
            str(port),
            "--otlp-endpoint",
            f"http://127.0.0.1:{collector.port}",
        ]
    )
    try:
        _wait_serving(process)
        wait_until(lambda: collector.requests >= 1, timeout=30, what="an export to reach the collector")
        wait_until(lambda: _scrape_completed(port) >= 100, timeout=30, what="100 completed rollouts")
        process.send_signal(signal.SIGTERM)
        asked = time.monotonic()
        output, _ = process.communicate(timeout=40)
        took = time.monotonic() - asked
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
        collector.close()
    assert process.returncode == 0, output
    assert FLUSH_SECONDS < SDK_EXIT_WAIT / 2
    # bound: the SDK's own exit hook waits SDK_EXIT_WAIT for the collector, ours FLUSH_SECONDS: half the
    # SDK's wait tells them apart on the slowest machine that runs the suite.
    assert took < SDK_EXIT_WAIT / 2, f"{took:.1f} s from SIGTERM to exit"
    unsent = re.search(
        r"demo: (\d+) spans could not be sent to .*\((\d+) unsent when it stopped waiting", output
    )
    assert unsent is not None, output
    assert int(unsent[1]) >= int(unsent[2]) >= 100
    assert "Traceback" not in output

"""Starting the exporter as a real process for the end-to-end tests."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from tests.support import free_port, stop_process


class Exporter:
    """``python -m rollout_telemetry ARGS --port P``, stopped with SIGTERM on exit."""

    def __init__(self, args: Sequence[str], log: Path) -> None:
        self.port = free_port()
        self.args = [sys.executable, "-m", "rollout_telemetry", *args, "--port", str(self.port)]
        self.log_path = log
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def __enter__(self) -> Exporter:
        self.log = self.log_path.open("wb")
        self.process = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                self.scrape()
                return self
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.1)
        raise AssertionError(f"exporter did not start:\n{self.log_path.read_text(errors='replace')}")

    def scrape(self) -> str:
        with urllib.request.urlopen(self.url, timeout=5) as response:
            return str(response.read().decode())

    def stop(self) -> int:
        assert self.process is not None
        stop_process(self.process, timeout=15)
        self.log.close()
        return int(self.process.returncode)

    def __exit__(self, *exc: object) -> None:
        self.stop()

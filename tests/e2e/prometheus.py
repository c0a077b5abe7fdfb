"""A real Prometheus server (Debian's package) on 127.0.0.1 for the end-to-end tests."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from dashboards import generate
from tests.support import free_port, require_tool, stop_process

REPO = Path(__file__).resolve().parents[2]
RULES = generate.RULES_PATH
SCRAPE_CONFIG = REPO / "dashboards" / "prometheus" / "prometheus.yml"


class Prometheus:
    """Starts ``prometheus`` with the project's scrape config, pointed at the given targets.

    The committed config is loaded and only what a test must change is changed: the targets, the scrape
    and evaluation intervals, and the path of the rules file (the committed rules, or ``rules``).
    """

    def __init__(
        self,
        workdir: Path,
        targets: Sequence[str],
        *,
        interval: str = "1s",
        scrape_extra: dict[str, Any] | None = None,
        extra_jobs: Sequence[dict[str, Any]] = (),
        flags: Sequence[str] = (),
        rules: str | None = None,
    ) -> None:
        self.binary = require_tool("prometheus")
        self.flags = tuple(flags)
        self.workdir = workdir
        self.port = free_port()
        config = yaml.safe_load(SCRAPE_CONFIG.read_text())
        config["global"]["scrape_interval"] = interval
        config["global"]["evaluation_interval"] = interval
        if rules is None:
            shutil.copy(RULES, workdir / "rules.yml")
        else:  # a test's variant of the rules (shorter windows, say)
            (workdir / "rules.yml").write_text(rules)
        config["rule_files"] = [str(workdir / "rules.yml")]
        job = config["scrape_configs"][0]
        job["static_configs"] = [{"targets": list(targets)}]
        job.update(scrape_extra or {})
        config["scrape_configs"].extend(extra_jobs)
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Prometheus:
        self.log = (self.workdir / "prometheus.log").open("wb")
        self.process = subprocess.Popen(
            [
                self.binary,
                f"--config.file={self.workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
                *self.flags,
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.wait_for(self._ready, timeout=30, what="prometheus to be ready")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            stop_process(self.process, timeout=10)
        self.log.close()

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, ConnectionError):
            return False

    def api(self, path: str, **params: str) -> Any:
        """GET an API path; return its ``data``."""
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """Evaluate an instant query; return the result vector."""
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self.api("query", **params)
        result: list[dict[str, Any]] = data["result"]
        return result

    def values(self, expr: str) -> dict[tuple[tuple[str, str], ...], float]:
        """An instant query's results keyed by their sorted label pairs."""
        return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in self.query(expr)}

    def targets_up(self) -> int:
        """How many targets the last scrape found up."""
        return sum(1 for r in self.query("up == 1"))

    def wait_for(self, condition: Callable[[], bool], *, timeout: float, what: str) -> None:
        """Poll ``condition`` until it holds; fail with the log tail after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                break
            if condition():
                return
            time.sleep(0.25)
        tail = (self.workdir / "prometheus.log").read_text(errors="replace")[-2000:]
        raise AssertionError(f"timed out waiting for {what}; prometheus log:\n{tail}")

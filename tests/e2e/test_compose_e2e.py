"""docker-compose.yml is valid, pins its images, publishes on localhost, and mounts what exists."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.processes import Exporter
from tests.support import require_tool, wait_until
from tests.test_compose import ROOT


def test_compose_config_is_valid() -> None:
    """``docker-compose config`` accepts the file."""
    result = subprocess.run(
        [require_tool("docker-compose"), "-f", "docker-compose.yml", "config", "-q"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def _config(*files: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """What ``docker-compose config`` makes of ``files`` (merged, variables substituted), as data."""
    result = subprocess.run(
        [require_tool("docker-compose"), *(arg for name in files for arg in ("-f", name)), "config"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False, env={**os.environ, **(env or {})},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    config: dict[str, Any] = yaml.safe_load(result.stdout)
    return config


def test_the_stacks_prometheus_stores_exemplars() -> None:
    """The stack's Prometheus runs with exemplar storage, so the dashboard's exemplars can appear."""
    command = _config("docker-compose.yml")["services"]["prometheus"]["command"]
    assert "--enable-feature=exemplar-storage" in command


def test_the_follow_override_serves_your_own_runs_files(tmp_path: Path) -> None:
    """docker-compose.follow.yml mounts RUN_DIR read-only and runs serve on RUN_FILE in it, labelled RUN_NAME:
    that command, run here on the mounted folder, serves the run's rows (everything else as in the stack)."""
    (tmp_path / "out.jsonl").write_text(json.dumps({"reward": 1.0, "_ng_environment_server": "math"}) + "\n")
    env = {"RUN_DIR": str(tmp_path), "RUN_FILE": "out.jsonl", "RUN_NAME": "exp-7"}
    merged = _config("docker-compose.yml", "docker-compose.follow.yml", env=env)
    alone = _config("docker-compose.yml")
    exporter = merged["services"]["exporter"]
    assert exporter["volumes"] == [f"{tmp_path}:/rollouts:ro"]
    command = exporter["command"]
    assert command[:2] == ["serve", "/rollouts/out.jsonl"]
    assert {k: v for k, v in merged["services"].items() if k != "exporter"} == {
        k: v for k, v in alone["services"].items() if k != "exporter"
    }
    # The container's command on this machine: the mount's folder for its target, on a free local port.
    local = [word.replace("/rollouts", str(tmp_path), 1) for word in command]
    with Exporter([*local, "--host", "127.0.0.1"], tmp_path / "serve.log") as served:
        wait_until(
            lambda: 'rollout_completed_total{agent="math",run="exp-7"} 1.0' in served.scrape(),
            timeout=15,
            what="the run's row",
        )

"""docker-compose.yml is valid, pins its images, publishes on localhost, and mounts what exists."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.processes import Exporter
from tests.support import require_tool, wait_until

ROOT = Path(__file__).parent.parent


@pytest.mark.e2e
def test_compose_config_is_valid() -> None:
    """``docker-compose config`` accepts the file."""
    result = subprocess.run(
        [require_tool("docker-compose"), "-f", "docker-compose.yml", "config", "-q"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def test_images_are_pinned_and_ports_local() -> None:
    """Every image has an exact version; every published port is bound to 127.0.0.1."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"exporter", "prometheus", "grafana"}
    for name, service in services.items():
        assert re.fullmatch(r"[\w./-]+:v?\d+\.\d+\.\d+", service["image"]), f"{name}: {service['image']}"
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name}: {port}"
    assert (ROOT / "Dockerfile").is_file()
    assert re.search(r"^FROM python:3\.11\.\d+-slim", (ROOT / "Dockerfile").read_text(), re.MULTILINE)


def test_mounts_point_at_the_shipped_files() -> None:
    """The Prometheus and Grafana mounts resolve to the repo's config, rules, provisioning and dashboard."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    for service in compose["services"].values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            assert (ROOT / source).exists(), source
    assert (ROOT / "dashboards/prometheus/prometheus.yml").is_file()
    datasource = yaml.safe_load(
        (ROOT / "dashboards/grafana/provisioning/datasources/prometheus.yml").read_text()
    )
    assert datasource["datasources"][0]["uid"] == "rollout-prometheus"
    provider = yaml.safe_load(
        (ROOT / "dashboards/grafana/provisioning/dashboards/rollout-telemetry.yml").read_text()
    )
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    prometheus = yaml.safe_load((ROOT / "dashboards/prometheus/prometheus.yml").read_text())
    assert prometheus["scrape_configs"][0]["static_configs"][0]["targets"] == ["exporter:9464"]


def _pins() -> dict[str, str]:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    pins = {}
    for line in lines:
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"not an exact pin: {line}"
            pins[name.lower().replace("_", "-")] = version
    return pins


def test_the_image_installs_pinned_versions_within_pyproject_ranges() -> None:
    """The Dockerfile installs with constraints.txt, which pins every runtime dependency (and the otel extra)
    to one version inside pyproject.toml's range."""
    import tomllib

    from packaging.requirements import Requirement

    assert "-c constraints.txt" in (ROOT / "Dockerfile").read_text()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = _pins()
    for text in (*project["dependencies"], *project["optional-dependencies"]["otel"]):
        requirement = Requirement(text)
        name = requirement.name.lower().replace("_", "-")
        assert name in pins, f"{name} is not pinned in constraints.txt"
        assert requirement.specifier.contains(pins[name], prereleases=True), (name, pins[name], text)


def _config(*files: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """What ``docker-compose config`` makes of ``files`` (merged, variables substituted), as data."""
    result = subprocess.run(
        [require_tool("docker-compose"), *(arg for name in files for arg in ("-f", name)), "config"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False, env={**os.environ, **(env or {})},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    config: dict[str, Any] = yaml.safe_load(result.stdout)
    return config


@pytest.mark.e2e
def test_the_stacks_prometheus_stores_exemplars() -> None:
    """The stack's Prometheus runs with exemplar storage, so the dashboard's exemplars can appear."""
    command = _config("docker-compose.yml")["services"]["prometheus"]["command"]
    assert "--enable-feature=exemplar-storage" in command


@pytest.mark.e2e
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

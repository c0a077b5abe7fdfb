"""docker-compose.yml is valid, pins its images, publishes on localhost, and mounts what exists."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).parent.parent


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


def test_the_exporters_image_is_tagged_with_the_packages_version() -> None:
    """The image the stack builds for the exporter carries the version pyproject.toml releases."""
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    assert services["exporter"]["image"] == f"rollout-telemetry:{version}"

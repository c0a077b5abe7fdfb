"""A user without the repository: the built wheel alone in a fresh virtualenv writes the dashboard, the rules
and a Prometheus configuration (``rollout-telemetry monitoring``), and Debian's ``prometheus``, run as the
command prints, scrapes the wheel's exporter and evaluates the rules (docs/guides/dashboard.md)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from rollout_telemetry._cli.main import main
from tests.support import free_port, require_tool, stop_process, wait_until

REPO = Path(__file__).resolve().parents[2]
UV = REPO / ".tools" / "uv" / "bin" / "uv"


def _run(*command: str | Path, cwd: Path, timeout: float = 300) -> str:
    """Run ``command`` with no trace of the repository in its environment; its stdout (fails on an error)."""
    env = {key: value for key, value in os.environ.items() if key not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    argv = [str(part) for part in command]
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{command}: {done.stdout}{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv holding the wheel built from this tree and its dependencies, and nothing of the repo."""
    if not UV.is_file():
        pytest.fail(f"{UV} is missing: run bash scripts/setup-dev")
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"  # what the wheel is built from (its build/ is left here, not in the repo)
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(REPO / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    _run(UV, "build", "--wheel", "--out-dir", work / "dist", source, cwd=work)
    (wheel,) = (work / "dist").glob("rollout_telemetry-*.whl")
    venv = work / "venv"
    _run(UV, "venv", "--quiet", "--python", sys.executable, venv, cwd=work)
    python = venv / "bin" / "python"
    _run(UV, "pip", "install", "--quiet", "--python", python, "-c", REPO / "constraints.txt", wheel, cwd=work)
    where = _run(python, "-c", "import rollout_telemetry; print(rollout_telemetry.__file__)", cwd=work)
    assert Path(where.strip()).is_relative_to(venv), where  # the wheel's copy, not the repository's
    return venv


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)["data"]


def test_the_wheel_alone_gives_prometheus_its_configuration_rules_and_dashboard(
    wheel_venv: Path, tmp_path: Path
) -> None:
    """``monitoring DIR --scrape URL`` from the wheel writes the three files; the dashboard and rules are the
    package's; Prometheus started with the printed command (on a free port) scrapes the wheel's ``demo``,
    loads every rule group and evaluates a recording rule on the scraped series."""
    command = wheel_venv / "bin" / "rollout-telemetry"
    exporter_port, prometheus_port = free_port(), free_port()
    folder = tmp_path / "monitoring"
    scrape = f"http://127.0.0.1:{exporter_port}/metrics"
    printed = _run(command, "monitoring", folder, "--scrape", scrape, cwd=tmp_path)
    assert sorted(path.name for path in folder.iterdir()) == [
        "prometheus.yml",
        "rollout-progress.json",
        "rules.yml",
    ]
    packaged = REPO / "src" / "rollout_telemetry" / "_monitoring"
    for name in ("rules.yml", "rollout-progress.json"):
        assert (folder / name).read_bytes() == (packaged / name).read_bytes(), name
    (run_line,) = [line.strip() for line in printed.splitlines() if line.strip().startswith("prometheus ")]
    listen = f"--web.listen-address=127.0.0.1:{prometheus_port}"
    argv = [listen if part.startswith("--web.listen-address=") else part for part in shlex.split(run_line)]
    assert argv[0] == "prometheus"
    argv[0] = require_tool("prometheus")
    groups = len(yaml.safe_load((folder / "rules.yml").read_text())["groups"])
    demo = subprocess.Popen(
        [command, "demo", "--port", str(exporter_port), "--seed", "3", "--duration", "0"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    prometheus = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    api = f"http://127.0.0.1:{prometheus_port}/api/v1"
    try:

        def scraped() -> bool:
            try:
                targets = _get(f"{api}/targets")["activeTargets"]
            except OSError:
                return False
            return [(t["labels"]["job"], t["health"]) for t in targets] == [("rollout-telemetry", "up")]

        wait_until(scraped, timeout=60, what="Prometheus to scrape the wheel's exporter")
        assert len(_get(f"{api}/rules")["groups"]) == groups

        def recorded() -> bool:
            query = urllib.parse.urlencode({"query": "agent:rollout_completed:rate5m > 0"})
            return bool(_get(f"{api}/query?{query}")["result"])

        wait_until(recorded, timeout=90, what="a recording rule over the scraped series")
    finally:
        stop_process(prometheus, timeout=10)
        stop_process(demo, timeout=10)


def test_promtool_accepts_a_configuration_with_characters_beyond_ascii(tmp_path: Path) -> None:
    """A user name and a path with an é (and a path with an emoji) are written as they are and pass
    ``promtool check config``; the same configuration with a DEL in the user name, which ``monitoring``
    refuses, is one promtool refuses too."""
    (tmp_path / "password").write_text("secret")
    argv = ["monitoring", "out", "--scrape", "http://127.0.0.1:9464/m\N{GRINNING FACE}triques"]
    auth = ["--user", "prom\N{LATIN SMALL LETTER E WITH ACUTE}th\N{LATIN SMALL LETTER E WITH ACUTE}e"]
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        assert main([*argv, *auth, "--password-file", "password"]) == 0
    config = tmp_path / "out" / "prometheus.yml"
    (job,) = yaml.safe_load(config.read_text(encoding="utf-8"))["scrape_configs"]
    assert job["basic_auth"]["username"] == auth[1]
    assert job["metrics_path"] == "/m\N{GRINNING FACE}triques"
    promtool = require_tool("promtool")
    checked = subprocess.run(
        [promtool, "check", "config", config], capture_output=True, text=True, timeout=60, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    config.write_text(
        config.read_text(encoding="utf-8").replace('username: "prom', 'username: "prom\x7f'), encoding="utf-8"
    )
    checked = subprocess.run(
        [promtool, "check", "config", config], capture_output=True, text=True, timeout=60, check=False
    )
    assert checked.returncode != 0 and "control characters" in checked.stdout + checked.stderr  # noqa: PT018

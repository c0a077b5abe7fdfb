"""The demo as a real process: promtool on its /metrics, the parser on its exposition, --help everywhere."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.processes import Exporter
from tests.support import promtool_check_metrics, sample_names, samples

pytestmark = pytest.mark.e2e


def test_promtool_checks_the_demo_metrics(tmp_path: Path) -> None:
    """``promtool check metrics`` on the running demo's /metrics prints nothing, and the parser reads it."""
    args = ["demo", "--seed", "5", "--rate", "100", "--max-rollout-seconds", "0.2", "--run", "demo-check"]
    with Exporter(args, tmp_path / "demo.log") as demo:
        time.sleep(2.5)
        text = demo.scrape()
    result = promtool_check_metrics(text)
    assert result.returncode == 0
    assert result.stdout == ""
    assert result.stderr == ""
    names = sample_names(text)
    assert {
        "rollout_completed_total",
        "rollout_masked_total",
        "rollout_failed_total",
        "rollout_duration_seconds_bucket",
        "rollout_in_flight",
    } <= names
    parsed = samples(text)
    completed = sum(v for (n, _), v in parsed.items() if n == "rollout_completed_total")
    masked = sum(v for (n, _), v in parsed.items() if n == "rollout_masked_total")
    assert completed > 50
    assert 0 < masked < completed


@pytest.mark.parametrize("command", [[], ["demo"], ["serve"], ["report"], ["hash-password"]])
def test_every_command_has_help_as_a_process(command: list[str]) -> None:
    """``rollout-telemetry [COMMAND] --help`` exits 0 and describes itself."""
    result = subprocess.run(
        [sys.executable, "-m", "rollout_telemetry", *command, "--help"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: rollout-telemetry")

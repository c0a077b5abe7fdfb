"""The demo as a real process: promtool on its /metrics, the parser on its exposition, --help everywhere."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.openmetrics import parser as openmetrics_parser

from tests.e2e.processes import Exporter
from tests.support import Labels, promtool_check_metrics, sample_names, samples, wait_until

OPENMETRICS = "application/openmetrics-text; version=1.0.0"


def _total(parsed: dict[tuple[str, Labels], float], name: str) -> float:
    return sum(v for (n, _), v in parsed.items() if n == name)


def test_promtool_checks_the_demo_metrics(tmp_path: Path) -> None:
    """``promtool check metrics`` on the running demo's /metrics prints nothing, and the parser reads it."""
    args = ["demo", "--seed", "5", "--rate", "100", "--max-rollout-seconds", "0.2", "--run", "demo-check"]
    families = {
        "rollout_completed_total",
        "rollout_masked_total",
        "rollout_failed_total",
        "rollout_duration_seconds_bucket",
        "rollout_in_flight",
        "rollout_measured_reward_bucket",
    }
    with Exporter(args, tmp_path / "demo.log") as demo:
        scraped: list[str] = []

        def enough_rollouts() -> bool:
            scraped.append(demo.scrape())
            parsed = samples(scraped[-1])
            return (
                families <= sample_names(scraped[-1])
                and _total(parsed, "rollout_completed_total") > 50
                and _total(parsed, "rollout_masked_total") > 0
            )

        wait_until(enough_rollouts, timeout=30, what="every family and more than 50 completed rollouts")
        request = urllib.request.Request(demo.url, headers={"Accept": OPENMETRICS})
        with urllib.request.urlopen(request, timeout=5) as response:
            strict = response.read().decode()
    text = scraped[-1]
    # promtool (2.42) lints the text format only: on OpenMetrics it calls every counter unhelped, since the
    # family is named without _total there; the OpenMetrics scrape goes through the strict parser below
    result = promtool_check_metrics(text)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    # prometheus_client's strict OpenMetrics parser reads the whole scrape: the demo's rewards reach below
    # zero, so the reward histogram has buckets below zero and no _sum (OpenMetrics forbids one there)
    parsed_strictly = {
        f.name: f
        for f in openmetrics_parser.text_string_to_metric_families(strict)  # type: ignore[no-untyped-call]
    }
    reward = parsed_strictly["rollout_measured_reward"].samples
    assert any(float(s.labels["le"]) < 0 for s in reward if s.name.endswith("_bucket"))
    assert {s.name for s in reward} == {"rollout_measured_reward_bucket"}
    assert "rollout_measured_reward_sum" not in text
    assert families <= sample_names(text)
    parsed = samples(text)
    completed = _total(parsed, "rollout_completed_total")
    masked = _total(parsed, "rollout_masked_total")
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

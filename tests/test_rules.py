"""The Prometheus config and rules pass promtool's checks and unit tests."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support import require_tool

PROM = Path(__file__).parent.parent / "dashboards" / "prometheus"


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_tool("promtool"), *args], cwd=PROM, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.e2e
def test_rules_are_valid() -> None:
    """``promtool check rules`` accepts every recording and alerting rule."""
    result = _promtool("check", "rules", "rules.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 25 rules found" in result.stdout


@pytest.mark.e2e
def test_rule_unit_tests_pass() -> None:
    """``promtool test rules`` passes: every recording rule and alert, absent numerators, mid-run series."""
    result = _promtool("test", "rules", "rules_test.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.e2e
def test_config_is_valid() -> None:
    """``promtool check config`` accepts the scrape config."""
    result = _promtool("check", "config", "prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_rule_is_unit_tested() -> None:
    """Each recording rule and alert is exercised by rules_test.yml."""
    rules = yaml.safe_load((PROM / "rules.yml").read_text())
    tests = (PROM / "rules_test.yml").read_text()
    for group in rules["groups"]:
        for rule in group["rules"]:
            name = rule.get("record") or rule["alert"]
            assert name in tests, f"{name} has no promtool unit test"
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                assert rule["labels"]["severity"] in {"warning", "critical"}
                assert rule["annotations"]["summary"]
                assert rule["annotations"]["description"]

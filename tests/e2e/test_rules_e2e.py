"""The Prometheus config and rules pass promtool's checks and unit tests, and are generated from the
dashboard's formulas: each recording rule a panel shows too is computed by the panel's formula."""

from __future__ import annotations

import subprocess

import yaml

from tests.support import require_tool
from tests.views.test_rules import PROM


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_tool("promtool"), *args], cwd=PROM, capture_output=True, text=True, timeout=120, check=False
    )


def test_rules_are_valid() -> None:
    """``promtool check rules`` accepts every recording and alerting rule."""
    result = _promtool("check", "rules", "rules.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    rules = [
        rule
        for group in yaml.safe_load((PROM / "rules.yml").read_text())["groups"]
        for rule in group["rules"]
    ]
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


def test_rule_unit_tests_pass() -> None:
    """``promtool test rules`` passes: every recording rule and alert, absent numerators, mid-run series."""
    result = _promtool("test", "rules", "rules_test.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_config_is_valid() -> None:
    """``promtool check config`` accepts the scrape config."""
    result = _promtool("check", "config", "prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr

"""The Prometheus config and rules pass promtool's checks and unit tests, and are generated from the
dashboard's formulas: each recording rule a panel shows too is computed by the panel's formula."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from rollout_telemetry._cli.main import main
from tests.support import require_tool
from tests.views.test_rules import PROM, RULES_FILE


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_tool("promtool"), *args], cwd=PROM, capture_output=True, text=True, timeout=120, check=False
    )


def test_rules_are_valid() -> None:
    """``promtool check rules`` accepts every recording and alerting rule."""
    result = _promtool("check", "rules", str(RULES_FILE))
    assert result.returncode == 0, result.stdout + result.stderr
    rules = [rule for group in yaml.safe_load(RULES_FILE.read_text())["groups"] for rule in group["rules"]]
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


def test_rule_unit_tests_pass() -> None:
    """``promtool test rules`` passes: every recording rule and alert, absent numerators, mid-run series."""
    result = _promtool("test", "rules", "rules_test.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_config_is_valid(tmp_path: Path) -> None:
    """``promtool check config`` accepts docker-compose's configuration beside the rules it mounts, and the
    one ``rollout-telemetry monitoring`` writes, with TLS and basic auth."""
    compose = tmp_path / "compose"
    compose.mkdir()
    shutil.copy(PROM / "prometheus.yml", compose / "prometheus.yml")
    shutil.copy(RULES_FILE, compose / "rules.yml")
    result = _promtool("check", "config", str(compose / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    secret = tmp_path / "password"
    secret.write_text("correct horse")
    written = tmp_path / "written"
    scrape = ["--scrape", "https://10.0.0.1:9464/metrics", "--scrape", "https://10.0.0.2:9464/metrics"]
    auth = ["--ca-file", str(secret), "--user", "prometheus", "--password-file", str(secret)]
    assert main(["monitoring", str(written), *scrape, *auth]) == 0
    result = _promtool("check", "config", str(written / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout

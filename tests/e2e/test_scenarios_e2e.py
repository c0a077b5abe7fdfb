"""End to end: each demo scenario fires exactly its alerts on a real Prometheus.

The committed rules are evaluated with their windows shortened (5 minutes to 10 seconds, the 10-minute
comparison to 12 seconds, every ``for:`` to 2 seconds), so a run of under a minute shows what a real run
shows over half an hour. The four scenarios run at once, one demo process each, scraped by one Prometheus.
"""

from __future__ import annotations

import re
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from rollout_telemetry._cli.simulation import SCENARIOS
from tests.e2e.processes import Exporter
from tests.e2e.prometheus import RULES, Prometheus

pytestmark = pytest.mark.e2e

DROP_AFTER = 25.0
"""Seconds of the healthy phase: more than the window plus the comparison offset."""
WATCH = 16.0
"""Seconds after the drop during which alerts are collected (the drop is visible for about 12)."""
EXPECTED = {
    "healthy": set(),
    # 20 more points of failures leave valid members beside lost ones in most groups: contaminated baselines.
    "infrastructure": {"RolloutRewardDropInfrastructure", "RolloutBaselineContaminated"},
    "truncation": {"RolloutRewardDropTruncation"},
    "policy": {"RolloutRewardDropPolicy"},
}


def short_rules() -> str:
    """The committed rules with windows short enough for a test."""
    text = RULES.read_text()
    text = re.sub(r"\[\d+m\]", "[10s]", text)
    text = re.sub(r"offset \d+m", "offset 12s", text)
    return re.sub(r"for: \d+m", "for: 2s", text)


def _demo_args(scenario: str) -> list[str]:
    return ["demo", "--scenario", scenario, "--run", scenario, "--rate", "200",
            "--agents", "math_agent,code_agent", "--max-rollout-seconds", "0.2",
            "--drop-after", str(DROP_AFTER), "--duration", str(DROP_AFTER + WATCH + 5),
            "--summary-interval", "60", "--stalled", "0",
            # Few losses before the drop: about 11% of the groups of four hold one (1 - 0.97 ** 4), below
            # RolloutBaselineContaminated's 20%; the demo's defaults (17% of rollouts lost) contaminate half.
            "--masked", "0.02", "--failed", "0.01", "--omitted", "0"]  # fmt: skip


def test_each_scenario_fires_exactly_its_alert(tmp_path: Path) -> None:
    """healthy fires nothing; truncation and policy their reward-drop alert only; infrastructure its own and
    RolloutBaselineContaminated (its failures leave valid members beside failed ones)."""
    assert set(EXPECTED) == set(SCENARIOS)
    exporters = {
        scenario: Exporter([*_demo_args(scenario), "--seed", str(seed)], tmp_path / f"{scenario}.log")
        for seed, scenario in enumerate(SCENARIOS)
    }
    prometheus = Prometheus(
        tmp_path, [e.target for e in exporters.values()], interval="1s", rules=short_rules()
    )
    fired: dict[str, set[str]] = {scenario: set() for scenario in SCENARIOS}
    with prometheus, ExitStack() as stack:
        prometheus.wait_for(lambda: bool(prometheus.query("up")), timeout=30, what="the first scrape")
        for exporter in exporters.values():
            stack.enter_context(exporter)
        started = time.monotonic()
        while time.monotonic() - started < DROP_AFTER + WATCH:
            for alert in prometheus.query('ALERTS{alertstate="firing"}'):
                fired[alert["metric"].get("run", "")].add(alert["metric"]["alertname"])
            time.sleep(0.5)
        # Every panel of the row had data along the way: the drop's causes are visible, not only alerted.
        for scenario in SCENARIOS:
            for family in ("rollout_tokens_total", "rollout_truncated_total", "rollout_groups_total"):
                assert prometheus.query(f'{family}{{run="{scenario}"}}'), (scenario, family)
    assert fired == EXPECTED

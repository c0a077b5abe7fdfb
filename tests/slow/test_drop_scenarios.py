"""End to end: each demo scenario fires exactly its alerts on a real Prometheus.

The committed rules are evaluated with their windows shortened (5 minutes to 10 seconds, the 10-minute
comparison to 12 seconds, every ``for:`` to 2 seconds), so a run of under a minute shows what a real run
shows over half an hour. The four scenarios run at once, one demo process each, scraped by one Prometheus.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rollout_telemetry._cli.scenarios import DROP_SCENARIOS
from tests.e2e.prometheus import Prometheus
from tests.e2e.scenarios import GRACE, fired_alerts, scenario_demos, short_rules

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


# The demos run DROP_AFTER + WATCH; Prometheus and each demo may take 30 s to start on a loaded machine.
@pytest.mark.timeout(DROP_AFTER + WATCH + GRACE + 120)
def test_each_scenario_fires_exactly_its_alert(tmp_path: Path) -> None:
    """healthy fires nothing; truncation and policy their reward-drop alert only; infrastructure its own and
    RolloutBaselineContaminated (its failures leave valid members beside failed ones)."""
    assert set(EXPECTED) == set(DROP_SCENARIOS)
    # No easy tasks: their groups of 1.0 are the one reward a window's mean could owe to chance (the demo
    # spreads the others evenly), so a healthy window on a machine that fits few rollouts in it stays level.
    no_easy_tasks: dict[str, tuple[str, ...]] = dict.fromkeys(DROP_SCENARIOS, ("--uniform", "0"))
    demos = scenario_demos(
        DROP_SCENARIOS,
        rate=100,
        agents="math_agent,code_agent",
        drop_after=DROP_AFTER,
        watch=WATCH,
        extra=no_easy_tasks,
    )

    def every_cause_visible(prometheus: Prometheus) -> None:
        # Every panel of the row had data along the way: the drop's causes are visible, not only alerted.
        for scenario in DROP_SCENARIOS:
            for family in ("rollout_tokens_total", "rollout_truncated_total", "rollout_groups_total"):
                assert prometheus.query(f'{family}{{run="{scenario}"}}'), (scenario, family)

    fired = fired_alerts(
        tmp_path, demos, short_rules(), DROP_AFTER + WATCH, expected=EXPECTED, check=every_cause_visible
    )
    assert fired == EXPECTED

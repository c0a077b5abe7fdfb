"""End to end: each training-signal scenario of the demo fires exactly its alerts on a real Prometheus.

The committed rules are evaluated with their windows shortened (the trailing hour of output length to 120
seconds, every other window to 10 seconds, the 10-minute comparison to 12 seconds, every ``for:`` to 2
seconds). The five scenarios run at once, one demo process each, scraped by one Prometheus.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rollout_telemetry._cli.scenarios import SIGNAL_SCENARIOS
from tests.e2e.scenarios import GRACE, fired_alerts, scenario_demos, short_rules

DROP_AFTER = 60.0
"""Seconds before the scenario's cause: more than the windows and the comparison offset, and enough of a
baseline that the longer answers (about twice the mean length, under max_output_tokens) stay 1.5 times the
trailing mean for about 20 s of the watch, not 10 (with 40 s of baseline the alert was missed 1 run in 3)."""
WATCH = 25.0
"""Seconds after the cause during which alerts are collected."""
EXPECTED = {
    "contaminated": {"RolloutBaselineContaminated"},
    # The lowest reward on most members is also a fall of the reward and a majority of groups without signal.
    "too_hard": {"RolloutGroupsTooHard", "RolloutGroupsNoSignal", "RolloutRewardDropPolicy"},
    "too_easy": {"RolloutGroupsTooEasy", "RolloutGroupsNoSignal"},
    "hollow": {"RolloutHollowRollouts"},
    "length_drift": {"RolloutOutputLengthDrift"},
}


# The demos run DROP_AFTER + WATCH; Prometheus and each demo may take 30 s to start on a loaded machine.
@pytest.mark.timeout(DROP_AFTER + WATCH + GRACE + 120)
def test_each_signal_scenario_fires_exactly_its_alerts(tmp_path: Path) -> None:
    """contaminated, too_hard, too_easy, hollow and length_drift each fire their alerts and no other."""
    assert set(EXPECTED) == set(SIGNAL_SCENARIOS)
    demos = scenario_demos(
        SIGNAL_SCENARIOS, rate=100, agents="math_agent", drop_after=DROP_AFTER, watch=WATCH
    )
    assert (
        fired_alerts(tmp_path, demos, short_rules(trailing="120s"), DROP_AFTER + WATCH, expected=EXPECTED)
        == EXPECTED
    )

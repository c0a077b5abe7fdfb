"""The dashboard's queries as a real Prometheus evaluates them, and which panels a kind of run can fill."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from dashboards import generate
from rollout_telemetry._views.run_series import COVERAGE_FAMILIES
from tests.e2e.prometheus import Prometheus

DASHBOARD = json.loads(generate.PATH.read_text())
COVERAGE = {family.name for family in COVERAGE_FAMILIES}
"""The coverage row: published by ``serve PATH``, and by the hook API once expected work is declared."""
LIFECYCLE = {
    "rollout_in_flight",
    "rollout_oldest_in_flight_age_seconds",
    "rollout_stalled",
    "rollout_duration_seconds_bucket",
    "rollout_collector_rollouts",
    "rollout_cleanup_duration_seconds_bucket",
    "rollout_admission_wait_seconds_bucket",
    "rollout_telemetry_event_loop_lag_seconds_bucket",
    "rollout_output_write_seconds_bucket",
}
"""Published by the hook API only (the demo uses it; a followed run does not): its async blocks are what
watch an event loop too, and its collector is what writes the output."""
TRAJECTORY = {"rollout_health_findings_total", "rollout_health_evaluated_total"}
"""Published only for rollouts that carry a trajectory (``ng_trajectory``): the demo's do not."""
DECLARED = {"rollout_measured_reward_bucket"}
"""Published only for agents with a declared reward range: the demo declares one, ``serve PATH`` not."""
FAILURE_PANELS = {
    "Reward lost to infrastructure",
    "Reward lost to infrastructure per agent",
    "Masked share",
    "Masked share per agent",
    "Failed share",
    "Failed per minute by failure kind",
    "Omitted per minute by failure kind",
    "Masked per minute by failure kind",
    "Top failure kinds",
    "Rejected inputs per minute",
    "Masked + failed share",
}


def dashboard_queries(run: str = "e2e") -> Iterator[tuple[str, str, set[str]]]:
    """(panel title, expression, metric names) of every target, with variables and macros substituted."""
    for panel in DASHBOARD["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            expr = expr.replace("$__rate_interval", "1m").replace("$__range", "1h")
            expr = expr.replace("$agent", ".*").replace("$followed", ".*").replace("$run", run)
            assert "$" not in expr, expr
            yield panel["title"], expr, set(re.findall(r"\b(rollout_[a-z_]+)\b", expr))


def followed_run_panels(
    prometheus: Prometheus,
    run: str,
    at: float,
    *,
    lifecycle: bool = False,
    declared: bool = False,
    trajectories: bool = False,
) -> dict[str, list[list[dict[str, Any]]]]:
    """Every panel's results for a run with coverage at ``at``: each has data but the lifecycle ones unless
    ``lifecycle`` (the hook API's rollout blocks fill those) and the reward histogram's unless ``declared``
    (a reward range), which must have none; the health panels have data exactly when the rows carry
    ``trajectories``. The results by panel title, one list per target."""
    panels: dict[str, list[list[dict[str, Any]]]] = {}
    for title, expr, names in dashboard_queries(run=run):
        result = prometheus.query(expr, at=at)
        panels.setdefault(title, []).append(result)
        if names & LIFECYCLE and not lifecycle:
            assert not result, f"{title!r}: a followed run has no lifecycle series"
        elif names & DECLARED and not declared:
            assert not result, f"{title!r}: no reward range is declared, so no reward histogram"
        elif names & TRAJECTORY:
            assert bool(result) is trajectories, f"{title!r}: {result}"
        else:
            assert result, f"panel {title!r} returned nothing for {expr}"
    return panels

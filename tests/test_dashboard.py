"""Lint for the Grafana dashboard: the rules a later edit must not break silently."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from rollout_telemetry.series import FAMILIES, HISTOGRAMS

PATH = Path(__file__).parent.parent / "dashboards" / "rollout-progress.json"
DASHBOARD: dict[str, Any] = json.loads(PATH.read_text())
PANELS: list[dict[str, Any]] = DASHBOARD["panels"]
TARGETS = [(panel["title"], target) for panel in PANELS for target in panel["targets"]]
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
COUNTERS = {f.name for f in FAMILIES if f.type == "counter"} | {f"{h.name}_bucket" for h in HISTOGRAMS}
ONLY_WHEN = {f.name for f in FAMILIES if f.appears.startswith("once")}
"""Series that can be absent while rollout_completed_total exists: they appear once something happens."""
OUR_METRICS = {f.name for f in (*FAMILIES, *HISTOGRAMS)} | {f"{h.name}_bucket" for h in HISTOGRAMS}


def test_ui_import_input_and_no_leaked_ids() -> None:
    """An __inputs entry for Prometheus exists; no dashboard id leaks; no fixed datasource uid anywhere."""
    assert DASHBOARD["__inputs"] == [
        {
            "name": "DS_PROMETHEUS",
            "label": "Prometheus",
            "description": "The Prometheus that scrapes the rollout-telemetry exporters",
            "type": "datasource",
            "pluginId": "prometheus",
            "pluginName": "Prometheus",
        }
    ]
    assert DASHBOARD.get("id") is None
    text = PATH.read_text()
    uids = set(re.findall(r'"uid":\s*"([^"]*)"', text))
    assert uids == {"${datasource}", "rollout-progress"}, uids


def test_datasource_is_a_template_variable() -> None:
    """A datasource variable of type prometheus, with no current value pinned to one instance."""
    variables = {v["name"]: v for v in DASHBOARD["templating"]["list"]}
    datasource = variables["datasource"]
    assert datasource["type"] == "datasource"
    assert datasource["query"] == "prometheus"
    assert datasource["current"] == {}
    for panel in PANELS:
        assert panel["datasource"] == DATASOURCE, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]


@pytest.mark.parametrize("name", ["run", "agent"])
def test_run_and_agent_variables(name: str) -> None:
    """run and agent: multi-select with All, scoped to our own metric names."""
    variable = {v["name"]: v for v in DASHBOARD["templating"]["list"]}[name]
    assert variable["multi"] is True
    assert variable["includeAll"] is True
    assert variable["allValue"] == ".*"
    assert re.fullmatch(
        rf"label_values\(rollout_completed_total(\{{[^}}]*\}})?, {name}\)", variable["definition"]
    )
    assert variable["query"]["query"] == variable["definition"]


def test_every_panel_has_title_description_and_unit() -> None:
    """Titles, descriptions and units on every panel."""
    for panel in PANELS:
        assert panel["title"].strip()
        assert len(panel["description"]) > 40, panel["title"]
        assert panel["fieldConfig"]["defaults"]["unit"], panel["title"]


def test_the_required_panels_exist() -> None:
    """The panels the dashboard promises are all there."""
    titles = {panel["title"] for panel in PANELS}
    assert {
        "Mean reward vs unmasked reward",
        "Masked ratio",
        "Failed per minute by failure kind",
        "Omitted per minute by failure kind",
        "Top failure kinds",
        "Rollouts completed per minute",
        "Rollout duration quantiles",
        "Rollouts in flight",
        "Oldest in-flight rollout age",
    } <= titles


def _selectors(expr: str) -> list[tuple[str, int]]:
    return [(m.group(1), m.start()) for m in re.finditer(r"\b(rollout_[a-z_]+)\b", expr)]


@pytest.mark.parametrize(("title", "target"), TARGETS, ids=[f"{t}:{x['refId']}" for t, x in TARGETS])
def test_query_rules(title: str, target: dict[str, Any]) -> None:
    """Counters under rate/increase with $__rate_interval, our metrics only, absent numerators 0, no avg."""
    expr = target["expr"]
    for name, start in _selectors(expr):
        assert name in OUR_METRICS, f"{title}: unknown metric {name}"
        if name in COUNTERS:
            assert re.search(r"(rate|increase)\($", expr[:start]), f"{title}: {name} not under rate/increase"
    for window in re.findall(r"\brate\([^\[]*\[([^\]]+)\]", expr):
        assert window == "$__rate_interval", f"{title}: rate window {window}"
    for window in re.findall(r"\bincrease\([^\[]*\[([^\]]+)\]", expr):
        assert window in ("$__rate_interval", "$__range"), f"{title}: increase window {window}"
    assert "avg" not in expr, f"{title}: ratios are sums divided by sums, never averages"
    for name, _ in _selectors(expr):
        if name in ONLY_WHEN:
            assert " or " in expr, f"{title}: {name} can be absent; the query needs an 'or ... * 0' fallback"
    if "rollout_" in expr:
        assert "$run" in expr, f"{title}: query ignores the run variable"


def test_panel_ids_are_unique_and_layout_fits() -> None:
    """Panel ids are unique and every panel fits the 24-column grid."""
    ids = [panel["id"] for panel in PANELS]
    assert len(ids) == len(set(ids))
    for panel in PANELS:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24

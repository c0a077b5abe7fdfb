"""The Grafana dashboard: generated from the catalogue, committed as generated, and linted.

The lint follows the checks of Grafana's dashboard linter that apply to an exporter dashboard: a datasource
template variable on every panel and target, ``$__rate_interval`` in rate queries, a unit, a title and a
description on every panel, no hard-coded datasource uid, and queries free of ``job``/``instance`` (the
exporter's identity is ``run`` and ``agent``; scrape labels differ between installations), but for the
collecting process's own families, shown per process (``instance``).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dashboards import generate, panels
from dashboards.promql import series
from rollout_telemetry._views.run_series import PROCESS_FAMILIES, RUNTIME_FAMILIES
from rollout_telemetry._views.series import CATALOGUE, FAMILIES
from tests.support import require_tool

ROOT = Path(__file__).parents[2]
PATH = generate.PATH
DASHBOARD: dict[str, Any] = json.loads(PATH.read_text())
ROWS = [panel for panel in DASHBOARD["panels"] if panel["type"] == "row"]
PANELS: list[dict[str, Any]] = [panel for panel in DASHBOARD["panels"] if panel["type"] != "row"]
TARGETS = [(panel["title"], target) for panel in PANELS for target in panel["targets"]]
VARIABLES = {v["name"]: v for v in DASHBOARD["templating"]["list"]}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
HISTOGRAM_SERIES = {
    f"{h.name}_{suffix}" for h in CATALOGUE if h.type == "histogram" for suffix in ("bucket", "sum", "count")
}
KNOWN = {f.name for f in CATALOGUE} | HISTOGRAM_SERIES
"""Every series name a collector publishes, computed here independently of the generator."""
COUNTERS = {f.name for f in CATALOGUE if f.type == "counter"} | {
    f"{h.name}_bucket" for h in CATALOGUE if h.type == "histogram"
}
PER_PROCESS = {family.name for family in RUNTIME_FAMILIES} | {family.name for family in PROCESS_FAMILIES}
"""The collecting process's own families: shown per process (``instance``), the one scrape label allowed."""
ONLY_WHEN = {f.name for f in FAMILIES if f.appears.startswith("once")} | {"rollout_run_expected"}
"""Series that can be absent while the agent completes rollouts: the query needs an ``or`` fallback."""


def test_committed_json_is_what_the_generator_builds() -> None:
    """Regenerating the dashboard gives the committed file byte for byte (edit panels.py, then generate)."""
    rebuild = "run: .venv/bin/python -m dashboards.generate"
    assert generate.render() == PATH.read_text(encoding="utf-8"), rebuild
    assert generate.main(["--check"]) == 0


def test_check_mode_fails_on_a_stale_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--check`` exits 1 when the file on disk is not what the panels build."""
    stale = tmp_path / "rollout-progress.json"
    stale.write_text(PATH.read_text().replace("Masked share", "Masked ratio"))
    monkeypatch.setattr(generate, "PATH", stale)
    assert generate.main(["--check"]) == 1


def _names(expr: str) -> set[str]:
    return set(re.findall(r"\b(rollout_[a-z_]+)\b", expr))


def test_every_query_names_a_catalogue_family() -> None:
    """Each metric name in a target or a variable query is a family the catalogue publishes."""
    queries = [target["expr"] for _, target in TARGETS]
    queries += [v["definition"] for v in VARIABLES.values() if v["type"] == "query"]
    named = set().union(*(_names(q) for q in queries))
    assert named, "no metric found in the queries"
    assert named <= KNOWN, named - KNOWN


def test_the_generator_refuses_a_family_the_catalogue_lacks() -> None:
    """A renamed or missing family fails the generator instead of leaving a panel on "No data"."""
    with pytest.raises(ValueError, match="rollout_renamed_total is not in the catalogue"):
        series("rollout_renamed_total", panels.AGENTS)
    with pytest.raises(ValueError, match="not in the catalogue"):
        panels.coverage_gauge(panels.CoverageGauge("rollout_not_published_yet", "Later", "Not yet."))


def test_an_optional_coverage_gauge_is_one_entry_and_never_no_data() -> None:
    """A CoverageGauge entry builds a stat in the coverage row that reads 0 while its family is absent."""
    gauge = panels.CoverageGauge("rollout_run_expected", "Expected", "Rollouts expected.")
    panel = panels.coverage_gauge(gauge)
    (query,) = panel.queries
    assert query.expr.startswith('sum(rollout_run_expected{run=~"$run",agent=~"$followed"}) or ')
    assert query.expr.endswith(" * 0")
    assert panel.kind == "stat"
    assert panel.no_value == panels.NOT_FOLLOWED


def test_datasource_is_a_template_variable_on_every_panel_and_target() -> None:
    """A prometheus datasource variable, pinned to no instance, used by every panel and target."""
    datasource = VARIABLES["datasource"]
    assert datasource["type"] == "datasource"
    assert datasource["query"] == "prometheus"
    assert datasource["current"] == {}
    for panel in PANELS:
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], f"{panel['title']}: a panel without targets"
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]


def test_ui_import_input_and_no_hard_coded_uid() -> None:
    """An __inputs entry for Prometheus exists; no dashboard id leaks; no datasource uid is hard-coded."""
    assert [i["name"] for i in DASHBOARD["__inputs"]] == ["DS_PROMETHEUS"]
    assert DASHBOARD["__inputs"][0]["pluginId"] == "prometheus"
    assert DASHBOARD.get("id") is None
    uids = set(re.findall(r'"uid":\s*"([^"]*)"', PATH.read_text()))
    assert uids == {"${datasource}", "rollout-progress"}, uids
    required = {r["id"] for r in DASHBOARD["__requires"] if r["type"] == "panel"}
    assert required == {panel["type"] for panel in PANELS}


@pytest.mark.parametrize("name", ["run", "agent", "followed"])
def test_query_variables(name: str) -> None:
    """Query variables: label_values of a catalogue family, multi-select with All, reloaded on time change."""
    variable = VARIABLES[name]
    assert re.fullmatch(r"label_values\((rollout_[a-z_]+)(\{[^}]*\})?, (run|agent)\)", variable["definition"])
    assert variable["query"]["query"] == variable["definition"]
    assert variable["multi"] is True
    assert variable["includeAll"] is True
    assert variable["allValue"] == ".*"
    assert variable["refresh"] == 2


def test_every_panel_has_title_description_and_unit() -> None:
    """Titles (unique), descriptions saying what the number means, and units on every panel."""
    titles = [panel["title"] for panel in PANELS]
    assert len(titles) == len(set(titles)), titles
    for panel in PANELS:
        assert panel["title"].strip()
        assert len(panel["description"]) > 60, panel["title"]
        assert panel["fieldConfig"]["defaults"]["unit"], panel["title"]


def test_overview_row_is_stat_panels_with_thresholds() -> None:
    """The first row answers the questions a person opens the dashboard with, each coloured by thresholds."""
    assert ROWS[0]["title"] == "Overview"
    overview = [p for p in PANELS if p["gridPos"]["y"] < ROWS[1]["gridPos"]["y"]]
    assert [p["title"] for p in overview] == [
        "Rollouts per minute",
        "Mean reward",
        "Unmasked reward",
        "Reward lost to infrastructure",
        "Masked share",
        "Failed share",
        "Rollouts in flight",
        "Oldest in-flight age",
    ]
    for panel in overview:
        assert panel["type"] == "stat"
        defaults = panel["fieldConfig"]["defaults"]
        steps = defaults["thresholds"]["steps"]
        assert steps[0]["value"] is None, panel["title"]
        assert len(steps) >= 2, panel["title"]
        assert [s["value"] for s in steps[1:]] == sorted(s["value"] for s in steps[1:])
        assert defaults["color"] == {"mode": "thresholds"}


def test_coverage_row_repeats_over_agents_with_coverage_series() -> None:
    """The coverage row repeats over the hidden ``followed`` variable; its panels never read "No data"."""
    (coverage,) = [row for row in ROWS if row.get("repeat")]
    assert coverage["repeat"] == "followed"
    assert VARIABLES["followed"]["hide"] == 2
    assert "rollout_run_rollouts" in VARIABLES["followed"]["definition"]
    start = coverage["gridPos"]["y"]
    end = min(row["gridPos"]["y"] for row in ROWS if row["gridPos"]["y"] > start)
    inside = [p for p in PANELS if start < p["gridPos"]["y"] < end]
    assert {p["title"] for p in inside} >= {"Run progress by disposition", "Retries per minute"}
    for panel in inside:
        assert panel["fieldConfig"]["defaults"]["noValue"] == panels.NOT_FOLLOWED
        for target in panel["targets"]:
            assert '"$followed"' in target["expr"], panel["title"]


def _selectors(expr: str) -> list[tuple[str, int]]:
    return [(m.group(1), m.start()) for m in re.finditer(r"\b(rollout_[a-z_]+)\b", expr)]


@pytest.mark.parametrize(("title", "target"), TARGETS, ids=[f"{t}:{x['refId']}" for t, x in TARGETS])
def test_query_rules(title: str, target: dict[str, Any]) -> None:
    """Counters under rate/increase with $__rate_interval, absent numerators 0, no avg, no job/instance."""
    expr = target["expr"]
    for name, start in _selectors(expr):
        if name in COUNTERS:
            assert re.search(r"(rate|increase)\($", expr[:start]), f"{title}: {name} not under rate/increase"
    for window in re.findall(r"\b(?:rate|irate)\([^\[]*\[([^\]]+)\]", expr):
        assert window == "$__rate_interval", f"{title}: rate window {window}"
    for window in re.findall(r"\bincrease\([^\[]*\[([^\]]+)\]", expr):
        assert window in ("$__rate_interval", "$__range"), f"{title}: increase window {window}"
    assert "avg" not in expr, f"{title}: ratios are sums divided by sums, never averages"
    per_process = any(name.startswith(tuple(PER_PROCESS)) for name in re.findall(r"\b[a-z_]+\b", expr))
    scrape_labels = r"\b(job)\b" if per_process else r"\b(job|instance)\b"
    assert not re.search(scrape_labels, expr), f"{title}: a query on scrape labels"
    for name, _ in _selectors(expr):
        if name in ONLY_WHEN:
            assert " or " in expr, f"{title}: {name} can be absent; the query needs an 'or ... * 0' fallback"
    assert "$run" in expr, f"{title}: query ignores the run variable"


def test_panels_fit_the_grid_without_overlap() -> None:
    """Panel ids are unique; every panel fits the 24-column grid and none overlaps another."""
    ids = [panel["id"] for panel in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids))
    cells: dict[tuple[int, int], str] = {}
    for panel in DASHBOARD["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]


def test_the_docs_panel_table_matches_the_dashboard() -> None:
    """The docs' panel reference lists exactly the generated panels, in order."""
    readme = (ROOT / "docs" / "reference" / "dashboard.md").read_text(encoding="utf-8")
    table = readme.split("| panel | row | unit | what it shows |", 1)[1].split("\n\n", 1)[0]
    rows = [line.split("|")[1:3] for line in table.strip().splitlines()[1:]]
    assert [title.strip() for title, _ in rows] == [panel["title"] for panel in PANELS]


def _promtool_eval(expr: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Evaluate a dashboard expression in a promtool unit test where an unscored rollout is present."""
    expr = expr.replace("$__rate_interval", "5m").replace("$run", ".*").replace("$agent", ".*")
    labels = 'run="r",agent="judge"'
    test = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": f"rollout_completed_total{{{labels}}}", "values": "0+120x20"},
                    {"series": f'rollout_unscored_total{{{labels},failure_kind="x"}}', "values": "0+60x20"},
                    {"series": f'rollout_masked_total{{{labels},failure_kind="y"}}', "values": "0+15x20"},
                ],
                "promql_expr_test": [
                    {
                        "expr": f"sum({expr})",
                        "eval_time": "10m",
                        "exp_samples": [{"labels": "{}", "value": 0.25}],
                    }
                ],
            }
        ],
    }
    (tmp_path / "test.yml").write_text(json.dumps(test))
    return subprocess.run(
        [require_tool("promtool"), "test", "rules", "test.yml"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.mark.parametrize("title", ["Masked share", "Masked share per agent"])
def test_masked_share_panels_use_gyms_denominator(title: str, tmp_path: Path) -> None:
    """120 completed, 60 of them unscored, 15 masked per minute: the panels read 15 / (120 - 60) = 0.25."""
    (panel,) = [p for p in PANELS if p["title"] == title]
    (target,) = panel["targets"]
    result = _promtool_eval(target["expr"], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr

"""Build the dashboard and the Prometheus rules from ``dashboards/``.

    .venv/bin/python -m dashboards.generate           # write every file that differs
    .venv/bin/python -m dashboards.generate --check   # exit 1 naming each file that is not what is built

The dashboard (``rollout-progress.json``) comes from the panels of ``dashboards/panels.py``, the rules
(``rules.yml``, and ``alerts.json``: when each alert fires, for the live page) from those of
``dashboards/rules.py``, all written into the package
(``src/rollout_telemetry/_monitoring``), which ``rollout-telemetry monitoring`` writes out for a user;
``dashboards/prometheus/prometheus.yml`` (docker-compose's) is that command's configuration for the
``exporter`` service; the queries of both are the
formulas of ``dashboards/promql.py``. The docs' alert and panel tables are built from the same by
``python -m docs.generate``. A development tool:
nothing in the ``rollout_telemetry`` package imports it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dashboards import rules
from dashboards.model import DATASOURCE, Row, panel_json, row_json
from dashboards.panels import ROWS
from rollout_telemetry._cli.monitoring import prometheus_config

__all__ = [
    "ALERTS_PATH",
    "COMPOSE_CONFIG",
    "PATH",
    "RULES_PATH",
    "alerts_text",
    "dashboard",
    "main",
    "outputs",
    "refresh",
    "render",
]

MONITORING = Path(__file__).parent.parent / "src" / "rollout_telemetry" / "_monitoring"
PATH = MONITORING / "rollout-progress.json"
RULES_PATH = MONITORING / "rules.yml"
ALERTS_PATH = MONITORING / "alerts.json"
"""The alerts' names, severities and when each fires, for the live page (which reads no YAML)."""
COMPOSE_CONFIG = Path(__file__).parent / "prometheus" / "prometheus.yml"
"""docker-compose.yml's Prometheus configuration: scraping its ``exporter`` service."""
GRID = 24


def _query_variable(name: str, label: str, query: str, *, hide: int = 0) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "definition": query,
        "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery", "qryType": 1},
        "refresh": 2,
        "multi": True,
        "includeAll": True,
        "allValue": ".*",
        "sort": 1,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "options": [],
        "hide": hide,
        "regex": "",
    }


def _variables() -> list[dict[str, Any]]:
    datasource = {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "hide": 0,
        "includeAll": False,
        "multi": False,
        "options": [],
        "refresh": 1,
        "regex": "",
    }
    return [
        datasource,
        _query_variable("run", "Run", "label_values(rollout_completed_total, run)"),
        _query_variable("agent", "Agent", 'label_values(rollout_completed_total{run=~"$run"}, agent)'),
        # Hidden: the agents with coverage series, one coverage row each; none in library mode.
        _query_variable(
            "followed",
            "Followed agent",
            'label_values(rollout_run_rollouts{run=~"$run",agent=~"$agent"}, agent)',
            hide=2,
        ),
    ]


def _layout(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Each row's header, then its panels left to right, wrapping at the 24-column grid."""
    panels: list[dict[str, Any]] = []
    y = 0
    for row in rows:
        panels.append(row_json(row, len(panels) + 1, y))
        y += 1
        x, line = 0, 0
        for panel in row.panels:
            if x + panel.width > GRID:
                x, y, line = 0, y + line, 0
            panels.append(panel_json(panel, len(panels) + 1, x, y))
            x += panel.width
            line = max(line, panel.height)
        y += line
    return panels


def _requires(kinds: set[str]) -> list[dict[str, str]]:
    names = {
        "bargauge": "Bar gauge",
        "row": "Row",
        "stat": "Stat",
        "table": "Table",
        "timeseries": "Time series",
    }
    return [
        {"type": "grafana", "id": "grafana", "name": "Grafana", "version": "10.0.0"},
        {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"},
        *(
            {"type": "panel", "id": kind, "name": names[kind], "version": ""}
            for kind in sorted(kinds - {"row"})
        ),
    ]


def dashboard() -> dict[str, Any]:
    """The dashboard as Grafana's JSON model (schema 39), importable through the UI and provisioning."""
    panels = _layout(ROWS)
    return {
        "__inputs": [
            {
                "name": "DS_PROMETHEUS",
                "label": "Prometheus",
                "description": "The Prometheus that scrapes the rollout-telemetry exporters",
                "type": "datasource",
                "pluginId": "prometheus",
                "pluginName": "Prometheus",
            }
        ],
        "__requires": _requires({panel["type"] for panel in panels}),
        "id": None,
        "uid": "rollout-progress",
        "title": "Rollout progress",
        "description": "Live RL rollout collection at a glance: throughput, mean and unmasked reward, the "
        "reward lost to infrastructure, masked and failed shares, in-flight work, the run's coverage when "
        "followed, and per-agent detail by failure kind, from rollout-telemetry. Generated by "
        "dashboards/generate.py from the metric catalogue.",
        "tags": ["rollout-telemetry", "rl"],
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "timepicker": {},
        "annotations": {"list": []},
        "links": [],
        "templating": {"list": _variables()},
        "panels": panels,
    }


def render() -> str:
    """The JSON text of the dashboard, as committed."""
    return json.dumps(dashboard(), indent=2, ensure_ascii=False) + "\n"


def outputs() -> dict[Path, str]:
    """Each generated file and the text it must hold."""
    return {
        PATH: render(),
        RULES_PATH: rules.text(),
        ALERTS_PATH: alerts_text(),
        COMPOSE_CONFIG: prometheus_config(["http://exporter:9464/metrics"]),
    }


def alerts_text() -> str:
    """The JSON text of ``alerts.json``: each alert of ``rules.yml``, in its order."""
    alerts = [
        {"alert": alert.name, "severity": alert.severity, "for_minutes": alert.minutes, "when": alert.when}
        for alert in rules.alerting_rules()
    ]
    return json.dumps(alerts, indent=2, ensure_ascii=False) + "\n"


def refresh(
    module: str, description: str, build: Callable[[], dict[Path, str]], argv: Sequence[str] | None
) -> int:
    """The command line of a generator ``python -m <module>``: write each file of ``build()`` that differs,
    or with ``--check`` exit 1 naming each one (a missing file differs)."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=description)
    parser.add_argument("--check", action="store_true", help="fail if a committed file differs")
    args = parser.parse_args(argv)
    stale = {
        path: text
        for path, text in build().items()
        if not path.exists() or path.read_text(encoding="utf-8") != text
    }
    if args.check:
        for path in stale:
            print(f"{path} is out of date: run python -m {module}", file=sys.stderr)
        return 1 if stale else 0
    for path, text in stale.items():
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Write the generated files, or with ``--check`` report each one that is not what is built."""
    return refresh("dashboards.generate", __doc__.splitlines()[0], outputs, argv)


if __name__ == "__main__":
    sys.exit(main())

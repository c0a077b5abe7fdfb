"""Panels as frozen values, and how each becomes Grafana's JSON (dashboard schema 39, Grafana 10 and 11).

Only what a panel says is written: its kind, title, description, unit, queries, thresholds and size. The
JSON a kind needs around that (datasource references, legend and tooltip options, reduce options) is written
once here, so every panel of a kind looks and behaves the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["DATASOURCE", "Panel", "Query", "Row", "Step", "panel_json", "row_json"]

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
"""Every panel and target reads the ``datasource`` template variable; no uid is hard-coded."""

PanelKind = Literal["timeseries", "stat", "bargauge", "table"]

Step = tuple[float | None, str]
"""A threshold step: from this value (``None``: the base) upwards, this colour."""


@dataclass(frozen=True, slots=True)
class Query:
    """One Prometheus target of a panel."""

    expr: str
    legend: str
    table: bool = False
    """An instant query formatted as a table (the top-kinds table)."""
    exemplars: bool = False
    """Show the series' exemplars: each links to the trace of the rollout it came from."""


@dataclass(frozen=True, slots=True)
class Panel:
    """One panel: what it shows and how big it is; the layout places it."""

    kind: PanelKind
    title: str
    description: str
    """What the number means, its unit and how it is computed."""
    unit: str
    queries: tuple[Query, ...]
    width: int = 12
    height: int = 8
    thresholds: tuple[Step, ...] = ()
    """Colour steps (stat and bar gauge panels colour by them)."""
    stacked: bool = False
    limits: tuple[float, float] | None = None
    """The axis or gauge minimum and maximum."""
    decimals: int | None = None
    no_value: str | None = None
    """Shown instead of "No data" when the queries return nothing."""
    colors: tuple[tuple[str, str], ...] = ()
    """Fixed colours for series by display name."""


@dataclass(frozen=True, slots=True)
class Row:
    """A titled row of panels; ``repeat`` names a variable to repeat the row for each of its values."""

    title: str
    panels: tuple[Panel, ...]
    repeat: str | None = None


def _target(ref: str, query: Query) -> dict[str, Any]:
    target: dict[str, Any] = {
        "datasource": DATASOURCE,
        "refId": ref,
        "expr": query.expr,
        "legendFormat": query.legend,
    }
    if query.table:
        target |= {"instant": True, "format": "table"}
    if query.exemplars:
        target["exemplar"] = True
    return target


def _defaults(panel: Panel) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": panel.unit}
    if panel.decimals is not None:
        defaults["decimals"] = panel.decimals
    if panel.limits is not None:
        defaults["min"], defaults["max"] = panel.limits
    if panel.no_value is not None:
        defaults["noValue"] = panel.no_value
    if panel.thresholds:
        steps = [{"color": color, "value": value} for value, color in panel.thresholds]
        defaults["thresholds"] = {"mode": "absolute", "steps": steps}
        defaults["color"] = {"mode": "thresholds"}
    if panel.kind == "timeseries":
        stacking = {"mode": "normal" if panel.stacked else "none", "group": "A"}
        defaults["custom"] = {
            "stacking": stacking,
            "fillOpacity": 30 if panel.stacked else 0,
            "drawStyle": "line",
        }
    return defaults


def _overrides(panel: Panel) -> list[dict[str, Any]]:
    return [
        {
            "matcher": {"id": "byName", "options": name},
            "properties": [{"id": "color", "value": {"mode": "fixed", "fixedColor": color}}],
        }
        for name, color in panel.colors
    ]


_REDUCE = {"values": False, "calcs": ["lastNotNull"], "fields": ""}


def _options(panel: Panel) -> dict[str, Any]:
    if panel.kind == "stat":
        return {
            "reduceOptions": _REDUCE,
            "colorMode": "background",
            "graphMode": "area",
            "justifyMode": "auto",
            "textMode": "value_and_name" if len(panel.queries) > 1 else "value",
            "orientation": "auto",
        }
    if panel.kind == "bargauge":
        return {
            "reduceOptions": _REDUCE,
            "displayMode": "gradient",
            "orientation": "horizontal",
            "showUnfilled": True,
            "valueMode": "color",
            "namePlacement": "left",
            "minVizWidth": 0,
            "minVizHeight": 16,
        }
    if panel.kind == "table":
        return {"showHeader": True, "sortBy": [{"displayName": "Value #A", "desc": True}]}
    return {
        "legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "mean"]},
        "tooltip": {"mode": "multi", "sort": "desc"},
    }


def panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    """The Grafana JSON of ``panel`` with this id at grid position (``x``, ``y``)."""
    refs = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    body: dict[str, Any] = {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": panel.width, "h": panel.height},
        "fieldConfig": {"defaults": _defaults(panel), "overrides": _overrides(panel)},
        "targets": [_target(ref, query) for ref, query in zip(refs, panel.queries, strict=False)],
    }
    if panel.kind == "table":
        body["transformations"] = [{"id": "merge", "options": {}}]
    body["options"] = _options(panel)
    return body


def row_json(row: Row, panel_id: int, y: int) -> dict[str, Any]:
    """The Grafana JSON of an expanded row header at height ``y``; its panels follow it in the list."""
    body: dict[str, Any] = {
        "id": panel_id,
        "type": "row",
        "title": row.title,
        "collapsed": False,
        "gridPos": {"x": 0, "y": y, "w": 24, "h": 1},
        "panels": [],
    }
    if row.repeat is not None:
        body["repeat"] = row.repeat
    return body

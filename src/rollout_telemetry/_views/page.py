"""A run's story as one HTML page: the report (``report --format html``) and the live page (``GET /``).

Made from the report's data (``build_report``, the numbers ``--format json`` prints, embedded in the page as
JSON too) and the points of a ``RunStory``; charts are SVG drawn here (``_views.charts``). The page loads
nothing: its style sheet and its one small script are inline, so it opens on an air-gapped cluster and can be
attached to a pull request. Every name from the run is escaped, and the embedded JSON cannot close its tag.

Agents are listed worst first (the largest share of their outcomes lost to masking, failure, omission or no
score), the ten worst open; a filter box narrows the page to the agents whose name holds what is typed. The
live page swaps its content for ``?part=main`` every few seconds, keeping the filter and what is open; it
draws the charts of the open sections only (``?open=NAME`` names those the reader opened, at most
``MAX_OPEN``), so an update of 500 agents costs the endpoint little more than one of a dozen. Opening a
section whose charts are not drawn asks for them at once; nothing else asks sooner than the next update.

A ``Page`` is one read of the run: its tables are made once, and each agent's section once with its charts
and once without, so the page for any set of open sections is assembled from the same parts (names no agent
has are dropped: every such set asks for the same page), and an agent's charts are drawn at most once a read.
The live page keeps its drawings across reads (``Drawings``): an agent's charts are drawn at most once an
update (``REFRESH_SECONDS``), whichever readers ask, however often.

Its Content-Security-Policy (``page_policy``, in a ``<meta>`` of the page and in the live page's header)
allows its one style sheet and its one script by their SHA-256 hashes, computed here from the constants: no
other inline script or style runs, and nothing is loaded. The report opened from disk may connect nowhere;
the live page only to its own origin, for its updates.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import math
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from html import escape
from typing import Any

from rollout_telemetry._contract.outcome import Disposition
from rollout_telemetry._contract.shown import shown
from rollout_telemetry._store.snapshot import AccountSnapshot
from rollout_telemetry._views.charts import Line, Segment, bar, line_chart
from rollout_telemetry._views.intervals import interval_text
from rollout_telemetry._views.story import POINT_FIELDS, Point, XAxis

__all__ = [
    "REFRESH_SECONDS",
    "Drawings",
    "Page",
    "page_policy",
    "plain_document",
    "render_page",
    "reward_ranges",
]

OPEN_AGENTS = 10
"""Agents whose section is open when the page loads (the worst); the others open on a click."""
REFRESH_SECONDS = 5
"""Seconds between two updates of the live page."""
MAX_OPEN = 50
"""Agents the live page names with ``?open=`` at most; the endpoint charts the first ones named."""
CHART_POINTS = 120
"""Points a chart's line draws at most (about one every 5 pixels); the story may hold more."""
IN_FLIGHT_SHOWN = 20
"""Rollouts in flight the page lists, the oldest (the first of ``GET /rollouts``' listing)."""

_LONGEST = 10**30  # integers this long or longer are shown by their size (``shown``)

_DISPOSITIONS = tuple(disposition.value for disposition in Disposition)
_LOST = tuple(disposition.value for disposition in Disposition if disposition is not Disposition.MEASURED)
_X_LABELS: dict[XAxis, str] = {
    "rollouts": "rows of the agent, by task then rollout index (rows)",
    "seconds": "time since the telemetry started (s)",
}
_X_NOTES: dict[XAxis, str] = {
    "rollouts": (
        "Rows of a run's files carry no timestamps: the x-axis of each chart is the run's order, the agent's "
        "rows by task index, then rollout index, then attempt, so a failure from the failures file sits at "
        "its task."
    ),
    "seconds": "The x-axis of each chart is the time since the telemetry started; the page updates itself.",
}

_STYLE = """
:root{--fg:#1b1b1b;--bg:#fff;--muted:#5f5f5f;--grid:#e3e3e3;--panel:#f6f6f6;
--measured:#009e73;--masked:#e69f00;--unscored:#56b4e9;--failed:#d55e00;--omitted:#cc79a7;--unknown:#9a9a9a;
--reward:#0072b2;--unmasked:#e69f00}
@media (prefers-color-scheme:dark){:root{--fg:#e8e8e8;--bg:#161616;--muted:#a8a8a8;--grid:#333;
--panel:#222;--reward:#56b4e9;--unknown:#7a7a7a}}
body{font:14px/1.45 system-ui,sans-serif;color:var(--fg);background:var(--bg);margin:0 auto;max-width:72rem;
padding:0 1rem 3rem}
h1{font-size:1.4rem;margin:1rem 0 .2rem}h2{font-size:1.1rem;display:inline}
h3{font-size:.95rem;margin:.8rem 0 .3rem}a{color:var(--reward)}
#filter{color:var(--fg);background:var(--panel);border:1px solid var(--muted);border-radius:4px}
.about{color:var(--muted);margin:.2rem 0}
table{border-collapse:collapse;margin:.3rem 0}td,th{padding:.15rem .5rem;text-align:right;
border-bottom:1px solid var(--grid)}td:first-child,th:first-child{text-align:left}
th{font-weight:600}
details.agent{border:1px solid var(--grid);border-radius:6px;margin:.6rem 0;padding:.4rem .8rem;
content-visibility:auto;contain-intrinsic-size:auto 40rem}summary{cursor:pointer}
svg.bar{display:block;width:100%;height:1.1rem;border-radius:3px;background:var(--panel);margin:.3rem 0}
svg.bar rect{stroke:none}
.legend,figcaption{display:flex;flex-wrap:wrap;gap:.2rem 1rem;color:var(--muted);font-size:.85rem}
.key::before{content:"";display:inline-block;width:.8rem;height:.8rem;margin-right:.3rem;
vertical-align:-.1rem;background:currentColor;border-radius:2px}
.key.measured::before{background:var(--measured)}.key.masked::before{background:var(--masked)}
.key.unscored::before{background:var(--unscored)}.key.failed::before{background:var(--failed)}
.key.omitted::before{background:var(--omitted)}.key.unknown::before{background:var(--unknown)}
.key.reward::before{background:var(--reward)}.key.unmasked::before{background:var(--unmasked)}
svg.bar .measured{fill:var(--measured)}svg.bar .masked{fill:var(--masked)}
svg.bar .unscored{fill:var(--unscored)}svg.bar .failed{fill:var(--failed)}
svg.bar .omitted{fill:var(--omitted)}svg.bar .unknown{fill:var(--unknown)}
figure{margin:.3rem 0}.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(22rem,1fr));gap:.5rem}
svg.chart{width:100%;height:auto}svg .grid{stroke:var(--grid)}svg .axis{stroke:var(--muted)}
svg text{fill:var(--muted);font-size:11px}svg .axis-label{font-size:12px}
svg polyline{fill:none!important;stroke-width:2}svg circle{stroke:none}
svg .reward{stroke:var(--reward);fill:var(--reward)}
svg .unmasked{stroke:var(--unmasked);fill:var(--unmasked);stroke-dasharray:6 3}
svg .masked{stroke:var(--masked);fill:var(--masked);stroke-dasharray:6 3}
svg .failed{stroke:var(--failed);fill:var(--failed)}
svg .omitted{stroke:var(--omitted);fill:var(--omitted);stroke-dasharray:2 3}
svg .unscored{stroke:var(--unscored);fill:var(--unscored);stroke-dasharray:10 3 2 3}
.grid2{display:grid;grid-template-columns:repeat(auto-fit,minmax(16rem,1fr));gap:0 1.5rem}
#filter{font:inherit;padding:.3rem .5rem;width:18rem;max-width:100%;margin:.4rem 0}
.none{color:var(--muted)}td.when{text-align:left;max-width:40rem}
"""

_SCRIPT = """
(function(){
var box=document.getElementById("filter");
function apply(){var q=box.value.toLowerCase();
document.querySelectorAll("[data-agent]").forEach(function(e){
e.hidden=q!==""&&e.dataset.agent.toLowerCase().indexOf(q)<0;});}
box.addEventListener("input",apply);apply();
var every=Number(document.body.dataset.refresh||0);if(!every)return;
var most=Number(document.body.dataset.maxOpen||0),timer=null,busy=false,again=false;
function opened(){var names=[];document.querySelectorAll("details.agent[open]").forEach(function(e){
names.push(e.dataset.agent);});return names;}
function update(){clearTimeout(timer);if(busy){again=true;return;}busy=true;again=false;
var query="?part=main";opened().slice(0,most).forEach(function(name){
query+="&open="+encodeURIComponent(name);});
fetch(query,{cache:"no-store",credentials:"same-origin"}).then(function(r){
if(!r.ok)throw new Error(r.status);return r.text();}).then(function(html){
var open=new Set(opened()),main=document.getElementById("content");main.innerHTML=html;
main.querySelectorAll("details.agent").forEach(function(e){e.open=open.has(e.dataset.agent);});
apply();document.body.dataset.updated=String(Date.now());}).catch(function(){}).finally(function(){
busy=false;if(again){update();}else{timer=setTimeout(update,every*1000);}});}
document.addEventListener("click",function(e){
var s=e.target.closest&&e.target.closest("details.agent>summary"),d=s&&s.parentElement;
if(d&&!d.open&&d.querySelector(".charts.pending"))setTimeout(update,0);});
timer=setTimeout(update,every*1000);})();
"""


def _hash_source(text: str) -> str:
    """The CSP source that allows an inline element whose text is exactly ``text``."""
    return f"'sha256-{base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()}'"


# Hashes, not 'unsafe-inline', for both: the style is one constant <style> element, and nothing carries a
# style= attribute (the coverage bar is SVG whose widths are geometry), so no injected style or script
# applies; 'unsafe-inline' for styles would let injected markup restyle the page to mislead its reader.
_POLICY = (
    f"default-src 'none'; style-src {_hash_source(_STYLE)}; script-src {_hash_source(_SCRIPT)}; "
    "base-uri 'none'; form-action 'none'"
)


def page_policy(*, updates: bool) -> str:
    """The Content-Security-Policy of a page: its own style and script only, nothing loaded from anywhere;
    a page that ``updates`` itself (the live page) may fetch from its own origin, the report nothing at all
    (opened from disk, it cannot send its numbers anywhere)."""
    return f"{_POLICY}; connect-src 'self'" if updates else _POLICY


class Drawings:
    """Each agent's charts as last drawn, shown again by the pages read within ``fresh_for`` seconds after
    the read that drew them: an agent's charts are drawn at most once per ``fresh_for``, whatever sets of
    sections readers ask for and however often. One drawing is kept per agent charted (a few kilobytes).
    """

    def __init__(self, fresh_for: float) -> None:
        self._fresh_for = fresh_for
        self._drawn: dict[str, tuple[float, str]] = {}

    def get(self, agent: str, at: float, draw: Callable[[], str]) -> str:
        """The charts of ``agent`` for a read made at ``at``: those kept if drawn at most ``fresh_for``
        seconds before it (never after it: they would show what the read has not), else ``draw()``'s."""
        kept = self._drawn.get(agent)
        if kept is not None and 0 <= at - kept[0] < self._fresh_for:
            return kept[1]
        drawing = draw()
        if kept is None or at >= kept[0]:  # a race of two endpoints' reads keeps the later drawing
            self._drawn[agent] = (at, drawing)
        return drawing


class Page:
    """One read of a run as a page: the report's numbers, the rollouts in flight and each agent's section,
    made once; the whole page or its content for any set of open sections is assembled from them.

    The ten worst agents' sections are open and charted; another agent's charts are drawn when it is
    ``charted``. Each agent's section is made at most once with its charts and once without, whatever sets
    are asked for, so a read costs at most one drawing of each agent's charts. Sections are kept as they
    are made (a race of two threads makes one twice, the same).

    Args:
        report: ``build_report``'s numbers; ``points`` each agent's points for its charts.
        title: the page's; ``refresh``: seconds between two updates of the content (0: never).
        in_flight: ``GET /rollouts``' listing, if shown; ``alerts``: the shipped alerts, listed with when
            each fires.
        drawings: charts kept across reads (the live page's), this read made at ``at`` seconds of the clock
            they are kept by; without them, each agent's are drawn for this read.
        reward_ranges: the agents' declared reward ranges, which their reward axes span; an agent without
            one has an axis from 0 (or below, for a negative reward) to the run's best mean reward.
    """

    def __init__(
        self,
        report: Mapping[str, Any],
        points: Callable[[str], Sequence[Point]],
        *,
        title: str,
        x_axis: XAxis,
        in_flight: Mapping[str, Any] | None = None,
        refresh: int = 0,
        alerts: Sequence[Mapping[str, Any]] = (),
        drawings: Drawings | None = None,
        at: float = 0.0,
        reward_ranges: Mapping[str, tuple[float, float]] | None = None,
    ) -> None:
        self._report = report
        self._reward_ranges = reward_ranges or {}
        self._best = _best_reward(report)
        self._drawings = drawings
        self._at = at
        self._points = points
        self._title = title
        self._x_axis: XAxis = x_axis
        self._refresh = refresh
        self._rows = sorted(report["agents"], key=_worst_first)
        self._open = {row["agent"] for row in self._rows[:OPEN_AGENTS]}
        self._agents = frozenset(row["agent"] for row in self._rows)
        # "<" escaped inside the JSON: no agent name can close the script element it sits in.
        data = json.dumps(report, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")
        opening = [f'<script type="application/json" id="report">{data}</script>', _overview(self._rows)]
        if in_flight is not None and in_flight.get("tracked", True):  # a run read from files tracks none
            opening.append(_in_flight(in_flight))
        if not self._rows:
            opening.append('<p class="none">No rollout counted yet.</p>')
        self._opening = "".join(opening)
        self._closing = (
            _run_totals(report) + _notable(report.get("notable")) + (_alerts(alerts) if alerts else "")
        )
        self._sections: dict[tuple[str, bool], str] = {}

    def charted(self, named: Iterable[str]) -> frozenset[str]:
        """The agents among the first ``MAX_OPEN`` of ``named`` whose charts are not drawn unless asked for:
        the worst are always drawn, and a name no agent has is dropped, so every set of such names asks for
        the same page."""
        return frozenset(itertools.islice(named, MAX_OPEN)).intersection(self._agents).difference(self._open)

    def main(self, charted: Container[str] | None = None) -> str:
        """The page's content (what the live page fetches with ``?part=main``): the report's JSON, the table
        of agents worst first, the rollouts in flight, each agent's section, then the run's totals. The open
        sections (the ``OPEN_AGENTS`` worst) have their charts, and so have the ``charted`` agents (``None``:
        every agent); the others say their charts come when they are opened."""
        parts = [self._opening]
        for row in self._rows:
            name = row["agent"]
            parts.append(self._section(row, charted is None or name in self._open or name in charted))
        parts.append(self._closing)
        return "".join(parts)

    def document(self, charted: Container[str] | None = None) -> str:
        """The whole page, its content ``main(charted)``, under its policy (``page_policy``)."""
        x_note = _X_NOTES[self._x_axis]
        if self._x_axis == "rollouts" and (unplaced := self._report.get("rows_without_identity")):
            x_note += (
                f" Rows without an identity ({_number(unplaced)}) come after the others, in the order read."
            )
        return (
            '<!doctype html><html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{page_policy(updates=self._refresh > 0)}">'
            '<meta name="viewport" content="width=device-width,initial-scale=1">'
            f"<title>{escape(self._title)} - rollout-telemetry</title><style>{_STYLE}</style></head>"
            f'<body data-refresh="{self._refresh}" data-max-open="{MAX_OPEN}"><header>'
            f'<h1>{escape(self._title)}</h1><p class="about">{x_note}</p>'
            '<input id="filter" type="search" placeholder="filter agents by name" aria-label="filter agents">'
            f'</header><main id="content">{self.main(charted)}</main>'
            f"<script>{_SCRIPT}</script></body></html>"
        )

    def render(self, part: str, named: Sequence[str]) -> bytes:
        """What the endpoint sends for ``?part=`` and the ``?open=`` names: the content (``main``) or the
        whole page, the agents ``named`` charted (``charted``)."""
        charted = self.charted(named)
        return (self.main(charted) if part == "main" else self.document(charted)).encode()

    def _section(self, row: Mapping[str, Any], drawn: bool) -> str:
        name = row["agent"]
        section = self._sections.get((name, drawn))
        if section is None:
            charts = self._charts(name) if drawn else None
            section = _agent(row, self._report, charts, open_=name in self._open)
            self._sections[name, drawn] = section
        return section

    def _charts(self, name: str) -> str:
        def draw() -> str:
            span = self._reward_ranges.get(name, (min(0.0, self._best), max(0.0, self._best)))
            return _charts(self._points(name), self._x_axis, name, span)

        return draw() if self._drawings is None else self._drawings.get(name, self._at, draw)


def render_page(
    report: Mapping[str, Any],
    points: Callable[[str], Sequence[Point]],
    *,
    title: str,
    x_axis: XAxis,
) -> str:
    """The report's page (``report --format html``): ``report``'s numbers and the charts of every agent's
    ``points``; it never updates itself."""
    return Page(report, points, title=title, x_axis=x_axis).document()


def plain_document(title: str, body: str) -> str:
    """A page in the report's style and policy holding ``body`` (already escaped HTML) under ``title``."""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{page_policy(updates=False)}">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{escape(title)} - rollout-telemetry</title><style>{_STYLE}</style></head>"
        f"<body><header><h1>{escape(title)}</h1></header><main>{body}</main></body></html>"
    )


def _alerts(alerts: Sequence[Mapping[str, Any]]) -> str:
    rows = "".join(
        f"<tr><td>{escape(alert['alert'])}</td><td>{escape(alert['severity'])}</td>"
        f'<td class="when">{escape(alert["when"])}</td></tr>'
        for alert in alerts
    )
    return (
        '<details class="alerts"><summary><h3>Alert conditions</h3></summary><p class="about">The alerts '
        "Prometheus evaluates with the rules this package ships (<code>rollout-telemetry monitoring</code> "
        "writes them), and when each fires: the series above are what they read.</p>"
        f"<table><tr><th>alert</th><th>severity</th><th>fires when</th></tr>{rows}</table></details>"
    )


def _lost_share(row: Mapping[str, Any]) -> float:
    """The share of an agent's outcomes (and expected rollouts not seen) that is not a measurement."""
    events, rollouts = row["events"], row["rollouts"]
    unknown = rollouts.get("unknown") or 0
    total = sum(events[d] for d in _DISPOSITIONS) + unknown
    return (sum(events[d] for d in _LOST) + unknown) / total if total else 0.0


def _worst_first(row: Mapping[str, Any]) -> tuple[float, str]:
    return (-_lost_share(row), row["agent"])


def _number(value: object, digits: int = 3) -> str:
    """A number as the page shows it, escaped; total: whatever a hook handed us renders (a string or a bool
    as its text, an integer too long to print by its size, NaN and inf as ``-``), never an exception."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) < _LONGEST:
        return f"{value:,}"
    return escape(shown(value), quote=True)


def _text(value: object) -> str:
    """A text as the page shows it, escaped for an element or an attribute; total, as ``_number``."""
    return escape(value if isinstance(value, str) else "" if value is None else shown(value), quote=True)


def _cell(key: str, value: object, digits: int = 3) -> str:
    """A table cell the browser test reads: ``data-k`` names the report's key, ``data-v`` its exact value."""
    exact = "" if value is None else escape(shown(value), quote=True)
    return f'<td data-k="{escape(key, quote=True)}" data-v="{exact}">{_number(value, digits)}</td>'


def _interval_cell(ci: Mapping[str, Any] | None) -> str:
    """The mean reward's interval: its bounds, method and tasks shown, the exact bounds in ``data-v``."""
    exact = "" if ci is None else f"{shown(ci['low'])},{shown(ci['high'])}"
    shown_text = escape(interval_text(ci))
    return f'<td data-k="mean_reward_ci95" data-v="{escape(exact, quote=True)}">{shown_text}</td>'


def _overview(rows: Sequence[Mapping[str, Any]]) -> str:
    intervals = any("mean_reward_ci95" in row["events"] for row in rows)  # a run's files read: report's page
    head = (
        "<tr><th>agent</th><th>expected</th>"
        + "".join(f"<th>{d}</th>" for d in _DISPOSITIONS)
        + "<th>unknown</th><th>reward</th><th>reward_unmasked</th>"
        + ("<th>reward 95% CI</th>" if intervals else "")
        + "</tr>"
    )
    body = []
    for row in rows:
        events, rollouts = row["events"], row["rollouts"]
        name = escape(row["agent"])
        body.append(
            f'<tr data-agent="{name}"><td><a href="#agent-{_anchor(row["agent"])}">{name}</a></td>'
            + _cell("expected", rollouts["expected"])
            + "".join(_cell(d, events[d]) for d in _DISPOSITIONS)
            + _cell("unknown", rollouts["unknown"])
            + _cell("mean_reward", events["mean_reward"])
            + _cell("mean_reward_unmasked", events["mean_reward_unmasked"])
            + (_interval_cell(events.get("mean_reward_ci95")) if intervals else "")
            + "</tr>"
        )
    return (
        '<h3>Agents, worst first</h3><p class="about">Outcomes are rows read (events); expected and unknown '
        "are rollouts. Worst first: the largest share of outcomes and expected rollouts masked, unscored, "
        "failed, omitted or not seen; reward_unmasked is the mean of the measured rewards (the mean itself "
        "while nothing was masked, failed or omitted).</p>"
        f'<table class="agents">{head}{"".join(body)}</table>'
    )


def _anchor(name: str) -> str:
    """An id for an agent's section: its name's characters as code points, so any name gives a valid id of
    its own."""
    return "-".join(str(ord(char)) for char in name)


def _in_flight(listing: Mapping[str, Any]) -> str:
    records = listing.get("rollouts", [])[:IN_FLIGHT_SHOWN]
    head = (
        f'<h3>In flight now: <span data-k="in_flight">{_number(listing.get("in_flight", 0))}</span></h3>'
        f'<p class="about">The oldest {len(records):,}; a rollout is stalled past its stall bound.</p>'
    )
    if not records:
        return head
    rows = "".join(
        f'<tr data-agent="{_text(r.get("agent"))}"><td>{_text(r.get("agent"))}</td>'
        f"<td>{_number(r.get('task_index'))}</td><td>{_number(r.get('rollout_index'))}</td>"
        f"<td>{_text(r.get('stage'))}</td><td>{_text(r.get('state'))}</td>"
        f"<td>{_number(r.get('age_seconds'), 1)}</td><td>{'yes' if r.get('stalled') else 'no'}</td></tr>"
        for r in records
    )
    return (
        f"{head}<table><tr><th>agent</th><th>task</th><th>rollout</th><th>stage</th><th>state</th>"
        f"<th>age (s)</th><th>stalled</th></tr>{rows}</table>"
    )


def _agent(row: Mapping[str, Any], report: Mapping[str, Any], charts: str | None, *, open_: bool) -> str:
    name = row["agent"]
    events, rollouts = row["events"], row["rollouts"]
    shown = escape(name)
    parts = [
        f'<details class="agent" data-agent="{shown}" id="agent-{_anchor(name)}"{" open" if open_ else ""}>'
        f"<summary><h2>{shown}</h2></summary>"
    ]
    parts.append(_coverage(rollouts, events))
    if charts is None:  # drawn when the section is opened (the live page asks again, naming it)
        parts.append('<div class="charts pending"><p class="none">The charts come when this opens.</p></div>')
    else:
        parts.append(f'<div class="charts">{charts}</div>')
    parts.append('<div class="grid2">')
    parts.append(_failure_kinds(events))
    signal = report.get("training_signal", {}).get(name, {})
    parts.append(_truncation_and_tokens(events, signal))
    parts.append(_groups(report.get("groups", {}).get(name), signal))
    parts.append("</div></details>")
    return "".join(parts)


def _coverage(rollouts: Mapping[str, Any], events: Mapping[str, Any]) -> str:
    """The coverage bar: rollouts of the expected ones when they are known, else the outcomes read."""
    known = rollouts["expected"] is not None
    counts = rollouts if known else events
    segments = [Segment(d, int(counts[d]), d) for d in _DISPOSITIONS]
    if known:
        segments.append(Segment("unknown", int(rollouts["unknown"] or 0), "unknown"))
    total = int(rollouts["expected"]) if known else sum(segment.count for segment in segments)
    what = f"of {total:,} rollouts expected" if known else f"of {total:,} outcomes read (expected not known)"
    return f"<h3>Coverage, {what}</h3>{bar(segments, total)}"


def reward_ranges(account: AccountSnapshot) -> dict[str, tuple[float, float]]:
    """The agents' declared reward ranges (``expect(reward_range=...)``): the first and last bounds of their
    reward histograms. Agents without one are left out."""
    return {
        agent.agent: (bounds[0], bounds[-1])
        for agent in account.agents
        if (bounds := agent._reward_bounds) is not None
    }


def _best_reward(report: Mapping[str, Any]) -> float:
    """The run's best mean reward over its agents (masked included or not), or 0 before any: the reward axes
    of agents without a declared range reach it, so an agent's chart is comparable with the best one's."""
    means = (
        row["events"].get(key) for row in report["agents"] for key in ("mean_reward", "mean_reward_unmasked")
    )
    return max(
        (float(mean) for mean in means if isinstance(mean, float | int) and math.isfinite(mean)), default=0.0
    )


def _charts(points: Sequence[Point], x_axis: XAxis, name: str, reward_span: tuple[float, float]) -> str:
    at = {field: index for index, field in enumerate(POINT_FIELDS)}
    points = _thinned(points)
    x_label = _X_LABELS[x_axis]

    def series(field: str) -> list[tuple[float, float]]:
        return [(point[0], point[at[field]]) for point in points]

    rewards = line_chart(
        [
            Line("reward (masked included)", series("reward"), "reward"),
            Line("reward_unmasked (measured only)", series("reward_unmasked"), "unmasked"),
        ],
        x_label=x_label,
        y_label="mean reward (reward units)",
        title=f"{name}: mean rewards along the run",
        y_span=reward_span,
    )
    lost = line_chart(
        [Line(d, series(d), d) for d in _LOST],
        x_label=x_label,
        y_label="outcomes so far (rollouts)",
        title=f"{name}: outcomes lost along the run",
        counts=True,
    )
    return (
        f"<div><h3>Mean rewards along the run</h3>{rewards}</div>"
        f"<div><h3>Masked, unscored, failed, omitted along the run</h3>{lost}</div>"
    )


def _thinned(points: Sequence[Point]) -> Sequence[Point]:
    """At most about ``CHART_POINTS`` of ``points``, evenly spread, the first and the last kept."""
    step = -(-len(points) // CHART_POINTS)
    if step <= 1:
        return points
    return [*points[:-1:step], points[-1]]


def _table(title: str, header: tuple[str, str], rows: Sequence[tuple[str, str]], empty: str) -> str:
    if not rows:
        return f'<div><h3>{title}</h3><p class="none">{empty}</p></div>'
    body = "".join(f"<tr><td>{escape(label)}</td>{cell}</tr>" for label, cell in rows)
    return (
        f"<div><h3>{title}</h3><table><tr><th>{header[0]}</th><th>{header[1]}</th></tr>{body}</table></div>"
    )


def _failure_kinds(events: Mapping[str, Any]) -> str:
    kinds = events.get("top_failure_kinds", {})
    rows = [(kind, _cell(f"kind:{kind}", count)) for kind, count in kinds.items()]
    return _table("Failure kinds (the most frequent)", ("disposition:kind", "rows"), rows, "None.")


def _truncation_and_tokens(events: Mapping[str, Any], signal: Mapping[str, Any]) -> str:
    rows = [
        (cause, _cell(f"truncated:{cause}", count)) for cause, count in signal.get("truncated", {}).items()
    ]
    rows += [
        ("share of rows truncated", _cell("truncated_share", events.get("truncated_share"))),
        ("mean input tokens (tokens)", _cell("mean_input_tokens", events.get("mean_input_tokens"), 1)),
        ("mean output tokens (tokens)", _cell("mean_output_tokens", events.get("mean_output_tokens"), 1)),
    ]
    return _table("Truncation by cause, and tokens", ("", "value"), rows, "")


def _groups(groups: Mapping[str, int] | None, signal: Mapping[str, Any]) -> str:
    rows = [(state, _cell(f"group:{state}", count)) for state, count in (groups or {}).items()]
    for key, label in (("groups_contaminated", "contaminated"), ("groups_uniform", "uniform")):
        rows += [(f"{label}: {k}", _cell(f"{key}:{k}", v)) for k, v in signal.get(key, {}).items()]
    rows += [(f"health: {k}", _cell(f"health:{k}", v)) for k, v in signal.get("health", {}).items()]
    if "tasks_unhealthy" in signal:
        rows.append(("tasks unhealthy", _cell("tasks_unhealthy", signal["tasks_unhealthy"])))
    return _table(
        "Groups and the training signal", ("", "groups"), rows, "No group of more than one rollout."
    )


def _run_totals(report: Mapping[str, Any]) -> str:
    rows = [(key, _cell(key, value)) for key, value in report.get("gym_coverage", {}).items()]
    rows += [
        (f"rejected: {why}", _cell(f"rejected:{why}", n)) for why, n in report.get("rejected", {}).items()
    ]
    if report.get("rows_without_identity"):
        rows.append(
            ("rows without identity", _cell("rows_without_identity", report["rows_without_identity"]))
        )
    return _table("The run", ("", "value"), rows, "Nothing rejected; no expected work declared.")


_NOTABLE_TITLES = {
    "failed": "Failed",
    "masked": "Masked",
    "slowest": "Slowest",
    "longest_output": "Longest output",
}
_NOTABLE_COLUMNS = (
    "agent",
    "task",
    "rollout",
    "attempt",
    "disposition",
    "kind",
    "stage",
    "seconds",
    "output tokens",
)


def _notable(notable: Mapping[str, Sequence[Mapping[str, Any]]] | None) -> str:
    """The rollouts worth opening (a report read from files has them; the live page has none), each with
    its file and line."""
    if not notable:
        return ""
    parts = []
    for category, rollouts in notable.items():
        title = escape(_NOTABLE_TITLES.get(category, category))
        if not rollouts:
            parts.append(f'<div><h3>{title}</h3><p class="none">None.</p></div>')
            continue
        reasons = any("failure_reason" in rollout for rollout in rollouts)
        header = (*_NOTABLE_COLUMNS, "file:line", *(("failure reason",) if reasons else ()))
        rows = []
        for rollout in rollouts:
            cells = [
                _text(rollout.get("agent")),
                *(_number(rollout.get(key)) for key in ("task_index", "rollout_index", "attempt")),
                _text(rollout.get("disposition")),
                _text(rollout.get("failure_kind")),
                _text(rollout.get("stage")),
                _number(rollout.get("duration_s")),
                _number(rollout.get("output_tokens")),
                f"{_text(rollout.get('file'))}:{_text(rollout.get('line'))}",
            ]
            if reasons:
                cells.append(_text(rollout.get("failure_reason")))
            rows.append("<tr>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>")
        head = "".join(f"<th>{column}</th>" for column in header)
        parts.append(f"<div><h3>{title}</h3><table><tr>{head}</tr>{''.join(rows)}</table></div>")
    return '<section class="notable"><h2>Rollouts worth opening</h2>' + "".join(parts) + "</section>"

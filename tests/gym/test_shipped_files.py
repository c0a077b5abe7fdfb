"""``report`` on every rollout file NeMo Gym 0.7.0 ships: exit 0 without any flag, its figures computed anew.

The released wheel holds about 220 ``example_rollouts*.jsonl`` beside their materialized inputs (and a few
reward profiles); ``scripts/fetch-gym-wheel`` downloads it once into the cache (never the repository). Each
main file's figures are worked out here from its rows by the rules the report documents, written out again
(the agent a row belongs to, what a row says of reward, truncation and tokens, what was expected): not by
the code under test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from rollout_telemetry._cli.main import main

# The first test fetches the wheel (45 MB) and every test reports up to 220 files.
pytestmark = pytest.mark.timeout(300)

SCRIPT = Path(__file__).parents[2] / "scripts" / "fetch-gym-wheel"
SIDECARS = ("_materialized_inputs.jsonl", "_failures.jsonl", "_reward_profiling.jsonl")


@pytest.fixture(scope="module")
def shipped() -> Path:
    """The folder of the wheel's JSONL files, fetched once into the cache; in CI a failure to fetch fails."""
    fetched = subprocess.run(
        ["bash", str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "PYTHON": sys.executable},
    )
    if fetched.returncode:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"NeMo Gym's wheel is needed in CI: {fetched.stderr}")
        pytest.skip(f"NeMo Gym's wheel cannot be fetched here: {fetched.stderr.strip()[-300:]}")
    return Path(fetched.stdout.strip())


def _objects(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a file's lines (a line that is no object left out)."""
    rows = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def _requests_only(path: Path) -> bool:
    """Whether a file's rows are requests alone (``responses_create_params``, no reward, response or failure):
    two of Gym 0.7.0's ``example_rollouts.jsonl`` are copies of their tasks."""
    rows = _objects(path)
    written = ("reward", "response", "_ng_result_type")
    return all(not any(key in row for key in written) for row in rows) and any(
        "responses_create_params" in row for row in rows
    )


def _named(row: dict[str, Any]) -> str | None:
    ref = row.get("agent_ref")
    return (ref.get("name") if isinstance(ref, dict) else None) or row.get("_ng_environment_server") or None


def _identity(row: dict[str, Any]) -> tuple[int, int] | None:
    if "_ng_task_index" not in row and "_ng_rollout_index" not in row:
        return None
    return row["_ng_task_index"], row["_ng_rollout_index"]


def _figures(main_file: Path) -> tuple[dict[str, dict[str, Any]], int]:
    """Per agent, the report's figures as the rows give them; and the duplicate rows, counted once."""
    stem = main_file.name.removesuffix(".jsonl")
    inputs_file = main_file.with_name(f"{stem}_materialized_inputs.jsonl")
    inputs = _objects(inputs_file) if inputs_file.exists() else []
    expected_of = {_identity(row): _named(row) or stem for row in inputs}
    input_agents = set(expected_of.values())
    rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    attempts: set[tuple[Any, ...]] = set()
    duplicates = 0
    for row in _objects(main_file):
        if (identity := _identity(row)) is not None:  # the same rollout and attempt again: counted once
            attempt = (*identity, row.get("_ng_attempt_index") or 0)
            duplicates += attempt in attempts
            if attempt in attempts:
                continue
            attempts.add(attempt)
        # Its own name; else its input row's; else the inputs' one agent; else the file's stem.
        agent = _named(row) or expected_of.get(_identity(row))
        if agent is None:
            agent = next(iter(input_agents)) if len(input_agents) == 1 else stem
        rows[agent].append(row)
    figures = {}
    for agent in sorted(set(rows) | input_agents):
        mine = rows.get(agent, [])
        rewards = [r["reward"] for r in mine if type(r.get("reward")) in (int, float)]
        responses = [r["response"] for r in mine if isinstance(r.get("response"), dict)]
        usage = [response["usage"] for response in responses if isinstance(response.get("usage"), dict)]
        truncated = sum(
            1
            for response in responses
            if (response.get("incomplete_details") or {}).get("reason") is not None
            or response.get("status") == "incomplete"
        )
        wanted = {identity for identity, owner in expected_of.items() if owner == agent}
        seen = {_identity(r) for r in mine} - {None}
        unidentified = sum(1 for r in mine if _identity(r) is None)
        open_ = len(wanted - seen)
        filled = min(unidentified, open_)
        figures[agent] = {
            "rows": len(mine),
            "masked": sum(1 for r in mine if r.get("mask_sample") is True),
            "mean_reward": sum(rewards) / len(rewards) if rewards else None,
            "truncated_share": round(truncated / len(mine), 4) if mine else None,
            "mean_input_tokens": round(sum(u.get("input_tokens") or 0 for u in usage) / len(usage), 1)
            if usage
            else None,
            "mean_output_tokens": round(sum(u.get("output_tokens") or 0 for u in usage) / len(usage), 1)
            if usage
            else None,
            "expected": len(wanted | seen) + unidentified - filled if inputs else None,
            "unknown": open_ - filled if inputs else None,
        }
    return figures, duplicates


def _reported(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    figures = {}
    for agent in report["agents"]:
        events, rollouts = agent["events"], agent["rollouts"]
        figures[agent["agent"]] = {
            "rows": sum(events[d] for d in ("measured", "masked", "unscored", "failed", "omitted")),
            "masked": events["masked"],
            "mean_reward": events["mean_reward"],
            "truncated_share": events["truncated_share"],
            "mean_input_tokens": events["mean_input_tokens"],
            "mean_output_tokens": events["mean_output_tokens"],
            "expected": rollouts["expected"],
            "unknown": rollouts["unknown"],
        }
    return figures


def _main_files(folder: Path) -> list[Path]:
    return sorted(
        path for path in folder.rglob("example_rollouts*.jsonl") if not path.name.endswith(SIDECARS)
    )


def test_the_wheel_ships_about_220_rollout_files(shipped: Path) -> None:
    """The cache holds what the release ships: about 220 example rollout files with their inputs."""
    assert len(list(shipped.rglob("example_rollouts*.jsonl"))) >= 200
    assert len(_main_files(shipped)) >= 180


def test_report_exits_0_on_every_rollout_file_with_figures_from_its_rows(
    shipped: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every file of rollout rows: exit 0 without a flag, and per agent the row count, masked rows, mean
    reward, truncated share, mean tokens, expected and unknown rollouts equal what its rows say; a duplicate
    row (the same rollout and attempt again) is counted once, and no other row is rejected."""
    checked = 0
    for main_file in _main_files(shipped):
        if not _objects(main_file) or _requests_only(main_file):
            continue  # a placeholder with no row, or a copy of the tasks (the next test)
        assert main(["report", str(main_file), "--format", "json"]) == 0, main_file
        report = json.loads(capsys.readouterr().out)
        reported, (figures, duplicates) = _reported(report), _figures(main_file)
        assert reported.keys() == figures.keys(), main_file
        for agent, expected in figures.items():
            got = reported[agent]
            assert got == {**expected, "mean_reward": got["mean_reward"]}, (main_file, agent)
            assert got["mean_reward"] == pytest.approx(expected["mean_reward"], abs=1e-9), (main_file, agent)
        assert report["rejected"] == ({"duplicate_rollout": duplicates} if duplicates else {}), main_file
        checked += 1
    assert checked >= 180


def test_the_files_that_hold_no_rollout_are_said_in_one_line_each(shipped: Path) -> None:
    """One real process over the whole release (a recursive glob): a report for each rollout file, the inputs
    and reward profiles read with their main file, a placeholder (no JSON object) and a copy of the tasks
    (requests, no reward: reported as unscored rows before) each said in one line (exit 2), and one line for
    each file whose rows name no agent."""
    pattern = str(shipped / "**" / "example_rollouts*.jsonl")
    result = subprocess.run(
        [sys.executable, "-m", "rollout_telemetry", "report", pattern, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert "Traceback" not in result.stderr
    tasks = [path for path in _main_files(shipped) if _objects(path) and _requests_only(path)]
    with_rows = [path for path in _main_files(shipped) if _objects(path) and path not in tasks]
    without = [path for path in _main_files(shipped) if not _objects(path)]
    assert len(tasks) == 2  # genrm_compare's and multichallenge's, in 0.7.0
    assert sorted(report["file"] for report in json.loads(result.stdout)) == sorted(map(str, with_rows))
    lines = [line for line in result.stderr.splitlines() if "WARNING" not in line]
    notes = [line for line in lines if line.endswith("--agent NAME names them")]
    stems = {path: path.name.removesuffix(".jsonl") for path in with_rows}  # rows naming none shown as
    unnamed = {
        path: agents[stems[path]]["rows"]
        for path in with_rows
        if stems[path] in (agents := _figures(path)[0])
    }
    assert sorted(notes) == sorted(
        f"rollout-telemetry report: {count} rows of {path} name no agent (no agent_ref.name, "
        f"_ng_environment_server or materialized inputs row): shown as '{stems[path]}'; "
        "--agent NAME names them"
        for path, count in unnamed.items()
    )
    said = [line for line in lines if line not in notes]
    placeholders = [
        f"rollout-telemetry report: {path} is not JSON Lines: no line is a JSON object; line 1 is "
        f"{path.read_text().splitlines()[0]!r}"
        for path in without
    ]
    copies = [
        f"rollout-telemetry report: {path} holds NeMo Gym's tasks (requests, no reward): give the run's "
        "output, the --output of `gym eval run` (out/rollouts.jsonl, say)"
        for path in tasks
    ]
    assert sorted(said) == sorted(placeholders + copies)
    assert result.returncode == 2

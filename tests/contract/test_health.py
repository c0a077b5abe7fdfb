"""Rollout health: NeMo Gym 0.7.0's single-rollout checks decided live, counted by check and by task."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rollout_telemetry import RolloutTelemetry
from rollout_telemetry._contract.health import findings
from rollout_telemetry._sources.follow import RunFiles
from tests.support import exposition, sample_names, samples, value


def _turn(answer: Any = None, reasoning: Any = None) -> dict[str, Any]:
    return {"turn_no": 1, "answer": answer, "reasoning_content": reasoning, "model_calls": []}


def _call(finish: str | None = "stop", response: Any = None, completion: int | None = 12) -> dict[str, Any]:
    return {
        "response": response if response is not None else {"output": [{"type": "message", "content": "hi"}]},
        "response_metadata": {"finish_reason": finish},
        "token_stats": {"completion_tokens": completion},
    }


def _trajectory(
    turns: list[dict[str, Any]] | None = None, calls: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {"turns": turns if turns is not None else [_turn("the answer")], "model_calls": calls or [_call()]}


HOLLOW = _trajectory([_turn("the answer"), _turn("   ", None)])


@pytest.mark.parametrize(
    ("trajectory", "expected"),
    [
        (_trajectory(), ()),
        (HOLLOW, ("agent_turn_hollow",)),
        (_trajectory([_turn(None, "thinking it over")]), ()),  # reasoning is a message
        (_trajectory([_turn([{"type": "output_text", "text": ""}])]), ("agent_turn_hollow",)),
        (_trajectory([_turn([{"type": "function_call", "name": "search"}])]), ()),  # a tool call, no text
        (_trajectory([_turn({"tool_calls": [{"id": "1"}]})]), ()),
        (_trajectory(calls=[_call("length", {"output": []})]), ("model_call_runaway_generation",)),
        (_trajectory(calls=[_call("length")]), ()),  # cut at its limit, but with content
        (_trajectory(calls=[_call("stop", {"output": []})]), ()),  # empty, but not cut
        (
            _trajectory(calls=[_call("max_tokens", {"choices": [{"message": {"content": " "}}]})]),
            ("model_call_runaway_generation",),
        ),
        (_trajectory(calls=[_call(completion=0)]), ("model_call_zero_completion_tokens",)),
        (
            _trajectory([_turn("")], [_call("length", {"output": []}, 0)]),
            ("agent_turn_hollow", "model_call_runaway_generation", "model_call_zero_completion_tokens"),
        ),
        ({"turns": "not a list", "model_calls": [{"response_metadata": {"finish_reason": ["x"]}}]}, ()),
    ],
)
def test_findings(trajectory: dict[str, Any], expected: tuple[str, ...]) -> None:
    """Each check by its Gym definition; a rollout fails a check once, however many turns or calls fail it."""
    assert findings(trajectory) == expected


@pytest.mark.parametrize("trajectory", [None, "text", 3, ["a list"]])
def test_no_trajectory_is_not_evaluated(trajectory: object) -> None:
    """Without a trajectory object there is nothing to check: None, not a clean verdict."""
    assert findings(trajectory) is None


def test_a_trajectory_too_deep_to_read_is_not_evaluated() -> None:
    """A hostile nesting past the recursion limit is unread (None), never an exception."""
    answer: Any = "x"
    for _ in range(5000):
        answer = [answer]
    assert findings({"turns": [{"answer": answer}]}) is None


def _findings(telemetry: RolloutTelemetry) -> dict[str, float]:
    return {
        dict(labels)["check"]: v
        for (name, labels), v in samples(exposition(telemetry.registry)).items()
        if name == "rollout_health_findings_total"
    }


def test_hook_mode_counts_the_trajectory_of_a_rollout_with_its_identity(telemetry: RolloutTelemetry) -> None:
    """record() with an identity checks ng_trajectory: evaluated, findings by check; healthy adds none."""
    telemetry.record("math", {"reward": 1.0, "ng_trajectory": _trajectory()}, task_index=0, rollout_index=0)
    text = exposition(telemetry.registry)
    assert value(text, "rollout_health_evaluated_total", agent="math") == 1
    assert "rollout_health_findings_total" not in sample_names(text)
    telemetry.record("math", {"reward": 0.0, "ng_trajectory": HOLLOW}, task_index=0, rollout_index=1)
    telemetry.record("math", {"reward": 0.0}, task_index=0, rollout_index=2)  # no trajectory: not evaluated
    assert value(exposition(telemetry.registry), "rollout_health_evaluated_total", agent="math") == 2
    assert _findings(telemetry) == {
        "agent_turn_hollow": 1,
        "model_call_runaway_generation": 0,
        "model_call_zero_completion_tokens": 0,
    }


def test_no_trajectory_no_health_series(telemetry: RolloutTelemetry) -> None:
    """Rollouts without ng_trajectory publish no health family at all."""
    telemetry.record("math", {"reward": 1.0}, task_index=0, rollout_index=0)
    telemetry.record("math", {"reward": 1.0})
    assert not {n for n in sample_names(exposition(telemetry.registry)) if "health" in n}


def test_a_task_unhealthy_across_its_rollouts_counts_once(telemetry: RolloutTelemetry) -> None:
    """All three checked members unhealthy: one task; one healthy member, or one checked member: none."""
    telemetry.expect("math", group_size=3)
    members: dict[int, list[dict[str, Any] | None]] = {
        0: [HOLLOW, HOLLOW, HOLLOW],  # consistently unhealthy
        1: [HOLLOW, HOLLOW, _trajectory()],  # one healthy repeat
        2: [HOLLOW, None, None],  # one computable repeat: Gym needs two
        3: [HOLLOW, None, HOLLOW],  # two computable, both unhealthy
    }
    for task, trajectories in members.items():
        for index, trajectory in enumerate(trajectories):
            row: dict[str, Any] = {"reward": 0.0}
            if trajectory is not None:
                row["ng_trajectory"] = trajectory
            telemetry.record("math", row, task_index=task, rollout_index=index)
    assert value(exposition(telemetry.registry), "rollout_tasks_unhealthy_total", agent="math") == 2
    telemetry.record("math", {"reward": 0.0, "ng_trajectory": HOLLOW}, task_index=1, rollout_index=2)  # late
    assert value(exposition(telemetry.registry), "rollout_tasks_unhealthy_total", agent="math") == 2


def test_follow_mode_reads_the_trajectory_of_each_row(tmp_path: Path) -> None:
    """A followed Gym row's ng_trajectory is checked as in hook mode."""
    rows = [
        {"_ng_task_index": 0, "_ng_rollout_index": index, "agent_ref": {"name": "math"}, "reward": 0.0}
        | ({"ng_trajectory": trajectory} if trajectory is not None else {})
        for index, trajectory in enumerate([HOLLOW, _trajectory(calls=[_call(completion=0)]), None])
    ]
    main = tmp_path / "run.jsonl"
    main.write_text("".join(json.dumps(row) + "\n" for row in rows))
    telemetry = RolloutTelemetry()
    telemetry._run_follower(RunFiles(main)).poll()
    assert value(exposition(telemetry.registry), "rollout_health_evaluated_total", agent="math") == 2
    assert _findings(telemetry) == {
        "agent_turn_hollow": 1,
        "model_call_runaway_generation": 0,
        "model_call_zero_completion_tokens": 1,
    }


def test_the_lifecycle_checks_the_trajectory_of_a_rollout_with_its_identity(
    telemetry: RolloutTelemetry,
) -> None:
    """complete() reads ng_trajectory as record() does: with an identity only."""
    with telemetry.rollout("math", task_index=0, rollout_index=0) as rollout:
        rollout.complete({"reward": 0.0, "ng_trajectory": HOLLOW})
    with telemetry.rollout("math") as rollout:
        rollout.complete({"reward": 0.0, "ng_trajectory": HOLLOW})  # no identity: not evaluated
    assert value(exposition(telemetry.registry), "rollout_health_evaluated_total", agent="math") == 1
    assert _findings(telemetry)["agent_turn_hollow"] == 1

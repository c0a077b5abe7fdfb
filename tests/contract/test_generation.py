"""Tokens and truncation: read from the model response in the classification pass, counted by the account."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from rollout_telemetry import RolloutTelemetry
from rollout_telemetry._contract.generation import TRUNCATION_CAUSES, check_generation, truncation_cause
from rollout_telemetry._contract.outcome import classify
from rollout_telemetry._sources.follow import RunFiles
from rollout_telemetry.errors import OutcomeError
from tests.support import exposition, sample_names, samples, value

GYM_ROWS = Path(__file__).parents[1] / "fixtures" / "gym" / "run.jsonl"


def _usage(inp: Any = 120, out: Any = 40, cached: Any = 8, reasoning: Any = 16) -> dict[str, Any]:
    return {
        "input_tokens": inp,
        "output_tokens": out,
        "total_tokens": 160,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens_details": {"reasoning_tokens": reasoning},
    }


def _row(reward: float = 1.0, **response: Any) -> dict[str, Any]:
    return {"reward": reward, "response": {"output": [{"type": "message"}], **response}}


def test_no_response_or_no_usage_is_no_generation() -> None:
    """A verify response without a model response, or one without usage or truncation, carries none."""
    assert classify({"reward": 1.0})[4] is None
    assert classify(_row(status="completed", usage=None))[4] is None
    assert classify({"reward": 1.0, "response": "plain text"})[4] is None


def test_usage_is_read_with_its_details() -> None:
    """The four token types come from usage and its two details objects; an absent one is 0."""
    assert classify(_row(usage=_usage()))[4] == ((120, 40, 8, 16), None)
    assert classify(_row(usage={"output_tokens": 7}))[4] == ((0, 7, 0, 0), None)


def test_incomplete_reason_is_truncation_whatever_the_status() -> None:
    """A non-null incomplete_details.reason is truncation, with or without status; status alone is too."""
    details = {"reason": "max_output_tokens"}
    assert classify(_row(status="incomplete", incomplete_details=details))[4] == (None, "max_output_tokens")
    assert classify(_row(status=None, incomplete_details=details))[4] == (None, "max_output_tokens")
    assert classify(_row(status="incomplete"))[4] == (None, "")
    assert classify(_row(status="completed", incomplete_details=None))[4] is None


def test_objects_and_models_are_read_like_dicts() -> None:
    """A pydantic verify response whose response is a model is read the same as the dict."""

    class Usage(BaseModel):
        input_tokens: int
        output_tokens: int

    class ModelResponse(BaseModel):
        usage: Usage
        status: str

    class Verify(BaseModel):
        reward: float
        response: ModelResponse

    verify = Verify(
        reward=0.5, response=ModelResponse(usage=Usage(input_tokens=3, output_tokens=4), status="ok")
    )
    assert classify(verify)[4] == ((3, 4, 0, 0), None)


@pytest.mark.parametrize(
    ("response", "reason"),
    [
        ({"usage": _usage(out=-1)}, "invalid_output_tokens"),
        ({"usage": _usage(out=2.5)}, "invalid_output_tokens"),
        ({"usage": _usage(out=math.nan)}, "invalid_output_tokens"),
        ({"usage": _usage(inp="12")}, "invalid_input_tokens"),
        ({"usage": _usage(inp=True)}, "invalid_input_tokens"),
        ({"usage": _usage(cached=-3)}, "invalid_cached_tokens"),
        ({"usage": _usage(reasoning=1.0)}, "invalid_reasoning_tokens"),
        ({"usage": 12}, "invalid_usage"),
        ({"incomplete_details": {"reason": 3}}, "invalid_incomplete_reason"),
    ],
)
def test_bad_usage_is_rejected_by_field(telemetry: RolloutTelemetry, response: Any, reason: str) -> None:
    """A bad count or reason rejects the rollout under the field's reason; nothing is counted for it."""
    with pytest.raises(OutcomeError) as raised:
        check_generation(response)
    assert raised.value.reason == reason
    telemetry.record("math", {"reward": 1.0})
    telemetry.record("math", {"reward": 1.0, "response": response})
    text = exposition(telemetry.registry)
    assert value(text, "rollout_telemetry_rejected_total", reason=reason) == 1
    assert value(text, "rollout_completed_total", agent="math") == 1


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ({"reward": math.nan}, "reward"),
        ({"reward": 1.0, "mask_sample": "no"}, "mask_sample"),
        ({"reward": 1.0, "failure_kind": 3}, "failure_kind"),
        ({"reward": 1.0, "failure_reason": 3}, "failure_reason"),
    ],
)
def test_a_bad_field_is_reported_before_a_bad_usage(row: dict[str, Any], field: str) -> None:
    """With a bad field and a bad usage in one row, the error names the field, as without usage."""
    with pytest.raises(OutcomeError) as raised:
        classify({**row, "response": {"usage": _usage(out=-1)}})
    assert raised.value.field == field


def test_tokens_appear_only_once_a_rollout_carries_usage(telemetry: RolloutTelemetry) -> None:
    """No usage, no rollout_tokens_total; then the four types, summed over rollouts that carry usage."""
    telemetry.record("math", {"reward": 1.0})
    telemetry.record("math", _row(status="completed"))
    assert "rollout_tokens_total" not in sample_names(exposition(telemetry.registry))
    telemetry.record("math", _row(usage=_usage()))
    telemetry.record("math", {"reward": 0.0, "mask_sample": True, "response": {"usage": _usage(1, 2, 3, 4)}})
    telemetry.record("math", {"reward": 1.0})
    text = exposition(telemetry.registry)
    expected = {"input": 121, "output": 42, "cached": 11, "reasoning": 20}
    for token_type, count in expected.items():
        assert value(text, "rollout_tokens_total", agent="math", type=token_type) == count
    assert value(text, "rollout_completed_total", agent="math") == 5
    assert "rollout_truncated_total" not in sample_names(text)


def test_truncation_appears_only_once_something_is_truncated(telemetry: RolloutTelemetry) -> None:
    """rollout_truncated_total{cause} counts incomplete responses by cause; 'other' without a reason."""
    telemetry.record("math", _row(usage=_usage()))
    assert "rollout_truncated_total" not in sample_names(exposition(telemetry.registry))
    for _ in range(3):
        telemetry.record("math", _row(0.0, incomplete_details={"reason": "max_output_tokens"}))
    telemetry.record("math", _row(0.0, status="incomplete"))
    text = exposition(telemetry.registry)
    assert value(text, "rollout_truncated_total", agent="math", cause="output_cap") == 3
    assert value(text, "rollout_truncated_total", agent="math", cause="other") == 1
    assert {
        dict(labels)["cause"] for (name, labels) in samples(text) if name == "rollout_truncated_total"
    } == {
        "output_cap",
        "other",
    }


@pytest.mark.parametrize(
    ("reason", "cause"),
    [
        ("max_output_tokens", "output_cap"),
        ("length", "output_cap"),
        ("model_context_window_exceeded", "context_window"),
        (" Context_Length_Exceeded ", "context_window"),
        ("error_max_turns", "turn_budget"),
        ("max_steps", "turn_budget"),
        ("content_filter", "content_filter"),
        ("refusal", "content_filter"),
        ("", "other"),
        ("the sandbox ran out of disk", "other"),
    ],
)
def test_truncation_cause(reason: str, cause: str) -> None:
    """A raw reason maps to one cause of the bounded set, whatever its case; an unknown one to other."""
    assert truncation_cause(reason) == cause
    assert cause in TRUNCATION_CAUSES


def test_any_number_of_raw_reasons_makes_at_most_five_series() -> None:
    """Hundreds of distinct raw reasons stay within the causes: no cap is reached, no label overflows."""
    telemetry = RolloutTelemetry(max_kinds_per_agent=2)
    reasons = [f"reason {number}" for number in range(300)] + ["length", "max_turns", "prompt_too_long"]
    for reason in reasons:
        telemetry.record("math", _row(0.0, incomplete_details={"reason": reason}))
    text = exposition(telemetry.registry)
    truncated = {
        dict(labels)["cause"]: v
        for (name, labels), v in samples(text).items()
        if name == "rollout_truncated_total"
    }
    assert truncated == {"output_cap": 1, "context_window": 1, "turn_budget": 1, "other": 300}
    assert "rollout_telemetry_label_overflow_total" not in sample_names(text)


@pytest.mark.parametrize(
    ("finish_reason", "truncated"),
    [("length", "length"), ("max_turns", "max_turns"), ("stop", None), ("tool_calls", None), (7, None)],
)
def test_a_finish_reason_that_means_a_cut_is_a_truncation(
    finish_reason: object, truncated: str | None
) -> None:
    """Without incomplete_details, a finish_reason whose cause is known is the raw reason; stop is none."""
    generation = check_generation({"finish_reason": finish_reason, "usage": _usage()})
    assert generation is not None
    assert generation[1] == truncated


def test_incomplete_details_win_over_the_finish_reason() -> None:
    """A response with both is truncated for its incomplete_details.reason."""
    generation = check_generation(
        {"incomplete_details": {"reason": "content_filter"}, "finish_reason": "length"}
    )
    assert generation == (None, "content_filter")


def test_lifecycle_counts_usage_in_the_same_step(telemetry: RolloutTelemetry) -> None:
    """complete() with usage counts tokens and truncation like record()."""
    with telemetry.rollout("math") as rollout:
        rollout.complete(_row(0.0, usage=_usage(), incomplete_details={"reason": "max_output_tokens"}))
    text = exposition(telemetry.registry)
    assert value(text, "rollout_tokens_total", agent="math", type="output") == 40
    assert value(text, "rollout_truncated_total", agent="math", cause="output_cap") == 1


def test_followed_gym_rows_count_their_usage(tmp_path: Path) -> None:
    """The follower reads response.usage from a NeMo Gym row (its output skipped); a row without usage
    adds nothing."""
    gym = json.loads(GYM_ROWS.read_text().splitlines()[0])
    usage = gym["response"]["usage"]
    rows = []
    for task in range(3):
        row = {**gym, "_ng_task_index": task, "_ng_rollout_index": 0, "agent_ref": {"name": "math"}}
        if task == 2:
            row["response"] = {**gym["response"], "usage": None}
        rows.append(json.dumps(row) + "\n")
    main = tmp_path / "run.jsonl"
    main.write_text("".join(rows))
    telemetry = RolloutTelemetry()
    telemetry._run_follower(RunFiles(main)).poll()
    text = exposition(telemetry.registry)
    assert value(text, "rollout_completed_total", agent="math") == 3
    assert value(text, "rollout_tokens_total", agent="math", type="input") == 2 * usage["input_tokens"]
    assert value(text, "rollout_tokens_total", agent="math", type="output") == 2 * usage["output_tokens"]


def test_a_responses_api_status_is_trusted_over_a_finish_reason() -> None:
    """A response with status completed is not truncated, whatever finish_reason it also carries."""
    assert check_generation({"status": "completed", "finish_reason": "length", "usage": _usage()}) == (
        (120, 40, 8, 16),
        None,
    )


def test_an_object_with_only_a_finish_reason_is_read() -> None:
    """A Chat Completions choice as an object (only finish_reason) is a truncation when it means a cut."""

    class Choice:
        finish_reason = "length"

    assert check_generation(Choice()) == (None, "length")

"""The outcome contract: dispositions, accepted shapes, and clear errors naming the field."""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from rollout_telemetry._contract.labels import label_value
from rollout_telemetry._contract.outcome import Disposition, absent, check_outcome, outcome_of
from rollout_telemetry._contract.verify_response import VerifyResponse
from rollout_telemetry.errors import OutcomeError


class GymLikeVerifyResponse(BaseModel):
    """The shape of NeMo Gym's BaseVerifyResponse: a reward plus whatever the server adds."""

    reward: float
    mask_sample: bool = False
    failure_kind: str | None = None
    failure_reason: str | None = None
    response: dict[str, Any] = {}


@dataclass
class PlainObject:
    reward: float | None
    mask_sample: bool = False


@pytest.mark.parametrize(
    ("response", "disposition", "reward"),
    [
        ({"reward": 1.0}, Disposition.MEASURED, 1.0),
        ({"reward": -0.5, "mask_sample": False}, Disposition.MEASURED, -0.5),
        ({"reward": 0, "mask_sample": True, "failure_kind": "judge_failed"}, Disposition.MASKED, 0.0),
        ({"mask_sample": True}, Disposition.MASKED, None),
        ({"reward": None}, Disposition.UNSCORED, None),
        ({"response": {"output": "..."}}, Disposition.UNSCORED, None),
        (GymLikeVerifyResponse(reward=0.25), Disposition.MEASURED, 0.25),
        (GymLikeVerifyResponse(reward=0.0, mask_sample=True), Disposition.MASKED, 0.0),
        (PlainObject(reward=0.75), Disposition.MEASURED, 0.75),
        (PlainObject(reward=None), Disposition.UNSCORED, None),
        (VerifyResponse.model_validate({"reward": 1.0, "extra_field": "kept"}), Disposition.MEASURED, 1.0),
        ({"reward": True}, Disposition.MEASURED, 1.0),
        ({"reward": Decimal("0.5")}, Disposition.MEASURED, 0.5),
    ],
)
def test_dispositions(response: object, disposition: Disposition, reward: float | None) -> None:
    """Dicts, Gym-like models and plain objects normalise to the right disposition and reward."""
    outcome = outcome_of(response)
    assert outcome.disposition is disposition
    assert outcome.reward == reward
    assert outcome.mask_sample == (disposition is Disposition.MASKED)


def test_fields_are_orthogonal() -> None:
    """A measured rollout may carry a failure kind and reason; a masked one may carry neither."""
    measured = outcome_of({"reward": 1.0, "failure_kind": "judge_failed", "failure_reason": "retried once"})
    assert measured.disposition is Disposition.MEASURED
    assert measured.failure_kind == "judge_failed"
    assert measured.failure_reason == "retried once"
    masked = outcome_of({"reward": 1.0, "mask_sample": True})
    assert masked.disposition is Disposition.MASKED
    assert masked.failure_kind is None


@pytest.mark.parametrize(
    ("response", "field"),
    [
        ({"reward": math.nan}, "reward"),
        ({"reward": math.inf}, "reward"),
        ({"reward": -math.inf}, "reward"),
        ({"reward": "0.5"}, "reward"),
        ({"reward": [1.0]}, "reward"),
        ({"reward": 1j}, "reward"),
        ({"reward": 1.0, "mask_sample": "false"}, "mask_sample"),
        ({"reward": 1.0, "mask_sample": 1}, "mask_sample"),
        ({"reward": 1.0, "failure_kind": 7}, "failure_kind"),
        ({"reward": 1.0, "failure_kind": ["judge_failed"]}, "failure_kind"),
        ({"reward": 1.0, "failure_reason": {"detail": 1}}, "failure_reason"),
        ("reward=1", "response"),
        (None, "response"),
    ],
)
def test_bad_fields_raise_a_clear_error_naming_the_field(response: object, field: str) -> None:
    """Each bad value raises an OutcomeError (a ValueError) whose message starts with the field name."""
    with pytest.raises(OutcomeError) as info:
        outcome_of(response)
    assert isinstance(info.value, ValueError)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")
    assert info.value.reason == f"invalid_{field}"


class _Kind(str):
    """A str subclass, as an enum-like vocabulary might pass."""


def test_a_given_disposition_is_kept_and_the_fields_still_checked() -> None:
    """A failed or omitted outcome keeps its disposition, whatever the reward; the fields meet the rules."""
    assert check_outcome(Disposition.FAILED, 0.5, None, "session_lost", None) == (
        Disposition.FAILED, 0.5, "session_lost", None, None,
    )  # fmt: skip
    assert absent(Disposition.OMITTED, "", "on purpose") == (
        Disposition.OMITTED,
        None,
        None,
        "on purpose",
        None,
    )
    kind = absent(Disposition.FAILED, _Kind("session_lost"))[2]
    assert type(kind) is str
    assert kind == "session_lost"
    with pytest.raises(OutcomeError) as info:
        absent(Disposition.FAILED, 7)
    assert info.value.field == "failure_kind"
    with pytest.raises(OutcomeError) as info:
        absent(Disposition.FAILED, None, None, math.nan)
    assert info.value.field == "reward"
    with pytest.raises(OutcomeError) as info:
        check_outcome(Disposition.FAILED, None, "yes", None, None)
    assert info.value.field == "mask_sample"


@pytest.mark.parametrize(
    ("mask_sample", "reward", "disposition"),
    [
        (None, 1.0, Disposition.MEASURED),
        (False, 1.0, Disposition.MEASURED),
        (True, 1.0, Disposition.MASKED),
        (None, None, Disposition.UNSCORED),
        (False, None, Disposition.UNSCORED),
        (True, None, Disposition.MASKED),
    ],
)
def test_completed_disposition_by_mask_and_reward(
    mask_sample: bool | None, reward: float | None, disposition: Disposition
) -> None:
    """Every combination of mask and reward: masked wins, then no reward is unscored, else measured."""
    assert check_outcome(None, reward, mask_sample, "", None)[:3] == (disposition, reward, None)
    model = VerifyResponse.model_validate({"reward": reward, "mask_sample": mask_sample})
    assert model.mask_sample is (disposition is Disposition.MASKED)


def test_pydantic_model_applies_the_same_checks() -> None:
    """VerifyResponse refuses what outcome_of refuses, and keeps extra fields."""
    with pytest.raises(ValidationError, match="finite"):
        VerifyResponse(reward=math.nan)
    with pytest.raises(ValidationError, match="must be a number"):
        VerifyResponse.model_validate({"reward": "1"})
    with pytest.raises(ValidationError, match="must be a bool"):
        VerifyResponse.model_validate({"reward": 1.0, "mask_sample": "yes"})
    model = VerifyResponse.model_validate({"reward": 1, "_ng_task_index": 3})
    assert model.reward == 1.0
    assert model.model_extra == {"_ng_task_index": 3}


def test_label_value_truncates_and_repairs() -> None:
    """Long values are truncated; lone surrogates become '?' so the exposition stays encodable."""
    assert label_value("a" * 1000) == "a" * 128
    repaired = label_value("bad\ud800kind")
    assert repaired == "bad?kind"
    repaired.encode("utf-8")
    assert label_value('quote"and\nnewline') == 'quote"and\nnewline'

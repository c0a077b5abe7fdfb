"""The outcome contract: what a verify response carries and which disposition a rollout ends in.

A completed rollout reaches the output as a *verify response* (NeMo Gym's ``BaseVerifyResponse``, a dict
from a rollout JSONL row, or any object with the same attributes). Its disposition is:

- ``measured``: it carries a reward and ``mask_sample`` is false;
- ``masked``: ``mask_sample`` is true; the reward (if any) is not a valid measurement;
- ``unscored``: it completed but carries no numeric reward (``reward`` absent or ``None``).

A rollout that never reached the output is ``failed``; one left out on purpose is ``omitted``.

``mask_sample``, ``failure_kind`` and ``failure_reason`` are orthogonal: any combination is valid.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, field_validator

from rollout_telemetry.rejections import Rejection

__all__ = [
    "MAX_LABEL_LENGTH",
    "Classified",
    "Disposition",
    "Outcome",
    "OutcomeError",
    "VerifyResponse",
    "absent",
    "check_failure_kind",
    "check_failure_reason",
    "check_mask_sample",
    "check_reward",
    "classify",
    "label_value",
    "outcome_of",
]

MAX_LABEL_LENGTH = 128
"""Label values (agent names, failure kinds) longer than this are truncated before they become labels."""


class Disposition(StrEnum):
    """How a rollout ended."""

    MEASURED = "measured"
    MASKED = "masked"
    UNSCORED = "unscored"
    FAILED = "failed"
    OMITTED = "omitted"


class OutcomeError(Rejection, ValueError):
    """A rollout outcome that cannot be recorded; ``field`` names the offending field.

    Its ``reason`` (the label in ``rollout_telemetry_rejected_total``) is ``invalid_<field>``.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"invalid_{field}", f"{field}: {message}")
        self.field = field


def check_reward(value: object) -> float | None:
    """Return the reward as a finite float, or ``None`` for an unscored rollout.

    Booleans count as 1.0 and 0.0 (as pydantic and Gym's own models read them).

    Raises:
        OutcomeError: the reward is NaN, infinite, or not a number.
    """
    if type(value) is float:
        if value - value == 0.0:  # false for NaN and +-inf, and cheaper than math.isfinite
            return value
        msg = f"must be a finite number, got {value!r}"
        raise OutcomeError("reward", msg)
    if value is None:
        return None
    if isinstance(value, numbers.Real | Decimal):  # int, bool, numpy scalars, Fraction, Decimal
        as_float = float(value)
        if math.isfinite(as_float):
            return as_float
        msg = f"must be a finite number, got {value!r}"
        raise OutcomeError("reward", msg)
    msg = f"must be a number, got {type(value).__name__}"
    raise OutcomeError("reward", msg)


def check_mask_sample(value: object) -> bool:
    """Return ``mask_sample`` as a bool; ``None`` means false.

    Raises:
        OutcomeError: the value is not a bool (a string such as ``"false"`` is ambiguous, so it is refused).
    """
    if value is True or value is False:
        return value
    if value is None:
        return False
    msg = f"must be a bool, got {type(value).__name__}"
    raise OutcomeError("mask_sample", msg)


def check_failure_kind(value: object) -> str | None:
    """Return the failure kind, or ``None`` when absent or empty.

    Raises:
        OutcomeError: the value is not a string.
    """
    if value is None or value == "":
        return None
    if isinstance(value, str):
        return str(value)  # a str subclass (an enum member, say) is labelled by its plain value
    msg = f"must be a string, got {type(value).__name__}"
    raise OutcomeError("failure_kind", msg)


def check_failure_reason(value: object) -> str | None:
    """Return the failure reason, or ``None`` when absent.

    Raises:
        OutcomeError: the value is not a string.
    """
    if value is None or isinstance(value, str):
        return value
    msg = f"must be a string, got {type(value).__name__}"
    raise OutcomeError("failure_reason", msg)


def label_value(value: str) -> str:
    """Return ``value`` made safe to be a label value: at most ``MAX_LABEL_LENGTH`` characters, valid UTF-8.

    prometheus_client escapes quotes, backslashes and newlines itself; what it cannot write is a lone
    surrogate, which would fail the whole scrape, so those become ``?``.
    """
    if len(value) > MAX_LABEL_LENGTH:
        value = value[:MAX_LABEL_LENGTH]
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = value.encode("utf-8", "replace").decode("utf-8")
    return value


class VerifyResponse(BaseModel):
    """What a verify response carries; extra fields are allowed and kept.

    Use it at a boundary where input arrives as data (a JSONL row, a request body). ``record()`` reads
    plain dicts and objects directly, applying the same checks without building a model.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    reward: float | None = None
    mask_sample: bool = False
    failure_kind: str | None = None
    failure_reason: str | None = None

    @field_validator("reward", mode="before")
    @classmethod
    def _reward(cls, value: object) -> float | None:
        return check_reward(value)

    @field_validator("mask_sample", mode="before")
    @classmethod
    def _mask_sample(cls, value: object) -> bool:
        return check_mask_sample(value)

    @field_validator("failure_kind", mode="before")
    @classmethod
    def _failure_kind(cls, value: object) -> str | None:
        return check_failure_kind(value)

    @field_validator("failure_reason", mode="before")
    @classmethod
    def _failure_reason(cls, value: object) -> str | None:
        return check_failure_reason(value)


@dataclass(frozen=True, slots=True)
class Outcome:
    """A rollout's normalised outcome."""

    disposition: Disposition
    reward: float | None = None
    failure_kind: str | None = None
    failure_reason: str | None = None

    @property
    def mask_sample(self) -> bool:
        """Whether the rollout was masked."""
        return self.disposition is Disposition.MASKED


_ABSENT = object()


def _fields(response: object) -> tuple[object, object, object, object]:
    reward = getattr(response, "reward", _ABSENT)
    if reward is not _ABSENT:  # a model or object: the common shape after plain dicts
        return (
            reward,
            getattr(response, "mask_sample", None),
            getattr(response, "failure_kind", None),
            getattr(response, "failure_reason", None),
        )
    if isinstance(response, Mapping):
        return (
            response.get("reward"),
            response.get("mask_sample"),
            response.get("failure_kind"),
            response.get("failure_reason"),
        )
    if isinstance(response, str | bytes | int | float) or response is None:
        msg = f"must be a mapping or an object with verify-response attributes, got {type(response).__name__}"
        raise OutcomeError("response", msg)
    return (
        None,
        getattr(response, "mask_sample", None),
        getattr(response, "failure_kind", None),
        getattr(response, "failure_reason", None),
    )


Classified = tuple[Disposition, float | None, str | None, str | None]
"""``(disposition, reward, failure_kind, failure_reason)``: one checked, classified outcome. A plain tuple,
because every rollout makes one; ``Outcome`` is the same as a dataclass for callers."""


def classify(response: object) -> Classified:
    """Check a completed rollout's verify response and classify it: the one place the rule is written.

    ``mask_sample=True`` makes it masked (whatever the reward), no numeric reward makes it unscored,
    anything else is measured. ``failure_kind`` and ``failure_reason`` are carried along unchanged.

    Raises:
        OutcomeError: a field has a value that is not allowed; the error names the field.
    """
    if type(response) is dict:  # a JSONL row: the commonest shape, read without building anything
        get = response.get
        raw: tuple[object, object, object, object] = (
            get("reward"),
            get("mask_sample"),
            get("failure_kind"),
            get("failure_reason"),
        )
    else:
        raw = _fields(response)
    reward = check_reward(raw[0])
    masked = check_mask_sample(raw[1])
    kind = check_failure_kind(raw[2])
    reason = check_failure_reason(raw[3])
    if masked:
        return Disposition.MASKED, reward, kind, reason
    if reward is None:
        return Disposition.UNSCORED, reward, kind, reason
    return Disposition.MEASURED, reward, kind, reason


def absent(
    disposition: Disposition,
    failure_kind: object = None,
    failure_reason: object = None,
    reward: object = None,
) -> Classified:
    """Check the outcome of a rollout that did not reach the output: ``FAILED``, or ``OMITTED`` on purpose.

    ``reward`` is for a failure record that still carries one (NeMo Gym writes some to its failures file).

    Raises:
        OutcomeError: a field has a value that is not allowed; the error names the field.
    """
    return (
        disposition,
        check_reward(reward),
        check_failure_kind(failure_kind),
        check_failure_reason(failure_reason),
    )


def outcome_of(response: object) -> Outcome:
    """Normalise a verify response (mapping, pydantic model or object) into an ``Outcome``.

    Raises:
        OutcomeError: a field has a value that is not allowed; the error names the field.
    """
    return Outcome(*classify(response))

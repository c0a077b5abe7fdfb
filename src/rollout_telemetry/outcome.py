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

__all__ = [
    "MAX_LABEL_LENGTH",
    "Disposition",
    "Outcome",
    "OutcomeError",
    "VerifyResponse",
    "check_failure_kind",
    "check_failure_reason",
    "check_mask_sample",
    "check_reward",
    "disposition_of",
    "label_value",
    "outcome_of",
    "read_completed",
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


class OutcomeError(ValueError):
    """A rollout outcome that cannot be recorded; ``field`` names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field

    @property
    def reason(self) -> str:
        """The low-cardinality rejection reason for ``rollout_telemetry_rejected_total``."""
        return f"invalid_{self.field}"


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
        return value
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


def disposition_of(masked: bool, reward: float | None) -> Disposition:
    """The disposition of a completed rollout: masked wins, then unscored without a reward, else measured."""
    if masked:
        return Disposition.MASKED
    if reward is None:
        return Disposition.UNSCORED
    return Disposition.MEASURED


def read_completed(response: object) -> tuple[float | None, bool, str | None, str | None]:
    """Return ``(reward, masked, failure_kind, failure_reason)`` of a verify response, checked.

    The recording hot path: nothing is built but the tuple, for plain dicts and objects alike.

    Raises:
        OutcomeError: a field has a value that is not allowed; the error names the field.
    """
    if type(response) is dict:
        get = response.get
        raw_reward: object = get("reward")
        raw_mask: object = get("mask_sample", False)
        raw_kind: object = get("failure_kind")
        raw_reason: object = get("failure_reason")
        # The common shape passes without the checks' calls (RolloutTelemetry.record inlines the same).
        if (
            type(raw_reward) is float
            and raw_reward - raw_reward == 0.0  # not NaN or +-inf
            and (raw_mask is False or raw_mask is True)
            and (raw_kind is None or (type(raw_kind) is str and raw_kind))
            and (raw_reason is None or type(raw_reason) is str)
        ):
            return raw_reward, raw_mask, raw_kind, raw_reason
    else:
        raw_reward, raw_mask, raw_kind, raw_reason = _fields(response)
    return (
        check_reward(raw_reward),
        check_mask_sample(raw_mask),
        check_failure_kind(raw_kind),
        check_failure_reason(raw_reason),
    )


def outcome_of(response: object) -> Outcome:
    """Normalise a verify response (mapping, pydantic model or object) into an ``Outcome``.

    Raises:
        OutcomeError: a field has a value that is not allowed; the error names the field.
    """
    reward, masked, kind, reason = read_completed(response)
    return Outcome(disposition_of(masked, reward), reward, kind, reason)

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

from pydantic import BaseModel, ConfigDict, model_validator

from rollout_telemetry.rejections import Rejection

__all__ = [
    "MAX_LABEL_LENGTH",
    "Classified",
    "Disposition",
    "Outcome",
    "OutcomeError",
    "VerifyResponse",
    "absent",
    "check_fields",
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


def check_fields(
    reward: object, mask_sample: object, failure_kind: object, failure_reason: object
) -> tuple[float | None, bool, str | None, str | None]:
    """Check the four outcome fields; return them normalised: every field rule is here and only here.

    - ``reward``: a finite number (``int``, ``bool``, numpy scalars, ``Decimal`` and ``Fraction`` become a
      float; a bool counts as 1.0 or 0.0, as pydantic and Gym's own models read it), or ``None`` when the
      rollout carries none. NaN, infinities and anything else (a numeric string too) are refused.
    - ``mask_sample``: a bool; ``None`` means false. Anything else (the string ``"false"``, say) is refused
      as ambiguous.
    - ``failure_kind``: a string; ``None`` or ``""`` means none. A str subclass becomes its plain value.
    - ``failure_reason``: a string or ``None``.

    The commonest values (a float reward, a bool or no mask, no kind or a plain string) take the first
    test of each rule.

    Raises:
        OutcomeError: a field has a value that is not allowed; the error names the field.
    """
    if type(reward) is float:
        if reward - reward != 0.0:  # NaN and +-inf: cheaper than math.isfinite
            raise OutcomeError("reward", f"must be a finite number, got {reward!r}")
    elif reward is not None:
        if not isinstance(reward, numbers.Real | Decimal):
            raise OutcomeError("reward", f"must be a number, got {type(reward).__name__}")
        as_float = float(reward)
        if not math.isfinite(as_float):
            raise OutcomeError("reward", f"must be a finite number, got {reward!r}")
        reward = as_float
    if mask_sample is None:
        mask_sample = False
    elif mask_sample is not True and mask_sample is not False:
        raise OutcomeError("mask_sample", f"must be a bool, got {type(mask_sample).__name__}")
    if failure_kind is not None and type(failure_kind) is not str:
        if not isinstance(failure_kind, str):
            raise OutcomeError("failure_kind", f"must be a string, got {type(failure_kind).__name__}")
        failure_kind = str(failure_kind)
    if failure_kind == "":
        failure_kind = None
    if failure_reason is not None and not isinstance(failure_reason, str):
        raise OutcomeError("failure_reason", f"must be a string, got {type(failure_reason).__name__}")
    return reward, mask_sample, failure_kind, failure_reason


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

    @model_validator(mode="before")
    @classmethod
    def _checked(cls, data: object) -> object:
        if not isinstance(data, Mapping):
            return data  # pydantic refuses what is not a mapping
        fields = ("reward", "mask_sample", "failure_kind", "failure_reason")
        checked = check_fields(*(data.get(name) for name in fields))
        return {**data, **dict(zip(fields, checked, strict=True))}


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


_MASKED, _UNSCORED, _MEASURED = Disposition.MASKED, Disposition.UNSCORED, Disposition.MEASURED

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
        reward, masked, kind, reason = check_fields(
            get("reward"), get("mask_sample"), get("failure_kind"), get("failure_reason")
        )
    else:
        reward, masked, kind, reason = check_fields(*_fields(response))
    if masked:
        return _MASKED, reward, kind, reason
    if reward is None:
        return _UNSCORED, reward, kind, reason
    return _MEASURED, reward, kind, reason


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
    checked_reward, _, kind, reason = check_fields(reward, None, failure_kind, failure_reason)
    return disposition, checked_reward, kind, reason


def outcome_of(response: object) -> Outcome:
    """Normalise a verify response (mapping, pydantic model or object) into an ``Outcome``.

    Raises:
        OutcomeError: a field has a value that is not allowed; the error names the field.
    """
    return Outcome(*classify(response))

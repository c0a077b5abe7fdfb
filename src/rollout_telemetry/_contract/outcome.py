"""The outcome contract: what a verify response carries and which disposition a rollout ends in.

A completed rollout reaches the output as a *verify response* (NeMo Gym's ``BaseVerifyResponse``, a dict
from a rollout JSONL row, or any object with the same attributes). Its disposition is:

- ``measured``: it carries a reward and ``mask_sample`` is false;
- ``masked``: ``mask_sample`` is true; the reward (if any) is not a valid measurement;
- ``unscored``: it completed but carries no numeric reward (``reward`` absent or ``None``).

A rollout that never reached the output is ``failed``; one left out on purpose is ``omitted``.

``mask_sample``, ``failure_kind`` and ``failure_reason`` are orthogonal: any combination is valid.

A verify response may also carry the model's own response (``response``, the Responses API object). Two of
its fields are read in the same pass: ``usage`` (token counts) and ``incomplete_details.reason`` (why the
answer was cut short, for example ``max_output_tokens``). They become a ``Generation``, or ``None`` when the
response carries neither.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum

from rollout_telemetry._contract.generation import Generation, check_generation
from rollout_telemetry._contract.shown import shown
from rollout_telemetry.errors import OutcomeError

__all__ = [
    "ABSENT",
    "MAX_REWARD",
    "REACHED_OUTPUT",
    "Classified",
    "Disposition",
    "Outcome",
    "absent",
    "check_outcome",
    "classify",
    "outcome_of",
]

MAX_REWARD = 1e9
"""The largest reward magnitude accepted: beyond it a reward is refused (``invalid_reward``), never summed.
A sanity bound: a billion rollouts at this reward still sum to well within what a float64 counter holds."""


class Disposition(StrEnum):
    """How a rollout ended."""

    MEASURED = "measured"
    MASKED = "masked"
    UNSCORED = "unscored"
    FAILED = "failed"
    OMITTED = "omitted"


ABSENT: tuple[Disposition, ...] = (Disposition.FAILED, Disposition.OMITTED)
"""The dispositions of a rollout that never reached the main output (a failure or omission record)."""
REACHED_OUTPUT: tuple[Disposition, ...] = (Disposition.MEASURED, Disposition.MASKED, Disposition.UNSCORED)
"""The dispositions of a rollout with a row in the main output: NeMo Gym's scored rollouts."""

_ABSENT = object()

_MASKED, _UNSCORED, _MEASURED = Disposition.MASKED, Disposition.UNSCORED, Disposition.MEASURED

Classified = tuple[Disposition, float | None, str | None, str | None, Generation | None]
"""``(disposition, reward, failure_kind, failure_reason, generation)``: one checked, classified outcome. A
plain tuple, because every rollout makes one; ``Outcome`` is the same as a dataclass for callers.
``generation`` is ``None`` unless the model response carried usage or was truncated."""


def check_outcome(  # noqa: PLR0912, PLR0917 - one rule per field, the fields as arguments (a call per rollout)
    disposition: Disposition | None,
    reward: object,
    mask_sample: object,
    failure_kind: object,
    failure_reason: object,
    model_response: object = None,
    response: object = _ABSENT,
) -> Classified:
    """Check an outcome's fields and classify it: every field rule and the disposition rule are here only.

    ``disposition`` is ``FAILED`` or ``OMITTED`` for a rollout that did not reach the output; ``None`` for a
    completed one, which is classified: ``mask_sample=True`` makes it masked (whatever the reward), no numeric
    reward makes it unscored, anything else is measured. ``failure_kind`` and ``failure_reason`` are carried
    along unchanged. ``model_response`` (the verify response's ``response``, if any) has its usage and
    truncation checked by ``check_generation``, after the fields, so a bad field is the one reported.

    - ``reward``: a finite number (``int``, ``bool``, numpy scalars, ``Decimal`` and ``Fraction`` become a
      float; a bool counts as 1.0 or 0.0, as pydantic and Gym's own models read it), or ``None`` when the
      rollout carries none. NaN, infinities and anything else (a numeric string too) are refused.
    - ``mask_sample``: a bool; ``None`` means false. Anything else (the string ``"false"``, say) is refused
      as ambiguous.
    - ``failure_kind``: a string; ``None`` or ``""`` means none. A str subclass becomes its plain value.
    - ``failure_reason``: a string or ``None``.

    With ``response`` (a verify response: dict, pydantic model or object) the fields are read from it
    instead (the fields given are ignored; ``classify``): here, so that recording a row costs one call less.
    Anything but an ``OutcomeError`` raised while a response is read or checked (a property, a number type of
    the caller's) becomes ``OutcomeError("response", "could not be read: ...")``.

    The commonest values (a float reward, a bool or no mask, no kind or a plain string) take the first
    test of each rule.

    Raises:
        OutcomeError: a field has a value that is not allowed; the error names the field.
    """
    try:
        if response is not _ABSENT:
            if type(response) is dict:  # a JSONL row: the commonest shape, read without building anything
                # `response.get(...)` each time, not a bound `get` kept in a local: the interpreter calls a
                # dict's method without making a bound method object (docs/performance.md).
                reward = response.get("reward")
                mask_sample = response.get("mask_sample")
                failure_kind = response.get("failure_kind")
                failure_reason = response.get("failure_reason")
                model_response = response.get("response")
            else:
                reward, mask_sample, failure_kind, failure_reason, model_response = _fields(response)
        if type(reward) is float:
            if not -MAX_REWARD <= reward <= MAX_REWARD:  # NaN fails both comparisons, as +-inf fails one
                raise _out_of_range(reward)
        elif reward is not None:
            if not isinstance(reward, numbers.Real | Decimal):
                raise OutcomeError("reward", f"must be a number, got {type(reward).__name__}")
            try:
                as_float = float(reward)
            except Exception:  # an int of 400 digits (OverflowError), or a caller's number type raising
                as_float = math.inf
            if not -MAX_REWARD <= as_float <= MAX_REWARD:
                raise _out_of_range(reward)
            reward = as_float
        # The disposition of a completed rollout is decided with the mask's own check.
        if mask_sample is True:
            if disposition is None:
                disposition = _MASKED
        elif mask_sample is not None and mask_sample is not False:
            raise OutcomeError("mask_sample", f"must be a bool, got {type(mask_sample).__name__}")
        elif disposition is None:
            disposition = _UNSCORED if reward is None else _MEASURED
        if failure_kind is not None:  # no kind, the commonest, takes one test
            if type(failure_kind) is not str:
                if not isinstance(failure_kind, str):
                    raise OutcomeError("failure_kind", f"must be a string, got {type(failure_kind).__name__}")
                # The plain value: a subclass's own methods are not run.
                failure_kind = str.__str__(failure_kind)
            if failure_kind == "":
                failure_kind = None
        if failure_reason is not None and type(failure_reason) is not str:
            if not isinstance(failure_reason, str):
                raise OutcomeError("failure_reason", f"must be a string, got {type(failure_reason).__name__}")
            failure_reason = str.__str__(failure_reason)
        if model_response is None:
            return disposition, reward, failure_kind, failure_reason, None
        return disposition, reward, failure_kind, failure_reason, check_generation(model_response)
    except OutcomeError:
        raise
    except Exception as exc:  # the caller's object raised while read (a property, __eq__, a deep cycle...)
        if response is _ABSENT:
            raise  # fields given by the caller: what raised is the caller's, as it was
        raise _unreadable(exc) from exc


def _out_of_range(reward: object) -> OutcomeError:
    return OutcomeError("reward", f"must be a finite number within +-{MAX_REWARD:g}, got {shown(reward, 40)}")


@dataclass(frozen=True, slots=True)
class Outcome:
    """A rollout's normalised outcome."""

    disposition: Disposition
    reward: float | None = None
    failure_kind: str | None = None
    failure_reason: str | None = None
    generation: Generation | None = None

    @property
    def mask_sample(self) -> bool:
        """Whether the rollout was masked."""
        return self.disposition is Disposition.MASKED


def _fields(response: object) -> tuple[object, object, object, object, object]:
    reward = getattr(response, "reward", _ABSENT)
    if reward is not _ABSENT:  # a model or object: the common shape after plain dicts
        return (
            reward,
            getattr(response, "mask_sample", None),
            getattr(response, "failure_kind", None),
            getattr(response, "failure_reason", None),
            getattr(response, "response", None),
        )
    if isinstance(response, Mapping):
        return (
            response.get("reward"),
            response.get("mask_sample"),
            response.get("failure_kind"),
            response.get("failure_reason"),
            response.get("response"),
        )
    if isinstance(response, str | bytes | int | float) or response is None:
        msg = f"must be a mapping or an object with verify-response attributes, got {type(response).__name__}"
        raise OutcomeError("response", msg)
    return (
        None,
        getattr(response, "mask_sample", None),
        getattr(response, "failure_kind", None),
        getattr(response, "failure_reason", None),
        getattr(response, "response", None),
    )


def classify(response: object) -> Classified:
    """Read a completed rollout's verify response, check it and classify it (``check_outcome``).

    ``mask_sample=True`` makes it masked (whatever the reward), no numeric reward makes it unscored,
    anything else is measured. ``failure_kind`` and ``failure_reason`` are carried along unchanged; the
    model response's usage and truncation are read in the same pass (``check_generation``).

    Raises:
        OutcomeError: a field has a value that is not allowed, or the response could not be read; the error
            names the field.
    """
    return check_outcome(None, None, None, None, None, None, response)


def _unreadable(exc: Exception) -> OutcomeError:
    return OutcomeError("response", f"could not be read: {type(exc).__name__}: {exc!s:.200}")


def absent(
    disposition: Disposition,
    failure_kind: object = None,
    failure_reason: object = None,
    reward: object = None,
) -> Classified:
    """Check the outcome of a rollout that did not reach the output: ``FAILED``, or ``OMITTED`` on purpose.

    ``reward`` is for a failure record that still carries one (NeMo Gym writes some to its failures file).

    Raises:
        OutcomeError: a field has a value that is not allowed, or could not be read; the error names the
            field.
    """
    try:
        return check_outcome(disposition, reward, None, failure_kind, failure_reason)
    except OutcomeError:
        raise
    except Exception as exc:  # a str or number subclass of the caller's that raised while read
        raise _unreadable(exc) from exc


def outcome_of(response: object) -> Outcome:
    """Normalise a verify response (mapping, pydantic model or object) into an ``Outcome``.

    Raises:
        OutcomeError: a field has a value that is not allowed; the error names the field.
    """
    return Outcome(*classify(response))

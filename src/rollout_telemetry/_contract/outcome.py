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

from pydantic import BaseModel, ConfigDict, model_validator

from rollout_telemetry.errors import OutcomeError

__all__ = [
    "MAX_LABEL_LENGTH",
    "MAX_REWARD",
    "MAX_TOKENS",
    "TOKEN_TYPES",
    "Classified",
    "Disposition",
    "Generation",
    "Outcome",
    "VerifyResponse",
    "absent",
    "check_generation",
    "check_outcome",
    "classify",
    "label_value",
    "outcome_of",
]

MAX_LABEL_LENGTH = 128
"""Label values (agent names, failure kinds) longer than this are truncated before they become labels."""

MAX_REWARD = 1e9
"""The largest reward magnitude accepted: beyond it a reward is refused (``invalid_reward``), never summed.
A sanity bound: a billion rollouts at this reward still sum to well within what a float64 counter holds."""

MAX_TOKENS = 2**30 - 1
"""The largest token count of one response accepted (1,073,741,823): beyond it the count is refused by
field (``invalid_output_tokens``, ...). A sanity bound far above any context window, which keeps a counter's
sum exact in a float64 for millions of responses; one bit test checks four counts at once."""


class Disposition(StrEnum):
    """How a rollout ended."""

    MEASURED = "measured"
    MASKED = "masked"
    UNSCORED = "unscored"
    FAILED = "failed"
    OMITTED = "omitted"


TOKEN_TYPES = ("input", "output", "cached", "reasoning")
"""The ``type`` label values of ``rollout_tokens_total``, in the order of ``Generation.tokens``."""


Generation = tuple[tuple[int, int, int, int] | None, str | None]
"""What the model's response says about its generation: ``(tokens, truncated)``.

``tokens`` is ``(input, output, cached, reasoning)`` from ``response.usage`` (``None`` without usage);
``truncated`` is why the answer was cut short (``incomplete_details.reason``, ``""`` if none was given), or
``None`` when it was not. A plain tuple, like ``Classified``: a rollout with usage makes one, and a named
tuple or dataclass costs several times more to build."""


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

    The commonest values (a float reward, a bool or no mask, no kind or a plain string) take the first
    test of each rule.

    Raises:
        OutcomeError: a field has a value that is not allowed; the error names the field.
    """
    if type(reward) is float:
        if not -MAX_REWARD <= reward <= MAX_REWARD:  # NaN fails both comparisons, as +-inf fails one
            raise _out_of_range(reward)
    elif reward is not None:
        if not isinstance(reward, numbers.Real | Decimal):
            raise OutcomeError("reward", f"must be a number, got {type(reward).__name__}")
        try:
            as_float = float(reward)
        except Exception:  # an int of 400 digits (OverflowError), or a number type of the caller's raising
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
            failure_kind = str.__str__(failure_kind)  # the plain value: a subclass's own methods are not run
        if failure_kind == "":
            failure_kind = None
    if failure_reason is not None and type(failure_reason) is not str:
        if not isinstance(failure_reason, str):
            raise OutcomeError("failure_reason", f"must be a string, got {type(failure_reason).__name__}")
        failure_reason = str.__str__(failure_reason)
    if model_response is None:
        return disposition, reward, failure_kind, failure_reason, None
    return disposition, reward, failure_kind, failure_reason, check_generation(model_response)


def _out_of_range(reward: object) -> OutcomeError:
    return OutcomeError("reward", f"must be a finite number within +-{MAX_REWARD:g}, got {reward!r:.40}")


_ABSENT = object()


def _part(value: object, name: str) -> object:
    # A field of a Responses API object that arrives as a dict (a JSONL row), a model or any object. The
    # attribute is tried before the Mapping test: an isinstance() against an ABC is the slowest step here.
    if type(value) is dict:
        return value.get(name)
    found = getattr(value, name, _ABSENT)
    if found is not _ABSENT:
        return found
    return value.get(name) if isinstance(value, Mapping) else None


def _token_count(value: object, name: str) -> int:
    if value is None:
        return 0
    if type(value) is not int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise OutcomeError(name, f"must be an integer >= 0, got {value!r:.40}")
        value = int.__int__(int(value))  # a numpy integer, say; a subclass's own methods are not run
    if not 0 <= value <= MAX_TOKENS:
        raise OutcomeError(name, f"must be an integer from 0 to {MAX_TOKENS}, got {value!r:.40}")
    return value


def _detail(details: object, name: str) -> object:
    return None if details is None else _part(details, name)


def _tokens(usage: object) -> tuple[int, int, int, int]:
    if type(usage) is dict:  # a JSONL row's usage: read without a helper per field
        get = usage.get
        input_tokens, output_tokens = get("input_tokens"), get("output_tokens")
        input_details, output_details = get("input_tokens_details"), get("output_tokens_details")
        if type(input_details) is dict and type(output_details) is dict:
            cached, reasoning = input_details.get("cached_tokens"), output_details.get("reasoning_tokens")
        else:
            cached = _detail(input_details, "cached_tokens")
            reasoning = _detail(output_details, "reasoning_tokens")
    elif isinstance(usage, str | bytes | int | float):
        raise OutcomeError("usage", f"must be a mapping or an object, got {type(usage).__name__}")
    else:
        input_tokens, output_tokens = _part(usage, "input_tokens"), _part(usage, "output_tokens")
        cached = _detail(_part(usage, "input_tokens_details"), "cached_tokens")
        reasoning = _detail(_part(usage, "output_tokens_details"), "reasoning_tokens")
    if (
        type(input_tokens) is int
        and type(output_tokens) is int
        and type(cached) is int
        and type(reasoning) is int
        # Four counts in [0, MAX_TOKENS] at once: a negative one makes the union negative, a larger one sets a
        # bit above MAX_TOKENS (2**30 - 1).
        and 0 <= input_tokens | output_tokens | cached | reasoning <= MAX_TOKENS
    ):
        return input_tokens, output_tokens, cached, reasoning  # the common case: four counts, all fine
    return (
        _token_count(input_tokens, "input_tokens"),
        _token_count(output_tokens, "output_tokens"),
        _token_count(cached, "cached_tokens"),
        _token_count(reasoning, "reasoning_tokens"),
    )


def check_generation(model_response: object) -> Generation | None:
    """Check the usage and truncation of a model response; every rule of those fields is here and only here.

    - ``usage``: absent or ``None`` means none; otherwise a mapping or object whose ``input_tokens``,
      ``output_tokens``, ``input_tokens_details.cached_tokens`` and ``output_tokens_details.reasoning_tokens``
      are integers >= 0 (absent means 0). A bool, a float, a string or a negative count is refused, naming
      the field (``invalid_output_tokens``, ...); ``usage`` that is no mapping or object is
      ``invalid_usage``.
    - truncation: a non-null ``incomplete_details.reason`` (a string) is the reason, whatever ``status``
      says; ``status == "incomplete"`` without a reason is truncation of an unspecified reason (``""``).

    A ``response`` that is not a mapping or an object (a plain string, say) is not a Responses API object:
    it carries neither, and ``None`` is returned. ``total_tokens`` is not read (it is input + output).

    Raises:
        OutcomeError: a field has a value that is not allowed; the error names the field.
    """
    if type(model_response) is dict:
        get = model_response.get
        usage, details, status = get("usage"), get("incomplete_details"), get("status")
    else:  # a model or object (a followed row's response), another mapping, or no Responses API object
        usage = getattr(model_response, "usage", None)
        details = getattr(model_response, "incomplete_details", None)
        status = getattr(model_response, "status", None)
        if usage is None and details is None and status is None:
            if not isinstance(model_response, Mapping):
                return None
            usage = model_response.get("usage")
            details = model_response.get("incomplete_details")
            status = model_response.get("status")
    reason = None if details is None else _part(details, "reason")
    if reason is None:
        if status == "incomplete":
            reason = ""
    elif type(reason) is not str:
        if not isinstance(reason, str):
            raise OutcomeError("incomplete_reason", f"must be a string, got {type(reason).__name__}")
        reason = str(reason)
    if usage is None:
        return None if reason is None else (None, reason)
    return _tokens(usage), reason


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
        disposition, reward, kind, reason, _ = check_outcome(
            None,
            data.get("reward"),
            data.get("mask_sample"),
            data.get("failure_kind"),
            data.get("failure_reason"),
        )
        checked = {
            "reward": reward,
            "mask_sample": disposition is _MASKED,
            "failure_kind": kind,
            "failure_reason": reason,
        }
        return {**data, **checked}


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
        OutcomeError: a field has a value that is not allowed; the error names the field.
    """
    try:
        if type(response) is dict:  # a JSONL row: the commonest shape, read without building anything
            get = response.get
            return check_outcome(
                None,
                get("reward"),
                get("mask_sample"),
                get("failure_kind"),
                get("failure_reason"),
                get("response"),
            )
        reward, masked, kind, reason, model = _fields(response)
        return check_outcome(None, reward, masked, kind, reason, model)
    except OutcomeError:
        raise
    except Exception as exc:  # the caller's object raised while read (a property, __eq__, a deep cycle...)
        raise _unreadable(exc) from exc


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
        OutcomeError: a field has a value that is not allowed; the error names the field.
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

"""What a model response says about its generation: its token usage and whether it was cut short.

A verify response may carry the model's own response (``response``, the Responses API object). Two of its
fields are read: ``usage`` (token counts) and ``incomplete_details.reason`` (why the answer was cut short,
for example ``max_output_tokens``; a ``finish_reason`` that means a cut, ``length`` say, when there is none).
Every rule of those fields is here, in ``check_generation``; ``truncation_cause`` maps a reason to the
bounded set of causes a label may carry (the raw reason goes on the span only).
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Literal

from rollout_telemetry._contract.shown import shown
from rollout_telemetry.errors import OutcomeError

__all__ = ["TOKEN_TYPES", "TRUNCATION_CAUSES", "Generation", "check_generation", "part", "truncation_cause"]

MAX_TOKENS = 2**30 - 1
"""The largest token count of one response accepted (1,073,741,823): beyond it the count is refused by
field (``invalid_output_tokens``, ...). A sanity bound far above any context window, which keeps a counter's
sum exact in a float64 for millions of responses; one bit test checks four counts at once."""


TOKEN_TYPES = ("input", "output", "cached", "reasoning")
"""The ``type`` label values of ``rollout_tokens_total``, in the order of ``Generation.tokens``."""


Generation = tuple[tuple[int, int, int, int] | None, str | None]
"""What the model's response says about its generation: ``(tokens, truncated)``.

``tokens`` is ``(input, output, cached, reasoning)`` from ``response.usage`` (``None`` without usage);
``truncated`` is why the answer was cut short (``incomplete_details.reason``, ``""`` if none was given), or
``None`` when it was not. A plain tuple, like ``Classified``: a rollout with usage makes one, and a named
tuple or dataclass costs several times more to build."""

_ABSENT = object()

TruncationCause = Literal["output_cap", "context_window", "turn_budget", "content_filter", "other"]
TRUNCATION_CAUSES: tuple[TruncationCause, ...] = (
    "output_cap",
    "context_window",
    "turn_budget",
    "content_filter",
    "other",
)
"""Why an answer was cut short, as a label: each cause has its own fix (raise the output cap, shorten the
prompt or the history, give more turns, look at the filter), so they are never summed into one."""

_REASONS: tuple[tuple[TruncationCause, tuple[str, ...]], ...] = (
    # Responses API, Chat Completions, Anthropic and vLLM spellings of the output cap.
    ("output_cap", ("max_output_tokens", "length", "max_tokens", "max_completion_tokens")),
    # The prompt plus the answer reached the model's context window (Anthropic, OpenAI, vLLM).
    (
        "context_window",
        (
            "model_context_window_exceeded",
            "context_window_exceeded",
            "context_length_exceeded",
            "context_length",
            "max_model_len",
            "prompt_too_long",
        ),
    ),
    # The agent's own budget of turns, steps or tool calls (Claude Code's error_max_turns, ...).
    ("turn_budget", ("max_turns", "error_max_turns", "max_steps", "max_iterations", "max_tool_calls")),
    ("content_filter", ("content_filter", "refusal", "safety")),
)
_CAUSES: dict[str, TruncationCause] = {reason: cause for cause, reasons in _REASONS for reason in reasons}


def truncation_cause(reason: str) -> TruncationCause:
    """The cause of a truncation from its raw reason (any case, blanks around it ignored); ``other`` for a
    reason not known here, an empty one (unspecified) included."""
    cause = _CAUSES.get(reason)
    if cause is None:
        cause = _CAUSES.get(reason.strip().lower(), "other")
    return cause


def part(value: object, name: str) -> object:
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
            raise OutcomeError(name, f"must be an integer >= 0, got {shown(value, 40)}")
        value = int.__int__(int(value))  # a numpy integer, say; a subclass's own methods are not run
    if not 0 <= value <= MAX_TOKENS:
        raise OutcomeError(name, f"must be an integer from 0 to {MAX_TOKENS}, got {shown(value, 40)}")
    return value


def _detail(details: object, name: str) -> object:
    return None if details is None else part(details, name)


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
        input_tokens, output_tokens = part(usage, "input_tokens"), part(usage, "output_tokens")
        cached = _detail(part(usage, "input_tokens_details"), "cached_tokens")
        reasoning = _detail(part(usage, "output_tokens_details"), "reasoning_tokens")
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
      says; ``status == "incomplete"`` without a reason is truncation of an unspecified reason (``""``);
      without a ``status`` (no Responses API object: a Chat Completions choice, say), a ``finish_reason``
      whose cause is known (``length``, ``max_turns``, ...: see ``truncation_cause``) is the reason, and any
      other one (``stop``, ``tool_calls``) no truncation.

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
            if isinstance(model_response, Mapping):
                usage = model_response.get("usage")
                details = model_response.get("incomplete_details")
                status = model_response.get("status")
            elif getattr(model_response, "finish_reason", None) is None:
                return None
    reason = None if details is None else part(details, "reason")
    if reason is None:
        if status == "incomplete":
            reason = ""
        elif status is None:  # no Responses API status (a Chat Completions choice, say): its finish_reason
            finish = part(model_response, "finish_reason")
            if isinstance(finish, str) and truncation_cause(finish) != "other":
                reason = str.__str__(finish)  # one that means a cut (length, ...); "stop" is none
    elif type(reason) is not str:
        if not isinstance(reason, str):
            raise OutcomeError("incomplete_reason", f"must be a string, got {type(reason).__name__}")
        reason = str(reason)
    if usage is None:
        return None if reason is None else (None, reason)
    return _tokens(usage), reason

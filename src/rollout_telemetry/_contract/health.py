"""Rollout health: NeMo Gym 0.7.0's post-run health checks that one rollout's trajectory decides, live.

NeMo Gym writes a rollout's trajectory (``ng_trajectory``: its agent turns and captured model calls) and,
after the run, checks it (``nemo_gym/health/checks.py``). Three of its rollout checks need nothing but the
trajectory, and are decided here as each rollout arrives, by their definitions there:

- ``agent_turn_hollow``: an agent turn with no message (no non-empty answer or reasoning) and no tool call;
- ``model_call_runaway_generation``: a model call cut at its length limit (``finish_reason`` ``length``,
  ``max_output_tokens`` or ``max_tokens``) whose response has no content at all;
- ``model_call_zero_completion_tokens``: a model call that generated no token.

Gym checks the model calls a turn or invocation references; here every captured call of the trajectory is
checked (a trajectory's calls are its own). A rollout with several findings of one check counts once for it.
A rollout whose verdict is a finding of any check is *unhealthy*; a task whose rollouts (two or more with a
trajectory) are all unhealthy is Gym's ``task_consistently_unhealthy``, counted once its group completes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from rollout_telemetry._contract.generation import part

__all__ = ["HEALTH_CHECKS", "TRAJECTORY", "findings", "health_of"]

HealthCheck = Literal[
    "agent_turn_hollow", "model_call_runaway_generation", "model_call_zero_completion_tokens"
]
HEALTH_CHECKS: tuple[HealthCheck, ...] = (
    "agent_turn_hollow",
    "model_call_runaway_generation",
    "model_call_zero_completion_tokens",
)
"""The ``check`` label values: Gym's check ids."""

_CONTENT_KEYS = (
    "text",
    "content",
    "output_text",
    "answer",
    "refusal",
    "encrypted_content",
    "reasoning",
    "reasoning_content",
    "summary",
)
"""The keys of a content item that say something (Gym's notion of a non-empty message)."""
_TOOL_CALL_TYPES = frozenset({
    "function_call", "tool_call", "tool_use", "mcp_call", "mcp_list_tools", "mcp_approval_request",
    "file_search_call", "web_search_call", "computer_call", "image_generation_call", "code_interpreter_call",
    "local_shell_call", "custom_tool_call",
})  # fmt: skip
_LENGTH_LIMITS = frozenset({"length", "max_output_tokens", "max_tokens"})


def _says_something(value: object) -> bool:
    """Whether a message part holds content: text that is not blank, in a string, a list or a content item."""
    if isinstance(value, str):
        return not value.isspace() and value != ""
    if isinstance(value, list | tuple):
        return any(_says_something(item) for item in value)
    if isinstance(value, Mapping):
        return any(_says_something(value.get(key)) for key in _CONTENT_KEYS)
    return False


def _calls_a_tool(value: object) -> bool:
    if isinstance(value, list | tuple):
        return any(_calls_a_tool(item) for item in value)
    return isinstance(value, Mapping) and (
        value.get("type") in _TOOL_CALL_TYPES or bool(value.get("tool_calls"))
    )


def _has_content(response: object) -> bool:
    """Whether a model call's response (Responses API or Chat Completions, as a mapping) holds any content."""
    if not isinstance(response, Mapping):
        return False
    if any(_says_something(response.get(key)) for key in ("output_text", "content", "output")):
        return True
    choices = response.get("choices")
    return isinstance(choices, list) and any(
        isinstance(choice, Mapping)
        and (
            _says_something(choice.get("text"))
            or _says_something(part(choice.get("message") or {}, "content"))
        )
        for choice in choices
    )


def _items(container: object, name: str) -> list[object]:
    items = part(container, name)
    return items if isinstance(items, list) else []


TRAJECTORY = "ng_trajectory"
"""The field of a verify response (and of a Gym row) that holds the rollout's trajectory. A caller on the
recording path asks ``health_of`` only when a plain dict has it (``type(r) is not dict or TRAJECTORY in r``):
the common response, a dict without one, then costs no call."""


def health_of(response: object) -> tuple[HealthCheck, ...] | None:
    """The findings of a verify response's trajectory (``ng_trajectory``); ``None`` when it carries none."""
    trajectory = response.get(TRAJECTORY) if type(response) is dict else part(response, TRAJECTORY)
    return None if trajectory is None else findings(trajectory)


def findings(trajectory: object) -> tuple[HealthCheck, ...] | None:
    """The checks a rollout's trajectory fails, each once, in ``HEALTH_CHECKS`` order; ``None`` without a
    trajectory (nothing to check: the rollout is not evaluated). Never raises: what is not of the expected
    shape finds nothing."""
    if trajectory is None or isinstance(trajectory, str | bytes | int | float | list):
        return None
    try:
        return _findings(trajectory)
    except Exception:  # nested past the recursion limit, or a caller's object that raised: unread
        return None


def _findings(trajectory: object) -> tuple[HealthCheck, ...]:
    found: list[HealthCheck] = []
    turns = _items(trajectory, "turns")
    if any(
        not (_says_something(part(turn, "answer")) or _says_something(part(turn, "reasoning_content")))
        and not _calls_a_tool(part(turn, "answer"))
        for turn in turns
    ):
        found.append("agent_turn_hollow")
    calls = _items(trajectory, "model_calls")
    if any(
        isinstance(reason := part(part(call, "response_metadata") or {}, "finish_reason"), str)
        and reason in _LENGTH_LIMITS
        and not _has_content(part(call, "response"))
        for call in calls
    ):
        found.append("model_call_runaway_generation")
    if any(part(part(call, "token_stats") or {}, "completion_tokens") == 0 for call in calls):
        found.append("model_call_zero_completion_tokens")
    return tuple(found)

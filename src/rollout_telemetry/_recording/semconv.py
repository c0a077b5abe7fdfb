"""The OpenTelemetry semantic conventions rollout spans follow, pinned here, and every attribute they carry.

A rollout span is a GenAI agent span (``invoke_agent {agent}``, ``gen_ai.operation.name=invoke_agent``) that
keeps the ``rollout.*`` attributes of its own. The GenAI conventions are experimental (status Development),
and they ask an instrumentation to keep emitting the version it emitted (v1.36.0 or before) unless the
environment variable ``OTEL_SEMCONV_STABILITY_OPT_IN`` lists ``gen_ai_latest_experimental``. So:

- by default spans follow **v1.36.0** (``BASELINE``): the agent span, its name and operation, the agent's
  name, input and output token counts;
- with the opt-in they follow **v1.41.0** (``LATEST``), the newest release of the conventions in the
  semantic-conventions repository: the same, plus cached and reasoning token counts and the outcome as a
  ``gen_ai.evaluation.result`` event (a log record in the span's context where a logger provider is
  configured, else a span event: ``SpanRecorder``). Nothing of v1.36.0 was renamed or removed for what is
  emitted here.

Not set: ``gen_ai.provider.name`` (``gen_ai.system`` in v1.36.0), which a rollout cannot know (its model calls
may go to any server; the model server's own spans carry it), and ``gen_ai.agent.id``: a Gym agent has no id
but its name.

The version is the tracer's schema URL, so a backend knows which one a span follows. ``ATTRIBUTES`` is the
one table of every attribute a rollout span or its events carry, from which the docs' reference is rendered
(``markdown_table``); a test checks it against the spans themselves.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = ["EVALUATION_EVENT", "latest_experimental", "schema_url"]

BASELINE = "1.36.0"
"""The GenAI conventions emitted by default: the version the conventions name as the one to keep."""
LATEST = "1.41.0"
"""The GenAI conventions emitted with the opt-in: every name used here is in this release's registry."""
OPT_IN_VARIABLE = "OTEL_SEMCONV_STABILITY_OPT_IN"
OPT_IN_TOKEN = "gen_ai_latest_experimental"
"""The value of ``OPT_IN_VARIABLE`` (a comma-separated list) that selects ``LATEST``."""

EVALUATION_EVENT = "gen_ai.evaluation.result"
"""The event a rollout's outcome is reported as, with the opt-in."""

REGISTRY = "open-telemetry/semantic-conventions-genai"
"""The repository of the GenAI conventions' registry every ``gen_ai.*`` name emitted here is checked against
(tests/recording/test_semconv_registry.py, on the facts in tests/fixtures/semconv-genai/registry.json): each
is defined there, not deprecated, of the registry's type, an enum's value one of its members, and each
event's required attributes present. The repository has no tagged release yet."""
REGISTRY_SCHEMA_URL = "https://opentelemetry.io/schemas/gen-ai/1.42.0"
"""The schema URL the registry's README declares (the tracer's stays the release pinned above: no release of
the registry exists to name)."""
REGISTRY_COMMITS: Mapping[str, str] = {
    "model/gen-ai/registry.yaml": "e9de14bafd9725937c6b0c219897260074a2896c",
    "model/gen-ai/spans.yaml": "e9de14bafd9725937c6b0c219897260074a2896c",
    "model/gen-ai/metrics.yaml": "e9de14bafd9725937c6b0c219897260074a2896c",
    "model/gen-ai/events.yaml": "6fd0d763a092db245a54104fc1124031eb3c51d2",
}
"""The registry's files the check reads, at the commits read."""


def latest_experimental(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``OTEL_SEMCONV_STABILITY_OPT_IN`` asks for the latest experimental GenAI conventions."""
    listed = environ.get(OPT_IN_VARIABLE, "")
    return OPT_IN_TOKEN in (token.strip() for token in listed.split(","))


def schema_url(latest: bool) -> str:
    """The schema URL of the conventions a tracer's spans follow."""
    return f"https://opentelemetry.io/schemas/{LATEST if latest else BASELINE}"


AttributeType = Literal["string", "int", "double", "boolean"]


@dataclass(frozen=True, slots=True)
class SpanAttribute:
    """One attribute of a rollout span or of one of its events: a row of the reference table."""

    name: str
    type: AttributeType
    on: str
    """``span``, or the name of the event that carries it."""
    when: str
    """When it is set."""
    opt_in: bool
    """Only with ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``."""
    meaning: str


def _span(name: str, type_: AttributeType, when: str, meaning: str, *, opt_in: bool = False) -> SpanAttribute:
    return SpanAttribute(name, type_, "span", when, opt_in, meaning)


def _event(event: str, name: str, type_: AttributeType, when: str, meaning: str) -> SpanAttribute:
    return SpanAttribute(name, type_, event, when, event == EVALUATION_EVENT, meaning)


_OUTCOME = "at the outcome"
_FOLLOWED = "follow mode (`serve PATH` with `--otlp-endpoint`, `RunFollower(spans=True)`)"

ATTRIBUTES: tuple[SpanAttribute, ...] = (
    _span(
        "gen_ai.operation.name", "string", "always",
        "`invoke_agent`: the rollout is one invocation of its agent",
    ),
    _span("gen_ai.agent.name", "string", "always", "the agent, as its metrics label it"),
    _span("rollout.agent", "string", "always", "the agent (the same value)"),
    _span("rollout.task_index", "int", "when given, or on the row", "the task index"),
    _span("rollout.rollout_index", "int", "when given, or on the row", "the rollout's index within its task"),
    _span("rollout.attempt", "int", "when given, or on the row (0 for a first try)", "the attempt number"),
    _span("rollout.disposition", "string", _OUTCOME, "`measured`, `masked`, `unscored`, `failed`, `omitted`"),
    _span("rollout.reward", "double", "when the rollout carried a reward", "the reward"),
    _span("rollout.mask_sample", "boolean", _OUTCOME, "whether the reward was masked"),
    _span(
        "rollout.failure_kind", "string", "when the outcome names a kind",
        "the failure kind (its metrics label unless the rollout was measured)",
    ),
    _span(
        "error.type", "string", "failed rollouts only (the span status is then ERROR)",
        "the failure kind, `unspecified` without one",
    ),
    _span(
        "rollout.truncation_cause", "string", "when the model response was cut short",
        "why: `output_cap`, `context_window`, `turn_budget`, `content_filter` or `other`, as "
        "`rollout_truncated_total{cause}` counts it",
    ),
    _span(
        "rollout.truncation_reason", "string", "when the model response was cut short",
        "the `incomplete_details.reason` or `finish_reason`, after the `redact_reason` hook, cut to "
        "`reason_limit` characters (never a label)",
    ),
    _span(
        "gen_ai.usage.input_tokens", "int", "when the model response carries `usage`",
        "input tokens of the model response (`usage.input_tokens`, cached ones included)",
    ),
    _span(
        "gen_ai.usage.output_tokens", "int", "when the model response carries `usage`",
        "output tokens of the model response (`usage.output_tokens`, reasoning included)",
    ),
    _span(
        "gen_ai.usage.cache_read.input_tokens", "int", "when `usage` counts cached input tokens (over 0)",
        "input tokens served from the provider's cache (`input_tokens_details.cached_tokens`)", opt_in=True,
    ),
    _span(
        "gen_ai.usage.reasoning.output_tokens", "int", "when `usage` counts reasoning tokens (over 0)",
        "output tokens spent on reasoning (`output_tokens_details.reasoning_tokens`)", opt_in=True,
    ),
    _span(
        "rollout.failure.stage", "string",
        "when a failure names its stage or delivery (the lifecycle's current stage by default, a followed "
        "row's `_ng_failure_stage`)",
        "NeMo Gym's failure stage: `admission`, `seed`, `agent`, `verification`, `cleanup` or `unknown`",
    ),
    _span(
        "rollout.failure.delivery", "string", "when a failure names its stage or delivery",
        "whether its request reached the environment: `not_sent`, `possibly_delivered`, `delivered` or "
        "`unknown`",
    ),
    _span(
        "rollout.attempts", "int",
        "with the coverage account, on the attempt that made its identity's outcome final",
        "the attempts the identity took, as `rollout_attempts` counts them",
    ),
    _span(
        "rollout.turns", "int", f"{_FOLLOWED}, rows with `ng_perf.num_turns`",
        "the rollout's model turns, as NeMo Gym's `ng_perf` counts them",
    ),
    _span(
        "rollout.tool_calls", "int", f"{_FOLLOWED}, rows with `ng_perf.num_tool_calls`",
        "the rollout's tool calls, as NeMo Gym's `ng_perf` counts them",
    ),
    _span(
        "nemo.gym.rollout.id", "string", f"{_FOLLOWED}, rows with a task and rollout index",
        "NeMo Gym's rollout id (`_ng_rollout_id`, else `<task>-<rollout>`, `-a<attempt>` for a retry), the "
        "attribute of Gym's own spans of the rollout",
    ),
    _span(
        "rollout.timing", "string", _FOLLOWED,
        "`ng_perf`: the span lasts the row's `ng_perf.total_latency_ms` and ends when the row was read; "
        "`read`: the row has no timing, and the span is an instant, when it was read",
    ),
    _event(
        "rollout.failure", "rollout.failure_reason", "string", "when the outcome has a reason",
        "free text, after `redact_reason`, cut to `reason_limit` characters; also the ERROR status's "
        "description",
    ),
    _event("rollout.stalled", "rollout.stage", "string", "when the rollout is found stalled", "its stage"),
    _event(
        "rollout.stalled", "rollout.age_seconds", "double", "when the rollout is found stalled",
        "how long it had been in flight",
    ),
    _event(EVALUATION_EVENT, "gen_ai.evaluation.name", "string", _OUTCOME, "`reward`"),
    _event(
        EVALUATION_EVENT, "gen_ai.evaluation.score.value", "double", "when the rollout carried a reward",
        "the reward",
    ),
    _event(
        EVALUATION_EVENT, "gen_ai.evaluation.score.label", "string", _OUTCOME,
        "the disposition: `measured`, `masked` (the score is no valid measurement), `unscored`, `failed` or "
        "`omitted`",
    ),
    _event(
        EVALUATION_EVENT, "error.type", "string", "unless the rollout was measured",
        "the failure kind, `unspecified` without one",
    ),
    _event(
        EVALUATION_EVENT, "gen_ai.evaluation.explanation", "string",
        "only with a `redact_reason` hook, when the outcome has a reason",
        "the reason as the hook returned it, cut to `reason_limit` characters",
    ),
)  # fmt: skip
"""Every attribute of a rollout span and of its events, in the order the reference lists them."""

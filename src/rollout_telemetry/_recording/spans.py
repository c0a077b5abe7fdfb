"""Rollout spans through ``opentelemetry-api``: one span per rollout, or attributes on the current span.

With no SDK configured the global tracer provider is a proxy with nothing behind it; the recorder looks
that up at most once a second (on the telemetry's clock) and in between returns at once, so tracing costs
close to nothing until a user configures it.

The agent and failure kind on a span are the labels the account uses (one resolution of names), and a span
is always ended and its context detached, even when the ``redact`` hook raises.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Literal

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import ProxyTracerProvider, Span, Status, StatusCode, TracerProvider

from rollout_telemetry._contract.generation import truncation_cause
from rollout_telemetry._contract.outcome import Classified, Disposition
from rollout_telemetry.errors import ConfigError

if TYPE_CHECKING:
    from rollout_telemetry._store.names import Names

__all__ = [
    "ATTRIBUTES",
    "DEFAULT_REASON_LIMIT",
    "OpenSpan",
    "SpanMode",
    "SpanRecorder",
]

SpanMode = Literal["span", "annotate", "off"]

DEFAULT_REASON_LIMIT = 256
"""``failure_reason`` on spans is truncated to this many characters unless configured otherwise."""

ATTRIBUTES: Mapping[str, str] = {
    "gen_ai.agent.name": "the agent (OpenTelemetry GenAI convention)",
    "rollout.agent": "the agent",
    "rollout.task_index": "task index, when given",
    "rollout.rollout_index": "rollout index within the task, when given",
    "rollout.attempt": "attempt number, when given",
    "rollout.disposition": "measured, masked, unscored, failed or omitted",
    "rollout.reward": "the reward, when the rollout carried one",
    "rollout.mask_sample": "whether the reward was masked",
    "rollout.failure_kind": "the failure kind of a masked, unscored, failed or omitted rollout",
    "error.type": "the failure kind, on failed rollouts only (span status ERROR)",
    "rollout.failure_reason": "on the 'rollout.failure' event: free text, truncated and redactable",
    "rollout.truncation_cause": "why the answer was cut short, as rollout_truncated_total{cause} counts it",
    "rollout.truncation_reason": "the raw incomplete_details.reason or finish_reason, cut to reason_limit",
}
"""Every span attribute the recorder sets, with its meaning."""

_SCOPE = "rollout_telemetry"
_RECHECK_SECONDS = 1.0


def _identity(
    agent: str, task_index: int | None, rollout_index: int | None, attempt: int | None
) -> dict[str, str | int]:
    attributes: dict[str, str | int] = {"gen_ai.agent.name": agent, "rollout.agent": agent}
    if task_index is not None:
        attributes["rollout.task_index"] = task_index
    if rollout_index is not None:
        attributes["rollout.rollout_index"] = rollout_index
    if attempt is not None:
        attributes["rollout.attempt"] = attempt
    return attributes


class OpenSpan:
    """A span a rollout opened (or annotates), with the context token to restore when it ends."""

    __slots__ = ("agent", "owned", "span", "token")

    def __init__(self, span: Span, token: object | None, owned: bool, agent: str) -> None:
        self.span = span
        self.token = token
        self.owned = owned
        self.agent = agent


class SpanRecorder:
    """Opens and closes rollout spans.

    Args:
        tracer_provider: the provider to use; the global one (looked up per rollout) by default.
        mode: ``"span"``, ``"annotate"`` or ``"off"``.
        reason_limit: maximum characters of ``failure_reason`` on a span.
        redact: applied to ``failure_reason`` before truncation.
        clock: monotonic seconds; the lifecycle passes the account's, so one clock read serves both.
        names: resolves the agent and kind labels on spans; without one, names go on spans as given.
    """

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        mode: SpanMode = "span",
        reason_limit: int = DEFAULT_REASON_LIMIT,
        redact: Callable[[str], str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        names: Names | None = None,
    ) -> None:
        if mode not in ("span", "annotate", "off"):
            msg = f"span_mode must be 'span', 'annotate' or 'off', got {mode!r}"
            raise ConfigError(msg)
        self._provider = tracer_provider
        self._mode = mode
        # Until this clock() value start() opens nothing: forever when spans are off, for a second after
        # finding no SDK configured.
        self._quiet_until = math.inf if mode == "off" else -math.inf
        self._names = names
        self._clock = clock
        self._reason_limit = reason_limit
        self._redact = redact
        self._own_tracer: trace.Tracer | None = None
        self._global_provider: TracerProvider | None = None
        self._global_tracer: trace.Tracer | None = None
        self._recheck_at = 0.0

    def clean_reason(self, reason: str) -> str:
        """Apply the redaction hook and the length limit to a failure reason."""
        if self._redact is not None:
            reason = self._redact(reason)
        if len(reason) > self._reason_limit:
            reason = reason[: self._reason_limit] + "…"
        return reason

    def _tracer(self) -> trace.Tracer | None:
        if self._provider is not None:
            if self._own_tracer is None:
                self._own_tracer = self._provider.get_tracer(_SCOPE)
            return self._own_tracer
        # Looking up the global provider costs more than recording a rollout, so the answer is kept for
        # a second: a provider configured later is picked up within that second.
        now = self._clock()
        if now < self._recheck_at:
            return self._global_tracer
        self._recheck_at = now + _RECHECK_SECONDS
        provider = trace.get_tracer_provider()
        if type(provider) is ProxyTracerProvider or isinstance(provider, trace.NoOpTracerProvider):
            self._global_tracer = None
            if self._mode == "span":
                self._quiet_until = self._recheck_at
        elif provider is not self._global_provider:
            self._global_provider = provider
            self._global_tracer = provider.get_tracer(_SCOPE)
        return self._global_tracer

    def start(
        self,
        agent: str,
        task_index: int | None,
        rollout_index: int | None,
        attempt: int | None,
        now: float,
    ) -> OpenSpan | None:
        """Open the rollout's span (or pick up the current one); ``None`` when tracing is off.

        ``now`` is the rollout's start on the recorder's clock.
        """
        if now < self._quiet_until:
            return None
        mode = self._mode
        if self._names is not None:
            agent = self._names.agent(agent)[0]
        if mode == "span":
            tracer = self._tracer()
            if tracer is None:
                return None
        elif mode == "annotate":
            current = trace.get_current_span()
            if not current.is_recording():
                return None
            current.set_attributes(_identity(agent, task_index, rollout_index, attempt))
            return OpenSpan(current, None, owned=False, agent=agent)
        else:
            return None
        span = tracer.start_span(
            f"rollout {agent}", attributes=_identity(agent, task_index, rollout_index, attempt)
        )
        token = otel_context.attach(trace.set_span_in_context(span))
        return OpenSpan(span, token, owned=True, agent=agent)

    def event(self, open_span: OpenSpan, name: str, attributes: Mapping[str, str | float]) -> None:
        """Add an event to a rollout's open span."""
        open_span.span.add_event(name, dict(attributes))

    def finish(self, open_span: OpenSpan, outcome: Classified) -> None:
        """Set the outcome on the span, mark a failure as an error, and end a span this recorder opened.

        The span is ended and its context detached whatever happens here (a raising ``redact`` hook
        included); the hook's exception is raised after that.
        """
        disposition, reward, failure_kind, failure_reason, generation = outcome
        span = open_span.span
        try:
            attributes: dict[str, str | float | bool] = {
                "rollout.disposition": disposition.value,
                "rollout.mask_sample": disposition is Disposition.MASKED,
            }
            if reward is not None:
                attributes["rollout.reward"] = reward
            if (
                failure_kind is not None
                and self._names is not None
                and disposition is not Disposition.MEASURED
            ):
                failure_kind = self._names.kind(open_span.agent, failure_kind)[0]
            if failure_kind is not None:
                attributes["rollout.failure_kind"] = failure_kind
            if disposition is Disposition.FAILED:
                attributes["error.type"] = failure_kind or "unspecified"
            if generation is not None and generation[1] is not None:  # the raw reason: here and nowhere else
                attributes["rollout.truncation_cause"] = truncation_cause(generation[1])
                attributes["rollout.truncation_reason"] = generation[1][: self._reason_limit]
            span.set_attributes(attributes)
            cleaned = self.clean_reason(failure_reason) if failure_reason is not None else None
            if cleaned is not None:
                span.add_event("rollout.failure", {"rollout.failure_reason": cleaned})
            if disposition is Disposition.FAILED:
                span.set_status(Status(StatusCode.ERROR, cleaned))
        finally:
            if open_span.owned:
                try:
                    if open_span.token is not None:
                        otel_context.detach(open_span.token)  # type: ignore[arg-type]
                finally:
                    span.end()

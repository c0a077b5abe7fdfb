"""Rollout spans through ``opentelemetry-api``: one span per rollout, or attributes on the current span.

A rollout span is a GenAI agent span (``invoke_agent {agent}``) with the rollout's own ``rollout.*``
attributes; which GenAI conventions it follows, and every attribute it carries, are in ``semconv``.

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

from rollout_telemetry._contract.failure_where import Where
from rollout_telemetry._contract.generation import truncation_cause
from rollout_telemetry._contract.outcome import Classified, Disposition
from rollout_telemetry._contract.shown import shown
from rollout_telemetry._recording.semconv import (
    EVALUATION_EVENT,
    latest_experimental,
    schema_url,
)
from rollout_telemetry.errors import ConfigError

if TYPE_CHECKING:
    from opentelemetry._logs import Logger, LoggerProvider

    from rollout_telemetry._store.names import Names

__all__ = [
    "DEFAULT_REASON_LIMIT",
    "Attributes",
    "EvaluationEvent",
    "OpenSpan",
    "SpanMode",
    "SpanRecorder",
    "recovery_attributes",
]

EvaluationEvent = Literal["log", "span"]
"""How a rollout's ``gen_ai.evaluation.result`` event is emitted (``RolloutTelemetry(evaluation_event=...)``):
``log``, a log record tied to the rollout's span (a span event without a logger provider), or ``span``."""

SpanMode = Literal["span", "annotate", "off"]
"""Where a rollout's facts go (``RolloutTelemetry(span_mode=...)``): ``span`` (one span per rollout),
``annotate`` (attributes on the caller's current span) or ``off``."""

DEFAULT_REASON_LIMIT = 256
"""``failure_reason`` on spans is truncated to this many characters unless configured otherwise."""

_SCOPE = "rollout_telemetry"
_RECHECK_SECONDS = 1.0
_ROOT = otel_context.Context()
"""The empty context: a span started in it is a root span, whatever the reading thread's context is."""

Attributes = dict[str, str | int | float | bool]


def recovery_attributes(where: Where | None, attempts: int | None) -> Attributes:
    """A rollout's failure stage and delivery, and the attempts its identity took, as span attributes."""
    attributes: Attributes = {}
    if where is not None:
        attributes["rollout.failure.stage"], attributes["rollout.failure.delivery"] = where
    if attempts is not None:
        attributes["rollout.attempts"] = attempts
    return attributes


def span_name(agent: str) -> str:
    """The name of a rollout's span (the GenAI agent span's ``invoke_agent {gen_ai.agent.name}``)."""
    return f"invoke_agent {agent}"


def _identity(
    agent: str, task_index: int | None, rollout_index: int | None, attempt: int | None
) -> Attributes:
    # Set when the span starts: the conventions ask for the operation and the agent's name then (sampling).
    attributes: Attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent,
        "rollout.agent": agent,
    }
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
        latest: follow the latest experimental GenAI conventions (``semconv.LATEST``) rather than the
            baseline; by default, whether ``OTEL_SEMCONV_STABILITY_OPT_IN`` lists
            ``gen_ai_latest_experimental`` when the recorder is made.
        logger_provider: where the ``gen_ai.evaluation.result`` event goes as a log record (with ``latest``);
            the global one by default.
        evaluation_event: ``"log"``: the event as a log record tied to the span, when a logger provider is
            configured (given, or the global one), else as a span event; ``"span"``: always a span event.
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
        latest: bool | None = None,
        logger_provider: LoggerProvider | None = None,
        evaluation_event: EvaluationEvent = "log",
    ) -> None:
        if mode not in ("span", "annotate", "off"):
            msg = f"span_mode must be 'span', 'annotate' or 'off', got {shown(mode, 60)}"
            raise ConfigError(msg)
        if evaluation_event not in ("log", "span"):
            msg = f"evaluation_event must be 'log' or 'span', got {shown(evaluation_event, 60)}"
            raise ConfigError(msg)
        self._logger_provider = logger_provider
        self._evaluation_as = evaluation_event
        self._log_state: tuple[object, Logger | None] = (None, None)  # (provider seen, its logger): one read
        self._provider = tracer_provider
        self._mode = mode
        # Until this clock() value start() opens nothing: forever when spans are off, for a second after
        # finding no SDK configured.
        self._quiet_until = math.inf if mode == "off" else -math.inf
        self._names = names
        self._clock = clock
        self._reason_limit = reason_limit
        self._redact = redact
        self.latest = latest_experimental() if latest is None else latest
        """Whether spans follow the latest experimental GenAI conventions (see ``semconv``)."""
        self._schema_url = schema_url(self.latest)
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

    def redacted(self, reason: str) -> str | None:
        """The reason as the redaction hook returns it (limited in length), ``None`` without a hook: what
        may go where free text is kept (the rollout log)."""
        return None if self._redact is None else self.clean_reason(reason)

    def _event_logger(self) -> Logger | None:
        """The logger the evaluation event goes to as a log record; ``None`` without a logger provider (the
        given one, else the global one once an SDK sets it): the event then goes on the span."""
        from opentelemetry import _logs  # only with the opt-in: recording without it loads no logs API

        provider = self._logger_provider or _logs.get_logger_provider()
        seen, logger = self._log_state
        if provider is not seen:
            # None set: the API's no-op, or its proxy (a private class of the API, told by name).
            proxy = type(provider).__name__.startswith("Proxy")
            unset = proxy or isinstance(provider, _logs.NoOpLoggerProvider)
            logger = None if unset else provider.get_logger(_SCOPE, schema_url=self._schema_url)
            self._log_state = (provider, logger)  # one assignment: a reader sees both or neither
        return logger

    def _tracer(self) -> trace.Tracer | None:
        if self._provider is not None:
            if self._own_tracer is None:
                self._own_tracer = self._provider.get_tracer(_SCOPE, schema_url=self._schema_url)
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
            self._global_tracer = provider.get_tracer(_SCOPE, schema_url=self._schema_url)
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
            span_name(agent), attributes=_identity(agent, task_index, rollout_index, attempt)
        )
        token = otel_context.attach(trace.set_span_in_context(span))
        return OpenSpan(span, token, owned=True, agent=agent)

    def event(self, open_span: OpenSpan, name: str, attributes: Mapping[str, str | float]) -> None:
        """Add an event to a rollout's open span."""
        open_span.span.add_event(name, dict(attributes))

    def finished(  # noqa: PLR0917 - the identity as plain arguments, as start() takes it
        self,
        agent: str,
        task_index: int | None,
        rollout_index: int | None,
        attempt: int | None,
        outcome: Classified,
        start_ns: int,
        end_ns: int,
        attributes: Attributes | None = None,
    ) -> None:
        """One span for a rollout that had finished before it was seen (a row of a followed file).

        A root span from ``start_ns`` to ``end_ns`` (wall-clock nanoseconds) with the same attributes as a
        lifecycle span, plus ``attributes``. Only in ``"span"`` mode: there is no current span to annotate.
        """
        if self._mode != "span":
            return
        tracer = self._tracer()
        if tracer is None:
            return
        if self._names is not None:
            agent = self._names.agent(agent)[0]
        identity = _identity(agent, task_index, rollout_index, attempt)
        if attributes:
            identity.update(attributes)
        span = tracer.start_span(span_name(agent), context=_ROOT, attributes=identity, start_time=start_ns)
        self.finish(OpenSpan(span, None, owned=True, agent=agent), outcome, end_ns)

    def finish(
        self,
        open_span: OpenSpan,
        outcome: Classified | None,
        end_ns: int | None = None,
        *,
        facts: tuple[Where | None, int | None] = (None, None),
    ) -> None:
        """Set the outcome on the span, mark a failure as an error, and end a span this recorder opened;
        ``None`` (a rollout abandoned without an outcome) puts a ``rollout.abandoned`` event there instead.
        ``facts``: a failure's (stage, delivery) and the attempts its identity took, when known.

        The span is ended (at ``end_ns``, wall-clock nanoseconds, if given) and its context detached whatever
        happens here (a raising ``redact`` hook included); the hook's exception is raised after that.
        """
        span = open_span.span
        try:
            if outcome is None:
                span.add_event("rollout.abandoned")
            else:
                if facts[0] is not None or facts[1] is not None:
                    span.set_attributes(recovery_attributes(*facts))
                self._outcome(open_span, outcome, end_ns)
        finally:
            if open_span.owned:
                try:
                    if open_span.token is not None:
                        otel_context.detach(open_span.token)  # type: ignore[arg-type]
                finally:
                    span.end(end_ns)

    def _outcome(self, open_span: OpenSpan, outcome: Classified, end_ns: int | None = None) -> None:
        # The outcome's attributes, its failure event, the evaluation event (opt-in) and the error status.
        span = open_span.span
        disposition, reward, failure_kind, failure_reason, generation = outcome
        attributes: Attributes = {
            "rollout.disposition": disposition.value,
            "rollout.mask_sample": disposition is Disposition.MASKED,
        }
        if reward is not None:
            attributes["rollout.reward"] = reward
        if self._names is not None:
            failure_kind = self._names.outcome_kind(open_span.agent, disposition, failure_kind)
        if failure_kind is not None:
            attributes["rollout.failure_kind"] = failure_kind
        if disposition is Disposition.FAILED:
            attributes["error.type"] = failure_kind or "unspecified"
        if generation is not None:
            if generation[0] is not None:
                self._usage(attributes, generation[0])
            if generation[1] is not None:  # free text: through the redact hook, here and nowhere else
                attributes["rollout.truncation_cause"] = truncation_cause(generation[1])
                attributes["rollout.truncation_reason"] = self.clean_reason(generation[1])
        span.set_attributes(attributes)
        cleaned = self.clean_reason(failure_reason) if failure_reason is not None else None
        if cleaned is not None:
            span.add_event("rollout.failure", {"rollout.failure_reason": cleaned})
        if disposition is Disposition.FAILED:
            span.set_status(Status(StatusCode.ERROR, cleaned))
        if self.latest:  # last: a log processor that raises loses the event alone
            evaluation = self._evaluation(disposition, reward, failure_kind, cleaned)
            logger = self._event_logger() if self._evaluation_as == "log" else None
            if logger is None:
                span.add_event(EVALUATION_EVENT, evaluation)
            else:  # a log record in the span's context: its trace and span ids
                at = time.time_ns() if end_ns is None else end_ns
                logger.emit(
                    event_name=EVALUATION_EVENT,
                    attributes=evaluation,
                    context=trace.set_span_in_context(span),
                    timestamp=at,
                )

    def _evaluation(
        self, disposition: Disposition, reward: float | None, failure_kind: str | None, cleaned: str | None
    ) -> Attributes:
        # The outcome as a GenAI evaluation result: the reward is the score, the disposition its label.
        evaluation: Attributes = {
            "gen_ai.evaluation.name": "reward",
            "gen_ai.evaluation.score.label": disposition.value,
        }
        if reward is not None:
            evaluation["gen_ai.evaluation.score.value"] = reward
        if disposition is not Disposition.MEASURED:
            evaluation["error.type"] = failure_kind or "unspecified"
        if cleaned is not None and self._redact is not None:
            # Free text reaches the event that evaluation tools surface only through the user's hook.
            evaluation["gen_ai.evaluation.explanation"] = cleaned
        return evaluation

    def _usage(self, attributes: Attributes, tokens: tuple[int, int, int, int]) -> None:
        input_tokens, output_tokens, cached, reasoning = tokens
        attributes["gen_ai.usage.input_tokens"] = input_tokens
        attributes["gen_ai.usage.output_tokens"] = output_tokens
        # Only with the opt-in (newer than the baseline), and only when counted: a response that does not
        # report them reads as 0, which would claim that none were cached or spent on reasoning.
        if self.latest:
            if cached:
                attributes["gen_ai.usage.cache_read.input_tokens"] = cached
            if reasoning:
                attributes["gen_ai.usage.reasoning.output_tokens"] = reasoning

"""The facade a collector holds: ``record*``, ``rollout()``, ``serve()`` and ``progress_metrics()``.

Every recording path writes the one account; the exporters read it when asked. Recording never raises
into the collector (unless ``strict=True``): bad input is logged once per cause and counted in
``rollout_telemetry_rejected_total{reason}``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from prometheus_client.registry import CollectorRegistry

from rollout_telemetry._contract.failure_where import Where, failure_where
from rollout_telemetry._contract.group_state import DEFAULT_MIN_VALID
from rollout_telemetry._contract.health import TRAJECTORY, health_of
from rollout_telemetry._contract.identity import Member, member
from rollout_telemetry._contract.outcome import (
    REACHED_OUTPUT,
    Classified,
    Disposition,
    check_outcome,
    classify,
)
from rollout_telemetry._facade.expected import ExpectedWork
from rollout_telemetry._facade.reading import Reading
from rollout_telemetry._recording.lifecycle import Cleanup, OfferedContext, RolloutContext, Shared
from rollout_telemetry._recording.output import OutputWrite
from rollout_telemetry._recording.rollout_log import INFO, ROLLOUTS, log_outcome
from rollout_telemetry._recording.runtime import (
    DEFAULT_LAG_INTERVAL,
    LoopLag,
    LoopWatch,
    register_process_collectors,
    unwatch_gc,
    watch_gc,
)
from rollout_telemetry._recording.spans import DEFAULT_REASON_LIMIT, SpanMode, SpanRecorder
from rollout_telemetry._recording.stalls import DEFAULT_STALL_AFTER, Stalls, stall_bound
from rollout_telemetry._store.account import Account, InFlight
from rollout_telemetry._store.coverage import Coverage
from rollout_telemetry._store.groups import Groups
from rollout_telemetry._store.names import DEFAULT_MAX_AGENTS, DEFAULT_MAX_KINDS_PER_AGENT, Names
from rollout_telemetry._store.rejections import Rejections
from rollout_telemetry._store.runtime import Runtime
from rollout_telemetry.errors import OutcomeError, Rejection
from rollout_telemetry.exporters.prometheus import (
    AccountCollector,
    CoverageCollector,
    GroupsCollector,
    RuntimeCollector,
)
from rollout_telemetry.failure_kinds import KindValidator

if TYPE_CHECKING:
    import asyncio

    from opentelemetry.trace import TracerProvider

__all__ = ["RolloutTelemetry"]


_log = logging.getLogger("rollout_telemetry")

_FAILED, _OMITTED = Disposition.FAILED, Disposition.OMITTED


class RolloutTelemetry(ExpectedWork, Reading):
    """Live telemetry for one rollout collection: record outcomes, serve them, view them.

    Args:
        run: the run's name, added as a ``run`` label on every series.
        registry: the prometheus_client registry to register with; a new one by default.
        const_labels: more labels for every series.
        strict: raise bad input to the caller instead of counting and logging it.
        clock: monotonic seconds, injectable for tests.
        max_agents: cap on distinct ``agent`` labels; further ones are counted as ``_other``.
        max_kinds_per_agent: cap on distinct ``failure_kind`` labels per agent.
        tracer_provider: where rollout spans go; the global one by default.
        span_mode: ``"span"`` (one span per rollout), ``"annotate"`` (attributes on the current span) or
            ``"off"``.
        reason_limit: ``failure_reason`` on spans is truncated to this many characters.
        redact_reason: optional hook applied to ``failure_reason`` before it goes on a span.
        stall_after: seconds a rollout may be in flight (lifecycle API) before it counts as stalled; ``None``
            turns stall detection off.
        stall_after_by_agent: per-agent overrides of ``stall_after``.
        slow_after: seconds a rollout may be in flight (lifecycle API) before it is ``slow`` (state of
            ``rollout_in_flight``, ``/rollouts``); ``None``, the default, turns the state off.
        slow_after_by_agent: per-agent overrides of ``slow_after``.
        min_valid_per_group: valid members a group needs to be more than ``insufficient`` (see ``groups``).
        runtime_metrics: publish the collecting process's runtime: prometheus_client's process, platform and
            garbage-collector collectors, the garbage-collection pauses, and the lag of each event loop an
            ``async with`` rollout block runs on (``watch_event_loop``).
        loop_lag_interval: seconds between two samples of an event loop's lag.
        rollout_log: write one JSON line per rollout that ends, at INFO on the logger
            ``rollout_telemetry.rollouts`` (its schema: docs/reference/rollout-log.md), for runs without
            OpenTelemetry; the logger's level and handlers decide where it goes.
    """

    def __init__(
        self,
        run: str | None = None,
        *,
        registry: CollectorRegistry | None = None,
        const_labels: Mapping[str, str] | None = None,
        strict: bool = False,
        clock: Callable[[], float] = time.monotonic,
        max_agents: int = DEFAULT_MAX_AGENTS,
        max_kinds_per_agent: int = DEFAULT_MAX_KINDS_PER_AGENT,
        tracer_provider: TracerProvider | None = None,
        span_mode: SpanMode = "span",
        reason_limit: int = DEFAULT_REASON_LIMIT,
        redact_reason: Callable[[str], str] | None = None,
        stall_after: float | None = DEFAULT_STALL_AFTER,
        stall_after_by_agent: Mapping[str, float] | None = None,
        min_valid_per_group: int = DEFAULT_MIN_VALID,
        runtime_metrics: bool = True,
        loop_lag_interval: float = DEFAULT_LAG_INTERVAL,
        slow_after: float | None = None,
        slow_after_by_agent: Mapping[str, float] | None = None,
        rollout_log: bool = False,
    ) -> None:
        self._clock = clock
        self._rollout_log = rollout_log
        self._started = clock()
        self.names = Names(
            max_agents=max_agents, max_kinds_per_agent=max_kinds_per_agent, validator=KindValidator()
        )
        """The one resolution of agent and failure-kind labels (cut, capped) that every store uses."""
        bound = stall_bound(stall_after, stall_after_by_agent, self.names)
        slow = stall_bound(slow_after, slow_after_by_agent, self.names, "slow_after")
        self._account = Account(names=self.names, clock=clock, stall_after=bound, slow_after=slow)
        self.rejections = Rejections(self._account.reject, strict=strict)
        """The rejection policy (count by reason, warn once per cause, raise under ``strict``)."""
        self._stalls = Stalls(self._account, stall_after, self.rejections.reject, slow_after)
        self._account.first_context = self._watch_stalls  # when there is something to watch
        self.groups = Groups(self.names, min_valid=min_valid_per_group)
        """The groups of the run (GRPO-style): fed by ``_settle``, with every outcome that has an identity."""
        self._expected: dict[str, int] = {}
        self._coverage: Coverage | None = None  # kept once expected work is declared, or files followed
        labels: dict[str, str] = {}
        if run is not None:
            labels["run"] = run
        labels.update(const_labels or {})
        self.const_labels: Mapping[str, str] = labels
        self.registry = registry if registry is not None else CollectorRegistry()
        self._collector = AccountCollector(self.snapshot, labels)
        self.registry.register(self._collector)
        self.registry.register(GroupsCollector(self.groups.snapshot, labels))
        self.registry.register(CoverageCollector(self.coverage_snapshot, labels))
        self._runtime = Runtime()
        self._loops = LoopLag(self._runtime, loop_lag_interval)
        self._watch_loops = runtime_metrics  # the first async rollout block on a loop starts its sampler
        self.registry.register(RuntimeCollector(self._runtime.snapshot, labels))
        if runtime_metrics:
            watch_gc(self._runtime)
            register_process_collectors(self.registry)
        self.spans = SpanRecorder(
            tracer_provider=tracer_provider,
            mode=span_mode,
            reason_limit=reason_limit,
            redact=redact_reason,
            clock=clock,
            names=self.names,
        )
        self._shared = Shared(
            self._account, self._settle, self.spans, self.rejections, clock, self._loop_entered, rollout_log
        )

    # -- recording ----------------------------------------------------------------------------------

    def record(
        self,
        agent: str,
        response: object,
        task_index: int | None = None,
        rollout_index: int | None = None,
        attempt: int | None = None,
    ) -> None:
        """Record one completed rollout from its verify response (dict, pydantic model or object).

        ``mask_sample=True`` makes it masked, a missing or ``None`` reward makes it unscored, otherwise it
        is measured; ``response.usage`` and truncation are counted when present. With ``task_index`` and
        ``rollout_index`` the rollout is a member of its task's group (``expect``'s ``group_size``) and, once
        expected work is declared (``expect``), of the run's coverage, where its newest ``attempt``
        decides (none given is attempt 0, as NeMo Gym's unstamped first attempt). Bad input is counted and
        logged (raised with ``strict=True``).
        """
        # task_index, rollout_index and attempt are not keyword-only: a cheaper call (docs/performance.md).
        try:
            outcome, member = classify(response), None
            if task_index is None and self._coverage is None:  # the common call: straight to the account
                self._account.count(agent, outcome)
            else:
                member = self._member(task_index, rollout_index, attempt)
                # The trajectory's health: a dict without one (the common response) costs no call.
                trajectory = type(response) is not dict or TRAJECTORY in response
                health = health_of(response) if trajectory else None
                self._settle(agent, outcome, None, member, None, False, health)
            if self._rollout_log and ROLLOUTS.isEnabledFor(INFO):
                self._log_rollout(agent, outcome, member, False)
        except Exception as exc:  # the collector must never be taken down by its telemetry
            self.rejections.reject(exc)

    def _member(self, task_index: object, rollout_index: object, attempt: object = None) -> Member | None:
        """A rollout's identity, checked before its outcome is counted (``_blocks.check_identity``); a bad one
        is a counted rejection (``invalid_task_index``, ...) and the outcome is counted without it. Neither a
        task index nor an attempt: a rollout without an identity (``None``)."""
        if task_index is None and attempt is None:
            return None
        try:
            return member(task_index, rollout_index, attempt)
        except OutcomeError as exc:
            self.rejections.reject(exc)
            return None

    def _settle(  # noqa: PLR0917 - positional: the lifecycle calls it once per rollout
        self,
        agent: str,
        outcome: Classified,
        in_flight: InFlight | None = None,
        member: Member | None = None,
        exemplar: tuple[str, str] | None = None,
        terminal: bool = False,
        health: tuple[str, ...] | None = None,
        line: int = 0,
        where: Where | None = None,
        timed: bool = True,
    ) -> int | None:
        """Weigh one outcome in the coverage account, count it, then give it to its group: the one path of an
        outcome that has an identity, or that the coverage account must see. Returns the attempts its
        identity took when this outcome made it final (``Coverage.observe``), else ``None``.

        ``member`` is (task index, rollout index, attempt or ``None``), checked before anything was counted
        (``_member``, the follower for a row, the lifecycle when the rollout starts); a bad one was rejected
        and is ``None`` here. ``exemplar`` is the (trace id, span id) of the rollout's span, if any.
        ``terminal`` marks a failure NeMo Gym will not retry; ``health`` the health checks its trajectory
        failed (``health.findings``), ``None`` without one; ``line`` the line of a followed row.

        Raises:
            Rejection: ``duplicate_rollout``, an outcome that reached the output repeating an earlier one of
                the same identity and attempt: nothing is counted (a rollout block's flight still ends, and
                is counted, since it ran).
        """
        coverage = self._coverage
        verdict = None
        if coverage is not None:
            identity, attempt = None, 0
            if member is not None:
                identity, attempt = (member[0], member[1]), member[2] or 0
                member = (member[0], member[1], attempt)  # NeMo Gym's unstamped attempt is 0, groups' too
            disposition = outcome[0]
            times = None
            if timed and identity is not None:
                now = self._clock()
                times = (now if in_flight is None else in_flight[2], now)
            earlier, verdict = coverage.observe(
                agent,
                identity,
                attempt,
                disposition,
                succeeded=disposition in REACHED_OUTPUT,
                terminal=terminal,
                line=line,
                times=times,
            )
            if earlier is not None:
                if in_flight is not None:  # in flight until now: its flight ends, as anything it ran
                    self._account.count(agent, outcome, in_flight, exemplar)
                repeated = f"line {earlier}" if earlier else "an earlier outcome"
                msg = f"repeats {repeated} (same task, rollout and attempt): counted once"
                raise Rejection("duplicate_rollout", msg)
        self._account.count(agent, outcome, in_flight, exemplar)
        if where is not None:
            self._account.failed_at(agent, where)
        if verdict is not None:
            self._account.settled(
                agent, verdict.attempts, verdict.delay, exhausted=verdict.exhausted, kind=outcome[2]
            )
        if health is not None:
            self._account.checked(agent, health)
        if member is not None and self.groups.active:
            self.groups.observe(agent, member[0], member[1], outcome, member[2], health=health)
        return None if verdict is None else verdict.attempts

    def record_failure(
        self,
        agent: str,
        failure_kind: str | None = None,
        *,
        reason: str | None = None,
        task_index: int | None = None,
        rollout_index: int | None = None,
        attempt: int | None = None,
        terminal: bool = False,
        stage: str | None = None,
        delivery: str | None = None,
    ) -> None:
        """Record one rollout that never reached the output; ``reason`` goes to the log, never a label.

        The identity and ``attempt`` are ``record``'s: a failed attempt retried later is replaced by it.
        ``terminal``: the rollout is not to be retried (NeMo Gym's ``_ng_failure_terminal``), so the coverage
        account never counts it ``retryable``. ``stage`` (NeMo Gym's failure stage: ``admission``, ``seed``,
        ``agent``, ``verification``, ``cleanup``) and ``delivery`` (``not_sent``, ``possibly_delivered``,
        ``delivered``) say where it failed and whether its request got through
        (``rollout_failure_stages_total``); a value outside them is a counted rejection (``invalid_stage``,
        ``invalid_delivery``) and the failure is counted with ``unknown``."""
        self._record_absent(
            _FAILED, agent, failure_kind, reason, task_index, rollout_index, attempt, terminal,
            stage, delivery,
        )  # fmt: skip

    def record_omission(
        self,
        agent: str,
        failure_kind: str | None = None,
        *,
        reason: str | None = None,
        task_index: int | None = None,
        rollout_index: int | None = None,
        attempt: int | None = None,
        terminal: bool = False,
        stage: str | None = None,
        delivery: str | None = None,
    ) -> None:
        """Record one rollout left out of the output on purpose; ``reason`` goes to the log.

        The identity, ``attempt``, ``terminal``, ``stage`` and ``delivery`` are ``record_failure``'s."""
        self._record_absent(
            _OMITTED, agent, failure_kind, reason, task_index, rollout_index, attempt, terminal,
            stage, delivery,
        )  # fmt: skip

    def _record_absent(  # noqa: PLR0917 - the identity as plain arguments: no tuple per failure
        self,
        disposition: Disposition,
        agent: str,
        failure_kind: str | None,
        reason: str | None,
        task_index: int | None,
        rollout_index: int | None,
        attempt: int | None,
        terminal: bool,
        stage: object,
        delivery: object,
    ) -> None:
        try:
            outcome, member, where = check_outcome(disposition, None, None, failure_kind, reason), None, None
            if task_index is None and self._coverage is None and stage is None and delivery is None:
                self._account.count(agent, outcome)  # the common call: straight to the account
            else:
                where, refused = failure_where(stage, delivery)
                if task_index is not None or self._coverage is not None:  # as record(): no identity without
                    member = self._member(task_index, rollout_index, attempt)
                self._settle(agent, outcome, None, member, None, terminal, None, 0, where)
                for error in refused:  # the failure is counted, at an unknown stage or delivery
                    self.rejections.reject(error)
            if reason is not None:
                self._log_reason(agent, disposition, failure_kind, reason)
            if self._rollout_log and ROLLOUTS.isEnabledFor(INFO):
                self._log_rollout(agent, outcome, member, terminal, where)
        except Exception as exc:
            self.rejections.reject(exc)

    def _log_reason(self, agent: str, disposition: Disposition, kind: str | None, reason: str) -> None:
        # The reason is free text about one occurrence: a debug log line, never a label.
        if _log.isEnabledFor(logging.DEBUG):
            cleaned = self.spans.clean_reason(reason)
            _log.debug("rollout of %s %s (%s): %s", agent, disposition.value, kind, cleaned)

    def record_classified(
        self,
        agent: str,
        outcome: Classified,
        identity: tuple[int, int] | None = None,
        attempt: int | None = None,
        *,
        terminal: bool = False,
        line: int = 0,
        health: tuple[str, ...] | None = None,
        where: Where | None = None,
    ) -> int | None:
        """Record an outcome already checked by ``outcome.classify`` or ``outcome.absent``.

        For readers that classify themselves (the file follower). ``identity`` is (task index, rollout
        index), checked by the caller: the rollout joins its group and the coverage account, where a higher
        ``attempt`` replaces a lower one. ``terminal`` marks a failure NeMo Gym will not retry, ``line`` the
        row's line (named when a later row repeats it), ``where`` a failure's checked (stage, delivery). Its
        ``failure_reason`` goes to a debug log line, never a label. Returns the attempts the identity took
        when this outcome made it final (see ``_settle``).

        Raises:
            OutcomeError: the agent name is not a non-empty string.
            Rejection: ``duplicate_rollout`` (see ``_settle``): nothing was counted.
        """
        attempts = None
        if identity is None and self._coverage is None and health is None and where is None:
            self._account.count(agent, outcome)
        else:
            member = None if identity is None else (identity[0], identity[1], attempt)
            attempts = self._settle(agent, outcome, None, member, None, terminal, health, line, where, False)
        if outcome[3] is not None:
            self._log_reason(agent, outcome[0], outcome[2], outcome[3])
        if self._rollout_log and ROLLOUTS.isEnabledFor(INFO):
            member = None if identity is None else (identity[0], identity[1], attempt)
            self._log_rollout(agent, outcome, member, terminal, where)
        return attempts

    def _log_rollout(
        self,
        agent: str,
        outcome: Classified,
        member: Member | None,
        terminal: bool,
        where: Where | None = None,
    ) -> None:
        # The rollout's line on rollout_telemetry.rollouts, once counted; a raising redact hook is counted.
        try:
            log_outcome(self.names, self.spans, agent, outcome, member, terminal, where=where)
        except Exception as exc:
            self.rejections.reject(exc)

    def rollout(
        self,
        agent: str,
        *,
        task_index: int | None = None,
        rollout_index: int | None = None,
        attempt: int | None = None,
    ) -> RolloutContext:
        """Track one rollout from start to outcome: ``with`` or ``async with``.

        Inside the block call ``complete(response)``, ``fail(kind, reason=...)`` or ``omit(kind)``. An
        exception escaping the block records a failure and re-raises; leaving without an outcome records
        a failure of kind ``rollout_telemetry:no_outcome`` (``cancelled`` after ``cancel()``). An outcome
        given outside the block is a counted rejection (``outcome_outside_block``), raised with
        ``strict=True``. The rollout counts as ``terminal`` from its outcome until its block exits;
        ``heartbeat()``, ``stage()`` and ``cleanup()`` say what it is doing. Its context is made to be entered
        at once: it is offered and admitted as its block is entered, and its admission wait is its time at
        stage ``admission``. A context made ahead of its block (before waiting for a slot of the collector's
        concurrency, say) is ``offer()``'s.
        """
        return RolloutContext(self._shared, agent, task_index, rollout_index, attempt)

    def offer(
        self,
        agent: str,
        *,
        task_index: int | None = None,
        rollout_index: int | None = None,
        attempt: int | None = None,
    ) -> RolloutContext:
        """A rollout offered to the collector now, ahead of its start: ``rollout()``'s context, made before
        the rollout is admitted (before waiting for a slot of the collector's concurrency, say; NeMo Gym's
        driver offers each rollout it queues).

        It counts as ``offered`` until its block is entered, and the time from now to entering its block is
        its admission wait (``rollout_admission_wait_seconds``), with its time at stage ``admission``. A
        context offered and not entered stays offered while it exists: gone without being entered (its task
        cancelled while it waited, say), it is withdrawn.
        """
        return OfferedContext(self._shared, agent, task_index, rollout_index, attempt, True)

    # -- the collecting process -----------------------------------------------------------------------

    def _watch_stalls(self) -> None:
        # An agent's first rollout context: the stall watcher starts. A thread that cannot start is counted
        # (raised with strict=True, before the context is offered or its rollout in flight).
        try:
            self._stalls.watch()
        except Exception as exc:
            self.rejections.reject(exc)

    def _loop_entered(self) -> None:
        # An async rollout block is entered: its loop gets a lag sampler, once (runtime_metrics=True).
        if self._watch_loops:
            try:
                self._loops.entered()
            except Exception as exc:  # never into the run: the rollout is tracked without lag sampling
                self.rejections.reject(exc)

    def watch_event_loop(
        self, loop: asyncio.AbstractEventLoop | None = None, interval: float | None = None
    ) -> LoopWatch:
        """Sample how late ``loop`` (the running one by default) wakes, into
        ``rollout_telemetry_event_loop_lag_seconds``, every ``interval`` seconds (``loop_lag_interval`` by
        default); ``stop()`` on what it returns ends it. A loop is sampled once per telemetry: an ``async
        with`` rollout block on a loop starts this by itself (``runtime_metrics=True``); call it for a loop
        that runs none. The sampler ends when the loop closes or the telemetry is gone.

        Raises:
            ConfigError: no loop given and none running, a closed loop, or ``interval`` is not positive.
        """
        return self._loops.watch(loop, interval)

    def stop_runtime_metrics(self) -> None:
        """Stop sampling the runtime: every event loop's lag sampler ends and garbage collections are no
        longer timed; the histograms keep what they have. Rollout blocks start no sampler after it
        (``watch_event_loop`` still does)."""
        self._watch_loops = False
        self._loops.stop()
        unwatch_gc(self._runtime)

    def output_write(self) -> OutputWrite:
        """Time one write of the collection's output (a rollout's row appended to the results file, say):
        ``with`` or ``async with``; ``wrote(n)`` inside gives its size in bytes. Its duration, size and
        whether it raised are counted (``rollout_output_write_seconds``, ``rollout_output_write_bytes``,
        ``rollout_output_writes_failed_total``), for every agent at once: one write may hold rows of
        several."""
        return OutputWrite(self._runtime, self._clock, self.rejections.reject)

    def cleanup(self, agent: str) -> Cleanup:
        """Time one cleanup of ``agent`` outside a rollout block (releasing an environment session, say):
        ``with`` or ``async with``; inside a block, ``rollout.cleanup()`` is the same. Its duration, failures
        and whether it is unresolved are counted per agent (``Cleanup``)."""
        return Cleanup(self._shared, agent)

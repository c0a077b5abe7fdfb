"""The facade a collector holds: one way to do each job (docs/reference/api.md).

Every recording path writes the one account; the exporters read it when asked. Recording never raises
into the collector (unless ``strict=True``): bad input is logged once per cause and counted in
``rollout_telemetry_rejected_total{reason}``.
"""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from prometheus_client.registry import Collector, CollectorRegistry

from rollout_telemetry._contract.group_state import DEFAULT_MIN_VALID
from rollout_telemetry._contract.outcome import Disposition, check_outcome
from rollout_telemetry._contract.reward_range import check_reward_range
from rollout_telemetry._contract.shown import shown
from rollout_telemetry._facade.expected import check_work, identity_pairs, inputs_of, task_identities
from rollout_telemetry._recording.cleanup import Cleanup
from rollout_telemetry._recording.context_shared import Shared
from rollout_telemetry._recording.lifecycle import OfferedContext, RolloutContext
from rollout_telemetry._recording.output_write import OutputWrite
from rollout_telemetry._recording.recorder import Recorder
from rollout_telemetry._recording.rollout_log import INFO, ROLLOUTS
from rollout_telemetry._recording.runtime_samplers import (
    DEFAULT_LAG_INTERVAL,
    LoopLag,
    register_process_collectors,
    unwatch_gc,
    watch_gc,
)
from rollout_telemetry._recording.spans import DEFAULT_REASON_LIMIT, EvaluationEvent, SpanMode, SpanRecorder
from rollout_telemetry._recording.stalls import DEFAULT_STALL_AFTER, Stalls, stall_bound
from rollout_telemetry._store.account import Account
from rollout_telemetry._store.names import DEFAULT_MAX_AGENTS, DEFAULT_MAX_KINDS_PER_AGENT, Names
from rollout_telemetry._store.rejections import Rejections
from rollout_telemetry._store.runtime_observations import Runtime
from rollout_telemetry._store.snapshot import AccountSnapshot
from rollout_telemetry._views.progress import coverage_metrics, progress_metrics
from rollout_telemetry.errors import ConfigError
from rollout_telemetry.exporters._prometheus import (
    AccountCollector,
    CoverageCollector,
    GroupsCollector,
    RuntimeCollector,
)

if TYPE_CHECKING:  # the server, the push, the file sources and OpenTelemetry are imported when used
    from opentelemetry._logs import LoggerProvider
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

    from rollout_telemetry._facade.live import LivePage
    from rollout_telemetry._serve.credentials import BasicAuth
    from rollout_telemetry._serve.metrics_server import MetricsServer
    from rollout_telemetry._serve.tls import TLSConfig
    from rollout_telemetry._sources.follow import RunFiles, RunFollower

__all__ = ["RolloutTelemetry"]

_FAILED, _OMITTED = Disposition.FAILED, Disposition.OMITTED


_IDENTITY = ("task_index", "rollout_index", "attempt")
_F = TypeVar("_F", bound=Callable[..., None])


def _keyword_identity(function: _F) -> _F:
    """``function`` with the signature callers see: its identity arguments keyword-only, the placeholder gone.

    A keyword-only parameter with a default costs CPython 3.11 to 3.13 their specialised call
    (docs/performance.md), so ``record()`` keeps positional defaults behind a placeholder, ``None``, that an
    identity given by position would fill: it is refused (``_positional_identity``).
    """
    signature = inspect.signature(function)
    parameters = [
        parameter.replace(kind=inspect.Parameter.KEYWORD_ONLY) if parameter.name in _IDENTITY else parameter
        for parameter in signature.parameters.values()
        if parameter.name != "_by_keyword"
    ]
    function.__dict__["__signature__"] = signature.replace(parameters=parameters)
    return function


def _positional_identity(value: object) -> TypeError:
    """What ``record()`` raises for an identity passed by position, as a keyword-only function would."""
    msg = f"record() takes task_index, rollout_index and attempt by keyword only, got {shown(value, 40)}"
    return TypeError(msg)


class RolloutTelemetry:
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
        meter_provider: publish the counts as OpenTelemetry observable instruments on this meter provider,
            read at its collection (none by default; docs/guides/opentelemetry.md).
        logger_provider: where a rollout's ``gen_ai.evaluation.result`` event goes as a log record (with
            ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``); the global one by default.
        evaluation_event: ``"log"`` (the event as a log record tied to the rollout's span, or a span event
            while no logger provider is configured) or ``"span"`` (always a span event, for a backend that
            reads span events only).
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
        min_valid_per_group: valid members a group needs to be more than ``insufficient`` (``expect``).
        runtime_metrics: publish the collecting process's runtime: prometheus_client's process, platform and
            garbage-collector collectors, the garbage-collection pauses, and the lag of each event loop an
            ``async with`` rollout block runs on, until ``close()``.
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
        meter_provider: MeterProvider | None = None,
        logger_provider: LoggerProvider | None = None,
        evaluation_event: EvaluationEvent = "log",
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
        self._run = run
        self._live: LivePage | None = None  # the page at / of serve(), once one is served
        self._live_made = threading.Lock()
        self._rollout_log = rollout_log
        self._started = clock()
        names = Names(max_agents=max_agents, max_kinds_per_agent=max_kinds_per_agent)
        bound = stall_bound(stall_after, stall_after_by_agent, names)
        slow = stall_bound(slow_after, slow_after_by_agent, names, "slow_after")
        self._account = account = Account(
            names=names,
            clock=clock,
            stall_after=bound,
            slow_after=slow,
            first_context=self._watch_stalls,  # when there is something to watch
        )
        self._rejections = rejections = Rejections(account.reject, strict=strict)
        self._stalls = Stalls(account, stall_after, rejections.reject, slow_after)
        spans = SpanRecorder(
            tracer_provider=tracer_provider,
            mode=span_mode,
            reason_limit=reason_limit,
            redact=redact_reason,
            clock=clock,
            names=names,
            logger_provider=logger_provider,
            evaluation_event=evaluation_event,
        )
        self._recorder = recorder = Recorder(
            names,
            account,
            rejections,
            spans,
            clock,
            min_valid_per_group=min_valid_per_group,
            rollout_log=rollout_log,
        )
        labels: dict[str, str] = {}
        if run is not None:
            labels["run"] = run
        labels.update(const_labels or {})
        self.registry = registry if registry is not None else CollectorRegistry()
        """The prometheus_client registry the telemetry's collectors are registered with."""
        self._runtime = Runtime()
        self._loops = LoopLag(self._runtime, loop_lag_interval)
        self._watch_loops = runtime_metrics  # the first async rollout block on a loop starts its sampler
        register(
            self.registry,
            AccountCollector(self.snapshot, labels),
            GroupsCollector(recorder.groups_snapshot, labels),
            CoverageCollector(recorder.coverage_snapshot, labels),
            RuntimeCollector(self._runtime.snapshot, labels),
        )
        if runtime_metrics:
            watch_gc(self._runtime)
            register_process_collectors(self.registry)
        if meter_provider is not None:
            from rollout_telemetry.exporters._meter import instrument_meter

            instrument_meter(meter_provider, self.snapshot, recorder.groups_snapshot, labels)
        self._shared = Shared(
            account, recorder.settle, spans, rejections, clock, self._loop_entered, rollout_log
        )

    # -- recording ----------------------------------------------------------------------------------

    @_keyword_identity
    def record(
        self,
        agent: str,
        response: object,
        _by_keyword: None = None,
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
        if _by_keyword is not None:  # an identity given by position
            raise _positional_identity(_by_keyword)
        try:
            outcome = check_outcome(None, None, None, None, None, None, response)  # classify(), one call less
            recorder = self._recorder
            if task_index is None and recorder.coverage is None:  # the common call: straight to the account
                self._account.count(agent, outcome)
                if self._rollout_log and ROLLOUTS.isEnabledFor(INFO):
                    recorder.log_rollout(agent, outcome, None, False)
            else:
                recorder.record(agent, response, outcome, task_index, rollout_index, attempt)
        except Exception as exc:  # the collector must never be taken down by its telemetry
            self._rejections.reject(exc)

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
        ``agent``, ``verification``, ``cleanup``, or ``unknown``) and ``delivery`` (``not_sent``,
        ``possibly_delivered``, ``delivered``, or ``unknown``) say where it failed and whether its request got
        through (``rollout_failure_stages_total``); a value outside them is a counted rejection
        (``invalid_stage``, ``invalid_delivery``) and the failure is counted with ``unknown``."""
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
            outcome = check_outcome(disposition, None, None, failure_kind, reason)
            recorder = self._recorder
            if task_index is None and recorder.coverage is None and stage is None and delivery is None:
                self._account.count(agent, outcome)  # the common call: straight to the account
                if reason is not None or self._rollout_log:
                    recorder.logged(agent, outcome, None, terminal)
            else:
                recorder.record_absent(
                    agent, outcome, task_index, rollout_index, attempt, terminal, stage, delivery
                )
        except Exception as exc:
            self._rejections.reject(exc)

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

    # -- the run's expected work ----------------------------------------------------------------------

    def expect(
        self,
        *agents: str,
        rollouts: int | None = None,
        tasks: int | None = None,
        rollouts_per_task: int = 1,
        identities: Iterable[tuple[int, int]] | None = None,
        inputs: str | Path | None = None,
        group_size: int | None = None,
        reward_range: tuple[float, float] | None = None,
        max_attempts: int | None = None,
    ) -> int:
        """Declare what ``agents`` are expected to do; each is published with zero counts from now on, so
        PromQL's ``increase()`` sees every rollout, the first included. The one way to declare expected work;
        returns how many rollouts it declared.

        Args:
            rollouts: how many rollouts each agent is expected to produce in all, when their identities are
                not known (``reward_lower_bound``, Gym's ``progress/...`` keys).
            tasks: tasks ``0 .. tasks - 1``, each with rollouts ``0 .. rollouts_per_task - 1``: the run's
                coverage account weighs every outcome recorded with its ``task_index``, ``rollout_index``
                and ``attempt`` against them (``rollout_run_*``, Gym's ``coverage/...`` keys), and each
                task's rollouts are its group.
            rollouts_per_task: see ``tasks``.
            identities: the (task index, rollout index) pairs expected: as ``tasks``, for any set.
            inputs: NeMo Gym's materialized inputs of a run (``<stem>_materialized_inputs.jsonl``): each row
                names its agent (``agent_ref.name``, else ``_ng_environment_server``, else the one agent
                given) and its identity (``_ng_task_index``, ``_ng_rollout_index``), declared as
                ``identities``. A row that cannot be read is a counted rejection naming its line.
            group_size: each task has this many rollouts: outcomes recorded with a ``task_index`` and
                ``rollout_index`` (``record``, ``rollout()``) form groups, classified once all members have
                one.
            reward_range: the lowest and highest reward the agents can get (default [0, 1]): a uniform
                group's common reward at either end is counted as ``lowest`` (too hard) or ``highest`` (too
                easy), anything else as ``other`` (``rollout_groups_uniform_total``), and their measured
                rewards are histogrammed in ten buckets of the range (``rollout_measured_reward``). Declare it
                before an agent's first reward.
            max_attempts: attempts NeMo Gym makes before it stops retrying a rollout (its
                ``NEMO_GYM_MAX_ROLLOUT_ATTEMPTS``, default 3): a failed rollout with fewer is ``retryable``.
                Give it once, with or before the first expected identities.

        Raises:
            ConfigError: a count is not a whole number in its range, more than one of ``rollouts``, ``tasks``,
                ``identities`` and ``inputs`` is given, ``identities`` are not pairs of valid indices
                (nothing is declared then), ``inputs`` is not a path, comes with more than one agent or cannot
                be read, the reward range is not two finite numbers, the lowest below the highest, an agent
                already has a measured reward under another range, or ``max_attempts`` differs from the one
                the coverage account counts.
            OutcomeError: an agent name is invalid (the agents before it are declared).
        """
        check_work(agents, rollouts, tasks, rollouts_per_task, identities, inputs, group_size, max_attempts)
        pairs = None if identities is None else identity_pairs(identities)
        checked = None if reward_range is None else check_reward_range(reward_range)
        recorder = self._recorder
        read = None
        # Read whole before anything is declared: a file that cannot be read is refused.
        if inputs is not None:
            read = inputs_of(inputs, agents[0] if agents else None, recorder.reject)
        if max_attempts is not None:
            recorder.cover(max_attempts)
        if read is not None:
            for agent, expected in read.items():
                recorder.expect(agent, identities=expected, group_size=group_size, reward_range=checked)
            return sum(len(expected) for expected in read.values())
        per_agent = rollouts or 0
        if tasks is not None:
            per_agent = tasks * rollouts_per_task
        elif pairs is not None:
            per_agent = len(pairs)
        for agent in agents:
            # Generated for each agent: a million tasks are never held at once.
            identities = task_identities(tasks, rollouts_per_task) if tasks is not None else pairs
            recorder.expect(
                agent, rollouts=rollouts, identities=identities, group_size=group_size, reward_range=checked
            )
        return per_agent * len(agents)

    # -- reading ------------------------------------------------------------------------------------

    def snapshot(self) -> AccountSnapshot:
        """A consistent copy of every count, after a check for rollouts that stalled since the last one: each
        is counted once in ``rollout_stalls_total``, gets a ``rollout.stalled`` event on its span and one
        warning line naming it (a timer checks too while rollouts are tracked)."""
        self._stalls.check()
        return self._account.snapshot()

    def rollouts_in_flight(self, limit: int = 100) -> dict[str, object]:
        """The rollouts in flight, oldest first, as ``GET /rollouts`` serves them (``limit`` at most 1000).

        Identity, stage, age, whether stalled, and the trace and span ids when the rollout has a span; never
        free text.

        Raises:
            ConfigError: ``limit`` is not a whole number of at least 0.
        """
        if type(limit) is not int or limit < 0:
            msg = f"limit must be a whole number of at least 0, got {shown(limit, 40)}"
            raise ConfigError(msg)
        return self._stalls.in_flight(limit)

    def progress_metrics(self) -> dict[str, float]:
        """NeMo Gym's ``progress/...`` keys, ready for ``wandb.log``; with expected identities (``expect``),
        its ``coverage/...`` keys too, and ``reward_lower_bound`` against the rollouts expected."""
        coverage = self._recorder.coverage_snapshot()
        keys = progress_metrics(
            self._account.snapshot(),
            elapsed_seconds=self._clock() - self._started,
            expected=self._recorder.expected_rollouts(coverage),
        )
        keys.update(coverage_metrics(coverage))
        return keys

    # -- serving, pushing -----------------------------------------------------------------------------

    def serve(
        self,
        port: int = 9464,
        host: str = "127.0.0.1",
        *,
        tls: TLSConfig | None = None,
        auth: BasicAuth | None = None,
        port_range: int = 1,
        page: bool = True,
    ) -> MetricsServer:
        """Serve ``/metrics``, ``/rollouts``, ``/healthz`` and the live page at ``/`` in the background;
        returns the running server.

        With ``port_range=N`` the first free port of ``port .. port+N-1`` is used (one per process). With
        ``page=False`` there is no page (``/`` is 404) and no history is kept for it; with a page, its points
        are taken every 5 s while a server serves it (until ``stop()``) and ``close()`` was not called.

        Raises:
            ServeError: the port is taken or the host cannot be bound.
        """
        from rollout_telemetry._serve.metrics_server import start_server

        return start_server(
            self.registry,
            port=port,
            host=host,
            tls=tls,
            auth=auth,
            port_range=port_range,
            rollouts=self.rollouts_in_flight,
            page=self._live_page().shown() if page else None,  # a refused address drops it at once
        )

    def _live_page(self) -> LivePage:
        # The run's page, made by the first serve() that shows one; sampled while served, until close().
        with self._live_made:
            if self._live is None:
                from rollout_telemetry._facade.live import LivePage

                recorder = self._recorder
                self._live = LivePage(
                    f"{self._run} (live)" if self._run else "rollouts (live)",
                    self.snapshot,
                    recorder.coverage_snapshot,
                    recorder.groups_snapshot,
                    origin=self._started,
                )
            return self._live

    def push(
        self,
        gateway: str,
        job: str,
        *,
        grouping_key: Mapping[str, str] | None = None,
        replace: bool = True,
        timeout: float = 10.0,
    ) -> None:
        """Push the current state to a Prometheus Pushgateway, for short-lived batch jobs.

        Uses prometheus_client's ``push_to_gateway`` (``replace=True``: the group is replaced) or
        ``pushadd_to_gateway`` (``replace=False``). Give each process its own ``grouping_key`` (for example
        ``{"instance": hostname_pid}``) so pushes from several processes do not overwrite each other.

        Raises:
            PushError: the gateway cannot be reached, timed out or refused the push; the message names it.
        """
        from rollout_telemetry._serve.push import push_registry

        push_registry(self.registry, gateway, job, grouping_key, replace, timeout)

    # -- the collecting process -----------------------------------------------------------------------

    def _watch_stalls(self) -> None:
        # An agent's first rollout context: the stall watcher starts. A thread that cannot start is counted
        # (raised with strict=True, before the context is offered or its rollout in flight).
        try:
            self._stalls.watch()
        except Exception as exc:
            self._rejections.reject(exc)

    def _loop_entered(self) -> None:
        # An async rollout block is entered: its loop gets a lag sampler, once (runtime_metrics=True).
        if self._watch_loops:
            try:
                self._loops.entered()
            except Exception as exc:  # never into the run: the rollout is tracked without lag sampling
                self._rejections.reject(exc)

    def close(self) -> None:
        """Stop the telemetry's background work: the stall timer, every event loop's lag sampler, the live
        page's sampler and the timing of garbage collections. Counts, the registry and a running server
        stay; rollouts are still recorded and ``snapshot()`` still checks for stalls. Calling it again does
        nothing."""
        self._watch_loops = False
        self._loops.stop()
        if self._live is not None:
            self._live.close()
        unwatch_gc(self._runtime)
        self._stalls.unwatch()

    def output_write(self) -> OutputWrite:
        """Time one write of the collection's output (a rollout's row appended to the results file, say):
        ``with`` or ``async with``; ``wrote(n)`` inside gives its size in bytes. Its duration, size and
        whether it raised are counted (``rollout_output_write_seconds``, ``rollout_output_write_bytes``,
        ``rollout_output_writes_failed_total``), for every agent at once: one write may hold rows of
        several."""
        return OutputWrite(self._runtime, self._clock, self._rejections.reject)

    def cleanup(self, agent: str) -> Cleanup:
        """Time one cleanup of ``agent`` outside a rollout block (releasing an environment session, say):
        ``with`` or ``async with``; inside a block, ``rollout.cleanup()`` is the same. Its duration, failures
        and whether it is unresolved are counted per agent (``Cleanup``)."""
        return Cleanup(self._shared, agent)

    def _run_follower(self, files: RunFiles, **options: Any) -> RunFollower:
        """A follower of a run's files recording through this telemetry (``RunFollower``'s options): the
        commands' one way to follow files, made here, where the recording part it records through is."""
        from rollout_telemetry._sources.follow import RunFollower

        return RunFollower(self._recorder, files, **options)


def register(registry: CollectorRegistry, *collectors: Collector) -> None:
    """Register ``collectors`` with ``registry``, all or none.

    Raises:
        ConfigError: the registry has their families already (another telemetry's): one line, not
            prometheus_client's list of every duplicated series.
    """
    done: list[Collector] = []
    try:
        for collector in collectors:
            registry.register(collector)
            done.append(collector)
    except ValueError as exc:
        for collector in done:
            registry.unregister(collector)
        msg = (
            "this registry already holds a RolloutTelemetry's series: give each telemetry its own registry "
            "(the default), or record every run through one telemetry"
        )
        raise ConfigError(msg) from exc

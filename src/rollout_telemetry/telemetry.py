"""The facade a collector holds: ``record*``, ``rollout()``, ``serve()`` and ``progress_metrics()``.

Every recording path writes the one account; the exporters read it when asked. Recording never raises
into the collector (unless ``strict=True``): bad input is logged once per cause and counted in
``rollout_telemetry_rejected_total{reason}``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from prometheus_client import push_to_gateway, pushadd_to_gateway
from prometheus_client.registry import CollectorRegistry

from rollout_telemetry import _fork
from rollout_telemetry.account import (
    DEFAULT_MAX_AGENTS,
    DEFAULT_MAX_KINDS_PER_AGENT,
    Account,
    AccountSnapshot,
)
from rollout_telemetry.auth import BasicAuth
from rollout_telemetry.exporters.prometheus import AccountCollector
from rollout_telemetry.failure_kinds import KindValidator
from rollout_telemetry.lifecycle import RolloutContext
from rollout_telemetry.outcome import (
    Disposition,
    OutcomeError,
    check_failure_kind,
    check_failure_reason,
    read_completed,
)
from rollout_telemetry.progress import progress_metrics
from rollout_telemetry.server import MetricsServer, TLSConfig
from rollout_telemetry.spans import DEFAULT_REASON_LIMIT, SpanMode, SpanRecorder

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider


__all__ = ["RolloutTelemetry"]

_log = logging.getLogger("rollout_telemetry")

_MAX_LOGGED_CAUSES = 256


class RolloutTelemetry:
    """Live telemetry for one rollout collection: record outcomes, serve them, view them.

    Args:
        run: the run's name, added as a ``run`` label on every series.
        registry: the prometheus_client registry to register with; a new one by default.
        const_labels: more labels for every series.
        strict: raise bad input to the caller instead of counting and logging it.
        expected: rollouts expected per agent, for ``reward_lower_bound``.
        clock: monotonic seconds, injectable for tests.
        max_agents: cap on distinct ``agent`` labels; further ones are counted as ``_other``.
        max_kinds_per_agent: cap on distinct ``failure_kind`` labels per agent.
        tracer_provider: where rollout spans go; the global one by default.
        span_mode: ``"span"`` (one span per rollout), ``"annotate"`` (attributes on the current span) or
            ``"off"``.
        reason_limit: ``failure_reason`` on spans is truncated to this many characters.
        redact_reason: optional hook applied to ``failure_reason`` before it goes on a span.
    """

    def __init__(
        self,
        run: str | None = None,
        *,
        registry: CollectorRegistry | None = None,
        const_labels: Mapping[str, str] | None = None,
        strict: bool = False,
        expected: Mapping[str, int] | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_agents: int = DEFAULT_MAX_AGENTS,
        max_kinds_per_agent: int = DEFAULT_MAX_KINDS_PER_AGENT,
        tracer_provider: TracerProvider | None = None,
        span_mode: SpanMode = "span",
        reason_limit: int = DEFAULT_REASON_LIMIT,
        redact_reason: Callable[[str], str] | None = None,
    ) -> None:
        self.strict = strict
        self._clock = clock
        self._started = clock()
        self._kinds = KindValidator()
        self._account = Account(
            max_agents=max_agents,
            max_kinds_per_agent=max_kinds_per_agent,
            clock=clock,
            kind_validator=self._kinds,
        )
        self._add_completed = self._account.add_completed
        self._add_absent = self._account.add_absent
        self._expected: dict[str, int] = {}
        labels: dict[str, str] = {}
        if run is not None:
            labels["run"] = run
        labels.update(const_labels or {})
        self.const_labels: Mapping[str, str] = labels
        self.registry = registry if registry is not None else CollectorRegistry()
        self._collector = AccountCollector(self._account.snapshot, labels)
        self.registry.register(self._collector)
        self.spans = SpanRecorder(
            tracer_provider=tracer_provider,
            mode=span_mode,
            reason_limit=reason_limit,
            redact=redact_reason,
            clock=clock,
        )
        self._logged_causes: set[tuple[str, str]] = set()
        self._log_lock = threading.Lock()
        _fork.track(self)
        for agent, count in (expected or {}).items():
            self.expect(agent, count)

    def _after_fork_in_child(self) -> None:
        self._log_lock = threading.Lock()

    # -- recording ----------------------------------------------------------------------------------

    def record(self, agent: str, response: object) -> None:
        """Record one completed rollout from its verify response (dict, pydantic model or object).

        ``mask_sample=True`` makes it masked, a missing or ``None`` reward makes it unscored, otherwise it
        is measured. Bad input is counted and logged (raised with ``strict=True``).
        """
        try:
            if type(response) is dict:
                # The hot path: the common shape is read inline; anything unusual takes the full checks.
                get = response.get
                reward = get("reward")
                masked = get("mask_sample", False)
                kind = get("failure_kind")
                if (
                    type(reward) is not float
                    or reward - reward != 0.0  # NaN and +-inf
                    or (masked is not False and masked is not True)
                    or (kind is not None and (type(kind) is not str or not kind))
                    or get("failure_reason") is not None
                ):
                    reward, masked, kind, _ = read_completed(response)
            else:
                reward, masked, kind, _ = read_completed(response)
            self._add_completed(agent, reward, masked, kind)
        except Exception as exc:  # the collector must never be taken down by its telemetry
            self._rejected(exc)

    def record_failure(
        self, agent: str, failure_kind: str | None = None, *, reason: str | None = None
    ) -> None:
        """Record one rollout that never reached the output; ``reason`` goes to the log, never a label."""
        self._record_absent(Disposition.FAILED, agent, failure_kind, reason)

    def record_omission(
        self, agent: str, failure_kind: str | None = None, *, reason: str | None = None
    ) -> None:
        """Record one rollout left out of the output on purpose; ``reason`` goes to the log."""
        self._record_absent(Disposition.OMITTED, agent, failure_kind, reason)

    def _record_absent(
        self, disposition: Disposition, agent: str, failure_kind: str | None, reason: str | None
    ) -> None:
        try:
            if type(failure_kind) is not str or not failure_kind:
                failure_kind = check_failure_kind(failure_kind)
            if reason is not None and type(reason) is not str:
                check_failure_reason(reason)
            self._add_absent(agent, disposition, failure_kind)
            if reason is not None:
                self._log_reason(disposition.value, agent, failure_kind, reason)
        except Exception as exc:
            self._rejected(exc)

    def _log_reason(self, what: str, agent: str, kind: str | None, reason: str) -> None:
        # The reason is free text about one occurrence: a debug log line, never a label.
        if _log.isEnabledFor(logging.DEBUG):
            _log.debug("rollout of %s %s (%s): %s", agent, what, kind, self.spans.clean_reason(reason))

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
        a failure of kind ``rollout_telemetry:no_outcome``.
        """
        return RolloutContext(self, agent, task_index, rollout_index, attempt)

    def _rejected(self, exc: Exception) -> None:
        if self.strict:
            raise exc
        reason = exc.reason if isinstance(exc, OutcomeError) else "internal_error"
        self._account.reject(reason)
        cause = (reason, type(exc).__name__)
        with self._log_lock:
            if cause in self._logged_causes or len(self._logged_causes) >= _MAX_LOGGED_CAUSES:
                return
            self._logged_causes.add(cause)
        if isinstance(exc, OutcomeError):
            _log.warning("rollout outcome rejected (%s): %s; further ones are only counted", reason, exc)
        else:
            _log.error("internal error while recording; further ones are only counted", exc_info=exc)

    # -- reading ------------------------------------------------------------------------------------

    @property
    def account(self) -> Account:
        """The account every view reads."""
        return self._account

    def snapshot(self) -> AccountSnapshot:
        """A consistent copy of every count."""
        return self._account.snapshot()

    def declare(self, *agents: str) -> None:
        """Publish ``agents`` with zero counts before their first rollout.

        Counters that exist from 0 let PromQL's ``increase()`` see every rollout, the first included.
        """
        for agent in agents:
            self._account.declare(agent)  # raises OutcomeError for an invalid agent

    def expect(self, agent: str, count: int) -> None:
        """Declare ``agent`` and how many rollouts it is expected to produce in total."""
        if count < 0:
            msg = f"expected count for {agent!r} must be >= 0, got {count}"
            raise ValueError(msg)
        self.declare(agent)
        self._expected[agent] = count

    def progress_metrics(self) -> dict[str, float]:
        """NeMo Gym's ``progress/...`` keys, ready for ``wandb.log``."""
        return progress_metrics(
            self._account.snapshot(),
            elapsed_seconds=self._clock() - self._started,
            expected=self._expected,
        )

    def serve(
        self,
        port: int = 9464,
        host: str = "127.0.0.1",
        *,
        tls: TLSConfig | None = None,
        auth: BasicAuth | None = None,
        port_range: int = 1,
    ) -> MetricsServer:
        """Serve ``/metrics`` and ``/healthz`` in a background thread; returns the running server.

        With ``port_range=N`` the first free port of ``port .. port+N-1`` is used (one per process).

        Raises:
            ServeError: the port is taken or the host cannot be bound.
        """
        return MetricsServer(self.registry, port=port, host=host, tls=tls, auth=auth, port_range=port_range)

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
            OSError: the gateway cannot be reached or refused the push.
        """
        push = push_to_gateway if replace else pushadd_to_gateway
        push(gateway, job=job, registry=self.registry, grouping_key=dict(grouping_key or {}), timeout=timeout)

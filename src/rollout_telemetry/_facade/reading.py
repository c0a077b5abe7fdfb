"""The facade's reading side: a consistent snapshot, the rollouts in flight, NeMo Gym's keys, and serving or
pushing them.

A part of ``RolloutTelemetry`` (it inherits it); whatever reads the account goes through here, one snapshot
per read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from prometheus_client.registry import CollectorRegistry

from rollout_telemetry._recording.stalls import Stalls
from rollout_telemetry._store.account import Account
from rollout_telemetry._store.coverage import CoverageSnapshot
from rollout_telemetry._store.snapshot import AccountSnapshot
from rollout_telemetry._views.progress import coverage_metrics, expected_rollouts, progress_metrics

if TYPE_CHECKING:  # the server and the push are imported when used: recording needs neither
    from rollout_telemetry._serve.credentials import BasicAuth
    from rollout_telemetry._serve.server import MetricsServer, TLSConfig

__all__ = ["Reading"]


class Reading:
    """Reading ``RolloutTelemetry``: snapshots, the rollouts in flight, Gym's keys, serving and pushing."""

    # Made by RolloutTelemetry.__init__ (and ExpectedWork).
    registry: CollectorRegistry
    _account: Account
    _stalls: Stalls
    _clock: Callable[[], float]
    _started: float
    _expected: dict[str, int]
    coverage_snapshot: Callable[[], CoverageSnapshot]  # ExpectedWork's

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
        """
        return self._stalls.in_flight(limit)

    def progress_metrics(self) -> dict[str, float]:
        """NeMo Gym's ``progress/...`` keys, ready for ``wandb.log``; with the run's coverage (``cover``),
        its ``coverage/...`` keys too, and ``reward_lower_bound`` against the rollouts expected."""
        coverage = self.coverage_snapshot()
        keys = progress_metrics(
            self._account.snapshot(),
            elapsed_seconds=self._clock() - self._started,
            expected={**self._expected, **expected_rollouts(coverage)},
        )
        keys.update(coverage_metrics(coverage))
        return keys

    def serve(
        self,
        port: int = 9464,
        host: str = "127.0.0.1",
        *,
        tls: TLSConfig | None = None,
        auth: BasicAuth | None = None,
        port_range: int = 1,
    ) -> MetricsServer:
        """Serve ``/metrics``, ``/rollouts`` and ``/healthz`` in the background; returns the running server.

        With ``port_range=N`` the first free port of ``port .. port+N-1`` is used (one per process).

        Raises:
            ServeError: the port is taken or the host cannot be bound.
        """
        from rollout_telemetry._serve.server import MetricsServer

        return MetricsServer(
            self.registry,
            port=port,
            host=host,
            tls=tls,
            auth=auth,
            port_range=port_range,
            rollouts=self.rollouts_in_flight,
        )

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

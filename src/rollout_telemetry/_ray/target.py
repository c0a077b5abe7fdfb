"""A process's ``/metrics`` served on its node and kept registered with the namespace's target registry."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from rollout_telemetry._ray.cluster import node_address, process_labels, registrant
from rollout_telemetry._ray.registry_actor import CALL_TIMEOUT, REGISTRY_NAME, start_registry
from rollout_telemetry._ray.targets import Target
from rollout_telemetry.errors import RefusalReason, TargetRefused

if TYPE_CHECKING:
    from rollout_telemetry import BasicAuth, MetricsServer, TLSConfig
    from rollout_telemetry._facade.telemetry import RolloutTelemetry

__all__ = ["RayTarget", "serve_on_ray"]

_log = logging.getLogger("rollout_telemetry.ray")

# refusals that may pass (a process gone, a place freed): a target so refused registers again, not raised
_RETRIED: frozenset[RefusalReason] = frozenset({"held", "full"})
_RETRY_SECONDS = 1.0


def _unwrapped(refused: TargetRefused) -> TargetRefused:
    """The registry's own refusal, without the remote traceback Ray wraps it in."""
    # the RayTaskError that is also a TargetRefused carries the actor's original
    cause = getattr(refused, "cause", None)
    return cause if isinstance(cause, TargetRefused) else refused


class RayTarget:
    """A process's ``/metrics`` served on its node and registered for discovery; ``stop()`` ends both.

    A registration refused for a reason that may pass (the address still held by a process that has gone,
    the registry full) is logged and tried again every second until it is taken; any other refusal is
    raised.

    Raises:
        TargetRefused: the registry refuses the target (its labels, its address).
    """

    def __init__(
        self,
        server: MetricsServer,
        address: str,
        labels: dict[str, str],
        scheme: str,
        *,
        namespace: str | None,
        registry_name: str,
        heartbeat_seconds: float | None,
    ) -> None:
        Target.of(address, labels, scheme)  # the registry's own checks, before asking it
        self.server = server
        self.address = address
        self.labels = labels
        self._scheme = scheme
        self._namespace = namespace
        self._registry_name = registry_name
        self._registrant = registrant()
        self._heartbeat_seconds = heartbeat_seconds
        self._registry = start_registry(namespace=namespace, name=registry_name)
        self._interval = _RETRY_SECONDS
        try:
            self._register()
        except TargetRefused as exc:
            refused = _unwrapped(exc)
            if refused.reason not in _RETRIED:
                raise refused from None
            _log.warning("%s; registering %s again every %.0f s", refused, address, _RETRY_SECONDS)
        self._stopped = threading.Event()
        self._heartbeat = threading.Thread(target=self._renew, name="rollout-telemetry-lease", daemon=True)
        self._heartbeat.start()

    @property
    def url(self) -> str:
        """The URL of ``/metrics``."""
        return self.server.url

    @property
    def port(self) -> int:
        """The port served."""
        return self.server.port

    def _register(self) -> None:
        """Register (or renew); the renewals then follow the registry's lease."""
        lease: float = ray.get(
            self._registry.register.remote(self.address, self.labels, self._scheme, self._registrant),
            timeout=CALL_TIMEOUT,
        )
        self._interval = self._heartbeat_seconds if self._heartbeat_seconds is not None else lease / 3

    def _renew(self) -> None:
        while not self._stopped.wait(self._interval):
            try:
                self._register()
            except TargetRefused as exc:  # held by a process that has gone, or full: it may pass
                self._interval = _RETRY_SECONDS
                _log.warning("%s; registering %s again", _unwrapped(exc), self.address)
            except RayActorError as exc:  # restarting, or killed: find (or create) it again
                _log.warning(
                    "the target registry is unavailable (%s); registering %s again", exc, self.address
                )
                try:
                    self._registry = start_registry(namespace=self._namespace, name=self._registry_name)
                    self._register()
                except Exception as again:  # still restarting: the next renewal tries again
                    _log.warning("registering %s failed (%s); retrying", self.address, again)
            except GetTimeoutError:
                _log.warning("the target registry did not answer; retrying")
            except Exception:  # never take the worker down over discovery
                _log.exception("renewing the registration of %s failed", self.address)

    def stop(self) -> None:
        """Deregister, then stop serving."""
        self._stopped.set()
        self._heartbeat.join(timeout=CALL_TIMEOUT)
        try:
            ray.get(self._registry.deregister.remote(self.address, self._registrant), timeout=CALL_TIMEOUT)
        except TargetRefused as exc:  # never taken: another process's target is not ours to remove
            _log.info("%s not deregistered: %s", self.address, _unwrapped(exc))
        except Exception:  # the registry's own checks remove the target anyway
            _log.warning("could not deregister %s; the registry will drop it", self.address, exc_info=True)
        self.server.stop()

    def __enter__(self) -> RayTarget:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_on_ray(
    telemetry: RolloutTelemetry,
    *,
    port: int = 0,
    port_range: int = 1,
    tls: TLSConfig | None = None,
    auth: BasicAuth | None = None,
    labels: Mapping[str, str] | None = None,
    namespace: str | None = None,
    registry_name: str = REGISTRY_NAME,
    heartbeat_seconds: float | None = None,
) -> RayTarget:
    """Serve ``telemetry`` on this node's address and register it for Prometheus's service discovery.

    Call it in an actor's ``__init__`` and keep the result; in a task, use it as a ``with`` block. Each
    target carries the labels ``ray_node_id``, ``ray_actor`` (the actor's name, else its class; a task's
    name) and ``pid``, plus ``labels`` (which may not set those three, nor a reserved name).

    Args:
        port: the port (default 0: a free one); with ``port_range=N`` the first free of ``port..port+N-1``.
        tls, auth: as for ``RolloutTelemetry.serve``.
        namespace: the namespace of the registry (default: the current one).
        heartbeat_seconds: how often the registration is renewed (default: a third of the lease).

    Raises:
        ServeError: the port cannot be bound.
        TargetRefused: the registry refuses the target: a label is reserved, or (it should not happen) the
            node's address is not one Ray lists; nothing is left serving.
    """
    identity = process_labels()
    clash = sorted(set(identity) & set(labels or {}))
    if clash:
        msg = f"labels {', '.join(clash)} are set by serve_on_ray (the process's identity): use other names"
        raise TargetRefused("reserved_label", msg)
    host = node_address()
    server = telemetry.serve(port=port, host=host, tls=tls, auth=auth, port_range=port_range)
    address = f"[{host}]:{server.port}" if ":" in host else f"{host}:{server.port}"
    try:
        return RayTarget(
            server,
            address,
            {**identity, **dict(labels or {})},
            "https" if tls is not None else "http",
            namespace=namespace,
            registry_name=registry_name,
            heartbeat_seconds=heartbeat_seconds,
        )
    except BaseException:
        server.stop()
        raise

"""Rollout workers on a Ray cluster, discovered by Prometheus: ``serve_on_ray()`` and the target registry.

Inside an actor (or a task, as a ``with`` block), ``serve_on_ray(telemetry)`` serves the process's
``/metrics`` on a free port of its node's address and registers it with the target registry: a named,
detached actor, one per Ray namespace, created on first use. The registry serves the targets as Prometheus
HTTP service discovery (``http_sd_configs``) and can write them to a ``file_sd_configs`` file on its node.

Liveness: each serving process renews its registration every ``lease_seconds / 3``; the registry checks
every target each ``sweep_seconds`` (1 s) and removes one whose port refuses connections (its process has
exited or died) and, at the latest, one whose lease (30 s) has not been renewed (its node is gone or
unreachable). So a target leaves discovery within ``lease_seconds`` of its process ending, and within about
a second when the process's port is closed by its end.

Needs the ``ray`` extra: ``pip install 'rollout-telemetry[ray]'``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

try:
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without ray
    msg = "rollout_telemetry.ray needs Ray: pip install 'rollout-telemetry[ray]'"
    raise ImportError(msg) from exc

from rollout_telemetry.discovery import (
    DEFAULT_LEASE_SECONDS,
    DiscoveryServer,
    FileSD,
    Target,
    TargetGroup,
    TargetRegistry,
    listening,
)

if TYPE_CHECKING:
    from rollout_telemetry import BasicAuth, MetricsServer, TLSConfig
    from rollout_telemetry.telemetry import RolloutTelemetry

__all__ = [
    "REGISTRY_NAME",
    "RayTarget",
    "registry_url",
    "serve_on_ray",
    "start_registry",
    "stop_registry",
    "target_groups",
]

_log = logging.getLogger("rollout_telemetry.ray")

REGISTRY_NAME = "rollout-telemetry-targets"
"""The name of the registry actor in its namespace."""
_CALL_TIMEOUT = 30.0

_Handle = Any  # a ray _Handle of TargetRegistryActor; Ray's generic stubs do not type remote calls


def _node_address() -> str:
    """This node's address as Ray reports it (what other nodes and Prometheus reach it by)."""
    address: str = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
    return address


class TargetRegistryActor:
    """The registry as a Ray actor: the targets, their HTTP service discovery endpoint and file, a sweeper."""

    def __init__(
        self,
        *,
        host: str | None,
        port: int,
        lease_seconds: float,
        file_sd_path: str | None,
        sweep_seconds: float,
    ) -> None:
        self._registry = TargetRegistry(lease_seconds=lease_seconds)
        self._file_sd = FileSD(file_sd_path) if file_sd_path else None
        self._publishing = threading.Lock()  # the groups read and written together: never a stale file last
        self._server = DiscoveryServer(self._registry, host=host or _node_address(), port=port)
        self._publish()
        self._stopped = threading.Event()
        self._sweeper = threading.Thread(
            target=self._sweep, args=(sweep_seconds,), name="rollout-telemetry-sweep", daemon=True
        )
        self._sweeper.start()

    def register(self, address: str, labels: dict[str, str], scheme: str) -> float:
        """Add or renew a target; return its lease in seconds."""
        lease = self._registry.register(Target.of(address, labels, scheme))
        self._publish()
        return lease

    def deregister(self, address: str) -> bool:
        """Remove a target; return whether it was registered."""
        removed = self._registry.deregister(address)
        self._publish()
        return removed

    def target_groups(self) -> list[TargetGroup]:
        """The current target groups."""
        return self._registry.target_groups()

    def url(self) -> str:
        """The ``http_sd_configs`` URL."""
        return self._server.url

    def file_sd_path(self) -> str | None:
        """The ``file_sd_configs`` file, if one is written (a path on the registry's node)."""
        return str(self._file_sd.path) if self._file_sd is not None else None

    def _sweep(self, seconds: float) -> None:
        while not self._stopped.wait(seconds):
            try:
                gone = self._registry.prune(listening)
                if gone:
                    _log.info("targets gone: %s", ", ".join(gone))
                self._publish()
            except Exception:  # the sweeper must outlive any one bad round
                _log.exception("sweeping the targets failed")

    def _publish(self) -> None:
        if self._file_sd is not None:
            with self._publishing:
                self._file_sd.write(self._registry.target_groups())


_RegistryActor = ray.remote(TargetRegistryActor)


def start_registry(
    *,
    namespace: str | None = None,
    name: str = REGISTRY_NAME,
    host: str | None = None,
    port: int = 0,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    file_sd_path: str | None = None,
    sweep_seconds: float = 1.0,
) -> _Handle:
    """Return the namespace's registry actor, creating it on this node if there is none.

    Call it from the driver before the workers start to choose the discovery port (``port=9460`` gives a
    URL to paste into the scrape config) or a ``file_sd_path``; otherwise the first ``serve_on_ray`` creates
    the registry with the defaults (port 0: a free one, see ``registry_url()``). An existing registry keeps
    the options it was created with.

    Args:
        namespace: the Ray namespace (default: the current one).
        host: the address the discovery endpoint binds (default: this node's address as Ray reports it).
        port: its port (0: a free one).
        lease_seconds: a target not renewed for this long is removed.
        file_sd_path: also write the target groups to this ``file_sd_configs`` file on the registry's node.
        sweep_seconds: how often targets are checked.
    """
    strategy = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
    options: dict[str, Any] = {
        "name": name,
        "lifetime": "detached",
        "get_if_exists": True,
        "num_cpus": 0,
        "max_concurrency": 16,
        "max_restarts": -1,  # after a crash or a lost node Ray restarts it as created; renewals refill it
        "scheduling_strategy": strategy,
    }
    if namespace is not None:
        options["namespace"] = namespace
    handle: _Handle = _RegistryActor.options(**options).remote(
        host=host,
        port=port,
        lease_seconds=lease_seconds,
        file_sd_path=file_sd_path,
        sweep_seconds=sweep_seconds,
    )
    return handle


def _existing(namespace: str | None, name: str) -> _Handle:
    handle: _Handle = ray.get_actor(name, namespace=namespace)
    return handle


def registry_url(*, namespace: str | None = None, name: str = REGISTRY_NAME) -> str:
    """The ``http_sd_configs`` URL of the namespace's registry.

    Raises:
        ValueError: there is no registry in the namespace.
    """
    url: str = ray.get(_existing(namespace, name).url.remote(), timeout=_CALL_TIMEOUT)
    return url


def target_groups(*, namespace: str | None = None, name: str = REGISTRY_NAME) -> list[TargetGroup]:
    """The namespace's current target groups, as Prometheus's service discovery reads them.

    Raises:
        ValueError: there is no registry in the namespace.
    """
    handle = _existing(namespace, name)
    groups: list[TargetGroup] = ray.get(handle.target_groups.remote(), timeout=_CALL_TIMEOUT)
    return groups


def stop_registry(*, namespace: str | None = None, name: str = REGISTRY_NAME) -> bool:
    """Kill the namespace's registry actor (detached, it outlives jobs); return whether there was one.

    Returns once the name is free, so a ``start_registry`` that follows creates a new registry.

    Raises:
        TimeoutError: the registry was still there 30 s after it was killed.
    """
    try:
        handle = _existing(namespace, name)
    except ValueError:
        return False
    ray.kill(handle)
    deadline = time.monotonic() + _CALL_TIMEOUT
    while time.monotonic() < deadline:
        try:
            _existing(namespace, name)
        except ValueError:
            return True
        time.sleep(0.05)
    msg = f"the target registry {name!r} was still there {_CALL_TIMEOUT:.0f} s after it was killed"
    raise TimeoutError(msg)


class RayTarget:
    """A process's ``/metrics`` served on its node and registered for discovery; ``stop()`` ends both."""

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
        self.server = server
        self.address = address
        self.labels = labels
        self._scheme = scheme
        self._namespace = namespace
        self._registry_name = registry_name
        self._registry = start_registry(namespace=namespace, name=registry_name)
        lease = self._register()
        self._interval = heartbeat_seconds if heartbeat_seconds is not None else lease / 3
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

    def _register(self) -> float:
        lease: float = ray.get(
            self._registry.register.remote(self.address, self.labels, self._scheme), timeout=_CALL_TIMEOUT
        )
        return lease

    def _renew(self) -> None:
        while not self._stopped.wait(self._interval):
            try:
                self._register()
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
        self._heartbeat.join(timeout=_CALL_TIMEOUT)
        try:
            ray.get(self._registry.deregister.remote(self.address), timeout=_CALL_TIMEOUT)
        except Exception:  # the registry's own checks remove the target anyway
            _log.warning("could not deregister %s; the registry will drop it", self.address, exc_info=True)
        self.server.stop()

    def __enter__(self) -> RayTarget:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _identity() -> dict[str, str]:
    context = ray.get_runtime_context()
    name = context.get_actor_name() or ""
    if not name:
        task = context.get_task_name() or "driver"
        # an actor method's task is "Class.method": its class names the actor
        name = task.split(".", 1)[0] if context.get_actor_id() else task
    return {"ray_node_id": context.get_node_id(), "ray_actor": name, "pid": str(os.getpid())}


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
    name) and ``pid``, plus ``labels``.

    Args:
        port: the port (default 0: a free one); with ``port_range=N`` the first free of ``port..port+N-1``.
        tls, auth: as for ``RolloutTelemetry.serve``.
        namespace: the namespace of the registry (default: the current one).
        heartbeat_seconds: how often the registration is renewed (default: a third of the lease).

    Raises:
        ServeError: the port cannot be bound.
    """
    host = _node_address()
    server = telemetry.serve(port=port, host=host, tls=tls, auth=auth, port_range=port_range)
    address = f"[{host}]:{server.port}" if ":" in host else f"{host}:{server.port}"
    try:
        return RayTarget(
            server,
            address,
            {**_identity(), **dict(labels or {})},
            "https" if tls is not None else "http",
            namespace=namespace,
            registry_name=registry_name,
            heartbeat_seconds=heartbeat_seconds,
        )
    except BaseException:
        server.stop()
        raise

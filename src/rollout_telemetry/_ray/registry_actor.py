"""The target registry as a detached Ray actor, one per namespace, and the calls that find and ask it."""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rollout_telemetry._ray.cluster import node_address, node_addresses
from rollout_telemetry._ray.discovery import DiscoveryServer, FileSD
from rollout_telemetry._ray.target_registry import (
    DEFAULT_LEASE_SECONDS,
    MAX_TARGETS,
    TargetRegistry,
    listening,
)
from rollout_telemetry._ray.targets import NodeAddresses, TargetGroup
from rollout_telemetry._serve.tls import server_context
from rollout_telemetry.errors import RefusalReason

if TYPE_CHECKING:
    from rollout_telemetry import BasicAuth, TLSConfig

__all__ = [
    "CALL_TIMEOUT",
    "REGISTRY_NAME",
    "refusals",
    "registry_url",
    "start_registry",
    "stop_registry",
    "target_groups",
]

_log = logging.getLogger("rollout_telemetry.ray")

REGISTRY_NAME = "rollout-telemetry-targets"
"""The name of the registry actor in its namespace."""
CALL_TIMEOUT = 30.0
"""Seconds a call to the registry, or its removal once killed, may take."""
START_TIMEOUT = 120.0
"""Seconds the registry actor may take to start: a worker process of its own, which on a busy node takes
tens of seconds to start and import Ray."""

_Handle = Any  # a ray _Handle of TargetRegistryActor; Ray's generic stubs do not type remote calls


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
        tls: TLSConfig | None = None,
        auth: BasicAuth | None = None,
        max_targets: int = MAX_TARGETS,
    ) -> None:
        self._registry = TargetRegistry(
            lease_seconds=lease_seconds, hosts=NodeAddresses(node_addresses), max_targets=max_targets
        )
        self._file_sd = FileSD(file_sd_path) if file_sd_path else None
        self._publishing = threading.Lock()  # the groups read and written together: never a stale file last
        self._published: int | None = None  # the registry's generation the file holds
        self._server = DiscoveryServer(
            self._registry, host=host or node_address(), port=port, tls=tls, auth=auth
        )
        self._publish()
        self._stopped = threading.Event()
        self._sweeper = threading.Thread(
            target=self._sweep, args=(sweep_seconds,), name="rollout-telemetry-sweep", daemon=True
        )
        self._sweeper.start()

    def register(self, address: str, labels: dict[str, str], scheme: str, registrant: str) -> float:
        """Add or renew ``registrant``'s target; return its lease in seconds.

        Raises:
            TargetRefused: the registry's rules refuse it (the actor goes on).
        """
        lease = self._registry.offer(address, labels, scheme, registrant=registrant)
        self._publish()
        return lease

    def deregister(self, address: str, registrant: str) -> bool:
        """Remove ``registrant``'s target; return whether it was registered.

        Raises:
            TargetRefused: another registrant holds the address.
        """
        removed = self._registry.deregister(address, registrant=registrant)
        self._publish()
        return removed

    def refusals(self) -> dict[RefusalReason, int]:
        """Registrations and removals refused so far, by reason."""
        return self._registry.refusals()

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
        if self._file_sd is None:
            return
        with self._publishing:  # a renewal changes nothing: only a new generation is written
            generation = self._registry.generation
            if generation != self._published:
                self._file_sd.write(self._registry.target_groups())
                self._published = generation


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
    tls: TLSConfig | None = None,
    auth: BasicAuth | None = None,
    max_targets: int = MAX_TARGETS,
) -> _Handle:
    """Return the namespace's registry actor once it has started, creating it on this node if there is none.

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
        tls, auth: serve discovery over HTTPS, behind HTTP basic auth, as ``RolloutTelemetry.serve`` does
            (Prometheus's ``http_sd_configs`` takes ``tls_config`` and ``basic_auth``). The TLS files are
            read here first, then on the registry's node (this one, when it has room).
        max_targets: targets the registry holds at most.

    Raises:
        ConfigError: a TLS file cannot be loaded.
        ray.exceptions.GetTimeoutError: the registry did not start within ``START_TIMEOUT``.
    """
    if tls is not None:
        server_context(tls)  # a wrong file is named here, not in the actor's log
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
        tls=tls,
        auth=auth,
        max_targets=max_targets,
    )
    # Started (or found) before it is handed out, so that no call's CALL_TIMEOUT is spent on its start.
    ray.get(handle.url.remote(), timeout=START_TIMEOUT)
    return handle


def _existing(namespace: str | None, name: str) -> _Handle:
    handle: _Handle = ray.get_actor(name, namespace=namespace)
    return handle


def registry_url(*, namespace: str | None = None, name: str = REGISTRY_NAME) -> str:
    """The ``http_sd_configs`` URL of the namespace's registry.

    Raises:
        ValueError: there is no registry in the namespace.
    """
    url: str = ray.get(_existing(namespace, name).url.remote(), timeout=CALL_TIMEOUT)
    return url


def target_groups(*, namespace: str | None = None, name: str = REGISTRY_NAME) -> list[TargetGroup]:
    """The namespace's current target groups, as Prometheus's service discovery reads them.

    Raises:
        ValueError: there is no registry in the namespace.
    """
    handle = _existing(namespace, name)
    groups: list[TargetGroup] = ray.get(handle.target_groups.remote(), timeout=CALL_TIMEOUT)
    return groups


def refusals(*, namespace: str | None = None, name: str = REGISTRY_NAME) -> dict[RefusalReason, int]:
    """Registrations and removals the namespace's registry has refused so far, by reason.

    Raises:
        ValueError: there is no registry in the namespace.
    """
    counts: dict[RefusalReason, int] = ray.get(
        _existing(namespace, name).refusals.remote(), timeout=CALL_TIMEOUT
    )
    return counts


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
    deadline = time.monotonic() + CALL_TIMEOUT
    while time.monotonic() < deadline:
        try:
            _existing(namespace, name)
        except ValueError:
            return True
        time.sleep(0.05)
    msg = f"the target registry {name!r} was still there {CALL_TIMEOUT:.0f} s after it was killed"
    raise TimeoutError(msg)

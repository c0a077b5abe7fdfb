"""Rollout workers on a Ray cluster, discovered by Prometheus: ``serve_on_ray()`` and the target registry.

Inside an actor (or a task, as a ``with`` block), ``serve_on_ray(telemetry)`` serves the process's
``/metrics`` on a free port of its node's address and registers it with the target registry: a named,
detached actor, one per Ray namespace, created on first use. The registry serves the targets as Prometheus
HTTP service discovery (``http_sd_configs``) and can write them to a ``file_sd_configs`` file on its node.

What the registry takes: a target on one of the cluster's own nodes (the addresses ``ray.nodes()`` reports;
on a cluster whose nodes report loopback addresses, those), with labels that are neither Prometheus's own nor
the exporter's series' (``discovery.RESERVED_LABELS``), replaced or removed only by the actor (or, outside an
actor, the worker process) that registered it, and at most ``max_targets`` (``discovery.MAX_TARGETS``) of
them. Anything else is refused with ``discovery.TargetRefused`` naming the rule, counted (``refusals()``) and
logged; the actor goes on. Ray does not authenticate its own processes, so these rules stop a mistaken
worker and an address outside the cluster, not code that can already run on it.

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

from rollout_telemetry._serve.discovery import (
    DEFAULT_LEASE_SECONDS,
    MAX_TARGETS,
    RESERVED_LABELS,
    DiscoveryServer,
    FileSD,
    NodeAddresses,
    Target,
    TargetGroup,
    TargetRegistry,
    listening,
)
from rollout_telemetry.errors import RefusalReason, TargetRefused

if TYPE_CHECKING:
    from rollout_telemetry import BasicAuth, MetricsServer, TLSConfig
    from rollout_telemetry._recording.telemetry import RolloutTelemetry

__all__ = [
    "MAX_TARGETS",
    "REGISTRY_NAME",
    "RESERVED_LABELS",
    "RayTarget",
    "TargetRefused",
    "refusals",
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
# refusals that may pass (a process gone, a place freed): a target so refused registers again, not raised
_RETRIED: frozenset[RefusalReason] = frozenset({"held", "full"})
_RETRY_SECONDS = 1.0

_Handle = Any  # a ray _Handle of TargetRegistryActor; Ray's generic stubs do not type remote calls


def _node_address() -> str:
    """This node's address as Ray reports it (what other nodes and Prometheus reach it by)."""
    address: str = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
    return address


def _node_addresses() -> list[str]:
    """The addresses of the cluster's live nodes, as Ray reports them."""
    nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    return [str(node["NodeManagerAddress"]) for node in nodes if node.get("Alive")]


def _registrant() -> str:
    """Who is registering, as Ray knows the caller: its actor, else its worker process (a task, a driver).

    An actor keeps its id across restarts, so a restarted actor may replace the target it registered before.
    """
    context = ray.get_runtime_context()
    actor = context.get_actor_id()
    return f"actor:{actor}" if actor else f"worker:{context.get_worker_id()}"


def _unwrapped(refused: TargetRefused) -> TargetRefused:
    """The registry's own refusal, without the remote traceback Ray wraps it in."""
    # the RayTaskError that is also a TargetRefused carries the actor's original
    cause = getattr(refused, "cause", None)
    return cause if isinstance(cause, TargetRefused) else refused


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
            lease_seconds=lease_seconds, hosts=NodeAddresses(_node_addresses), max_targets=max_targets
        )
        self._file_sd = FileSD(file_sd_path) if file_sd_path else None
        self._publishing = threading.Lock()  # the groups read and written together: never a stale file last
        self._published: int | None = None  # the registry's generation the file holds
        self._server = DiscoveryServer(
            self._registry, host=host or _node_address(), port=port, tls=tls, auth=auth
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
        tls, auth: serve discovery over HTTPS, behind HTTP basic auth, as ``RolloutTelemetry.serve`` does
            (Prometheus's ``http_sd_configs`` takes ``tls_config`` and ``basic_auth``). The TLS files are
            read here first, then on the registry's node (this one, when it has room).
        max_targets: targets the registry holds at most.

    Raises:
        ConfigError: a TLS file cannot be loaded.
    """
    if tls is not None:
        tls.context()  # a wrong file is named here, not in the actor's log
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


def refusals(*, namespace: str | None = None, name: str = REGISTRY_NAME) -> dict[RefusalReason, int]:
    """Registrations and removals the namespace's registry has refused so far, by reason.

    Raises:
        ValueError: there is no registry in the namespace.
    """
    counts: dict[RefusalReason, int] = ray.get(
        _existing(namespace, name).refusals.remote(), timeout=_CALL_TIMEOUT
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
        self._registrant = _registrant()
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
            timeout=_CALL_TIMEOUT,
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
        self._heartbeat.join(timeout=_CALL_TIMEOUT)
        try:
            ray.get(self._registry.deregister.remote(self.address, self._registrant), timeout=_CALL_TIMEOUT)
        except TargetRefused as exc:  # never taken: another process's target is not ours to remove
            _log.info("%s not deregistered: %s", self.address, _unwrapped(exc))
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
    identity = _identity()
    clash = sorted(set(identity) & set(labels or {}))
    if clash:
        msg = f"labels {', '.join(clash)} are set by serve_on_ray (the process's identity): use other names"
        raise TargetRefused("reserved_label", msg)
    host = _node_address()
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

"""Rollout workers on a Ray cluster, discovered by Prometheus: ``serve_on_ray()`` and the target registry.

Inside an actor (or a task, as a ``with`` block), ``serve_on_ray(telemetry)`` serves the process's
``/metrics`` on a free port of its node's address and registers it with the target registry: a named,
detached actor, one per Ray namespace, created on first use. The registry serves the targets as Prometheus
HTTP service discovery (``http_sd_configs``) and can write them to a ``file_sd_configs`` file on its node.

What the registry takes: a target on one of the cluster's own nodes (the addresses ``ray.nodes()`` reports;
on a cluster whose nodes report loopback addresses, those), with labels that are neither Prometheus's own nor
the exporter's series' (``RESERVED_LABELS``), replaced or removed only by the actor (or, outside an actor, the
worker process) that registered it, and at most ``max_targets`` (``MAX_TARGETS``) of them. Anything else is
refused with ``rollout_telemetry.errors.TargetRefused`` naming the rule, counted (``refusals()``) and
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

# Ray imported here, first: a missing extra fails with the pip install to run.
try:
    import ray  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without ray
    msg = "rollout_telemetry.ray needs Ray: pip install 'rollout-telemetry[ray]'"
    raise ImportError(msg) from exc

from rollout_telemetry._ray.registry_actor import (
    REGISTRY_NAME,
    refusals,
    registry_url,
    start_registry,
    stop_registry,
    target_groups,
)
from rollout_telemetry._ray.target import RayTarget, serve_on_ray
from rollout_telemetry._ray.target_registry import MAX_TARGETS
from rollout_telemetry._ray.targets import RESERVED_LABELS

__all__ = [
    "MAX_TARGETS",
    "REGISTRY_NAME",
    "RESERVED_LABELS",
    "RayTarget",
    "refusals",
    "registry_url",
    "serve_on_ray",
    "start_registry",
    "stop_registry",
    "target_groups",
]

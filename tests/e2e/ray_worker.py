"""A rollout worker as a Ray actor for the end-to-end tests: known outcomes, served through serve_on_ray().

Imported by the Ray workers themselves, so it lives in a module of its own (the cluster's processes get
the repository on their ``PYTHONPATH``).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import ray

from rollout_telemetry import RolloutTelemetry
from rollout_telemetry.errors import TargetRefused
from rollout_telemetry.ray import serve_on_ray, start_registry
from tests.e2e import fleet_member

RUN = "ray"


class RolloutWorker:
    """Serves its telemetry at zero from the start; ``collect()`` records the seed's known outcomes."""

    def __init__(self, seed: int, namespace: str) -> None:
        self.seed = seed
        self.telemetry = RolloutTelemetry(run=RUN)
        self.telemetry.expect(*fleet_member.AGENTS)
        self.target = serve_on_ray(self.telemetry, namespace=namespace)

    def where(self) -> dict[str, str]:
        """The target's address and labels."""
        return {"address": self.target.address, **self.target.labels}

    def collect(self) -> None:
        """Record the seed's outcomes."""
        fleet_member.record_all(self.telemetry, self.seed)

    def flood(self, registry_name: str, namespace: str, base: int, count: int) -> float:
        """Register ``count`` made-up targets on this node with a registry from 16 threads at once, as one
        registrant; return the lease."""
        registry = start_registry(name=registry_name, namespace=namespace, sweep_seconds=3600)
        node = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]

        def register(index: int) -> float:
            address = f"{node}:{base + index}"
            labels = {"pid": str(os.getpid()), "index": str(index)}
            registering = registry.register.remote(address, labels, "http", f"flood-{base}")
            lease: float = ray.get(registering, timeout=60)
            return lease

        with ThreadPoolExecutor(max_workers=16) as pool:
            leases = set(pool.map(register, range(count)))
        (lease,) = leases
        return lease

    def stop_serving(self) -> None:
        """Deregister and stop the endpoint, as an actor does when it is done."""
        self.target.stop()


def serve_labelled(namespace: str, labels: dict[str, str]) -> str:
    """Serve with ``labels`` in a task; return the refusal's reason and message, or "served"."""
    try:
        with serve_on_ray(RolloutTelemetry(run=RUN), namespace=namespace, labels=labels):
            return "served"
    except TargetRefused as refused:
        return f"{refused.reason}: {refused}"

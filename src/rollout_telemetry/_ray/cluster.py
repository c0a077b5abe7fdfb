"""What Ray tells of the cluster and of the calling process: node addresses, who registers, its labels."""

from __future__ import annotations

import os
from typing import Any

import ray

__all__ = ["node_address", "node_addresses", "process_labels", "registrant"]


def node_address() -> str:
    """This node's address as Ray reports it (what other nodes and Prometheus reach it by)."""
    address: str = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
    return address


def node_addresses() -> list[str]:
    """The addresses of the cluster's live nodes, as Ray reports them."""
    nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    return [str(node["NodeManagerAddress"]) for node in nodes if node.get("Alive")]


def registrant() -> str:
    """Who is registering, as Ray knows the caller: its actor, else its worker process (a task, a driver).

    An actor keeps its id across restarts, so a restarted actor may replace the target it registered before.
    """
    context = ray.get_runtime_context()
    actor = context.get_actor_id()
    return f"actor:{actor}" if actor else f"worker:{context.get_worker_id()}"


def process_labels() -> dict[str, str]:
    """The labels that say which process serves: its node, its actor (else its task), its pid."""
    context = ray.get_runtime_context()
    name = context.get_actor_name() or ""
    if not name:
        task = context.get_task_name() or "driver"
        # an actor method's task is "Class.method": its class names the actor
        name = task.split(".", 1)[0] if context.get_actor_id() else task
    return {"ray_node_id": context.get_node_id(), "ray_actor": name, "pid": str(os.getpid())}

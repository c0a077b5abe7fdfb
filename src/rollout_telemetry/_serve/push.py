"""Pushing a registry to a Prometheus Pushgateway, for short-lived batch jobs."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import push_to_gateway, pushadd_to_gateway
from prometheus_client.registry import CollectorRegistry

from rollout_telemetry.errors import PushError

__all__ = ["push_registry"]


def push_registry(  # noqa: PLR0917 - the facade's push(), argument for argument
    registry: CollectorRegistry,
    gateway: str,
    job: str,
    grouping_key: Mapping[str, str] | None,
    replace: bool,
    timeout: float,
) -> None:
    """Push ``registry`` with prometheus_client's ``push_to_gateway`` (``replace``) or ``pushadd_to_gateway``.

    Raises:
        PushError: the gateway cannot be reached, timed out or refused the push; the message names it.
    """
    send = push_to_gateway if replace else pushadd_to_gateway
    try:
        send(gateway, job=job, registry=registry, grouping_key=dict(grouping_key or {}), timeout=timeout)
    except OSError as exc:  # urllib's URLError and HTTPError, timeouts, refused connections
        reason = getattr(exc, "reason", None) or exc
        msg = f"cannot push to the Pushgateway at {gateway}: {reason}"
        raise PushError(msg) from exc

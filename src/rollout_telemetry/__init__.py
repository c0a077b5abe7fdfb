"""rollout-telemetry: live progress telemetry for RL rollout collection.

The public names are loaded on first use, so ``import rollout_telemetry.failure_kinds`` (the vocabulary,
for data tooling) does not pull in prometheus_client, OpenTelemetry or pydantic.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rollout_telemetry.auth import BasicAuth, ServeError, hash_password
    from rollout_telemetry.lifecycle import RolloutContext
    from rollout_telemetry.outcome import Disposition, Outcome, OutcomeError, VerifyResponse, outcome_of
    from rollout_telemetry.server import MetricsServer, TLSConfig
    from rollout_telemetry.snapshot import AccountSnapshot, AgentSnapshot
    from rollout_telemetry.telemetry import PushError, RolloutTelemetry

__all__ = [
    "AccountSnapshot",
    "AgentSnapshot",
    "BasicAuth",
    "Disposition",
    "MetricsServer",
    "Outcome",
    "OutcomeError",
    "PushError",
    "RolloutContext",
    "RolloutTelemetry",
    "ServeError",
    "TLSConfig",
    "VerifyResponse",
    "hash_password",
    "outcome_of",
]

_HOMES = {
    "AccountSnapshot": "snapshot",
    "AgentSnapshot": "snapshot",
    "BasicAuth": "auth",
    "Disposition": "outcome",
    "MetricsServer": "server",
    "Outcome": "outcome",
    "OutcomeError": "outcome",
    "PushError": "telemetry",
    "RolloutContext": "lifecycle",
    "RolloutTelemetry": "telemetry",
    "ServeError": "auth",
    "TLSConfig": "server",
    "VerifyResponse": "outcome",
    "hash_password": "auth",
    "outcome_of": "outcome",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        msg = f"module 'rollout_telemetry' has no attribute {name!r}"
        raise AttributeError(msg)
    return getattr(importlib.import_module(f"rollout_telemetry.{home}"), name)


def __dir__() -> list[str]:
    return sorted(__all__)

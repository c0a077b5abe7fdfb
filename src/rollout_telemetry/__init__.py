"""rollout-telemetry: live progress telemetry for RL rollout collection."""

from rollout_telemetry.account import AccountSnapshot, AgentSnapshot
from rollout_telemetry.lifecycle import RolloutContext
from rollout_telemetry.outcome import Disposition, Outcome, OutcomeError, VerifyResponse, outcome_of
from rollout_telemetry.server import BasicAuth, MetricsServer, ServeError, TLSConfig, hash_password
from rollout_telemetry.telemetry import RolloutTelemetry

__all__ = [
    "AccountSnapshot",
    "AgentSnapshot",
    "BasicAuth",
    "Disposition",
    "MetricsServer",
    "Outcome",
    "OutcomeError",
    "RolloutContext",
    "RolloutTelemetry",
    "ServeError",
    "TLSConfig",
    "VerifyResponse",
    "hash_password",
    "outcome_of",
]

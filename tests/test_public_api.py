"""The package's public surface is exactly its __all__."""

from __future__ import annotations

import pytest

import rollout_telemetry

PUBLIC = {
    "AccountSnapshot",
    "AgentSnapshot",
    "BasicAuth",
    "ConfigError",
    "Disposition",
    "MetricsServer",
    "Outcome",
    "OutcomeError",
    "PushError",
    "Rejection",
    "RolloutContext",
    "RolloutTelemetry",
    "RolloutTelemetryError",
    "RolloutUsageError",
    "ServeError",
    "TLSConfig",
    "TargetRefused",
    "VerifyResponse",
    "hash_password",
    "outcome_of",
}


def test_all_is_exactly_the_public_api() -> None:
    """__all__ is sorted, complete, and every name resolves."""
    assert list(rollout_telemetry.__all__) == sorted(PUBLIC)
    for name in PUBLIC:
        assert getattr(rollout_telemetry, name) is not None
    assert set(dir(rollout_telemetry)) == PUBLIC


def test_unknown_attribute_is_an_attribute_error() -> None:
    """A name outside the API raises AttributeError, as for any module."""
    with pytest.raises(AttributeError, match="nope"):
        _ = rollout_telemetry.nope  # type: ignore[attr-defined]

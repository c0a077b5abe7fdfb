"""Every error rollout-telemetry raises on purpose: one base class, a subclass per kind of mistake.

Each also subclasses the built-in error a caller would have caught before (``ValueError``, ``RuntimeError``,
``OSError``), so existing handlers keep working.
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "ConfigError",
    "OutcomeError",
    "PushError",
    "RefusalReason",
    "Rejection",
    "RolloutTelemetryError",
    "RolloutUsageError",
    "ServeError",
    "TargetRefused",
]


class RolloutTelemetryError(Exception):
    """The base class of every error the package raises on purpose."""


class Rejection(RolloutTelemetryError):
    """An input the telemetry refuses; ``reason`` is its label in ``rollout_telemetry_rejected_total``.

    Counted and logged, never raised, unless the telemetry is ``strict``.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class OutcomeError(Rejection, ValueError):
    """A rollout outcome that cannot be recorded; ``field`` names the offending field.

    Its ``reason`` (the label in ``rollout_telemetry_rejected_total``) is ``invalid_<field>``.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"invalid_{field}", f"{field}: {message}")
        self.field = field


class RolloutUsageError(Rejection, RuntimeError):
    """A rollout context used out of order: an outcome outside its ``with`` block, or a second outcome."""


class ConfigError(RolloutTelemetryError, ValueError):
    """An argument or setting that cannot work, found before anything starts."""


class ServeError(RolloutTelemetryError, RuntimeError):
    """An endpoint could not be served: the port is taken, or the host cannot be bound."""


class PushError(RolloutTelemetryError, OSError):
    """A push to the Pushgateway failed: unreachable, too slow, or refused."""


RefusalReason = Literal["malformed", "reserved_label", "foreign_address", "held", "full"]
"""Why the discovery registry refused a registration or a removal: the rule it broke."""


class TargetRefused(RolloutTelemetryError, ValueError):
    """The discovery registry will not make this registration or removal; ``reason`` names the rule."""

    def __init__(self, reason: RefusalReason, message: str) -> None:
        super().__init__(message)
        self.reason: RefusalReason = reason

    def __reduce__(self) -> tuple[type[TargetRefused], tuple[RefusalReason, str]]:
        # rebuilt from (reason, message) on the other side of a Ray call
        return type(self), (self.reason, str(self))

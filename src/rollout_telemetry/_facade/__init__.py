"""The object users hold (RolloutTelemetry): it composes the layers below, none of which reaches up to it."""

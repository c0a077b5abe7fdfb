"""The recording facade users hold (RolloutTelemetry), the rollout lifecycle, and spans."""

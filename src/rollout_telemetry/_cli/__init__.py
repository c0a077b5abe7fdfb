"""The rollout-telemetry command line: one module per command."""

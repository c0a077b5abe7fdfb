"""Ray-dependent internals of ``rollout_telemetry.ray``, which checks first that Ray is installed."""

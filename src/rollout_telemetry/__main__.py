"""``python -m rollout_telemetry``: the command line."""

from rollout_telemetry._cli.entry import run

raise SystemExit(run())

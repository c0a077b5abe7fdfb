"""``python -m rollout_telemetry``: the command line."""

from rollout_telemetry.cli import main

raise SystemExit(main())

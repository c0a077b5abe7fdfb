"""``python -m rollout_telemetry``: the command line."""

from rollout_telemetry._cli.main import main

raise SystemExit(main())

"""The ``rollout-telemetry`` console script: the command line, and a quiet exit on Ctrl-C even while it loads.

Ctrl-C while the package is still being imported (a second or so on a busy machine) would otherwise end in
Python's traceback; as everywhere else in the command line, it exits 130 without one.
"""

from __future__ import annotations

import sys

__all__ = ["run"]


def run() -> int:
    """Import the command line and run it; 130 on Ctrl-C at any moment."""
    try:
        from rollout_telemetry._cli.main import main

        return main()
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(run())

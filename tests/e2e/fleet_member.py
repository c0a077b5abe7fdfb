"""One collector process of a fleet: records a known, seeded sequence of outcomes and serves /metrics.

    python tests/e2e/fleet_member.py SEED PORT PORT_RANGE

Serves every agent at zero first and prints ``ready <port>``; each ``go`` line on standard input records
the sequence once (``done`` is printed after it); it serves until its standard input closes.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator

from rollout_telemetry import RolloutTelemetry

AGENTS = ("math_agent", "browser_agent")
KINDS = ("session_lost", "judge_failed", "transport_timeout", "cancelled")


def outcomes(seed: int, count: int = 400) -> Iterator[tuple[str, str, float | None, str | None]]:
    """(agent, disposition, reward, kind) of every outcome this member records."""
    rng = random.Random(seed)
    for _ in range(count):
        agent = rng.choice(AGENTS)
        draw = rng.random()
        kind = rng.choice(KINDS)
        reward = round(rng.uniform(-1.0, 1.0), 3)
        if draw < 0.15:
            yield agent, "failed", None, kind
        elif draw < 0.2:
            yield agent, "omitted", None, kind
        elif draw < 0.4:
            yield agent, "masked", reward, kind
        else:
            yield agent, "measured", reward, None


def record_all(telemetry: RolloutTelemetry, seed: int) -> None:
    """Record this member's outcomes."""
    for agent, disposition, reward, kind in outcomes(seed):
        if disposition == "failed":
            telemetry.record_failure(agent, kind)
        elif disposition == "omitted":
            telemetry.record_omission(agent, kind)
        else:
            telemetry.record(
                agent, {"reward": reward, "mask_sample": disposition == "masked", "failure_kind": kind}
            )


def main() -> None:
    seed, port, port_range = (int(arg) for arg in sys.argv[1:4])
    telemetry = RolloutTelemetry(run="fleet")
    telemetry.expect(*AGENTS)
    server = telemetry.serve(port=port, port_range=port_range)
    print(f"ready {server.port}", flush=True)
    for line in sys.stdin:
        if line.strip() == "go":
            record_all(telemetry, seed)
            print("done", flush=True)
    server.stop()


if __name__ == "__main__":
    main()

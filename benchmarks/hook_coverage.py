"""Cost of record() with an identity in hook mode, against record() without one, measured in one process.

Four ways to record the same measured row, timed in interleaved rounds on fresh telemetries (each round's
identities are new: a repeated identity would be a duplicate, refused):

- ``plain``: ``record(agent, row)``, no identity (the common call), timed twice for the A/A ratio (the noise);
- ``identity``: ``record(agent, row, task, rollout)`` with no expected work declared (groups only, if sized);
- ``coverage``: the same once ``expect(tasks=...)`` declared the run's work, so each outcome is also weighed
  in the coverage account and its group;
- ``coverage+attempt``: as ``coverage``, with ``attempt=0`` given.

Every statement draws its identity from the same iterator, so the drawing costs the same in each. Ratios are
medians of per-round ratios against ``plain`` (each pair timed moments apart, so drift cancels).

    .venv/bin/python benchmarks/hook_coverage.py [--calls 20000] [--rounds 21]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ is a package of the checkout

from benchmarks.record import ROWS  # this directory's record.py: the same rows
from rollout_telemetry import RolloutTelemetry
from rollout_telemetry._cli.args import at_least_one  # the CLI's check, and its message

GROUP = 4
STATEMENTS = {
    "plain": "task, rollout = next(ids); record('math_agent', measured)",
    "plain again": "task, rollout = next(ids); record('math_agent', measured)",
    "identity": "task, rollout = next(ids); record('math_agent', measured, task, rollout)",
    "coverage": "task, rollout = next(ids); record('math_agent', measured, task, rollout)",
    "coverage+attempt": "task, rollout = next(ids); record('math_agent', measured, task, rollout, 0)",
}


def _names(statement: str, calls: int) -> dict[str, object]:
    """A fresh telemetry for one timing, its expected work declared (untimed) when the statement needs it."""
    telemetry = RolloutTelemetry(run="bench")
    if statement.startswith("coverage"):
        telemetry.expect("math_agent", tasks=calls // GROUP + 1, rollouts_per_task=GROUP)
    ids = iter([(number // GROUP, number % GROUP) for number in range(calls)])
    return {"record": telemetry.record, "ids": ids, **ROWS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=at_least_one, default=20_000, help="calls per timing")
    parser.add_argument("--rounds", type=at_least_one, default=21, help="interleaved rounds")
    args = parser.parse_args()
    times: dict[str, list[float]] = {}
    order = list(STATEMENTS)
    for round_ in range(args.rounds + 1):  # the first round warms up and is not kept
        for which in order:
            names = _names(which, args.calls)
            seconds = timeit.timeit(STATEMENTS[which], globals=names, number=args.calls) / args.calls
            if round_:
                times.setdefault(which, []).append(seconds)
        order.append(order.pop(0))  # each statement goes first as often as the others

    def ratio(which: str) -> float:
        return statistics.median(a / b for a, b in zip(times[which], times["plain"], strict=True))

    print(f"record() of one measured row, {args.rounds} interleaved rounds of {args.calls:,} calls")
    print(f"{'statement':<18}{'per call':>10}{'/ plain':>9}")
    for which in STATEMENTS:
        print(f"{which:<18}{statistics.median(times[which]) * 1e9:>8.0f}ns{ratio(which):>8.3f}x")
    print("'plain again' / plain is the A/A ratio: what the machine moves on its own")


if __name__ == "__main__":
    main()

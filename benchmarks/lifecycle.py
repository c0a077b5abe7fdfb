"""Cost of the lifecycle API (``with telemetry.rollout(...)``) against ``record()``, no OTel SDK configured.

Prints the per-rollout time of each, interleaved rounds in one run (median), and the ratio (goal: <= 2x).

    .venv/bin/python benchmarks/lifecycle.py [--calls 100000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import timeit

from rollout_telemetry import RolloutTelemetry


def measure(calls: int, rounds: int) -> dict[str, float]:
    """Median seconds per rollout of record() and of the lifecycle block."""
    telemetry = RolloutTelemetry(run="bench")
    response = {"reward": 0.5}
    record = telemetry.record
    rollout = telemetry.rollout

    def with_record() -> None:
        record("math_agent", response)

    def with_lifecycle() -> None:
        with rollout("math_agent", task_index=1, rollout_index=0) as handle:
            handle.complete(response)

    timeit.timeit(with_record, number=calls)  # warm up both before timing
    timeit.timeit(with_lifecycle, number=calls)
    times: dict[str, list[float]] = {"record()": [], "rollout() block": []}
    for _ in range(rounds):
        times["record()"].append(timeit.timeit(with_record, number=calls) / calls)
        times["rollout() block"].append(timeit.timeit(with_lifecycle, number=calls) / calls)
    return {name: statistics.median(ts) for name, ts in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    result = measure(args.calls, args.rounds)
    for name, seconds in result.items():
        print(f"{name:<18} {seconds * 1e6:8.3f} us/rollout")
    ratio = result["rollout() block"] / result["record()"]
    print(f"\nlifecycle / record: {ratio:.2f}x (goal <= 2)")


if __name__ == "__main__":
    main()

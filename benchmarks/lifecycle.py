"""Cost of the lifecycle API (``with telemetry.rollout(...)``) against ``record()``, no OTel SDK configured.

Times, in interleaved rounds of one run: ``record()``; the lifecycle block with no OpenTelemetry SDK
configured (the default); and the same block with spans switched off (``span_mode="off"``), which isolates
what the OpenTelemetry part costs when nothing is configured. Ratios are medians of per-round ratios.
Goal: the lifecycle block at most 2x ``record()``.

    .venv/bin/python benchmarks/lifecycle.py [--calls 100000] [--rounds 9]
"""

from __future__ import annotations

import argparse
import statistics
import timeit
from collections.abc import Callable

from rollout_telemetry import RolloutTelemetry


def candidates() -> dict[str, Callable[[], None]]:
    """One rollout recorded each way."""
    telemetry = RolloutTelemetry(run="bench")
    quiet = RolloutTelemetry(run="bench", span_mode="off")
    response = {"reward": 0.5}
    record = telemetry.record

    def with_record() -> None:
        record("math_agent", response)

    def with_lifecycle() -> None:
        with telemetry.rollout("math_agent", task_index=1, rollout_index=0) as handle:
            handle.complete(response)

    def with_lifecycle_spans_off() -> None:
        with quiet.rollout("math_agent", task_index=1, rollout_index=0) as handle:
            handle.complete(response)

    return {
        "record()": with_record,
        "rollout() block": with_lifecycle,
        "rollout() block, spans off": with_lifecycle_spans_off,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    ops = candidates()
    for op in ops.values():  # warm up
        timeit.timeit(op, number=args.calls)
    times: dict[str, list[float]] = {name: [] for name in ops}
    for _ in range(args.rounds):
        for name, op in ops.items():
            times[name].append(timeit.timeit(op, number=args.calls) / args.calls)
    for name, seconds in times.items():
        print(f"{name:<28} {statistics.median(seconds) * 1e6:8.3f} us/rollout")

    def ratio(a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(times[a], times[b], strict=True))

    print(f"\nlifecycle / record: {ratio('rollout() block', 'record()'):.2f}x (goal <= 2)")
    otel_part = ratio("rollout() block", "rollout() block, spans off")
    print(f"lifecycle with no SDK / with spans off: {otel_part:.2f}x (the unconfigured OpenTelemetry part)")


if __name__ == "__main__":
    main()

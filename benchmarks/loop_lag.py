"""CPU cost of the event-loop lag sampler (the share of one core it takes) and of the garbage-collection
pause hook (the time it adds to a collection), measured in one run.

In interleaved rounds, an idle asyncio loop (one ``asyncio.sleep``) runs for ``--seconds`` without a
sampler, then with one at each interval; the process's CPU time over the same wall time, with the sampler
minus without it, divided by the wall time, is the sampler's share of one core. Medians over the rounds. A
fast interval (1 ms) also gives the cost of one wake. Goal: under 1% of a core at the default interval
(0.25 s) and at 0.1 s. Then the time ``gc.collect(0)`` of an empty young generation takes with the pause hook
installed (a telemetry with ``runtime_metrics=True``) and without: what the hook adds to each collection.

    .venv/bin/python benchmarks/loop_lag.py [--seconds 2] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
import timeit

from rollout_telemetry import RolloutTelemetry

INTERVALS = (0.25, 0.1, 0.001)


def _cpu_over(seconds: float, interval: float | None) -> tuple[float, float]:
    """CPU and wall seconds of an idle loop running ``seconds``, sampled every ``interval`` (or not)."""
    telemetry = (
        RolloutTelemetry(runtime_metrics=False)
        if interval is None
        else RolloutTelemetry(loop_lag_interval=interval)
    )

    async def idle() -> None:
        async with telemetry.rollout("a") as rollout:  # starts the loop's sampler, with runtime metrics
            rollout.complete({"reward": 1.0})
        await asyncio.sleep(seconds)

    loop = asyncio.new_event_loop()
    try:
        cpu, wall = time.process_time(), time.perf_counter()
        loop.run_until_complete(idle())
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        loop.close()
    samples = telemetry.registry.get_sample_value("rollout_telemetry_event_loop_lag_seconds_count")
    if interval is not None:
        assert samples is not None
        assert samples >= 0.5 * seconds / interval, samples  # the sampler did wake
    return cpu, wall


def _young_collection(hooked: bool, number: int = 20_000) -> float:
    """Seconds one ``gc.collect(0)`` takes, with the pause hook installed or not."""
    telemetry = RolloutTelemetry(runtime_metrics=hooked)
    try:
        return timeit.timeit(lambda: gc.collect(0), number=number) / number
    finally:
        telemetry.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    shares: dict[float, list[float]] = {interval: [] for interval in INTERVALS}
    for _ in range(args.rounds):
        base_cpu, base_wall = _cpu_over(args.seconds, None)
        for interval in INTERVALS:
            cpu, wall = _cpu_over(args.seconds, interval)
            shares[interval].append(cpu / wall - base_cpu / base_wall)
    print(f"idle loop for {args.seconds} s, {args.rounds} rounds; sampler's CPU share of one core (median):")
    for interval in INTERVALS:
        share = statistics.median(shares[interval])
        print(f"  interval {interval:>6} s: {100 * share:7.3f}%  ({1e6 * share * interval:.1f} us per wake)")
    added = statistics.median(
        _young_collection(hooked=True) - _young_collection(hooked=False) for _ in range(args.rounds)
    )
    print(f"the gc pause hook adds {1e6 * added:.2f} us to each collection")
    worst = max(statistics.median(shares[0.25]), statistics.median(shares[0.1]))
    print(f"goal: under 1% at 0.25 s and 0.1 s: {'met' if worst < 0.01 else 'NOT met'}")


if __name__ == "__main__":
    main()

"""Cost of record() against a bare locked dict update, prometheus_client and the OpenTelemetry SDK.

Prints the per-call time of each, measured in one run with interleaved rounds (median of rounds), and the
ratios the performance goals are stated in. Absolute times drift between machines; the ratios are the result.

    .venv/bin/python benchmarks/record.py [--calls 200000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import timeit

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry, Counter

from rollout_telemetry import RolloutTelemetry


def candidates() -> tuple[dict[str, str], dict[str, object]]:
    """The statements timed, each one call that records one outcome, and the names they use."""
    lock = threading.Lock()
    counts: dict[tuple[str, str], int] = {}

    def bare_dict(agent: str, kind: str) -> None:
        with lock:
            counts[(agent, kind)] = counts.get((agent, kind), 0) + 1

    registry = CollectorRegistry()
    prom = Counter("rollout_masked", "masked", ["agent", "failure_kind"], registry=registry)
    meter = MeterProvider(metric_readers=[InMemoryMetricReader()]).get_meter("bench")
    otel = meter.create_counter("rollout_masked")
    telemetry = RolloutTelemetry(run="bench")
    names: dict[str, object] = {
        "bare_dict": bare_dict,
        "prom": prom,
        "otel": otel,
        "attributes": {"agent": "math_agent", "failure_kind": "judge_failed"},
        "record": telemetry.record,
        "record_failure": telemetry.record_failure,
        "measured": {"reward": 0.5},
        "masked": {"reward": 0.0, "mask_sample": True, "failure_kind": "judge_failed"},
    }
    statements = {
        "bare dict under a lock": "bare_dict('math_agent', 'judge_failed')",
        "prometheus_client labels().inc()": "prom.labels('math_agent', 'judge_failed').inc()",
        "OpenTelemetry SDK counter.add()": "otel.add(1, attributes)",
        "record() measured": "record('math_agent', measured)",
        "record() masked": "record('math_agent', masked)",
        "record_failure()": "record_failure('math_agent', 'session_lost')",
    }
    return statements, names


def measure(calls: int, rounds: int) -> dict[str, float]:
    """Median seconds per call of each candidate, rounds interleaved so drift hits all alike."""
    statements, names = candidates()
    times: dict[str, list[float]] = {name: [] for name in statements}
    for _ in range(rounds):
        for name, statement in statements.items():
            times[name].append(timeit.timeit(statement, globals=names, number=calls) / calls)
    return {name: statistics.median(ts) for name, ts in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    result = measure(args.calls, args.rounds)
    for name, seconds in result.items():
        print(f"{name:<36} {seconds * 1e6:8.3f} us/call")
    bare = result["bare dict under a lock"]
    prom = result["prometheus_client labels().inc()"]
    otel = result["OpenTelemetry SDK counter.add()"]
    print()
    for name in ("record() measured", "record() masked", "record_failure()"):
        own = result[name]
        print(
            f"{name:<20} vs bare dict: {own / bare:5.2f}x (goal <= 2)   "
            f"prometheus_client is {prom / own:5.2f}x slower (goal >= 2)   "
            f"OTel SDK is {otel / own:5.2f}x slower (goal >= 10)"
        )


if __name__ == "__main__":
    main()

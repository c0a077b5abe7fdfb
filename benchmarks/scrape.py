"""Cost of rendering /metrics from the account against plain prometheus_client metrics with the same series.

50 agents x 24 failure kinds x masked/failed/omitted (plus the per-agent series), rendered four ways in
interleaved rounds of one run: the account's collector through prometheus_client's writer
(``generate_latest``: what a user combining registries gets), the endpoint's own writer
(``_exposition.encode``) with nothing changed since the last scrape and with every agent changed (one
``record()`` each, included in its time), and plain prometheus_client objects holding the same series.
Prints the median of each and the ratios (goals: the collector <= 1.1x plain, the endpoint <= 0.5x).

    .venv/bin/python benchmarks/scrape.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from rollout_telemetry import RolloutTelemetry
from rollout_telemetry.exporters._exposition import encode
from rollout_telemetry.failure_kinds import REGISTERED

AGENTS = [f"agent_{i:02d}" for i in range(50)]
KINDS = sorted(REGISTERED)[:24]


def build() -> tuple[RolloutTelemetry, CollectorRegistry, int]:
    """Our telemetry and a plain registry holding the same series; returns both and the sample count."""
    telemetry = RolloutTelemetry(run="bench", max_kinds_per_agent=64, runtime_metrics=False)  # same series
    plain = CollectorRegistry()
    labels = ["run", "agent"]
    kind_labels = [*labels, "failure_kind"]
    completed = Counter("rollout_completed", "c", labels, registry=plain)
    rewarded = Counter("rollout_rewarded", "c", labels, registry=plain)
    positive = Counter("rollout_reward_positive", "c", labels, registry=plain)
    negative = Counter("rollout_reward_negative", "c", labels, registry=plain)
    reward = Gauge("rollout_reward", "g", labels, registry=plain)
    unmasked = Gauge("rollout_reward_unmasked", "g", labels, registry=plain)
    ratio = Gauge("rollout_masked_ratio", "g", labels, registry=plain)
    masked_rewarded = Counter("rollout_masked_rewarded", "c", labels, registry=plain)
    masked_positive = Counter("rollout_masked_reward_positive", "c", labels, registry=plain)
    masked_negative = Counter("rollout_masked_reward_negative", "c", labels, registry=plain)
    by_kind = {
        name: Counter(name, "c", kind_labels, registry=plain)
        for name in ("rollout_masked", "rollout_failed", "rollout_omitted")
    }
    for agent in AGENTS:
        telemetry.record(agent, {"reward": 1.0})
        for kind in KINDS:
            telemetry.record(agent, {"reward": 0.0, "mask_sample": True, "failure_kind": kind})
            telemetry.record_failure(agent, kind)
            telemetry.record_omission(agent, kind)
        snap = telemetry.snapshot().agent(agent)
        assert snap is not None
        values = ("bench", agent)
        completed.labels(*values).inc(snap.completed)
        rewarded.labels(*values).inc(snap.rewarded)
        positive.labels(*values).inc(snap._reward_positive)
        negative.labels(*values).inc(snap._reward_negative)
        reward.labels(*values).set(snap.mean_reward or 0.0)
        unmasked.labels(*values).set(snap.mean_reward_unmasked or 0.0)
        ratio.labels(*values).set(snap.masked_ratio or 0.0)
        masked_rewarded.labels(*values).inc(snap._masked_rewarded)
        masked_positive.labels(*values).inc(snap._masked_positive)
        masked_negative.labels(*values).inc(snap._masked_negative)
        for kind in KINDS:
            for counter in by_kind.values():
                counter.labels(*values, kind).inc()
    ours = generate_latest(telemetry.registry)
    samples = sum(1 for line in ours.splitlines() if line and not line.startswith(b"#"))
    return telemetry, plain, samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--renders", type=int, default=20, help="renders per round")
    args = parser.parse_args()
    # Plain counters also expose a `_created` sample per series by default; the account does not. To
    # compare the same series, the baseline runs with those switched off (a process-wide switch).
    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
    telemetry, plain, count = build()
    ours = telemetry.registry
    assert len(generate_latest(plain).splitlines()) == len(generate_latest(ours).splitlines()), (
        "series differ"
    )

    def changed() -> None:
        for agent in AGENTS:
            telemetry.record(agent, {"reward": 1.0})
        encode(ours, "")

    candidates: dict[str, Callable[[], object]] = {
        "account collector": lambda: generate_latest(ours),
        "endpoint, nothing changed": lambda: encode(ours, ""),
        "endpoint, every agent changed": changed,
        "plain prometheus_client": lambda: generate_latest(plain),
    }
    times: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(args.rounds):
        for name, render in candidates.items():
            start = time.perf_counter()
            for _ in range(args.renders):
                render()
            times[name].append((time.perf_counter() - start) / args.renders)
    print(f"{count} samples per scrape (50 agents x 24 kinds x masked/failed/omitted + per-agent series)")
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    for name, seconds in medians.items():
        print(f"{name:<30} {seconds * 1e3:8.2f} ms/scrape")
    plain_time = times["plain prometheus_client"]
    print()
    for name, goal in (
        ("account collector", 1.1),
        ("endpoint, nothing changed", 0.5),
        ("endpoint, every agent changed", 0.5),
    ):
        ratio = statistics.median(a / b for a, b in zip(times[name], plain_time, strict=True))
        print(f"{name} / plain prometheus_client: {ratio:.2f}x (goal <= {goal})")


if __name__ == "__main__":
    main()

"""Cost of rendering /metrics from the account against plain prometheus_client metrics with the same series.

50 agents x 24 failure kinds x masked/failed/omitted (plus the per-agent series), rendered by
prometheus_client's exposition writer both ways. Interleaved rounds in one run; prints the median of each
and the ratio (goal: <= 1.1).

    .venv/bin/python benchmarks/scrape.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import statistics
import time

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from rollout_telemetry import RolloutTelemetry
from rollout_telemetry.failure_kinds import REGISTERED

AGENTS = [f"agent_{i:02d}" for i in range(50)]
KINDS = sorted(REGISTERED)[:24]


def build() -> tuple[CollectorRegistry, CollectorRegistry, int]:
    """Our registry and a plain one holding the same series; returns both and the sample count."""
    telemetry = RolloutTelemetry(run="bench", max_kinds_per_agent=64)
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
        positive.labels(*values).inc(snap.reward_positive)
        negative.labels(*values).inc(snap.reward_negative)
        reward.labels(*values).set(snap.mean_reward or 0.0)
        unmasked.labels(*values).set(snap.mean_reward_unmasked or 0.0)
        ratio.labels(*values).set(snap.masked_ratio or 0.0)
        masked_rewarded.labels(*values).inc(snap.masked_rewarded)
        masked_positive.labels(*values).inc(snap.masked_positive)
        masked_negative.labels(*values).inc(snap.masked_negative)
        for kind in KINDS:
            for counter in by_kind.values():
                counter.labels(*values, kind).inc()
    ours = generate_latest(telemetry.registry)
    samples = sum(1 for line in ours.splitlines() if line and not line.startswith(b"#"))
    return telemetry.registry, plain, samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--renders", type=int, default=20, help="renders per round")
    args = parser.parse_args()
    # Plain counters also expose a `_created` sample per series by default; the account does not. To
    # compare the same series, the baseline runs with those switched off (a process-wide switch).
    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
    ours, plain, count = build()
    assert len(generate_latest(plain).splitlines()) == len(generate_latest(ours).splitlines()), (
        "series differ"
    )
    times: dict[str, list[float]] = {"account collector": [], "plain prometheus_client": []}
    for _ in range(args.rounds):
        for name, registry in (("account collector", ours), ("plain prometheus_client", plain)):
            start = time.perf_counter()
            for _ in range(args.renders):
                generate_latest(registry)
            times[name].append((time.perf_counter() - start) / args.renders)
    print(f"{count} samples per scrape (50 agents x 24 kinds x masked/failed/omitted + per-agent series)")
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    for name, seconds in medians.items():
        print(f"{name:<26} {seconds * 1e3:8.2f} ms/scrape")
    ratio = medians["account collector"] / medians["plain prometheus_client"]
    print(f"\naccount collector / plain prometheus_client: {ratio:.2f}x (goal <= 1.1)")


if __name__ == "__main__":
    main()

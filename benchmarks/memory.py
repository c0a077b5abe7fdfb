"""Memory of the account under sustained recording: RSS growth over 10 million outcomes after warm-up.

Records over a fixed label set (agents x failure kinds, every disposition), scraping now and then as a
server would, and prints the resident-set growth between the end of warm-up and the end (goal: < 1 MB).

    .venv/bin/python benchmarks/memory.py [--outcomes 10000000]
"""

from __future__ import annotations

import argparse
import gc
import os
import time

from prometheus_client import generate_latest

from rollout_telemetry import RolloutTelemetry
from rollout_telemetry.failure_kinds import REGISTERED

AGENTS = [f"agent_{i}" for i in range(8)]
KINDS = sorted(REGISTERED)[:12]


def rss_bytes() -> int:
    """The current resident set size of this process."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def drive(telemetry: RolloutTelemetry, outcomes: int) -> None:
    """Record ``outcomes`` outcomes cycling over every agent, kind and disposition."""
    record, fail, omit = telemetry.record, telemetry.record_failure, telemetry.record_omission
    measured = [{"reward": r / 10} for r in range(-5, 6)]
    masked = [{"reward": 0.0, "mask_sample": True, "failure_kind": kind} for kind in KINDS]
    for i in range(outcomes):
        agent = AGENTS[i % len(AGENTS)]
        choice = i % 10
        if choice < 6:
            record(agent, measured[i % len(measured)])
        elif choice < 8:
            record(agent, masked[i % len(masked)])
        elif choice == 8:
            fail(agent, KINDS[i % len(KINDS)])
        else:
            omit(agent, KINDS[(i * 7) % len(KINDS)])
        if i % 1_000_000 == 0:
            generate_latest(telemetry.registry)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outcomes", type=int, default=10_000_000)
    parser.add_argument("--warmup", type=int, default=200_000)
    args = parser.parse_args()
    telemetry = RolloutTelemetry(run="bench")
    drive(telemetry, args.warmup)
    gc.collect()
    before = rss_bytes()
    started = time.perf_counter()
    drive(telemetry, args.outcomes)
    elapsed = time.perf_counter() - started
    gc.collect()
    after = rss_bytes()
    snap = telemetry.snapshot()
    total = sum(a.completed + a.failed + a.omitted for a in snap.agents)
    assert total == args.warmup + args.outcomes, (total, args.warmup + args.outcomes)
    print(f"recorded {args.outcomes:,} outcomes after {args.warmup:,} of warm-up in {elapsed:.1f} s")
    print(f"RSS after warm-up {before / 2**20:.2f} MiB, after the run {after / 2**20:.2f} MiB")
    print(
        f"RSS growth: {(after - before) / 2**10:.1f} KiB (goal < 1024 KiB); every outcome counted: {total:,}"
    )


if __name__ == "__main__":
    main()

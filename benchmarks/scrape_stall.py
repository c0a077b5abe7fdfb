"""Does a scrape stall the recorder? 50,000 series, a thread scraping without pause, one thread recording.

The account holds its lock during a scrape only to copy what the snapshot needs; labels, totals and the
exposition are derived after the lock is released. This script measures what the recording thread sees
while another thread renders ``/metrics`` (prometheus_client's ``generate_latest``) back to back: the
latency of every ``record()`` call, its p99 and its worst, against a run with nobody scraping. The
interpreter lock still hands the CPU back and forth every ``sys.getswitchinterval()`` (5 ms by default),
so a call may wait that long for it whatever the telemetry does; that is printed beside the figures.

What remains above the lock's copy is the interpreter's own garbage collector: a render allocates enough for
full collections, each walking every object of the process (the imported libraries included) while every
thread waits. ``gc.freeze()`` after start-up, which ``serve`` and ``demo`` do, takes what was loaded then out
of those walks; the benchmark runs both ways and prints both.

Goals: no call over 15 ms, p99 under 1 ms.

    .venv/bin/python benchmarks/scrape_stall.py [--seconds 10]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import threading
import time
from array import array

from prometheus_client import generate_latest

from rollout_telemetry import RolloutTelemetry

AGENTS, KINDS = 250, 50
DISPOSITIONS = ("masked", "unscored", "failed", "omitted")


def populated() -> RolloutTelemetry:
    """A telemetry with 250 agents x 50 kinds x 4 dispositions = 50,000 kind series (plus per-agent ones)."""
    telemetry = RolloutTelemetry(run="stall", max_kinds_per_agent=KINDS)
    for a in range(AGENTS):
        agent = f"agent_{a}"
        telemetry.record(agent, {"reward": 0.5})
        for k in range(KINDS):
            kind = f"bench:kind_{k}"
            telemetry.record(agent, {"reward": 0.0, "mask_sample": True, "failure_kind": kind})
            telemetry.record(agent, {"reward": None, "failure_kind": kind})
            telemetry.record_failure(agent, kind)
            telemetry.record_omission(agent, kind)
    return telemetry


def record_for(telemetry: RolloutTelemetry, seconds: float) -> array[float]:
    """Record rollouts for ``seconds``; return each call's latency in seconds.

    The latencies go to an ``array``, not a list: the garbage collector would walk a list of millions of
    floats on every full collection and charge its own pauses to the calls being measured.
    """
    latencies: array[float] = array("d")
    clock = time.perf_counter
    masked = {"reward": 0.0, "mask_sample": True, "failure_kind": "bench:kind_7"}
    end = clock() + seconds
    i = 0
    while True:
        start = clock()
        if start > end:
            return latencies
        telemetry.record(f"agent_{i % AGENTS}", masked if i % 4 == 0 else {"reward": 0.5})
        latencies.append(clock() - start)
        i += 1


def summary(latencies: array[float]) -> tuple[float, float, float]:
    """p50, p99 and worst, in milliseconds."""
    ordered = sorted(latencies)
    p99 = ordered[int(0.99 * (len(ordered) - 1))]
    return statistics.median(ordered) * 1e3, p99 * 1e3, ordered[-1] * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    telemetry = populated()
    series = sum(1 for family in telemetry.registry.collect() for _ in family.samples)
    started = time.perf_counter()
    snap = telemetry.snapshot()
    snapshot_ms = (time.perf_counter() - started) * 1e3
    started = time.perf_counter()
    generate_latest(telemetry.registry)
    render_ms = (time.perf_counter() - started) * 1e3

    print(
        f"{series:,} samples in the exposition ({len(snap.agents)} agents); one snapshot "
        f"{snapshot_ms:.1f} ms, one full render {render_ms:.0f} ms; interpreter switch interval "
        f"{sys.getswitchinterval() * 1e3:.0f} ms"
    )
    for frozen in (False, True):
        if frozen:
            gc.collect()
            gc.freeze()  # what serve and demo do once they are set up
        quiet = record_for(telemetry, args.seconds / 2)
        busy, scrapes = scraped(telemetry, args.seconds)
        how = "after gc.freeze() (serve, demo)" if frozen else "without gc.freeze() (a library)"
        print(how)
        for name, latencies in (("no scrapes", quiet), (f"{scrapes} scrapes meanwhile", busy)):
            p50, p99, worst = summary(latencies)
            print(
                f"  record() with {name:<22} {len(latencies):>9,} calls: p50 {p50:.4f} ms, "
                f"p99 {p99:.4f} ms, worst {worst:.2f} ms"
            )
        _, p99, worst = summary(busy)
        verdict = "met" if worst <= 15.0 and p99 < 1.0 else "NOT met"
        print(f"  goal (worst <= 15 ms, p99 < 1 ms while scraped): {verdict}")


def scraped(telemetry: RolloutTelemetry, seconds: float) -> tuple[array[float], int]:
    """Record for ``seconds`` while another thread renders /metrics back to back."""
    stop = threading.Event()
    scrapes = 0

    def scraper() -> None:
        nonlocal scrapes
        while not stop.is_set():
            generate_latest(telemetry.registry)
            scrapes += 1

    thread = threading.Thread(target=scraper)
    thread.start()
    busy = record_for(telemetry, seconds)
    stop.set()
    thread.join()
    return busy, scrapes


if __name__ == "__main__":
    main()

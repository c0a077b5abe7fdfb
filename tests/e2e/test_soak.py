"""Soak: four threads recording flat out while a client scrapes in a loop, for a bounded time."""

from __future__ import annotations

import os
import threading
import time
import urllib.request

import pytest

from rollout_telemetry import RolloutTelemetry
from tests.support import samples

pytestmark = pytest.mark.e2e
SECONDS = 20.0


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_soak_no_failed_scrape_flat_memory_exact_counts() -> None:
    """No scrape fails, resident memory stays flat after warm-up, and the final counts are exact."""
    telemetry = RolloutTelemetry(run="soak")
    stop = threading.Event()
    recorded = [0, 0, 0, 0]

    def writer(index: int) -> None:
        agent = f"agent_{index}"
        masked = {"reward": 0.0, "mask_sample": True, "failure_kind": "judge_failed"}
        n = 0
        while not stop.is_set():
            for _ in range(100):
                telemetry.record(agent, {"reward": 0.25})
                telemetry.record(agent, masked)
                telemetry.record_failure(agent, "session_lost")
            n += 100
        recorded[index] = n

    scrapes = 0
    failures: list[str] = []
    rss: list[int] = []
    with telemetry.serve(port=0) as server:
        threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        started = time.monotonic()
        try:
            while time.monotonic() - started < SECONDS:
                try:
                    with urllib.request.urlopen(server.url, timeout=10) as response:
                        parsed = samples(response.read().decode())
                    assert response.status == 200
                    for i in range(4):
                        labels = frozenset({("agent", f"agent_{i}"), ("run", "soak")})
                        completed = parsed.get(("rollout_completed_total", labels), 0)
                        masked = parsed.get(
                            ("rollout_masked_total", labels | {("failure_kind", "judge_failed")}), 0
                        )
                        # Each writer records measured, then masked: a scrape sees equal counts or one
                        # measured ahead, never anything else (a torn update would show otherwise).
                        if not 0 <= completed - 2 * masked <= 1:
                            failures.append(f"inconsistent scrape: completed {completed}, masked {masked}")
                    scrapes += 1
                except Exception as exc:  # any failed scrape is a finding, not a crash of the test
                    failures.append(repr(exc))
                if time.monotonic() - started > SECONDS / 4 and len(rss) < 1:
                    rss.append(_rss_bytes())
                time.sleep(0.01)
            rss.append(_rss_bytes())
        finally:
            stop.set()
            for thread in threads:
                thread.join()
    assert failures == []
    assert scrapes > 50
    growth = rss[-1] - rss[0]
    assert growth < 4 * 2**20, f"RSS grew by {growth / 2**20:.1f} MiB after warm-up"
    for i, n in enumerate(recorded):
        agent = telemetry.snapshot().agent(f"agent_{i}")
        assert agent is not None
        assert (agent.measured, agent.masked, agent.failed) == (n, n, n)

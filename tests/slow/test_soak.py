"""Soak: four threads recording flat out while a client scrapes in a loop, for a bounded time.

In one process (writer threads and the HTTP server in threads), but on the wall clock for ``SECONDS``: a
``slow`` test. It asserts what matters under load: no failed or torn scrape, exact final counts, flat memory.
It does not assert a scrape rate, which only measures how busy the machine is.
"""

from __future__ import annotations

import threading
import time
import urllib.request

from rollout_telemetry import RolloutTelemetry
from tests.support import rss, samples

SECONDS = 10.0
WARM_UP_SECONDS = SECONDS / 4
WRITERS = 4
MIN_SCRAPES = 3  # liveness: the server answered while writers ran, not a rate
MAX_RSS_GROWTH = 4 * 2**20


def _scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        return samples(response.read().decode())


def _labels(index: int, **extra: str) -> frozenset[tuple[str, str]]:
    return frozenset({("agent", f"agent_{index}"), ("run", "soak"), *extra.items()})


def _torn(parsed: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> list[str]:
    """Each writer records measured, then masked: a scrape sees equal counts or one measured ahead."""
    torn = []
    for i in range(WRITERS):
        completed = parsed.get(("rollout_completed_total", _labels(i)), 0)
        masked = parsed.get(("rollout_masked_total", _labels(i, failure_kind="judge_failed")), 0)
        if not 0 <= completed - 2 * masked <= 1:
            torn.append(f"inconsistent scrape: completed {completed}, masked {masked}")
    return torn


def test_soak_no_failed_scrape_flat_memory_exact_counts() -> None:
    """No scrape fails or is torn, memory stays flat after warm-up, and the final counts are exact."""
    telemetry = RolloutTelemetry(run="soak")
    stop = threading.Event()
    recorded = [0] * WRITERS  # each writer's own tally of the triples it recorded

    def writer(index: int) -> None:
        agent = f"agent_{index}"
        masked = {"reward": 0.0, "mask_sample": True, "failure_kind": "judge_failed"}
        while not stop.is_set():
            for _ in range(100):
                telemetry.record(agent, {"reward": 0.25})
                telemetry.record(agent, masked)
                telemetry.record_failure(agent, "session_lost")
            recorded[index] += 100

    scrapes = 0
    failures: list[str] = []
    resident: list[int] = []
    with telemetry.serve(port=0) as server:
        threads = [threading.Thread(target=writer, args=(i,)) for i in range(WRITERS)]
        for thread in threads:
            thread.start()
        started = time.monotonic()
        try:
            while time.monotonic() - started < SECONDS:
                try:
                    failures.extend(_torn(_scrape(server.url)))
                    scrapes += 1
                except Exception as exc:  # any failed scrape is a finding, not a crash of the test
                    failures.append(repr(exc))
                if not resident and time.monotonic() - started > WARM_UP_SECONDS:
                    resident.append(rss())
                time.sleep(0.01)  # pacing: a client scraping in a loop, not a synchronisation
            resident.append(rss())
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=30)
        assert not any(thread.is_alive() for thread in threads), "a writer did not stop"
        final = _scrape(server.url)  # the writers have stopped: the exposition is exact now

    assert failures == []
    assert scrapes >= MIN_SCRAPES, f"only {scrapes} scrapes answered in {SECONDS} s"
    assert len(resident) == 2
    growth = resident[-1] - resident[0]
    assert growth < MAX_RSS_GROWTH, f"RSS grew by {growth / 2**20:.1f} MiB after warm-up"
    snapshot = telemetry.snapshot()
    for i, n in enumerate(recorded):
        assert n > 0, f"writer {i} recorded nothing"
        agent = snapshot.agent(f"agent_{i}")
        assert agent is not None
        assert (agent.measured, agent.masked, agent.failed) == (n, n, n)
        assert final[("rollout_completed_total", _labels(i))] == 2 * n
        assert final[("rollout_masked_total", _labels(i, failure_kind="judge_failed"))] == n
        assert final[("rollout_failed_total", _labels(i, failure_kind="session_lost"))] == n

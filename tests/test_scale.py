"""Scale: exact totals under concurrency, consistent scrapes under load, bounded cardinality, port ranges."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from rollout_telemetry import RolloutTelemetry
from rollout_telemetry.errors import ServeError
from tests.support import FakeClock, exposition, free_port_range, samples, value

WRITERS = 4


def test_threads_and_tasks_recording_at_once_are_exact(clock: FakeClock) -> None:
    """8 threads and 1,000 asyncio tasks record concurrently; every total is exact."""
    telemetry = RolloutTelemetry(clock=clock)
    per_thread = 2000

    def thread_body(index: int) -> None:
        for i in range(per_thread):
            if i % 4 == 0:
                telemetry.record_failure(f"agent_{index % 2}", "session_lost")
            else:
                telemetry.record(f"agent_{index % 2}", {"reward": 1.0, "mask_sample": i % 4 == 1})

    async def task_body(i: int) -> None:
        async with telemetry.rollout("async_agent", task_index=i, rollout_index=0) as rollout:
            await asyncio.sleep(0)
            if i % 5 == 0:
                rollout.omit("cancelled")
            else:
                rollout.complete({"reward": -1.0})

    async def tasks() -> None:
        await asyncio.gather(*(task_body(i) for i in range(1000)))

    threads = [threading.Thread(target=thread_body, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    asyncio.run(tasks())
    for thread in threads:
        thread.join()
    snap = telemetry.snapshot()
    for name in ("agent_0", "agent_1"):
        agent = snap.agent(name)
        assert agent is not None
        assert agent.failed == 4 * per_thread // 4
        assert agent.masked == 4 * per_thread // 4
        assert agent.measured == 4 * per_thread // 2
        assert agent.reward_sum == 3 * per_thread
    asynchronous = snap.agent("async_agent")
    assert asynchronous is not None
    assert (asynchronous.measured, asynchronous.omitted, asynchronous.in_flight) == (800, 200, 0)
    assert asynchronous.reward_sum == -800


def test_scrapes_during_heavy_recording_are_consistent(clock: FakeClock) -> None:
    """Every scrape taken while 4 threads record sees consistent counts and a consistent Gym view."""
    telemetry = RolloutTelemetry(clock=clock)
    stop = threading.Event()
    problems: list[str] = []

    def writer() -> None:
        while not stop.is_set():
            telemetry.record("a", {"reward": 1.0})
            telemetry.record("a", {"reward": 0.0, "mask_sample": True, "failure_kind": "judge_failed"})
            telemetry.record_failure("a", "session_lost")

    threads = [threading.Thread(target=writer) for _ in range(WRITERS)]
    for thread in threads:
        thread.start()
    checked = 0
    try:
        for _ in range(100):
            text = exposition(telemetry.registry)
            if "rollout_failed_total" not in text:
                continue
            checked += 1
            completed = value(text, "rollout_completed_total", agent="a")
            masked = value(text, "rollout_masked_total", agent="a")
            failed = value(text, "rollout_failed_total", agent="a")
            # Each writer records measured, masked, failed in turn, so it is at most one step ahead.
            if not (0 <= completed - 2 * masked <= WRITERS and 0 <= masked - failed <= WRITERS):
                problems.append(f"torn: completed {completed} masked {masked} failed {failed}")
            rewarded = value(text, "rollout_rewarded_total", agent="a")
            positive = value(text, "rollout_reward_positive_total", agent="a")
            if not masked <= completed == rewarded:
                problems.append(f"completed {completed} masked {masked} rewarded {rewarded}")
            if value(text, "rollout_masked_ratio", agent="a") != masked / completed:
                problems.append("ratio disagrees with the counters of the same scrape")
            if value(text, "rollout_reward", agent="a") != round(positive / rewarded, 12):
                problems.append("mean disagrees with the counters of the same scrape")
            keys = telemetry.progress_metrics()
            if keys["progress/a/masked_pct"] > 100 or keys["progress/a/reward_unmasked"] != 100.0:
                problems.append(f"progress keys inconsistent: {keys}")
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert problems == []
    assert checked > 0, "no scrape saw the writers' counts"


def test_a_hundred_thousand_free_text_kinds_stay_bounded(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """100,000 distinct kinds: the series count stays under the cap and the totals still add up."""
    telemetry = RolloutTelemetry(clock=clock, max_kinds_per_agent=16)
    with caplog.at_level(logging.WARNING):
        for i in range(100_000):
            telemetry.record_failure("a", f"reset failed: container {i} exited")
    text = exposition(telemetry.registry)
    failed = {
        dict(labels)["failure_kind"]: v
        for (name, labels), v in samples(text).items()
        if name == "rollout_failed_total"
    }
    assert len(failed) == 17  # the cap, plus _other
    assert sum(failed.values()) == 100_000
    assert failed["_other"] == 100_000 - 16
    assert value(text, "rollout_telemetry_label_overflow_total", label="failure_kind") == 100_000 - 16
    overflow_warnings = [r for r in caplog.records if "cap" in r.getMessage()]
    assert len(overflow_warnings) == 1
    assert len(caplog.records) < 1100  # warn-once per name, itself bounded
    assert len(text) < 20_000


def test_agent_cap(clock: FakeClock) -> None:
    """Beyond max_agents new agents become agent="_other"; counts are kept."""
    telemetry = RolloutTelemetry(clock=clock, max_agents=3)
    for i in range(50):
        telemetry.record(f"agent_{i}", {"reward": 1.0})
    text = exposition(telemetry.registry)
    completed = {
        dict(labels)["agent"]: v
        for (name, labels), v in samples(text).items()
        if name == "rollout_completed_total"
    }
    assert completed == {"agent_0": 1, "agent_1": 1, "agent_2": 1, "_other": 47}
    assert value(text, "rollout_telemetry_label_overflow_total", label="agent") == 47


def test_port_range_gives_each_process_its_own_port(telemetry: RolloutTelemetry) -> None:
    """serve(port_range=N) takes the next free port; a full range is a clear error."""
    base = free_port_range(3)
    servers = [telemetry.serve(port=base, port_range=3) for _ in range(3)]
    try:
        assert sorted(s.port for s in servers) == [base, base + 1, base + 2]
        with pytest.raises(ServeError, match=f"ports {base}-{base + 2} are already in use"):
            telemetry.serve(port=base, port_range=3)
    finally:
        for server in servers:
            server.stop()

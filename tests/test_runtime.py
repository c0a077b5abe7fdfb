"""The collecting process's runtime: event-loop lag, gc pauses, prometheus_client's process collectors."""

from __future__ import annotations

import asyncio
import gc
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from rollout_telemetry import ConfigError, RolloutTelemetry
from rollout_telemetry.exporters._exposition import encode
from tests.support import exposition, sample_names, samples, value
from tests.test_exposition import ENCODERS

LAG = "rollout_telemetry_event_loop_lag_seconds"
PAUSE = "rollout_telemetry_gc_pause_seconds"
PROCESS = {"process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds"}
PLATFORM_AND_GC = {"python_info", "python_gc_collections_total", "python_gc_objects_collected_total"}


@pytest.fixture
def no_automatic_gc() -> Iterator[None]:
    """Only the collections a test asks for run."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def _until(condition: object, *, timeout: float, what: str) -> None:
    """Wait on the running loop until ``condition()`` holds, failing after ``timeout`` seconds."""
    assert callable(condition)
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.005)


def _assert_a_rollout_block_starts_no_sampler(telemetry: RolloutTelemetry) -> None:
    """An async rollout block, then 0.1 s (20 intervals of 5 ms) on its loop: no lag family after."""

    async def main() -> None:
        async with telemetry.rollout("a") as rollout:
            rollout.complete({"reward": 1.0})
        await asyncio.sleep(0.1)  # the window a sampler would have woken in

    asyncio.run(main())
    assert LAG + "_count" not in sample_names(exposition(telemetry.registry))


def _lag_count(telemetry: RolloutTelemetry) -> float:
    text = exposition(telemetry.registry)
    return value(text, f"{LAG}_count", run="r") if f"{LAG}_count" in sample_names(text) else 0.0


def test_a_blocked_loop_shows_its_lag_in_the_right_bucket() -> None:
    """A loop blocked for 0.3 s wakes its sampler at least 0.1 s late: one observation above 0.1 s, none above
    the 2.5 s bucket, and the sum at least the block minus one interval."""
    telemetry = RolloutTelemetry(run="r", runtime_metrics=False)

    async def main() -> None:
        telemetry.watch_event_loop(interval=0.05)
        await asyncio.sleep(0)
        time.sleep(0.3)  # the block being measured, on the loop's thread
        await _until(lambda: _lag_count(telemetry) >= 2, timeout=10, what="two lag samples")

    asyncio.run(main())
    text = exposition(telemetry.registry)
    count = value(text, f"{LAG}_count", run="r")
    assert value(text, f"{LAG}_bucket", run="r", le="0.1") <= count - 1
    assert value(text, f"{LAG}_bucket", run="r", le="2.5") == count
    assert value(text, f"{LAG}_sum", run="r") >= 0.3 - 0.05 - 0.01


def test_the_first_async_rollout_block_on_a_loop_starts_one_sampler() -> None:
    """No lag family before a rollout block runs on a loop; afterwards one sampler per loop, however many
    blocks, and the sampler ends when asyncio.run closes the loop (no warning: warnings are errors)."""
    telemetry = RolloutTelemetry(run="r", loop_lag_interval=0.01)
    assert LAG + "_count" not in sample_names(exposition(telemetry.registry))
    watches = []

    async def main() -> None:
        for _ in range(3):
            async with telemetry.rollout("a") as rollout:
                rollout.complete({"reward": 1.0})
        watches.append(telemetry.watch_event_loop())  # the one the blocks started
        watches.append(telemetry.watch_event_loop())
        await _until(lambda: _lag_count(telemetry) >= 3, timeout=10, what="three lag samples")

    asyncio.run(main())
    assert watches[0] is watches[1]
    assert not watches[0].running
    assert _lag_count(telemetry) >= 3


def test_without_runtime_metrics_a_rollout_block_starts_no_sampler() -> None:
    """runtime_metrics=False: rollout blocks leave the loop unsampled (over a window of 20 intervals)."""
    telemetry = RolloutTelemetry(run="r", runtime_metrics=False, loop_lag_interval=0.005)
    _assert_a_rollout_block_starts_no_sampler(telemetry)


def test_a_stopped_sampler_samples_no_more() -> None:
    """stop() ends sampling: the count stays where it was while the loop keeps running."""
    telemetry = RolloutTelemetry(run="r", runtime_metrics=False)

    async def main() -> float:
        watch = telemetry.watch_event_loop(interval=0.005)
        await _until(lambda: _lag_count(telemetry) >= 1, timeout=10, what="a lag sample")
        watch.stop()
        stopped_at = _lag_count(telemetry)
        await asyncio.sleep(0.05)  # ten intervals
        assert not watch.running
        return stopped_at

    stopped_at = asyncio.run(main())
    assert _lag_count(telemetry) == stopped_at


def test_a_sampler_started_from_another_thread_runs_on_its_loop() -> None:
    """watch_event_loop(loop) from outside the loop arms the sampler on the loop's own turn."""
    telemetry = RolloutTelemetry(run="r", runtime_metrics=False)
    loop = asyncio.new_event_loop()
    try:
        watch = telemetry.watch_event_loop(loop, interval=0.005)
        loop.run_until_complete(_until(lambda: _lag_count(telemetry) >= 1, timeout=10, what="a lag sample"))
        watch.stop()
    finally:
        loop.close()
    assert not watch.running


def test_a_sampler_ends_with_its_telemetry() -> None:
    """The loop holds its sampler but not the telemetry: once the telemetry is gone the sampler is not
    running and its timer stops at its next wake."""
    loop = asyncio.new_event_loop()
    try:
        telemetry = RolloutTelemetry(runtime_metrics=False)
        watch = telemetry.watch_event_loop(loop, interval=0.005)
        del telemetry
        gc.collect()
        assert not watch.running
        loop.run_until_complete(asyncio.sleep(0.02))  # the timer wakes, finds nothing, is not re-armed
    finally:
        loop.close()


def test_watching_needs_a_loop_and_a_positive_interval() -> None:
    """Outside a running loop, with a closed loop, or with a non-positive interval: ConfigError."""
    telemetry = RolloutTelemetry(runtime_metrics=False)
    with pytest.raises(ConfigError, match="running event loop"):
        telemetry.watch_event_loop()
    loop = asyncio.new_event_loop()
    loop.close()
    with pytest.raises(ConfigError, match="closed"):
        telemetry.watch_event_loop(loop)
    with pytest.raises(ConfigError, match="positive"):
        RolloutTelemetry(loop_lag_interval=0)


@pytest.mark.usefixtures("no_automatic_gc")
def test_a_forced_collection_is_one_pause_of_generation_2() -> None:
    """No pause family before a collection; gc.collect() adds one pause of generation 2 with a positive
    duration; without runtime_metrics nothing is timed."""
    telemetry = RolloutTelemetry(run="r")
    untimed = RolloutTelemetry(run="r", runtime_metrics=False)
    assert PAUSE + "_count" not in sample_names(exposition(telemetry.registry))
    gc.collect()
    text = exposition(telemetry.registry)
    assert value(text, f"{PAUSE}_count", run="r", generation="2") == 1
    assert value(text, f"{PAUSE}_sum", run="r", generation="2") > 0
    assert ("generation", "0") not in {
        label for (name, labels) in samples(text) for label in labels if name.startswith(PAUSE)
    }
    gc.collect(0)
    assert value(exposition(telemetry.registry), f"{PAUSE}_count", run="r", generation="0") == 1
    assert PAUSE + "_count" not in sample_names(exposition(untimed.registry))


@pytest.mark.usefixtures("no_automatic_gc")
def test_stopping_the_runtime_metrics_stops_timing_collections() -> None:
    """stop_runtime_metrics(): later collections are not timed, the histogram keeps what it had, and a
    rollout block starts no sampler any more (over a window of 20 intervals)."""
    telemetry = RolloutTelemetry(run="r", loop_lag_interval=0.005)
    gc.collect()
    telemetry.stop_runtime_metrics()
    gc.collect()
    assert value(exposition(telemetry.registry), f"{PAUSE}_count", run="r", generation="2") == 1
    _assert_a_rollout_block_starts_no_sampler(telemetry)


@pytest.mark.skipif(sys.platform != "linux", reason="ProcessCollector reads /proc")
def test_process_collectors_are_on_the_served_metrics_and_filterable() -> None:
    """/metrics serves prometheus_client's process, platform and gc families beside ours; ?name[]= picks one
    of them alone; runtime_metrics=False serves none of them."""
    telemetry = RolloutTelemetry(run="r")
    telemetry.record("math", {"reward": 1.0})
    with telemetry.serve(port=0) as server:
        with urllib.request.urlopen(server.url, timeout=5) as response:
            names = sample_names(response.read().decode())
        url = server.url + "?name[]=process_cpu_seconds_total"
        with urllib.request.urlopen(url, timeout=5) as response:
            filtered = sample_names(response.read().decode())
    assert PROCESS | PLATFORM_AND_GC | {"rollout_completed_total"} <= names
    assert filtered == {"process_cpu_seconds_total"}
    bare = RolloutTelemetry(run="r", runtime_metrics=False)
    bare.record("math", {"reward": 1.0})
    with bare.serve(port=0) as server, urllib.request.urlopen(server.url, timeout=5) as response:
        names = sample_names(response.read().decode())
    assert not (PROCESS | PLATFORM_AND_GC) & names
    assert "rollout_completed_total" in names


def test_a_registry_with_the_process_collectors_keeps_its_own() -> None:
    """A registry that has prometheus_client's collectors already (as its default registry does) keeps one
    of each family; on the telemetry's own registry, prometheus_client's name filter (restricted_registry,
    which reads describe()) finds them."""
    registry = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    RolloutTelemetry(registry=registry)
    families = [family.name for family in registry.collect()]
    assert families.count("python_info") == 1
    assert families.count("python_gc_collections") == 1
    own = RolloutTelemetry().registry
    restricted = generate_latest(own.restricted_registry(["python_info"])).decode()
    assert sample_names(restricted) == {"python_info"}


def test_the_runtime_histograms_are_written_as_prometheus_client_writes_them() -> None:
    """The endpoint's own writer and prometheus_client's write the same bytes for the lag histogram."""
    telemetry = RolloutTelemetry(run="r", runtime_metrics=False)

    async def main() -> None:
        telemetry.watch_event_loop(interval=0.005)
        await _until(lambda: _lag_count(telemetry) >= 2, timeout=10, what="two lag samples")

    asyncio.run(main())  # the loop is closed: the histogram no longer moves
    for accept, encoder in ENCODERS.items():
        assert encode(telemetry.registry, accept)[0] == encoder(telemetry.registry), accept


def test_one_gc_hook_for_the_process_while_a_telemetry_wants_it() -> None:
    """Two telemetries add at most one gc.callbacks hook between them, and it is gone once both are."""
    gc.collect()  # the telemetries of earlier tests that are garbage already go, and their wants with them
    before = len(gc.callbacks)
    first, second = RolloutTelemetry(), RolloutTelemetry()
    during = len(gc.callbacks)
    assert before <= during <= before + 1
    assert during >= 1
    del first, second
    gc.collect()
    assert len(gc.callbacks) == before

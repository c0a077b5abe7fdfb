"""The collecting process's runtime: event-loop lag, gc pauses, prometheus_client's process collectors."""

from __future__ import annotations

import asyncio
import gc
import sys
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

from rollout_telemetry import RolloutTelemetry
from rollout_telemetry._recording.runtime_samplers import LoopLag, LoopWatch
from rollout_telemetry._store.runtime_observations import LAG_BUCKETS, Runtime
from rollout_telemetry.errors import ConfigError
from rollout_telemetry.exporters._exposition import encode
from rollout_telemetry.exporters._prometheus import RuntimeCollector
from tests.exporters.test_exposition import ENCODERS
from tests.support import FakeClock, exposition, sample_names, samples, value
from tests.virtual_loop import VirtualLoop, idle, run_virtual

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


def _assert_a_rollout_block_starts_no_sampler(telemetry: RolloutTelemetry, clock: FakeClock) -> None:
    """An async rollout block, then 0.1 s (20 intervals of 5 ms) of its loop's time: no lag family after."""

    async def main() -> None:
        async with telemetry.rollout("a") as rollout:
            rollout.complete({"reward": 1.0})
        await idle(0.1)  # the window a sampler would have woken in

    run_virtual(main(), clock)
    assert LAG + "_count" not in sample_names(exposition(telemetry.registry))


async def _a_rollout_block(telemetry: RolloutTelemetry) -> None:
    """One async rollout block, which starts its loop's lag sampler (``runtime_metrics=True``)."""
    async with telemetry.rollout("a") as rollout:
        rollout.complete({"reward": 1.0})


def _lag_count(telemetry: RolloutTelemetry | CollectorRegistry) -> float:
    registry = telemetry if isinstance(telemetry, CollectorRegistry) else telemetry.registry
    text = exposition(registry)
    return value(text, f"{LAG}_count", run="r") if f"{LAG}_count" in sample_names(text) else 0.0


def _lag_buckets(telemetry: RolloutTelemetry) -> dict[str, float]:
    """The lag histogram's cumulative buckets, by ``le``."""
    return {
        dict(labels)["le"]: count
        for (name, labels), count in samples(exposition(telemetry.registry)).items()
        if name == f"{LAG}_bucket"
    }


def test_a_blocked_loop_shows_its_lag_in_the_right_bucket(clock: FakeClock) -> None:
    """A loop blocked for 0.375 s (on its clock) with its sampler due after 0.125 s wakes it 0.25 s late: one
    observation of 0.25 s in the 0.25 bucket and above, none at 0.1; the next wake, on time, observes 0."""
    telemetry = RolloutTelemetry(run="r", loop_lag_interval=0.125)

    async def main() -> None:
        await _a_rollout_block(telemetry)
        clock.advance(0.375)  # the block being measured: the loop's time passes and nothing runs
        await idle(0.0625)  # the late wake runs first, then this timer
        assert _lag_count(telemetry) == 1
        await idle(0.125)  # the next wake, due 0.125 s after the late one, is on time

    run_virtual(main(), clock)
    text = exposition(telemetry.registry)
    assert value(text, f"{LAG}_count", run="r") == 2
    assert value(text, f"{LAG}_sum", run="r") == 0.375 - 0.125
    # One observation of 0 (in every bucket) and one of 0.25 (from the 0.25 bucket on).
    expected = {str(bound): 1.0 + (bound >= 0.25) for bound in LAG_BUCKETS} | {"+Inf": 2.0}
    assert _lag_buckets(telemetry) == expected


def test_the_first_async_rollout_block_on_a_loop_starts_one_sampler(clock: FakeClock) -> None:
    """No lag family before a rollout block runs on a loop; afterwards one sampler per loop, however many
    blocks (three wakes in 3.5 intervals, not nine), and the sampler ends when the loop closes (no warning:
    warnings are errors)."""
    telemetry = RolloutTelemetry(run="r", loop_lag_interval=0.125)
    assert LAG + "_count" not in sample_names(exposition(telemetry.registry))

    async def main() -> None:
        for _ in range(3):
            await _a_rollout_block(telemetry)
        await idle(0.4375)  # wakes due at 0.125, 0.25 and 0.375 s

    run_virtual(main(), clock)
    assert _lag_count(telemetry) == 3


def test_without_runtime_metrics_a_rollout_block_starts_no_sampler(clock: FakeClock) -> None:
    """runtime_metrics=False: rollout blocks leave the loop unsampled (over a window of 20 intervals)."""
    telemetry = RolloutTelemetry(run="r", runtime_metrics=False, loop_lag_interval=0.005)
    _assert_a_rollout_block_starts_no_sampler(telemetry, clock)


def test_a_closed_telemetry_samples_no_more(clock: FakeClock) -> None:
    """close() ends sampling: the count stays where it was (one wake) over ten more intervals of the loop,
    and a rollout block after it starts no sampler again."""
    telemetry = RolloutTelemetry(run="r", loop_lag_interval=0.125)

    async def main() -> None:
        await _a_rollout_block(telemetry)
        await idle(0.1875)  # one wake, at 0.125 s
        assert _lag_count(telemetry) == 1
        telemetry.close()
        await _a_rollout_block(telemetry)
        await idle(1.25)  # ten intervals

    run_virtual(main(), clock)
    assert _lag_count(telemetry) == 1


def test_a_sampler_started_from_another_thread_runs_on_its_loop(clock: FakeClock) -> None:
    """The lag part's watch(loop) from outside the loop arms the sampler on the loop's own turn: one interval
    of the loop's time after it runs, it has woken once."""
    runtime = Runtime()
    registry = CollectorRegistry()
    registry.register(RuntimeCollector(runtime.snapshot, {"run": "r"}))
    loop = VirtualLoop(clock)
    try:
        watch = LoopLag(runtime).watch(loop, interval=0.125)
        assert _lag_count(registry) == 0
        loop.run_until_complete(idle(0.1875))
        assert _lag_count(registry) == 1
        assert watch.running
        watch.stop()
    finally:
        loop.close()
    assert not watch.running


def test_a_sampler_ends_with_its_telemetry(clock: FakeClock) -> None:
    """The loop holds its sampler but not the telemetry: once the telemetry is gone the sampler is not
    running and its timer stops at its next wake (armed once, never again)."""
    loop = VirtualLoop(clock)
    try:
        telemetry = RolloutTelemetry(loop_lag_interval=0.125)
        loop.run_until_complete(_a_rollout_block(telemetry))  # starts the loop's sampler
        (watch,) = {
            owner
            for _, callback in loop.armed
            if type(owner := getattr(callback, "__self__", None)) is LoopWatch
        }
        del telemetry
        gc.collect()
        assert not watch.running
        loop.run_until_complete(idle(0.5))  # the timer wakes, finds nothing, is not re-armed
    finally:
        loop.close()
    assert [when for when, callback in loop.armed if getattr(callback, "__self__", None) is watch] == [
        1000.125
    ]


def test_watching_needs_a_loop_and_a_positive_interval() -> None:
    """Outside a running loop, with a closed loop, or with a non-positive interval: ConfigError."""
    lag = LoopLag(Runtime())
    with pytest.raises(ConfigError, match="needs a running event loop"):
        lag.watch()
    loop = asyncio.new_event_loop()
    loop.close()
    with pytest.raises(ConfigError, match="closed"):
        lag.watch(loop)
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
def test_stopping_the_runtime_metrics_stops_timing_collections(clock: FakeClock) -> None:
    """close(): later collections are not timed, the histogram keeps what it had, and a
    rollout block starts no sampler any more (over a window of 20 intervals)."""
    telemetry = RolloutTelemetry(run="r", loop_lag_interval=0.005)
    gc.collect()
    telemetry.close()
    gc.collect()
    assert value(exposition(telemetry.registry), f"{PAUSE}_count", run="r", generation="2") == 1
    _assert_a_rollout_block_starts_no_sampler(telemetry, clock)


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


def test_the_runtime_histograms_are_written_as_prometheus_client_writes_them(clock: FakeClock) -> None:
    """The endpoint's own writer and prometheus_client's write the same bytes for the lag histogram (two
    observations, one late)."""
    runtime = Runtime()
    registry = CollectorRegistry()
    registry.register(RuntimeCollector(runtime.snapshot, {"run": "r"}))  # the telemetry's, not the process

    async def main() -> None:
        LoopLag(runtime).watch(interval=0.125)
        clock.advance(0.3)  # a block: the first wake is late
        await idle(0.1875)  # that wake and the next

    run_virtual(main(), clock)  # the loop is closed: the histogram no longer moves
    assert _lag_count(registry) == 2
    for accept, encoder in ENCODERS.items():
        assert encode(registry, accept)[0] == encoder(registry), accept


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

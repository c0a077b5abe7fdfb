"""The collecting process's runtime: how late its event loops wake, how long its garbage collections stop it,
how long it takes to write its output.

Written by the samplers of ``_recording.runtime_samplers`` (the event-loop lag sampler, the ``gc.callbacks``
hook), read once per scrape as a ``RuntimeSnapshot``. The garbage collector's hook writes without a lock: a
lock held by a thread that allocates (a snapshot being copied) would deadlock the collection it sets off. It
is the only writer of its histograms (collections do not overlap), so a reader sees whole observations, at
worst one behind between a histogram's buckets and its sum.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Runtime", "RuntimeSnapshot", "Series"]

LAG_BUCKETS: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
"""Upper bounds (seconds) of the event-loop lag histogram: a millisecond (healthy) to ten seconds (stuck)."""

GC_PAUSE_BUCKETS: tuple[float, ...] = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
)  # fmt: skip
"""Upper bounds (seconds) of the garbage-collection pause histogram: a young collection takes tens of
microseconds, a full one of a large heap can take a second."""

WRITE_BUCKETS: tuple[float, ...] = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
)  # fmt: skip
"""Upper bounds (seconds) of the output write histogram: a buffered line takes microseconds, a flush to a
network file system can take seconds."""

WRITE_BYTES_BUCKETS: tuple[float, ...] = tuple(float(4**power) for power in range(4, 14))
"""Upper bounds (bytes) of the output write size histogram: 256 B (a short row) to 64 MiB, by powers of 4."""

GENERATIONS = ("0", "1", "2")


@dataclass(frozen=True, slots=True)
class Series:
    """One histogram as read: cumulative ``(le, count)`` buckets, ``+Inf`` last, and the sum."""

    buckets: tuple[tuple[str, float], ...]
    total: float

    @property
    def count(self) -> float:
        """Observations in all (the ``+Inf`` bucket)."""
        return self.buckets[-1][1]


class Buckets:
    """A histogram's counts by bucket and its sum; ``observe`` is for one writer at a time."""

    __slots__ = ("_bounds", "_counts", "_labels", "_total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self._labels = (*(repr(bound) for bound in bounds), "+Inf")
        self._counts = [0] * (len(bounds) + 1)
        self._total = 0.0

    def observe(self, value: float) -> None:
        """Count one observation (seconds) in its bucket."""
        self._counts[bisect.bisect_left(self._bounds, value)] += 1
        self._total += value

    def read(self) -> Series | None:
        """The histogram as it is now, ``None`` before the first observation."""
        counts = tuple(self._counts)
        total = self._total
        running = 0
        buckets: list[tuple[str, float]] = []
        for label, count in zip(self._labels, counts, strict=True):
            running += count
            buckets.append((label, running))
        return Series(tuple(buckets), total) if running else None


@dataclass(frozen=True, slots=True)
class RuntimeSnapshot:
    """The runtime histograms of one scrape: the event-loop lag (``None`` until sampled), the garbage
    collection pauses by generation (those observed)."""

    lag: Series | None
    gc_pauses: Mapping[str, Series]
    writes: Series | None = None
    """Output writes' durations, ``None`` before the first."""
    write_bytes: Series | None = None
    """Output writes' sizes, where given, ``None`` before the first."""
    writes_failed: int = 0
    """Output writes that raised."""


class Runtime:
    """One telemetry's runtime histograms."""

    def __init__(self) -> None:
        self._lag = Buckets(LAG_BUCKETS)
        self._lag_lock = threading.Lock()  # event loops on several threads may share one telemetry
        self._gc = tuple(Buckets(GC_PAUSE_BUCKETS) for _ in GENERATIONS)  # by generation
        self._writes = Buckets(WRITE_BUCKETS)
        self._write_bytes = Buckets(WRITE_BYTES_BUCKETS)
        self._writes_failed = 0
        self._write_lock = threading.Lock()  # writers on several threads

    def lagged(self, seconds: float) -> None:
        """An event loop woke ``seconds`` after it was due."""
        with self._lag_lock:
            self._lag.observe(seconds)

    def paused(self, generation: int, seconds: float) -> None:
        """A garbage collection of ``generation`` stopped the process for ``seconds``; only from the garbage
        collector's hook (one collection at a time), without a lock."""
        if 0 <= generation < len(self._gc):
            self._gc[generation].observe(seconds)

    def wrote(self, seconds: float, size: int | None, failed: bool) -> None:
        """One output write took ``seconds``, of ``size`` bytes if known; ``failed``: it raised."""
        with self._write_lock:
            self._writes.observe(seconds)
            if size is not None:
                self._write_bytes.observe(float(size))
            self._writes_failed += failed

    def snapshot(self) -> RuntimeSnapshot:
        """The histograms as they are now."""
        with self._lag_lock:
            lag = self._lag.read()
        pauses = {
            generation: buckets.read() for generation, buckets in zip(GENERATIONS, self._gc, strict=True)
        }
        with self._write_lock:
            writes, write_bytes, failed = self._writes.read(), self._write_bytes.read(), self._writes_failed
        return RuntimeSnapshot(
            lag,
            {g: series for g, series in pauses.items() if series is not None},
            writes,
            write_bytes,
            failed,
        )

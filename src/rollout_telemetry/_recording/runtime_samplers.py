"""The collecting process's runtime, sampled into a telemetry's ``Runtime`` store.

- Event-loop lag: a timer on the loop, re-armed at each wake, notes how late it woke (``Runtime.lagged``).
  It is a chain of ``call_at`` handles, not a task: a loop that closes drops it with nothing pending to
  warn about, and it costs one callback per interval. The loop and the telemetry are held weakly: a timer
  whose telemetry is gone stops at its next wake.
- Garbage-collection pauses: one ``gc.callbacks`` hook for the process, installed while any telemetry wants
  it (held weakly), timing each collection from its start to its stop.
- prometheus_client's process, platform and garbage-collector collectors, registered on the telemetry's
  registry once (a registry that has them already, such as prometheus_client's default, keeps its own).

Nothing here raises into the run: a failure stops the sampler, counted by the telemetry's rejections.
"""

from __future__ import annotations

import gc
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from prometheus_client.gc_collector import GCCollector
from prometheus_client.metrics_core import Metric
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector, CollectorRegistry

from rollout_telemetry._store.runtime_observations import Runtime
from rollout_telemetry.errors import ConfigError

if TYPE_CHECKING:
    import asyncio

__all__ = ["DEFAULT_LAG_INTERVAL", "LoopLag", "register_process_collectors", "unwatch_gc", "watch_gc"]


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread, if any: none before asyncio is imported (nor is asyncio
    imported here for it: a run without asyncio never loads it)."""
    module = sys.modules.get("asyncio")
    return None if module is None else module._get_running_loop()  # no exception without a loop


DEFAULT_LAG_INTERVAL = 0.25
"""Seconds between two wakes of the event-loop lag sampler, unless told otherwise."""


class LoopWatch:
    """The lag sampler of one event loop for one telemetry: ``stop()`` ends it (from any thread)."""

    __slots__ = ("_due", "_handle", "_interval", "_loop", "_runtime", "_stopped")

    def __init__(self, loop: asyncio.AbstractEventLoop, runtime: Runtime, interval: float) -> None:
        self._loop = weakref.ref(loop)
        self._runtime = weakref.ref(runtime)
        self._interval = interval
        self._due = 0.0
        self._handle: asyncio.TimerHandle | None = None
        self._stopped = False

    @property
    def running(self) -> bool:
        """Whether the sampler is still armed: not stopped, its loop not closed, its telemetry alive."""
        loop = self._loop()
        return not self._stopped and loop is not None and not loop.is_closed() and self._runtime() is not None

    def _start(self) -> None:
        # On the loop's thread.
        loop = self._loop()
        if self._stopped or loop is None or loop.is_closed():
            return
        self._arm(loop)

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        self._due = loop.time() + self._interval
        self._handle = loop.call_at(self._due, self._wake)

    def _wake(self) -> None:
        loop = self._loop()
        runtime = self._runtime()
        if self._stopped or loop is None or runtime is None:
            self._handle = None
            return
        try:
            runtime.lagged(max(0.0, loop.time() - self._due))
            self._arm(loop)
        except Exception:  # the loop is closing (call_at refuses): the sampler ends with it
            self._handle = None

    def stop(self) -> None:
        """Stop sampling; the pending timer is cancelled (from another thread, on the loop's next turn)."""
        self._stopped = True
        loop = self._loop()
        handle = self._handle
        if handle is not None and loop is not None and not loop.is_closed():
            handle.cancel()  # a cancelled timer is dropped by the loop, never run


class LoopLag:
    """One telemetry's lag samplers, one per event loop (held weakly), started on first use.

    Args:
        runtime: where the samplers write.
        interval: default seconds between wakes.
    """

    def __init__(self, runtime: Runtime, interval: float = DEFAULT_LAG_INTERVAL) -> None:
        self._runtime = runtime
        self._interval = _checked(interval)
        self._watches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopWatch] = (
            weakref.WeakKeyDictionary()
        )
        self._last: Callable[[], asyncio.AbstractEventLoop | None] = lambda: None
        self._lock = threading.Lock()

    def entered(self) -> None:
        """A rollout block is entered: watch the running loop, if any, unless it is watched already."""
        loop = _running_loop()
        if loop is None or self._last() is loop:
            return
        self.watch(loop)

    def watch(
        self, loop: asyncio.AbstractEventLoop | None = None, interval: float | None = None
    ) -> LoopWatch:
        """Sample ``loop`` (the running one by default), once: a loop watched already keeps its sampler.

        Raises:
            ConfigError: no loop given and none running, or ``interval`` is not positive.
        """
        seconds = self._interval if interval is None else _checked(interval)
        if loop is None:
            loop = _running_loop()
            if loop is None:
                msg = "watching the running event loop needs a running event loop"
                raise ConfigError(msg)
        if loop.is_closed():
            msg = "cannot watch a closed event loop"
            raise ConfigError(msg)
        with self._lock:
            watch = self._watches.get(loop)
            if watch is None or not watch.running:
                watch = self._watches[loop] = LoopWatch(loop, self._runtime, seconds)
                if _running_loop() is loop:
                    watch._start()
                else:
                    loop.call_soon_threadsafe(watch._start)
            self._last = weakref.ref(loop)
        return watch

    def stop(self) -> None:
        """Stop every sampler of this telemetry."""
        with self._lock:
            watches = list(self._watches.values())
            self._watches.clear()
            self._last = lambda: None
        for watch in watches:
            watch.stop()


def _checked(interval: float) -> float:
    if not interval > 0:
        msg = f"the event-loop lag interval must be a positive number of seconds, got {interval}"
        raise ConfigError(msg)
    return interval


# -- garbage collection ------------------------------------------------------------------------------

_gc_targets: tuple[weakref.ref[Runtime], ...] = ()
"""The runtimes that time collections, held weakly; replaced whole (the hook reads it without a lock)."""
_gc_started: list[float | None] = [None]  # the running collection's start; None between collections
# Reentrant: a weak reference's callback may run in a collection set off under it.
_gc_lock = threading.RLock()


def _gc_hook(phase: str, info: Mapping[str, int]) -> None:
    # Called by the garbage collector twice per collection (young ones: thousands a second in a process
    # that allocates): as little as possible, no lock, nothing that could raise.
    if phase == "start":
        _gc_started[0] = time.perf_counter()
        return
    started, _gc_started[0] = _gc_started[0], None
    if started is None:  # the hook was installed during this collection: its start was not seen
        return
    seconds = time.perf_counter() - started
    generation = info["generation"]
    for target in _gc_targets:
        runtime = target()
        if runtime is not None:
            runtime.paused(generation, seconds)


def watch_gc(runtime: Runtime) -> None:
    """Time the process's garbage collections into ``runtime`` (held weakly) from now on."""
    global _gc_targets  # noqa: PLW0603 - the one gc.callbacks hook of the process and what it feeds
    with _gc_lock:
        if not any(target() is runtime for target in _gc_targets):
            _gc_targets = (*_gc_targets, weakref.ref(runtime, _forget))
        if _gc_hook not in gc.callbacks:
            gc.callbacks.append(_gc_hook)


def unwatch_gc(runtime: Runtime) -> None:
    """Stop timing collections into ``runtime``; the hook goes once nothing wants it."""
    _keep(lambda target: target() is not runtime)


def _forget(dead: weakref.ref[Runtime]) -> None:
    _keep(lambda target: target is not dead)


def _keep(wanted: Callable[[weakref.ref[Runtime]], bool]) -> None:
    global _gc_targets  # noqa: PLW0603 - as in watch_gc
    with _gc_lock:
        _gc_targets = tuple(target for target in _gc_targets if wanted(target))
        if not _gc_targets and _gc_hook in gc.callbacks:
            gc.callbacks.remove(_gc_hook)


# -- prometheus_client's collectors -----------------------------------------------------------------


class _Described(Collector):
    """A prometheus_client collector with ``describe()`` (its families, collected once), so that the registry
    finds its names: registering it twice fails, and ``restricted_registry`` (``?name[]=``) finds it."""

    def __init__(self, collector: Collector) -> None:
        self._collector = collector
        self._described = [Metric(m.name, m.documentation, m.type, m.unit) for m in collector.collect()]

    def describe(self) -> Iterable[Metric]:
        return self._described

    def collect(self) -> Iterator[Metric]:
        yield from self._collector.collect()


def register_process_collectors(registry: CollectorRegistry) -> None:
    """Register prometheus_client's process, platform and garbage-collector collectors on ``registry``,
    each unless the registry has its families already."""
    collectors: tuple[Collector, ...] = (
        ProcessCollector(registry=None),
        PlatformCollector(registry=None),
        GCCollector(registry=_NOWHERE),
    )
    for collector in collectors:
        try:
            described = _Described(collector)
            if described.describe():  # nothing to publish here (no /proc, say): nothing to register
                registry.register(described)
        except ValueError:  # prometheus_client's default registry has them, or another telemetry put them
            continue
        except Exception:
            continue


class _Nowhere(CollectorRegistry):
    """Where GCCollector (which cannot be made without registering) registers: nowhere."""

    def register(self, collector: Collector) -> None:
        return None


_NOWHERE = _Nowhere()

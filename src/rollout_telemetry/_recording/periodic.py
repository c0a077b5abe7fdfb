"""Work repeated in the background: one thread per kind of work, for every telemetry of the process.

A ``Periodic`` calls its step with each object it watches, every object at its own interval, on one daemon
thread started on first use (the stall checks of every telemetry share one, the live pages' samples
another). Objects are held weakly: one dropped without ``unwatch`` is forgotten once it is freed, and the
thread keeps nothing alive. A step that raises is the step's to report; the thread goes on.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Periodic"]

T = TypeVar("T")


class Periodic(Generic[T]):
    """``step(owner)`` every ``interval`` seconds for each owner watched (what it returns is not used), looked
    at every ``tick`` seconds."""

    def __init__(self, name: str, tick: float, step: Callable[[T], object]) -> None:
        self._name = name
        self._tick = tick
        self._step = step
        self._watched: weakref.WeakKeyDictionary[T, list[float]] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, owner: T, interval: float) -> None:
        """Step ``owner`` every ``interval`` seconds from now on (the thread started if it is not running)."""
        with self._lock:
            self._watched[owner] = [interval, time.monotonic() + interval]
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()

    def unwatch(self, owner: T) -> None:
        """Step ``owner`` no more."""
        with self._lock:
            self._watched.pop(owner, None)

    def watching(self, owner: T) -> bool:
        """Whether ``owner`` is stepped."""
        with self._lock:
            return owner in self._watched

    def _run(self) -> None:
        while True:
            time.sleep(self._tick)
            self._step_due(time.monotonic())

    def _step_due(self, now: float) -> None:
        # A method of its own: no owner outlives the round in a variable of the thread's frame, so the
        # thread keeps no telemetry alive.
        with self._lock:
            due = [owner for owner, (_, at) in self._watched.items() if at <= now]
            for owner in due:
                self._watched[owner][1] = now + self._watched[owner][0]
        for owner in due:
            with contextlib.suppress(Exception):  # the step reports its own errors; the thread goes on
                self._step(owner)

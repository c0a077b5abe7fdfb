"""One daemon thread per process that checks every live telemetry for stalled rollouts between scrapes.

A stalled run may have nobody scraping it and nothing new starting, which is when a stall most needs
saying, so the check cannot wait for either. One thread serves every ``RolloutTelemetry``: it holds them
weakly (a telemetry no longer used is not kept alive, and leaves the set by itself) and wakes once a second
to run the checks that are due.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from typing import Protocol

__all__ = ["watch"]

_TICK = 1.0


class Watched(Protocol):
    def check_stalls(self) -> int: ...


_watched: weakref.WeakKeyDictionary[Watched, list[float]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()
_thread: threading.Thread | None = None


def watch(owner: Watched, interval: float) -> None:
    """Call ``owner.check_stalls()`` every ``interval`` seconds (at the one-second tick) while it lives."""
    global _thread  # noqa: PLW0603 - the one watcher thread of the process, started on first use
    with _lock:
        _watched[owner] = [interval, time.monotonic() + interval]
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_run, name="rollout-telemetry-stalls", daemon=True)
            _thread.start()


def _run() -> None:
    while True:
        time.sleep(_TICK)
        now = time.monotonic()
        with _lock:
            due = [owner for owner, (_, at) in _watched.items() if at <= now]
            for owner in due:
                _watched[owner][1] = now + _watched[owner][0]
        for owner in due:
            with contextlib.suppress(Exception):  # check_stalls counts its own errors; the watcher goes on
                owner.check_stalls()
        del due

"""The worker threads of an endpoint: a fixed set behind a bounded queue, to which the event loop hands slow
work (scrypt, rendering the exposition); beyond the queue the answer is ``Busy`` (503)."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["Busy", "Workers"]

T = TypeVar("T")


class Busy(Exception):
    """Every worker is busy and the queue in front of them is full."""


class Workers:
    """A fixed set of threads behind a bounded queue, to which the event loop hands slow work.

    The threads are started at once and live until ``close()``, so the thread count does not move with
    load; at most ``max_queued`` jobs wait for them. A job whose caller has gone (its future cancelled) is
    skipped.
    """

    def __init__(self, threads: int, *, max_queued: int) -> None:
        self._jobs: queue.Queue[tuple[asyncio.Future[Any], Callable[[], Any]] | None] = queue.Queue(
            max_queued
        )
        self._threads = [
            threading.Thread(target=self._work, name=f"rollout-telemetry-worker-{i}", daemon=True)
            for i in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    def run(self, work: Callable[[], T]) -> asyncio.Future[T]:
        """Queue ``work``; the future (of the running loop) gets its result or exception.

        Raises:
            Busy: the queue is full.
        """
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        try:
            self._jobs.put_nowait((future, work))
        except queue.Full:
            raise Busy from None
        return future

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            future, work = job
            if future.cancelled():
                continue
            try:
                outcome, failed = work(), False
            except Exception as exc:
                outcome, failed = exc, True
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is waiting
                future.get_loop().call_soon_threadsafe(_settle, future, outcome, failed)

    def close(self) -> None:
        """Let the threads finish their current job and end; queued jobs are dropped."""
        while True:
            try:
                self._jobs.get_nowait()
            except queue.Empty:
                break
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            thread.join(timeout=5)


def _settle(future: asyncio.Future[Any], outcome: Any, failed: bool) -> None:
    if future.done():
        return
    if failed:
        future.set_exception(outcome)
    else:
        future.set_result(outcome)

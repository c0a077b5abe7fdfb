"""Results of slow work shared by whoever asks for the same thing at once, or soon after: many readers cost
what one does."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from rollout_telemetry._serve.workers import Workers

__all__ = ["Shared"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Shared(Generic[K, V]):
    """Results of slow work on ``workers``, by key: whoever asks for a key while its work runs shares it,
    and, with ``fresh_for`` > 0, so does whoever asks within that many seconds after it began; with ``held``,
    so does whoever asks while ``held(result)`` (its bytes are still being written to a client), within
    ``held_for`` seconds after it began.

    Lives on the event loop. Entries are forgotten once stale (a held one ``held_for`` after it is made),
    so it holds at most what was asked for in the last ``fresh_for`` or ``held_for`` seconds.
    """

    def __init__(
        self,
        workers: Workers,
        fresh_for: float,
        clock: Callable[[], float] = time.monotonic,
        *,
        held: Callable[[V], bool] | None = None,
        held_for: float = 0.0,
    ) -> None:
        self._workers = workers
        self._fresh_for = fresh_for
        self._clock = clock
        self._held = held
        self._held_for = held_for
        self._entries: dict[K, tuple[float, asyncio.Future[V]]] = {}  # oldest first

    async def get(self, key: K, work: Callable[[], V]) -> V:
        """The shared result of ``work`` for ``key``, made now if there is none fresh.

        Raises:
            Busy: the work had to be made and the workers' queue is full.
        """
        now = self._clock()
        while self._entries:  # forget what is stale, oldest first
            oldest = next(iter(self._entries))
            began, future = self._entries[oldest]
            if not future.done() or now - began < max(self._fresh_for, self._held_for):
                break
            del self._entries[oldest]
        entry = self._entries.get(key)
        if entry is None or (entry[1].done() and not self._shared(now, *entry)):
            entry = (now, self._workers.run(work))
            self._entries.pop(key, None)
            self._entries[key] = entry
            if self._fresh_for <= 0:
                entry[1].add_done_callback(functools.partial(self._done, key, now))
        return await asyncio.shield(entry[1])

    def _shared(self, now: float, began: float, future: asyncio.Future[V]) -> bool:
        """Whether a finished result may still be shared."""
        if now - began < self._fresh_for:
            return True
        if self._held is None or now - began >= self._held_for or future.cancelled() or future.exception():
            return False
        return self._held(future.result())

    def _done(self, key: K, began: float, future: asyncio.Future[V]) -> None:
        if self._held is None:
            self._forget(key, began)
        else:  # shared while held, then let go of (the timer holds no reference to the result)
            asyncio.get_running_loop().call_later(self._held_for, self._forget, key, began)

    def _forget(self, key: K, began: float) -> None:
        entry = self._entries.get(key)
        if entry is not None and entry[0] == began and entry[1].done():
            del self._entries[key]

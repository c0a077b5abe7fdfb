"""A read of a store under its lock that hands the interpreter to a waiting recorder as it ends.

A scrape copies a store under the store's lock, then renders holding the interpreter. A recorder that found
the lock taken waits on it with the interpreter released; when the lock is freed it needs the interpreter
back, which CPython gives only at the next forced switch (``sys.getswitchinterval()``), by which time
back-to-back scrapes may hold the lock again: so a read ends by yielding the interpreter (``time.sleep(0)``).
Only readers do this; recording never yields.

A read of many parts (the account's agents) takes the lock in turns (``read_in_turns``): each part is read
whole under the lock, which is released, and the interpreter handed over, once a turn has lasted
``TURN_SECONDS``, so a recorder waits one turn at most. The figures: docs/performance.md, "A scrape beside a
trainer's heap".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

__all__ = ["TURN_SECONDS", "read_in_turns", "read_locked"]

TURN_SECONDS = 0.001
"""How long a read in turns holds the lock at most at a time (beyond the part it is reading)."""

_Part = TypeVar("_Part")
_Read = TypeVar("_Read")


@contextmanager
def read_locked(lock: threading.Lock | threading.RLock) -> Iterator[None]:
    """Hold ``lock`` for the block, then let a thread that waited on it run at once."""
    with lock:
        yield
    time.sleep(0)


def read_in_turns(
    lock: threading.Lock | threading.RLock,
    parts: Sequence[_Part],
    read: Callable[[_Part], _Read],
    *,
    clock: Callable[[], float] = time.perf_counter,
) -> list[_Read]:
    """``read(part)`` of every part, each under ``lock``, in turns of about ``TURN_SECONDS`` (on ``clock``):
    between turns the lock is released and a thread that waited on it runs. Each part is read atomically, not
    all at once."""
    results: list[_Read] = []
    done, count = 0, len(parts)
    while done < count:
        with lock:
            ends = clock() + TURN_SECONDS
            while done < count:
                results.append(read(parts[done]))
                done += 1
                if clock() >= ends:
                    break
        time.sleep(0)
    return results

"""Reads that hand the interpreter to a waiting recorder: under a store's lock, and after it.

A scrape copies a store under the store's lock, then renders holding the interpreter. A recorder that found
the lock taken waits on it with the interpreter released; when the lock is freed it needs the interpreter
back, which CPython gives only at the next forced switch (``sys.getswitchinterval()``), by which time
back-to-back scrapes may hold the lock again: so a read ends by handing the interpreter over (``hand_over``).
Only readers do this; recording never yields.

A read of many parts (the account's agents) takes the lock in turns (``read_in_turns``): each part is read
whole under the lock, which is released, and the interpreter handed over, once a turn has lasted
``TURN_SECONDS``, so a recorder waits one turn at most. What is derived from the parts after the lock is
released (each agent's snapshot, the exposition's lines) is made in turns too (``in_turns``): a recorder the
interpreter's switch took the interpreter from gets it back after a turn, not after the switch interval
or, when the endpoint's other threads take their turn first, twice that. The figures:
docs/performance.md, "A scrape beside a trainer's heap" and "The endpoint scraped from another process".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

__all__ = ["in_turns", "read_in_turns", "read_locked"]

TURN_SECONDS = 0.001
"""How long a read in turns holds the lock, or the interpreter, at most at a time (beyond the part it is
reading)."""

HAND_OVER_SECONDS = 50e-6
"""How long a hand-over lets the interpreter go: long enough for the thread its release wakes to take it.
``time.sleep(0)`` returns before that thread runs, more often than not, and takes the interpreter back."""

_Part = TypeVar("_Part")
_Read = TypeVar("_Read")


@contextmanager
def read_locked(lock: threading.Lock | threading.RLock) -> Iterator[None]:
    """Hold ``lock`` for the block, then let a thread that waited on it run at once."""
    with lock:
        yield
    hand_over()


def hand_over() -> None:
    """Let a thread that waits for the interpreter (or for a lock just released) run now: the interpreter is
    released for ``HAND_OVER_SECONDS``, and one that waited takes it then."""
    time.sleep(HAND_OVER_SECONDS)


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
        hand_over()
    return results


def in_turns(
    parts: Iterable[_Part],
    *,
    clock: Callable[[], float] = time.perf_counter,
    hand: Callable[[], None] = hand_over,
) -> Iterator[_Part]:
    """Each of ``parts``, in turns of about ``TURN_SECONDS`` (on ``clock``): once the work on the parts given
    so far has lasted a turn, the interpreter is handed over (``hand``) before the next one. For work on many
    parts outside any lock, so a thread waiting for the interpreter waits a turn at most."""
    ends = clock() + TURN_SECONDS
    for part in parts:
        yield part
        if clock() >= ends:
            hand()
            ends = clock() + TURN_SECONDS

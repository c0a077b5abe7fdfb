"""A read of a store under its lock that hands the interpreter to a waiting recorder as it ends.

A scrape copies a store under the store's lock, then renders for milliseconds more holding the interpreter.
A recorder that found the lock taken waits on it with the interpreter released; when the lock is freed it
needs the interpreter back, and CPython gives it only at the next forced switch (``sys.getswitchinterval()``,
5 ms), by which time back-to-back scrapes may hold the lock again. Measured with 4,200 series and scrapes
back to back (``benchmarks/scrape_stall.py --case trainer``): the recorder's p99 was 1.33 ms and it made
325,000 calls in 10 s; yielding the interpreter as the read ends (``time.sleep(0)``, one system call per
read) gives p99 0.0012 ms and 5 million calls. Only readers do this; recording never yields.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["read_locked"]


@contextmanager
def read_locked(lock: threading.Lock | threading.RLock) -> Iterator[None]:
    """Hold ``lock`` for the block, then let a thread that waited on it run at once."""
    with lock:
        yield
    time.sleep(0)

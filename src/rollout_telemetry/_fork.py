"""Fork safety: a forked child gets fresh locks, so it can record even if another thread held one.

Threads do not survive ``fork()``, but a lock they held does, and stays held forever in the child. Every
object with a lock registers here; after a fork the child gives each a new lock. The child then records
into its own copy of the counts: nothing it records reaches the parent's ``/metrics``.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Protocol

__all__ = ["ForkAware", "lock_for"]


class ForkAware(Protocol):
    _lock: threading.Lock


_OWNERS: weakref.WeakSet[ForkAware] = weakref.WeakSet()


def lock_for(owner: ForkAware) -> threading.Lock:
    """A new lock for ``owner._lock``, which every child forked while ``owner`` is alive replaces."""
    _OWNERS.add(owner)
    return threading.Lock()


def _renew() -> None:
    for owner in list(_OWNERS):
        owner._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew)

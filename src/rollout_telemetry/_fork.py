"""Fork safety: a forked child gets fresh locks, so it can record even if another thread held one.

Threads do not survive ``fork()``, but a lock they held does, and stays held forever in the child. Every
object with a lock registers here; after a fork the child gives each a new lock. The child then records
into its own copy of the counts: nothing it records reaches the parent's ``/metrics``.
"""

from __future__ import annotations

import os
import weakref
from typing import Protocol

__all__ = ["ForkAware", "track"]


class ForkAware(Protocol):
    def _after_fork_in_child(self) -> None: ...


_OWNERS: weakref.WeakSet[ForkAware] = weakref.WeakSet()


def track(owner: ForkAware) -> None:
    """Call ``owner._after_fork_in_child()`` in every child forked while ``owner`` is alive."""
    _OWNERS.add(owner)


def _renew() -> None:
    for owner in list(_OWNERS):
        owner._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew)

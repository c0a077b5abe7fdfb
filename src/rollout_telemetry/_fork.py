"""Fork safety: a forked child gets fresh locks, so it can record even if another thread held one.

Threads do not survive ``fork()``, but a lock they held does, and stays held forever in the child. Every
object with a lock registers here, with the attribute that holds it; after a fork the child gives each a new
lock. The child then records into its own copy of the counts: nothing it records reaches the parent's
``/metrics``.
"""

from __future__ import annotations

import os
import threading
import weakref

__all__ = ["lock_for"]


_OWNERS: weakref.WeakKeyDictionary[object, str] = weakref.WeakKeyDictionary()


def lock_for(owner: object, attribute: str = "_lock") -> threading.Lock:
    """A new lock for ``owner``'s ``attribute``, which every child forked while ``owner`` is alive
    replaces."""
    _OWNERS[owner] = attribute
    return threading.Lock()


def _renew() -> None:
    for owner, attribute in list(_OWNERS.items()):
        setattr(owner, attribute, threading.Lock())


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew)

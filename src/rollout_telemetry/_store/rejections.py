"""The one rejection policy: count an input the telemetry refuses by reason, warn once per cause, and raise
it instead under ``strict``.

The facade, the lifecycle and the follower all hold the same ``Rejections``; none keeps a policy of its own.
The counts live in the account (``rollout_telemetry_rejected_total{reason}``), so every view reads them from
one snapshot.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from rollout_telemetry import _fork
from rollout_telemetry.errors import Rejection

__all__ = ["Rejections"]

_log = logging.getLogger("rollout_telemetry")

INTERNAL_ERROR = "internal_error"
"""The reason of a rejection no input explains: a bug here, or a user hook (``redact_reason``) raising."""

_MAX_CAUSES = 256


class Rejections:
    """Counts refused inputs by reason and warns once per cause; raises them instead when ``strict``.

    Args:
        count: adds one to the count of a reason (the account's ``reject``).
        strict: raise the rejected input's exception to the caller instead of counting it.
    """

    def __init__(self, count: Callable[[str], None], *, strict: bool = False) -> None:
        self._count = count
        self.strict = strict
        self._warned: set[tuple[str, str, str | None]] = set()
        self._lock = _fork.lock_for(self)

    def reject(self, exc: Exception, *, source: str | None = None) -> None:
        """Count ``exc`` under its reason (``internal_error`` if it has none) and warn once per cause.

        A cause is the reason, the exception type and the ``source`` (a file being read, say). With
        ``strict=True`` the exception is raised instead, and nothing is counted.
        """
        if self.strict:
            raise exc
        reason = exc.reason if isinstance(exc, Rejection) else INTERNAL_ERROR
        self._count(reason)
        cause = (reason, type(exc).__name__, source)
        with self._lock:
            if cause in self._warned or len(self._warned) >= _MAX_CAUSES:
                return
            self._warned.add(cause)
        where = f"{source}: " if source else ""
        if isinstance(exc, Rejection):
            _log.warning("%srejected (%s): %.300s; further ones are only counted", where, reason, exc)
        else:
            _log.error("%sinternal error while recording; further ones are only counted", where, exc_info=exc)

"""The check of a failure kind (or a stage) against the vocabulary: warned about once, never rejected.

The vocabulary itself (the names, ``KNOWN``, ``STAGES``, the ``<server>:<kind>`` shape) is
``rollout_telemetry.failure_kinds``; this is how the account's names apply it.
"""

from __future__ import annotations

import logging

from rollout_telemetry import _fork
from rollout_telemetry.failure_kinds import KNOWN, UNSPECIFIED, is_namespaced

__all__ = ["KindValidator"]

_log = logging.getLogger("rollout_telemetry.failure_kinds")

_WARNED_KEY = 200
"""Characters of an unregistered name kept to remember that it was warned about."""


class KindValidator:
    """Checks failure kinds against the vocabulary, warning once per unregistered name.

    ``known`` names (the failure kinds by default; the stages for a stage validator) pass silently. Each
    instance remembers which names it has warned about, up to ``max_warned`` names; past that it says once
    that it stops warning, so a stream of free-text kinds cannot grow memory or flood the log.
    """

    __slots__ = ("__weakref__", "_known", "_lock", "_max_warned", "_noun", "_silenced", "_warned")

    def __init__(
        self, max_warned: int = 1024, *, known: frozenset[str] | None = None, noun: str = "failure kind"
    ) -> None:
        self._known = KNOWN if known is None else known
        self._noun = noun
        self._warned: set[str] = set()
        self._max_warned = max_warned
        self._silenced = False
        self._lock = _fork.lock_for(self)

    def validate(self, kind: str) -> str:
        """Return ``kind`` unchanged; log a warning the first time an unregistered name is seen.

        Never raises: an unregistered kind is information, not an error.
        """
        # Remembered by its first 200 characters at most: a stream of huge kinds cannot grow memory.
        key = kind if len(kind) <= _WARNED_KEY else kind[:_WARNED_KEY]
        if kind in self._known or key in self._warned or kind == UNSPECIFIED:
            return kind
        if is_namespaced(kind):
            return kind
        with self._lock:
            if key in self._warned or self._silenced:
                return kind
            if len(self._warned) >= self._max_warned:
                self._silenced = True
                _log.warning(
                    "more than %d unregistered %ss seen; no further ones will be warned about",
                    self._max_warned,
                    self._noun,
                )
                return kind
            self._warned.add(key)
        _log.warning(
            "unregistered %s %r: use a registered name or namespace it as '<server>:<name>'",
            self._noun,
            key,
        )
        return kind

    @property
    def warned(self) -> frozenset[str]:
        """The unregistered names warned about so far."""
        return frozenset(self._warned)

"""Who makes room for a newcomer when there is none: the admission policy, one function a rule.

A newcomer from a source that holds ``max_per_source`` connections competes only with that source's own
(``FOR_A_SOURCE_AT_ITS_CAP``); else, on a server holding ``max_connections``, with every connection
(``FOR_A_FULL_SERVER``). The rules are tried in order; the first to name a connection closes it for the
newcomer, and if none does, the newcomer is closed. A connection is *idle* with no complete request yet, or
while it waits for its turn at a password check; *answered* once its response is written (it only drains what
its client still sends); a *stalled* write is one whose client has taken no byte for a while; a *reader* is a
source whose client took a large body whole before (``output_cap``).

Each rule names the attack of ``benchmarks/attacks.py``'s ``ATTACKS`` that needs it (``needed by``): without
the rule, that attack keeps the authorised scraper out. docs/guides/security.md lists the same rules, with
what each attack did without its rule; tests/test_docs.py checks the two lists agree.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rollout_telemetry._serve.connections import Connection, Connections

__all__ = ["FOR_A_FULL_SERVER", "FOR_A_SOURCE_AT_ITS_CAP"]

Rule = Callable[["Connections", str, float], "Connection | None"]
"""Given the table, the newcomer's source and the time: the connection to close for it, or None."""


def own_answered(held: Connections, source: str, now: float) -> Connection | None:
    """The source's oldest answered connection: it costs nothing to close.

    Needed by no attack alone; under one address's (``slowloris-300``) it closes the scraper's own.
    """
    mine = held.by_source.get(source, {})
    return next((c for c in mine if c in held.draining), None) if held.draining else None


def own_stalled_write(held: Connections, source: str, now: float) -> Connection | None:
    """The source's write stalled longest, if for ``evict_after``: its clients that never read hold no slot
    against its own newcomers.

    Needed by no attack of ``ATTACKS`` (none fills one address's slots with writes).
    """
    return held.output.stalled(now, held.limits.evict_after, among=held.by_source.get(source, {}))


def own_idle(held: Connections, source: str, now: float) -> Connection | None:
    """The source's oldest idle connection, at any age: a source competes only with itself.

    Needed by ``one-byte-1000`` (and every attack from one address: ``slowloris-300``, ``idle-reopened-300``).
    """
    return next((c for c in held.by_source.get(source, {}) if c in held.idle), None)


def answered(held: Connections, source: str, now: float) -> Connection | None:
    """The oldest answered connection, whatever its age: it only drains.

    Needed by ``answered-silent-5x128``.
    """
    return next(iter(held.draining), None)


def stalled_write(held: Connections, source: str, now: float) -> Connection | None:
    """The write stalled longest, if for ``evict_after``: a client that reads nothing holds no slot.

    Needed by ``non-readers-300/s-5MB-10MB/s-reader`` while its scraper has not read a large body yet.
    """
    return held.output.stalled(now, held.limits.evict_after)


def strangers_write_for_a_reader(held: Connections, source: str, now: float) -> Connection | None:
    """For a newcomer of a reader, the write stalled longest of a source that is not one, if for
    ``stalled_briefly``: clients that never read, arriving faster than their writes stall for
    ``evict_after``, hold no slot against a scraper.

    Needed by ``non-readers-600/s-2.5MB-50MB/s-reader``.
    """
    return held.output.stalled_stranger(source, now)


def idle_past_evict_after(held: Connections, source: str, now: float) -> Connection | None:
    """The oldest idle connection, if held for ``evict_after``: a client whose request is a round trip or
    a TLS handshake away keeps its slot against a flood of newcomers.

    Needed by ``wrong-password-5x128`` (its password waits outlive ``evict_after``).
    """
    oldest = next(iter(held.idle), None)
    return oldest if oldest is not None and now - oldest.opened >= held.limits.evict_after else None


def idle_of_the_heaviest_source(held: Connections, source: str, now: float) -> Connection | None:
    """The oldest idle connection of the source holding the most, if it holds more than ``fair_share``: a
    few addresses cannot hold every slot with young idle connections.

    Needed by ``wrong-password-5x128``.
    """
    if not held.idle:
        return None
    heaviest = max(held.by_source.values(), key=len)
    if len(heaviest) <= held.limits.fair_share:
        return None
    return next((c for c in heaviest if c in held.idle), None)


FOR_A_SOURCE_AT_ITS_CAP: tuple[Rule, ...] = (own_answered, own_stalled_write, own_idle)
"""A newcomer whose source holds ``max_per_source`` connections: one of its own goes, or it does."""
FOR_A_FULL_SERVER: tuple[Rule, ...] = (
    answered,
    stalled_write,
    strangers_write_for_a_reader,
    idle_past_evict_after,
    idle_of_the_heaviest_source,
)
"""A newcomer to a server holding ``max_connections``: the first connection a rule names goes, or it does."""

"""Stalled rollouts: the bound per agent, the check that flags and reports them, and the watcher thread.

A rollout in flight (lifecycle API) longer than its agent's ``stall_after`` is stalled: counted once in
``rollout_stalls_total``, given a ``rollout.stalled`` event on its span and one warning line. The check runs
at every scrape and, between scrapes, on the process's one watcher thread: a stalled run may have nobody
scraping it and nothing new starting, which is when a stall most needs saying. The thread holds each
``Stalls`` weakly (a telemetry no longer used is not kept alive) and wakes once a second to run the checks
that are due.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping

from rollout_telemetry._recording.lifecycle import note_stalled
from rollout_telemetry._recording.periodic import Periodic
from rollout_telemetry._store.account import Account
from rollout_telemetry._store.flights import FlightRecord
from rollout_telemetry._store.names import Names
from rollout_telemetry.errors import ConfigError

__all__ = ["DEFAULT_STALL_AFTER", "MAX_ROLLOUTS_LIMIT", "Stalls", "stall_bound"]

_log = logging.getLogger("rollout_telemetry")

MAX_ROLLOUTS_LIMIT = 1000
"""The most rollouts in flight one listing gives (``GET /rollouts?limit=`` may ask for)."""
DEFAULT_STALL_AFTER = 600.0
"""Seconds in flight after which a rollout counts as stalled, unless told otherwise."""

_TICK = 1.0
_RECORD_FIELDS = tuple(field.name for field in dataclasses.fields(FlightRecord))


def stall_bound(
    stall_after: float | None,
    by_agent: Mapping[str, float] | None,
    names: Names,
    what: str = "stall_after",
) -> Callable[[str], float] | None:
    """The account's ``stall_after`` (or ``slow_after``): seconds by agent label, or ``None`` when off.

    Args:
        stall_after: seconds in flight before a rollout is stalled (slow); ``None`` turns the rule off
            unless ``by_agent`` gives a bound.
        by_agent: per-agent overrides of ``stall_after`` (by agent name).
        names: resolves the agent names of ``by_agent`` to their labels.
        what: the argument's name, for the error.

    Raises:
        ConfigError: ``stall_after`` is not positive.
    """
    if stall_after is not None and stall_after <= 0:
        msg = f"{what} must be a positive number of seconds or None, got {stall_after}"
        raise ConfigError(msg)
    by_label = {names.agent(agent)[0]: seconds for agent, seconds in (by_agent or {}).items()}
    if stall_after is None and not by_label:
        return None
    default = stall_after or float("inf")
    return lambda label: by_label.get(label, default)


class Stalls:
    """Stall detection for one telemetry's account (made with ``stall_bound``).

    Args:
        account: the account to check.
        stall_after: the default bound, as ``/rollouts`` reports it.
        slow_after: the default bound of the ``slow`` state, as ``/rollouts`` reports it.
        reject: counts an error of the check (the facade's rejection policy).
    """

    def __init__(
        self,
        account: Account,
        stall_after: float | None,
        reject: Callable[[Exception], None],
        slow_after: float | None = None,
    ) -> None:
        self._account = account
        self.stall_after = stall_after
        self.slow_after = slow_after
        self._reject = reject
        self._watching = False
        self.tracked = False
        """Whether any rollout was tracked in flight (a ``rollout()`` or ``offer()`` context was made)."""

    def check(self) -> int:
        """Flag the rollouts in flight longer than their bound that were not flagged yet; return how many.

        Never raises: an error is counted by ``reject``.
        """
        try:
            stalled = self._account.check_stalls()
        except Exception as exc:
            self._reject(exc)
            return 0
        for agent, stage, flight, age in stalled:
            identity = (
                ""
                if flight is None
                else f" (task {flight.task_index}, rollout {flight.rollout_index}, attempt {flight.attempt})"
            )
            _log.warning(
                "rollout of %s%s stalled: in flight for %.0f s, at stage %s", agent, identity, age, stage
            )
            if flight is not None:
                note_stalled(flight, age, stage)
        return len(stalled)

    def in_flight(self, limit: int) -> dict[str, object]:
        """The rollouts whose block has not exited (``terminal`` ones included; ``in_flight`` counts those
        without an outcome), oldest first, as ``GET /rollouts`` serves them (``limit`` at most 1000);
        ``tracked`` says whether any rollout was tracked in flight at all (a run's files never are)."""
        self.check()
        total, records = self._account.in_flight(max(0, min(limit, MAX_ROLLOUTS_LIMIT)))
        return {
            "tracked": self.tracked,
            "in_flight": total,
            "stall_after_seconds": self.stall_after,
            "slow_after_seconds": self.slow_after,
            # Every field is a number, a string or None: a shallow dict is the whole record, without asdict's
            # deep copy.
            "rollouts": [{name: getattr(record, name) for name in _RECORD_FIELDS} for record in records],
        }

    def watch(self) -> None:
        """Check on the watcher thread from now on, at a quarter of the bound (at most every 30 s); called
        on an agent's first rollout context, offered or entered, when there is something to watch. Once is
        enough."""
        self.tracked = True
        if self._watching:
            return
        self._watching = True
        if not self._account.stalls_off:
            _WATCHER.watch(self, min(30.0, (self.stall_after or 600.0) / 4))

    def unwatch(self) -> None:
        """Check on the watcher thread no more, nor start to (``RolloutTelemetry.close``); ``check()`` still
        works when called."""
        self._watching = True
        _WATCHER.unwatch(self)


_WATCHER: Periodic[Stalls] = Periodic("rollout-telemetry-stalls", _TICK, Stalls.check)
"""The one watcher thread of the process, checking every telemetry's stalls (``check()`` counts its own
errors; a rollout block that exited is taken back by the next reader)."""

"""Rollouts in flight: one slot each (when it started, its stage, what began it, whether it stalled).

The lifecycle API takes a slot when a rollout's block starts; counting its outcome (``Account.count``)
makes the rollout ``terminal`` in the same step, and the slot is free again once the block exits
(``InFlightRollouts.release``, ``_store.in_flight``). Slots are reused, so starting and finishing allocate
nothing. The stall rule (in flight longer than its agent's ``stall_after``) and the state of a rollout
(``state_of``) are applied here, once each. Only touched under the account's lock, but for the states seen
(which only grow, see ``Taken``) and two thread-safe queues (``collections.deque``) that spare a rollout two
lock round trips: a context offered and not entered yet puts a mark in ``offers``, and a block that exits puts
its slot in ``exited``; whatever holds the lock next takes the slots back (``reclaim``) before it reads or
takes one, so no reader ever sees an exited rollout.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, cast

from rollout_telemetry._store.observed import FOLD_AT, WAIT_BUCKETS, Observations
from rollout_telemetry.failure_kinds import ADMISSION, AGENT

__all__ = [
    "CANCELLED",
    "STAGED",
    "STALLED",
    "TERMINAL",
    "Flight",
    "FlightRecord",
    "Flights",
    "Offered",
    "Slot",
    "Taken",
]


class RolloutState(StrEnum):
    """The state of a rollout whose block has not exited, by precedence: the first that holds."""

    TERMINAL = "terminal"
    """Its outcome is counted; its block has not exited yet (releasing its environment session, say)."""
    CANCELLED = "cancelled"
    """``cancel()`` was called (a drain dropped it, say)."""
    STALLED = "stalled"
    """In flight longer than its agent's ``stall_after``."""
    SLOW = "slow"
    """In flight longer than its agent's ``slow_after``."""
    RETRYING = "retrying"
    """A later attempt (attempt > 0) of its identity."""
    ACTIVE = "active"
    """In flight, none of the above."""


_TERMINAL, _CANCELLED, _STALLED = RolloutState.TERMINAL, RolloutState.CANCELLED, RolloutState.STALLED
_SLOW, _RETRYING, _ACTIVE = RolloutState.SLOW, RolloutState.RETRYING, RolloutState.ACTIVE
_PUBLISHED = tuple(reversed(RolloutState))  # the order of the published series: active first


class Flight(Protocol):
    """What began a rollout in flight (the lifecycle's rollout context): read for ``/rollouts``."""

    @property
    def task_index(self) -> int | None: ...
    @property
    def rollout_index(self) -> int | None: ...
    @property
    def attempt(self) -> int | None: ...

    @property
    def span_ids(self) -> tuple[str, str] | None:
        """(trace id, span id) in hex, when the rollout has a span."""


@dataclass(frozen=True, slots=True)
class FlightRecord:
    """One rollout in flight, as ``/rollouts`` shows it."""

    agent: str
    task_index: int | None
    rollout_index: int | None
    attempt: int | None
    stage: str
    age_seconds: float
    stalled: bool
    trace_id: str | None
    span_id: str | None
    state: str = _ACTIVE.value
    """Its ``RolloutState``."""
    heartbeat_age_seconds: float = 0.0
    """Seconds since its last heartbeat (``heartbeat()``), stage change or start."""


Offered = tuple[float, deque[None]]
"""An offered context's time of offer (its admission wait's start) and the queue its withdrawal marks
(``Flights.withdrawn``)."""


# A slot's flags, one int (a rollout starts with 0: one store, not one per flag).
STALLED = 1  # found in flight longer than its agent's stall_after
TERMINAL = 2  # its outcome is counted
CANCELLED = 4  # cancel() was called; its reason is the slot's ``reason``
STAGED = 8  # stage() was called: its stage is the user's, not the one it started at


class Slot:
    """One rollout whose block has not exited: free when ``start`` is ``None``."""

    __slots__ = ("beat", "flags", "flight", "owner", "reason", "stage", "start", "wait", "waiting")

    def __init__(self) -> None:
        self.start: float | None = None
        self.stage = AGENT
        self.flight: Flight | None = None
        self.flags = 0  # STALLED, TERMINAL, CANCELLED, STAGED
        self.reason = ""  # the reason given to cancel(), read only when CANCELLED is set
        self.beat = 0.0  # its last heartbeat, stage change or start
        self.wait = 0.0  # admission wait so far: offered to started, and the time at stage admission
        self.waiting: float | None = None  # since when it is at stage admission
        self.owner: object = None  # the handle of the rollout that took it (InFlightRollouts.begin)

    def move(self, stage: str, now: float) -> None:
        """At ``stage`` from ``now`` on (a heartbeat); the time at ``admission`` is admission wait."""
        self.flags |= STAGED
        self.leave_admission(now)
        if stage == ADMISSION:
            self.waiting = now
        self.stage = stage
        self.beat = now

    def wait_until(self, now: float) -> float:
        """Its admission wait until ``now``: what it waited, and the time at stage ``admission`` if it is
        there."""
        waiting = self.waiting
        return self.wait if waiting is None else self.wait + max(now - waiting, 0.0)

    def leave_admission(self, now: float) -> None:
        """Add the time at stage ``admission`` until ``now``, if it is there, to its admission wait."""
        if self.waiting is not None:
            self.wait += max(now - self.waiting, 0.0)
            self.waiting = None


def state_of(
    flags: int, start: float, flight: Flight | None, now: float, slow_after: float | None
) -> RolloutState:
    """The state of a rollout in flight from its slot's flags, start and what began it: the one place the
    states' precedence is applied."""
    if flags & TERMINAL:
        return _TERMINAL
    if flags & CANCELLED:
        return _CANCELLED
    if flags & STALLED:
        return _STALLED
    if slow_after is not None and now - start > slow_after:
        return _SLOW
    if flight is not None and flight.attempt:
        return _RETRYING
    return _ACTIVE


@dataclass(frozen=True, slots=True)
class StageCounts:
    """What ``Taken.counts`` gives: of the rollouts without an outcome, by stage, how many, how many
    stalled and the oldest start; every taken slot by (stage, state); and ``resident`` (every taken slot)
    and ``active`` (without an outcome, not cancelled, past stage ``admission``)."""

    in_flight: dict[str, int]
    stalled: dict[str, int]
    oldest: dict[str, float]
    states: dict[tuple[str, str], int]
    resident: int
    active: int


class Flights:
    """One agent's rollouts in flight, and the stages and stalls seen."""

    __slots__ = (
        "exited",
        "free",
        "offers",
        "slots",
        "stage_labels",
        "stalls",
        "states_seen",
        "waits",
        "withdrawals",
        "withdrawn",
    )

    def __init__(self) -> None:
        self.slots: list[Slot] = []
        self.free: list[Slot] = []
        self.stage_labels: set[str] = {AGENT}  # every stage seen: their gauges read 0 when nothing is there
        self.stalls: dict[str, int] = {}  # rollouts that crossed the stall bound, by the stage they were in
        self.states_seen: set[RolloutState] = {_ACTIVE}  # published from the first one seen on
        self.waits = Observations(WAIT_BUCKETS)  # admission waits of the rollouts whose block exited
        self.offers: deque[None] = deque()  # a mark per rollout context offered and not entered yet
        self.exited: deque[Slot] = deque()  # slots whose block exited, not taken back yet
        # A mark per offered context collected without being entered, not taken back yet (see reclaim); the
        # marks taken back so far.
        self.withdrawn: deque[None] = deque()
        self.withdrawals = 0

    def begin(self, now: float, flight: Flight | None, offered: Offered | None = None) -> Slot:
        """A rollout in flight since ``now``, at stage ``agent``; ``offered``: what its context's offer
        returned (it put a mark in ``offers``), whose time is the start of its admission wait."""
        wait = 0.0
        if offered is not None:
            self.offers.pop()
            if now > offered[0]:
                wait = now - offered[0]
        exited = self.exited
        if exited:  # the slot of a block that exited, taken back (see reclaim) and reused at once
            slot = exited.popleft()
            pending = self.waits.pending
            pending.append(slot.wait)
            if len(pending) >= FOLD_AT:
                self.waits.fold()
        elif self.free:
            slot = self.free.pop()
        else:  # more rollouts in flight than ever before
            slot = Slot()
            self.slots.append(slot)
        slot.start = slot.beat = now
        slot.stage = AGENT
        slot.flight = flight
        slot.flags = 0
        slot.wait = wait  # slot.waiting is None: release() left admission, a new slot was never there
        return slot

    def reclaim(self) -> None:
        """Take back the slots of the blocks that exited: their admission waits observed, the slots free (a
        free slot's flags are reset when it is taken); and the offers withdrawn, each no longer offered."""
        withdrawn = self.withdrawn
        while withdrawn:  # its context put a mark in offers and never took it out: one of them is its own
            withdrawn.popleft()
            self.offers.pop()
            self.withdrawals += 1
        exited, pending = self.exited, self.waits.pending
        while exited:
            slot = exited.popleft()
            pending.append(slot.wait)
            slot.start = None
            slot.flight = None
            self.free.append(slot)
        if len(pending) >= FOLD_AT:
            self.waits.fold()

    def stalled_past(self, now: float, limit: float) -> list[tuple[str, Flight | None, float]]:
        """Flag, and count once by their stage, the rollouts in flight longer than ``limit`` not flagged yet;
        return each as (stage, what began it, age). The one place the stall rule is applied."""
        self.reclaim()
        found = []
        for slot in self.slots:
            start = slot.start
            if start is None or slot.flags & (STALLED | TERMINAL) or now - start <= limit:
                continue
            slot.flags |= STALLED
            self.stalls[slot.stage] = self.stalls.get(slot.stage, 0) + 1
            found.append((slot.stage, slot.flight, now - start))
        return found

    def taken(self, now: float, slow_after: float | None) -> Taken:
        """Copy the taken slots under the account's lock, a column a field: copies and no rule applied, and a
        handful of objects for the garbage collector however many rollouts are in flight. ``Taken`` counts
        them after the lock is released."""
        self.reclaim()
        # Tuples: those of numbers and strings (or empty) are left alone by the garbage collector, so the
        # copies a snapshot keeps are not promoted scrape after scrape.
        slots = [s for s in self.slots if s.start is not None]
        return Taken(
            cast(tuple[float, ...], tuple([s.start for s in slots])),  # a taken slot has its start
            tuple([s.stage for s in slots]),
            tuple([s.flags for s in slots]),
            tuple([s.flight for s in slots]),
            tuple([s.beat for s in slots]),
            now=now,
            slow_after=slow_after,
            stage_labels=tuple(self.stage_labels),
            seen=self.states_seen,
        )


class Taken:
    """One agent's taken slots at ``now`` (the ``i``-th slot's fields at index ``i`` of each column), copied
    under the account's lock (``Flights.taken``) and counted after it is released: a scrape holds the lock for
    the copy, never for the walk that applies the rules.

    Two copies are equal when their counts are (``StageCounts``), so a snapshot can reuse what it derived
    from an equal copy. Counting adds the states seen for the first time to the agent's ``states_seen``
    (shared with the ``Flights``; it only grows, a set update at a time): they are published from then on.
    """

    __slots__ = (
        "_counts",
        "_seen",
        "beats",
        "flags",
        "flights",
        "now",
        "slow_after",
        "stage_labels",
        "stages",
        "starts",
    )

    def __init__(
        self,
        starts: tuple[float, ...],
        stages: tuple[str, ...],
        flags: tuple[int, ...],
        flights: tuple[Flight | None, ...],
        beats: tuple[float, ...],
        *,
        now: float,
        slow_after: float | None,
        stage_labels: tuple[str, ...],
        seen: set[RolloutState],
    ) -> None:
        self.starts = starts
        self.stages = stages
        self.flags = flags
        self.flights = flights
        self.beats = beats  # last heartbeats
        self.now = now
        self.slow_after = slow_after
        self.stage_labels = stage_labels
        self._seen = seen
        self._counts: StageCounts | None = None

    def state(self, i: int) -> RolloutState:
        """The state of the ``i``-th slot at ``now``."""
        return state_of(self.flags[i], self.starts[i], self.flights[i], self.now, self.slow_after)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Taken) and self.counts() == other.counts()

    __hash__ = None  # type: ignore[assignment]

    def counts(self) -> StageCounts:
        """The counts of the slots (every stage seen: 0; see ``StageCounts``), made once."""
        if self._counts is None:
            self._counts = self._count()
        return self._counts

    def _count(self) -> StageCounts:
        now, slow_after = self.now, self.slow_after
        in_flight = dict.fromkeys(self.stage_labels, 0)
        stalled = dict.fromkeys(self.stage_labels, 0)
        oldest: dict[str, float] = {}
        states: dict[tuple[str, RolloutState], int] = {}
        active = 0
        for start, stage, flags, flight in zip(
            self.starts, self.stages, self.flags, self.flights, strict=True
        ):
            state = state_of(flags, start, flight, now, slow_after)
            key = (stage, state)
            states[key] = states.get(key, 0) + 1
            if state is _TERMINAL:
                continue
            active += state is not _CANCELLED and stage != ADMISSION
            in_flight[stage] = in_flight.get(stage, 0) + 1
            stalled[stage] = stalled.get(stage, 0) + bool(flags & STALLED)
            if start < oldest.get(stage, start + 1.0):
                oldest[stage] = start
        found = {state for _, state in states}
        seen = self._seen
        if not found <= seen:
            seen |= found  # one C-level update: concurrent counts only ever add
        # Every stage seen by every state seen (active first): 0 when none is there.
        published = [state for state in _PUBLISHED if state in seen]
        by_state = {
            (stage, state.value): states.get((stage, state), 0) for stage in in_flight for state in published
        }
        return StageCounts(in_flight, stalled, oldest, by_state, len(self.starts), active)

"""The rollouts in flight of an account's agents: offered, begun, staged, cancelled, exited, and stalled.

The lifecycle API offers a rollout context, takes a slot when its block starts (``begin``), moves it between
stages and frees it when the block exits (``release``); counting its outcome (``Account.count``, under the
same lock) makes it ``terminal`` in between. Cleanups in progress are tracked here too. The stall rule runs
here (``check_stalls``) and ``/rollouts`` lists from here (``in_flight``); each agent's slots are its
``Flights`` (``_store.flights``).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from rollout_telemetry._store.agent import AgentState
from rollout_telemetry._store.flights import CANCELLED, STALLED, Flight, FlightRecord, Offered, Slot
from rollout_telemetry._store.reads import read_in_turns, read_locked
from rollout_telemetry._store.roster import Roster

__all__ = ["InFlight", "InFlightRollouts"]


InFlight = tuple[AgentState, Slot, float]
"""What ``begin`` returns and ``Account.count`` takes to end that flight: opaque to callers."""


class InFlightRollouts:
    """The rollouts in flight and the cleanups in progress of a roster's agents, under its lock: the base of
    ``Account``, so a call of its callers costs a method's, and they hold one object.

    Args:
        roster: the agents and the lock, shared with the account's counts.
        clock: monotonic seconds, injectable for tests.
        first_context: called when an agent's first rollout context is offered (``offer``) or entered
            (``begin``): once per agent, never on the hot path (the stall watcher starts then). Should it
            raise (the facade counts its error and raises it only with ``strict=True``), it does so before
            anything is offered or in flight.
        stall_after: seconds in flight after which a rollout of an agent (by label) is stalled; none by
            default.
        slow_after: seconds in flight after which a rollout of an agent (by label) is slow; none by default.
    """

    def __init__(
        self,
        roster: Roster,
        clock: Callable[[], float],
        first_context: Callable[[], None],
        stall_after: Callable[[str], float] | None = None,
        slow_after: Callable[[str], float] | None = None,
    ) -> None:
        self._roster = roster
        self._clock = clock
        self._first_context = first_context
        self._stall_after = stall_after
        self._slow_after = slow_after

    # -- a rollout's steps --------------------------------------------------------------------------

    def offer(self, agent: str) -> Offered | None:
        """Count one rollout context of ``agent`` made now ahead of its block, not entered yet (``offered``);
        return what ``begin`` and ``withdraw`` take (the time and the agent's queue of withdrawals), or
        ``None`` for an invalid agent name (``begin`` rejects it). Without the lock: a mark in a thread-safe
        queue."""
        try:
            state = self._roster.by_name[agent]
        except Exception:  # as in Account.count()
            try:
                state = self._roster.state(agent, overflow=False)  # begin() counts a folded name's overflow
            except Exception:
                return None
        if not state.lifecycle:  # first: should the hook raise (strict=True), nothing is offered
            self._lifecycle_used(state)
        state.flights.offers.append(None)
        return self._clock(), state.flights.withdrawn

    @staticmethod
    def withdraw(offered: Offered) -> None:
        """An offered context (by what ``offer`` returned) is gone without being entered: no longer offered,
        as whatever holds the lock next sees (``Flights.reclaim``). Without the lock, so a finalizer may call
        it wherever the collector is: a mark in a thread-safe queue."""
        offered[1].append(None)

    def _lifecycle_used(self, state: AgentState) -> None:
        # The agent's first rollout context, offered or entered: its lifecycle series from now on, and the
        # hook (the stall watcher) called once.
        with self._roster.lock:
            if state.lifecycle:
                return
            state.lifecycle = True
        self._first_context()

    def begin(
        self, agent: str, now: float, flight: Flight | None = None, offered: Offered | None = None
    ) -> InFlight:
        """Mark one rollout of ``agent`` in flight since ``now``, at stage ``agent``; return the handle that
        ``set_stage``, ``Account.count`` and ``release`` take. ``flight`` is what ``/rollouts`` and stall
        notices read; ``offered``, what ``offer`` returned when it counted its context (no longer offered)."""
        roster = self._roster
        try:
            state = roster.by_name[agent]
        except Exception:  # as in Account.count()
            state = roster.state(agent)
        if not state.lifecycle:
            self._lifecycle_used(state)
        lock = roster.lock
        lock.acquire()
        try:
            slot = state.flights.begin(now, flight, offered)
            handle = slot.owner = (state, slot, now)
        finally:
            lock.release()
        return handle

    def release(self, handle: InFlight) -> None:
        """The block of a rollout (by the handle ``begin`` returned) exited: its slot is free, its admission
        wait observed, as whatever holds the lock next sees (``Flights.reclaim``). Called once per rollout,
        after its outcome or without one (``abandon``)."""
        state, slot, _ = handle
        if slot.waiting is not None:  # it exits at admission (only its context writes these, readers of the
            slot.leave_admission(self._clock())  # slot under the lock never read them)
        state.flights.exited.append(slot)

    def abandon(self, handle: InFlight) -> None:
        """Take a rollout out of flight (by the handle ``begin`` returned) without an outcome: nothing is
        counted, as nothing is when a run stops with the rollout in flight."""
        self.release(handle)

    def set_stage(self, handle: InFlight, stage: str, now: float) -> None:
        """Say which stage a rollout in flight (by the handle ``begin`` returned) is at since ``now`` (a
        heartbeat too).

        Raises:
            OutcomeError: the stage is not a non-empty string.
        """
        state, slot, _ = handle
        flights = state.flights
        if stage in flights.stage_labels:  # a stage seen before is its own label: nothing to resolve
            label, folded = stage, False
        else:
            label, folded = self._roster.names.stage(state.label, stage)
        with self._roster.lock:
            if folded:
                self._roster.overflowed("stage")
            if slot.owner is handle:  # not a slot another rollout took since (a call from another thread)
                slot.move(label, now)
            flights.stage_labels.add(label)

    def heartbeat(self, handle: InFlight, now: float) -> None:
        """Note that a rollout (by the handle ``begin`` returned) was alive at ``now``."""
        with self._roster.lock:
            if handle[1].owner is handle:  # as in set_stage
                handle[1].beat = now

    def cancel(self, handle: InFlight, reason: str) -> None:
        """Mark a rollout (by the handle ``begin`` returned) ``cancelled`` for ``reason`` until its block
        exits."""
        with self._roster.lock:
            slot = handle[1]
            if slot.owner is handle:  # as in set_stage
                slot.reason = reason
                slot.flags |= CANCELLED

    # -- cleanups -----------------------------------------------------------------------------------

    def cleanup_started(self, agent: str) -> AgentState:
        """Count one cleanup of ``agent`` in progress (unresolved until it finishes without failing); return
        what ``cleanup_finished`` takes.

        Raises:
            OutcomeError: the agent name is not a non-empty string.
        """
        state = self._roster.state(agent)
        with self._roster.lock:
            state.cleanups_unresolved = (state.cleanups_unresolved or 0) + 1
        return state

    def cleanup_finished(self, state: AgentState, seconds: float, failed: bool, kind: str | None) -> None:
        """A cleanup begun by ``cleanup_started`` finished after ``seconds``: resolved, or ``failed`` with
        ``kind`` (then it stays unresolved)."""
        roster = self._roster
        label, folded = roster.names.kind(state.label, kind) if failed else ("", False)
        with roster.lock:
            state.cleanup_durations.observe(max(seconds, 0.0))
            if failed:
                if folded:
                    roster.overflowed("failure_kind")
                state.cleanups_failed[label] = state.cleanups_failed.get(label, 0) + 1
            elif state.cleanups_unresolved:
                state.cleanups_unresolved -= 1

    # -- stalls and the listing ---------------------------------------------------------------------

    @property
    def stalls_off(self) -> bool:
        """Whether stall detection is off (no ``stall_after``)."""
        return self._stall_after is None

    def check_stalls(self) -> list[tuple[str, str, Flight | None, float]]:
        """Find the rollouts in flight longer than their agent's ``stall_after`` that were not found yet.

        Each is flagged, counted once in its stage's stalls, and returned as (agent, stage, flight, age), so
        the caller can say so outside the lock. The one place the stall rule is applied.
        """
        bound = self._stall_after
        if bound is None:
            return []
        roster = self._roster
        with read_locked(roster.lock):
            now = self._clock()
            states = [state for state in roster.by_label.values() if state.lifecycle]
        found = read_in_turns(
            roster.lock, states, lambda state: state.flights.stalled_past(now, bound(state.label))
        )
        return [
            (state.label, stage, flight, age)
            for state, stalls in zip(states, found, strict=True)
            for stage, flight, age in stalls
        ]

    def slow_after(self, label: str) -> float | None:
        """Seconds in flight after which a rollout of the agent ``label`` is slow, or ``None``."""
        return None if self._slow_after is None else self._slow_after(label)

    def in_flight(self, limit: int) -> tuple[int, list[FlightRecord]]:
        """The number of rollouts in flight (without an outcome) and the ``limit`` oldest rollouts whose
        block has not exited, ``terminal`` ones included, oldest first."""
        roster, slow_after = self._roster, self.slow_after
        with read_locked(roster.lock):
            now = self._clock()
            states = list(roster.by_label.values())
        taken = read_in_turns(  # each agent's slots at once, the agents in turns, as a snapshot reads them
            roster.lock,
            states,
            lambda state: (state.label, state.flights.taken(now, slow_after(state.label))),
        )
        total = sum(sum(flights.counts().in_flight.values()) for _, flights in taken)  # not terminal
        oldest = heapq.nsmallest(
            limit,
            ((start, a, i) for a, (_, flights) in enumerate(taken) for i, start in enumerate(flights.starts)),
        )
        records = []
        for start, a, i in oldest:
            label, flights = taken[a]
            flight = flights.flights[i]
            ids = flight.span_ids if flight is not None else None
            records.append(
                FlightRecord(
                    agent=label,
                    task_index=flight.task_index if flight is not None else None,
                    rollout_index=flight.rollout_index if flight is not None else None,
                    attempt=flight.attempt if flight is not None else None,
                    stage=flights.stages[i],
                    age_seconds=max(now - start, 0.0),
                    stalled=bool(flights.flags[i] & STALLED),
                    trace_id=ids[0] if ids else None,
                    span_id=ids[1] if ids else None,
                    state=flights.state(i).value,
                    heartbeat_age_seconds=max(now - flights.beats[i], 0.0),
                )
            )
        return total, records

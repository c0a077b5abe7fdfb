"""The in-memory account: the one store every view is computed from.

Every outcome, whichever way it arrives (``record*``, the lifecycle, a followed file), is counted by one
method, ``count``, under one lock. Each agent has one cell per disposition holding its counts by failure kind
and its reward sums, so counting is the same few dictionary and float updates for every disposition.

``snapshot()`` holds the lock only to copy each agent's state (``_store.agent``); everything else is derived
from the copies after the lock is released.
"""

from __future__ import annotations

import bisect
import heapq
import logging
from collections.abc import Callable
from typing import TypeVar

from rollout_telemetry import _fork
from rollout_telemetry._contract.failure_where import Where
from rollout_telemetry._contract.generation import Generation, truncation_cause
from rollout_telemetry._contract.outcome import Classified, Disposition
from rollout_telemetry._contract.reward_range import RewardRange, reward_bounds
from rollout_telemetry._store.agent import DURATION_BUCKETS, AgentCopy, AgentState, Cell
from rollout_telemetry._store.flights import (
    CANCELLED,
    STALLED,
    TERMINAL,
    Flight,
    FlightRecord,
    Offered,
    Slot,
)
from rollout_telemetry._store.names import Names, cacheable
from rollout_telemetry._store.reads import in_turns, read_in_turns, read_locked
from rollout_telemetry._store.recovery import Recovery
from rollout_telemetry._store.snapshot import AccountSnapshot, AgentSnapshot
from rollout_telemetry.errors import ConfigError
from rollout_telemetry.failure_kinds import OTHER

__all__ = ["DURATION_BUCKETS", "Account", "InFlight"]

_log = logging.getLogger("rollout_telemetry.account")

# A count's key: a name (a failure kind may be None, unspecified) or its label.
_Key = TypeVar("_Key", str, str | int | None)  # int: a measured outcome's reward bucket (declare_range)
_MEASURED = Disposition.MEASURED


InFlight = tuple[AgentState, Slot, float]
"""What ``Account.begin`` returns and ``Account.count`` takes to end that flight: opaque to callers."""


def _nothing() -> None:
    """No hook: nothing to do."""


def _recovery(state: AgentState) -> Recovery:
    # Under the lock: an agent's recovery counts, made at its first retry verdict or failure stage.
    recovery = state.recovery
    if recovery is None:
        recovery = state.recovery = Recovery()
    return recovery


class Account:
    """Per-agent rollout counts, reward sums and in-flight work, recorded in O(1) under one lock.

    Args:
        names: resolves agent names and failure kinds to labels (cut, capped); shared with every store.
        clock: monotonic seconds, injectable for tests.
        stall_after: seconds in flight after which a rollout of an agent (by label) is stalled; none by
            default.
        slow_after: seconds in flight after which a rollout of an agent (by label) is slow; none by default.
    """

    def __init__(
        self,
        *,
        names: Names,
        clock: Callable[[], float],
        stall_after: Callable[[str], float] | None = None,
        slow_after: Callable[[str], float] | None = None,
    ) -> None:
        self._lock = _fork.lock_for(self)
        self._clock = clock
        self._stall_after = stall_after
        self._slow_after = slow_after
        self.names = names
        self.first_context: Callable[[], None] = _nothing
        """Called when an agent's first rollout context is offered (``offer``) or entered (``begin``): once
        per agent, never on the hot path (the stall watcher starts then). Should it raise (the facade's
        counts its error and raises it only with ``strict=True``), it does so before anything is offered or
        in flight."""
        self._by_label: dict[str, AgentState] = {}
        # Raw agent name -> state, so the hot path does one dict lookup. Folded names are never entered,
        # so each of their records takes the slow path and is counted as an overflow.
        self._by_name: dict[str, AgentState] = {}
        self._rejected: dict[str, int] = {}
        self._overflow: dict[str, int] = {}
        self._overflow_warned: set[str] = set()
        # Each agent's latest copy and what was derived from it (``snapshot``).
        self._derived: dict[str, tuple[AgentCopy, AgentSnapshot]] = {}

    # -- resolving labels ---------------------------------------------------------------------------

    def _state(self, agent: str, *, overflow: bool = True) -> AgentState:
        """The state of an agent not in ``_by_name`` yet (or folded), counting a folded name as an overflow
        unless told not to; raises ``OutcomeError`` if invalid."""
        label, folded = self.names.agent(agent)
        if type(agent) is not str:  # a str subclass: cached by its plain value, its own methods never run
            agent = str.__str__(agent)
        with self._lock:
            state = self._by_label.get(label)
            if state is None:
                state = self._by_label[label] = AgentState(label)
            if folded:
                if overflow:
                    self._overflowed("agent")
            elif len(self._by_name) < 4 * self.names.max_agents and cacheable(agent):
                self._by_name[agent] = state
        return state

    def _new_kind(self, state: AgentState, cell: Cell, kind: str | None) -> None:
        # Called under the lock when ``kind`` is not a key of ``cell.kinds``.
        label, folded = self.names.kind(state.label, kind)
        self._first_count(cell.kinds, state.labels, kind, label=label, folded=folded, what="failure_kind")

    def _first_count(
        self,
        counts: dict[_Key, int],
        labels: dict[_Key, str],
        name: _Key,
        *,
        label: str,
        folded: bool,
        what: str,
    ) -> None:
        # Called under the lock for a name not yet a key of ``counts``, with its resolved label. A name that
        # is its own label becomes its own key, so its next records are `counts[name] += 1`; a cut or folded
        # one is keyed by its label (a folded one is never made a key: every record of it is counted here).
        if folded:
            self._overflowed(what)
        key = name if label == (name or label) else label
        counts[key] = counts.get(key, 0) + 1
        labels[key] = label

    def _generated(self, state: AgentState, generation: Generation) -> None:
        # Called under the lock: the usage and truncation of one model response.
        tokens, truncated = generation
        if tokens is not None:
            counts = state.tokens
            if counts is None:
                counts = state.tokens = [0, 0, 0, 0, 0]
            counts[0] += tokens[0]
            counts[1] += tokens[1]
            counts[2] += tokens[2]
            counts[3] += tokens[3]
            counts[4] += 1  # responses that carried usage: what a mean per response divides by
        if truncated is not None:  # counted by cause, a bounded set: the raw reason goes on the span only
            by_cause, cause = state.truncated, truncation_cause(truncated)
            by_cause[cause] = by_cause.get(cause, 0) + 1

    def _overflowed(self, label: str) -> None:
        # Called under the lock.
        self._overflow[label] = self._overflow.get(label, 0) + 1
        if label not in self._overflow_warned:
            self._overflow_warned.add(label)
            _log.warning(
                "more distinct %s values than the cap allows; further ones are counted as %r", label, OTHER
            )

    # -- recording ----------------------------------------------------------------------------------

    def count(  # noqa: PLR0912 - the one counting step, each case inline: a call costs more than a case
        self,
        agent: str,
        outcome: Classified,
        in_flight: InFlight | None = None,
        exemplar: tuple[str, str] | None = None,
    ) -> None:
        """Count one classified outcome of ``agent`` (from ``outcome.classify`` or ``outcome.absent``).

        This is the one place a count changes. With ``in_flight`` (the handle ``begin`` returned) the same
        step takes that rollout out of flight and records its duration, under the same lock, so no
        snapshot sees a rollout both in flight and counted. ``exemplar`` (trace id, span id) is kept as the
        latest occurrence of the outcome's kind and duration bucket. A measured outcome of an agent with a
        reward histogram is counted under its bucket's index instead of ``None`` (see ``declare_range``):
        the histogram costs no step of its own.

        Raises:
            OutcomeError: the agent name is not a non-empty string.
        """
        if in_flight is None:
            try:
                state = self._by_name[agent]
            except Exception:  # a new agent, not a hashable one, or a str subclass whose hash raises
                state = self._state(agent)
        else:
            state, slot, started = in_flight
            duration = max(self._clock() - started, 0.0)
        disposition, reward, kind, _, generation = outcome
        if disposition is _MEASURED:  # a measured rollout is not counted by kind: its kind is no label
            bounds = state.reward_bounds
            kind = None if bounds is None else bisect.bisect_left(bounds, reward)  # type: ignore[type-var,assignment]
        # acquire/release rather than `with`: cheaper on 3.11 to 3.13 (docs/performance.md).
        lock = self._lock
        lock.acquire()
        try:
            # The lifecycle: terminal in the same step, its slot kept until it exits.
            if in_flight is not None:
                slot.flags |= TERMINAL
                bucket = bisect.bisect_left(DURATION_BUCKETS, duration)
                state.duration_buckets[bucket] += 1
                state.duration_sum += duration
                state.duration_count += 1
                if exemplar is not None:  # the latest trace of its (disposition, kind) and duration bucket
                    state.bucket_exemplars[bucket] = (*exemplar, duration)
                    state.exemplars[(disposition, kind)] = exemplar
            cell = state.cells[disposition]
            try:
                cell.kinds[kind] += 1
            except KeyError:
                self._new_kind(state, cell, kind)
            # A zero reward (common: masked rollouts usually score 0) changes no sum: one test skips the adds.
            if reward:
                if reward > 0.0:
                    cell.positive += reward
                elif reward < 0.0:  # not NaN, should an unchecked one arrive: it changes no sum
                    cell.negative -= reward
            elif reward is None:
                cell.unrewarded += 1
            if generation is not None:
                self._generated(state, generation)
        finally:
            lock.release()

    def declare(self, agent: str) -> None:
        """Make ``agent`` known with zero counts, so its always-present series start at 0."""
        if agent not in self._by_name:  # known: no lock (a follower declares each input row's agent)
            self._state(agent)

    def checked(self, agent: str, health: tuple[str, ...]) -> None:
        """Count one rollout whose trajectory was checked, and the health checks it failed (``findings``).

        A step apart from ``count`` (only a rollout with a trajectory takes it), right after it.
        """
        state = self._state(agent)  # not the hot path: resolved as a new agent would be
        with self._lock:
            state.evaluated += 1
            for check in health:
                state.findings[check] = state.findings.get(check, 0) + 1

    def _known(self, agent: str) -> AgentState:
        """The state of an agent, by the one dict lookup of a name seen before (as in ``count``)."""
        try:
            return self._by_name[agent]
        except Exception:  # a new agent, not a hashable one, or a str subclass whose hash raises
            return self._state(agent)

    def settled(
        self, agent: str, attempts: int, delay: float | None, *, exhausted: bool, kind: str | None
    ) -> None:
        """Count one identity of ``agent`` that reached its terminal outcome (``Coverage.observe`` decides):
        the ``attempts`` it took, the seconds it waited between them (``delay``, ``None`` when not
        measurable) and whether its retries ran out (``exhausted``), with the failure kind of its last
        attempt (``kind``)."""
        state = self._known(agent)
        with self._lock:
            label = self.names.kind(state.label, kind)[0] if exhausted else None
            _recovery(state).settled(attempts, delay, label)

    def failed_at(self, agent: str, where: Where) -> None:
        """Count one failure of ``agent`` by its (stage, delivery), checked (``failure_where``)."""
        state = self._known(agent)
        with self._lock:
            _recovery(state).failed_at(where)

    def declare_range(self, agent: str, reward_range: RewardRange) -> None:
        """Histogram ``agent``'s measured rewards in buckets of its reward range, from its first one on.

        Raises:
            ConfigError: the agent already has a measured reward (the histogram would miss it) under
                another range.
            OutcomeError: the agent name is not a non-empty string.
        """
        bounds = reward_bounds(reward_range)
        state = self._state(agent)
        with self._lock:
            if bounds == state.reward_bounds:
                return
            if sum(state.cells[_MEASURED].kinds.values()):
                msg = f"declare the reward range of {state.label!r} before its first measured reward"
                raise ConfigError(msg)
            state.reward_bounds = bounds
            # Every bucket a key of the measured counts from the start: counting one is `kinds[index] += 1`.
            measured = state.cells[_MEASURED].kinds
            for key in [key for key in measured if key is not None]:
                del measured[key]
            measured.update(dict.fromkeys(range(len(bounds) + 1), 0))

    def reject(self, reason: str) -> None:
        """Count one rejected input under ``reason`` (a small closed set of names)."""
        with self._lock:
            self._rejected[reason] = self._rejected.get(reason, 0) + 1

    # -- lifecycle ----------------------------------------------------------------------------------

    def offer(self, agent: str) -> Offered | None:
        """Count one rollout context of ``agent`` made now ahead of its block, not entered yet (``offered``);
        return what ``begin`` and ``withdraw`` take (the time and the agent's queue of withdrawals), or
        ``None`` for an invalid agent name (``begin`` rejects it). Without the lock: a mark in a thread-safe
        queue."""
        try:
            state = self._by_name[agent]
        except Exception:  # as in count()
            try:
                state = self._state(agent, overflow=False)  # begin() counts a folded name's overflow
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
        with self._lock:
            if state.lifecycle:
                return
            state.lifecycle = True
        self.first_context()

    def begin(
        self, agent: str, now: float, flight: Flight | None = None, offered: Offered | None = None
    ) -> InFlight:
        """Mark one rollout of ``agent`` in flight since ``now``, at stage ``agent``; return the handle that
        ``set_stage``, ``count`` and ``release`` take. ``flight`` is what ``/rollouts`` and stall notices
        read; ``offered``, what ``offer`` returned when it counted its context (no longer offered)."""
        try:
            state = self._by_name[agent]
        except Exception:  # as in count()
            state = self._state(agent)
        if not state.lifecycle:
            self._lifecycle_used(state)
        lock = self._lock
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
            label, folded = self.names.stage(state.label, stage)
        with self._lock:
            if folded:
                self._overflowed("stage")
            if slot.owner is handle:  # not a slot another rollout took since (a call from another thread)
                slot.move(label, now)
            flights.stage_labels.add(label)

    def heartbeat(self, handle: InFlight, now: float) -> None:
        """Note that a rollout (by the handle ``begin`` returned) was alive at ``now``."""
        with self._lock:
            if handle[1].owner is handle:  # as in set_stage
                handle[1].beat = now

    def cancel(self, handle: InFlight, reason: str) -> None:
        """Mark a rollout (by the handle ``begin`` returned) ``cancelled`` for ``reason`` until its block
        exits."""
        with self._lock:
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
        state = self._state(agent)
        with self._lock:
            state.cleanups_unresolved = (state.cleanups_unresolved or 0) + 1
        return state

    def cleanup_finished(self, state: AgentState, seconds: float, failed: bool, kind: str | None) -> None:
        """A cleanup begun by ``cleanup_started`` finished after ``seconds``: resolved, or ``failed`` with
        ``kind`` (then it stays unresolved)."""
        label, folded = self.names.kind(state.label, kind) if failed else ("", False)
        with self._lock:
            state.cleanup_durations.observe(max(seconds, 0.0))
            if failed:
                if folded:
                    self._overflowed("failure_kind")
                state.cleanups_failed[label] = state.cleanups_failed.get(label, 0) + 1
            elif state.cleanups_unresolved:
                state.cleanups_unresolved -= 1

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
        stalled: list[tuple[str, str, Flight | None, float]] = []
        with self._lock:
            now = self._clock()
            for state in self._by_label.values():
                if state.lifecycle:
                    found = state.flights.stalled_past(now, bound(state.label))
                    stalled += [(state.label, stage, flight, age) for stage, flight, age in found]
        return stalled

    def _slow(self, label: str) -> float | None:
        return None if self._slow_after is None else self._slow_after(label)

    def in_flight(self, limit: int) -> tuple[int, list[FlightRecord]]:
        """The number of rollouts in flight (without an outcome) and the ``limit`` oldest rollouts whose
        block has not exited, ``terminal`` ones included, oldest first."""
        with self._lock:
            now = self._clock()
            taken = [
                (state.label, state.flights.taken(now, self._slow(state.label)))
                for state in self._by_label.values()
            ]
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

    # -- reading ------------------------------------------------------------------------------------

    def snapshot(self) -> AccountSnapshot:
        """Copy each agent's counts atomically, the agents in turns of the lock (``read_in_turns``), so a
        recording thread never waits for more than a turn; everything derived is computed after the lock is
        released.

        An agent whose copy equals the one of an earlier snapshot gets that snapshot's ``AgentSnapshot``
        again, the same object: deriving is skipped, and a view can keep what it made from it (the
        exposition keeps the agent's lines) while the agent is unchanged.
        """
        with read_locked(self._lock):  # the agents so far, the rejections and the time, at once
            now = self._clock()
            states = list(self._by_label.values())
            rejected = self._rejected.copy()
            overflow = self._overflow.copy()
        copies = read_in_turns(self._lock, states, lambda state: state.copy(now, self._slow(state.label)))
        derived = self._derived
        agents = []
        for copy in in_turns(copies):  # deriving many changed agents holds the interpreter a turn at a time
            known = derived.get(copy.label)
            if known is None or known[0] != copy:
                # Snapshots taken at once may race here: each pair stored is a copy and its own snapshot.
                known = derived[copy.label] = (copy, copy.snapshot())
            agents.append(known[1])
        return AccountSnapshot(agents=tuple(agents), rejected=rejected, overflow=overflow, taken_at=now)

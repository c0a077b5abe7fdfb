"""The in-memory account: the one store every view is computed from.

Every outcome, whichever way it arrives (``record*``, the lifecycle, a followed file), is counted by one
method, ``count``, under one lock. Each agent has one cell per disposition holding its counts by failure kind
and its reward sums, so counting is the same few dictionary and float updates for every disposition.

``snapshot()`` holds the lock only to copy each agent's state (``_store.agent``); everything else is derived
from the copies after the lock is released.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import TypeVar

from rollout_telemetry._contract.failure_where import Where
from rollout_telemetry._contract.generation import Generation, truncation_cause
from rollout_telemetry._contract.outcome import Classified, Disposition
from rollout_telemetry._contract.reward_range import RewardRange, reward_bounds
from rollout_telemetry._store.agent import DURATION_BUCKETS, AgentCopy, AgentState, Cell
from rollout_telemetry._store.flights import TERMINAL
from rollout_telemetry._store.in_flight import InFlight, InFlightRollouts
from rollout_telemetry._store.names import Names
from rollout_telemetry._store.reads import in_turns, read_in_turns, read_locked
from rollout_telemetry._store.recovery import Recovery
from rollout_telemetry._store.roster import Roster
from rollout_telemetry._store.snapshot import AccountSnapshot, AgentSnapshot
from rollout_telemetry.errors import ConfigError

__all__ = ["Account"]

# A count's key: a name (a failure kind may be None, unspecified) or its label.
_Key = TypeVar("_Key", str, str | int | None)  # int: a measured outcome's reward bucket (declare_range)
_MEASURED = Disposition.MEASURED


def _nothing() -> None:
    """No hook: nothing to do."""


def _recovery(state: AgentState) -> Recovery:
    # Under the lock: an agent's recovery counts, made at its first retry verdict or failure stage.
    recovery = state.recovery
    if recovery is None:
        recovery = state.recovery = Recovery()
    return recovery


class Account(InFlightRollouts):
    """Per-agent rollout counts and reward sums, recorded in O(1) under one lock; the rollouts in flight are
    its base's (``InFlightRollouts``), tracked under the same lock, so its callers hold one object.

    Args:
        names: resolves agent names and failure kinds to labels (cut, capped); shared with every store.
        clock: monotonic seconds, injectable for tests.
        stall_after: seconds in flight after which a rollout of an agent (by label) is stalled; none by
            default.
        slow_after: seconds in flight after which a rollout of an agent (by label) is slow; none by default.
        first_context: called once per agent, at its first rollout context (``InFlightRollouts``).
    """

    def __init__(
        self,
        *,
        names: Names,
        clock: Callable[[], float],
        stall_after: Callable[[str], float] | None = None,
        slow_after: Callable[[str], float] | None = None,
        first_context: Callable[[], None] = _nothing,
    ) -> None:
        roster = Roster(names)
        super().__init__(roster, clock, first_context, stall_after, slow_after)
        self.names = names
        # The hot path's one dict lookup of a raw agent name (the roster's own dict, never replaced).
        self._by_name = roster.by_name
        self._rejected: dict[str, int] = {}
        # Each agent's latest copy and what was derived from it (``snapshot``).
        self._derived: dict[str, tuple[AgentCopy, AgentSnapshot]] = {}

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
            self._roster.overflowed(what)
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
                state = self._roster.state(agent)
        else:
            state, slot, started = in_flight
            duration = max(self._clock() - started, 0.0)
        disposition, reward, kind, _, generation = outcome
        if disposition is _MEASURED:  # a measured rollout is not counted by kind: its kind is no label
            bounds = state.reward_bounds
            kind = None if bounds is None else bisect.bisect_left(bounds, reward)  # type: ignore[type-var,assignment]
        # acquire/release rather than `with`: cheaper on 3.11 to 3.13 (docs/performance.md).
        lock = self._roster.lock
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
            self._roster.state(agent)

    def checked(self, agent: str, health: tuple[str, ...]) -> None:
        """Count one rollout whose trajectory was checked, and the health checks it failed (``findings``).

        A step apart from ``count`` (only a rollout with a trajectory takes it), right after it.
        """
        state = self._roster.state(agent)  # not the hot path: resolved as a new agent would be
        with self._roster.lock:
            state.evaluated += 1
            for check in health:
                state.findings[check] = state.findings.get(check, 0) + 1

    def settled(
        self, agent: str, attempts: int, delay: float | None, *, exhausted: bool, kind: str | None
    ) -> None:
        """Count one identity of ``agent`` that reached its terminal outcome (``Coverage.observe`` decides):
        the ``attempts`` it took, the seconds it waited between them (``delay``, ``None`` when not
        measurable) and whether its retries ran out (``exhausted``), with the failure kind of its last
        attempt (``kind``)."""
        state = self._roster.known(agent)
        with self._roster.lock:
            label = self.names.kind(state.label, kind)[0] if exhausted else None
            _recovery(state).settled(attempts, delay, label)

    def failed_at(self, agent: str, where: Where) -> None:
        """Count one failure of ``agent`` by its (stage, delivery), checked (``failure_where``)."""
        state = self._roster.known(agent)
        with self._roster.lock:
            _recovery(state).failed_at(where)

    def declare_range(self, agent: str, reward_range: RewardRange) -> None:
        """Histogram ``agent``'s measured rewards in buckets of its reward range, from its first one on.

        Raises:
            ConfigError: the agent already has a measured reward (the histogram would miss it) under
                another range.
            OutcomeError: the agent name is not a non-empty string.
        """
        bounds = reward_bounds(reward_range)
        state = self._roster.state(agent)
        with self._roster.lock:
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
        with self._roster.lock:
            self._rejected[reason] = self._rejected.get(reason, 0) + 1

    # -- reading ------------------------------------------------------------------------------------

    def snapshot(self) -> AccountSnapshot:
        """Copy each agent's counts atomically, the agents in turns of the lock (``read_in_turns``), so a
        recording thread never waits for more than a turn; everything derived is computed after the lock is
        released.

        An agent whose copy equals the one of an earlier snapshot gets that snapshot's ``AgentSnapshot``
        again, the same object: deriving is skipped, and a view can keep what it made from it (the
        exposition keeps the agent's lines) while the agent is unchanged.
        """
        roster, slow_after = self._roster, self.slow_after
        with read_locked(roster.lock):  # the agents so far, the rejections and the time, at once
            now = self._clock()
            states = list(roster.by_label.values())
            rejected = self._rejected.copy()
            overflow = roster.overflow.copy()
        copies = read_in_turns(roster.lock, states, lambda state: state.copy(now, slow_after(state.label)))
        derived = self._derived
        agents = []
        for copy in in_turns(copies):  # deriving many changed agents holds the interpreter a turn at a time
            known = derived.get(copy.label)
            if known is None or known[0] != copy:
                # Snapshots taken at once may race here: each pair stored is a copy and its own snapshot.
                known = derived[copy.label] = (copy, copy.snapshot())
            agents.append(known[1])
        return AccountSnapshot(agents=tuple(agents), rejected=rejected, overflow=overflow, taken_at=now)

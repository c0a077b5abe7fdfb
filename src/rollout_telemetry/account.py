"""The in-memory account: the one store every view is computed from.

Every outcome, whichever way it arrives (``record*``, the lifecycle, a followed file), is counted by one
method, ``count``, under one lock. Each agent has one cell per disposition holding its counts by failure kind
and its reward sums, so counting is the same few dictionary and float updates for every disposition.

``snapshot()`` holds the lock only to copy what it needs (dictionary and list copies, made at C speed);
totals, labels and everything else are derived from the copy after the lock is released, so a scrape never
holds up recording for longer than the copy takes.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Callable

from rollout_telemetry import _fork
from rollout_telemetry.failure_kinds import OTHER
from rollout_telemetry.names import Names
from rollout_telemetry.outcome import Classified, Disposition, Generation
from rollout_telemetry.snapshot import AccountSnapshot, AgentSnapshot

__all__ = ["DURATION_BUCKETS", "Account", "InFlight"]

_log = logging.getLogger("rollout_telemetry.account")

DURATION_BUCKETS: tuple[float, ...] = (
    0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0,
)  # fmt: skip
"""Upper bounds (seconds) of the rollout duration histogram, sub-second to an hour; +Inf is implied."""

_DISPOSITIONS = tuple(Disposition)
_MEASURED = Disposition.MEASURED


class _Cell:
    """The counts of one disposition of one agent; only touched under the account lock."""

    __slots__ = ("kinds", "negative", "positive", "unrewarded")

    def __init__(self) -> None:
        # Counts by failure kind. A kind whose label is the kind itself is its own key, so the common
        # record is `kinds[kind] += 1`; a cut or folded kind is keyed by its label (see _AgentState.labels).
        self.kinds: dict[str | None, int] = {}
        self.positive = 0.0
        self.negative = 0.0  # magnitudes, so both sums only grow
        self.unrewarded = 0


class _AgentState:
    """Mutable per-agent counts; only touched under the account lock."""

    __slots__ = (
        "cells",
        "duration_buckets",
        "duration_count",
        "duration_sum",
        "free_slots",
        "label",
        "labels",
        "lifecycle",
        "reasons",
        "starts",
        "tokens",
        "truncated",
    )

    def __init__(self, label: str) -> None:
        self.label = label
        self.cells = {disposition: _Cell() for disposition in _DISPOSITIONS}
        self.cells[_MEASURED].kinds[None] = 0  # measured rollouts are counted under None, never resolved
        self.labels: dict[str | None, str] = {}  # kind key -> its label, resolved once
        self.lifecycle = False
        # In-flight rollouts: one slot each, holding its start time (None when free). Slots are reused,
        # so starting and finishing allocate nothing; a snapshot copies the list.
        self.starts: list[float | None] = []
        self.free_slots: list[int] = []
        self.duration_buckets = [0] * (len(DURATION_BUCKETS) + 1)
        self.duration_sum = 0.0
        self.duration_count = 0
        self.tokens: list[int] | None = None  # input, output, cached, reasoning; None until a usage
        # Truncations by reason, keyed like the kinds of a cell: the reason itself, or its label if cut or
        # folded; ``reasons`` maps each key to its label.
        self.truncated: dict[str, int] = {}
        self.reasons: dict[str, str] = {}


InFlight = tuple[_AgentState, int, float]
"""What ``Account.begin`` returns and ``Account.count`` takes to end that flight: opaque to callers."""


class Account:
    """Per-agent rollout counts, reward sums and in-flight work, recorded in O(1) under one lock.

    Args:
        names: resolves agent names and failure kinds to labels (cut, capped); shared with every store.
        clock: monotonic seconds, injectable for tests.
    """

    def __init__(self, *, names: Names, clock: Callable[[], float]) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self.names = names
        self._by_label: dict[str, _AgentState] = {}
        # Raw agent name -> state, so the hot path does one dict lookup. Folded names are never entered,
        # so each of their records takes the slow path and is counted as an overflow.
        self._by_name: dict[str, _AgentState] = {}
        self._rejected: dict[str, int] = {}
        self._overflow: dict[str, int] = {}
        self._overflow_warned: set[str] = set()
        _fork.track(self)

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()

    def reset(self) -> None:
        """Start every count over from zero (the source being read started over).

        Scrapers see a counter reset, which ``rate()`` and ``increase()`` handle.
        """
        with self._lock:
            self._by_label = {}
            self._by_name = {}
            self._rejected = {}
            self._overflow = {}
        self.names.reset()

    # -- resolving labels ---------------------------------------------------------------------------

    def _state(self, agent: str) -> _AgentState:
        """The state of an agent not in ``_by_name`` yet (or folded); raises ``OutcomeError`` if invalid."""
        label, folded = self.names.agent(agent)
        with self._lock:
            state = self._by_label.get(label)
            if state is None:
                state = self._by_label[label] = _AgentState(label)
            if folded:
                self._overflowed("agent")
            elif len(self._by_name) < 4 * self.names.max_agents:
                self._by_name[agent] = state
        return state

    def _new_kind(self, state: _AgentState, cell: _Cell, kind: str | None) -> None:
        # Called under the lock when ``kind`` is not a key of ``cell.kinds``: resolve its label once.
        label, folded = self.names.kind(state.label, kind)
        if folded:
            self._overflowed("failure_kind")  # never made a key: every record of it is counted here
        key = kind if label == (kind or label) else label
        cell.kinds[key] = cell.kinds.get(key, 0) + 1
        state.labels[key] = label

    def _generated(self, state: _AgentState, generation: Generation) -> None:
        # Called under the lock: the usage and truncation of one model response.
        tokens, truncated = generation
        if tokens is not None:
            counts = state.tokens
            if counts is None:
                counts = state.tokens = [0, 0, 0, 0]
            counts[0] += tokens[0]
            counts[1] += tokens[1]
            counts[2] += tokens[2]
            counts[3] += tokens[3]
        if truncated is not None:
            try:
                state.truncated[truncated] += 1
            except KeyError:
                self._truncated(state, truncated)

    def _truncated(self, state: _AgentState, reason: str) -> None:
        # Called under the lock when ``reason`` is not a key of ``state.truncated``: resolve its label once.
        label, folded = self.names.truncation(state.label, reason)
        if folded:
            self._overflowed("truncation_reason")  # never made a key: every record of it is counted here
        key = reason if label == (reason or label) else label
        state.truncated[key] = state.truncated.get(key, 0) + 1
        state.reasons[key] = label

    def _overflowed(self, label: str) -> None:
        # Called under the lock.
        self._overflow[label] = self._overflow.get(label, 0) + 1
        if label not in self._overflow_warned:
            self._overflow_warned.add(label)
            _log.warning(
                "more distinct %s values than the cap allows; further ones are counted as %r", label, OTHER
            )

    # -- recording ----------------------------------------------------------------------------------

    def count(self, agent: str, outcome: Classified, in_flight: InFlight | None = None) -> None:
        """Count one classified outcome of ``agent`` (from ``outcome.classify`` or ``outcome.absent``).

        This is the one place a count changes. With ``in_flight`` (the handle ``begin`` returned) the same
        step takes that rollout out of flight and records its duration, under the same lock, so no
        snapshot sees a rollout both in flight and counted.

        Raises:
            OutcomeError: the agent name is not a non-empty string.
        """
        if in_flight is None:
            try:
                state = self._by_name[agent]
            except (KeyError, TypeError):  # a new agent, or not even a hashable one
                state = self._state(agent)
        else:
            state, slot, started = in_flight
            duration = max(self._clock() - started, 0.0)
        disposition, reward, kind, _, generation = outcome
        if disposition is _MEASURED:
            kind = None  # a measured rollout is not counted by kind: its kind is no label
        # acquire/release rather than `with`: on CPython 3.11 the statement costs more than the counting.
        lock = self._lock
        lock.acquire()
        try:
            if in_flight is not None:
                state.starts[slot] = None
                state.free_slots.append(slot)
                state.duration_buckets[bisect.bisect_left(DURATION_BUCKETS, duration)] += 1
                state.duration_sum += duration
                state.duration_count += 1
            cell = state.cells[disposition]
            counts = cell.kinds
            try:
                counts[kind] += 1
            except KeyError:
                self._new_kind(state, cell, kind)
            # A zero reward (common: masked rollouts usually score 0) changes no sum: the adds are skipped.
            if reward is None:
                cell.unrewarded += 1
            elif reward > 0.0:
                cell.positive += reward
            elif reward < 0.0:
                cell.negative -= reward
            if generation is not None:
                self._generated(state, generation)
        finally:
            lock.release()

    def declare(self, agent: str) -> None:
        """Make ``agent`` known with zero counts, so its always-present series start at 0."""
        self._state(agent)

    def reject(self, reason: str) -> None:
        """Count one rejected input under ``reason`` (a small closed set of names)."""
        with self._lock:
            self._rejected[reason] = self._rejected.get(reason, 0) + 1

    # -- lifecycle ----------------------------------------------------------------------------------

    def begin(self, agent: str, now: float) -> InFlight:
        """Mark one rollout of ``agent`` in flight since ``now``; return the handle ``count`` takes."""
        try:
            state = self._by_name[agent]
        except (KeyError, TypeError):
            state = self._state(agent)
        lock = self._lock
        lock.acquire()
        try:
            if state.free_slots:
                slot = state.free_slots.pop()
                state.starts[slot] = now
            else:  # more rollouts in flight than ever before
                slot = len(state.starts)
                state.starts.append(now)
            state.lifecycle = True
        finally:
            lock.release()
        return state, slot, now

    # -- reading ------------------------------------------------------------------------------------

    def snapshot(self) -> AccountSnapshot:
        """Copy every count atomically; everything derived is computed after the lock is released."""
        with self._lock:
            now = self._clock()
            copies = [
                (
                    s.label,
                    [(d, c.kinds.copy(), c.positive, c.negative, c.unrewarded) for d, c in s.cells.items()],
                    s.labels.copy(),
                    s.lifecycle,
                    s.starts.copy(),
                    tuple(s.duration_buckets),
                    s.duration_sum,
                    s.duration_count,
                    None if s.tokens is None else tuple(s.tokens),
                    s.truncated.copy(),
                    s.reasons.copy(),
                )
                for s in self._by_label.values()
            ]
            rejected = self._rejected.copy()
            overflow = self._overflow.copy()
        return AccountSnapshot(
            agents=tuple(_agent_snapshot(copy) for copy in copies),
            rejected=rejected,
            overflow=overflow,
            taken_at=now,
        )


_CellCopy = tuple[Disposition, dict[str | None, int], float, float, int]


_StateCopy = tuple[
    str,
    list[_CellCopy],
    dict[str | None, str],
    bool,
    list[float | None],
    tuple[int, ...],
    float,
    int,
    tuple[int, ...] | None,
    dict[str, int],
    dict[str, str],
]


def _agent_snapshot(copy: _StateCopy) -> AgentSnapshot:
    """Derive one agent's snapshot from what was copied under the lock."""
    label, cells, labels, lifecycle, starts, duration_buckets, duration_sum, duration_count = copy[:8]
    tokens, truncated_by_key, reasons = copy[8:]
    truncated: dict[str, int] = {}
    for reason_key, count in truncated_by_key.items():
        reason = reasons[reason_key]
        truncated[reason] = truncated.get(reason, 0) + count
    kinds: dict[Disposition, dict[str, int]] = {}
    totals: dict[Disposition, int] = {}
    unrewarded: dict[Disposition, int] = {}
    positive: dict[Disposition, float] = {}
    negative: dict[Disposition, float] = {}
    for disposition, counts, pos, neg, unrew in cells:
        totals[disposition] = sum(counts.values())
        unrewarded[disposition] = unrew
        positive[disposition] = pos
        negative[disposition] = neg
        if disposition is not _MEASURED:
            # Keyed by label: a dict of strings and ints, which the garbage collector does not track.
            by_label = kinds[disposition] = {}
            for key, count in counts.items():
                kind = labels[key]
                by_label[kind] = by_label.get(kind, 0) + count
    live = [start for start in starts if start is not None]
    absent = (Disposition.FAILED, Disposition.OMITTED)
    return AgentSnapshot(
        agent=label,
        measured=totals[_MEASURED],
        masked=totals[Disposition.MASKED],
        masked_rewarded=totals[Disposition.MASKED] - unrewarded[Disposition.MASKED],
        unscored=totals[Disposition.UNSCORED],
        failed=totals[Disposition.FAILED],
        omitted=totals[Disposition.OMITTED],
        measured_positive=positive[_MEASURED],
        measured_negative=negative[_MEASURED],
        masked_positive=positive[Disposition.MASKED],
        masked_negative=negative[Disposition.MASKED],
        absent_rewarded=sum(totals[d] - unrewarded[d] for d in absent),
        absent_positive=sum(positive[d] for d in absent),
        absent_negative=sum(negative[d] for d in absent),
        kinds=kinds,
        lifecycle=lifecycle,
        in_flight=len(live),
        oldest_in_flight_start=min(live) if live else None,
        duration_buckets=duration_buckets,
        duration_sum=duration_sum,
        duration_count=duration_count,
        tokens=tokens,
        truncated=truncated,
    )

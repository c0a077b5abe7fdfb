"""The in-memory account: the one source of truth every view is computed from.

Recording is O(1) under one lock: a per-agent slotted state object is looked up (created on first use,
within the cardinality caps) and a few integers and floats are updated. ``snapshot()`` copies everything
under the same lock, so a snapshot never holds half of an update; every exporter reads snapshots.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from rollout_telemetry import _fork
from rollout_telemetry.failure_kinds import OTHER, UNSPECIFIED, KindValidator
from rollout_telemetry.outcome import Disposition, OutcomeError, label_value

__all__ = [
    "DEFAULT_MAX_AGENTS",
    "DEFAULT_MAX_KINDS_PER_AGENT",
    "DURATION_BUCKETS",
    "Account",
    "AccountSnapshot",
    "AgentSnapshot",
    "InFlightHandle",
]

_log = logging.getLogger("rollout_telemetry.account")

DEFAULT_MAX_AGENTS = 256
DEFAULT_MAX_KINDS_PER_AGENT = 64

DURATION_BUCKETS: tuple[float, ...] = (
    0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0,
)  # fmt: skip
"""Upper bounds (seconds) of the rollout duration histogram, sub-second to an hour; +Inf is implied."""

_MEASURED = Disposition.MEASURED
_MASKED = Disposition.MASKED
_UNSCORED = Disposition.UNSCORED
_FAILED = Disposition.FAILED
_OMITTED = Disposition.OMITTED


class _AgentState:
    """Mutable per-agent counts; only touched under the account lock."""

    __slots__ = (
        "duration_buckets",
        "duration_count",
        "duration_sum",
        "failed_kinds",
        "free_slots",
        "key_labels",
        "kind_labels",
        "label",
        "lifecycle",
        "masked_kinds",
        "masked_negative",
        "masked_positive",
        "masked_unrewarded",
        "measured",
        "measured_negative",
        "measured_positive",
        "omitted_kinds",
        "starts",
        "unscored_kinds",
    )

    def __init__(self, label: str) -> None:
        self.label = label
        self.measured = 0
        self.masked_unrewarded = 0  # rare, so the common masked record has one increment fewer
        self.measured_positive = 0.0
        self.measured_negative = 0.0
        self.masked_positive = 0.0
        self.masked_negative = 0.0
        # Counts per failure kind, one dict per disposition that carries one. A kind whose label is the
        # kind itself (or None, "unspecified") is its own key, so the hot path is `counts[kind] += 1`;
        # key_labels maps every key to its label, resolved once (validated, truncated, capped).
        self.masked_kinds: dict[str | None, int] = {}
        self.unscored_kinds: dict[str | None, int] = {}
        self.failed_kinds: dict[str | None, int] = {}
        self.omitted_kinds: dict[str | None, int] = {}
        self.key_labels: dict[str | None, str] = {}
        self.kind_labels: set[str] = set()
        self.lifecycle = False
        # In-flight rollouts: one slot each, holding its start time (None when free). Slots are reused,
        # so starting and finishing allocate nothing; the scrape scans them for the count and the oldest.
        self.starts: list[float | None] = []
        self.free_slots: list[int] = []
        self.duration_buckets = [0] * (len(DURATION_BUCKETS) + 1)
        self.duration_sum = 0.0
        self.duration_count = 0


def _rounded(value: float) -> float:
    return round(value, 12)


@dataclass(frozen=True, slots=True)
class AgentSnapshot:
    """One agent's counts at one moment, with the values every view derives from them."""

    agent: str
    measured: int
    masked: int
    masked_rewarded: int
    unscored: int
    failed: int
    omitted: int
    measured_positive: float
    measured_negative: float
    masked_positive: float
    masked_negative: float
    kinds: Mapping[tuple[Disposition, str], int]
    lifecycle: bool = False
    in_flight: int = 0
    oldest_in_flight_start: float | None = None
    duration_buckets: tuple[int, ...] = ()
    duration_sum: float = 0.0
    duration_count: int = 0

    @property
    def completed(self) -> int:
        """Rollouts that reached the output: measured + masked + unscored."""
        return self.measured + self.masked + self.unscored

    @property
    def rewarded(self) -> int:
        """Completed rollouts that carry a reward, masked ones included."""
        return self.measured + self.masked_rewarded

    @property
    def reward_positive(self) -> float:
        """Sum of the positive rewards, masked ones included."""
        return self.measured_positive + self.masked_positive

    @property
    def reward_negative(self) -> float:
        """Sum of the magnitudes of the negative rewards, masked ones included."""
        return self.measured_negative + self.masked_negative

    @property
    def reward_sum(self) -> float:
        """Sum of every reward, masked ones included."""
        return self.reward_positive - self.reward_negative

    @property
    def mean_reward(self) -> float | None:
        """Mean reward over every rewarded rollout, masked included; ``None`` before the first."""
        if self.rewarded == 0:
            return None
        return _rounded(self.reward_sum / self.rewarded)

    @property
    def troubled(self) -> bool:
        """Whether anything was masked, failed or omitted for this agent."""
        return self.masked + self.failed + self.omitted > 0

    @property
    def mean_reward_unmasked(self) -> float | None:
        """Mean reward over unmasked rollouts, only once something was masked, failed or omitted."""
        if self.measured == 0 or not self.troubled:
            return None
        return _rounded((self.measured_positive - self.measured_negative) / self.measured)

    @property
    def masked_ratio(self) -> float | None:
        """masked / completed (masked + unmasked), 0-1, only once something was masked."""
        if self.masked == 0:
            return None
        return self.masked / self.completed

    def count(self, disposition: Disposition) -> int:
        """The number of rollouts that ended in ``disposition``."""
        return int(getattr(self, disposition.value))

    def by_kind(self, disposition: Disposition) -> dict[str, int]:
        """Counts of ``disposition`` per failure kind."""
        return {kind: n for (disp, kind), n in self.kinds.items() if disp is disposition}


@dataclass(frozen=True, slots=True)
class AccountSnapshot:
    """Every agent's counts, the rejections and the label overflows, taken atomically."""

    agents: tuple[AgentSnapshot, ...]
    rejected: Mapping[str, int] = field(default_factory=dict)
    overflow: Mapping[str, int] = field(default_factory=dict)
    taken_at: float = 0.0

    def agent(self, name: str) -> AgentSnapshot | None:
        """The snapshot of one agent (by its label), or ``None``."""
        for snap in self.agents:
            if snap.agent == name:
                return snap
        return None


InFlightHandle = tuple[_AgentState, int, float]
"""What ``Account.begin`` returns and ``Account.finish`` takes: opaque to callers but for its last item,
the start time on the account's clock."""


class Account:
    """Per-agent rollout counts, reward sums and in-flight work, recorded in O(1).

    Args:
        max_agents: distinct agent labels kept; further agents are counted under ``agent="_other"``.
        max_kinds_per_agent: distinct failure kinds kept per agent; further ones become ``"_other"``.
        clock: monotonic seconds, injectable for tests.
    """

    def __init__(
        self,
        *,
        max_agents: int = DEFAULT_MAX_AGENTS,
        max_kinds_per_agent: int = DEFAULT_MAX_KINDS_PER_AGENT,
        clock: Callable[[], float],
        kind_validator: KindValidator | None = None,
    ) -> None:
        if max_agents < 1 or max_kinds_per_agent < 1:
            msg = "max_agents and max_kinds_per_agent must be at least 1"
            raise ValueError(msg)
        self._lock = threading.Lock()
        self._clock = clock
        self._max_agents = max_agents
        self._max_kinds = max_kinds_per_agent
        self._validator = kind_validator or KindValidator()
        self._by_label: dict[str, _AgentState] = {}
        # Raw agent name -> state, so the hot path does one dict lookup; bounded so that names which
        # normalise to the same label cannot grow it without end.
        self._by_name: dict[str, _AgentState] = {}
        self._kind_labels: dict[str, str] = {}
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

    # -- resolving labels ---------------------------------------------------------------------------

    def _agent(self, name: str) -> _AgentState:
        if type(name) is not str or not name:
            msg = f"must be a non-empty string, got {type(name).__name__} {name!r:.60}"
            raise OutcomeError("agent", msg)
        state = self._by_name.get(name)
        if state is not None:
            return state
        label = label_value(name)
        with self._lock:
            state = self._by_label.get(label)
            if state is None:
                if len(self._by_label) >= self._max_agents and label != OTHER:
                    self._overflowed("agent")
                    state = self._by_label.get(OTHER)
                    if state is None:
                        state = self._by_label[OTHER] = _AgentState(OTHER)
                    return state
                state = self._by_label[label] = _AgentState(label)
            if len(self._by_name) < 4 * self._max_agents:
                self._by_name[name] = state
            return state

    def _count_new_kind(self, state: _AgentState, counts: dict[str | None, int], kind: str | None) -> None:
        # Called under the lock when ``kind`` is not a key of ``counts`` yet.
        if kind is None:
            label = UNSPECIFIED
        else:
            cached = self._kind_labels.get(kind)
            if cached is None:
                cached = label_value(self._validator.validate(kind))
                if len(self._kind_labels) < 4096:
                    self._kind_labels[kind] = cached
            label = cached
        if label not in state.kind_labels:
            if len(state.kind_labels) >= self._max_kinds and label != OTHER:
                # Not made a key, so every further record of this kind is counted as an overflow too.
                self._overflowed("failure_kind")
                label = OTHER
            else:
                state.kind_labels.add(label)
        key: str | None = kind if (kind is None or kind == label) else label
        counts[key] = counts.get(key, 0) + 1
        state.key_labels[key] = label

    def _overflowed(self, label: str) -> None:
        # Called under the lock.
        self._overflow[label] = self._overflow.get(label, 0) + 1
        if label not in self._overflow_warned:
            self._overflow_warned.add(label)
            _log.warning(
                "more distinct %s values than the cap allows; further ones are counted as %r",
                label,
                OTHER,
            )

    # -- recording ----------------------------------------------------------------------------------

    def add_completed(self, agent: str, reward: float | None, masked: bool, kind: str | None) -> None:
        """Count one completed rollout: masked if ``masked``, else measured or (no reward) unscored."""
        # The recording hot path: written out flat, without helper calls, because it runs per rollout.
        try:
            state = self._by_name[agent]
        except (KeyError, TypeError):  # a new agent, or not even a hashable one
            state = self._agent(agent)
        with self._lock:
            if masked:
                counts = state.masked_kinds
                try:
                    counts[kind] += 1
                except KeyError:
                    self._count_new_kind(state, counts, kind)
                # A zero reward (common: masked rollouts usually score 0) changes no sum: skip the add.
                if reward is None:
                    state.masked_unrewarded += 1
                elif reward > 0.0:
                    state.masked_positive += reward
                elif reward < 0.0:
                    state.masked_negative -= reward
            elif reward is not None:
                state.measured += 1
                if reward > 0.0:
                    state.measured_positive += reward
                elif reward < 0.0:
                    state.measured_negative -= reward
            else:
                counts = state.unscored_kinds
                try:
                    counts[kind] += 1
                except KeyError:
                    self._count_new_kind(state, counts, kind)

    def add_absent(self, agent: str, disposition: Disposition, kind: str | None) -> None:
        """Count one rollout that did not reach the output: ``FAILED``, or ``OMITTED`` on purpose."""
        try:
            state = self._by_name[agent]
        except (KeyError, TypeError):  # a new agent, or not even a hashable one
            state = self._agent(agent)
        with self._lock:
            counts = state.failed_kinds if disposition is _FAILED else state.omitted_kinds
            try:
                counts[kind] += 1
            except KeyError:
                self._count_new_kind(state, counts, kind)

    def declare(self, agent: str) -> None:
        """Make ``agent`` known with zero counts, so its always-present series start at 0."""
        self._agent(agent)

    def reject(self, reason: str) -> None:
        """Count one rejected input under ``reason`` (a small closed set of names)."""
        with self._lock:
            self._rejected[reason] = self._rejected.get(reason, 0) + 1

    # -- lifecycle ----------------------------------------------------------------------------------

    def begin(self, agent: str) -> InFlightHandle:
        """Mark one rollout of ``agent`` in flight; return the handle ``finish`` needs."""
        try:
            state = self._by_name[agent]
        except (KeyError, TypeError):  # a new agent, or not even a hashable one
            state = self._agent(agent)
        now = self._clock()
        try:
            slot = state.free_slots.pop()
        except IndexError:
            with self._lock:  # a new slot: only when more rollouts are in flight than ever before
                state.starts.append(None)
                slot = len(state.starts) - 1
        # One list store, atomic under the GIL, so no lock is taken: a snapshot sees the rollout in
        # flight or not, never half of it.
        state.starts[slot] = now
        if not state.lifecycle:
            state.lifecycle = True
        return state, slot, now

    def finish(
        self,
        handle: InFlightHandle,
        disposition: Disposition,
        reward: float | None,
        kind: str | None,
    ) -> float:
        """Take a rollout out of flight and count its outcome in one step; return its duration."""
        state, slot, started = handle
        duration = self._clock() - started
        if duration < 0.0:  # noqa: PLR1730 - a comparison is cheaper than a max() call here
            duration = 0.0
        # The counting below is add_completed's and add_absent's, written out again on purpose: it must
        # happen inside the one lock that also takes the rollout out of flight, and a shared helper would
        # cost every record() a call.
        with self._lock:
            state.starts[slot] = None
            state.free_slots.append(slot)
            state.duration_buckets[bisect.bisect_left(DURATION_BUCKETS, duration)] += 1
            state.duration_sum += duration
            state.duration_count += 1
            if disposition is _MEASURED:
                state.measured += 1
                if reward is not None and reward > 0.0:
                    state.measured_positive += reward
                elif reward is not None and reward < 0.0:
                    state.measured_negative -= reward
                return duration
            if disposition is _FAILED:
                counts = state.failed_kinds
            elif disposition is _OMITTED:
                counts = state.omitted_kinds
            elif disposition is _UNSCORED:
                counts = state.unscored_kinds
            else:
                counts = state.masked_kinds
                if reward is None:
                    state.masked_unrewarded += 1
                elif reward > 0.0:
                    state.masked_positive += reward
                elif reward < 0.0:
                    state.masked_negative -= reward
            try:
                counts[kind] += 1
            except KeyError:
                self._count_new_kind(state, counts, kind)
        return duration

    # -- reading ------------------------------------------------------------------------------------

    def snapshot(self) -> AccountSnapshot:
        """Copy every count atomically."""
        with self._lock:
            now = self._clock()
            agents = []
            for s in self._by_label.values():
                live = [start for start in s.starts if start is not None]
                # The per-disposition totals are the sums of their kind counts: one increment per record.
                kinds: dict[tuple[Disposition, str], int] = {}
                counts = dict.fromkeys((_MASKED, _UNSCORED, _FAILED, _OMITTED), 0)
                for disposition, by_key in (
                    (_MASKED, s.masked_kinds),
                    (_UNSCORED, s.unscored_kinds),
                    (_FAILED, s.failed_kinds),
                    (_OMITTED, s.omitted_kinds),
                ):
                    for key, count in by_key.items():
                        label = (disposition, s.key_labels[key])
                        kinds[label] = kinds.get(label, 0) + count
                        counts[disposition] += count
                agents.append(
                    AgentSnapshot(
                        agent=s.label,
                        measured=s.measured,
                        masked=counts[_MASKED],
                        masked_rewarded=counts[_MASKED] - s.masked_unrewarded,
                        unscored=counts[_UNSCORED],
                        failed=counts[_FAILED],
                        omitted=counts[_OMITTED],
                        measured_positive=s.measured_positive,
                        measured_negative=s.measured_negative,
                        masked_positive=s.masked_positive,
                        masked_negative=s.masked_negative,
                        kinds=kinds,
                        lifecycle=s.lifecycle,
                        in_flight=len(live),
                        oldest_in_flight_start=min(live) if live else None,
                        duration_buckets=tuple(s.duration_buckets),
                        duration_sum=s.duration_sum,
                        duration_count=s.duration_count,
                    )
                )
            return AccountSnapshot(
                agents=tuple(agents),
                rejected=dict(self._rejected),
                overflow=dict(self._overflow),
                taken_at=now,
            )

"""What ``rollout-telemetry top`` shows, as values: readings in, a view model out, no terminal and no I/O.

A *reading* is what one source (an exporter's ``/metrics`` and ``/rollouts``, or a run's files) said at one
moment: cumulative counters per agent, gauges, and the oldest rollouts in flight. A :class:`Tracker` turns
successive readings of one source into the figures that need two of them (rollouts per minute, the
per-refresh mean reward of the sparkline) and keeps a bounded history. The renderer in :mod:`.top` is a pure
function of the resulting :class:`TopView`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from rollout_telemetry._store.snapshot import finished

__all__ = [
    "AgentRow",
    "AgentTotals",
    "InFlightRollout",
    "Reading",
    "SourceView",
    "TopView",
    "Tracker",
    "top_kind",
    "windowed_means",
]

HISTORY_SECONDS = 300.0
"""How far back the reward sparkline reaches."""
HISTORY_POINTS = 600
"""A bound on the points kept per agent, whatever the refresh interval."""
RATE_SECONDS = 10.0
"""Rollouts per minute are counted over the readings of the last this many seconds (at least one)."""


@dataclass(frozen=True, slots=True)
class AgentTotals:
    """One agent's figures in one reading: counters are cumulative, gauges as published."""

    agent: str
    completed: float = 0.0
    rewarded: float = 0.0
    reward_positive: float = 0.0
    reward_negative: float = 0.0
    mean_reward: float | None = None
    unmasked_reward: float | None = None
    masked_ratio: float | None = None
    failed: Mapping[str, float] = field(default_factory=dict)
    """Failed rollouts per failure kind."""
    omitted: Mapping[str, float] = field(default_factory=dict)
    in_flight: float | None = None
    """``None`` where the source publishes no in-flight figures (a run's files, or no lifecycle API)."""
    oldest_age: float | None = None
    stalled: float | None = None
    """Rollouts in flight past the stall bound; ``None`` on an exporter that does not publish it."""
    expected: float | None = None
    """Rollouts the run expects of the agent (its coverage); ``None`` where the source does not know."""
    unknown: float | None = None
    """Of those, the ones with no outcome yet."""

    @property
    def finished(self) -> float:
        """Rollouts finished: completed, failed or omitted (``finished``)."""
        return finished(self.completed, sum(self.failed.values()), sum(self.omitted.values()))


@dataclass(frozen=True, slots=True)
class InFlightRollout:
    """One rollout still in flight, as ``/rollouts`` lists it."""

    agent: str
    stage: str
    age_seconds: float
    stalled: bool = False
    task_index: int | None = None
    rollout_index: int | None = None
    attempt: int | None = None
    trace_id: str | None = None
    state: str = "active"
    """Its state (active, slow, retrying, stalled, cancelled, terminal); ``active`` from an older exporter."""
    heartbeat_age_seconds: float | None = None
    """Seconds since its last heartbeat, stage change or start; ``None`` from an older exporter."""
    source: str = ""
    """The label of the source it came from; set when the views are merged."""


@dataclass(frozen=True, slots=True)
class Reading:
    """Everything one source said at one moment."""

    agents: tuple[AgentTotals, ...]
    in_flight: tuple[InFlightRollout, ...] | None = None
    """The oldest rollouts in flight, oldest first; ``None`` where the source has no such list."""
    stall_after_seconds: float | None = None
    note: str | None = None
    """What the source says of its agents, where it can tell: why there is none (a run's files: empty, every
    row rejected), or that rows named none and were given the file's name."""
    tracks_in_flight: bool = True
    """Whether the source can know of rollouts in flight: a run's files, or an exporter that tracked no
    rollout block (one following files), show finished rollouts only."""
    ended: bool = False
    """The run is over, where the source can tell: a run's files that did not grow since the last reading,
    with an outcome for every rollout expected."""


@dataclass(frozen=True, slots=True)
class TrendPoint:
    """What one refresh added: its rewards' sum over its rewarded rollouts is that refresh's mean reward."""

    at: float
    """Monotonic time of the reading."""
    reward_sum: float
    rewarded: float
    finished: float = 0.0
    """Rollouts finished (completed, failed or omitted) since the reading before."""
    since: float = 0.0
    """Monotonic time of the reading before, which the increases are counted from."""


def windowed_means(
    points: tuple[TrendPoint, ...], *, now: float, span: float, buckets: int
) -> list[float | None]:
    """The mean reward in each of ``buckets`` equal slices of the last ``span`` seconds, oldest first.

    A slice's mean is its rewards' sum over its rewarded rollouts (``None`` where nothing was rewarded), so a
    busy refresh weighs more than a quiet one, as in the overall mean.
    """
    sums = [0.0] * buckets
    counts = [0.0] * buckets
    width = span / buckets
    for point in points:
        age = now - point.at
        if not 0.0 <= age < span:
            continue
        index = buckets - 1 - int(age / width)
        sums[index] += point.reward_sum
        counts[index] += point.rewarded
    return [s / c if c > 0 else None for s, c in zip(sums, counts, strict=True)]


@dataclass(frozen=True, slots=True)
class AgentRow:
    """One line of the agent table."""

    totals: AgentTotals
    per_minute: float | None
    """Rollouts finished (``finished``) per minute over the last :data:`RATE_SECONDS`; ``None`` on the first
    reading."""
    trend: tuple[TrendPoint, ...]
    """The reward added between successive readings over the last minutes, oldest first."""

    @property
    def agent(self) -> str:
        return self.totals.agent


@dataclass(frozen=True, slots=True)
class SourceView:
    """One source as the screen shows it: up with its agents, or down with the reason."""

    label: str
    up: bool
    agents: tuple[AgentRow, ...] = ()
    error: str | None = None
    """Why the last reading failed; set while the source is down."""
    down_for: float | None = None
    """Seconds since the last good reading; ``None`` if there never was one."""
    in_flight: tuple[InFlightRollout, ...] | None = None
    stall_after_seconds: float | None = None
    waiting: bool = False
    """No reading has finished yet."""
    note: str | None = None
    """What the source says of its agents (``Reading.note``)."""
    tracks_in_flight: bool = True
    """``Reading.tracks_in_flight``."""
    ended: bool = False
    """``Reading.ended``: the screen says ended, and no rate."""

    @property
    def progress(self) -> tuple[float, float] | None:
        """(done, expected) over the agents whose expected rollouts the source knows, or ``None``."""
        known = [a.totals for a in self.agents if a.totals.expected]
        if not known:
            return None
        expected = sum(t.expected or 0.0 for t in known)
        return expected - sum(t.unknown or 0.0 for t in known), expected

    @property
    def per_minute(self) -> float | None:
        """Rollouts finished per minute over the agents whose expected rollouts are known (``progress``'s),
        or ``None``."""
        rates = [a.per_minute for a in self.agents if a.per_minute is not None and a.totals.expected]
        return sum(rates) if rates else None


@dataclass(frozen=True, slots=True)
class TopView:
    """The whole screen: every source in the order given, and the refresh interval."""

    sources: tuple[SourceView, ...]
    interval: float
    now: float
    """Monotonic time of the view, which the trend's time axis ends at."""

    def oldest_in_flight(self, limit: int) -> list[InFlightRollout]:
        """The ``limit`` oldest rollouts in flight over every source, oldest first."""
        rollouts = [r for s in self.sources if s.up and s.in_flight for r in s.in_flight]
        rollouts.sort(key=lambda r: r.age_seconds, reverse=True)
        return rollouts[:limit]

    @property
    def has_in_flight_lists(self) -> bool:
        """Whether any source that is up publishes a list of rollouts in flight."""
        return any(s.up and s.in_flight is not None for s in self.sources)


def top_kind(by_kind: Mapping[str, float]) -> str | None:
    """The failure kind with the most rollouts (ties: the first name in order), or ``None``."""
    best = sorted(((-count, kind) for kind, count in by_kind.items() if count > 0))
    return best[0][1] if best else None


@dataclass(slots=True)
class _Previous:
    at: float
    finished: float
    rewarded: float
    positive: float
    negative: float


def _per_minute(trend: deque[TrendPoint], now: float) -> float | None:
    recent = [p for p in trend if p.at > now - RATE_SECONDS] or list(trend)[-1:]
    if not recent:
        return None
    since = min(p.since for p in recent)
    return sum(p.finished for p in recent) * 60.0 / (now - since)


class Tracker:
    """Turns one source's successive readings into rows: rates between readings, a bounded reward history.

    Each reading adds a :class:`TrendPoint`: what the counters grew by since the reading before. A counter
    that went down means the exporter restarted: its counters began again at zero, so the current value is
    the increase since the restart. The rate is taken over the last few seconds of points, so bursty
    completions between two short refreshes do not make it jump to zero and back.
    """

    def __init__(self, *, history_seconds: float = HISTORY_SECONDS, max_points: int = HISTORY_POINTS) -> None:
        self._history_seconds = history_seconds
        self._previous: dict[str, _Previous] = {}
        self._trend: dict[str, deque[TrendPoint]] = {}
        self._max_points = max_points

    def update(self, reading: Reading, now: float) -> tuple[AgentRow, ...]:
        """The rows for ``reading``, taken at monotonic time ``now``."""
        rows = []
        for totals in reading.agents:
            previous = self._previous.get(totals.agent)
            current = _Previous(
                now, totals.finished, totals.rewarded, totals.reward_positive, totals.reward_negative
            )
            self._previous[totals.agent] = current
            trend = self._trend.setdefault(totals.agent, deque(maxlen=self._max_points))
            if previous is not None and now > previous.at:
                restarted = current.finished < previous.finished or current.rewarded < previous.rewarded
                base = _Previous(previous.at, 0.0, 0.0, 0.0, 0.0) if restarted else previous
                added = (current.positive - base.positive) - (current.negative - base.negative)
                rewarded = current.rewarded - base.rewarded
                done = current.finished - base.finished
                trend.append(TrendPoint(now, added, rewarded, done, previous.at))
            while trend and trend[0].at < now - self._history_seconds:
                trend.popleft()
            rows.append(AgentRow(totals, _per_minute(trend, now), tuple(trend)))
        return tuple(rows)

"""Snapshots of the account: every count at one moment, and the statistics every view derives from them.

A snapshot is a frozen copy: exporters, the progress keys and the report compute from one snapshot each, so
what they show is consistent with itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from rollout_telemetry._contract.outcome import Disposition
from rollout_telemetry._store.observed import Observed
from rollout_telemetry._store.recovery import RecoverySnapshot

__all__ = ["AccountSnapshot", "AgentSnapshot", "by_agent", "finished"]


class _PerAgent(Protocol):
    @property
    def agent(self) -> str: ...


_Row = TypeVar("_Row", bound=_PerAgent)


def by_agent(rows: Iterable[_Row], label: str) -> _Row | None:
    """The row of one agent (by its label) among a snapshot's per-agent rows, or ``None``."""
    return next((row for row in rows if row.agent == label), None)


def _rounded(value: float) -> float:
    return round(value, 12)


_N = TypeVar("_N", int, float)


def finished(completed: _N, failed: _N, omitted: _N) -> _N:
    """Rollouts finished: completed, failed or omitted. "Rollouts per minute", everywhere (``top``, NeMo Gym's
    ``progress/total/rollouts_per_min``, the dashboard), is these per minute."""
    return completed + failed + omitted


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
    kinds: Mapping[Disposition, Mapping[str, int]]
    """Counts by failure-kind label, per disposition (masked, unscored, failed, omitted)."""
    absent_rewarded: int = 0
    """Failed or omitted rollouts whose failure record still carried a reward (NeMo Gym writes some)."""
    absent_positive: float = 0.0
    absent_negative: float = 0.0
    lifecycle: bool = False
    in_flight_by_stage: Mapping[str, int] = field(default_factory=dict)
    """Rollouts in flight now by stage, every stage seen for the agent included (0 when none is there)."""
    oldest_start_by_stage: Mapping[str, float] = field(default_factory=dict)
    """Start of the oldest rollout in flight, by stage (stages with a rollout in flight only)."""
    stalled_by_stage: Mapping[str, int] = field(default_factory=dict)
    """Rollouts in flight now that crossed the stall bound, by stage (every stage seen included)."""
    stalls: Mapping[str, int] = field(default_factory=dict)
    """Rollouts that crossed the stall bound since the start, by the stage they were in then."""
    exemplars: Mapping[tuple[Disposition, str], tuple[str, str]] = field(default_factory=dict)
    """The (trace id, span id) of the latest rollout with a span, by disposition and failure kind."""
    bucket_exemplars: Mapping[int, tuple[str, str, float]] = field(default_factory=dict)
    """The (trace id, span id, duration) of the latest rollout with a span, by duration bucket index."""
    duration_buckets: tuple[int, ...] = ()
    duration_sum: float = 0.0
    duration_count: int = 0
    tokens: tuple[int, ...] | None = None
    """Tokens of the model responses that carried usage: (input, output, cached, reasoning); ``None`` until
    one did."""
    usage_responses: int = 0
    """Model responses that carried usage (what ``tokens`` sums over)."""
    truncated: Mapping[str, int] = field(default_factory=dict)
    """Truncated responses by cause (``generation.TRUNCATION_CAUSES``)."""
    reward_bounds: tuple[float, ...] | None = None
    """Upper bounds of the measured rewards' histogram buckets (+Inf implied); ``None`` without a declared
    reward range."""
    reward_buckets: tuple[int, ...] = ()
    """Measured rewards per bucket of ``reward_bounds``, +Inf last (not cumulative)."""
    evaluated: int = 0
    """Rollouts whose trajectory was checked for health (``_contract.health``)."""
    findings: Mapping[str, int] = field(default_factory=dict)
    """Of those, the rollouts that failed each health check, by check."""
    recovery: RecoverySnapshot | None = None
    """Retries and failure stages (``_store.recovery``); ``None`` until the agent had one."""
    in_flight_by_state: Mapping[tuple[str, str], int] = field(default_factory=dict)
    """Rollouts whose block has not exited, by (stage, state): every stage seen by every state seen, the
    ``terminal`` ones included (``_store.flights.RolloutState``)."""
    phases: Mapping[str, int] = field(default_factory=dict)
    """Rollouts ``offered`` (by ``offer()``, not entered), ``resident`` (entered, block not exited) and
    ``active`` (in flight past stage admission, not terminal or cancelled)."""
    withdrawn: int = 0
    """Offered contexts gone without being entered (a task cancelled while it waited for a slot, say): no
    longer offered."""
    admission_wait: Observed | None = None
    """Admission waits of the rollouts whose block exited; ``None`` before the first."""
    cleanup_durations: Observed | None = None
    """Durations of the cleanups that finished; ``None`` before the first."""
    cleanups_failed: Mapping[str, int] = field(default_factory=dict)
    """Cleanups that failed, by failure-kind label."""
    cleanups_unresolved: int | None = None
    """Cleanups started and not finished successfully; ``None`` before the first started."""

    @property
    def made(self) -> int:
        """Rollouts offered or entered so far: those offered (``offer()``, not entered yet), those resident,
        those whose block exited (each observed its admission wait as it exited) and the offers withdrawn,
        so the number never goes down."""
        exited = 0 if self.admission_wait is None else self.admission_wait.count
        return self.phases.get("offered", 0) + self.phases.get("resident", 0) + exited + self.withdrawn

    @property
    def in_flight(self) -> int:
        """Rollouts in flight now."""
        return sum(self.in_flight_by_stage.values())

    @property
    def oldest_in_flight_start(self) -> float | None:
        """Start of the oldest rollout in flight, or ``None`` when none is."""
        return min(self.oldest_start_by_stage.values(), default=None)

    @property
    def completed(self) -> int:
        """Rollouts that reached the output: measured + masked + unscored."""
        return self.measured + self.masked + self.unscored

    @property
    def rewarded(self) -> int:
        """Rollouts that carry a reward, masked ones and rewarded failure records included."""
        return self.measured + self.masked_rewarded + self.absent_rewarded

    @property
    def reward_positive(self) -> float:
        """Sum of the positive rewards, masked ones included."""
        return self.measured_positive + self.masked_positive + self.absent_positive

    @property
    def reward_negative(self) -> float:
        """Sum of the magnitudes of the negative rewards, masked ones included."""
        return self.measured_negative + self.masked_negative + self.absent_negative

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
        """Mean reward over measured rollouts, only once something was masked, failed or omitted."""
        if self.measured == 0 or not self.troubled:
            return None
        return _rounded(self.measured_sum / self.measured)

    @property
    def measured_sum(self) -> float:
        """Sum of the rewards of measured (unmasked, rewarded) rollouts."""
        return self.measured_positive - self.measured_negative

    @property
    def masked_denominator(self) -> int:
        """What the masked share divides by: masked + measured (= completed - unscored), as NeMo Gym."""
        return self.masked + self.measured

    @property
    def masked_ratio(self) -> float | None:
        """masked / (masked + unmasked rollouts that carry a reward), 0-1, only once something was masked.

        NeMo Gym's denominator: masked + measured, which is completed - unscored. An unscored rollout (no
        reward) is in neither part, nor is a failure record that carried a reward.
        """
        if self.masked == 0:
            return None
        return self.masked / self.masked_denominator

    def count(self, disposition: Disposition) -> int:
        """The number of rollouts that ended in ``disposition``."""
        return int(getattr(self, disposition.value))

    def by_kind(self, disposition: Disposition) -> dict[str, int]:
        """Counts of ``disposition`` per failure kind."""
        return dict(self.kinds.get(disposition, {}))


@dataclass(frozen=True, slots=True)
class AccountSnapshot:
    """Every agent's counts (each agent's taken atomically), the rejections and the label overflows."""

    agents: tuple[AgentSnapshot, ...]
    rejected: Mapping[str, int] = field(default_factory=dict)
    overflow: Mapping[str, int] = field(default_factory=dict)
    taken_at: float = 0.0

    def agent(self, name: str) -> AgentSnapshot | None:
        """The snapshot of one agent (by its label), or ``None``."""
        return by_agent(self.agents, name)

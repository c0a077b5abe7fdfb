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

__all__ = [
    "AccountSnapshot",
    "AgentSnapshot",
    "CleanupSnapshot",
    "LifecycleSnapshot",
    "by_agent",
    "finished",
]


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
class LifecycleSnapshot:
    """What the lifecycle API (``rollout()`` and ``offer()`` blocks) counted of one agent at one moment.

    Rollouts in flight are those whose block has not exited and whose outcome is not counted yet.
    """

    in_flight_by_stage: Mapping[str, int]
    """Rollouts in flight now by stage, every stage seen for the agent included (0 when none is there)."""
    oldest_start_by_stage: Mapping[str, float]
    """Start of the oldest rollout in flight (on the telemetry's clock), by stage; stages with a rollout in
    flight only."""
    stalled_by_stage: Mapping[str, int]
    """Rollouts in flight now that crossed the stall bound, by stage (every stage seen included)."""
    stalls: Mapping[str, int]
    """Rollouts that crossed the stall bound since the start, by the stage they were in then."""
    in_flight_by_state: Mapping[tuple[str, str], int]
    """Rollouts whose block has not exited, by (stage, state): every stage seen by every state seen, the
    ``terminal`` ones included (the states of ``rollout_in_flight``)."""
    phases: Mapping[str, int]
    """Rollouts ``offered`` (by ``offer()``, not entered), ``resident`` (entered, block not exited) and
    ``active`` (in flight past stage admission, not terminal or cancelled)."""
    withdrawn: int
    """Offered contexts gone without being entered (a task cancelled while it waited for a slot, say): no
    longer offered."""
    durations: Observed
    """Wall time of the rollouts whose outcome was counted, from start to outcome."""
    admission_wait: Observed | None
    """Admission waits of the rollouts whose block exited; ``None`` before the first."""

    @property
    def made(self) -> int:
        """Rollouts offered or entered so far: those offered (``offer()``, not entered yet), those resident,
        those whose block exited (each observed its admission wait as it exited) and the offers withdrawn,
        so the number never goes down."""
        exited = 0 if self.admission_wait is None else self.admission_wait.count
        return self.phases.get("offered", 0) + self.phases.get("resident", 0) + exited + self.withdrawn

    @property
    def oldest_start(self) -> float | None:
        """Start of the oldest rollout in flight, or ``None`` when none is."""
        return min(self.oldest_start_by_stage.values(), default=None)


@dataclass(frozen=True, slots=True)
class CleanupSnapshot:
    """One agent's cleanups (``rollout.cleanup()``, ``telemetry.cleanup(agent)``) at one moment."""

    unresolved: int
    """Cleanups started and not finished successfully: in progress, failed, or never exited."""
    failed: Mapping[str, int]
    """Cleanups that failed, by failure-kind label."""
    durations: Observed | None
    """Durations of the cleanups that finished, failed ones included; ``None`` before the first."""


@dataclass(frozen=True, slots=True)
class AgentSnapshot:
    """One agent's counts at one moment, with the values every view derives from them.

    Every rollout recorded ended in one disposition: ``measured``, ``masked`` and ``unscored`` reached the
    output (``completed``), ``failed`` and ``omitted`` did not. The rewards are those of every rollout that
    carried one, masked ones included; ``mean_reward_unmasked`` is over measured rollouts only.
    """

    agent: str
    """The agent's label (its name, cut to 128 characters; ``_other`` beyond the agents' cap)."""
    measured: int
    """Completed rollouts with a reward, not masked: a valid measurement."""
    masked: int
    """Completed rollouts returned with ``mask_sample=True``: their reward is not a valid measurement."""
    unscored: int
    """Completed rollouts that carried no numeric reward."""
    failed: int
    """Rollouts that never reached the output."""
    omitted: int
    """Rollouts left out of the output on purpose."""
    _kinds: Mapping[Disposition, Mapping[str, int]]
    # Counts by failure-kind label, per disposition (masked, unscored, failed, omitted): ``by_kind``.
    _measured_positive: float
    _measured_negative: float
    _masked_rewarded: int
    _masked_positive: float
    _masked_negative: float
    # The rewards' sums kept apart by sign (magnitudes), so each is a counter: measured, masked, and failed or
    # omitted rollouts whose failure record still carried a reward (NeMo Gym writes some).
    _absent_rewarded: int = 0
    _absent_positive: float = 0.0
    _absent_negative: float = 0.0
    tokens: tuple[int, ...] | None = None
    """Tokens of the model responses that carried usage: (input, output, cached, reasoning); ``None`` until
    one did."""
    truncated: Mapping[str, int] = field(default_factory=dict)
    """Completed rollouts whose model response was cut short, by cause (``output_cap``, ``context_window``,
    ``turn_budget``, ``content_filter``, ``other``)."""
    lifecycle: LifecycleSnapshot | None = None
    """What the lifecycle API counted (rollouts in flight, stalls, durations, admission waits); ``None`` until
    the agent's first ``rollout()`` or ``offer()``."""
    cleanups: CleanupSnapshot | None = None
    """The agent's cleanups; ``None`` until its first started."""
    recovery: RecoverySnapshot | None = None
    """Retries and failure stages; ``None`` until the agent had one."""
    _exemplars: Mapping[tuple[Disposition, str], tuple[str, str]] = field(default_factory=dict)
    # The (trace id, span id) of the latest rollout with a span, by disposition and failure kind; and the
    # (trace id, span id, duration) of the latest one by duration bucket index.
    _duration_exemplars: Mapping[int, tuple[str, str, float]] = field(default_factory=dict)
    _usage_responses: int = 0  # model responses that carried usage (what ``tokens`` sums over)
    # The measured rewards' histogram: upper bounds (+Inf implied; None without a declared reward range) and
    # the rewards per bucket, +Inf last (not cumulative).
    _reward_bounds: tuple[float, ...] | None = None
    _reward_buckets: tuple[int, ...] = ()
    # Rollouts whose trajectory was checked for health (_contract.health), and of those the rollouts that
    # failed each check, by check.
    _evaluated: int = 0
    _findings: Mapping[str, int] = field(default_factory=dict)

    @property
    def completed(self) -> int:
        """Rollouts that reached the output: measured + masked + unscored."""
        return self.measured + self.masked + self.unscored

    def count(self, disposition: Disposition) -> int:
        """The number of rollouts that ended in ``disposition``."""
        return int(getattr(self, disposition.value))

    def by_kind(self, disposition: Disposition) -> dict[str, int]:
        """Counts of ``disposition`` per failure-kind label (none for ``measured``)."""
        return dict(self._kinds.get(disposition, {}))

    @property
    def in_flight(self) -> int:
        """Rollouts in flight now (lifecycle API)."""
        return 0 if self.lifecycle is None else sum(self.lifecycle.in_flight_by_stage.values())

    @property
    def rewarded(self) -> int:
        """Rollouts that carry a reward, masked ones and rewarded failure records included."""
        return self.measured + self._masked_rewarded + self._absent_rewarded

    @property
    def reward_sum(self) -> float:
        """Sum of every reward, masked ones included."""
        return self._reward_positive - self._reward_negative

    @property
    def mean_reward(self) -> float | None:
        """Mean reward over every rewarded rollout, masked included; ``None`` before the first."""
        if self.rewarded == 0:
            return None
        return _rounded(self.reward_sum / self.rewarded)

    @property
    def mean_reward_unmasked(self) -> float | None:
        """Mean reward over measured rollouts, only once something was masked, failed or omitted."""
        if self.measured == 0 or not self._troubled:
            return None
        return _rounded(self._measured_sum / self.measured)

    @property
    def masked_ratio(self) -> float | None:
        """masked / (masked + unmasked rollouts that carry a reward), 0-1, only once something was masked.

        NeMo Gym's denominator: masked + measured, which is completed - unscored. An unscored rollout (no
        reward) is in neither part, nor is a failure record that carried a reward.
        """
        if self.masked == 0:
            return None
        return self.masked / self._masked_denominator

    @property
    def _reward_positive(self) -> float:
        # Sum of the positive rewards, masked ones included.
        return self._measured_positive + self._masked_positive + self._absent_positive

    @property
    def _reward_negative(self) -> float:
        # Sum of the magnitudes of the negative rewards, masked ones included.
        return self._measured_negative + self._masked_negative + self._absent_negative

    @property
    def _troubled(self) -> bool:
        # Whether anything was masked, failed or omitted for this agent.
        return self.masked + self.failed + self.omitted > 0

    @property
    def _measured_sum(self) -> float:
        # Sum of the rewards of measured (unmasked, rewarded) rollouts.
        return self._measured_positive - self._measured_negative

    @property
    def _masked_denominator(self) -> int:
        # What the masked share divides by: masked + measured (= completed - unscored), as NeMo Gym.
        return self.masked + self.measured


@dataclass(frozen=True, slots=True)
class AccountSnapshot:
    """Every agent's counts (each agent's taken atomically), the rejections and the label overflows."""

    agents: tuple[AgentSnapshot, ...]
    """Each agent's snapshot, in the order the agents were first seen."""
    rejected: Mapping[str, int] = field(default_factory=dict)
    """Inputs the telemetry refused, by reason (``rollout_telemetry_rejected_total``)."""
    overflow: Mapping[str, int] = field(default_factory=dict)
    """Records counted under ``_other`` because a cardinality cap was reached, by label (``agent``,
    ``failure_kind``, ``stage``)."""
    taken_at: float = 0.0
    """When the snapshot was taken, on the telemetry's clock (monotonic seconds by default)."""

    def agent(self, name: str) -> AgentSnapshot | None:
        """The snapshot of one agent (by its label), or ``None``."""
        return by_agent(self.agents, name)

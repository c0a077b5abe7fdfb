"""One agent's counts in the account: the mutable state counted under the lock, and its frozen copy.

The account counts into an ``AgentState`` under its lock; a snapshot copies each state (``copy``, dictionary
and list copies made at C speed) under the lock, and derives the agent's ``AgentSnapshot`` from the copy after
the lock is released (``AgentCopy.snapshot``), so a scrape never holds up recording for longer than the copy.
"""

from __future__ import annotations

from dataclasses import dataclass

from rollout_telemetry._contract.outcome import ABSENT, Disposition
from rollout_telemetry._store.flights import Flights, Taken
from rollout_telemetry._store.observed import Observations, Observed
from rollout_telemetry._store.recovery import Recovery, RecoverySnapshot
from rollout_telemetry._store.snapshot import AgentSnapshot, CleanupSnapshot, LifecycleSnapshot

__all__ = ["DURATION_BUCKETS", "AgentCopy", "AgentState", "Cell"]

DURATION_BUCKETS: tuple[float, ...] = (
    0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0,
)  # fmt: skip
"""Upper bounds (seconds) of the rollout duration histogram, sub-second to an hour; +Inf is implied."""

_MEASURED = Disposition.MEASURED


class Cell:
    """The counts of one disposition of one agent; only touched under the account lock."""

    __slots__ = ("kinds", "negative", "positive", "unrewarded")

    def __init__(self) -> None:
        # Counts by failure kind. A kind whose label is the kind itself is its own key, so the common
        # record is `kinds[kind] += 1`; a cut or folded kind is keyed by its label (see AgentState.labels).
        self.kinds: dict[str | int | None, int] = {}
        self.positive = 0.0
        self.negative = 0.0  # magnitudes, so both sums only grow
        self.unrewarded = 0


class AgentState:
    """Mutable per-agent counts; only touched under the account lock."""

    __slots__ = (
        "bucket_exemplars",
        "cells",
        "cleanup_durations",
        "cleanups_failed",
        "cleanups_unresolved",
        "duration_buckets",
        "duration_count",
        "duration_sum",
        "evaluated",
        "exemplars",
        "findings",
        "flights",
        "label",
        "labels",
        "lifecycle",
        "recovery",
        "reward_bounds",
        "tokens",
        "truncated",
    )

    def __init__(self, label: str) -> None:
        self.label = label
        self.cells = {disposition: Cell() for disposition in Disposition}
        self.cells[_MEASURED].kinds[None] = 0  # measured rollouts are counted under None, never resolved
        self.labels: dict[str | int | None, str] = {}  # kind key -> its label, resolved once
        self.lifecycle = False  # the lifecycle API was used: its series are published
        self.flights = Flights()
        self.exemplars: dict[tuple[Disposition, str | None], tuple[str, str]] = {}  # latest trace per kind
        self.bucket_exemplars: dict[int, tuple[str, str, float]] = {}  # latest trace per duration bucket
        self.duration_buckets = [0] * (len(DURATION_BUCKETS) + 1)
        self.duration_sum = 0.0
        self.duration_count = 0
        # Input, output, cached and reasoning tokens, then the responses that carried usage; None until one.
        self.tokens: list[int] | None = None
        self.truncated: dict[str, int] = {}  # truncations by cause (generation.TRUNCATION_CAUSES)
        # The measured rewards' histogram, once a reward range is declared (reward_range.reward_bounds): the
        # measured cell then counts by bucket index (0 .. len(bounds), +Inf last) instead of under None.
        self.reward_bounds: tuple[float, ...] | None = None
        self.evaluated = 0  # rollouts whose trajectory was checked (_contract.health)
        self.findings: dict[str, int] = {}  # of those, the rollouts that failed each check
        self.recovery: Recovery | None = None  # retries and failure stages (_store.recovery), once one comes
        self.cleanup_durations = Observations(DURATION_BUCKETS)
        self.cleanups_failed: dict[str, int] = {}  # by failure-kind label
        self.cleanups_unresolved: int | None = None  # None until a cleanup started

    def copy(self, now: float, slow_after: float | None) -> AgentCopy:
        """Copy what a snapshot needs at ``now``; called under the account lock."""
        flights, waits = self.flights.taken(now, slow_after), self.flights.waits.copy()
        return AgentCopy(
            label=self.label,
            kinds=tuple([cell.kinds.copy() for cell in self.cells.values()]),
            positive=tuple([cell.positive for cell in self.cells.values()]),
            negative=tuple([cell.negative for cell in self.cells.values()]),
            unrewarded=tuple([cell.unrewarded for cell in self.cells.values()]),
            labels=self.labels.copy(),
            lifecycle=self.lifecycle,
            flights=flights,
            stalls=self.flights.stalls.copy(),
            exemplars=self.exemplars.copy(),
            bucket_exemplars=self.bucket_exemplars.copy(),
            duration_buckets=tuple(self.duration_buckets),
            duration_sum=self.duration_sum,
            duration_count=self.duration_count,
            tokens=None if self.tokens is None else tuple(self.tokens),
            truncated=self.truncated.copy(),
            reward_bounds=self.reward_bounds,
            evaluated=self.evaluated,
            findings=self.findings.copy(),
            recovery=None if self.recovery is None else self.recovery.copy(),
            offered=len(self.flights.offers),  # after taken(): the withdrawn offers taken back (reclaim)
            withdrawn=self.flights.withdrawals,
            admission_wait=waits if waits.count else None,
            cleanup_durations=self.cleanup_durations.copy() if self.cleanup_durations.count else None,
            cleanups_failed=self.cleanups_failed.copy(),
            cleanups_unresolved=self.cleanups_unresolved,
        )


@dataclass(frozen=True, slots=True)
class AgentCopy:
    """What a snapshot copies of one ``AgentState`` under the lock (the fields as there)."""

    label: str
    kinds: tuple[dict[str | int | None, int], ...]
    """Each cell's counts by kind key, in ``Disposition`` order."""
    positive: tuple[float, ...]
    """Each cell's positive sum, in ``Disposition`` order; so ``negative`` and ``unrewarded``: tuples of
    numbers only, which the garbage collector leaves alone (a dict beside them would keep them tracked)."""
    negative: tuple[float, ...]
    unrewarded: tuple[int, ...]
    labels: dict[str | int | None, str]
    lifecycle: bool
    flights: Taken
    """The rollouts whose block has not exited, copied (``Flights.taken``) and counted after the lock."""
    stalls: dict[str, int]
    exemplars: dict[tuple[Disposition, str | None], tuple[str, str]]
    bucket_exemplars: dict[int, tuple[str, str, float]]
    duration_buckets: tuple[int, ...]
    duration_sum: float
    duration_count: int
    tokens: tuple[int, ...] | None
    truncated: dict[str, int]
    reward_bounds: tuple[float, ...] | None
    evaluated: int
    findings: dict[str, int]
    recovery: RecoverySnapshot | None
    offered: int
    withdrawn: int
    admission_wait: Observed | None
    cleanup_durations: Observed | None
    cleanups_failed: dict[str, int]
    cleanups_unresolved: int | None

    def snapshot(self) -> AgentSnapshot:
        """Derive the agent's snapshot: totals, sums and counts by label; outside the lock."""
        labels = self.labels
        flights = self.flights.counts()
        kinds: dict[Disposition, dict[str, int]] = {}
        totals: dict[Disposition, int] = {}
        unrewarded: dict[Disposition, int] = {}
        positive: dict[Disposition, float] = {}
        negative: dict[Disposition, float] = {}
        reward_buckets: tuple[int, ...] = ()
        for disposition, counts, pos, neg, unrew in zip(
            Disposition, self.kinds, self.positive, self.negative, self.unrewarded, strict=True
        ):
            totals[disposition] = sum(counts.values())
            if disposition is _MEASURED and self.reward_bounds is not None:
                reward_buckets = tuple(counts.get(index, 0) for index in range(len(self.reward_bounds) + 1))
            unrewarded[disposition] = unrew
            positive[disposition] = pos
            negative[disposition] = neg
            if disposition is not _MEASURED:
                # Keyed by label: a dict of strings and ints, which the garbage collector does not track.
                by_label = kinds[disposition] = {}
                for key, count in counts.items():
                    kind = labels[key]
                    by_label[kind] = by_label.get(kind, 0) + count
        lifecycle = None
        if self.lifecycle:
            lifecycle = LifecycleSnapshot(
                in_flight_by_stage=flights.in_flight,
                oldest_start_by_stage=flights.oldest,
                stalled_by_stage=flights.stalled,
                stalls=self.stalls,
                in_flight_by_state=flights.states,
                phases={"offered": self.offered, "resident": flights.resident, "active": flights.active},
                withdrawn=self.withdrawn,
                durations=Observed(
                    DURATION_BUCKETS, self.duration_buckets, self.duration_sum, self.duration_count
                ),
                admission_wait=self.admission_wait,
            )
        cleanups = None
        if self.cleanups_unresolved is not None:
            cleanups = CleanupSnapshot(self.cleanups_unresolved, self.cleanups_failed, self.cleanup_durations)
        return AgentSnapshot(
            agent=self.label,
            measured=totals[_MEASURED],
            masked=totals[Disposition.MASKED],
            unscored=totals[Disposition.UNSCORED],
            failed=totals[Disposition.FAILED],
            omitted=totals[Disposition.OMITTED],
            _kinds=kinds,
            _measured_positive=positive[_MEASURED],
            _measured_negative=negative[_MEASURED],
            _masked_rewarded=totals[Disposition.MASKED] - unrewarded[Disposition.MASKED],
            _masked_positive=positive[Disposition.MASKED],
            _masked_negative=negative[Disposition.MASKED],
            _absent_rewarded=sum(totals[d] - unrewarded[d] for d in ABSENT),
            _absent_positive=sum(positive[d] for d in ABSENT),
            _absent_negative=sum(negative[d] for d in ABSENT),
            tokens=None if self.tokens is None else self.tokens[:4],
            truncated=self.truncated,
            lifecycle=lifecycle,
            cleanups=cleanups,
            recovery=self.recovery,
            _exemplars={(d, labels[key]): ids for (d, key), ids in self.exemplars.items() if key in labels},
            _duration_exemplars=self.bucket_exemplars,
            _usage_responses=0 if self.tokens is None else self.tokens[4],
            _reward_bounds=self.reward_bounds,
            _reward_buckets=reward_buckets,
            _evaluated=self.evaluated,
            _findings=self.findings,
        )
